"""The broker core's settings: RocketMQ ``broker.conf`` keys of the broker's identity, its store, topics and groups,
name-server registration and client channels. Defaults are RocketMQ 4.9.8's (spec section 7).

Each feature plugin declares its own keys next to its code (``pyrmq_register_settings``): delay levels
(``messageDelayLevel``), transactions (``transaction*``), HA (``ha*``), pulls (``longPollingEnable``, ...), access
control (``aclEnable``), metrics (``metrics*``), the listener (``listenHost``, ``listenPort``, ``fastListenEnable``:
plugins/builtin/remoting_server.py). ``pyrmq plugins --settings`` lists them all.

pyrmq differences (docs/decisions.md): ``brokerIP1`` defaults to 127.0.0.1 instead of the first non-loopback address.
"""

from __future__ import annotations

import os
from pathlib import Path

import attrs

from pyrmq.kernel.settings import at_least, between, one_of, setting


def _delete_when(v: str) -> str | None:
    hours = v.split(";")
    if all(h.isdigit() and 0 <= int(h) <= 23 for h in hours):
        return None
    return "hours of the day 00-23 separated by ';' (e.g. 04 or 04;16)"


def _namesrv_addr(v: str) -> str | None:
    for addr in filter(None, v.split(";")):
        host, _, port = addr.rpartition(":")
        if not host or not port.isdigit():
            return "name server addresses host:port separated by ';' (e.g. 127.0.0.1:9876)"
    return None


@attrs.frozen
class BrokerSettings:
    """The broker core's broker.conf keys."""

    brokerClusterName: str = setting("DefaultCluster", help="the cluster this broker registers in")
    brokerName: str = setting("broker-a", help="the broker group's name (master and slaves share it)")
    brokerId: int = setting(0, check=at_least(0), help="0 for a master, 1, 2, ... for slaves")
    namesrvAddr: str = setting("", check=_namesrv_addr, help="name servers, host:port separated by ';'")
    brokerIP1: str = setting("127.0.0.1", help="the address registered for clients")
    brokerIP2: str = setting("", help="the address registered for slaves' HA connections (default brokerIP1)")
    brokerRole: str = setting("ASYNC_MASTER", check=one_of("ASYNC_MASTER", "SYNC_MASTER", "SLAVE"),
                              help="ASYNC_MASTER, SYNC_MASTER (a send waits for a slave) or SLAVE")
    brokerPermission: int = setting(6, check=between(0, 15), runtime=True, help="2 write, 4 read, 6 both")
    regionId: str = setting("DefaultRegion")
    # store
    storePathRootDir: str = setting("~/store", help="the store's root folder")
    storePathCommitLog: str = setting("", help="the commit log's folder (default <root>/commitlog)")
    mappedFileSizeCommitLog: int = setting(1024 * 1024 * 1024, check=at_least(4096))
    mappedFileSizeConsumeQueue: int = setting(300_000 * 20, check=at_least(20))
    maxMessageSize: int = setting(4 * 1024 * 1024, check=at_least(1))
    flushDiskType: str = setting("ASYNC_FLUSH", check=one_of("ASYNC_FLUSH", "SYNC_FLUSH"),
                                 help="ASYNC_FLUSH (answered at once, flushed every flushIntervalCommitLog) or "
                                      "SYNC_FLUSH (answered once on disk)")
    flushIntervalCommitLog: int = setting(500, check=at_least(1))
    flushCommitLogLeastPages: int = setting(4, check=at_least(0))
    syncFlushTimeout: int = setting(5000, check=at_least(1))
    checkCRCOnRecover: bool = setting(True)
    preallocateStoreFiles: bool = setting(False, help="pyrmq: store files get all their disk blocks when created")
    maxHashSlotNum: int = setting(5_000_000, check=at_least(1))
    maxIndexNum: int = setting(20_000_000, check=at_least(1))
    fileReservedTime: int = setting(72, check=at_least(0), help="hours a commit-log file is kept")
    deleteWhen: str = setting("04", check=_delete_when)
    diskMaxUsedSpaceRatio: int = setting(75, check=between(10, 95))
    diskSpaceCleanForciblyRatio: int = setting(85, check=between(10, 99))
    diskSpaceWarningLevelRatio: int = setting(90, check=between(10, 99))
    maxTransferCountOnMessageInMemory: int = setting(32, check=at_least(1))
    maxTransferBytesOnMessageInMemory: int = setting(256 * 1024, check=at_least(1))
    accessMessageInMemoryMaxRatio: int = setting(40, check=between(0, 100))
    # topics and groups
    autoCreateTopicEnable: bool = setting(True)
    autoCreateSubscriptionGroup: bool = setting(True, runtime=True)
    defaultTopicQueueNums: int = setting(8, check=between(1, 1024))
    clusterTopicEnable: bool = setting(True)
    brokerTopicEnable: bool = setting(True)
    traceTopicEnable: bool = setting(False)
    # name server registration, clients, offsets
    registerNameServerPeriod: int = setting(30_000, check=between(10_000, 60_000))
    registerBrokerTimeoutMills: int = setting(6000, check=at_least(1))
    channelExpiredTimeout: int = setting(120_000, check=at_least(1))
    notifyConsumerIdsChangedEnable: bool = setting(True, runtime=True)
    flushConsumerOffsetInterval: int = setting(5000, check=at_least(1))
    # SQL92 filtering (the consumer-filter table the core keeps; the filter itself is plugins/sql92)
    enablePropertyFilter: bool = setting(False, runtime=True, help="serve SQL92 subscriptions")
    filterSupportRetry: bool = setting(False)
    filterDataCleanTimeSpan: int = setting(24 * 3600 * 1000, check=at_least(0))

    @property
    def store_root(self) -> Path:
        return Path(os.path.expanduser(self.storePathRootDir))

    @property
    def namesrv_addresses(self) -> list[str]:
        return [a.strip() for a in self.namesrvAddr.split(";") if a.strip()]
