"""Automatic failover of a broker group on etcd, the plugin of the ``failover`` bundle (configs/failover.toml): its
replicator answers ``pyrmq_make_replicator`` before the HA plugin's. etcd decides which replica is master; the data
moves on RocketMQ 5.x's AutoSwitch HA wire (plugins/broker/ha/autoswitch.py). docs/replication.md, "Automatic
failover on etcd", describes the whole; the package's modules, one job each:

- :mod:`.settings`    the plugin's table (:class:`FailoverSettings`) and what a replica runs with;
- :mod:`.group`       the group's etcd keys, the epoch records and the replica's epoch file;
- :mod:`.election`    running for master (the election txn);
- :mod:`.following`   following another replica's mastership (truncation, HA client, metadata sync);
- :mod:`.syncset`     the in-sync set a master keeps (the commit rule);
- :mod:`.configs`     topic and group documents carried across a failover;
- :mod:`.visibility`  where the store's read bound stands (the read rule);
- :mod:`.replicator`  the replicator: lease, control loop, roles.

Nothing else in the broker knows about failover: a replica that is not master has a read-only store, the role is
announced through ``pyrmq_role_changed``, and what consumers may read is the store's read bound.
"""

from __future__ import annotations

from pyrmq.kernel.hookspecs import hookimpl
from pyrmq.kernel.kernel import Kernel
from pyrmq.kernel.types import Replicator
from pyrmq.plugins.broker.core import BrokerContext
from pyrmq.plugins.broker.failover.replicator import FailoverReplicator
from pyrmq.plugins.broker.failover.settings import PLUGIN, SECTION, FailoverConfig, FailoverSettings
from pyrmq.plugins.broker.ha.plugin import NAME as HA_NAME
from pyrmq.plugins.broker.ha.plugin import Replication
from pyrmq.plugins.broker.settings import BrokerSettings

__all__ = ["NAME", "PLUGIN", "Failover", "FailoverConfig", "FailoverReplicator", "FailoverSettings"]

#: the name :class:`Failover` is registered under
NAME = "broker.failover"


class Failover:
    """The failover plugin of one broker, registered as a plugin: its settings, checked against the broker's role
    when the role is configured (a refused setting stops the start before the store is loaded), and the replicator
    it makes."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        self.config = kernel.settings(FailoverSettings).resolve(kernel.settings(BrokerSettings))
        self.replicator: FailoverReplicator | None = None

    @hookimpl
    def pyrmq_make_replicator(self, broker: BrokerContext) -> Replicator:
        # the HA plugin's append wake-up serves our HA master too (the data moves through its classes)
        replication = self.kernel.plugin(HA_NAME)
        self.replicator = FailoverReplicator(broker, self.config, replication if isinstance(replication, Replication) else None)
        return self.replicator


@hookimpl
def pyrmq_register_settings() -> dict[str, type]:
    return {SECTION: FailoverSettings}


@hookimpl
def pyrmq_configure(kernel: Kernel) -> None:
    if "broker" in kernel.bundle.roles:
        kernel.register(Failover(kernel), NAME)
