"""Name server plugin: broker registration and liveness, topic routes, cluster info, KV config (spec 2.1, 3.10, 7.1).

Registered for the ``namesrv`` role only. Like RocketMQ's name server it answers nothing at all for a request code it
does not know (the client times out), and several name servers run side by side without talking to each other.
"""

from __future__ import annotations

import json
import logging
import struct
import zlib
from collections.abc import Iterator
from typing import Any

import trio

import attrs
from prometheus_client.core import GaugeMetricFamily, Metric

from pyrmq.kernel.javaprops import format_java_properties
from pyrmq.kernel.hookspecs import hookimpl
from pyrmq.kernel.settings import at_least, setting
from pyrmq.kernel.kernel import Kernel
from pyrmq.plugins.namesrv.kvconfig import KVConfig
from pyrmq.plugins.namesrv.routes import RouteTable
from pyrmq.remoting import fastjson
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.headers import (
    HeaderBase,
    AddWritePermOfBrokerRequestHeader,
    DeleteKVConfigRequestHeader,
    GetKVConfigRequestHeader,
    GetRouteInfoRequestHeader,
    PutKVConfigRequestHeader,
    QueryDataVersionRequestHeader,
    RegisterBrokerRequestHeader,
    UnRegisterBrokerRequestHeader,
    WipeWritePermOfBrokerRequestHeader,
    header,
)

log = logging.getLogger("pyrmq.namesrv")

ROLE = "namesrv"
ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"
#: REGISTER_BROKER bodies are a RegisterBrokerBody from V3_0_11 on, a bare TopicConfigSerializeWrapper before
REGISTER_BODY_VERSION = 37


@header
class TopicRequestHeader(HeaderBase):
    """DELETE_TOPIC_IN_NAMESRV (216)."""

    topic: str


@header
class ClusterRequestHeader(HeaderBase):
    """GET_TOPICS_BY_CLUSTER (224)."""

    cluster: str


@header
class NamespaceRequestHeader(HeaderBase):
    """GET_KVLIST_BY_NAMESPACE (219)."""

    namespace: str


def _now_ms() -> float:
    return trio.current_time() * 1000.0


def decode_register_body(body: bytes, *, compressed: bool, version: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """(dataVersion, topicConfigTable) of a REGISTER_BROKER body, plain JSON or compressed (spec 4.3)."""
    if not body:
        return {}, {}
    if compressed:
        raw = zlib.decompress(body)
        pos = 0

        def take(n: int) -> bytes:
            nonlocal pos
            if pos + n > len(raw):
                raise ValueError("compressed register body is truncated")
            piece = raw[pos : pos + n]
            pos += n
            return piece

        (length,) = struct.unpack(">i", take(4))
        data_version = json.loads(take(length))
        (count,) = struct.unpack(">i", take(4))
        topics: dict[str, Any] = {}
        for _ in range(count):
            (length,) = struct.unpack(">i", take(4))
            name, read, write, perm, filter_type = take(length).decode().split(" ")[:5]
            topics[name] = {
                "topicName": name,
                "readQueueNums": int(read),
                "writeQueueNums": int(write),
                "perm": int(perm),
                "topicFilterType": filter_type,
            }
        return data_version, topics
    doc = fastjson.loads(body)
    wrapper = doc.get("topicConfigSerializeWrapper", {}) if version >= REGISTER_BODY_VERSION else doc
    if not isinstance(wrapper, dict):
        raise ValueError("topicConfigSerializeWrapper is not an object")
    return wrapper.get("dataVersion") or {}, wrapper.get("topicConfigTable") or {}


class NamesrvCollector:
    """The name server's own series: live brokers per cluster (a pyrmq addition; 5.x's name server exports only
    RPC latency)."""

    def __init__(self, namesrv: Any) -> None:
        self.namesrv = namesrv

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        routes = self.namesrv.routes
        brokers = GaugeMetricFamily(
            "rocketmq_namesrv_brokers", "Broker groups registered with the name server.", labels=["node_type", "cluster"]
        )
        for cluster, names in sorted(routes.clusters.items()):
            brokers.add_metric(["namesrv", cluster], len(names))
        topics = GaugeMetricFamily("rocketmq_namesrv_topics", "Topics with routes on the name server.", labels=["node_type"])
        topics.add_metric(["namesrv"], len(routes.topic_queues))
        yield from (brokers, topics)


@attrs.frozen
class NamesrvSettings:
    """Name server settings (``[namesrv]``, RocketMQ's namesrv.conf names)."""

    #: scan for silent brokers every N ms; brokers silent for brokerChannelExpiredTime ms are removed (spec 7.1)
    scanNotActiveBrokerInterval: int = setting(10_000, check=at_least(1))
    brokerChannelExpiredTime: int = setting(120_000, check=at_least(1))
    orderMessageEnable: bool = setting(False)
    kvConfigPath: str = setting("~/namesrv/kvConfig.json")


class NameServer:
    """State and request processors of one name server; registered as a plugin (its methods are hook
    implementations) by this module's ``pyrmq_configure``."""

    def __init__(self, kernel: Any) -> None:
        settings = kernel.settings(NamesrvSettings)
        self.kernel = kernel
        self.settings = settings
        self.routes = RouteTable(order_message_enable=settings.orderMessageEnable)
        self.kv = KVConfig(settings.kvConfigPath)
        self.kv.load()

    # -- processors ------------------------------------------------------------------------------------------

    def processors(self) -> dict[int, Any]:
        return {
            RequestCode.REGISTER_BROKER: self.register_broker,
            RequestCode.UNREGISTER_BROKER: self.unregister_broker,
            RequestCode.QUERY_DATA_VERSION: self.query_data_version,
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self.get_route,
            RequestCode.GET_BROKER_CLUSTER_INFO: self.get_cluster_info,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self.get_all_topics,
            RequestCode.GET_TOPICS_BY_CLUSTER: self.get_topics_by_cluster,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self.delete_topic,
            RequestCode.WIPE_WRITE_PERM_OF_BROKER: self.wipe_write_perm,
            RequestCode.ADD_WRITE_PERM_OF_BROKER: self.add_write_perm,
            RequestCode.PUT_KV_CONFIG: self.put_kv,
            RequestCode.GET_KV_CONFIG: self.get_kv,
            RequestCode.DELETE_KV_CONFIG: self.delete_kv,
            RequestCode.GET_KVLIST_BY_NAMESPACE: self.get_kv_list,
            RequestCode.GET_NAMESRV_CONFIG: self.get_config,
        }

    async def register_broker(self, conn: Any, req: RemotingCommand) -> RemotingCommand:
        h = RegisterBrokerRequestHeader.from_ext_fields(req.ext_fields)
        body = req.body_bytes()
        if h.body_crc32 and (zlib.crc32(body) & 0x7FFFFFFF) != h.body_crc32:
            return req.make_response(ResponseCode.SYSTEM_ERROR, "crc32 not match")
        try:
            data_version, topics = decode_register_body(body, compressed=h.compressed, version=req.version)
        except (ValueError, zlib.error, struct.error, UnicodeDecodeError) as exc:
            return req.make_response(ResponseCode.SYSTEM_ERROR, f"cannot decode the REGISTER_BROKER body: {exc}")
        result = self.routes.register_broker(
            cluster=h.cluster_name,
            broker_addr=h.broker_addr,
            broker_name=h.broker_name,
            broker_id=h.broker_id,
            ha_server_addr=h.ha_server_addr or "",
            data_version=data_version,
            topic_configs=topics,
            connection=conn,
            now_ms=_now_ms(),
        )
        body_out = b""
        if self.routes.order_message_enable:
            body_out = json.dumps({"table": self.kv.namespace(ORDER_TOPIC_CONFIG)}).encode()
        return req.make_response(
            ResponseCode.SUCCESS,
            ext_fields={"haServerAddr": result.ha_server_addr, "masterAddr": result.master_addr},
            body=body_out,
        )

    async def unregister_broker(self, conn: Any, req: RemotingCommand) -> RemotingCommand:
        h = UnRegisterBrokerRequestHeader.from_ext_fields(req.ext_fields)
        self.routes.unregister_broker(
            cluster=h.cluster_name, broker_addr=h.broker_addr, broker_name=h.broker_name, broker_id=h.broker_id
        )
        return req.make_response(ResponseCode.SUCCESS)

    async def query_data_version(self, conn: Any, req: RemotingCommand) -> RemotingCommand:
        addr = QueryDataVersionRequestHeader.from_ext_fields(req.ext_fields).broker_addr
        theirs = fastjson.loads(req.body_bytes()) if req.body else {}
        live = self.routes.live.get(addr)
        ours = live.data_version if live else {}
        changed = live is None or (theirs.get("timestamp"), theirs.get("counter")) != (ours.get("timestamp"), ours.get("counter"))
        self.routes.touch(addr, _now_ms())
        return req.make_response(
            ResponseCode.SUCCESS, ext_fields={"changed": "true" if changed else "false"}, body=json.dumps(ours).encode()
        )

    async def get_route(self, conn: Any, req: RemotingCommand) -> RemotingCommand:
        h = GetRouteInfoRequestHeader.from_ext_fields(req.ext_fields)
        topic = h.topic
        route = self.routes.route(topic)
        if route is None:
            return req.make_response(
                ResponseCode.TOPIC_NOT_EXIST, f"No topic route info in name server for the topic: {topic}"
            )
        if self.routes.order_message_enable:
            conf = self.kv.get(ORDER_TOPIC_CONFIG, topic)
            if conf:
                route["orderTopicConf"] = conf
        style = fastjson.route_json_style(req.version, h.accept_standard_json_only)
        return req.make_response(ResponseCode.SUCCESS, body=fastjson.dumps(route, style=style))

    async def get_cluster_info(self, conn: Any, req: RemotingCommand) -> RemotingCommand:
        # the Java name server always writes ClusterInfo fastjson style, bare numeric keys (spec 4.5)
        return req.make_response(ResponseCode.SUCCESS, body=fastjson.dumps(self.routes.cluster_info(), style=fastjson.FASTJSON))

    async def get_all_topics(self, conn: Any, req: RemotingCommand) -> RemotingCommand:
        return req.make_response(ResponseCode.SUCCESS, body=json.dumps({"topicList": self.routes.all_topics()}).encode())

    async def get_topics_by_cluster(self, conn: Any, req: RemotingCommand) -> RemotingCommand:
        topics = self.routes.topics_of_cluster(ClusterRequestHeader.from_ext_fields(req.ext_fields).cluster)
        return req.make_response(ResponseCode.SUCCESS, body=json.dumps({"topicList": topics}).encode())

    async def delete_topic(self, conn: Any, req: RemotingCommand) -> RemotingCommand:
        self.routes.delete_topic(TopicRequestHeader.from_ext_fields(req.ext_fields).topic)
        return req.make_response(ResponseCode.SUCCESS)

    async def wipe_write_perm(self, conn: Any, req: RemotingCommand) -> RemotingCommand:
        count = self.routes.wipe_write_perm(WipeWritePermOfBrokerRequestHeader.from_ext_fields(req.ext_fields).broker_name)
        return req.make_response(ResponseCode.SUCCESS, ext_fields={"wipeTopicCount": str(count)})

    async def add_write_perm(self, conn: Any, req: RemotingCommand) -> RemotingCommand:
        count = self.routes.add_write_perm(AddWritePermOfBrokerRequestHeader.from_ext_fields(req.ext_fields).broker_name)
        return req.make_response(ResponseCode.SUCCESS, ext_fields={"addTopicCount": str(count)})

    async def put_kv(self, conn: Any, req: RemotingCommand) -> RemotingCommand:
        h = PutKVConfigRequestHeader.from_ext_fields(req.ext_fields)
        self.kv.put(h.namespace, h.key, h.value)
        return req.make_response(ResponseCode.SUCCESS)

    async def get_config(self, conn: Any, req: RemotingCommand) -> RemotingCommand:
        """GET_NAMESRV_CONFIG (319): the settings as Java properties text (mqadmin getNamesrvConfig)."""
        listening = self.kernel.listening.get(ROLE)
        values = self.kernel.settings.section(ROLE)
        if listening:
            values["listenPort"] = int(listening.rpartition(":")[2])
        return req.make_response(ResponseCode.SUCCESS, body=format_java_properties(values).encode())

    async def get_kv(self, conn: Any, req: RemotingCommand) -> RemotingCommand:
        h = GetKVConfigRequestHeader.from_ext_fields(req.ext_fields)
        namespace, key = h.namespace, h.key
        value = self.kv.get(namespace, key)
        if value is None:
            return req.make_response(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {namespace} Key: {key}")
        return req.make_response(ResponseCode.SUCCESS, ext_fields={"value": value})

    async def delete_kv(self, conn: Any, req: RemotingCommand) -> RemotingCommand:
        h = DeleteKVConfigRequestHeader.from_ext_fields(req.ext_fields)
        self.kv.delete(h.namespace, h.key)
        return req.make_response(ResponseCode.SUCCESS)

    async def get_kv_list(self, conn: Any, req: RemotingCommand) -> RemotingCommand:
        namespace = NamespaceRequestHeader.from_ext_fields(req.ext_fields).namespace
        table = self.kv.namespace(namespace)
        if not table:
            return req.make_response(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {namespace}")
        return req.make_response(ResponseCode.SUCCESS, body=json.dumps({"table": table}).encode())

    # -- liveness --------------------------------------------------------------------------------------------

    async def scan_brokers(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Every scanNotActiveBrokerInterval (first after 5 s) drop brokers silent for brokerChannelExpiredTime."""
        task_status.started()
        await trio.sleep(5)
        while True:
            self.routes.scan_not_active(_now_ms(), self.settings.brokerChannelExpiredTime)
            await trio.sleep(self.settings.scanNotActiveBrokerInterval / 1000)


    # -- hooks (this object is registered as a plugin) ---------------------------------------------------------

    @hookimpl(trylast=True)
    def pyrmq_register_processors(self, role: str) -> dict[int, Any] | None:
        return self.processors() if role == ROLE else None

    @hookimpl(trylast=True)
    async def pyrmq_serve(self, nursery: trio.Nursery) -> None:
        await nursery.start(self.scan_brokers)

    @hookimpl(trylast=True)
    def pyrmq_register_metric_collectors(self, role: str) -> list[Any] | None:
        return [NamesrvCollector(self)] if role == ROLE else None

    @hookimpl(trylast=True)
    def pyrmq_connection_closed(self, role: str, connection: Any) -> None:
        if role == ROLE:
            self.routes.connection_closed(connection)


@hookimpl(trylast=True)
def pyrmq_register_settings() -> dict[str, type]:
    return {"namesrv": NamesrvSettings}


@hookimpl(trylast=True)
def pyrmq_configure(kernel: Kernel) -> None:
    if ROLE in kernel.bundle.roles:
        kernel.register(NameServer(kernel), "namesrv")
