"""The store's side of master-slave replication (HA): the master hands out raw commit-log bytes, the slave appends
them at the same offsets and re-dispatches the records they complete.
"""

from __future__ import annotations

from .commitlog import CommitLog
from .consume_queue import ConsumeQueueStore
from .dispatch import Dispatchers
from .index_file import IndexDispatcher
from .reput import TagsCodeResolver, dispatch_range


class StoreReplication:
    """Mixed into :class:`~pyrmq.store.message_store.MessageStore`, which sets these attributes."""

    commit_log: CommitLog
    consume_queues: ConsumeQueueStore
    dispatchers: Dispatchers
    index_dispatcher: IndexDispatcher
    tags_code_resolver: TagsCodeResolver | None
    _unavailable: str | None
    #: where the slave's dispatch stands: the end of the last complete replicated record (None before any)
    _replica_dispatched: int | None

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
            cl, self.dispatchers, start, resolver=self.tags_code_resolver, partial_tail=True
        )
        self.index_dispatcher.drain()
        # the queue offsets the slave would assign next, should it become master: what its consume queues hold
        table = cl.topic_queue_table
        for key in walked:
            cq = self.consume_queues.table.get(key)
            if cq is not None:
                table[key] = cq.max_offset
        return True

