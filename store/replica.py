"""The store's side of master-slave replication (HA): the master hands out raw commit-log bytes, the slave appends
them at the same offsets and re-dispatches the records they complete.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from .commitlog import CommitLog
from .consume_queue import ConsumeQueueStore
from .dispatch import Dispatchers
from .index_file import IndexDispatcher, IndexService
from .reput import TagsCodeResolver, dispatch_range

log = logging.getLogger("pyrmq.store")


class StoreReplication:
    """Mixed into :class:`~pyrmq.store.message_store.MessageStore`, which sets these attributes."""

    commit_log: CommitLog
    consume_queues: ConsumeQueueStore
    dispatchers: Dispatchers
    index_dispatcher: IndexDispatcher
    index: IndexService
    tags_code_resolver: TagsCodeResolver | None
    _unavailable: str | None
    _read_only: str | None
    #: where the slave's dispatch stands: the end of the last complete replicated record (None before any)
    _replica_dispatched: int | None
    #: the read bound (:mod:`pyrmq.store.reads`): a truncation lowers it to the new end of the log
    _read_bound: int | None

    if TYPE_CHECKING:
        def _refresh_refusal(self) -> None: ...  # StoreWrites has it (MessageStore's first base)
        def set_read_bound(self, offset: int | None) -> None: ...  # StoreReads has it

    def get_commit_log_data(self, offset: int, max_bytes: int = 32 * 1024) -> memoryview | None:
        """Raw commit-log bytes from ``offset`` to the end of its segment's data (for HA transfer)."""
        mf = self.commit_log.queue.find(offset)
        if mf is None:
            return None
        pos = offset - mf.file_from_offset
        end = min(mf.wrote_position, pos + max_bytes)
        if pos >= end:
            return None
        return mf.view[pos:end]

    def append_raw(self, phy_offset: int, data: bytes | memoryview) -> bool:
        """Append raw commit-log bytes replicated from a master at ``phy_offset`` (must be the current end) and
        dispatch the records they complete (a record split across transfers is dispatched once its last bytes
        arrive). Returns False when the offset does not match. An empty store accepts the first byte of any
        commit-log file (a 4.x master starts an empty slave at its last file) and starts its log there."""
        cl = self.commit_log
        if self._unavailable is not None:
            return False
        if phy_offset != cl.max_offset and (cl.queue.files or phy_offset % cl.queue.file_size):
            return False
        start = phy_offset if self._replica_dispatched is None else self._replica_dispatched
        view = memoryview(data)
        while view:
            mf = cl.queue.last_file_for_append(cl.max_offset if cl.queue.files else phy_offset)
            cl._current = mf
            n = min(len(view), mf.remaining)
            mf.append(view[:n])
            view = view[n:]
        _count, walked, self._replica_dispatched = dispatch_range(
            cl, self.dispatchers, start, resolver=self.tags_code_resolver, partial_tail=True, replicated=True
        )
        self.index_dispatcher.drain()
        # the queue offsets the slave would assign next, should it become master: what its consume queues hold
        table = cl.topic_queue_table
        for key in walked:
            cq = self.consume_queues.table.get(key)
            if cq is not None:
                table[key] = cq.max_offset
        return True


    def set_read_only(self, reason: str | None) -> None:
        """Refuse new messages (``put_message*`` answer SERVICE_NOT_AVAILABLE with ``reason``) while replicated
        bytes are still appended; None accepts them again. A failover replica is read-only unless it is master."""
        self._read_only = reason
        self._refresh_refusal()

    def cut_partial_tail(self) -> int:
        """A replica that stops following: drop the first bytes of a record its master never finished sending (the
        commit log ends at a whole record again) and forget where replicated dispatch stood. Returns the bytes
        dropped."""
        whole = self._replica_dispatched
        dropped = 0
        if whole is not None and self.commit_log.max_offset > whole:
            dropped = self.truncate_replica(whole)
        self._replica_dispatched = None
        return dropped

    def truncate_replica(self, offset: int) -> int:
        """Drop the commit log from ``offset`` (a record boundary) on, with the consume-queue units and index entries
        pointing there, and make it durable (fdatasync): a replica of a failover group whose tail an election after
        it decided against. Blocking, but short (one fdatasync): the caller runs it where no other store write or read
happens meanwhile (pyrmq: on the event loop). Returns the bytes dropped."""
        cl = self.commit_log
        end = cl.max_offset
        if offset >= end:
            return 0
        cl.queue.truncate(offset)
        for mf in cl.queue.files:
            if mf.file_from_offset + mf.file_size <= offset:
                mf.set_positions(mf.file_size)
        cl._current = cl.queue.last
        last = cl.queue.last
        if last is not None:
            last.mm.flush()
            os.fdatasync(last.fd)
        table = cl.topic_queue_table
        for key, cq in self.consume_queues.table.items():
            dropped = cq.truncate_dirty(offset)
            if dropped:
                log.warning("consume queue %s/%d: dropped %d units of the truncated tail", cq.topic, cq.queue_id, dropped)
            table[key] = cq.max_offset
        self.index.truncate(offset)
        self.index_dispatcher.sync_with_service()
        # an index file holding entries past the cut is dropped whole: index again what it held before the cut
        start = max(min(self.index.end_phy_offset, offset), cl.min_offset)
        dispatch_range(cl, self.dispatchers, start, resolver=self.tags_code_resolver, recovering=True)
        self.index_dispatcher.drain()
        self._replica_dispatched = offset
        if self._read_bound is not None and self._read_bound > offset:
            # what an unclean election cut away was never confirmed (a clean one cuts beyond the bound)
            self.set_read_bound(offset)
        for call in self.dispatchers.truncated_calls:  # (a feature's progress may point into the cut tail)
            try:
                call(offset)
            except Exception:
                log.exception("dispatcher %r failed on the truncation at %d", call, offset)
        log.warning("commit log truncated from %d to %d (%d bytes) for the elected master's history", end, offset, end - offset)
        return end - offset
