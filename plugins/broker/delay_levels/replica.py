"""How delay-level progress reaches the next master.

From the replicated store itself: every delivered copy carries :data:`~.scheduler.PROPERTY_PARKED_OFFSET`, the
commit-log offset of its parked record, whose header names the level (queue id + 1) and its queue offset. On a
broker that is not the master, a store dispatcher (:class:`CopyWatcher`) moves the level's progress past each parked
record whose copy is replicated (mapped progress file at once, delayOffset.json with the next flush), so an elected
replica resumes exactly after the last copy it holds: nothing early (only due entries are delivered), nothing lost
(progress never passes an entry whose copy is not here), and what consumers can read is never delivered twice (a
copy that reached no in-sync replica was never readable, and the old master cuts it when it returns).

From the master's table too (:class:`DelayOffsetSync`, a step of the HA plugin's metadata sync through
``pyrmq_register_slave_sync``): RocketMQ's SlaveSynchronize.syncDelayOffset, which is all a slave of a Java master
(whose copies do not name their parked record) has; that one repeats what was delivered since the last sync round.

A truncation (a failover replica dropping a tail its new master never had) moves each level's progress back before
the first copy it cut (the last :data:`~.progress.HISTORY` changes per level are remembered; beyond them the index
is asked whether each entry's copy is still there).
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable
from typing import Any

from pyrmq.plugins.broker.delay_levels.scheduler import PROPERTY_PARKED_OFFSET, PROPERTY_REAL_TOPIC
from pyrmq.remoting.codes import RequestCode
from pyrmq.remoting.vocabulary import SCHEDULE_TOPIC
from pyrmq.store.consume_queue import BLANK_SIZE

log = logging.getLogger("pyrmq.delay_levels")

#: entries walked back per level after a truncation beyond the remembered history
WALK_BACK_MAX = 100_000


class CopyWatcher:
    """A store dispatcher: on a broker that is not the master, each replicated delivered copy moves its level's
    progress; a truncation moves it back. Marked ``replicated_only``: the store hands it
    only what ``append_raw`` brings from a master, so a master's appends never call it."""

    name = "delay-copies"
    order = 40
    #: only records replicated from the master reach it (nothing on the append path)
    replicated_only = True

    def __init__(self, service: Any) -> None:
        self.service = service

    def dispatch(self, request: Any) -> None:
        if not self.service.master:
            self.service.copy_replicated(request)

    def truncated(self, offset: int) -> None:
        self.service.truncated(offset)


class DelayOffsetSync:
    """The metadata-sync step (``pyrmq_register_slave_sync``): the master's delayOffset.json document."""

    name = "delay-offsets"

    def __init__(self, service: Any) -> None:
        self.service = service
        self.written: dict[int, int] | None = None

    async def sync(self, fetch: Callable[[int], Any]) -> None:
        document = await fetch(RequestCode.GET_ALL_DELAY_OFFSET)
        table = {int(k): int(v) for k, v in (document.get("offsetTable") or {}).items()}
        master_offset = document.get("commitLogMaxOffset")
        service = self.service
        service.adopt_master_table(table, int(master_offset) if master_offset is not None else None)
        if service.offsets != self.written:
            # delayOffset.json written at once, as SlaveSynchronize does (a restart as master reads it)
            service.persist()
            self.written = dict(service.offsets)


class DelayReplica:
    """Mixed into :class:`~.service.DelayLevelService`: the copies seen on a replica, truncations."""

    store: Any
    clock: Callable[[], int]
    offsets: dict[int, int]
    master: bool
    _history: dict[int, collections.deque[tuple[int, int]]]
    _history_overflowed: set[int]


    def copy_replicated(self, request: Any) -> None:
        """A record replicated from the master (the :class:`CopyWatcher`): if it is a delivered copy of a parked
        record, that record's level has come past it."""
        text = request.properties.get(PROPERTY_PARKED_OFFSET)
        if text is None or request.topic == SCHEDULE_TOPIC:
            return
        try:
            phy = int(text)
        except ValueError:
            return
        if not 0 <= phy < request.commit_log_offset:
            return
        parked = self.store.look_message_by_offset(phy)
        if parked is None or parked.topic != SCHEDULE_TOPIC:
            return
        level = parked.queue_id + 1
        if parked.queue_offset + 1 > self.offsets.get(level, 0):
            self._advance(level, parked.queue_offset + 1, request.commit_log_offset)

    def truncated(self, offset: int) -> None:
        """The store cut its commit log at ``offset``: each level's progress goes back before the first copy cut,
        and no further than its queue's end."""
        for level, history in self._history.items():
            before = None
            while history and history[-1][0] >= offset:
                before = history.pop()[1]
            if before is None:
                continue
            if not history and level in self._history_overflowed:
                before = self._walk_back(level, before)
            log.warning("delay level %d: copies from offset %d on were cut: progress %d -> %d", level, offset,
                        self.offsets.get(level, 0), before)
            self._advance(level, before)
        for level, progress in list(self.offsets.items()):
            cq = self.store.consume_queues.get(SCHEDULE_TOPIC, level - 1)
            end = cq.max_offset if cq is not None else 0
            if progress > end:
                self._advance(level, end)

    def _walk_back(self, level: int, progress: int) -> int:
        """The first offset below ``progress`` whose entry's copy is gone, asking the index entry by entry."""
        floor = max(0, progress - WALK_BACK_MAX)
        while progress > floor and not self._copy_exists(level, progress - 1):
            progress -= 1
        return progress

    def _copy_exists(self, level: int, offset: int) -> bool:
        """Is the copy of the level's entry at ``offset`` in the store? (the index, by the message's UNIQ_KEY in its
        real topic, stored after the parked record)"""
        store = self.store
        cq = store.consume_queues.get(SCHEDULE_TOPIC, level - 1)
        if cq is None or offset >= cq.max_offset or offset < cq.min_offset:
            return False
        units = list(cq.units_from(offset, 1) or ())
        if not units or units[0][1] == BLANK_SIZE:
            return False
        parked = store.look_message_by_offset(units[0][0], units[0][1])
        uniq = parked.properties.get("UNIQ_KEY") if parked is not None else None
        topic = parked.properties.get(PROPERTY_REAL_TOPIC) if parked is not None else None
        if not uniq or not topic:
            return False
        found = store.query_message(topic, uniq, 4, parked.store_timestamp, self.clock() + 60_000)
        return bool(found.message_count)
