"""The HA plugin's hooks: a master replicator (ASYNC_MASTER / SYNC_MASTER) or a slave replicator (SLAVE), chosen by
``brokerRole`` through ``pyrmq_make_replicator``; a store dispatcher wakes idle transfers on every append.

Plugin settings (``[plugins."pyrmq.plugins.broker.ha.plugin"]``): ``slaveSyncInterval`` / ``slaveSyncFirstDelay``
(ms, defaults 10000 / 3000 as SlaveSynchronize's schedule) for the slave's metadata sync.
"""

from __future__ import annotations

import logging
from typing import Any

import trio

from pyrmq.kernel.hookspecs import hookimpl
from pyrmq.kernel.kernel import StateKey
from pyrmq.plugins.broker.core import BROKER
from pyrmq.plugins.broker.ha.master import AppendNotifier, HAMaster
from pyrmq.plugins.broker.ha.settings import HASettings
from pyrmq.plugins.builtin.remoting_server import BrokerListenSettings
from pyrmq.plugins.broker.ha.slave import HASlave, MetadataSync
from pyrmq.store.results import PutMessageStatus

log = logging.getLogger("pyrmq.broker.ha")

PLUGIN = "pyrmq.plugins.broker.ha.plugin"
NOTIFIER = StateKey[AppendNotifier]("broker.ha.notifier")


class MasterReplicator:
    """ASYNC_MASTER / SYNC_MASTER: serves slaves on the HA port (listenPort + 1)."""

    role = "MASTER"

    def __init__(self, ctx: Any, notifier: AppendNotifier | None) -> None:
        self.ctx = ctx
        self.listen = ctx.kernel.settings(BrokerListenSettings)
        self.ha = HAMaster(ctx.store, ctx.kernel.settings(HASettings), file_size=ctx.settings.mappedFileSizeCommitLog,
                           listen_host=self.listen.listenHost)
        if notifier is not None:
            notifier.master = self.ha

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        s = self.ctx.settings
        # RocketMQ: haListenPort = listenPort + 1; a broker on an ephemeral port (tests) takes any free HA port
        port = self.listen.listenPort + 1 if self.listen.listenPort else 0
        async with trio.open_nursery() as nursery:
            try:
                real = await nursery.start(self.ha.run, port)
            except OSError as exc:
                # RocketMQ refuses to start; pyrmq takes another port and registers it (slaves find it through the
                # name server's haServerAddr; a slave configured with haMasterAddress would not)
                log.warning("HA port %d not available (%s): listening on a free port instead", port, exc)
                real = await nursery.start(self.ha.run, 0)
            self.ctx.registration.ha_addr = f"{s.brokerIP2 or s.brokerIP1}:{real}"
            task_status.started()

    async def wait_replicated(self, end_offset: int) -> PutMessageStatus:
        return await self.ha.wait_replicated(end_offset)

    def status(self) -> dict[str, str]:
        """For GET_BROKER_RUNTIME_INFO (``pyrmq admin cluster list``): the slaves and the worst lag."""
        lag = self.ha.lag()
        return {
            "haListenPort": str(self.ha.port),
            "haSlaveCount": str(len(lag)),
            "haSlaves": ";".join(f"{x['slave']}@{x['ackOffset']}" for x in lag),
            "haBehindBytes": str(max((x["behindBytes"] for x in lag), default=0)),
            "haBehindSeconds": f"{max((x['behindSeconds'] for x in lag), default=0.0):.3f}",
        }


class SlaveReplicator:
    """SLAVE: HA client to the master and metadata sync from it."""

    role = "SLAVE"

    def __init__(self, ctx: Any, sync_interval: float, sync_first: float) -> None:
        self.ctx = ctx
        ha = ctx.kernel.settings(HASettings)
        registration = ctx.registration
        self.ha = HASlave(ctx.store, ha, lambda: ha.haMasterAddress or registration.master_ha_addr)
        self.sync = MetadataSync(ctx, lambda: registration.master_addr, interval=sync_interval, first=sync_first)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(self.ha.run)
            await nursery.start(self.sync.run)
            task_status.started()

    async def wait_replicated(self, end_offset: int) -> PutMessageStatus:
        return PutMessageStatus.SERVICE_NOT_AVAILABLE  # a slave stores no client messages

    def status(self) -> dict[str, str]:
        own = self.ctx.store.commit_log.max_offset
        return {"haMasterAddress": self.ha.connected_to or "-",
                "haBehindBytes": str(max(0, self.ha.master_offset - own)),
                "haMetadataSyncRounds": str(self.sync.rounds)}


@hookimpl(trylast=True)
def pyrmq_register_settings() -> dict[str, type]:
    return {"broker": HASettings}


@hookimpl(trylast=True)
def pyrmq_configure(kernel: Any) -> None:
    if kernel.state.find(BROKER) is not None:
        kernel.state.put(NOTIFIER, AppendNotifier())


@hookimpl(trylast=True)
def pyrmq_register_store_dispatchers(kernel: Any) -> list[Any] | None:
    notifier = kernel.state.find(NOTIFIER)
    return None if notifier is None else [notifier]


@hookimpl(trylast=True)
def pyrmq_make_replicator(kernel: Any, broker: Any) -> Any:
    if broker.settings.brokerRole == "SLAVE":
        settings = kernel.plugin_settings(PLUGIN)
        return SlaveReplicator(
            broker,
            float(settings.get("slaveSyncInterval", 10_000)) / 1000,
            float(settings.get("slaveSyncFirstDelay", 3000)) / 1000,
        )
    return MasterReplicator(broker, kernel.state.find(NOTIFIER))
