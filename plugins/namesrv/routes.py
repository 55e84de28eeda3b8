"""The name server's route table (RocketMQ's RouteInfoManager, spec 4.1, 4.3 and 7.1). Pure state, no IO.

State lives in memory only: topic -> {brokerName -> QueueData}; brokerName -> BrokerData; cluster -> {brokerName};
brokerAddr -> live info (last heartbeat, data version, connection, HA address). A broker that stops registering for
``brokerChannelExpiredTime`` (120 s), or whose connection closes, is removed with every route through it.
"""

from __future__ import annotations

import logging
from typing import Any

import attrs

from pyrmq.remoting.route import BrokerData, QueueData, TopicRouteData
from pyrmq.remoting.vocabulary import MASTER_ID, Permission

log = logging.getLogger("pyrmq.namesrv")

_READ_WRITE = int(Permission.READ | Permission.WRITE)


@attrs.define
class BrokerLiveInfo:
    last_update_ms: float
    data_version: dict[str, Any]
    connection: Any
    ha_server_addr: str


def data_version_key(version: dict[str, Any] | None) -> tuple[int, int]:
    """Two DataVersions are equal iff timestamp and counter are equal (spec 4.3)."""
    if not version:
        return (0, 0)
    return (int(version.get("timestamp", 0)), int(version.get("counter", 0)))


def state_version(version: dict[str, Any] | None) -> int:
    """The master's epoch in a DataVersion (``stateVersion``, RocketMQ 5.x; 0 when a 4.x broker sends none)."""
    return int((version or {}).get("stateVersion", 0))


@attrs.define
class RegisterResult:
    ha_server_addr: str = ""
    master_addr: str = ""


class RouteTable:
    """Everything the name server knows about brokers and topics."""

    def __init__(self, *, order_message_enable: bool = False) -> None:
        self.topic_queues: dict[str, dict[str, QueueData]] = {}
        self.brokers: dict[str, BrokerData] = {}
        self.clusters: dict[str, set[str]] = {}
        self.live: dict[str, BrokerLiveInfo] = {}
        self.order_message_enable = order_message_enable

    # -- registration ----------------------------------------------------------------------------------------

    def register_broker(
        self,
        *,
        cluster: str,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
        ha_server_addr: str,
        data_version: dict[str, Any] | None,
        topic_configs: dict[str, dict[str, Any]],
        connection: Any,
        now_ms: float,
    ) -> RegisterResult:
        """REGISTER_BROKER (spec 4.3): record the broker and, for a master, its topics' queue data."""
        old_data = self.brokers.get(broker_name)
        if broker_id == MASTER_ID and old_data is not None:
            holder = old_data.broker_addrs.get(MASTER_ID)
            holder_live = self.live.get(holder) if holder and holder != broker_addr else None
            if holder_live is not None and state_version(data_version) < state_version(holder_live.data_version):
                # RocketMQ 5.x's fence: a master of an older epoch (one that lost an election, resumed after a
                # pause) does not take id 0 back from the one elected after it
                log.warning("ignored registration of %s %s id=0 at %s: its stateVersion %d is older than %s's %d",
                            cluster, broker_name, broker_addr, state_version(data_version), holder,
                            state_version(holder_live.data_version))
                return RegisterResult(holder_live.ha_server_addr, holder)
        self.clusters.setdefault(cluster, set()).add(broker_name)
        first = old_data is None
        addrs = dict(old_data.broker_addrs) if old_data is not None else {}
        # one address has one broker id: drop other ids that pointed at this address (a slave promoted, ...)
        for other_id in [i for i, addr in addrs.items() if addr == broker_addr and i != broker_id]:
            del addrs[other_id]
        previous = addrs.get(broker_id)
        first = first or previous != broker_addr
        addrs[broker_id] = broker_addr
        data = self.brokers[broker_name] = BrokerData(cluster, broker_name, addrs)

        old_live = self.live.get(broker_addr)
        changed = old_live is None or data_version_key(old_live.data_version) != data_version_key(data_version)
        if broker_id == MASTER_ID and (changed or first):
            for topic, config in topic_configs.items():
                self._upsert_queue_data(broker_name, topic, config)
        self.live[broker_addr] = BrokerLiveInfo(now_ms, dict(data_version or {}), connection, ha_server_addr)
        if old_live is None:
            log.info("broker registered: %s %s id=%d at %s", cluster, broker_name, broker_id, broker_addr)
        result = RegisterResult()
        if broker_id != MASTER_ID:
            master_addr = data.broker_addrs.get(MASTER_ID)
            if master_addr:
                master_live = self.live.get(master_addr)
                result = RegisterResult(master_live.ha_server_addr if master_live else "", master_addr)
        return result

    def _upsert_queue_data(self, broker_name: str, topic: str, config: dict[str, Any]) -> None:
        queue = QueueData(
            broker_name=broker_name,
            read_queue_nums=int(config.get("readQueueNums", 16)),
            write_queue_nums=int(config.get("writeQueueNums", 16)),
            perm=int(config.get("perm", _READ_WRITE)),
            topic_sys_flag=int(config.get("topicSysFlag", config.get("topicSynFlag", 0))),
        )
        per_broker = self.topic_queues.setdefault(topic, {})
        if per_broker.get(broker_name) != queue:
            per_broker[broker_name] = queue

    def touch(self, broker_addr: str, now_ms: float) -> bool:
        """Refresh a broker's liveness (QUERY_DATA_VERSION); False when it is not known."""
        live = self.live.get(broker_addr)
        if live is None:
            return False
        live.last_update_ms = now_ms
        return True

    def unregister_broker(self, *, cluster: str, broker_addr: str, broker_name: str, broker_id: int) -> None:
        """UNREGISTER_BROKER / expiry / closed connection: drop the address and every route left without a broker."""
        self.live.pop(broker_addr, None)
        data = self.brokers.get(broker_name)
        remove_name = False
        if data is not None:
            addrs = dict(data.broker_addrs)
            if addrs.get(broker_id) == broker_addr:
                del addrs[broker_id]
            else:
                for i in [i for i, addr in addrs.items() if addr == broker_addr]:
                    del addrs[i]
            if not addrs:
                del self.brokers[broker_name]
                remove_name = True
            else:
                self.brokers[broker_name] = attrs.evolve(data, broker_addrs=addrs)
        if remove_name:
            for cluster_name, members in list(self.clusters.items()):
                members.discard(broker_name)
                if not members:
                    del self.clusters[cluster_name]
            for topic in list(self.topic_queues):
                per_broker = self.topic_queues[topic]
                per_broker.pop(broker_name, None)
                if not per_broker:
                    del self.topic_queues[topic]
        log.info("broker removed: %s %s id=%d at %s", cluster, broker_name, broker_id, broker_addr)

    def _forget_addr(self, broker_addr: str) -> None:
        for data in list(self.brokers.values()):
            for broker_id, addr in list(data.broker_addrs.items()):
                if addr == broker_addr:
                    self.unregister_broker(
                        cluster=data.cluster, broker_addr=addr, broker_name=data.broker_name, broker_id=broker_id
                    )
                    return
        self.live.pop(broker_addr, None)

    def scan_not_active(self, now_ms: float, expired_ms: float) -> list[str]:
        """Remove brokers silent for longer than ``expired_ms``; returns their addresses."""
        expired = [addr for addr, live in self.live.items() if live.last_update_ms + expired_ms < now_ms]
        for addr in expired:
            log.warning("broker %s silent for more than %.0f s: removed", addr, expired_ms / 1000)
            self._forget_addr(addr)
        return expired

    def connection_closed(self, connection: Any) -> list[str]:
        """A broker's connection closed: remove it at once (spec 7.1)."""
        gone = [addr for addr, live in self.live.items() if live.connection is connection]
        for addr in gone:
            log.info("connection of broker %s closed: removed", addr)
            self._forget_addr(addr)
        return gone

    # -- queries ---------------------------------------------------------------------------------------------

    def route(self, topic: str) -> dict[str, Any] | None:
        """TopicRouteData as plain JSON-ready values, or None (TOPIC_NOT_EXIST) (spec 4.1)."""
        per_broker = self.topic_queues.get(topic)
        if not per_broker:
            return None
        queue_datas = [per_broker[name] for name in sorted(per_broker)]
        broker_datas = [self.brokers[name] for name in sorted(per_broker) if name in self.brokers]
        if not broker_datas:
            return None
        return TopicRouteData(queue_datas, broker_datas).to_json()

    def cluster_info(self) -> dict[str, Any]:
        return {
            "brokerAddrTable": {name: data.to_json() for name, data in sorted(self.brokers.items())},
            "clusterAddrTable": {cluster: sorted(names) for cluster, names in sorted(self.clusters.items())},
        }

    def all_topics(self) -> list[str]:
        return sorted(self.topic_queues)

    def topics_of_cluster(self, cluster: str) -> list[str]:
        names = self.clusters.get(cluster, set())
        return sorted(t for t, per_broker in self.topic_queues.items() if names.intersection(per_broker))

    def delete_topic(self, topic: str) -> bool:
        return self.topic_queues.pop(topic, None) is not None

    def wipe_write_perm(self, broker_name: str) -> int:
        """WIPE_WRITE_PERM_OF_BROKER: clear PERM_WRITE on every queue of the broker; returns the count (spec 7.1)."""
        count = 0
        for per_broker in self.topic_queues.values():
            queue = per_broker.get(broker_name)
            if queue is not None:
                per_broker[broker_name] = attrs.evolve(queue, perm=queue.perm & ~Permission.WRITE.value)
                count += 1
        return count

    def add_write_perm(self, broker_name: str) -> int:
        """ADD_WRITE_PERM_OF_BROKER: perm = 6 on every queue of the broker; returns the count."""
        count = 0
        for per_broker in self.topic_queues.values():
            queue = per_broker.get(broker_name)
            if queue is not None:
                per_broker[broker_name] = attrs.evolve(queue, perm=_READ_WRITE)
                count += 1
        return count
