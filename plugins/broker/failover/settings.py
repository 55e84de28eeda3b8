"""The failover plugin's table, ``[plugins."pyrmq.plugins.broker.failover.plugin"]``: the keys it declares
(:class:`FailoverSettings`, parsed and checked by the kernel like every declared setting) and what a replica runs
with (:class:`FailoverConfig`: the keys checked against the broker's role, in seconds)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from pyrmq.kernel.errors import ConfigError
from pyrmq.kernel.settings import at_least, parse_class, setting
from pyrmq.plugins.broker.settings import BrokerSettings

#: the plugin's module path: its table in a bundle, ``[plugins."<PLUGIN>"]``
PLUGIN = "pyrmq.plugins.broker.failover.plugin"
#: the settings section the table is parsed from
SECTION = f"plugins.{PLUGIN}"
WHERE = f'[plugins."{PLUGIN}"]'


@attrs.frozen
class FailoverConfig:
    """What one replica runs with: etcd's endpoints, times in seconds, its replica id."""

    endpoints: tuple[str, ...]
    lease_ttl: int = 3
    poll: float = 0.1
    min_in_sync: int = 1
    unclean: bool = False
    replica_id: int = 1
    sync_interval: float = 10.0
    sync_first: float = 3.0


@attrs.frozen
class FailoverSettings:
    """The keys of ``[plugins."pyrmq.plugins.broker.failover.plugin"]`` (docs/replication.md)."""

    etcdEndpoints: str = setting("", help="etcd's client addresses, host:port, comma separated")
    leaseTtl: int = setting(3, check=at_least(1), help="s: a dead master's key is gone this long after it stopped")
    pollInterval: int = setting(100, check=at_least(1), help="ms between two reads of the group's keys")
    minInSyncReplicas: int = setting(1, check=at_least(1), help="the in-sync set never shrinks below this")
    uncleanElection: bool = setting(False, help="a replica outside the in-sync set may be elected (loses messages)")
    asyncFailover: bool = setting(False, help="let an ASYNC_MASTER group fail over (loses the tail not replicated)")
    replicaId: int = setting(0, check=at_least(0), help="the replica's id in its group (0: brokerId)")
    slaveSyncInterval: int = setting(10_000, check=at_least(1), help="ms between a following replica's metadata syncs")
    slaveSyncFirstDelay: int = setting(3000, check=at_least(0), help="ms before a following replica's first sync")

    def resolve(self, broker: BrokerSettings) -> FailoverConfig:
        """Checked against the broker's own settings (its role); ConfigError naming the key otherwise."""
        endpoints = tuple(e.strip() for e in self.etcdEndpoints.split(",") if e.strip())
        if not endpoints:
            raise ConfigError("etcdEndpoints is empty: etcd's client addresses, host:port,...", file=WHERE, key="etcdEndpoints")
        role = broker.brokerRole
        if role == "SLAVE":
            raise ConfigError("a failover replica is configured SYNC_MASTER (or ASYNC_MASTER with asyncFailover): "
                              "etcd decides which replica is master", file="broker", key="brokerRole")
        if role == "ASYNC_MASTER" and not self.asyncFailover:
            raise ConfigError("failover of an ASYNC_MASTER group loses the tail its slaves had not received when the "
                              "master died; set asyncFailover = true to accept that, or use SYNC_MASTER",
                              file=WHERE, key="asyncFailover")
        return FailoverConfig(
            endpoints=endpoints,
            lease_ttl=self.leaseTtl,
            poll=self.pollInterval / 1000,
            min_in_sync=self.minInSyncReplicas,
            unclean=self.uncleanElection,
            replica_id=self.replicaId or broker.brokerId,
            sync_interval=self.slaveSyncInterval / 1000,
            sync_first=self.slaveSyncFirstDelay / 1000,
        )

    @classmethod
    def from_plugin(cls, raw: Mapping[str, Any], broker: BrokerSettings) -> FailoverConfig:
        """The table as a bundle writes it (``bundle.plugin_settings[PLUGIN]``), parsed as the kernel parses it and
        resolved (tools and tests; a running broker reads ``kernel.settings(FailoverSettings)``)."""
        return parse_class(cls, raw, {}, default_file=WHERE).resolve(broker)
