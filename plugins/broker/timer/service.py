"""Arbitrary-time delivery (beyond RocketMQ 4.x; the property names are RocketMQ 5.x's): a put-interceptor plugin.

A message with ``TIMER_DELIVER_MS`` (absolute epoch ms) or ``TIMER_DELAY_SEC`` (seconds from now) due later than
now is parked under ``rmq_sys_wheel_timer`` queue 0 with ``REAL_TOPIC`` / ``REAL_QID`` (like a delayed message, spec
7.6) and ``TIMER_DELIVER_MS`` set; the consume-queue tags code holds the delivery time. One service task

1. enqueues new entries of that consume queue into a persistent hierarchical timing wheel (:mod:`.timer_wheel`:
   O(1) insert, one-second ticks, nothing per message in memory);
2. processes each second whose slot holds entries once the clock reaches it, re-writing the records to their real
   topic and queue (``TIMER_DELAY_SEC``, ``REAL_TOPIC``, ``REAL_QID`` removed; ``TIMER_DELIVER_MS`` kept). A delivery
   is never early and at most a second late; a broker that was down delivers what fell due right after start, in
   delivery-time order.

Retention: a message due further out than half the commit-log retention (``fileReservedTime``) enters the wheel as
a *roll* point half a retention ahead; at that point its record is re-appended to ``rmq_sys_wheel_timer`` (a new
commit-log copy, enqueued again), so no parked record is older than half the retention.

Persistence (``<store>/timerwheel/``): ``snapshot`` (slot table, wheel time, timer-log end, enqueue offset, written
atomically every ``flushDelayOffsetInterval``, only when changed, and at shutdown), the timer-log segments, and
``done.<gen>``: the commit-log offsets of parked records delivered or rolled since the snapshot, appended (one write
syscall, so it survives kill -9) after each delivery. Recovery restores the snapshot, re-enqueues the consume queue
from its offset, and skips what ``done`` lists: each message is delivered once. See docs/delay.md.

The kill window between a delivery's append and its ``done`` entry (the delay levels have the same one, closed the
same way): before each copy is appended, an *intent* entry names the parked record and the commit-log offset the
copy is about to take. After a crash, an intent without its ``done`` entry is the one delivery that was under way;
if the record at that offset is its copy (same ``UNIQ_KEY``, the real topic or the timer topic), it is skipped
like a listed one, otherwise delivered.
"""

from __future__ import annotations

import glob
import logging
import math
import os
import struct
import threading
from collections.abc import Iterator
from typing import Any

import attrs
import trio
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from pyrmq.kernel.hookspecs import hookimpl
from pyrmq.kernel.kernel import StateKey
from pyrmq.kernel.settings import at_least, setting
from pyrmq.kernel.types import ORDER_SCHEDULE, PutContext, PutKind, Rejection
from pyrmq.plugins.broker.timer_wheel import FLAG_ROLL, TimingWheel, WheelCorruptError
from pyrmq.plugins.broker.metrics import broker_labels
from pyrmq.remoting.codes import ResponseCode
from pyrmq.remoting.message import HEADER_STRUCTS, INT
from pyrmq.remoting.vocabulary import MessageProperty
from pyrmq.store.consume_queue import BLANK_SIZE
from pyrmq.store.format import TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE, TRANSACTION_TYPE_MASK, MessageRecord
from pyrmq.store.results import PutMessageStatus

log = logging.getLogger("pyrmq.timer")

TIMER_TOPIC = "rmq_sys_wheel_timer"
PROPERTY_TIMER_DELIVER_MS = MessageProperty.TIMER_DELIVER_MS
PROPERTY_TIMER_DELAY_SEC = MessageProperty.TIMER_DELAY_SEC
PROPERTY_REAL_TOPIC = MessageProperty.REAL_TOPIC
PROPERTY_REAL_QUEUE_ID = MessageProperty.REAL_QUEUE_ID

DAY_MS = 86_400_000
#: default upper bound of a delivery time (from now); plugin setting ``max_delay_days``
MAX_DELAY_DAYS = 400
#: consume-queue units enqueued per pass before yielding
ENQUEUE_BATCH = 4096
RETRY_AFTER_S = 1.0
_OFFSET = struct.Struct(">q")
_REAL_TOPIC_KEY = PROPERTY_REAL_TOPIC.encode() + b"\x01"  # a property's name and separator in a record


#: transaction types that are never scheduled (a prepared or rolled-back message is not delivered at all)
_NOT_DELIVERED = (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE)
#: a ``done`` file's intent entry: ``-(parked offset + 1)``, then the commit-log offset its copy is about to take
_INTENT = struct.Struct(">qq")


class TimerService:
    """The ``TIMER_DELIVER_MS`` / ``TIMER_DELAY_SEC`` put interceptor and its wheel service."""

    name = "timer"
    order = ORDER_SCHEDULE + 10
    trigger_properties = frozenset({PROPERTY_TIMER_DELIVER_MS, PROPERTY_TIMER_DELAY_SEC})

    def __init__(
        self,
        store: Any,
        directory: str,
        *,
        retention_hours: float = 72,
        flush_interval_s: float = 10.0,
        max_delay_days: float = MAX_DELAY_DAYS,
        deliver: bool = True,
    ) -> None:
        self.store = store
        self.directory = directory
        self.flush_interval_s = flush_interval_s
        self.max_delay_ms = int(max_delay_days * DAY_MS)
        #: parked records are re-appended when due further out than this (half the commit-log retention)
        self.roll_ms = max(60_000, int(retention_hours * 3_600_000) // 2)
        self.deliver_enabled = deliver
        self.wheel: TimingWheel | None = None
        self.enqueue_offset = 0
        self._done_gen = 0
        self._done_fd = -1
        self._skip: set[int] = set()
        self._skip_until_sec = 0
        self._skip_until_offset = 0
        self._wake = trio.Event()
        self._changed = False
        self._write_lock = threading.Lock()  # a snapshot thread and a shutdown may overlap
        self._written_gen = -1
        self.delivered = 0
        self.rolled = 0
        #: messages put into the wheel (rocketmq_timer_enqueue_total; ``delivered`` is the dequeue total)
        self.enqueued = 0
        #: per real topic: deliveries (rocketmq_timer_dequeue_total{topic})
        self.delivered_by_topic: dict[str, int] = {}
        #: per real topic, once :meth:`track_topics` was called (the metrics exporter): messages in the wheel
        #: (rocketmq_timing_messages{topic}) and put into it (rocketmq_timer_enqueue_total{topic}); None = not tracked
        self.timing_by_topic: dict[str, int] | None = None
        self.enqueued_by_topic: dict[str, int] = {}
        #: (entries, delivery time in ms of the first) that the last pass could not deliver (put back, retried)
        self.stalled: tuple[int, int] | None = None
        #: lateness in ms of each delivery due at or after ``lags_from_ms`` (only when a list is assigned: benchmarks)
        self.lags: Any = None
        self.lags_from_ms = 0

    @property
    def clock(self):
        return self.store.clock

    # -- metrics -----------------------------------------------------------------------------------------------

    def summary(self) -> str:
        """One line for ``pyrmq plugins --codes`` (the scheduler hook's listing)."""
        return (f"{PROPERTY_TIMER_DELIVER_MS} / {PROPERTY_TIMER_DELAY_SEC}: up to {self.max_delay_ms / DAY_MS:g} days "
                f"ahead, parked under {TIMER_TOPIC}")

    def track_topics(self) -> None:
        """Count the wheel's messages per real topic from now on (what the metrics exporter shows): the wheel's
        current entries are read once (here, or at load), then each enqueue reads its record's REAL_TOPIC."""
        if self.timing_by_topic is not None:
            return
        self.timing_by_topic = {}
        if self.wheel is not None:
            self._count_wheel()

    def _count_wheel(self) -> None:
        counts = self.timing_by_topic
        skip = self._skip
        for _, phy, size, _ in self.wheel.entries():
            if skip and phy in skip:
                continue  # delivered before a crash: skipped, never delivered again
            topic = self._real_topic(phy, size)
            counts[topic] = counts.get(topic, 0) + 1

    def _real_topic(self, phy: int, size: int) -> str:
        """The REAL_TOPIC of the parked record at ``phy`` ("" when it is gone): only its properties (the last field)
        are decoded."""
        view = self.store.commit_log.get_data(phy, size)
        if view is None:
            return ""
        try:
            p = HEADER_STRUCTS[(INT.unpack_from(view, 36)[0] >> 4) & 3].size
            p += INT.unpack_from(view, p - 4)[0]  # the body
            p += 1 + view[p] + 2  # the topic, the properties' length
        except (struct.error, IndexError):
            return ""
        props = bytes(view[p:])
        at = props.find(_REAL_TOPIC_KEY)
        while at > 0 and props[at - 1] != 2:  # a longer name ending in REAL_TOPIC: look further
            at = props.find(_REAL_TOPIC_KEY, at + 1)
        if at < 0:
            return ""
        start = at + len(_REAL_TOPIC_KEY)
        end = props.find(b"\x02", start)
        return props[start:end if end >= 0 else len(props)].decode("utf-8", "replace")

    def _left_wheel(self, topic: str) -> None:
        counts = self.timing_by_topic
        if counts is not None and counts.get(topic, 0) > 0:
            counts[topic] -= 1

    def dequeue_behind(self) -> tuple[int, int]:
        """(messages due but not delivered yet, how late the first of them is in ms): rocketmq_timer_dequeue_lag and
        rocketmq_timer_dequeue_latency. Entries put back after a failed delivery wait in the slot processed next,
        which may lie a second ahead: they are counted from :attr:`stalled` until the clock reaches it."""
        if self.wheel is None:
            return 0, 0
        now_ms = self.clock()
        now_sec = now_ms // 1000
        count, first = self.wheel.due(now_sec)
        oldest = None if first is None else first * 1000
        stalled = self.stalled
        if stalled is not None and self.wheel.cur > now_sec:
            count += stalled[0]
            oldest = stalled[1] if oldest is None else min(oldest, stalled[1])
        return count, max(now_ms - oldest, 0) if count and oldest is not None else 0

    def enqueue_behind(self) -> tuple[int, int]:
        """(parked messages not yet in the wheel, age in ms of the oldest of them): rocketmq_timer_enqueue_lag and
        rocketmq_timer_enqueue_latency."""
        cq = self.store.consume_queues.get(TIMER_TOPIC, 0)
        if cq is None:
            return 0, 0
        offset = max(self.enqueue_offset, cq.min_offset)
        behind = max(cq.max_offset - offset, 0)
        if not behind:
            return 0, 0
        stored = self.store.get_message_store_timestamp(TIMER_TOPIC, 0, offset)
        return behind, max(self.clock() - stored, 0) if stored > 0 else 0

    # -- send path ---------------------------------------------------------------------------------------------

    def intercept(self, record: MessageRecord, context: PutContext) -> MessageRecord | Rejection:
        """The put interceptor: park a message due later (refuse a bad value, or a timed message in a batch).

        A message another scheduler has claimed (``DELAY``: the delay levels run first) is left alone."""
        props = record.properties
        if PROPERTY_TIMER_DELIVER_MS not in props and PROPERTY_TIMER_DELAY_SEC not in props:
            return record
        if context.scheduled_by is not None or record.sys_flag & TRANSACTION_TYPE_MASK in _NOT_DELIVERED:
            return record
        context.scheduled_by = self.name
        try:
            parked = self.redirect(record)
        except ValueError as exc:
            return Rejection(ResponseCode.MESSAGE_ILLEGAL, str(exc))
        if parked is None:
            return record
        if context.kind is PutKind.BATCH:
            return Rejection(ResponseCode.MESSAGE_ILLEGAL, "batch message does not support timer delivery (TIMER_DELIVER_MS / TIMER_DELAY_SEC)")
        return parked

    def redirect(self, record: MessageRecord) -> MessageRecord | None:
        """Park a message due later than now under rmq_sys_wheel_timer; None stores it as it is (due now).

        Raises ValueError for a value that is not an integer or lies too far out (the send answers MESSAGE_ILLEGAL)."""
        props = record.properties
        now = self.clock()
        if PROPERTY_TIMER_DELIVER_MS in props:
            key = PROPERTY_TIMER_DELIVER_MS
            try:
                deliver = int(props[key])
            except ValueError:
                raise ValueError(f"property {key} must be an absolute time in epoch milliseconds, got {props[key]!r}") from None
        else:
            key = PROPERTY_TIMER_DELAY_SEC
            try:
                delay = int(props[key])
            except ValueError:
                raise ValueError(f"property {key} must be an integer number of seconds, got {props[key]!r}") from None
            deliver = now + delay * 1000
        if deliver - now > self.max_delay_ms:
            raise ValueError(
                f"property {key} asks for delivery {(deliver - now) / DAY_MS:.1f} days from now; "
                f"the timer accepts at most {self.max_delay_ms / DAY_MS:g} days"
            )
        if deliver <= now:
            return None
        properties = dict(props)
        properties.pop(PROPERTY_TIMER_DELAY_SEC, None)
        properties[PROPERTY_TIMER_DELIVER_MS] = str(deliver)
        properties[PROPERTY_REAL_TOPIC] = record.topic
        properties[PROPERTY_REAL_QUEUE_ID] = str(record.queue_id)
        self._wake.set()  # the service runs after this send's synchronous append
        return attrs.evolve(
            record, topic=TIMER_TOPIC, queue_id=0, properties=properties, properties_bytes=None, tags_code=deliver
        )

    # -- persistence -------------------------------------------------------------------------------------------

    @property
    def snapshot_path(self) -> str:
        return os.path.join(self.directory, "snapshot")

    def load(self) -> None:
        os.makedirs(self.directory, exist_ok=True)
        log_dir = os.path.join(self.directory, "timerlog")
        wheel = TimingWheel(log_dir, self.clock() // 1000)
        restored = False
        for candidate in (self.snapshot_path, self.snapshot_path + ".bak"):
            try:
                with open(candidate, "rb") as f:
                    data = f.read()
                self.enqueue_offset, self._done_gen = wheel.restore(data, candidate)
                restored = True
                break
            except FileNotFoundError:
                continue
            except WheelCorruptError as exc:
                log.error("timer snapshot unusable: %s", exc)
        if not restored and os.listdir(log_dir):
            log.warning("timer: no snapshot in %s (none written yet, or lost); rebuilding the wheel from the %s queue", self.directory, TIMER_TOPIC)
        # deliveries and rolls made after the snapshot (a crash): skip them while catching up
        under_way: dict[int, int] = {}
        for path in self._done_files():
            if self._gen_of(path) >= self._done_gen:
                with open(path, "rb") as f:
                    data = f.read()
                self._read_done(data, under_way)
        for phy, copy_at in under_way.items():
            if self._copied_before_crash(phy, copy_at):
                self._skip.add(phy)
        if self._skip:
            log.info("timer: %d deliveries made after the last snapshot will not be repeated", len(self._skip))
            cq = self.store.consume_queues.get(TIMER_TOPIC, 0)
            self._skip_until_offset = cq.max_offset if cq is not None else 0
            self._skip_until_sec = self.clock() // 1000
        self.wheel = wheel
        if self.timing_by_topic is not None:
            self._count_wheel()
        self._done_gen += 1
        self._open_done()
        log.info("timer wheel at %d s: %d entries, enqueue offset %d", wheel.cur, wheel.size, self.enqueue_offset)

    def _done_files(self) -> list[str]:
        return sorted(glob.glob(os.path.join(self.directory, "done.*")), key=self._gen_of)

    @staticmethod
    def _gen_of(path: str) -> int:
        try:
            return int(path.rsplit(".", 1)[1])
        except ValueError:
            return -1

    def _open_done(self) -> None:
        path = os.path.join(self.directory, f"done.{self._done_gen}")
        self._done_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def _read_done(self, data: bytes, under_way: dict[int, int]) -> None:
        """Add the offsets a ``done`` file lists to the skip set; ``under_way`` gets parked offset -> copy offset of
        each intent not followed by its ``done`` entry."""
        n = len(data) // 8
        values = [v for (v,) in _OFFSET.iter_unpack(data[: n * 8])]
        i = 0
        while i < n:
            v = values[i]
            if v >= 0:
                self._skip.add(v)
                under_way.pop(v, None)
                i += 1
            elif i + 1 < n:
                under_way[-v - 1] = values[i + 1]
                i += 2
            else:
                break  # an intent without its offset: the write did not complete, nor did the append after it

    def _copied_before_crash(self, phy: int, copy_at: int) -> bool:
        """Is the record the copy of the parked record at ``phy`` was to take (at ``copy_at``, or at the start of
        the next segment when that one had no room) that copy? Only records recovered from before the crash count:
        a client's re-send after the restart carries the same UNIQ_KEY."""
        store = self.store
        report = getattr(store, "recovery_report", None)
        end = report.max_offset if report is not None and report.abnormal else store.max_phy_offset
        parked = store.look_message_by_offset(phy)
        uniq = parked.properties.get("UNIQ_KEY") if parked is not None else None
        if not uniq:
            return False
        targets = {TIMER_TOPIC, parked.properties.get(PROPERTY_REAL_TOPIC)}
        segment = store.config.mapped_file_size_commit_log
        for at in (copy_at, (copy_at // segment + 1) * segment):
            copy = store.look_message_by_offset(at) if at < end else None
            if copy is not None:
                if copy.topic in targets and copy.properties.get("UNIQ_KEY") == uniq:
                    log.info("timer: the parked record at %d (%s) was delivered at %d just before the crash; not again",
                             phy, uniq, at)
                    return True
                return False
        return False

    def _mark_intent(self, phy: int) -> None:
        os.write(self._done_fd, _INTENT.pack(-phy - 1, self.store.max_phy_offset))

    def _mark_done(self, phy: int) -> None:
        os.write(self._done_fd, _OFFSET.pack(phy))

    def _prepare_snapshot(self) -> tuple[bytes, int, list[int]]:
        """Synchronous part: the state as of now, and a fresh done file for what happens from here on."""
        data = self.wheel.snapshot(self.enqueue_offset, self._done_gen + 1)
        dead = self.wheel.dead_segments()
        os.close(self._done_fd)
        self._done_gen += 1
        self._open_done()
        self._changed = False
        return data, self._done_gen, dead

    def _write_snapshot(self, data: bytes, gen: int, wheel: TimingWheel) -> None:
        """Blocking: timer log durable, then the snapshot atomically, then older done files removed."""
        with self._write_lock:
            if gen <= self._written_gen:
                return  # a newer one (the shutdown's) is already durable
            wheel.fsync()
            path = self.snapshot_path
            tmp = path + ".tmp"
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            if os.path.exists(path):
                os.replace(path, path + ".bak")
            os.replace(tmp, path)
            dir_fd = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
            for old in self._done_files():
                if self._gen_of(old) < gen:
                    os.unlink(old)
            self._written_gen = gen

    async def _snapshot(self) -> None:
        wheel = self.wheel
        data, gen, dead = self._prepare_snapshot()
        await trio.to_thread.run_sync(self._write_snapshot, data, gen, wheel)
        if self.wheel is not None:  # (not closed meanwhile)
            self.wheel.delete_segments(dead)

    def close(self) -> None:
        """Final snapshot (shutdown)."""
        wheel = self.wheel
        if wheel is None:
            return
        data, gen, dead = self._prepare_snapshot()
        self._write_snapshot(data, gen, wheel)
        with self._write_lock:
            wheel.delete_segments(dead)
            wheel.close()
            os.close(self._done_fd)
            self.wheel = None

    # -- service -----------------------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        if self.wheel is None:
            self.load()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._snapshot_loop)
            if self.deliver_enabled:
                nursery.start_soon(self._wheel_loop)
            task_status.started()

    async def _snapshot_loop(self) -> None:
        while True:
            await trio.sleep(self.flush_interval_s)
            if self._changed:
                await self._snapshot()

    def enqueue(self, limit: int = ENQUEUE_BATCH) -> int:
        """Move up to ``limit`` new consume-queue entries of the timer topic into the wheel; how many were read."""
        cq = self.store.consume_queues.get(TIMER_TOPIC, 0)
        if cq is None or self.enqueue_offset >= cq.max_offset:
            return 0
        offset = self.enqueue_offset
        if offset < cq.min_offset:
            log.warning("timer: queue offsets %d..%d were removed by retention", offset, cq.min_offset - 1)
            offset = cq.min_offset
        units = cq.units_from(offset, limit)
        if units is None:
            self.enqueue_offset = cq.roll_next_file(offset)
            return 1
        wheel = self.wheel
        skip = self._skip
        roll_at = self.clock() + self.roll_ms
        by_topic = self.timing_by_topic
        n = 0
        for phy, size, deliver_ms in units:
            n += 1
            if size == BLANK_SIZE or (skip and phy in skip):
                continue
            if deliver_ms > roll_at:
                wheel.insert(phy, size, roll_at, FLAG_ROLL)
            else:
                wheel.insert(phy, size, deliver_ms)
            self.enqueued += 1
            if by_topic is not None:
                topic = self._real_topic(phy, size)
                by_topic[topic] = by_topic.get(topic, 0) + 1
                self.enqueued_by_topic[topic] = self.enqueued_by_topic.get(topic, 0) + 1
        self.enqueue_offset = offset + n
        if n:
            self._changed = True
        return n

    async def _wheel_loop(self) -> None:
        wheel = self.wheel
        while True:
            while self.enqueue():
                await trio.sleep(0)
            now_ms = self.clock()
            due = wheel.advance(now_ms // 1000)
            if due is not None:
                self._changed = True
                failed = self._deliver_all(due)
                if self._skip and wheel.cur > self._skip_until_sec and self.enqueue_offset >= self._skip_until_offset:
                    self._skip = set()  # caught up: nothing listed can come round again
                if failed:
                    for deliver_ms, phy, size, flags in failed:
                        wheel.insert(phy, size, deliver_ms, flags)
                    self.stalled = (len(failed), failed[0][0])
                    await trio.sleep(RETRY_AFTER_S)
                else:
                    self.stalled = None
                    await trio.sleep(0)
                continue
            nxt = wheel.next_work()
            timeout = math.inf if nxt is None else max(0.0, (nxt * 1000 - self.clock()) / 1000)
            with trio.move_on_after(timeout):
                await self._wake.wait()
            self._wake = trio.Event()

    def _deliver_all(self, due: list[tuple[int, int, int, int]]) -> list[tuple[int, int, int, int]]:
        for i, (deliver_ms, phy, size, flags) in enumerate(due):
            if self._skip and phy in self._skip:
                continue
            self._mark_intent(phy)
            ok = self._roll(phy, size) if flags & FLAG_ROLL else self.deliver(phy, size, deliver_ms)
            if not ok:
                return due[i:]
            self._mark_done(phy)
        return []

    def _parked(self, phy: int, size: int) -> Any | None:
        msg = self.store.look_message_by_offset(phy, size)
        if msg is None:
            log.warning("timer: the parked record at %d is gone (retention?); skipped", phy)
        return msg

    def deliver(self, phy: int, size: int, deliver_ms: int = 0) -> bool:
        """Re-write the parked record at ``phy`` to its real topic and queue; False if the store refused it."""
        msg = self._parked(phy, size)
        if msg is None:
            return True
        properties = msg.properties
        topic = properties.pop(PROPERTY_REAL_TOPIC, None)
        try:
            queue_id = int(properties.pop(PROPERTY_REAL_QUEUE_ID, ""))
        except ValueError:
            queue_id = -1
        if not topic or queue_id < 0:
            log.warning("timer: the record at %d has no REAL_TOPIC/REAL_QID; skipped", phy)
            return True
        properties.pop(PROPERTY_TIMER_DELAY_SEC, None)
        result = self.store.put_message(self._copy(msg, topic, queue_id, properties))
        if result.status is not PutMessageStatus.PUT_OK:
            log.warning("timer: delivering the record at %d failed: %s %s", phy, result.status.name, result.remark or "")
            return False
        self.delivered += 1
        self.delivered_by_topic[topic] = self.delivered_by_topic.get(topic, 0) + 1
        self._left_wheel(topic)
        if self.lags is not None and deliver_ms >= self.lags_from_ms:
            self.lags.append(result.append.store_timestamp - deliver_ms)
        return True

    def _roll(self, phy: int, size: int) -> bool:
        """Re-append a far-future record so that commit-log retention never removes it before it is due."""
        msg = self._parked(phy, size)
        if msg is None:
            return True
        result = self.store.put_message(self._copy(msg, TIMER_TOPIC, 0, msg.properties, tags_code=self._deliver_ms(msg)))
        if result.status is not PutMessageStatus.PUT_OK:
            return False
        self.rolled += 1
        self._left_wheel(msg.properties.get(PROPERTY_REAL_TOPIC, ""))  # its new copy is counted when enqueued
        return True

    @staticmethod
    def _deliver_ms(msg: Any) -> int:
        try:
            return int(msg.properties.get(PROPERTY_TIMER_DELIVER_MS, "0"))
        except ValueError:
            return 0

    @staticmethod
    def _copy(msg: Any, topic: str, queue_id: int, properties: dict[str, str], tags_code: int | None = None) -> MessageRecord:
        return msg.to_record(topic, queue_id, properties, tags_code=tags_code)


class TimerCollector:
    """The timing wheel's series (5.x's rocketmq_timer_* and rocketmq_timing_messages), read when scraped."""

    def __init__(self, service: Any, settings: Any) -> None:
        self.service = service
        self.settings = settings

    def describe(self) -> list[Metric]:
        return []  # computed at scrape time

    def collect(self) -> Iterator[Metric]:
        base, common = broker_labels(self.settings)
        service = self.service
        topic_labels = base + ["topic"]
        by_topic = service.timing_by_topic or {}
        enqueued = CounterMetricFamily(
            "rocketmq_timer_enqueue", "Messages put into the timing wheel, by topic.", labels=topic_labels)
        for topic, n in sorted(service.enqueued_by_topic.items()):
            enqueued.add_metric(common + [topic], n)
        dequeued = CounterMetricFamily(
            "rocketmq_timer_dequeue", "Timed messages delivered to their topic, by topic.", labels=topic_labels)
        for topic, n in sorted(service.delivered_by_topic.items()):
            dequeued.add_metric(common + [topic], n)
        timing = GaugeMetricFamily(
            "rocketmq_timing_messages", "Messages waiting in the timing wheel, by topic.", labels=topic_labels)
        for topic in sorted(set(by_topic) | set(service.delivered_by_topic)):
            timing.add_metric(common + [topic], by_topic.get(topic, 0))
        yield from (enqueued, dequeued, timing)
        # how far behind the service is: parked but not yet in the wheel, due but not yet delivered (5.x's names)
        enqueue_lag, enqueue_ms = service.enqueue_behind()
        dequeue_lag, dequeue_ms = service.dequeue_behind()
        for name, help_text, value in (
            ("rocketmq_timer_enqueue_lag", "Timed messages parked but not yet in the timing wheel.", enqueue_lag),
            ("rocketmq_timer_enqueue_latency", "Age of the oldest of them (milliseconds).", enqueue_ms),
            ("rocketmq_timer_dequeue_lag", "Timed messages due but not yet delivered.", dequeue_lag),
            ("rocketmq_timer_dequeue_latency", "How late the oldest of them is (milliseconds).", dequeue_ms),
        ):
            gauge = GaugeMetricFamily(name, help_text, labels=base)
            gauge.add_metric(common, value)
            yield gauge



@attrs.frozen
class TimerSettings:
    """The timer's broker.conf keys (RocketMQ 5.x's names)."""

    timerFlushIntervalMs: int = setting(1000, check=at_least(1), help="ms between saves of the timer's progress")


TIMER = StateKey[TimerService]("timer")


# -- hooks -------------------------------------------------------------------------------------------------------


@hookimpl(trylast=True)
def pyrmq_configure(kernel: Any) -> None:
    from pyrmq.plugins.broker.core import BROKER

    ctx = kernel.state.find(BROKER)
    if ctx is None:
        return
    settings = ctx.settings
    options = kernel.plugin_settings("pyrmq.plugins.broker.timer")
    service = TimerService(
        ctx.store,
        os.path.join(str(settings.store_root), "timerwheel"),
        retention_hours=settings.fileReservedTime,
        flush_interval_s=kernel.settings(TimerSettings).timerFlushIntervalMs / 1000,
        max_delay_days=float(options.get("max_delay_days", MAX_DELAY_DAYS)),
        deliver=settings.brokerRole != "SLAVE",
    )
    kernel.state.put(TIMER, service)


@hookimpl(trylast=True)
def pyrmq_register_settings() -> dict[str, type]:
    return {"broker": TimerSettings}


@hookimpl(trylast=True)
def pyrmq_register_schedulers(kernel: Any) -> list[Any] | None:
    service = kernel.state.find(TIMER)
    return None if service is None else [service]


@hookimpl(trylast=True)
def pyrmq_register_metric_collectors(kernel: Any, role: str) -> list[Any] | None:
    service = kernel.state.find(TIMER)
    if service is None or role != "broker":
        return None
    from pyrmq.plugins.broker.core import BROKER

    service.track_topics()  # rocketmq_timing_messages by topic
    return [TimerCollector(service, kernel.state.get(BROKER).settings)]


@hookimpl(trylast=True)
async def pyrmq_serve(kernel: Any, nursery: trio.Nursery) -> None:
    service = kernel.state.find(TIMER)
    if service is not None:
        await nursery.start(service.run)


@hookimpl
async def pyrmq_unconfigure(kernel: Any) -> None:
    # before the core (trylast) closes the store
    service = kernel.state.find(TIMER)
    if service is not None:
        service.close()
