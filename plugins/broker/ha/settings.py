"""The HA plugin's settings: its broker.conf keys (RocketMQ 4.9.8's names and defaults), read by master/slave
replication and by automatic failover, which replicates through the same classes; and its own table's keys, the
slave's metadata-sync schedule (``[plugins."pyrmq.plugins.broker.ha.plugin"]``)."""

from __future__ import annotations

import attrs

from pyrmq.kernel.settings import at_least, port, setting


@attrs.frozen
class HASettings:
    haListenPort: int = setting(10912, check=port, help="RocketMQ sets it to listenPort + 1 at start; so does pyrmq")
    haMasterAddress: str = setting("", help="a slave's master HA address (default: learned from the name server)")
    haSendHeartbeatInterval: int = setting(5000, check=at_least(1))
    haHousekeepingInterval: int = setting(20_000, check=at_least(1))
    haTransferBatchSize: int = setting(32 * 1024, check=at_least(1))
    haSlaveFallbehindMax: int = setting(256 * 1024 * 1024, check=at_least(0))
    slaveTimeout: int = setting(3000, check=at_least(1), help="ms a SYNC_MASTER send waits for its slave")


@attrs.frozen
class SlaveSyncSettings:
    """``[plugins."pyrmq.plugins.broker.ha.plugin"]``: when a slave syncs topics, groups, consumer and delay offsets
    from its master (SlaveSynchronize's schedule; tests shorten it)."""

    slaveSyncInterval: int = setting(10_000, check=at_least(1), help="ms between a slave's metadata syncs")
    slaveSyncFirstDelay: int = setting(3000, check=at_least(0), help="ms before a slave's first metadata sync")
