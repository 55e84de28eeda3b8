"""Delay-level delivery: one task per level walks its queue from the progress offset, on the master only.

An entry not yet due puts the level to sleep until it is; a due entry is re-written to its real topic and queue
with the same body, flag, sysFlag, born time/host, reconsume times and properties minus ``DELAY`` plus
:data:`~.scheduler.PROPERTY_PARKED_OFFSET` (new store time and offset). The level tasks run while
``pyrmq_role_changed`` says this broker is the master (:meth:`DelayDelivery.set_role`): started when it becomes
master (from the progress its replicated store gave it), cancelled when it stops being one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import trio

from pyrmq.plugins.broker.delay_levels.scheduler import (
    PROPERTY_DELAY,
    PROPERTY_PARKED_OFFSET,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
)
from pyrmq.remoting.vocabulary import SCHEDULE_TOPIC
from pyrmq.store.consume_queue import BLANK_SIZE
from pyrmq.store.results import PutMessageStatus

log = logging.getLogger("pyrmq.delay_levels")

#: how long a level waits before retrying a delivery the store refused (Java: 10 s)
RETRY_AFTER_S = 1.0
#: units read from a level's consume queue per pass
BATCH = 256


class DelayDelivery:
    """Mixed into :class:`~.service.DelayLevelService`: the per-level delivery tasks and the role they follow."""

    store: Any
    clock: Callable[[], int]
    max_level: int
    offsets: dict[int, int]
    #: whether this broker delivers (the master of its group)
    master: bool
    delivered: int
    #: where the last delivery's copy went (None: nothing was delivered)
    last_copy: int | None
    _wake: dict[int, trio.Event]
    _role_event: trio.Event


    def set_role(self, master: bool) -> None:
        """``pyrmq_role_changed``: deliver from now on (the master of the group), or stop (a replica following one)."""
        if master != self.master:
            self.master = master
            log.info("delay levels: %s", "delivering (master)" if master else "not delivering (not the master)")
            self._role_event.set()
            self._role_event = trio.Event()

    async def _deliver_while_master(self) -> None:
        """Run the level tasks while master; cancel them when the broker stops being master."""
        while True:
            while not self.master:
                await self._role_event.wait()
            async with trio.open_nursery() as nursery:
                levels = set(range(1, self.max_level + 1))
                # queues left by a longer level table of an earlier run still get delivered
                levels |= {q + 1 for (topic, q) in self.store.topic_queues() if topic == SCHEDULE_TOPIC}
                for level in sorted(levels):
                    nursery.start_soon(self._level_loop, level)
                while self.master:
                    await self._role_event.wait()
                nursery.cancel_scope.cancel()  # (level tasks await only between deliveries)

    def _delivered_before_crash(self, level: int) -> bool:
        """After a crash: was the message at the level's resume offset delivered already? The delivered copy is
        appended before the progress slot is written, so a kill between the two leaves the copy in the commit log
        and the progress one behind; the index (rebuilt by recovery) finds the copy by the message's UNIQ_KEY."""
        report = getattr(self.store, "recovery_report", None)
        if report is None or not report.abnormal:
            return False
        offset = self.offsets.get(level, 0)
        if not self._copy_exists(level, offset):
            return False
        log.info("delay level %d: the message at offset %d was delivered just before the crash; not again", level, offset)
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
            if cq is not None and offset > cq.max_offset:
                # the queue lost its tail (a failover replica truncated what its new master never had)
                log.warning("delay level %d: queue ends at %d, progress was %d", level, cq.max_offset, offset)
                self._advance(level, cq.max_offset)
                continue
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
                copy_at = None
                if size != BLANK_SIZE:
                    now = self.clock()
                    # a delivery time beyond now + delay (clock moved back, or another level table) is due now
                    if deliver_ms > now + delay:
                        deliver_ms = now
                    if deliver_ms > now:
                        wait_s = (deliver_ms - now) / 1000
                        break
                    msg = store.look_message_by_offset(phy, size)
                    # never deliver earlier than store time + delay (a unit written by another broker may say less)
                    if msg is not None and now < msg.store_timestamp + delay <= now + delay:
                        wait_s = (msg.store_timestamp + delay - now) / 1000
                        break
                    if not self.deliver(phy, size, level, msg):
                        wait_s = RETRY_AFTER_S
                        break
                    copy_at = self.last_copy
                offset += 1
                self._advance(level, offset, copy_at)
            await trio.sleep(wait_s)

    def deliver(self, phy: int, size: int, level: int = 0, msg: Any = None) -> bool:
        """Re-write the parked record at ``phy`` to its real topic and queue; False if the store refused it. The
        copy's commit-log offset is :attr:`last_copy` (None when there was nothing to deliver)."""
        self.last_copy = None
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
        properties[PROPERTY_PARKED_OFFSET] = str(phy)
        result = self.store.put_message(msg.to_record(topic, queue_id, properties))
        if result.status is not PutMessageStatus.PUT_OK:
            log.warning("delay level %d: delivering the record at %d failed: %s %s", level, phy,
                        result.status.name, result.remark or "")
            return False
        self.delivered += 1
        self.last_copy = result.append.wrote_offset
        return True
