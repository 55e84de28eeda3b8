"""MessageStore: the facade the broker uses (Java ``DefaultMessageStore``).

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

``put_message_async`` appends and, under SYNC_FLUSH (and unless the message says ``WAIT=false``), waits for the
group commit, mapping a timeout to FLUSH_DISK_TIMEOUT.
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
from collections.abc import Callable, Sequence

import trio

from .checkpoint import AbortFile, StoreCheckpoint
from .commitlog import AppendRejected, CommitLog
from .config import FlushDiskType, StoreConfig
from .consume_queue import BLANK_SIZE, ConsumeQueueDispatcher, ConsumeQueueStore
from .dispatch import Dispatcher, DispatchRequest, MessageFilter
from .errors import StoreError, StoreLockedError
from .flush import FlushPolicy, default_flush_policy
from .format import (
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_TYPE_MASK,
    MessageRecord,
    StoredMessage,
    decode_message,
    java_string_hash,
)
from .index_file import IndexDispatcher, IndexService
from .recovery import RecoveryReport, recover_commit_log
from .reput import TagsCodeResolver, dispatch_range
from .results import (
    AppendMessageResult,
    GetMessageResult,
    GetMessageStatus,
    PutMessageResult,
    PutMessageStatus,
    QueryMessageResult,
)
from .retention import DiskUsage, RetentionService

log = logging.getLogger(__name__)

#: Java caps QUERY_MESSAGE at ``maxMsgsNumBatch`` = 64
MAX_QUERY_NUM = 64
#: how far ahead of the commit-log writer the warm-up service pre-faults
WARM_AHEAD = 64 * 1024 * 1024


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class _CallableFilter:
    """Adapts ``f(tags_code, record) -> bool`` to the two-step :class:`MessageFilter`."""

    def __init__(self, f: Callable[[int, memoryview], bool]) -> None:
        self.f = f
        self._tags = 0

    def is_matched_by_consume_queue(self, tags_code: int) -> bool:
        self._tags = tags_code
        return True

    def is_matched_by_commit_log(self, record: memoryview) -> bool:
        return bool(self.f(self._tags, record))


class _CommitLogFlushTarget:
    """What the flush policy flushes: the commit log; the checkpoint learns the newest durable store time."""

    def __init__(self, store: MessageStore) -> None:
        self.commit_log = store.commit_log
        self.checkpoint = store.checkpoint

    @property
    def flushed_offset(self) -> int:
        return self.commit_log.queue.flushed_offset

    @property
    def max_offset(self) -> int:
        return self.commit_log.max_offset

    def flush(self) -> int:
        cur = self.commit_log._current
        ts = cur.store_timestamp if cur is not None else 0
        flushed = self.commit_log.queue.flush()
        if ts:
            self.checkpoint.physic_msg_timestamp = ts
        # segments that are complete and durable leave the resident set (they stay in the page cache)
        for mf in self.commit_log.queue.files[:-1]:
            if not mf.released and mf.flushed_position >= mf.file_size:
                mf.release_pages()
        return flushed


class MessageStore:
    def __init__(
        self,
        config: StoreConfig,
        *,
        dispatchers: Sequence[Dispatcher] = (),
        flush_policy: FlushPolicy | None = None,
        clock: Callable[[], int] | None = None,
        disk_usage: DiskUsage | None = None,
        tags_code_resolver: TagsCodeResolver | None = None,
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
        self.tags_code_resolver = tags_code_resolver
        self.recovery_report: RecoveryReport | None = None
        self._sync_flush = config.flush_disk_type is FlushDiskType.SYNC_FLUSH
        self._sync_timeout = config.sync_flush_timeout / 1000
        self._tags_codes: dict[str, int] = {}
        self._unavailable: str | None = "store not loaded"
        self._disk_full: str | None = None
        self._lock_fd = -1
        self._flush_target: _CommitLogFlushTarget | None = None
        self._loaded = False
        self._closed = False
        # the built-in dispatchers; an instance passed in (e.g. from the kernel hook) replaces the built-in one
        self.queue_dispatcher = ConsumeQueueDispatcher(self.consume_queues)
        self.index_dispatcher = IndexDispatcher(self.index)
        self.dispatchers: list[Dispatcher] = []
        builtins: list[Dispatcher] = [self.queue_dispatcher]
        if config.message_index_enable:
            builtins.append(self.index_dispatcher)
        extra = []
        for d in dispatchers:
            if isinstance(d, ConsumeQueueDispatcher):
                d.queues, d._table = self.consume_queues, self.consume_queues.table
                builtins[0] = self.queue_dispatcher = d
            elif isinstance(d, IndexDispatcher):
                d.service = self.index
                self.index_dispatcher = d
                builtins = [b for b in builtins if not isinstance(b, IndexDispatcher)] + [d]
            else:
                extra.append(d)
        for d in builtins + extra:
            self.add_dispatcher(d)

    # -- dispatchers -------------------------------------------------------------------------------------------
    def add_dispatcher(self, dispatcher: Dispatcher) -> None:
        """Register a dispatcher; it sees every record appended from now on, in ascending ``order``."""
        self.dispatchers.append(dispatcher)
        self.dispatchers.sort(key=lambda d: d.order)
        self._fast_dispatch = all(
            d is self.queue_dispatcher or d is self.index_dispatcher for d in self.dispatchers
        ) and type(self.queue_dispatcher) is ConsumeQueueDispatcher
        self._index_on = any(d is self.index_dispatcher for d in self.dispatchers)

    def remove_dispatcher(self, dispatcher: Dispatcher) -> None:
        self.dispatchers.remove(dispatcher)
        self._fast_dispatch = all(
            d is self.queue_dispatcher or d is self.index_dispatcher for d in self.dispatchers
        )
        self._index_on = any(d is self.index_dispatcher for d in self.dispatchers)

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
        table = self.commit_log.topic_queue_table
        for key, cq in self.consume_queues.table.items():
            table[key] = cq.max_offset
        if cfg.verify_dispatch_on_load:
            start = min_phy
        else:
            start = min(report.scan_start, max(self.consume_queues.max_physic_offset(), min_phy))
            if self._index_on:
                start = min(start, max(self.index.end_phy_offset, min_phy))
        n = dispatch_range(
            self.commit_log, self.dispatchers, start, only_missing=True, resolver=self.tags_code_resolver,
            recovering=True, queue_dispatcher=self.queue_dispatcher,
        )
        self.index_dispatcher.drain()
        if n:
            log.info("recovery re-dispatched %d records from offset %d", n, start)
        self.recovery_report = report
        self._flush_target = _CommitLogFlushTarget(self)
        self.abort_file.create()
        self._loaded = True
        self._unavailable = None
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

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
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
        self.consume_queues.flush()
        self.index.flush()
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
        self._unavailable = "store closed"
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
            self._unavailable = "store closing"
            self.index_dispatcher.drain()
            await trio.to_thread.run_sync(self.flush_all)
        self.close()

    def __enter__(self) -> MessageStore:
        if not self._loaded:
            self.load()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- writes ------------------------------------------------------------------------------------------------
    def _set_disk_full(self, reason: str | None) -> None:
        if reason != self._disk_full:
            if reason:
                log.error("refusing writes: %s", reason)
            elif self._disk_full:
                log.info("disk usage back under the limit: accepting writes again")
        self._disk_full = reason

    @property
    def is_writable(self) -> bool:
        return self._unavailable is None and self._disk_full is None

    def _refused(self) -> PutMessageResult:
        return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, None, self._unavailable or self._disk_full or "")

    def _tags_code(self, tags: str) -> int:
        code = self._tags_codes.get(tags)
        if code is None:
            if len(self._tags_codes) > 65536:
                self._tags_codes.clear()
            code = self._tags_codes[tags] = java_string_hash(tags)
        return code

    def put_message(self, record: MessageRecord) -> PutMessageResult:
        """Append one message and dispatch it (synchronous, no await). Under SYNC_FLUSH follow with
        :meth:`wait_flushed` (or use :meth:`put_message_async`)."""
        if self._unavailable is not None or self._disk_full is not None:
            return self._refused()
        try:
            res, sys_flag, props = self.commit_log.append(record)
        except AppendRejected as exc:
            return exc.result()
        except OSError as exc:
            log.exception("append failed")
            return PutMessageResult(PutMessageStatus.UNKNOWN_ERROR, None, f"append failed: {exc}")
        properties = record.properties
        tags_code = record.tags_code
        if tags_code is None:
            tags = properties.get(PROPERTY_TAGS)
            tags_code = self._tags_codes.get(tags) or self._tags_code(tags) if tags else 0
        if self._fast_dispatch:
            tran = sys_flag & TRANSACTION_TYPE_MASK
            if tran == 0 or tran == TRANSACTION_COMMIT_TYPE:
                self.queue_dispatcher.put(
                    record.topic, record.queue_id, res.wrote_offset, res.wrote_bytes, tags_code, res.queue_offset
                )
            if self._index_on:
                keys = properties.get(PROPERTY_KEYS)
                uniq = properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
                if keys or uniq:
                    self.index_dispatcher.index(record.topic, keys, uniq, res.wrote_offset, res.store_timestamp, sys_flag)
        else:
            self._dispatch(
                DispatchRequest(
                    record.topic, record.queue_id, res.wrote_offset, res.wrote_bytes, tags_code, res.store_timestamp,
                    res.queue_offset, properties.get(PROPERTY_KEYS),
                    properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX), sys_flag,
                    record.prepared_transaction_offset, properties,
                )
            )
        return PutMessageResult(PutMessageStatus.PUT_OK, res)

    def _dispatch(self, request: DispatchRequest) -> None:
        for d in self.dispatchers:
            try:
                d.dispatch(request)
            except Exception:
                if d is self.queue_dispatcher:
                    raise
                log.exception("dispatcher %s failed on the record at %d", d.name, request.commit_log_offset)

    def put_messages(self, records: Sequence[MessageRecord]) -> PutMessageResult:
        """Append a batch of one topic-queue: consecutive queue offsets, one segment, one call (spec 5.8)."""
        if self._unavailable is not None or self._disk_full is not None:
            return self._refused()
        if not records:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, None, "empty batch")
        try:
            res, written, sys_flag = self.commit_log.append_batch(records)
        except AppendRejected as exc:
            return exc.result()
        except OSError as exc:
            log.exception("batch append failed")
            return PutMessageResult(PutMessageStatus.UNKNOWN_ERROR, None, f"append failed: {exc}")
        topic = records[0].topic
        queue_id = records[0].queue_id
        now = res.store_timestamp
        fast = self._fast_dispatch
        index_on = self._index_on
        tags_codes = self._tags_codes
        put = self.queue_dispatcher.put
        index = self.index_dispatcher.index
        for rec, (offset, size, queue_offset, _props) in zip(records, written):
            properties = rec.properties
            tags_code = rec.tags_code
            if tags_code is None:
                tags = properties.get(PROPERTY_TAGS)
                tags_code = tags_codes.get(tags) or self._tags_code(tags) if tags else 0
            if fast:
                put(topic, queue_id, offset, size, tags_code, queue_offset)
                if index_on:
                    keys = properties.get(PROPERTY_KEYS)
                    uniq = properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
                    if keys or uniq:
                        index(topic, keys, uniq, offset, now, sys_flag)
            else:
                self._dispatch(
                    DispatchRequest(
                        topic, queue_id, offset, size, tags_code, now, queue_offset, properties.get(PROPERTY_KEYS),
                        properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX), sys_flag, 0, properties,
                    )
                )
        return PutMessageResult(PutMessageStatus.PUT_OK, res)

    async def wait_flushed(self, end_offset: int, timeout: float | None = None) -> bool:
        """Wait until the commit log is durable up to ``end_offset`` (group commit); False after the timeout
        (``sync_flush_timeout``, 5 s by default)."""
        return await self.flush_policy.wait_flushed(
            self._flush_target, end_offset, self._sync_timeout if timeout is None else timeout
        )

    async def _finish(self, result: PutMessageResult, wait: bool) -> PutMessageResult:
        if result.status is PutMessageStatus.PUT_OK and self._sync_flush and wait:
            if not await self.wait_flushed(result.append.end_offset):
                result.status = PutMessageStatus.FLUSH_DISK_TIMEOUT
                result.remark = f"flush did not complete within {self._sync_timeout:g} s"
        return result

    async def put_message_async(self, record: MessageRecord) -> PutMessageResult:
        """Append, then under SYNC_FLUSH wait for the flush unless the message carries ``WAIT=false``."""
        return await self._finish(self.put_message(record), record.wait_store_msg_ok)

    async def put_messages_async(self, records: Sequence[MessageRecord]) -> PutMessageResult:
        wait = bool(records) and records[0].wait_store_msg_ok
        return await self._finish(self.put_messages(records), wait)

    def append_raw(self, phy_offset: int, data: bytes | memoryview) -> bool:
        """Append raw commit-log bytes replicated from a master at ``phy_offset`` (must be the current end) and
        dispatch the records they complete. Returns False when the offset does not match."""
        cl = self.commit_log
        if phy_offset != cl.max_offset or self._unavailable is not None:
            return False
        start = phy_offset
        view = memoryview(data)
        while view:
            mf = cl.queue.last_file_for_append(cl.max_offset)
            cl._current = mf
            n = min(len(view), mf.remaining)
            mf.append(view[:n])
            view = view[n:]
        dispatch_range(
            cl, self.dispatchers, start, only_missing=True, resolver=self.tags_code_resolver,
            queue_dispatcher=self.queue_dispatcher,
        )
        self.index_dispatcher.drain()
        return True

    # -- reads -------------------------------------------------------------------------------------------------
    def get_message(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_msg_nums: int,
        message_filter: MessageFilter | Callable[[int, memoryview], bool] | None = None,
    ) -> GetMessageResult:
        """Messages of a topic-queue from queue ``offset`` (Java ``DefaultMessageStore.getMessage``, spec 2.3, 7.5).

        At most ``max_msg_nums`` and 32 messages / 256 KiB (at least one message); ``message_filter`` sees the CQ
        tags code first and the record only when the tags code matched."""
        cfg = self.config
        cq = self.consume_queues.get(topic, queue_id)
        if cq is None:
            return GetMessageResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0, 0, 0)
        min_offset = cq.min_offset
        max_offset = cq.max_offset
        if max_offset == 0:
            return GetMessageResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0, min_offset, max_offset)
        if offset < min_offset:
            return GetMessageResult(GetMessageStatus.OFFSET_TOO_SMALL, min_offset, min_offset, max_offset)
        if offset == max_offset:
            return GetMessageResult(GetMessageStatus.OFFSET_OVERFLOW_ONE, offset, min_offset, max_offset)
        if offset > max_offset:
            return GetMessageResult(GetMessageStatus.OFFSET_OVERFLOW_BADLY, max_offset, min_offset, max_offset)
        max_units = max(cfg.max_filter_message_count, max_msg_nums * 20) // 20
        units = cq.units_from(offset, max_units)
        if units is None:
            return GetMessageResult(GetMessageStatus.OFFSET_FOUND_NULL, cq.roll_next_file(offset), min_offset, max_offset)
        if message_filter is not None and not hasattr(message_filter, "is_matched_by_consume_queue"):
            message_filter = _CallableFilter(message_filter)
        max_count = min(max_msg_nums, cfg.max_transfer_count_on_message_in_memory)
        max_bytes = cfg.max_transfer_bytes_on_message_in_memory
        buffers: list = []
        queue_offsets: list[int] = []
        total = 0
        scanned = 0
        status = GetMessageStatus.NO_MATCHED_MESSAGE
        skip_below = -1
        files = self.commit_log.queue
        mf = None
        mf_start = mf_end = 0
        for phy, size, tags_code in units:
            if buffers and (len(buffers) >= max_count or total + size > max_bytes):
                break
            scanned += 1
            if size == BLANK_SIZE or phy < skip_below:
                continue
            if message_filter is not None and not message_filter.is_matched_by_consume_queue(tags_code):
                continue
            if not (mf_start <= phy and phy + size <= mf_end):
                mf = files.find(phy)
                if mf is None or mf.closed:
                    if not buffers:
                        status = GetMessageStatus.MESSAGE_WAS_REMOVING
                    skip_below = phy - phy % files.file_size + files.file_size
                    continue
                mf_start = mf.file_from_offset
                mf_end = mf_start + mf.wrote_position
                if phy + size > mf_end:
                    continue
            pos = phy - mf_start
            view = mf.view[pos : pos + size]
            if message_filter is not None and not message_filter.is_matched_by_commit_log(view):
                continue
            buffers.append(view)
            queue_offsets.append(offset + scanned - 1)
            total += size
        if buffers:
            status = GetMessageStatus.FOUND
        return GetMessageResult(
            status, offset + scanned, min_offset, max_offset, buffers, queue_offsets, total,
        )

    def look_message_bytes_by_offset(self, phy_offset: int, size: int | None = None) -> memoryview | None:
        """The raw record at commit-log ``phy_offset`` (zero-copy), None if there is none."""
        if size is not None and size <= 0:
            return None
        view = self.commit_log.get_record(phy_offset, size)
        if view is None or (size is not None and self.commit_log.record_size_at(phy_offset) != size):
            return None
        return view

    select_one_message_by_offset = look_message_bytes_by_offset

    def look_message_by_offset(self, phy_offset: int, size: int | None = None) -> StoredMessage | None:
        """The decoded record at commit-log ``phy_offset`` (what VIEW_MESSAGE_BY_ID needs)."""
        view = self.look_message_bytes_by_offset(phy_offset, size)
        if view is None:
            return None
        return decode_message(view)[0]

    def query_message(self, topic: str, key: str, max_num: int, begin: int, end: int) -> QueryMessageResult:
        """Records of ``topic`` whose KEYS contain ``key`` or whose UNIQ_KEY is ``key``, stored in [begin, end] ms
        (QUERY_MESSAGE). Index candidates are checked against the record, so hash collisions are filtered out."""
        max_num = min(max_num, MAX_QUERY_NUM)
        self.index_dispatcher.drain()
        result = QueryMessageResult(
            index_last_update_timestamp=self.index.last_update_timestamp,
            index_last_update_phyoffset=self.index.end_phy_offset,
        )
        if max_num <= 0:
            return result
        seen = set()
        for phy in self.index.query(topic, key, max_num * 2, begin, end):
            if phy in seen:
                continue  # a key that is both a KEYS entry and the UNIQ_KEY is indexed twice
            seen.add(phy)
            view = self.commit_log.get_record(phy)
            if view is None:
                continue
            msg = decode_message(view)[0]
            if msg.topic != topic:
                continue
            props = msg.properties
            keys = (props.get(PROPERTY_KEYS) or "").split(" ")
            if key != props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) and key not in keys:
                continue
            result.buffers.append(view)
            if len(result.buffers) >= max_num:
                break
        return result

    # -- offsets and times -------------------------------------------------------------------------------------
    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.consume_queues.get(topic, queue_id)
        return cq.max_offset if cq is not None else 0

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.consume_queues.get(topic, queue_id)
        return cq.min_offset if cq is not None else 0

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        """SEARCH_OFFSET_BY_TIMESTAMP (spec 7.13); 0 for an unknown queue."""
        cq = self.consume_queues.get(topic, queue_id)
        if cq is None:
            return 0
        return cq.get_offset_by_time(timestamp, self.commit_log.store_timestamp_at)

    def get_message_store_timestamp(self, topic: str, queue_id: int, offset: int) -> int:
        cq = self.consume_queues.get(topic, queue_id)
        unit = cq.get_unit(offset) if cq is not None else None
        if unit is None or unit[1] == BLANK_SIZE:
            return -1
        return self.commit_log.store_timestamp_at(unit[0])

    def get_earliest_message_time(self, topic: str, queue_id: int) -> int:
        """Store time at the queue's min offset, -1 if none (GET_EARLIEST_MSG_STORETIME)."""
        cq = self.consume_queues.get(topic, queue_id)
        if cq is None:
            return -1
        return self.get_message_store_timestamp(topic, queue_id, cq.min_offset)

    def get_latest_message_time(self, topic: str, queue_id: int) -> int:
        cq = self.consume_queues.get(topic, queue_id)
        if cq is None or cq.max_offset == 0:
            return -1
        return self.get_message_store_timestamp(topic, queue_id, cq.max_offset - 1)

    def get_earliest_store_time(self) -> int:
        """Store time of the oldest record in the commit log, -1 if empty."""
        first = self.commit_log.queue.first
        if first is None:
            return -1
        return self.commit_log.store_timestamp_at(first.file_from_offset)

    def get_latest_store_time(self) -> int:
        """Store time of the newest record, -1 if empty."""
        cur = self.commit_log._current
        return cur.store_timestamp if cur is not None and cur.store_timestamp else -1

    @property
    def max_phy_offset(self) -> int:
        return self.commit_log.max_offset

    @property
    def min_phy_offset(self) -> int:
        return self.commit_log.min_offset

    @property
    def flushed_phy_offset(self) -> int:
        return self.commit_log.queue.flushed_offset

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

    def topic_queues(self) -> list[tuple[str, int]]:
        return sorted(self.consume_queues.table)

    def delete_topics(self, topics: set[str]) -> None:
        """Drop the consume queues of ``topics`` (the commit-log records stay until retention)."""
        for topic, queue_id in list(self.consume_queues.table):
            if topic in topics:
                self.consume_queues.destroy_queue(topic, queue_id)
                self.commit_log.topic_queue_table.pop((topic, queue_id), None)

