"""Delay levels: RocketMQ 4.x's 18 fixed delays (spec 7.6, 5.3, 6.6 delayOffset.json), the delay-levels plugin.

A message whose ``DELAY`` property is a level > 0 is parked under ``SCHEDULE_TOPIC_XXXX`` queue ``level - 1`` and
re-written to its real topic when due, on the master of its group only. The package, one job a module:

- :mod:`.scheduler`: the put interceptor that parks (and the parked records' tags code, for the store's resolver);
- :mod:`.delivery`: the per-level delivery tasks, run while the broker is master;
- :mod:`.progress`: the progress table, delayOffset.json and the crash-proof mapped progress file;
- :mod:`.replica`: how a replica follows its master's deliveries (replicated copies, the metadata-sync step);
- :mod:`.settings`: ``messageDelayLevel``, ``flushDelayOffsetInterval``;
- :mod:`.service`: :class:`DelayLevelService`, the one object the rest is mixed into;
- this module: the plugin (``pyrmq.plugins.broker.delay_levels`` in a bundle): :class:`DelayLevelsPlugin`,
  registered as a plugin object by ``pyrmq_configure``, answers the hooks.

See docs/delay.md.
"""

from __future__ import annotations

from typing import Any

import trio

from pyrmq.kernel.hookspecs import hookimpl
from pyrmq.kernel.types import Processor, RoleChange, Scheduler, SlaveSyncStep, StoreDispatcher
from pyrmq.plugins.broker.delay_levels.replica import CopyWatcher, DelayOffsetSync
from pyrmq.plugins.broker.delay_levels.service import DelayLevelService
from pyrmq.plugins.broker.delay_levels.settings import DelayLevelSettings, parse_delay_levels
from pyrmq.remoting.codes import RequestCode
from pyrmq.remoting.vocabulary import SCHEDULE_TOPIC

__all__ = ["SCHEDULE_TOPIC", "DelayLevelService", "DelayLevelSettings", "DelayLevelsPlugin", "parse_delay_levels"]


class DelayLevelsPlugin:
    """The delay levels of one broker, registered as a plugin object (``broker.delay_levels``)."""

    def __init__(self, kernel: Any, ctx: Any) -> None:
        own = kernel.settings(DelayLevelSettings)
        #: delivers only once ``pyrmq_role_changed`` says this broker is the master
        self.service = DelayLevelService(
            ctx.store, own.delay_levels_ms, ctx.config_dir, flush_interval_s=own.flushDelayOffsetInterval / 1000,
            deliver=False,
        )
        self.watcher = CopyWatcher(self.service)
        self.sync_step = DelayOffsetSync(self.service)

    @hookimpl(trylast=True)
    def pyrmq_register_processors(self, role: str) -> dict[int, Processor] | None:
        return {RequestCode.GET_ALL_DELAY_OFFSET: self.service.all_delay_offset} if role == "broker" else None

    @hookimpl(trylast=True)
    def pyrmq_register_schedulers(self) -> list[Scheduler]:
        return [self.service]

    @hookimpl(trylast=True)
    def pyrmq_register_store_dispatchers(self) -> list[StoreDispatcher]:
        return [self.watcher]

    @hookimpl(trylast=True)
    def pyrmq_register_slave_sync(self) -> list[SlaveSyncStep]:
        return [self.sync_step]

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
def pyrmq_register_settings() -> dict[str, type]:
    return {"broker": DelayLevelSettings}


@hookimpl(trylast=True)
def pyrmq_configure(kernel: Any) -> None:
    from pyrmq.plugins.broker.core import BROKER

    ctx = kernel.state.find(BROKER)
    if ctx is not None:
        kernel.register(DelayLevelsPlugin(kernel, ctx), "broker.delay_levels")
