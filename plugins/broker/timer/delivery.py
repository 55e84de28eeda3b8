"""The timer's delivery loop: parked records into the wheel, due ones re-written to their topic (on the master only).

One task, on every replica:

1. enqueues new units of the timer topic's consume queue into the wheel (:mod:`.wheel`: O(1) insert, one-second
   ticks), reading each parked record's ``TIMER_DELIVER_MS`` from the record itself (RocketMQ's TimerMessageStore
   does the same; the unit's tags code is only used when the record is gone);
2. on the master, processes each second whose slot holds entries once the clock reaches it: each due record is
   re-written to its real topic and queue (``TIMER_DELAY_SEC``, ``REAL_TOPIC``, ``REAL_QID`` removed,
   ``TIMER_DELIVER_MS`` kept, :data:`~.records.PROPERTY_PARKED_OFFSET` added), a far-future one re-appended under the
   timer topic instead (a *refresh*, so commit-log retention never removes it before it is due). Never early, at
   most a second late; a broker that was down delivers what fell due right after start, in delivery-time order;
3. on a replica that is not the master, advances the wheel only as far as its master's delivered copies show the
   master has come (:mod:`.replica`): an entry whose copy arrived is dropped, the others stay in the wheel.

The role comes from ``pyrmq_role_changed`` (:meth:`WheelDelivery.set_role`): a replica that becomes master delivers at
once what is due in its own wheel (what its master never delivered); one that stops being master stops delivering.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import trio

from pyrmq.plugins.broker.timer.checkpoint import TimerCheckpoint
from pyrmq.plugins.broker.timer.records import (
    PROPERTY_PARKED_OFFSET,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
    TIMER_TOPIC,
    deliver_ms_of,
    real_topic_of,
    stored_properties,
)
from pyrmq.plugins.broker.timer.wheel import FLAG_ROLL, TimingWheel
from pyrmq.store.consume_queue import BLANK_SIZE
from pyrmq.store.results import PutMessageStatus

log = logging.getLogger("pyrmq.timer")

#: consume-queue units enqueued per pass before yielding
ENQUEUE_BATCH = 4096
#: how long the master waits before retrying a delivery the store refused
RETRY_AFTER_S = 1.0

Entry = tuple[int, int, int, int]  # deliver_ms, phy, size, flags


class WheelDelivery:
    """Mixed into :class:`~.service.TimerService`: the wheel loop, enqueue, delivery and refresh."""

    store: Any
    clock: Callable[[], int]
    checkpoint: TimerCheckpoint
    wheel: TimingWheel | None
    enqueue_offset: int
    roll_ms: int
    #: whether this broker delivers (the master of its group); see :meth:`set_role`
    master: bool
    _wake: trio.Event
    _changed: bool
    _skip: set[int]
    _confirmed: dict[int, int]
    _enqueued_phy_max: int
    delivered: int
    rolled: int
    enqueued: int
    delivered_by_topic: dict[str, int]
    timing_by_topic: dict[str, int] | None
    enqueued_by_topic: dict[str, int]
    stalled: tuple[int, int] | None
    lags: Any
    lags_from_ms: int
    _truncated_at: int | None

    def set_role(self, master: bool) -> None:
        """``pyrmq_role_changed``: deliver from now on (the master of the group), or stop (a replica following
        one). The loop acts on it at once: a new master delivers what is due without waiting for a new message."""
        if master != self.master:
            self.master = master
            log.info("timer: %s", "delivering (master)" if master else "not delivering (not the master)")
            self._wake.set()

    # -- enqueue -------------------------------------------------------------------------------------------------

    def enqueue(self, limit: int = ENQUEUE_BATCH) -> int:
        """Move up to ``limit`` new consume-queue entries of the timer topic into the wheel; how many were read."""
        cq = self.store.consume_queues.get(TIMER_TOPIC, 0)
        if cq is None:
            return 0
        offset = self.enqueue_offset
        if offset > cq.max_offset:
            # the queue lost its tail (a failover replica truncated what its new master never had): take what
            # now stands at those offsets
            log.warning("timer: the %s queue ends at %d, enqueued up to %d: its tail was truncated", TIMER_TOPIC,
                        cq.max_offset, offset)
            offset = self.enqueue_offset = cq.max_offset
        if offset >= cq.max_offset:
            return 0
        if offset < cq.min_offset:
            log.warning("timer: queue offsets %d..%d were removed by retention", offset, cq.min_offset - 1)
            offset = cq.min_offset
        units = cq.units_from(offset, limit)
        if units is None:
            self.enqueue_offset = cq.roll_next_file(offset)
            return 1
        wheel = self.wheel
        skip = self._skip
        confirmed = self._confirmed
        roll_at = self.clock() + self.roll_ms
        by_topic = self.timing_by_topic
        n = 0
        for phy, size, unit_ms in units:
            n += 1
            if size == BLANK_SIZE:
                continue
            if skip and phy in skip:
                skip.discard(phy)  # delivered before a crash: not again
                continue
            if confirmed and phy in confirmed:  # delivered by the master this broker follows: its copy is here
                self._remember(confirmed.pop(phy), (unit_ms, phy, size, 0))
                continue
            props = stored_properties(self.store, phy, size)
            # the delivery time is the record's (the unit holds the same when the store derived it; a store
            # written without the resolver, or by another broker, may hold the hash of TAGS)
            deliver_ms = deliver_ms_of(props) if props is not None else None
            if deliver_ms is None:
                deliver_ms = unit_ms
            if deliver_ms > roll_at:
                wheel.insert(phy, size, roll_at, FLAG_ROLL)
            else:
                wheel.insert(phy, size, deliver_ms)
            if phy > self._enqueued_phy_max:
                self._enqueued_phy_max = phy
            self.enqueued += 1
            if by_topic is not None:
                topic = real_topic_of(props) if props is not None else ""
                by_topic[topic] = by_topic.get(topic, 0) + 1
                self.enqueued_by_topic[topic] = self.enqueued_by_topic.get(topic, 0) + 1
        self.enqueue_offset = offset + n
        if n:
            self._changed = True
        return n

    # -- the loop ------------------------------------------------------------------------------------------------

    async def _wheel_loop(self) -> None:
        while True:
            if self._truncated_at is not None:
                self._after_truncation()
            wheel = self.wheel
            if wheel is None:
                return  # closed
            while self.enqueue():
                await trio.sleep(0)
            now_sec = self.clock() // 1000
            master = self.master
            due = wheel.advance(now_sec if master else self._replica_horizon(now_sec))
            if due is not None:
                self._changed = True
                failed = self._deliver_all(due) if master else self._confirm_all(due)
                if self._skip and not wheel.size and not self._behind():
                    self._skip = set()  # nothing left that an entry could match
                for deliver_ms, phy, size, flags in failed:
                    wheel.insert(phy, size, deliver_ms, flags)
                if failed and master:
                    self.stalled = (len(failed), failed[0][0])
                    with trio.move_on_after(RETRY_AFTER_S):
                        await self._wake.wait()  # (or a role change)
                    self._wake = trio.Event()
                else:
                    self.stalled = None
                    await trio.sleep(0)
                continue
            nxt = wheel.next_work()
            if nxt is not None and not master and nxt > self._replica_horizon(nxt):
                nxt = None  # the master has not come that far: its next copy wakes the loop
            timeout = math.inf if nxt is None else max(0.0, (nxt * 1000 - self.clock()) / 1000)
            with trio.move_on_after(timeout):
                await self._wake.wait()
            self._wake = trio.Event()

    def _behind(self) -> bool:
        cq = self.store.consume_queues.get(TIMER_TOPIC, 0)
        return cq is not None and self.enqueue_offset < cq.max_offset

    def _deliver_all(self, due: list[Entry]) -> list[Entry]:
        """Deliver (or refresh) each due entry; the entries from the first the store refused on (put back)."""
        skip = self._skip
        confirmed = self._confirmed
        for i, entry in enumerate(due):
            deliver_ms, phy, size, flags = entry
            if skip and phy in skip:
                skip.discard(phy)
                continue
            if confirmed:
                copy_at = confirmed.pop(phy, None)
                if copy_at is not None:  # delivered by the master this broker followed: its copy is here
                    self._remember(copy_at, entry)
                    continue
            if not self.master:
                return due[i:]  # deposed meanwhile: the new master delivers the rest
            self.checkpoint.intent(phy, self.store.max_phy_offset)
            ok = self._roll(entry) if flags & FLAG_ROLL else self.deliver(phy, size, deliver_ms, flags)
            if not ok:
                return due[i:]
            self.checkpoint.done(phy)
        return []

    def _parked(self, phy: int, size: int) -> Any | None:
        msg = self.store.look_message_by_offset(phy, size)
        if msg is None:
            log.warning("timer: the parked record at %d is gone (retention?); skipped", phy)
        elif msg.topic != TIMER_TOPIC:
            log.warning("timer: the record at %d is no longer a parked one (%s; truncated?); skipped", phy, msg.topic)
            return None
        return msg

    def deliver(self, phy: int, size: int, deliver_ms: int = 0, flags: int = 0) -> bool:
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
        properties[PROPERTY_PARKED_OFFSET] = str(phy)
        result = self.store.put_message(msg.to_record(topic, queue_id, properties))
        if result.status is not PutMessageStatus.PUT_OK:
            log.warning("timer: delivering the record at %d failed: %s %s", phy, result.status.name, result.remark or "")
            return False
        self._remember(result.append.wrote_offset, (deliver_ms, phy, size, flags))
        self.delivered += 1
        self.delivered_by_topic[topic] = self.delivered_by_topic.get(topic, 0) + 1
        self._left_wheel(topic)
        if self.lags is not None and deliver_ms >= self.lags_from_ms:
            self.lags.append(result.append.store_timestamp - deliver_ms)
        return True

    def _roll(self, entry: Entry) -> bool:
        """Re-append a far-future record so that commit-log retention never removes it before it is due."""
        _, phy, size, _ = entry
        msg = self._parked(phy, size)
        if msg is None:
            return True
        properties = msg.properties
        properties[PROPERTY_PARKED_OFFSET] = str(phy)
        deliver_ms = _deliver_ms(properties)
        result = self.store.put_message(msg.to_record(TIMER_TOPIC, 0, properties, tags_code=deliver_ms))
        if result.status is not PutMessageStatus.PUT_OK:
            return False
        self._remember(result.append.wrote_offset, entry)
        self.rolled += 1
        self._left_wheel(properties.get(PROPERTY_REAL_TOPIC, ""))  # its new copy is counted when enqueued
        return True


def _deliver_ms(properties: dict[str, str]) -> int:
    try:
        return int(properties.get(PROPERTY_TIMER_DELIVER_MS, "0"))
    except ValueError:
        return 0

