"""The timer feature as one object: scheduler, wheel loop, replica confirmations and gauges mixed into
:class:`TimerService`, with its life cycle (load, snapshots, close) here.

Recovery: the last snapshot, the consume queue re-enqueued from its offset, minus what the ``done`` files list
(:mod:`.checkpoint`); each message is delivered once. The kill window between a delivery's append and its ``done``
entry is closed by the *intent* entry written before each copy: after a crash, an intent without its ``done`` entry
is the one delivery that was under way; if the record at the offset it names is that copy (same ``UNIQ_KEY``, the
real topic or the timer topic), it is skipped like a listed one, otherwise delivered. See docs/delay.md.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

import trio

from pyrmq.plugins.broker.timer.checkpoint import TimerCheckpoint
from pyrmq.plugins.broker.timer.delivery import WheelDelivery
from pyrmq.plugins.broker.timer.metrics import TimerGauges
from pyrmq.plugins.broker.timer.records import PROPERTY_REAL_TOPIC, TIMER_TOPIC
from pyrmq.plugins.broker.timer.replica import RecentCopies, ReplicaConfirmation
from pyrmq.plugins.broker.timer.scheduler import DAY_MS, TimerScheduling
from pyrmq.plugins.broker.timer.settings import MAX_DELAY_DAYS
from pyrmq.plugins.broker.timer.wheel import TimingWheel

log = logging.getLogger("pyrmq.timer")


class TimerService(TimerScheduling, WheelDelivery, ReplicaConfirmation, TimerGauges):
    """The ``TIMER_DELIVER_MS`` / ``TIMER_DELAY_SEC`` scheduler and its wheel service over ``store``, persisted in
    ``directory``. ``deliver``: whether it starts as the master (the plugin starts it False and follows
    ``pyrmq_role_changed``)."""

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
        self.master = deliver
        self.checkpoint = TimerCheckpoint(directory)
        self.wheel: TimingWheel | None = None
        self.enqueue_offset = 0
        self._skip: set[int] = set()
        self._confirmed: dict[int, int] = {}
        self._frontier = 0
        self._recent = RecentCopies()
        self._truncated_at: int | None = None
        self._enqueued_phy_max = -1
        self._wake = trio.Event()
        self._changed = False
        self.delivered = 0
        self.rolled = 0
        #: messages put into the wheel (rocketmq_timer_enqueue_total; ``delivered`` is the dequeue total)
        self.enqueued = 0
        #: per real topic: deliveries (rocketmq_timer_dequeue_total{topic})
        self.delivered_by_topic: dict[str, int] = {}
        self.timing_by_topic: dict[str, int] | None = None
        self.enqueued_by_topic: dict[str, int] = {}
        self.stalled: tuple[int, int] | None = None
        #: lateness in ms of each delivery due at or after ``lags_from_ms`` (only when a list is assigned: benchmarks)
        self.lags: Any = None
        self.lags_from_ms = 0

    @property
    def clock(self) -> Callable[[], int]:
        return self.store.clock  # type: ignore[no-any-return]

    @property
    def deliver_enabled(self) -> bool:
        return self.master

    # -- life cycle ----------------------------------------------------------------------------------------------

    def load(self) -> None:
        os.makedirs(self.directory, exist_ok=True)
        log_dir = os.path.join(self.directory, "timerlog")
        wheel = TimingWheel(log_dir, self.clock() // 1000)
        self.enqueue_offset, done, under_way, restored = self.checkpoint.load(wheel)
        if not restored and os.listdir(log_dir):
            log.warning("timer: no snapshot in %s (none written yet, or lost); rebuilding the wheel from the %s queue",
                        self.directory, TIMER_TOPIC)
        # deliveries and refreshes made (or seen) after the snapshot: skip them while catching up
        self._skip |= done
        for phy, copy_at in under_way.items():
            if self._copied_before_crash(phy, copy_at):
                self._skip.add(phy)
        if self._skip:
            log.info("timer: %d deliveries made after the last snapshot will not be repeated", len(self._skip))
        for phy in self._confirmed:  # master's copies replicated before this load
            self.checkpoint.done(phy)
        self.wheel = wheel
        if self.timing_by_topic is not None:
            self._count_wheel()
        log.info("timer wheel at %d s: %d entries, enqueue offset %d", wheel.cur, wheel.size, self.enqueue_offset)

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

    def _carry(self) -> set[int]:
        """What a new ``done`` file starts with: entries not matched against the wheel yet (those whose parked record
        retention removed meanwhile can no longer match anything: forgotten)."""
        low = self.store.min_phy_offset
        if self._skip:
            self._skip = {phy for phy in self._skip if phy >= low}
        for phy in [phy for phy in self._confirmed if phy < low]:
            del self._confirmed[phy]
        return self._skip | set(self._confirmed)

    async def _snapshot(self) -> None:
        wheel = self.wheel
        assert wheel is not None
        self._changed = False
        data, gen, dead = self.checkpoint.prepare(wheel, self.enqueue_offset, self._carry())
        await trio.to_thread.run_sync(self.checkpoint.write, data, gen, wheel)
        if self.wheel is not None:  # (not closed meanwhile)
            self.wheel.delete_segments(dead)

    def _write_snapshot_now(self) -> None:
        """Blocking snapshot (after a truncation put entries back: rare)."""
        wheel = self.wheel
        assert wheel is not None
        self._changed = False
        data, gen, dead = self.checkpoint.prepare(wheel, self.enqueue_offset, self._carry())
        self.checkpoint.write(data, gen, wheel)
        wheel.delete_segments(dead)

    def close(self) -> None:
        """Final snapshot (shutdown)."""
        wheel = self.wheel
        if wheel is None:
            return
        self._changed = False
        data, gen, dead = self.checkpoint.prepare(wheel, self.enqueue_offset, self._carry())
        self.checkpoint.write(data, gen, wheel)
        self.checkpoint.close(wheel, dead)
        self.wheel = None
        self._wake.set()  # (the loop ends)

    # -- service -------------------------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Enqueue, deliver while master (confirm the master's copies otherwise) and save progress until cancelled."""
        if self.wheel is None:
            self.load()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._snapshot_loop)
            nursery.start_soon(self._wheel_loop)
            task_status.started()

    async def _snapshot_loop(self) -> None:
        while True:
            await trio.sleep(self.flush_interval_s)
            if self.wheel is None:
                return  # closed
            if self._changed:
                await self._snapshot()
