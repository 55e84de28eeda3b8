"""QueryRoute's and QueryAssignment's answers: the topic's route from the name servers, each broker's gRPC endpoint.

**How a broker's gRPC endpoint reaches the others.** The name server's route lists brokers by their remoting
address only. Each broker with this plugin writes its gRPC endpoint into the name servers' KV config (namespace
:data:`NAMESPACE`, key = its remoting address ``brokerIP1:listenPort``, value = ``host:grpcPort``) when it starts and
again every 30 s (a name server that restarted empty learns it back), and deletes it when it stops. QueryRoute reads
the namespace once (GET_KVLIST_BY_NAMESPACE, kept 5 s) and gives every queue the endpoint of its broker, so a client
given any broker's endpoint reaches all of them directly, as 5.x local-mode proxies do; no request is forwarded. A
broker of the route without an entry (no gRPC endpoint: a 4.x broker, a pyrmq broker without this plugin) has its
queues left out of the answer: a 5.x client could not reach them. 4.x clients and tools never read the namespace.
Without name servers (a broker alone) the route is the broker's own topic config.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

import trio

from pyrmq.plugins.broker.topics import MESSAGE_TYPE_ATTRIBUTE, message_type_of
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.errors import ProtocolError, RemotingError
from pyrmq.remoting.route import BrokerData, QueueData, TopicRouteData
from pyrmq.remoting.vocabulary import MASTER_ID, Permission

if TYPE_CHECKING:  # pragma: no cover
    from pyrmq.plugins.broker.core import BrokerContext

log = logging.getLogger("pyrmq.grpc.routes")

#: the name servers' KV namespace holding each broker's gRPC endpoint (remoting address -> host:port)
NAMESPACE = "GRPC_ENDPOINTS"
REFRESH = 30.0
CACHE_TTL = 5.0


class RouteError(Exception):
    """No route: ``not_found`` (the topic does not exist) or the name servers did not answer."""

    def __init__(self, message: str, *, not_found: bool) -> None:
        super().__init__(message)
        self.message = message
        self.not_found = not_found


class Routes:
    """Topic routes and the brokers' gRPC endpoints, as this broker sees them."""

    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        #: this broker's gRPC endpoint once it listens (``host:port``)
        self.own_endpoint = ""
        #: its KV key: the broker's registered remoting address, once known
        self.key = ""
        self._endpoints: dict[str, str] = {}
        self._endpoints_at = -1e9
        self._endpoints_lock = trio.Lock()
        #: broker address -> (when read, topic -> message.type) for topics this broker does not hold
        self._remote_types: dict[str, tuple[float, dict[str, str]]] = {}

    # -- the KV entries ------------------------------------------------------------------------------------

    def _namesrvs(self) -> list[str]:
        return list(self.ctx.registration.namesrv_addresses)

    async def publish(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Put this broker's endpoint into every name server's KV now and every REFRESH seconds."""
        task_status.started()
        # the key is the address the broker registers: brokerIP1 and the port its listener really bound
        port = (await self.ctx.kernel.wait_listening("broker")).rpartition(":")[2]
        self.key = f"{self.ctx.settings.brokerIP1}:{port}"
        while True:
            await self._put_all()
            await trio.sleep(REFRESH)

    async def _put_all(self) -> None:
        key = self.key
        for addr in self._namesrvs():
            request = RemotingCommand.request(RequestCode.PUT_KV_CONFIG,
                                              {"namespace": NAMESPACE, "key": key, "value": self.own_endpoint})
            try:
                response = await self.ctx.client.invoke(addr, request, timeout=3.0)
            except RemotingError as exc:
                log.info("gRPC endpoint not published to name server %s: %s", addr, exc)
                continue
            if response.code != ResponseCode.SUCCESS:
                log.info("name server %s refused the gRPC endpoint: %s %s", addr, response.code, response.remark)

    async def withdraw(self) -> None:
        """Delete this broker's entry (at stop, through a client of its own: the service nursery is gone)."""
        from pyrmq.remoting.client import RemotingClient

        key = self.key
        if not key:
            return
        async with RemotingClient() as client:
            for addr in self._namesrvs():
                with trio.move_on_after(2):
                    try:
                        await client.invoke(addr, RemotingCommand.request(
                            RequestCode.DELETE_KV_CONFIG, {"namespace": NAMESPACE, "key": key}))
                    except RemotingError:
                        pass

    async def endpoints(self, route: TopicRouteData | None = None) -> dict[str, str]:
        """Remoting address -> gRPC endpoint of every broker that published one (cached CACHE_TTL seconds; read
        again at once, at most every second, when ``route`` names a broker the cache lacks: one just started)."""
        async with self._endpoints_lock:
            age = trio.current_time() - self._endpoints_at
            missing = route is not None and any(
                addr not in self._endpoints and addr != self.key for b in route.broker_datas for addr in b.broker_addrs.values())
            if age > CACHE_TTL or (missing and age > 1.0):
                for addr in self._namesrvs():
                    request = RemotingCommand.request(RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": NAMESPACE})
                    try:
                        response = await self.ctx.client.invoke(addr, request, timeout=3.0)
                    except RemotingError:
                        continue
                    table: dict[str, str] = {}
                    if response.code == ResponseCode.SUCCESS:
                        try:
                            table = {str(k): str(v) for k, v in json.loads(response.body_bytes())["table"].items()}
                        except (ValueError, KeyError, TypeError, AttributeError):
                            continue
                    elif response.code != ResponseCode.QUERY_NOT_FOUND:
                        continue
                    self._endpoints = table
                    self._endpoints_at = trio.current_time()
                    break
        table = dict(self._endpoints)
        if self.key:
            table[self.key] = self.own_endpoint
        return table

    # -- topic types ---------------------------------------------------------------------------------------

    async def topic_type(self, topic: str, route: TopicRouteData) -> str:
        """The topic's ``message.type``: this broker's config, else (a topic this broker does not hold) what a
        master of the route keeps, from its GET_ALL_TOPIC_CONFIG (read at most every CACHE_TTL seconds a broker)."""
        config = self.ctx.topics.get(topic)
        if config is not None:
            return message_type_of(config)
        for broker in route.broker_datas:
            addr = broker.master
            if not addr:
                continue
            cached = self._remote_types.get(addr)
            if cached is None or trio.current_time() - cached[0] > CACHE_TTL:
                request = RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG, {})
                try:
                    response = await self.ctx.client.invoke(addr, request, timeout=3.0)
                    table = json.loads(response.body_bytes() or b"{}").get("topicConfigTable") or {}
                    types = {str(name): str((data.get("attributes") or {}).get(MESSAGE_TYPE_ATTRIBUTE, "NORMAL"))
                             for name, data in table.items() if isinstance(data, dict)}
                except (RemotingError, ValueError, AttributeError, TypeError):
                    continue
                if response.code != ResponseCode.SUCCESS:
                    continue
                cached = self._remote_types[addr] = (trio.current_time(), types)
            if topic in cached[1]:
                return cached[1][topic]
        return "UNSPECIFIED"

    # -- routes --------------------------------------------------------------------------------------------

    async def route(self, topic: str) -> TopicRouteData:
        """The topic's route from the first name server that answers; the broker's own config without any."""
        namesrvs = self._namesrvs()
        if not namesrvs:
            return self._local_route(topic)
        last = ""
        for addr in namesrvs:
            request = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
            try:
                response = await self.ctx.client.invoke(addr, request, timeout=3.0)
            except RemotingError as exc:
                last = f"name server {addr}: {exc}"
                continue
            if response.code == ResponseCode.TOPIC_NOT_EXIST:
                raise RouteError(f"topic {topic} does not exist (no route in the name server)", not_found=True)
            if response.code != ResponseCode.SUCCESS:
                last = f"name server {addr} answered {response.code} {response.remark or ''}".rstrip()
                continue
            try:
                return TopicRouteData.decode(response.body_bytes())
            except (ProtocolError, ValueError) as exc:
                last = f"name server {addr}: unreadable route: {exc}"
        raise RouteError(f"the topic route of {topic} could not be read: {last}", not_found=False)

    def _local_route(self, topic: str) -> TopicRouteData:
        config = self.ctx.topics.get(topic)
        if config is None:
            raise RouteError(f"topic {topic} does not exist on broker {self.ctx.settings.brokerName}", not_found=True)
        s = self.ctx.settings
        return TopicRouteData(
            (QueueData(s.brokerName, config.read_queue_nums, config.write_queue_nums, config.perm & s.brokerPermission),),
            (BrokerData(s.brokerClusterName, s.brokerName, {MASTER_ID: self.ctx.registration.broker_addr}),),
        )


def queue_permissions(queue: QueueData) -> list[tuple[int, str]]:
    """(queue id, permission name) for each queue of a broker name, numbered as 5.x's proxy does
    (``ProxyTopicRouteData`` / ``RouteActivity.genMessageQueueFromQueueData``): read-only queues, then write-only,
    then read-write, or one NONE queue (at least one) when the perm allows neither."""
    readable = bool(queue.perm & Permission.READ)
    writable = bool(queue.perm & Permission.WRITE)
    r = w = rw = 0
    if readable and writable:
        rw = min(queue.read_queue_nums, queue.write_queue_nums)
        r = queue.read_queue_nums - rw
        w = queue.write_queue_nums - rw
    elif readable:
        r = queue.read_queue_nums
    elif writable:
        w = queue.write_queue_nums
    out: list[tuple[int, str]] = []
    for count, name in ((r, "READ"), (w, "WRITE"), (rw, "READ_WRITE")):
        for _ in range(count):
            out.append((len(out), name))
    if not out:
        for _ in range(max(1, max(queue.read_queue_nums, queue.write_queue_nums))):
            out.append((len(out), "NONE"))
    return out


def parse_endpoint(text: str) -> tuple[str, int] | None:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def broker_entries(route: TopicRouteData, endpoints: dict[str, str]) -> list[tuple[BrokerData, int, str, Any]]:
    """(broker data, broker id, gRPC endpoint, its queue data) for every broker address of the route with an
    endpoint, masters first."""
    queues = {q.broker_name: q for q in route.queue_datas}
    out = []
    for broker in route.broker_datas:
        queue = queues.get(broker.broker_name)
        if queue is None:
            continue
        for broker_id, addr in sorted(broker.broker_addrs.items()):
            endpoint = endpoints.get(addr)
            if endpoint:
                out.append((broker, broker_id, endpoint, queue))
            else:
                log.debug("broker %s (%s) has no gRPC endpoint: its queues are left out", broker.broker_name, addr)
    return out
