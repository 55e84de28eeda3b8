"""How the timer's progress reaches the next master: from the replicated store itself.

Every copy the timer appends (a delivered copy in the real topic, a refreshed parked copy under the timer topic)
carries :data:`~.records.PROPERTY_PARKED_OFFSET`, the commit-log offset of the parked record it was made from. A
replica that is not the master runs the same wheel as the master over its replicated store, and a store dispatcher
(:class:`CopyWatcher`) watches the replicated records: each copy confirms its parked record (written to the ``done``
file at once, so it survives a crash of the replica), and a delivered copy's delivery second tells how far the
master has come (every earlier second is processed: it works through its wheel in time order). The replica's wheel
advances only that far; a due entry whose copy arrived is dropped, one whose copy did not stays in the wheel. When
the replica is elected it delivers exactly what stayed: what the old master never delivered, or delivered without the
copy reaching this replica (a copy no in-sync replica acknowledged, which consumers never read and the old master
cuts from its log when it returns). Never early (only what is due), never lost (nothing leaves the wheel without a
copy in this replica's log), and nothing consumers read is delivered twice.

A truncation (a failover replica dropping a tail its new master never had) may remove copies: the last
:data:`RECENT` copies made or seen are remembered, and their parked records go back into the wheel when their copy
is cut; entries whose parked record itself was cut leave the wheel (docs/decisions.md).
"""

from __future__ import annotations

import logging
from array import array
from typing import Any

import trio

from pyrmq.plugins.broker.timer.checkpoint import TimerCheckpoint
from pyrmq.plugins.broker.timer.records import (
    PROPERTY_PARKED_OFFSET,
    PROPERTY_TIMER_DELIVER_MS,
    TIMER_TOPIC,
    real_topic_of,
    stored_properties,
)
from pyrmq.plugins.broker.timer.wheel import TimingWheel, ceil_sec

log = logging.getLogger("pyrmq.timer")

#: copies remembered for truncations (~8 s of deliveries at the bench's 8k/s; 2.6 MB once the first is made)
RECENT = 65536

Entry = tuple[int, int, int, int]  # deliver_ms, phy, size, flags


class RecentCopies:
    """A ring of the last ``capacity`` copies: (copy offset, the wheel entry it came from), in five ``array('q')``
    columns (nothing per copy in Python objects)."""

    def __init__(self, capacity: int = RECENT) -> None:
        self.capacity = capacity
        self.pushed = 0
        self._cols: list[array[int]] | None = None

    def push(self, copy_at: int, entry: Entry) -> None:
        cols = self._cols
        if cols is None:
            cols = self._cols = [array("q", bytes(8 * self.capacity)) for _ in range(5)]
        i = self.pushed % self.capacity
        cols[0][i] = copy_at
        cols[1][i], cols[2][i], cols[3][i], cols[4][i] = entry
        self.pushed += 1

    def cut(self, offset: int) -> list[Entry]:
        """The entries whose copy lies at or beyond ``offset`` (forgotten from here on)."""
        cols = self._cols
        if cols is None:
            return []
        out = []
        copies = cols[0]
        for i in range(min(self.pushed, self.capacity)):
            if copies[i] >= offset:
                out.append((cols[1][i], cols[2][i], cols[3][i], cols[4][i]))
                copies[i] = -1
        return out


class CopyWatcher:
    """A store dispatcher: on a broker that is not the master, each replicated record carrying
    :data:`~.records.PROPERTY_PARKED_OFFSET` confirms that parked record (:meth:`ReplicaConfirmation.copy_replicated`);
    a truncation puts back what it cut. Marked ``replicated_only``: the store hands it
    only what ``append_raw`` brings from a master, so a master's appends never call it."""

    name = "timer-copies"
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


class ReplicaConfirmation:
    """Mixed into :class:`~.service.TimerService`: the copies seen, how far the master has come, truncations."""

    store: Any
    checkpoint: TimerCheckpoint
    wheel: TimingWheel | None
    master: bool
    enqueue_offset: int
    timing_by_topic: dict[str, int] | None
    _skip: set[int]
    _wake: trio.Event
    _changed: bool
    _enqueued_phy_max: int
    #: parked offset -> commit-log offset of the master's copy of it, seen and not yet matched against the wheel
    _confirmed: dict[int, int]
    #: the master has processed every second before this one (from its delivered copies; 0: none seen)
    _frontier: int
    _recent: RecentCopies
    #: where the store was cut, until the loop has put the wheel right (None: no truncation pending)
    _truncated_at: int | None


    def copy_replicated(self, request: Any) -> None:
        """A record replicated from the master (the :class:`CopyWatcher`): if it is a copy of a parked record, that
        record is confirmed."""
        text = request.properties.get(PROPERTY_PARKED_OFFSET)
        if text is None:
            return
        try:
            phy = int(text)
        except ValueError:
            return
        if not 0 <= phy < request.commit_log_offset:
            return  # not a copy of a record before it
        self._confirmed[phy] = request.commit_log_offset
        if self.wheel is not None:  # (before load, :meth:`~.service.TimerService.load` writes them)
            self.checkpoint.done(phy)
        if request.topic != TIMER_TOPIC:
            try:
                second = ceil_sec(int(request.properties.get(PROPERTY_TIMER_DELIVER_MS, "")))
            except ValueError:
                return
            if second > self._frontier:
                self._frontier = second
                self._wake.set()

    def _replica_horizon(self, now_sec: int) -> int:
        """The last second a replica that is not the master may process: what its master has come past."""
        return min(now_sec, self._frontier - 1)

    def _confirm_all(self, due: list[Entry]) -> list[Entry]:
        """On a replica that is not the master: drop each due entry the master's copy confirmed; the rest stay."""
        owed = []
        confirmed = self._confirmed
        skip = self._skip
        for entry in due:
            phy = entry[1]
            copy_at = confirmed.pop(phy, None)
            if copy_at is not None:
                self._remember(copy_at, entry)
                if self.timing_by_topic is not None:
                    props = stored_properties(self.store, phy, entry[2])
                    self._left_wheel(real_topic_of(props) if props is not None else "")
            elif skip and phy in skip:
                skip.discard(phy)
            else:
                owed.append(entry)
        return owed

    def _remember(self, copy_at: int, entry: Entry) -> None:
        self._recent.push(copy_at, entry)

    # -- truncation ----------------------------------------------------------------------------------------------

    def truncated(self, offset: int) -> None:
        """The store cut its commit log at ``offset`` (:class:`CopyWatcher`); the loop puts the wheel right."""
        self._truncated_at = offset if self._truncated_at is None else min(offset, self._truncated_at)
        self._wake.set()

    def _after_truncation(self) -> None:
        cut, self._truncated_at = self._truncated_at, None
        wheel = self.wheel
        if cut is None or wheel is None:
            return
        for phy, copy_at in list(self._confirmed.items()):
            if copy_at >= cut:
                del self._confirmed[phy]
        back = [entry for entry in self._recent.cut(cut) if entry[1] < cut]
        dropped = 0
        if self._enqueued_phy_max >= cut:
            # entries whose parked record was cut: their parked record no longer exists here
            entries = list(wheel.entries())
            kept = [e for e in entries if e[1] < cut]
            dropped = len(entries) - len(kept)
            wheel.clear()
            for deliver_ms, phy, size, flags in kept:
                wheel.insert(phy, size, deliver_ms, flags)
            self._enqueued_phy_max = max((e[1] for e in kept), default=-1)
        for deliver_ms, phy, size, flags in back:
            wheel.insert(phy, size, deliver_ms, flags)
        self._changed = True
        # the done files list what was put back: a snapshot now, so that a crash does not skip those
        self._write_snapshot_now()
        log.warning("timer: the commit log was cut at %d: %d parked records whose copy was cut are due again, %d "
                    "entries whose parked record was cut are gone", cut, len(back), dropped)
