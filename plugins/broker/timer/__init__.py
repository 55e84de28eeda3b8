"""Arbitrary-time delivery (beyond RocketMQ 4.x; the property names are RocketMQ 5.x's): the timer plugin.

A message with ``TIMER_DELIVER_MS`` (absolute epoch ms) or ``TIMER_DELAY_SEC`` (seconds from now) due later than now
is parked under ``rmq_sys_wheel_timer`` and re-written to its real topic when due, never early, at most a second
late, on the master of its group only. The package, one job a module:

- :mod:`.scheduler`: the put interceptor that parks (and the parked records' tags code, for the store's resolver);
- :mod:`.wheel`: the persistent hierarchical timing wheel (no trio, no store);
- :mod:`.delivery`: the loop that enqueues parked records and delivers (or refreshes) due ones;
- :mod:`.replica`: how a replica follows its master's deliveries from the replicated copies (failover);
- :mod:`.checkpoint`: the snapshot and ``done`` files (progress that survives kill -9);
- :mod:`.records`: the names the timer owns in stored records;
- :mod:`.metrics`: the 5.x series; :mod:`.settings`: ``timerMaxDelaySec``, ``timerFlushIntervalMs``;
- :mod:`.service`: :class:`TimerService`, the one object the rest is mixed into, and its life cycle;
- this module: the plugin (``pyrmq.plugins.broker.timer`` in a bundle): :class:`TimerPlugin`, registered as a plugin
  object by ``pyrmq_configure``, answers the hooks.

See docs/delay.md.
"""

from __future__ import annotations

import os
from typing import Any

import trio

from pyrmq.kernel.hookspecs import hookimpl
from pyrmq.kernel.types import MetricCollector, RoleChange, Scheduler, StoreDispatcher
from pyrmq.plugins.broker.timer.records import TIMER_TOPIC
from pyrmq.plugins.broker.timer.replica import CopyWatcher
from pyrmq.plugins.broker.timer.service import TimerService
from pyrmq.plugins.broker.timer.settings import DAY_S, TimerPluginSettings, TimerSettings

__all__ = ["TIMER_TOPIC", "TimerPlugin", "TimerService", "TimerSettings"]

PLUGIN = "pyrmq.plugins.broker.timer"


class TimerPlugin:
    """The timer of one broker, registered as a plugin object (``broker.timer``): its methods are the hooks."""

    def __init__(self, kernel: Any, ctx: Any) -> None:
        settings = ctx.settings
        own = kernel.settings(TimerSettings)
        limit_s = kernel.settings(TimerPluginSettings).max_delay_s(own)
        self.broker_settings = settings
        #: delivers only once ``pyrmq_role_changed`` says this broker is the master
        self.service = TimerService(
            ctx.store,
            os.path.join(str(settings.store_root), "timerwheel"),
            retention_hours=settings.fileReservedTime,
            flush_interval_s=own.timerFlushIntervalMs / 1000,
            max_delay_days=limit_s / DAY_S,
            deliver=False,
        )
        self.watcher = CopyWatcher(self.service)

    @hookimpl(trylast=True)
    def pyrmq_register_schedulers(self) -> list[Scheduler]:
        return [self.service]

    @hookimpl(trylast=True)
    def pyrmq_register_store_dispatchers(self) -> list[StoreDispatcher]:
        return [self.watcher]

    @hookimpl(trylast=True)
    def pyrmq_register_metric_collectors(self, role: str) -> list[MetricCollector] | None:
        if role != "broker":
            return None
        from pyrmq.plugins.broker.timer.metrics import TimerCollector

        self.service.track_topics()  # rocketmq_timing_messages by topic
        return [TimerCollector(self.service, self.broker_settings)]

    @hookimpl(trylast=True)
    async def pyrmq_serve(self, nursery: trio.Nursery) -> None:
        await nursery.start(self.service.run)

    @hookimpl
    async def pyrmq_role_changed(self, change: RoleChange) -> None:
        self.service.set_role(change.is_master)

    @hookimpl
    async def pyrmq_unconfigure(self) -> None:
        self.service.close()  # before the core (trylast) closes the store


@hookimpl(trylast=True)
def pyrmq_register_settings() -> dict[str, Any]:
    return {"broker": TimerSettings, f"plugins.{PLUGIN}": TimerPluginSettings}


@hookimpl(trylast=True)
def pyrmq_configure(kernel: Any) -> None:
    from pyrmq.plugins.broker.core import BROKER

    ctx = kernel.state.find(BROKER)
    if ctx is not None:
        kernel.register(TimerPlugin(kernel, ctx), "broker.timer")
