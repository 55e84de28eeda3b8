"""What the dashboard asks the cluster, and the figures it samples for its charts.

Everything goes through the client library (:class:`pyrmq.client.admin.Admin`, :mod:`pyrmq.client.dlq`, a
:class:`pyrmq.client.producer.Producer` for test messages). A request a broker does not support is reported as
:class:`Unsupported` with the broker's answer, so a page can say so instead of failing.
"""

from __future__ import annotations

import collections
import time
from typing import Any

import attrs
import trio

from pyrmq.client import api
from pyrmq.client.admin import Admin, is_system_topic
from pyrmq.client.errors import BrokerError, ClientError
from pyrmq.client.message import Message, MessageExt, MessageQueue
from pyrmq.client.producer import Producer
from pyrmq.remoting import fastjson
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.errors import RemotingError
from pyrmq.remoting.vocabulary import DLQ_GROUP_TOPIC_PREFIX, PullSysFlag

#: not in remoting.codes yet (RocketMQ 4.9.8 RequestCode.GET_ALL_PRODUCER_INFO)
GET_ALL_PRODUCER_INFO = 328
#: pulls of the message browser never commit an offset; RocketMQ's tools use this group
TOOLS_GROUP = "TOOLS_CONSUMER"
#: the message browser reads at most this many messages of a time range (then says the result is cut)
RANGE_LIMIT = 2000
#: one hour of samples at the default interval
HISTORY = 720
#: topics sampled for their TPS chart (the ones whose page was opened last)
WATCHED = 20
#: the groups a RocketMQ broker creates for itself (SubscriptionGroupManager's defaults)
SYSTEM_GROUPS = frozenset({"TOOLS_CONSUMER", "FILTERSRV_CONSUMER", "SELF_TEST_C_GROUP", "CID_ONS-HTTP-PROXY",
                           "CID_ONSAPI_PULL", "CID_ONSAPI_PERMISSION", "CID_ONSAPI_OWNER", "CID_SYS_RMQ_TRANS"})
FAILURES = (RemotingError, BrokerError, ClientError, ValueError, KeyError)


class Unsupported(Exception):
    """A broker answered REQUEST_CODE_NOT_SUPPORTED (or the like): the page shows this instead of the data."""


@attrs.define
class Sample:
    at_ms: int
    put_tps: float
    get_tps: float


@attrs.define
class BrokerRow:
    cluster: str
    name: str
    broker_id: int
    addr: str
    version: str = ""
    put_total: int = 0
    get_total: int = 0
    commit_log_max: int = 0
    disk_ratio: float = -1.0
    boot_ms: int = 0
    #: replication lag in bytes (GET_BROKER_RUNTIME_INFO's haBehindBytes): a master's slowest slave, how far a slave is
    #: behind its master; None for a broker without replication
    ha_behind_bytes: int | None = None
    error: str = ""

    @property
    def role(self) -> str:
        return "MASTER" if self.broker_id == 0 else f"SLAVE ({self.broker_id})"


class Backend:
    """An Admin client and a producer for the dashboard's life (entered by whoever serves it), plus the sampler's
    history."""

    def __init__(self, namesrv: str, *, interval: float = 5.0, timeout: float = 5.0,
                 credentials: tuple[str, str] | None = None) -> None:
        self.namesrv = namesrv
        self.interval = interval
        #: ``(access_key, secret_key)`` every request is signed with (a broker with ACL on), else None
        self.admin = Admin(namesrv, timeout=timeout, credentials=credentials)
        self.producer = Producer(namesrv, group="PYRMQ_DASHBOARD_PRODUCER", credentials=credentials)
        self.samples: collections.deque[Sample] = collections.deque(maxlen=HISTORY)
        self._last: tuple[float, int, int] | None = None
        #: topics whose page was opened: messages stored per second since then (at most WATCHED topics)
        self.topic_samples: dict[str, collections.deque[Sample]] = {}
        self._topic_last: dict[str, tuple[float, int]] = {}

    async def _broker(self, addr: str, code: int, ext: dict[str, Any] | None = None, *, body: bytes = b"") -> Any:
        """A request to one broker; the decoded JSON body (None when empty). Unsupported codes raise Unsupported."""
        resp = await self.admin.instance.remoting.invoke(addr, _request(code, ext or {}, body), self.admin.timeout)
        if resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
            raise Unsupported(f"{addr} does not support request {_code_name(code)}: {resp.remark}")
        if resp.code != ResponseCode.SUCCESS:
            raise BrokerError(resp.code, resp.remark, addr, _code_name(code))
        raw = resp.body_bytes()
        return fastjson.loads(raw) if raw else None

    # -- sampling --------------------------------------------------------------------------------------------

    async def sample_forever(self) -> None:
        """Every ``interval`` seconds: put and get totals of every broker, turned into messages per second."""
        while True:
            try:
                await self.sample_once()
            except FAILURES:
                pass  # the cluster page shows the error; the chart keeps its gap
            await trio.sleep(self.interval)

    async def sample_once(self) -> None:
        rows = await self.brokers()
        now = time.monotonic()
        put = sum(r.put_total for r in rows if not r.error)
        get = sum(r.get_total for r in rows if not r.error)
        if self._last is not None:
            then, put0, get0 = self._last
            seconds = max(now - then, 1e-3)
            self.samples.append(Sample(int(time.time() * 1000), max(put - put0, 0) / seconds, max(get - get0, 0) / seconds))
        self._last = (now, put, get)
        for topic in list(self.topic_samples):
            try:
                stored = sum(hi for _mq, _lo, hi, _t in await self.admin.topic_stats(topic))
            except FAILURES:
                continue  # deleted meanwhile, or its broker is away: a gap in its chart
            at = time.monotonic()
            if topic in self._topic_last:
                then, before = self._topic_last[topic]
                tps = max(stored - before, 0) / max(at - then, 1e-3)
                self.topic_samples[topic].append(Sample(int(time.time() * 1000), tps, 0.0))
            self._topic_last[topic] = (at, stored)

    def watch_topic(self, topic: str) -> list[Sample]:
        """Start sampling ``topic`` (its page was opened); its samples so far."""
        if topic not in self.topic_samples:
            if len(self.topic_samples) >= WATCHED:
                oldest = next(iter(self.topic_samples))
                del self.topic_samples[oldest]
                self._topic_last.pop(oldest, None)
            self.topic_samples[topic] = collections.deque(maxlen=HISTORY)
        return list(self.topic_samples[topic])

    # -- cluster ---------------------------------------------------------------------------------------------

    async def brokers(self) -> list[BrokerRow]:
        info = await self.admin.cluster_info()
        rows: list[BrokerRow] = []

        async def one(row: BrokerRow) -> None:
            try:
                table = (await self._broker(row.addr, RequestCode.GET_BROKER_RUNTIME_INFO) or {}).get("table") or {}
                row.version = str(table.get("brokerVersionDesc", ""))
                row.put_total = int(table.get("msgPutTotalTodayNow", 0))
                row.get_total = int(table.get("msgGetTotalTodayNow", 0))
                row.commit_log_max = int(table.get("commitLogMaxOffset", 0))
                row.disk_ratio = float(table.get("commitLogDiskRatio", -1))
                row.boot_ms = int(table.get("bootTimestamp", 0))
                if "haBehindBytes" in table:
                    row.ha_behind_bytes = int(table["haBehindBytes"])
            except (*FAILURES, Unsupported) as exc:
                row.error = str(exc)
            rows.append(row)

        async with trio.open_nursery() as nursery:
            for cluster, names in info.clusters.items():
                for name in names:
                    b = info.brokers.get(name)
                    for broker_id, addr in sorted((b.broker_addrs if b else {}).items()):
                        nursery.start_soon(one, BrokerRow(cluster, name, int(broker_id), addr))
        return sorted(rows, key=lambda r: (r.cluster, r.name, r.broker_id))

    async def masters(self) -> list[tuple[str, str]]:
        return (await self.admin.cluster_info()).masters()

    # -- topics ----------------------------------------------------------------------------------------------

    async def topics(self) -> list[tuple[str, bool]]:
        info = await self.admin.cluster_info()
        names = [*info.clusters, *info.brokers]
        return [(t, is_system_topic(t, names)) for t in await self.admin.list_topics()]

    async def topic_queues(self, topic: str) -> list[tuple[MessageQueue, int, int, int]]:
        return await self.admin.topic_stats(topic)

    async def send_test(self, topic: str, body: str, tags: str, keys: str) -> Any:
        return await self.producer.send(Message(topic, body, tags=tags or None, keys=keys.split()))

    # -- groups ----------------------------------------------------------------------------------------------

    async def groups(self, *, system: bool = False) -> list[str]:
        out: set[str] = set()
        for _name, addr in await self.masters():
            data = await self._broker(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG) or {}
            out.update(str(g) for g in (data.get("subscriptionGroupTable") or {}))
        return sorted(g for g in out if system or g not in SYSTEM_GROUPS)

    async def consumer_connections(self, group: str) -> dict[str, Any] | None:
        """GET_CONSUMER_CONNECTION_LIST merged over the masters; None when the group is not online."""
        merged: dict[str, Any] | None = None
        for _name, addr in await self.masters():
            try:
                data = await self._broker(addr, RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": group}) or {}
            except BrokerError as exc:
                if exc.code == ResponseCode.CONSUMER_NOT_ONLINE:
                    continue
                raise
            if merged is None:
                merged = dict(data)
                merged["connectionSet"] = list(data.get("connectionSet") or [])
            else:
                seen = {c.get("clientId") for c in merged["connectionSet"]}
                merged["connectionSet"] += [c for c in data.get("connectionSet") or [] if c.get("clientId") not in seen]
        return merged

    async def producer_groups(self) -> dict[str, list[dict[str, Any]]]:
        """GET_ALL_PRODUCER_INFO (328): producer group -> connections. Raises Unsupported on brokers without it."""
        out: dict[str, list[dict[str, Any]]] = {}
        for _name, addr in await self.masters():
            data = await self._broker(addr, GET_ALL_PRODUCER_INFO) or {}
            for group, conns in (data.get("groupChannelTables") or {}).items():
                out.setdefault(str(group), []).extend(conns or [])
        return dict(sorted(out.items()))

    async def producer_connections(self, group: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for _name, addr in await self.masters():
            try:
                data = await self._broker(addr, RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": group}) or {}
            except BrokerError:
                continue  # that broker has no producer of the group
            out += data.get("connectionSet") or []
        return out

    # -- messages --------------------------------------------------------------------------------------------

    async def messages_in_range(self, topic: str, begin_ms: int, end_ms: int) -> tuple[list[MessageExt], bool]:
        """Messages of ``topic`` stored in [begin_ms, end_ms], newest first; True when cut at RANGE_LIMIT."""
        route = await self.admin.topic_route(topic)
        instance = self.admin.instance
        found: list[MessageExt] = []
        cut = False
        for b in route.broker_datas:
            addr = b.master
            if not addr:
                continue
            queues = max((q.read_queue_nums for q in route.queue_datas if q.broker_name == b.broker_name), default=0)
            for qid in range(queues):
                mq = MessageQueue(topic, b.broker_name, qid)
                low = await api.min_offset(instance, addr, mq)
                high = await api.max_offset(instance, addr, mq)
                start = max(await api.search_offset(instance, addr, mq, begin_ms), low)
                offset = start
                while offset < high and not cut:
                    result = await api.pull(instance, addr, mq, TOOLS_GROUP, offset, max_nums=32, sys_flag=int(PullSysFlag.SUBSCRIPTION),
                                            suspend_ms=0, subscription="*", timeout=self.admin.timeout)
                    if result.next_begin_offset <= offset:
                        break
                    for m in result.messages:
                        if begin_ms <= m.store_timestamp <= end_ms:
                            found.append(m)
                    offset = result.next_begin_offset
                    if result.messages and result.messages[-1].store_timestamp > end_ms:
                        break
                    if len(found) >= RANGE_LIMIT:
                        cut = True
        found.sort(key=lambda m: (m.store_timestamp, m.broker_name, m.queue_id, m.queue_offset), reverse=True)
        return found[:RANGE_LIMIT], cut

    async def by_key(self, topic: str, key: str) -> list[MessageExt]:
        return await self.admin.query_message_by_key(topic, key, max_num=64)

    async def by_id(self, msg_id: str, topic: str | None) -> MessageExt:
        return await self.admin.query_message_by_id(msg_id, topic or None)

    async def consumed_by(self, message: MessageExt) -> list[tuple[str, str]]:
        """(group, "consumed" / "not consumed yet") for every group with an offset on the message's queue."""
        rows = []
        for _name, addr in await self.masters():
            try:
                data = await self._broker(addr, RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": message.topic}) or {}
            except FAILURES:
                continue
            for group in sorted(data.get("groupList") or []):
                try:
                    progress = await self.admin.group_progress(str(group), message.topic)
                except FAILURES:
                    continue
                for p in progress:
                    if p.broker_name == message.broker_name and p.queue_id == message.queue_id:
                        rows.append((str(group), "consumed" if p.consumer_offset > message.queue_offset else "not consumed yet"))
        return rows

    async def consume_directly(self, group: str, client_id: str, message: MessageExt) -> dict[str, Any]:
        """CONSUME_MESSAGE_DIRECTLY (309) through the broker that stores the message."""
        addr = f"{message.store_host[0]}:{message.store_host[1]}"
        ext = {"consumerGroup": group, "clientId": client_id, "msgId": message.offset_msg_id, "brokerName": message.broker_name}
        if message.uniq_key:
            ext["uniqueKey"] = message.uniq_key
        resp = await self.admin.instance.remoting.invoke(addr, _request(RequestCode.CONSUME_MESSAGE_DIRECTLY, ext, b""),
                                                         self.admin.timeout + 5)
        if resp.code != ResponseCode.SUCCESS:
            raise BrokerError(resp.code, resp.remark, addr, "CONSUME_MESSAGE_DIRECTLY")
        raw = resp.body_bytes()
        return fastjson.loads(raw) if raw else {}

    # -- dead letters ----------------------------------------------------------------------------------------

    async def dlq_groups(self) -> list[str]:
        return sorted(t[len(DLQ_GROUP_TOPIC_PREFIX):] for t in await self.admin.list_topics()
                      if t.startswith(DLQ_GROUP_TOPIC_PREFIX))


def _request(code: int, ext: dict[str, Any], body: bytes) -> Any:
    from pyrmq.remoting.command import RemotingCommand

    return RemotingCommand.request(code, ext, body)


def _code_name(code: int) -> str:
    try:
        return f"{RequestCode(code).name} ({code})"
    except ValueError:
        return "GET_ALL_PRODUCER_INFO (328)" if code == GET_ALL_PRODUCER_INFO else str(code)
