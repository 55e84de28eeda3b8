"""Administration (Java ``DefaultMQAdminExt``, what ``mqadmin`` uses; spec 2.1, 3.9, 4.5, 5.9).

    async with Admin("127.0.0.1:9876") as admin:
        await admin.create_topic("Orders", queue_nums=8)
        for row in await admin.group_progress("billing"):
            print(row.topic, row.queue_id, row.lag)
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import attrs
import trio

from pyrmq.client import api
from pyrmq.client.config import ClientConfig, check_name
from pyrmq.client.errors import BrokerError, ClientError, InvalidMessageError, TopicNotFoundError
from pyrmq.client.instance import ClientInstance
from pyrmq.client.message import MessageExt, MessageQueue
from pyrmq.client.route import TopicRoute
from pyrmq.client.service import ClientService
from pyrmq.remoting import fastjson
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.errors import RemotingError
from pyrmq.remoting.message import decode_message_id
from pyrmq.remoting.route import MASTER_ID, BrokerData
from pyrmq.remoting.validation import SYSTEM_TOPICS, system_topic_problem  # noqa: F401 - SYSTEM_TOPICS: was ours
from pyrmq.remoting.validation import is_system_topic as _is_rocketmq_system_topic
from pyrmq.remoting.vocabulary import (
    AUTO_CREATE_TOPIC_KEY,
    DLQ_GROUP_TOPIC_PREFIX,
    REPLY_TOPIC_SUFFIX,
    RETRY_GROUP_TOPIC_PREFIX,
    Permission,
)

__all__ = ["Admin", "ClusterInfo", "BrokerInfo", "QueueProgress", "SYSTEM_TOPIC_PREFIXES", "GROUP_DEFAULTS"]

#: what ``topic list`` also marks as the broker's own, besides RocketMQ's system topics: retry and dead-letter
#: topics, and the upper-case ``RMQ_SYS_`` names (the transaction and trace topics are in the set already)
SYSTEM_TOPIC_PREFIXES = (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX, "RMQ_SYS_")


def is_system_topic(topic: str, cluster_or_broker_names: Iterable[str] = ()) -> bool:
    """Built-in topics for ``topic list``: RocketMQ's system topics (``TopicValidator``: TBW102 and friends, any
    ``rmq_sys_`` name), those a broker adds (named after a cluster or broker, ``<cluster>_REPLY_TOPIC``; spec 6.6),
    and retry/DLQ topics."""
    names = set(cluster_or_broker_names)
    names |= {name + REPLY_TOPIC_SUFFIX for name in names}
    return _is_rocketmq_system_topic(topic, names) or topic.startswith(SYSTEM_TOPIC_PREFIXES)


@attrs.frozen
class ClusterInfo:
    """GET_BROKER_CLUSTER_INFO: brokers by name and broker names by cluster."""

    brokers: dict[str, BrokerData]
    clusters: dict[str, list[str]]

    def masters(self, cluster: str | None = None) -> list[tuple[str, str]]:
        """``(broker name, master address)`` of a cluster (or of every cluster)."""
        names = self.clusters.get(cluster, []) if cluster else sorted(self.brokers)
        out = []
        for name in sorted(names):
            b = self.brokers.get(name)
            if b is not None and b.master:
                out.append((name, b.master))
        return out

    def name_of(self, addr: str) -> str:
        for name, b in self.brokers.items():
            if addr in b.broker_addrs.values():
                return name
        return ""


@attrs.frozen
class BrokerInfo:
    cluster: str
    broker_name: str
    broker_id: int
    addr: str
    version: str = ""
    max_offset: int = -1
    error: str = ""
    #: replication lag: a master's worst slave (bytes, seconds), a slave's own bytes behind; None when not reported
    lag_bytes: int | None = None
    lag_seconds: float | None = None
    slaves: int | None = None


@attrs.frozen
class QueueProgress:
    """One queue of a consumer group's progress (mqadmin consumerProgress)."""

    topic: str
    broker_name: str
    queue_id: int
    broker_offset: int
    consumer_offset: int
    last_timestamp: int
    #: messages popped by a POP group and neither acked nor revived (pyrmq's ``inflight``; 0 for other groups)
    inflight: int = 0

    @property
    def lag(self) -> int:
        return max(self.broker_offset - self.consumer_offset, 0)


#: a new subscription group's settings (SubscriptionGroupConfig's defaults, RocketMQ's JSON names)
GROUP_DEFAULTS: dict[str, Any] = {
    "consumeEnable": True, "consumeFromMinEnable": True, "consumeBroadcastEnable": True, "consumeMessageOrderly": False,
    "retryQueueNums": 1, "retryMaxTimes": 16, "brokerId": 0, "whichBrokerWhenConsumeSlowly": 1,
    "notifyConsumerIdsChangedEnable": True,
}


class Admin(ClientService):
    def __init__(
        self,
        namesrv: str | Iterable[str] | None = None,
        *,
        config: ClientConfig | None = None,
        instance: ClientInstance | None = None,
        timeout: float = 5.0,
        credentials: tuple[str, str] | None = None,
    ) -> None:
        if config is None and instance is None:
            config = ClientConfig(namesrv_addr=namesrv, api_timeout=timeout)
        super().__init__(instance, config, credentials)
        self.timeout = timeout

    async def _namesrv(self, code: int, ext: dict[str, Any] | None = None, name: str = "") -> RemotingCommand:
        response = await self.instance.invoke_namesrv(RemotingCommand.request(code, ext or {}), self.timeout)
        if response.code != ResponseCode.SUCCESS:
            raise BrokerError(response.code, response.remark, "name server", name or RequestCode(code).name)
        return response

    async def _broker(self, addr: str, code: int, ext: dict[str, Any] | None = None, *, body: bytes = b"",
                      ok: Iterable[int] = (0,)) -> RemotingCommand:
        request = RemotingCommand.request(code, ext or {}, body)
        return await self.instance.invoke_broker(addr, request, self.timeout, ok=ok)

    # -- clusters --------------------------------------------------------------------------------------------

    async def cluster_info(self) -> ClusterInfo:
        self._check_started()
        data = fastjson.loads((await self._namesrv(RequestCode.GET_BROKER_CLUSTER_INFO)).body_bytes())
        brokers = {}
        for name, b in (data.get("brokerAddrTable") or {}).items():
            brokers[str(name)] = BrokerData(str(b.get("cluster", "")), str(name), b.get("brokerAddrs") or {})
        clusters = {str(c): sorted(str(n) for n in names) for c, names in (data.get("clusterAddrTable") or {}).items()}
        return ClusterInfo(brokers, clusters)

    async def list_clusters(self) -> list[BrokerInfo]:
        """Every broker of every cluster with its version and commit-log size (mqadmin clusterList)."""
        info = await self.cluster_info()
        rows: list[BrokerInfo] = []

        async def one(cluster: str, name: str, broker_id: int, addr: str) -> None:
            try:
                resp = await self._broker(addr, RequestCode.GET_BROKER_RUNTIME_INFO)
                table = (fastjson.loads(resp.body_bytes()) or {}).get("table") or {}
                rows.append(BrokerInfo(
                    cluster, name, broker_id, addr, str(table.get("brokerVersionDesc", "")),
                    int(table.get("commitLogMaxOffset", -1)),
                    lag_bytes=int(table["haBehindBytes"]) if "haBehindBytes" in table else None,
                    lag_seconds=float(table["haBehindSeconds"]) if "haBehindSeconds" in table else None,
                    slaves=int(table["haSlaveCount"]) if "haSlaveCount" in table else None,
                ))
            except (RemotingError, BrokerError, ValueError) as exc:
                rows.append(BrokerInfo(cluster, name, broker_id, addr, error=str(exc)))

        async with trio.open_nursery() as nursery:
            for cluster, names in info.clusters.items():
                for name in names:
                    broker = info.brokers.get(name)
                    for broker_id, addr in sorted((broker.broker_addrs if broker else {}).items()):
                        nursery.start_soon(one, cluster, name, broker_id, addr)
        return sorted(rows, key=lambda r: (r.cluster, r.broker_name, r.broker_id))

    async def _masters(self, cluster: str | None = None, broker_addr: str | None = None) -> list[tuple[str, str]]:
        info = await self.cluster_info()
        if broker_addr:
            return [(info.name_of(broker_addr), broker_addr)]
        if cluster and cluster not in info.clusters:
            raise ClientError(f"no cluster named {cluster!r}; clusters: {', '.join(sorted(info.clusters)) or 'none'}")
        masters = info.masters(cluster)
        if not masters:
            raise ClientError("no broker is registered with the name server")
        return masters

    # -- topics ----------------------------------------------------------------------------------------------

    async def create_topic(
        self,
        topic: str,
        queue_nums: int = 8,
        *,
        read_queue_nums: int | None = None,
        write_queue_nums: int | None = None,
        perm: int = int(Permission.READ | Permission.WRITE),
        order: bool = False,
        cluster: str | None = None,
        broker_addr: str | None = None,
        message_type: str | None = None,
    ) -> list[str]:
        """UPDATE_AND_CREATE_TOPIC on every master of ``cluster`` (default: every cluster) or one broker; returns
        the broker names updated. Creating an existing topic updates its queue counts and permission.
        ``message_type`` (NORMAL, FIFO, DELAY, TRANSACTION, MIXED) sets RocketMQ 5.x's ``message.type`` attribute,
        as ``mqadmin updateTopic -a +message.type=FIFO`` does."""
        self._check_started()
        check_name("topic", topic)
        problem = system_topic_problem(topic)  # Java's MQAdminImpl.createTopic checks it too (Validators.isSystemTopic)
        if problem:
            raise InvalidMessageError(problem)
        ext = {
            "topic": topic, "defaultTopic": AUTO_CREATE_TOPIC_KEY,
            "readQueueNums": read_queue_nums or queue_nums, "writeQueueNums": write_queue_nums or queue_nums,
            "perm": perm, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": "true" if order else "false",
        }
        if message_type:
            ext["attributes"] = f"+message.type={message_type}"
        done = []
        for name, addr in await self._masters(cluster, broker_addr):
            await self._broker(addr, RequestCode.UPDATE_AND_CREATE_TOPIC, dict(ext))
            done.append(name or addr)
        self.instance.routes.pop(topic, None)
        return done

    async def delete_topic(self, topic: str, *, cluster: str | None = None) -> list[str]:
        """DELETE_TOPIC_IN_BROKER on the masters, then DELETE_TOPIC_IN_NAMESRV on every name server."""
        self._check_started()
        done = []
        for name, addr in await self._masters(cluster):
            await self._broker(addr, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": topic})
            done.append(name)
        for addr in self.instance.config.namesrv_addr:
            try:
                await self.instance.invoke_broker(
                    addr, RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": topic}), self.timeout
                )
            except (RemotingError, BrokerError):
                pass
        self.instance.routes.pop(topic, None)
        return done

    async def list_topics(self) -> list[str]:
        self._check_started()
        data = fastjson.loads((await self._namesrv(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)).body_bytes())
        return sorted(str(t) for t in data.get("topicList") or ())

    async def topic_route(self, topic: str) -> TopicRoute:
        self._check_started()
        route = await self.instance.fetch_route(topic)
        if route is None:
            raise TopicNotFoundError(topic)
        return route

    async def topic_attributes(self, topic: str) -> dict[str, str]:
        """The topic's RocketMQ 5.x attributes (``message.type``) as its first master keeps them
        (GET_ALL_TOPIC_CONFIG); empty when it has none."""
        route = await self.topic_route(topic)
        for b in route.broker_datas:
            if b.master:
                answer = await self._broker(b.master, RequestCode.GET_ALL_TOPIC_CONFIG)
                table = json.loads(answer.body_bytes() or b"{}").get("topicConfigTable") or {}
                return {str(k): str(v) for k, v in ((table.get(topic) or {}).get("attributes") or {}).items()}
        return {}

    async def topic_stats(self, topic: str) -> list[tuple[MessageQueue, int, int, int]]:
        """``(queue, min offset, max offset, last update ms)`` per queue (GET_TOPIC_STATS_INFO, mqadmin topicStatus)."""
        route = await self.topic_route(topic)
        rows = []
        for b in route.broker_datas:
            if not b.master:
                continue
            resp = await self._broker(b.master, RequestCode.GET_TOPIC_STATS_INFO, {"topic": topic})
            table = (fastjson.loads(resp.body_bytes()) or {}).get("offsetTable") or {}
            for key, value in table.items():
                rows.append((MessageQueue.from_json(key), int(value.get("minOffset", 0)), int(value.get("maxOffset", 0)),
                             int(value.get("lastUpdateTimestamp", 0))))
        return sorted(rows)

    # -- groups ----------------------------------------------------------------------------------------------

    async def group_progress(self, group: str, topic: str | None = None) -> list[QueueProgress]:
        """Per queue: broker offset, committed consumer offset and lag (GET_CONSUME_STATS on every master)."""
        self._check_started()
        rows: list[QueueProgress] = []
        ext = {"consumerGroup": group, **({"topic": topic} if topic else {})}
        for _name, addr in await self._masters():
            resp = await self._broker(addr, RequestCode.GET_CONSUME_STATS, ext)
            table = (fastjson.loads(resp.body_bytes()) or {}).get("offsetTable") or {}
            for key, value in table.items():
                mq = MessageQueue.from_json(key)
                rows.append(QueueProgress(mq.topic, mq.broker_name, mq.queue_id, int(value.get("brokerOffset", 0)),
                                          int(value.get("consumerOffset", 0)), int(value.get("lastTimestamp", 0)),
                                          int(value.get("inflight", 0))))
        return sorted(rows, key=lambda r: (r.topic, r.broker_name, r.queue_id))

    async def reset_offset(self, group: str, topic: str, timestamp_ms: int, *, force: bool = True) -> dict[MessageQueue, int]:
        """Move ``group``'s committed offsets on ``topic`` to the messages stored at ``timestamp_ms``
        (INVOKE_BROKER_TO_RESET_OFFSET, 222; -1 = the end). Running consumers of the group pick it up when the
        broker tells them; otherwise restart them."""
        self._check_started()
        route = await self.topic_route(topic)
        out: dict[MessageQueue, int] = {}
        for b in route.broker_datas:
            if not b.master:
                continue
            resp = await self._broker(
                b.master, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
                {"topic": topic, "group": group, "timestamp": timestamp_ms, "isForce": "true" if force else "false"},
            )
            data = fastjson.loads(resp.body_bytes()) if resp.body else {}
            for key, value in (data.get("offsetTable") or {}).items():
                out[MessageQueue.from_json(key)] = int(value)
        return dict(sorted(out.items()))

    async def list_groups(self) -> list[dict[str, Any]]:
        """Every subscription group of every master: its config and the brokers holding it
        (GET_ALL_SUBSCRIPTIONGROUP_CONFIG, 201)."""
        self._check_started()
        groups: dict[str, dict[str, Any]] = {}
        for name, addr in await self._masters():
            resp = await self._broker(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
            table = (fastjson.loads(resp.body_bytes()) or {}).get("subscriptionGroupTable") or {}
            for group, config in table.items():
                entry = groups.setdefault(str(group), {"group": str(group), "brokers": [], **dict(config)})
                entry["brokers"].append(name)
        return [groups[g] for g in sorted(groups)]

    async def put_group(self, config: dict[str, Any], *, cluster: str | None = None,
                        broker_addr: str | None = None) -> list[str]:
        """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200) on every master of ``cluster`` (default: every cluster) or one
        broker: ``config`` is a SubscriptionGroupConfig in RocketMQ's JSON names (``groupName``,
        ``consumeMessageOrderly``, ``retryMaxTimes``, ...; :data:`GROUP_DEFAULTS` for the rest). Returns the brokers
        updated. What mqadmin updateSubGroup does."""
        self._check_started()
        group = check_name("consumer group", str(config.get("groupName") or ""))
        body = fastjson.dumps({**GROUP_DEFAULTS, **config, "groupName": group})
        done = []
        for name, addr in await self._masters(cluster, broker_addr):
            await self._broker(addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body)
            done.append(name or addr)
        return done

    async def delete_group(self, group: str, *, cluster: str | None = None, broker_addr: str | None = None) -> list[str]:
        """DELETE_SUBSCRIPTIONGROUP (207) on every master of ``cluster`` (default: every cluster) or one broker;
        returns the brokers asked (mqadmin deleteSubGroup)."""
        self._check_started()
        return await self._on_masters(RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": group, "cleanOffset": "false"},
                                      cluster, broker_addr)

    async def _per_master(self, code: int, ext: dict[str, Any], missing: Iterable[int]) -> list[tuple[str, Any]]:
        """``(broker name, decoded body)`` of one request on every master; brokers answering a code in ``missing``
        are left out."""
        self._check_started()
        out = []
        for name, addr in await self._masters():
            resp = await self._broker(addr, code, ext, ok=(ResponseCode.SUCCESS, *missing))
            if resp.code == ResponseCode.SUCCESS:
                out.append((name, fastjson.loads(resp.body_bytes()) if resp.body else {}))
        return out

    async def group_connections(self, group: str) -> dict[str, Any]:
        """The live consumers of ``group`` (GET_CONSUMER_CONNECTION_LIST, 203, on every master): ``connections``
        (clientId, clientAddr, language, version, broker), ``subscriptions``, consumeType, messageModel,
        consumeFromWhere. ClientError when no broker knows the group online."""
        answers = await self._per_master(
            RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": group}, (ResponseCode.CONSUMER_NOT_ONLINE,)
        )
        if not answers:
            raise ClientError(f"the consumer group {group} is not online on any broker")
        out: dict[str, Any] = {"group": group, "connections": [], "subscriptions": {}}
        for name, body in answers:
            out["connections"] += [{**c, "broker": name} for c in body.get("connectionSet") or []]
            out["subscriptions"].update(body.get("subscriptionTable") or {})
            for key in ("consumeType", "messageModel", "consumeFromWhere"):
                out[key] = body.get(key)
        return out

    async def producer_connections(self, group: str) -> list[dict[str, Any]]:
        """The live producers of ``group`` (GET_PRODUCER_CONNECTION_LIST, 204, on every master)."""
        answers = await self._per_master(
            RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": group}, (ResponseCode.SYSTEM_ERROR,)
        )
        connections = [{**c, "broker": name} for name, body in answers for c in body.get("connectionSet") or []]
        if not connections:
            raise ClientError(f"the producer group {group} is not online on any broker")
        return connections

    async def _brokers(self, broker_addr: str | None) -> list[tuple[str, int, str]]:
        """``(name, id, address)`` of one broker or of every registered broker."""
        info = await self.cluster_info()
        rows = [(name, int(i), addr) for name, b in info.brokers.items() for i, addr in b.broker_addrs.items()]
        if broker_addr:
            rows = [r for r in rows if r[2] == broker_addr] or [(info.name_of(broker_addr), -1, broker_addr)]
        return sorted(rows)

    async def broker_status(self, broker_addr: str | None = None) -> list[dict[str, Any]]:
        """The runtime table of one broker or of every broker (GET_BROKER_RUNTIME_INFO, 28; mqadmin brokerStatus),
        with ``brokerName``, ``brokerId`` and ``brokerAddr`` added."""
        self._check_started()
        out = []
        for name, broker_id, addr in await self._brokers(broker_addr):
            resp = await self._broker(addr, RequestCode.GET_BROKER_RUNTIME_INFO)
            table = (fastjson.loads(resp.body_bytes()) or {}).get("table") or {}
            out.append({"brokerName": name, "brokerId": broker_id, "brokerAddr": addr, **table})
        return out

    async def broker_config(self, broker_addr: str) -> dict[str, str]:
        """A broker's settings (GET_BROKER_CONFIG, 26; mqadmin getBrokerConfig)."""
        from pyrmq.kernel.javaprops import parse_java_properties

        self._check_started()
        resp = await self._broker(broker_addr, RequestCode.GET_BROKER_CONFIG)
        return parse_java_properties(resp.body_bytes().decode("utf-8").splitlines())

    async def update_broker_config(
        self, values: dict[str, Any], *, broker_addr: str | None = None, cluster: str | None = None
    ) -> list[str]:
        """Change settings of running brokers (UPDATE_BROKER_CONFIG, 25; mqadmin updateBrokerConfig): one broker,
        or every master of ``cluster`` / of every cluster. Returns the brokers changed."""
        self._check_started()
        body = "".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}\n" for k, v in values.items()).encode()
        changed = []
        for name, addr in await self._masters(cluster, broker_addr):
            await self._broker(addr, RequestCode.UPDATE_BROKER_CONFIG, body=body)
            changed.append(name)
        return changed

    async def broker_stats(self, broker_addr: str, stats_name: str, stats_key: str) -> dict[str, Any] | None:
        """RocketMQ's BrokerStatsData (VIEW_BROKER_STATS_DATA, 315): ``statsMinute`` / ``statsHour`` / ``statsDay``
        ``{sum, tps, avgpt}``; None when the broker counted nothing under that name and key."""
        self._check_started()
        resp = await self._broker(
            broker_addr, RequestCode.VIEW_BROKER_STATS_DATA, {"statsName": stats_name, "statsKey": stats_key},
            ok=(ResponseCode.SUCCESS, ResponseCode.SYSTEM_ERROR),
        )
        return fastjson.loads(resp.body_bytes()) if resp.code == ResponseCode.SUCCESS else None

    # -- messages --------------------------------------------------------------------------------------------

    async def pending_transactions(self, topic: str | None = None) -> list[Any]:
        """Half messages of ``topic`` not committed or rolled back yet, with their check counts
        (:func:`pyrmq.client.transaction.pending_transactions`)."""
        from pyrmq.client.transaction import pending_transactions

        self._check_started()
        return await pending_transactions(self, topic)

    async def query_message_by_key(
        self, topic: str, key: str, *, max_num: int = 32, begin_ms: int = 0, end_ms: int | None = None,
        broker_id: int = MASTER_ID,
    ) -> list[MessageExt]:
        """QUERY_MESSAGE (12) on every broker group of the topic, on its broker ``broker_id`` (0 the master, >= 1 a
        slave: read from the slave's own index); keeps the messages whose KEYS include ``key``."""
        found = await self._query(topic, key, max_num, begin_ms, end_ms, unique=False, broker_id=broker_id)
        return [m for m in found if key in m.keys][:max_num]

    async def query_message_by_unique_key(self, topic: str, uniq_key: str, *, broker_id: int = MASTER_ID) -> list[MessageExt]:
        found = await self._query(topic, uniq_key, 32, 0, None, unique=True, broker_id=broker_id)
        return [m for m in found if m.uniq_key == uniq_key]

    async def _query(self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int | None, *, unique: bool,
                     broker_id: int = MASTER_ID) -> list[MessageExt]:
        self._check_started()
        route = await self.topic_route(topic)
        out: dict[tuple[str, int], MessageExt] = {}
        for b in route.broker_datas:
            addr = b.broker_addrs.get(broker_id)
            if not addr:
                continue
            for m in await api.query_message(self.instance, addr, topic, key, max_num=max_num, begin_ms=begin_ms,
                                             end_ms=end_ms, unique_key=unique, broker_name=b.broker_name):
                out[(m.store_host[0] + str(m.store_host[1]), m.commit_log_offset)] = m
        return sorted(out.values(), key=lambda m: (m.store_timestamp, m.broker_name, m.queue_offset))

    async def query_message_by_id(self, msg_id: str, topic: str | None = None, *, broker_id: int | None = None) -> MessageExt:
        """By offset message id (VIEW_MESSAGE_BY_ID on the broker the id names, spec 5.9); when that fails and a
        topic is given, by client id (UNIQ_KEY) through the index.

        ``broker_id`` reads from that broker of the group instead (0 the master, >= 1 a slave): a slave's commit log
        is the master's byte for byte, so the id's offset is valid there too, also when the master is gone."""
        self._check_started()
        error: Exception | None = None
        try:
            ip, port, offset = decode_message_id(msg_id)
        except ValueError as exc:
            error = exc
        else:
            addr = f"{ip}:{port}"
            try:
                info = await self.cluster_info()
                if broker_id is None:
                    return await api.view_message(self.instance, addr, offset, info.name_of(addr))
                return await self._view_on(info, addr, offset, msg_id, broker_id)
            except (RemotingError, BrokerError) as exc:
                error = exc
        if topic:
            found = await self.query_message_by_unique_key(topic, msg_id, broker_id=MASTER_ID if broker_id is None else broker_id)
            if found:
                return found[0]
        hint = "" if topic else " (give the topic to look it up as a client message id / UNIQ_KEY)"
        raise ClientError(f"message {msg_id} not found: {error}{hint}")

    async def _view_on(self, info: ClusterInfo, addr: str, offset: int, msg_id: str, broker_id: int) -> MessageExt:
        """VIEW_MESSAGE_BY_ID on broker ``broker_id`` of the group whose master stored ``msg_id``. When that master
        has left the name server the group is not known by its address: every group's broker ``broker_id`` is asked
        and only a record whose offset message id (store host + offset) is ``msg_id`` is taken."""
        named = info.name_of(addr)
        groups = [named] if named else sorted(info.brokers)
        error: Exception = BrokerError(ResponseCode.SYSTEM_ERROR, f"no broker with id {broker_id} in "
                                       + (f"broker group {named}" if named else "any broker group"), addr, "VIEW_MESSAGE_BY_ID")
        for name in groups:
            target = info.brokers[name].broker_addrs.get(broker_id)
            if not target:
                continue
            try:
                m = await api.view_message(self.instance, target, offset, name)
            except (RemotingError, BrokerError, ValueError) as exc:  # ValueError: no record boundary at that offset
                error = exc
                continue
            if m.offset_msg_id.upper() == msg_id.upper():
                return m
        raise error

    # -- access control (RocketMQ's ACL 1.0; the broker needs aclEnable and an admin account) -------------------

    async def acl_accounts(self, *, cluster: str | None = None, broker_addr: str | None = None) -> dict[str, dict[str, Any]]:
        """GET_BROKER_CLUSTER_ACL_INFO on each master: broker name -> ``{"globalWhiteAddrs": [...],
        "plainAccessConfigs": [account without its secret, ...], "version": ...}``."""
        self._check_started()
        out: dict[str, dict[str, Any]] = {}
        for name, addr in await self._masters(cluster, broker_addr):
            response = await self._broker(addr, RequestCode.GET_BROKER_CLUSTER_ACL_INFO)
            data = json.loads(response.body_bytes()) if response.body_bytes() else {}
            data = {"version": response.ext_fields.get("version"), **data}
            for account in data.get("plainAccessConfigs") or []:
                account.pop("secretKey", None)  # a broker that sends secrets does not get them shown
            out[name or addr] = data
        return out

    async def update_acl_account(
        self,
        access_key: str,
        secret_key: str | None = None,
        *,
        white_remote_address: str | None = None,
        admin: bool | None = None,
        default_topic_perm: str | None = None,
        default_group_perm: str | None = None,
        topic_perms: Iterable[str] | None = None,
        group_perms: Iterable[str] | None = None,
        cluster: str | None = None,
        broker_addr: str | None = None,
    ) -> list[str]:
        """UPDATE_AND_CREATE_ACL_CONFIG: create the account or change what is given (a new account needs the
        secret); ``topic_perms`` / ``group_perms`` replace the lists (``["topicA=PUB|SUB", ...]``)."""
        self._check_started()
        ext: dict[str, Any] = {"accessKey": access_key}
        for key, value in (("secretKey", secret_key), ("whiteRemoteAddress", white_remote_address),
                           ("defaultTopicPerm", default_topic_perm), ("defaultGroupPerm", default_group_perm)):
            if value is not None:
                ext[key] = value
        if admin is not None:
            ext["admin"] = "true" if admin else "false"
        if topic_perms is not None:
            ext["topicPerms"] = ",".join(topic_perms)
        if group_perms is not None:
            ext["groupPerms"] = ",".join(group_perms)
        return await self._on_masters(RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, ext, cluster, broker_addr)

    async def delete_acl_account(self, access_key: str, *, cluster: str | None = None, broker_addr: str | None = None) -> list[str]:
        """DELETE_ACL_CONFIG on each master."""
        self._check_started()
        return await self._on_masters(RequestCode.DELETE_ACL_CONFIG, {"accessKey": access_key}, cluster, broker_addr)

    async def update_acl_white_list(
        self, addresses: Iterable[str], *, file: str | None = None, cluster: str | None = None, broker_addr: str | None = None
    ) -> list[str]:
        """UPDATE_GLOBAL_WHITE_ADDRS_CONFIG: replace ``globalWhiteRemoteAddresses`` (of ``file``, default the
        broker's plain_acl.yml) on each master."""
        self._check_started()
        ext: dict[str, Any] = {"globalWhiteAddrs": ",".join(addresses)}
        if file:
            ext["aclFileFullPath"] = file
        return await self._on_masters(RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, ext, cluster, broker_addr)

    async def _on_masters(self, code: int, ext: dict[str, Any], cluster: str | None, broker_addr: str | None) -> list[str]:
        done = []
        for name, addr in await self._masters(cluster, broker_addr):
            await self._broker(addr, code, dict(ext))
            done.append(name or addr)
        return done
