"""MessageStore: the facade the broker uses (Java ``DefaultMessageStore``), and the store's life cycle.

Life cycle::

    store = MessageStore(config, dispatchers=[...], flush_policy=...)
    store.load()                      # synchronous: maps the files and recovers (start-up, before serving)
    async with trio.open_nursery() as nursery:
        await nursery.start(store.run)   # flush, consume-queue flush + checkpoint, retention
        ...
        result = store.put_message(record)           # synchronous append + dispatch, no await
        ok = await store.wait_flushed(result.append.end_offset)   # SYNC_FLUSH callers
        nursery.cancel_scope.cancel()
    store.close()                     # final flush, checkpoint, abort file removed

The store's jobs live in their own modules and are mixed into this one class, so callers keep one object:
writes (:mod:`~pyrmq.store.writes`: append + dispatch, flush waits), reads (:mod:`~pyrmq.store.reads`: with the
read bound and its ``visible`` event), HA raw
append (:mod:`~pyrmq.store.replica`) and the dispatcher list (:mod:`~pyrmq.store.dispatch`).
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import cast

import trio

from .checkpoint import AbortFile, StoreCheckpoint
from .commitlog import CommitLog
from .config import FlushDiskType, StoreConfig
from .consume_queue import ConsumeQueueDispatcher, ConsumeQueueStore
from .dispatch import Dispatcher, Dispatchers
from .errors import StoreError, StoreLockedError
from .flush import FlushPolicy, default_flush_policy
from .index_file import IndexDispatcher, IndexService
from .reads import MAX_QUERY_NUM, StoreReads
from .recovery import RecoveryReport, recover_commit_log
from .replica import StoreReplication
from .reput import DeriveTagsCode, TagsCodeResolver, dispatch_range
from .retention import DiskUsage, RetentionService
from .writes import StoreWrites

__all__ = ["MAX_QUERY_NUM", "WARM_AHEAD", "MessageStore", "now_ms"]

log = logging.getLogger(__name__)

#: how far ahead of the commit-log writer the warm-up service pre-faults
WARM_AHEAD = 64 * 1024 * 1024
#: flushed bytes kept in the broker's resident set behind the commit-log writer (the tail consumers read); older
#: pages leave it after each flush (they stay in the page cache): the resident set stays flat as the store grows
COMMIT_LOG_RESIDENT_TAIL = 16 * 1024 * 1024
#: the same for each consume queue (12,800 units) and for the entries of the index file being written
LOGICS_RESIDENT_TAIL = 256 * 1024


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class _CommitLogFlushTarget:
    """What the flush policy flushes: the commit log; the checkpoint learns the newest durable store time."""

    def __init__(self, store: MessageStore) -> None:
        self.commit_log = store.commit_log
        self.checkpoint = cast(StoreCheckpoint, store.checkpoint)  # made by load() before this

    @property
    def flushed_offset(self) -> int:
        return self.commit_log.queue.flushed_offset

    @property
    def max_offset(self) -> int:
        return self.commit_log.max_offset

    def flush(self) -> int:
        cur = self.commit_log._current
        ts = cur.store_timestamp if cur is not None else 0
        queue = self.commit_log.queue
        flushed = queue.flush()
        if ts:
            self.checkpoint.physic_msg_timestamp = ts
        # durable pages behind the writer's tail leave the resident set (they stay in the page cache)
        queue.release_flushed(COMMIT_LOG_RESIDENT_TAIL)
        return flushed


class MessageStore(StoreWrites, StoreReads, StoreReplication):
    def __init__(
        self,
        config: StoreConfig,
        *,
        dispatchers: Sequence[Dispatcher] = (),
        flush_policy: FlushPolicy | None = None,
        clock: Callable[[], int] | None = None,
        disk_usage: DiskUsage | None = None,
        tags_code_resolver: TagsCodeResolver | Mapping[str, DeriveTagsCode] | None = None,
    ) -> None:
        self.config = config
        self.clock = clock or now_ms
        self.commit_log = CommitLog(config, self.clock)
        self.consume_queues = ConsumeQueueStore(config)
        self.index = IndexService(config)
        self.checkpoint: StoreCheckpoint | None = None
        self.abort_file = AbortFile(config.abort_path)
        self.flush_policy: FlushPolicy = flush_policy or default_flush_policy(config)
        self.retention = RetentionService(self, disk_usage=disk_usage)
        self.tags_code_resolver: TagsCodeResolver | None = None
        self._derive_tags: dict[str, DeriveTagsCode] = {}
        self.recovery_report: RecoveryReport | None = None
        self._sync_flush = config.flush_disk_type is FlushDiskType.SYNC_FLUSH
        self._sync_timeout = config.sync_flush_timeout / 1000
        self._tags_codes: dict[str, int] = {}
        self._unavailable: str | None = "store not loaded"
        self._disk_full: str | None = None
        self._read_only: str | None = None
        self._refusal: str | None = self._unavailable
        self._lock_fd = -1
        self._flush_target: _CommitLogFlushTarget | None = None
        self._loaded = False
        self._closed = False
        self._replica_dispatched: int | None = None
        #: what clients may read (set_read_bound, advance_read_bound: automatic failover); None = everything
        self._read_bound: int | None = None
        # the one ordered dispatcher list: the store's own consume-queue and index dispatchers from the start,
        # a feature's (e.g. the broker's long-polling wake-up, via the kernel hook) added with add_dispatcher
        self.queue_dispatcher = ConsumeQueueDispatcher(self.consume_queues)
        self.index_dispatcher = IndexDispatcher(self.index)
        builtin: list[Dispatcher] = [self.index_dispatcher] if config.message_index_enable else []
        self.dispatchers = Dispatchers(self.queue_dispatcher, *builtin)
        for d in dispatchers:
            self.add_dispatcher(d)
        if tags_code_resolver is not None:
            self.set_tags_code_resolver(tags_code_resolver)

    def set_tags_code_resolver(self, resolver: TagsCodeResolver | Mapping[str, DeriveTagsCode] | None) -> None:
        """Before :meth:`load`: the topics whose consume-queue tags code is derived from the record (a parked
        delayed message's delivery time), applied at the append, at recovery, to replicated bytes and after a
        truncation alike (:class:`~pyrmq.store.reput.TagsCodeResolver`; a mapping ``topic -> derive`` is wrapped)."""
        if self._loaded:
            raise StoreError("tags-code resolver set after the store was loaded: recovery would have missed it")
        if resolver is not None and not isinstance(resolver, TagsCodeResolver):
            resolver = TagsCodeResolver(resolver)
        self.tags_code_resolver = resolver
        self._derive_tags = resolver.by_topic if resolver is not None else {}

    def add_dispatcher(self, dispatcher: Dispatcher) -> None:
        """Add a feature's dispatcher before :meth:`load`: it sees every record appended (and every record recovery
        re-dispatches) from then on, in ascending ``order`` after the store's own (consume queue 0, index 10)."""
        if self._loaded:
            raise StoreError(f"dispatcher {dispatcher.name!r} added after the store was loaded: it would miss records")
        self.dispatchers.add(dispatcher)

    # -- life cycle --------------------------------------------------------------------------------------------
    def load(self) -> RecoveryReport:
        """Map the store directory and recover it (synchronous; call once at start-up, before serving)."""
        if self._loaded:
            raise StoreError("store already loaded")
        cfg = self.config
        os.makedirs(cfg.store_path_root_dir, exist_ok=True)
        os.makedirs(cfg.commit_log_dir, exist_ok=True)
        self._lock()
        abnormal = self.abort_file.exists()
        self.checkpoint = StoreCheckpoint(cfg.checkpoint_path)
        self.commit_log.load()
        self.consume_queues.load()
        self.index.load()
        report = recover_commit_log(
            self.commit_log, abnormal=abnormal, checkpoint=self.checkpoint, check_crc=cfg.check_crc_on_recover
        )
        max_phy = self.commit_log.max_offset
        min_phy = self.commit_log.min_offset
        self.consume_queues.recover()
        for cq in self.consume_queues.table.values():
            dropped = cq.truncate_dirty(max_phy)
            if dropped:
                log.warning("consume queue %s/%d: dropped %d units beyond the commit log", cq.topic, cq.queue_id, dropped)
            cq.correct_min_offset(min_phy)
        self.index.truncate(max_phy)
        self.index_dispatcher.sync_with_service()
        if cfg.verify_dispatch_on_load:
            start = min_phy
        else:
            start = min(report.scan_start, max(self.consume_queues.max_physic_offset(), min_phy))
            if self.index_dispatcher in self.dispatchers:
                start = min(start, max(self.index.end_phy_offset, min_phy))
        n, _walked, _end = dispatch_range(
            self.commit_log, self.dispatchers, start, resolver=self.tags_code_resolver, recovering=True
        )
        self.index_dispatcher.drain()
        # the next queue offset of every queue is what its consume queue holds (re-dispatched records included)
        table = self.commit_log.topic_queue_table
        for key, cq in self.consume_queues.table.items():
            table[key] = cq.max_offset
        if n:
            log.info("recovery re-dispatched %d records from offset %d", n, start)
        self.recovery_report = report
        self._flush_target = _CommitLogFlushTarget(self)
        self.abort_file.create()
        self._loaded = True
        self._set_unavailable(None)
        self.retention.check_disk()
        log.info(
            "store %s loaded (%s recovery): commit log [%d, %d), %d consume queues, %d index files",
            cfg.store_path_root_dir, "crash" if abnormal else "normal", min_phy, self.commit_log.max_offset,
            len(self.consume_queues.table), len(self.index.files),
        )
        return report

    def _lock(self) -> None:
        fd = os.open(self.config.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise StoreLockedError(self.config.lock_path) from None
        self._lock_fd = fd

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the background services (commit-log flush, consume-queue/index flush + checkpoint, retention)
        until cancelled; ``task_status.started()`` once they all run. Call :meth:`close` (or :meth:`aclose`)
        afterwards for the final flush."""
        if not self._loaded:
            self.load()
        async with trio.open_nursery() as nursery:
            await nursery.start(self.flush_policy.run, self._flush_target)
            nursery.start_soon(self._flush_logics_loop)
            if self.config.warm_mapped_file_enable:
                nursery.start_soon(self._warm_loop)
            await nursery.start(self.retention.run)
            task_status.started()

    async def _warm_loop(self) -> None:
        """Keep the commit log pre-faulted up to ``WARM_AHEAD`` bytes ahead of the writer and the next segment created
        and started ahead of need (worker threads; small steps so appends never wait on the warm-up).

        Hysteresis: the runway is refilled only once less than half of it is left, so a worker thread is handed a job
        every ``WARM_AHEAD / 2`` bytes written rather than every poll; an idle store polls 10 times a second."""
        queue = self.commit_log.queue
        ahead = min(WARM_AHEAD, self.config.mapped_file_size_commit_log)
        low_water = ahead // 2
        page = self.config.os_page_size
        while True:
            worked = False
            cur = self.commit_log._current
            if cur is not None and not cur.closed and cur.warmed < min(cur.file_size, cur.wrote_position + low_water):
                await trio.to_thread.run_sync(cur.warm, cur.wrote_position + ahead, page)
                worked = True
            cur = self.commit_log._current
            if cur is not None and cur.wrote_position + ahead >= cur.file_size:
                spare = queue.spare or queue.prepare_next()
                if spare is not None and spare.warmed < ahead:
                    await trio.to_thread.run_sync(spare.warm, ahead, page)
                    worked = True
            await trio.sleep(0.01 if worked else 0.1)

    async def _flush_logics_loop(self) -> None:
        interval = self.config.flush_interval_consume_queue / 1000
        while True:
            await trio.sleep(interval)
            self.index_dispatcher.drain()  # on the loop thread: index writes never race with appends
            await trio.to_thread.run_sync(self._flush_logics, self._dispatched_timestamp())

    def _dispatched_timestamp(self) -> int:
        cur = self.commit_log._current
        return cur.store_timestamp if cur is not None else 0

    def _flush_logics(self, ts: int) -> None:
        """Blocking: flush consume queues and index, then the checkpoint (Java ``FlushConsumeQueueService``)."""
        self.consume_queues.flush(LOGICS_RESIDENT_TAIL)
        self.index.flush(LOGICS_RESIDENT_TAIL)
        cp = self.checkpoint
        if cp is not None:
            if ts:
                cp.logics_msg_timestamp = ts
                cp.index_msg_timestamp = ts
            cp.flush()

    def flush_all(self) -> None:
        """Blocking: make everything durable now (commit log, consume queues, index, checkpoint). Call it from
        the thread that appends (or with appends stopped)."""
        self.index_dispatcher.drain()
        ts = self._dispatched_timestamp()
        if self._flush_target is not None:
            self._flush_target.flush()
        self._flush_logics(ts)

    def close(self) -> None:
        """Final flush, checkpoint, unmap, remove the abort file (clean shutdown) and release the lock."""
        if self._closed:
            return
        self._closed = True
        self._set_unavailable("store closed")
        if self._loaded:
            self.flush_all()
            self.commit_log.close()
            self.consume_queues.close()
            self.index.close()
            if self.checkpoint is not None:
                self.checkpoint.close()
            self.abort_file.remove()
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    shutdown = close

    async def aclose(self) -> None:
        """:meth:`close` with the final flush in a worker thread."""
        if self._loaded and not self._closed:
            self._set_unavailable("store closing")
            self.index_dispatcher.drain()
            await trio.to_thread.run_sync(self.flush_all)
        self.close()

    def __enter__(self) -> MessageStore:
        if not self._loaded:
            self.load()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- topics ------------------------------------------------------------------------------------------------
    def delete_topics(self, topics: set[str]) -> None:
        """Drop the consume queues of ``topics`` (the commit-log records stay until retention)."""
        for topic, queue_id in list(self.consume_queues.table):
            if topic in topics:
                self.consume_queues.destroy_queue(topic, queue_id)
                self.commit_log.topic_queue_table.pop((topic, queue_id), None)

