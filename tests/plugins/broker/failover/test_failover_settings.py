"""The failover plugin's settings: what a replica refuses to start with, and the defaults."""

from __future__ import annotations

import pytest

from pyrmq.kernel.bundles import load_bundle
from pyrmq.kernel.errors import ConfigError
from pyrmq.kernel.service import bundle_settings
from pyrmq.plugins.broker.failover.plugin import PLUGIN, FailoverSettings
from pyrmq.plugins.broker.settings import BrokerSettings


def settings(**broker):
    bundle = load_bundle("failover")
    return bundle_settings(bundle.with_overrides(broker))(BrokerSettings), dict(bundle.plugin_settings[PLUGIN])


def test_packaged_bundle_defaults():
    broker, raw = settings()
    cfg = FailoverSettings.from_plugin(raw, broker)
    assert cfg.endpoints == ("127.0.0.1:2379",) and cfg.lease_ttl == 3 and cfg.min_in_sync == 1
    assert cfg.replica_id == 1 and not cfg.unclean and cfg.poll == 0.1
    assert FailoverSettings.from_plugin({**raw, "etcdEndpoints": "a:1, b:2", "uncleanElection": "true"}, broker).endpoints == ("a:1", "b:2")


def test_refused_settings_say_which_key():
    broker, raw = settings()
    with pytest.raises(ConfigError, match="etcdEndpoints"):
        FailoverSettings.from_plugin({**raw, "etcdEndpoints": ""}, broker)
    slave, _ = settings(brokerRole="SLAVE")
    with pytest.raises(ConfigError, match="brokerRole.*etcd decides which replica is master"):
        FailoverSettings.from_plugin(raw, slave)
    async_master, _ = settings(brokerRole="ASYNC_MASTER")
    with pytest.raises(ConfigError, match="asyncFailover.*loses the tail"):
        FailoverSettings.from_plugin(raw, async_master)
    assert FailoverSettings.from_plugin({**raw, "asyncFailover": True}, async_master).endpoints


def test_the_table_is_declared_so_the_kernel_checks_it_at_load():
    from pyrmq.plugins.broker.failover.settings import FailoverSettings as Declared

    bundle = load_bundle("failover")
    table = dict(bundle.plugin_settings[PLUGIN])
    parsed = bundle_settings(bundle)(Declared)
    assert (parsed.etcdEndpoints, parsed.leaseTtl, parsed.pollInterval, parsed.replicaId) == ("127.0.0.1:2379", 3, 100, 0)
    with pytest.raises(ConfigError, match="key 'leaseTtl': expected an integer >= 1, got 0"):
        bundle_settings(bundle.with_plugin_settings(PLUGIN, {**table, "leaseTtl": 0}))
    with pytest.raises(ConfigError, match="key 'etcdEndpoint': unknown setting.*did you mean 'etcdEndpoints'"):
        bundle_settings(bundle.with_plugin_settings(PLUGIN, {"etcdEndpoint": "a:1"}))
    # the HA plugin's own table (the metadata sync of a classic slave) is declared too
    ha = "pyrmq.plugins.broker.ha.plugin"
    with pytest.raises(ConfigError, match="key 'slaveSyncIntervall': unknown setting.*did you mean 'slaveSyncInterval'"):
        bundle_settings(load_bundle("broker").with_plugin_settings(ha, {"slaveSyncIntervall": 500}))
