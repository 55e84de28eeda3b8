"""Delay levels: RocketMQ 4.x's 18 fixed delays as a put-interceptor plugin (spec 7.6, 5.3, 6.6 delayOffset.json).

A message whose ``DELAY`` property is a level > 0 (clamped to the number of levels, 18 by default) is stored under
``SCHEDULE_TOPIC_XXXX`` queue ``level - 1`` with ``REAL_TOPIC`` / ``REAL_QID`` added; its consume-queue tags code is
the delivery time (store time + level delay). One task per level walks that queue from its progress offset: an entry
not yet due puts the level to sleep until it is; a due entry is re-written to its real topic and queue with the same
body, flag, sysFlag, born time/host, reconsume times and properties minus ``DELAY`` (new store time and offset).

Progress: Java's ``config/delayOffset.json`` (``{"offsetTable":{<level>:<offset>}}``) is written every
``flushDelayOffsetInterval`` and at shutdown, so a Java broker can take the store over. Because a process crash
would otherwise replay up to 10 s of deliveries, every delivery also advances the level's slot in
``config/delayOffset.progress`` (a 4 KiB memory-mapped file: the write lands in the page cache like the commit-log
append it follows, so it survives kill -9). On start each level resumes from the larger of the two. See docs/delay.md.
"""

from __future__ import annotations

import logging
import mmap
import os
import re
import struct
import threading
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import trio

from pyrmq.kernel.hookspecs import hookimpl
from pyrmq.kernel.kernel import StateKey
from pyrmq.kernel.settings import at_least, setting
from pyrmq.kernel.types import ORDER_SCHEDULE, PutContext, PutKind, Rejection
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.vocabulary import SCHEDULE_TOPIC, MessageProperty
from pyrmq.store.config_files import DelayOffsetFile
from pyrmq.store.consume_queue import BLANK_SIZE
from pyrmq.store.format import TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE, TRANSACTION_TYPE_MASK, MessageRecord
from pyrmq.store.results import PutMessageStatus

log = logging.getLogger("pyrmq.delay_levels")

PROPERTY_DELAY = MessageProperty.DELAY_TIME_LEVEL
PROPERTY_REAL_TOPIC = MessageProperty.REAL_TOPIC
PROPERTY_REAL_QUEUE_ID = MessageProperty.REAL_QUEUE_ID

#: how long a level waits before retrying a delivery the store refused (Java: 10 s)
RETRY_AFTER_S = 1.0
#: units read from a level's consume queue per pass
BATCH = 256


class ProgressFile:
    """Per-level progress, memory-mapped so that each delivery's update survives a process crash.

    Layout (big-endian): ``b"PYRMQDLY"`` then 511 longs, slot ``level - 1`` = next consume-queue offset of that
    level (-1 = never written).
    """

    MAGIC = b"PYRMQDLY"
    SIZE = 4096
    SLOT = struct.Struct(">q")
    MAX_LEVELS = (SIZE - len(MAGIC)) // 8

    def __init__(self, path: str) -> None:
        self.path = path
        fresh = not os.path.exists(path) or os.path.getsize(path) != self.SIZE
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if fresh:
                os.ftruncate(fd, self.SIZE)
            self._map = mmap.mmap(fd, self.SIZE)
        finally:
            os.close(fd)
        if fresh or self._map[: len(self.MAGIC)] != self.MAGIC:
            self._map[:] = self.MAGIC + b"\xff" * (self.SIZE - len(self.MAGIC))

    def read(self) -> dict[int, int]:
        out = {}
        for i in range(self.MAX_LEVELS):
            (value,) = self.SLOT.unpack_from(self._map, len(self.MAGIC) + 8 * i)
            if value >= 0:
                out[i + 1] = value
        return out

    def set(self, level: int, offset: int) -> None:
        self.SLOT.pack_into(self._map, len(self.MAGIC) + 8 * (level - 1), offset)

    def close(self) -> None:
        if not self._map.closed:
            self._map.flush()
            self._map.close()


#: transaction types that are never delayed (a prepared or rolled-back message is not delivered at all)
_NOT_DELIVERED = (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE)


class DelayLevelService:
    """The ``DELAY`` put interceptor (a :class:`~pyrmq.kernel.types.PutInterceptor`) and its per-level delivery tasks."""

    name = "delay-levels"
    order = ORDER_SCHEDULE
    trigger_properties = frozenset({PROPERTY_DELAY})

    def __init__(
        self,
        store: Any,
        levels_ms: Sequence[int],
        config_dir: str,
        *,
        flush_interval_s: float = 10.0,
        deliver: bool = True,
    ) -> None:
        if not levels_ms:
            raise ValueError("no delay levels")
        if len(levels_ms) > ProgressFile.MAX_LEVELS:
            raise ValueError(f"at most {ProgressFile.MAX_LEVELS} delay levels")
        self.store = store
        self.levels_ms = tuple(int(v) for v in levels_ms)
        self.config_dir = config_dir
        self.flush_interval_s = flush_interval_s
        #: False on a slave: it stores what the master replicates but never delivers (Java runs the schedule on masters)
        self.deliver_enabled = deliver
        self.offset_file = DelayOffsetFile(os.path.join(config_dir, "delayOffset.json"))
        self.progress: ProgressFile | None = None
        self.offsets: dict[int, int] = {}
        self._wake: dict[int, trio.Event] = {}
        self._dirty = False
        self._persist_lock = threading.Lock()  # the flush thread and a shutdown may overlap
        #: deliveries made since start (for tools and tests)
        self.delivered = 0

    @property
    def clock(self) -> Callable[[], int]:
        return self.store.clock

    @property
    def max_level(self) -> int:
        return len(self.levels_ms)

    def summary(self) -> str:
        """One line for ``pyrmq plugins --codes`` (the scheduler hook's listing)."""
        return f"{PROPERTY_DELAY}: {len(self.levels_ms)} levels, parked under {SCHEDULE_TOPIC}"

    def delay_of(self, level: int) -> int:
        return self.levels_ms[min(level, self.max_level) - 1]

    # -- send path (called directly for every message a client puts) -----------------------------------------

    def intercept(self, record: MessageRecord, context: PutContext) -> MessageRecord | Rejection:
        """The put interceptor: a message with ``DELAY`` is parked (or refused, for a bad value or in a batch).

        The first scheduler whose property a message carries decides when it is delivered: a ``DELAY`` message is
        this one's even at level 0 (the timer then leaves it alone)."""
        if PROPERTY_DELAY not in record.properties or record.sys_flag & TRANSACTION_TYPE_MASK in _NOT_DELIVERED:
            return record
        if context.scheduled_by is not None:
            return record
        context.scheduled_by = self.name
        if context.kind is PutKind.BATCH:
            if record.properties[PROPERTY_DELAY] not in ("", "0"):
                return Rejection(ResponseCode.MESSAGE_ILLEGAL, "batch message does not support delay level")
            return record
        try:
            return self.redirect(record) or record
        except ValueError as exc:
            return Rejection(ResponseCode.MESSAGE_ILLEGAL, str(exc))

    def redirect(self, record: MessageRecord) -> MessageRecord | None:
        """Park a message with ``DELAY`` > 0 under SCHEDULE_TOPIC_XXXX (spec 7.6 store path); None leaves it alone.

        Raises ValueError for a DELAY that is not an integer (the send answers MESSAGE_ILLEGAL)."""
        text = record.properties.get(PROPERTY_DELAY, "")
        try:
            level = int(text)
        except ValueError:
            raise ValueError(f"property DELAY must be an integer delay level 1..{self.max_level}, got {text!r}") from None
        if level <= 0:
            return None
        level = min(level, self.max_level)
        properties = dict(record.properties)
        properties[PROPERTY_REAL_TOPIC] = record.topic
        properties[PROPERTY_REAL_QUEUE_ID] = str(record.queue_id)
        event = self._wake.get(level)
        if event is not None:
            event.set()  # the level task runs after this send's synchronous append
        return attrs.evolve(
            record,
            topic=SCHEDULE_TOPIC,
            queue_id=level - 1,
            properties=properties,
            properties_bytes=None,
            tags_code=self.clock() + self.levels_ms[level - 1],
        )

    # -- progress ----------------------------------------------------------------------------------------------

    def load(self) -> None:
        os.makedirs(self.config_dir, exist_ok=True)
        table = self.offset_file.load_table()
        self.progress = ProgressFile(os.path.join(self.config_dir, "delayOffset.progress"))
        mapped = self.progress.read()
        # a Java broker may have run on this store since (its json ahead); or we crashed (the mapped file ahead)
        self.offsets = {level: max(table.get(level, 0), mapped.get(level, 0)) for level in set(table) | set(mapped)}
        if self.offsets:
            log.info("delay levels resume at %s", dict(sorted(self.offsets.items())))

    def persist(self) -> None:
        """Write delayOffset.json (every flushDelayOffsetInterval and at shutdown)."""
        with self._persist_lock:
            self._dirty = False
            self.offset_file.save_table(dict(sorted(self.offsets.items())))

    async def all_delay_offset(self, connection: Any, request: Any) -> Any:
        """GET_ALL_DELAY_OFFSET (45): delayOffset.json's document, what a slave's metadata sync copies."""
        from pyrmq.remoting import fastjson

        body = fastjson.dumps({"offsetTable": dict(sorted(self.offsets.items()))}, style=fastjson.FASTJSON)
        return request.make_response(ResponseCode.SUCCESS, body=body)

    def close(self) -> None:
        if self.progress is not None:
            if self.deliver_enabled or self._dirty:
                # a slave's delayOffset.json is the copy its metadata sync wrote from the master's: leave it
                self.persist()
            self.progress.close()
            self.progress = None

    def _advance(self, level: int, offset: int) -> None:
        self.offsets[level] = offset
        self.progress.set(level, offset)
        self._dirty = True

    # -- delivery ----------------------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Deliver due messages of every level and flush delayOffset.json until cancelled."""
        if self.progress is None:
            self.load()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._flush_loop)
            if self.deliver_enabled:
                levels = set(range(1, self.max_level + 1))
                # queues left by a longer level table of an earlier run still get delivered
                levels |= {q + 1 for (topic, q) in self.store.topic_queues() if topic == SCHEDULE_TOPIC}
                for level in sorted(levels):
                    nursery.start_soon(self._level_loop, level)
            task_status.started()

    async def _flush_loop(self) -> None:
        while True:
            await trio.sleep(self.flush_interval_s)
            if self._dirty:
                await trio.to_thread.run_sync(self.persist)

    def _delivered_before_crash(self, level: int) -> bool:
        """After a crash: was the message at the level's resume offset delivered already? The delivered copy is
        appended before the progress slot is written, so a kill between the two leaves the copy in the commit log
        and the progress one behind; the index (rebuilt by recovery) finds the copy by the message's UNIQ_KEY."""
        report = getattr(self.store, "recovery_report", None)
        offset = self.offsets.get(level, 0)
        cq = self.store.consume_queues.get(SCHEDULE_TOPIC, level - 1)
        if report is None or not report.abnormal or cq is None or offset >= cq.max_offset:
            return False
        units = list(cq.units_from(offset, 1) or ())
        if not units or units[0][1] == BLANK_SIZE:
            return False
        parked = self.store.look_message_by_offset(units[0][0], units[0][1])
        uniq = parked.properties.get("UNIQ_KEY") if parked is not None else None
        topic = parked.properties.get(PROPERTY_REAL_TOPIC) if parked is not None else None
        if not uniq or not topic:
            return False
        found = self.store.query_message(topic, uniq, 4, parked.store_timestamp, self.clock() + 60_000)
        if found.message_count == 0:
            return False
        log.info("delay level %d: the message at offset %d (%s) was delivered just before the crash; not again",
                 level, offset, uniq)
        return True

    async def _level_loop(self, level: int) -> None:
        queue_id = level - 1
        delay = self.delay_of(level)
        store = self.store
        if self._delivered_before_crash(level):
            self._advance(level, self.offsets.get(level, 0) + 1)
        while True:
            cq = store.consume_queues.get(SCHEDULE_TOPIC, queue_id)
            offset = self.offsets.get(level, 0)
            if cq is None or offset >= cq.max_offset:
                event = self._wake[level] = trio.Event()
                await event.wait()
                continue
            if offset < cq.min_offset:
                log.warning("delay level %d: offsets %d..%d were removed by retention", level, offset, cq.min_offset - 1)
                self._advance(level, cq.min_offset)
                continue
            units = cq.units_from(offset, BATCH)
            if units is None:
                self._advance(level, cq.roll_next_file(offset))
                continue
            wait_s = 0.0
            for phy, size, deliver_ms in units:
                if size != BLANK_SIZE:
                    now = self.clock()
                    # a delivery time beyond now + delay (clock moved back, or another level table) is due now
                    if deliver_ms > now + delay:
                        deliver_ms = now
                    if deliver_ms > now:
                        wait_s = (deliver_ms - now) / 1000
                        break
                    msg = store.look_message_by_offset(phy, size)
                    # the tags code was computed just before the append: a millisecond before the store time Java
                    # adds the delay to; never deliver earlier than store time + delay
                    if msg is not None and now < msg.store_timestamp + delay <= now + delay:
                        wait_s = (msg.store_timestamp + delay - now) / 1000
                        break
                    if not self.deliver(phy, size, level, msg):
                        wait_s = RETRY_AFTER_S
                        break
                offset += 1
                self._advance(level, offset)
            await trio.sleep(wait_s)

    def deliver(self, phy: int, size: int, level: int = 0, msg: Any = None) -> bool:
        """Re-write the parked record at ``phy`` to its real topic and queue; False if the store refused it."""
        if msg is None:
            msg = self.store.look_message_by_offset(phy, size)
        if msg is None:
            log.warning("delay level %d: the record at %d is gone (retention?); skipped", level, phy)
            return True
        properties = msg.properties
        properties.pop(PROPERTY_DELAY, None)
        topic = properties.get(PROPERTY_REAL_TOPIC)
        try:
            queue_id = int(properties.get(PROPERTY_REAL_QUEUE_ID, ""))
        except ValueError:
            queue_id = -1
        if not topic or queue_id < 0:
            log.warning("delay level %d: the record at %d has no REAL_TOPIC/REAL_QID; skipped", level, phy)
            return True
        record = msg.to_record(topic, queue_id, properties)
        result = self.store.put_message(record)
        if result.status is not PutMessageStatus.PUT_OK:
            log.warning("delay level %d: delivering the record at %d failed: %s %s", level, phy,
                        result.status.name, result.remark or "")
            return False
        self.delivered += 1
        return True


_DELAY_TOKEN = re.compile(r"^(\d+)([smhd])$")


def parse_delay_levels(text: str) -> tuple[int, ...]:
    """``"1s 5s 10s ... 2h"`` -> delays in milliseconds, level i (1-based) at index i-1 (spec 7.6)."""
    unit_ms = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
    out = []
    for token in text.split():
        m = _DELAY_TOKEN.match(token)
        if not m:
            raise ValueError(f"bad delay level token {token!r} (expected <int><s|m|h|d>, e.g. 5s)")
        out.append(int(m.group(1)) * unit_ms[m.group(2)])
    if not out:
        raise ValueError("no delay levels")
    return tuple(out)


def _delay_levels(v: str) -> str | None:
    try:
        parse_delay_levels(v)
    except ValueError as exc:
        return f"space-separated <int><s|m|h|d> tokens ({exc})"
    return None


@attrs.frozen
class DelayLevelSettings:
    """The delay levels' broker.conf keys (RocketMQ 4.9.8's names and defaults)."""

    messageDelayLevel: str = setting("1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h", check=_delay_levels,
                                     help="the delay of each level, 1 upwards")
    flushDelayOffsetInterval: int = setting(10_000, check=at_least(1), help="ms between saves of delayOffset.json")

    @property
    def delay_levels_ms(self) -> tuple[int, ...]:
        return parse_delay_levels(self.messageDelayLevel)


DELAY_LEVELS = StateKey[DelayLevelService]("delay_levels")


# -- hooks -------------------------------------------------------------------------------------------------------


@hookimpl(trylast=True)
def pyrmq_configure(kernel: Any) -> None:
    from pyrmq.plugins.broker.core import BROKER

    ctx = kernel.state.find(BROKER)
    if ctx is None:
        return
    settings = ctx.settings
    own = kernel.settings(DelayLevelSettings)
    service = DelayLevelService(
        ctx.store,
        own.delay_levels_ms,
        ctx.config_dir,
        flush_interval_s=own.flushDelayOffsetInterval / 1000,
        deliver=settings.brokerRole != "SLAVE",
    )
    kernel.state.put(DELAY_LEVELS, service)


@hookimpl(trylast=True)
def pyrmq_register_processors(kernel: Any, role: str) -> dict[int, Any] | None:
    service = kernel.state.find(DELAY_LEVELS)
    if role != "broker" or service is None:
        return None
    return {RequestCode.GET_ALL_DELAY_OFFSET: service.all_delay_offset}


@hookimpl(trylast=True)
def pyrmq_register_settings() -> dict[str, type]:
    return {"broker": DelayLevelSettings}


@hookimpl(trylast=True)
def pyrmq_register_schedulers(kernel: Any) -> list[Any] | None:
    service = kernel.state.find(DELAY_LEVELS)
    return None if service is None else [service]


@hookimpl(trylast=True)
async def pyrmq_serve(kernel: Any, nursery: trio.Nursery) -> None:
    service = kernel.state.find(DELAY_LEVELS)
    if service is not None:
        await nursery.start(service.run)


@hookimpl
async def pyrmq_unconfigure(kernel: Any) -> None:
    # before the core (trylast) closes the store
    service = kernel.state.find(DELAY_LEVELS)
    if service is not None:
        service.close()
