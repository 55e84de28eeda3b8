"""The HA plugin: a master replicator (ASYNC_MASTER / SYNC_MASTER) or a slave replicator (SLAVE), chosen by
``brokerRole`` through ``pyrmq_make_replicator``; a store dispatcher wakes idle transfers on every append.

Its ``pyrmq_configure`` registers a :class:`Replication` object (``"broker.ha"``) whose methods are the hooks.
Plugin settings (``[plugins."pyrmq.plugins.broker.ha.plugin"]``, :class:`~.settings.SlaveSyncSettings`):
``slaveSyncInterval`` / ``slaveSyncFirstDelay`` (ms, defaults 10000 / 3000 as SlaveSynchronize's schedule) for the
slave's metadata sync.
"""

from __future__ import annotations

import logging

import trio

from pyrmq.kernel.hookspecs import hookimpl
from pyrmq.kernel.kernel import Kernel
from pyrmq.kernel.types import Replicator, StoreDispatcher
from pyrmq.plugins.broker.core import BrokerContext
from pyrmq.plugins.broker.ha.master import AppendNotifier, HAMaster
from pyrmq.plugins.broker.ha.settings import HASettings, SlaveSyncSettings
from pyrmq.plugins.broker.ha.slave import HASlave, MetadataSync
from pyrmq.plugins.builtin.remoting_server import BrokerListenSettings
from pyrmq.store.results import PutMessageStatus

log = logging.getLogger("pyrmq.broker.ha")

PLUGIN = "pyrmq.plugins.broker.ha.plugin"
#: the name :class:`Replication` is registered under (``kernel.plugin(NAME)``)
NAME = "broker.ha"


class MasterReplicator:
    """ASYNC_MASTER / SYNC_MASTER: serves slaves on the HA port (listenPort + 1)."""

    role = "MASTER"

    def __init__(self, ctx: BrokerContext, notifier: AppendNotifier | None) -> None:
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

    def __init__(self, ctx: BrokerContext, sync_interval: float, sync_first: float) -> None:
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


class Replication:
    """The HA plugin of one broker, registered as a plugin (its methods are hook implementations): the append
    wake-up its HA masters share (a store dispatcher) and the replicator ``brokerRole`` asks for."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        self.notifier = AppendNotifier()
        self.sync = kernel.settings(SlaveSyncSettings)

    def wake_on_append(self, master: HAMaster | None) -> None:
        """Make ``master`` the HA master whose idle transfers the store's appends wake (None: none). A replicator
        built on these classes (automatic failover) calls it when it becomes master and when it stops."""
        self.notifier.master = master

    @hookimpl(trylast=True)
    def pyrmq_register_store_dispatchers(self) -> list[StoreDispatcher]:
        return [self.notifier]

    @hookimpl(trylast=True)
    def pyrmq_make_replicator(self, broker: BrokerContext) -> Replicator:
        if broker.settings.brokerRole == "SLAVE":
            return SlaveReplicator(broker, self.sync.slaveSyncInterval / 1000, self.sync.slaveSyncFirstDelay / 1000)
        return MasterReplicator(broker, self.notifier)


@hookimpl(trylast=True)
def pyrmq_register_settings() -> dict[str, type]:
    return {"broker": HASettings, f"plugins.{PLUGIN}": SlaveSyncSettings}


@hookimpl(trylast=True)
def pyrmq_configure(kernel: Kernel) -> None:
    if "broker" in kernel.bundle.roles:
        kernel.register(Replication(kernel), NAME)
