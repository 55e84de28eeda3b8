"""The client instance (Java ``MQClientInstance``): one remoting client, the name-server list, the route cache, the
heartbeat, and the requests brokers send to us (spec 1.5, 4.1, 4.2, 7.3, 7.4).

Every producer and consumer owns one instance unless handed one (a push consumer shares its instance with the inner
producer it uses for retries). The instance's timers run in the owner's nursery:

* route refresh of every topic in use, every ``poll_name_server_interval`` (30 s), and on demand after a failure;
* heartbeat to every broker of those routes, every ``heartbeat_broker_interval`` (30 s), and at once when a
  consumer starts or a new broker appears.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import trio

from pyrmq.client.config import ClientConfig
from pyrmq.client.errors import BrokerError, NameServerUnreachable, TopicNotFoundError
from pyrmq.client.ids import default_instance_name, local_ip
from pyrmq.client.message import MessageQueue
from pyrmq.client.route import PublishInfo, TopicRoute
from pyrmq.remoting import fastjson
from pyrmq.remoting.client import RemotingClient
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand, next_opaque
from pyrmq.remoting.errors import RemotingClosed, RemotingConnectError, RemotingError, RemotingTimeout
from pyrmq.remoting.signing import RequestSigner
from pyrmq.remoting.vocabulary import AUTO_CREATE_TOPIC_KEY, MASTER_ID

if TYPE_CHECKING:  # pragma: no cover
    from pyrmq.client.consumer import ConsumerCore

log = logging.getLogger("pyrmq.client")

DEFAULT_TOPIC_QUEUE_NUMS = 4
_UNREACHABLE = (RemotingConnectError, RemotingTimeout, RemotingClosed)


class ClientInstance:
    """Shared machinery of producers and consumers. Use through :class:`Producer`, :class:`PushConsumer` ..."""

    def __init__(self, config: ClientConfig | None = None) -> None:
        self.config = config or ClientConfig()
        self.client_ip = self.config.client_ip or local_ip()
        self.instance_name = self.config.instance_name or default_instance_name()
        self.client_id = f"{self.client_ip}@{self.instance_name}" + (f"@{self.config.unit_name}" if self.config.unit_name else "")
        self.remoting = RemotingClient(
            request_handlers={
                RequestCode.NOTIFY_CONSUMER_IDS_CHANGED: self._on_notify_consumer_ids_changed,
                RequestCode.RESET_CONSUMER_CLIENT_OFFSET: self._on_reset_offset,
                RequestCode.GET_CONSUMER_RUNNING_INFO: self._on_running_info,
                RequestCode.CONSUME_MESSAGE_DIRECTLY: self._on_consume_directly,
            },
            connect_timeout=self.config.connect_timeout,
            name=f"pyrmq-client {self.client_id}",
            signer=RequestSigner(*self.config.credentials) if self.config.credentials else None,
        )
        self.routes: dict[str, TopicRoute] = {}
        self.publish: dict[str, PublishInfo] = {}
        #: broker name -> {broker id: address}, the union of every route seen
        self.brokers: dict[str, dict[int, str]] = {}
        #: per queue, the broker id the last pull suggested (suggestWhichBrokerId; absent = the master)
        self.pull_from: dict[Any, int] = {}
        self.producer_groups: set[str] = set()
        self.consumers: dict[str, ConsumerCore] = {}
        self._namesrv_index = 0
        self._route_locks: dict[str, trio.Lock] = {}
        self._refresh_pending: set[str] = set()
        self._heartbeat_now = trio.Event()
        self._nursery: trio.Nursery | None = None
        self.started = False

    # -- life cycle ------------------------------------------------------------------------------------------

    async def start(self, nursery: trio.Nursery) -> None:
        if self.started:
            return
        self._nursery = nursery
        await nursery.start(self.remoting.run)
        nursery.start_soon(self._route_loop)
        nursery.start_soon(self._heartbeat_loop)
        self.started = True

    async def close(self) -> None:
        """Unregister the groups still registered from every broker, and stop."""
        if not self.started:
            return
        for group in list(self.producer_groups):
            await self.unregister(producer_group=group)
        for group in list(self.consumers):
            await self.unregister(consumer_group=group)
        self.started = False

    async def unregister(self, *, producer_group: str | None = None, consumer_group: str | None = None) -> None:
        """UNREGISTER_CLIENT (35) on every broker we know, so the group's other consumers rebalance at once."""
        ext = {"clientID": self.client_id}
        if producer_group:
            ext["producerGroup"] = producer_group
        if consumer_group:
            ext["consumerGroup"] = consumer_group
        with trio.move_on_after(2.0):
            async with trio.open_nursery() as nursery:
                for addr in self.all_broker_addrs():
                    request = RemotingCommand.request(RequestCode.UNREGISTER_CLIENT, dict(ext))
                    nursery.start_soon(self._quiet_invoke, addr, request, 1.5)

    async def _quiet_invoke(self, addr: str, request: RemotingCommand, timeout: float) -> None:
        try:
            await self.remoting.invoke(addr, request, timeout)
        except RemotingError as exc:
            log.debug("%s: request %d to %s failed: %s", self.client_id, request.code, addr, exc)

    def spawn(self, fn: Callable[..., Any], *args: Any) -> None:
        if self._nursery is not None:
            self._nursery.start_soon(fn, *args)

    # -- name servers ----------------------------------------------------------------------------------------

    async def invoke_namesrv(self, request: RemotingCommand, timeout: float | None = None) -> RemotingCommand:
        """Send to the current name server, moving on to the next on a connection failure (Java picks one and
        sticks to it). Raises NameServerUnreachable when none answers."""
        addrs = self.config.namesrv_addr
        timeout = self.config.api_timeout if timeout is None else timeout
        reasons = []
        for i in range(len(addrs)):
            index = (self._namesrv_index + i) % len(addrs)
            addr = addrs[index]
            try:
                # a fresh opaque per attempt: the same request may go to several name servers
                request.opaque = next_opaque()
                response = await self.remoting.invoke(addr, request, timeout)
            except _UNREACHABLE as exc:
                reasons.append(str(exc))
                continue
            self._namesrv_index = index
            return response
        raise NameServerUnreachable(list(addrs), "; ".join(reasons))

    async def fetch_route(self, topic: str) -> TopicRoute | None:
        """GET_ROUTEINFO_BY_TOPIC; None for TOPIC_NOT_EXIST."""
        request = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
        response = await self.invoke_namesrv(request)
        if response.code == ResponseCode.TOPIC_NOT_EXIST:
            return None
        if response.code != ResponseCode.SUCCESS:
            raise BrokerError(response.code, response.remark, "name server", "GET_ROUTEINFO_BY_TOPIC")
        try:
            return TopicRoute.from_body(topic, response.body_bytes())
        except (ValueError, KeyError, TypeError) as exc:
            raise BrokerError(response.code, f"undecodable route of {topic}: {exc}", "name server") from None

    async def update_route(self, topic: str, *, for_producer: bool = False) -> TopicRoute | None:
        """Refresh one topic's route into the caches; for a producer fall back to TBW102's route (spec 7.3)."""
        lock = self._route_locks.setdefault(topic, trio.Lock())
        async with lock:
            route = await self.fetch_route(topic)
            if route is None and for_producer:
                template = await self.fetch_route(AUTO_CREATE_TOPIC_KEY)
                if template is not None:
                    route = template.as_topic(topic, DEFAULT_TOPIC_QUEUE_NUMS)
            if route is None:
                return None
            self._install_route(route, for_producer)
            return route

    def _install_route(self, route: TopicRoute, for_producer: bool) -> None:
        old = self.routes.get(route.topic)
        self.routes[route.topic] = route
        known_addrs = {a for addrs in self.brokers.values() for a in addrs.values()}
        new_broker = False
        for b in route.broker_datas:
            if self.brokers.get(b.broker_name) != dict(b.broker_addrs):
                new_broker = new_broker or bool(set(b.broker_addrs.values()) - known_addrs)
                self.brokers[b.broker_name] = dict(b.broker_addrs)
        if for_producer or route.topic in self.publish:
            if old != route or route.topic not in self.publish:
                self.publish[route.topic] = PublishInfo(route)
        for consumer in self.consumers.values():
            consumer.route_changed(route)
        if new_broker and self.consumers:
            self._heartbeat_now.set()

    async def publish_info(self, topic: str) -> PublishInfo:
        """The producer's cached view of ``topic``, fetched on first use (Java ``tryToFindTopicPublishInfo``)."""
        info = self.publish.get(topic)
        if info is not None and info.ok:
            return info
        route = await self.update_route(topic, for_producer=True)
        info = self.publish.get(topic)
        if route is None or info is None:
            raise TopicNotFoundError(topic, "the name servers know no route for it and no TBW102 route to create it from")
        if not info.ok:
            brokers = ", ".join(f"{q.broker_name} perm {q.perm}" for q in route.queue_datas) or "none"
            raise TopicNotFoundError(topic, f"no writable queue on a master broker ({brokers})")
        return info

    def refresh_soon(self, topic: str) -> None:
        """Re-read a route in the background (after a failed send), at most one refresh in flight per topic."""
        if topic in self._refresh_pending or self._nursery is None:
            return
        self._refresh_pending.add(topic)
        self._nursery.start_soon(self._refresh_one, topic)

    async def _refresh_one(self, topic: str) -> None:
        try:
            await self.update_route(topic, for_producer=topic in self.publish)
        except Exception as exc:  # noqa: BLE001 - a background refresh must not take the client down
            log.debug("route refresh of %s failed: %s", topic, exc)
        finally:
            self._refresh_pending.discard(topic)

    def topics_in_use(self) -> set[str]:
        topics = set(self.publish)
        for consumer in self.consumers.values():
            topics |= set(consumer.subscribed_topics())
        return topics

    async def _route_loop(self) -> None:
        await trio.sleep(0.01)
        while True:
            for topic in sorted(self.topics_in_use()):
                try:
                    await self.update_route(topic, for_producer=topic in self.publish)
                except Exception as exc:  # noqa: BLE001
                    log.debug("%s: route refresh of %s failed: %s", self.client_id, topic, exc)
            await trio.sleep(self.config.poll_name_server_interval)

    # -- brokers ---------------------------------------------------------------------------------------------

    def broker_addr(self, broker_name: str, *, master_only: bool = True) -> str | None:
        addrs = self.brokers.get(broker_name)
        if not addrs:
            return None
        if MASTER_ID in addrs or master_only:
            return addrs.get(MASTER_ID)
        return next(iter(addrs.values()), None)

    def pull_addr(self, mq: MessageQueue) -> str | None:
        """Where to pull ``mq`` from (Java's recalculatePullFromWhichNode + findBrokerAddressInSubscribe): the broker
        id the last pull suggested, else the master, else any address of the broker name."""
        addrs = self.brokers.get(mq.broker_name)
        if not addrs:
            return None
        addr = addrs.get(self.pull_from.get(mq, MASTER_ID))
        return addr or addrs.get(MASTER_ID) or next(iter(addrs.values()), None)

    def all_broker_addrs(self, *, masters_only: bool = False) -> list[str]:
        out = []
        for addrs in self.brokers.values():
            for broker_id, addr in addrs.items():
                if broker_id == MASTER_ID or not masters_only:
                    out.append(addr)
        return sorted(set(out))

    async def broker_addr_for(self, mq: MessageQueue, *, master_only: bool = True) -> str:
        """Master address of ``mq``'s broker, refreshing the route once when it is unknown. With
        ``master_only=False`` (pulls, consumer offsets) any address of the broker name when the master is gone:
        consumers read from a slave as the Java client's findBrokerAddressInSubscribe does."""
        addr = self.broker_addr(mq.broker_name, master_only=master_only)
        if addr is None:
            await self.update_route(mq.topic, for_producer=mq.topic in self.publish)
            addr = self.broker_addr(mq.broker_name, master_only=master_only)
        if addr is None:
            raise TopicNotFoundError(mq.topic, f"broker {mq.broker_name} is not in the route")
        return addr

    async def invoke_broker(
        self, addr: str, request: RemotingCommand, timeout: float | None = None, *, name: str = "", ok: Iterable[int] = (0,)
    ) -> RemotingCommand:
        """A request to a broker; a response code outside ``ok`` raises BrokerError."""
        response = await self.remoting.invoke(addr, request, self.config.api_timeout if timeout is None else timeout)
        if response.code not in ok:
            raise BrokerError(response.code, response.remark, addr, name or RequestCode(request.code).name)
        return response

    # -- heartbeat -------------------------------------------------------------------------------------------

    def heartbeat_body(self) -> bytes:
        data = {
            "clientID": self.client_id,
            "consumerDataSet": [consumer.consumer_data() for consumer in self.consumers.values()],
            "producerDataSet": [{"groupName": g} for g in sorted(self.producer_groups)] + (
                [{"groupName": "CLIENT_INNER_PRODUCER"}] if self.producer_groups else []
            ),
        }
        return json.dumps(data, separators=(",", ":")).encode()

    async def send_heartbeat(self, addrs: Iterable[str] | None = None) -> None:
        """HEART_BEAT to the given brokers (default: every master; every broker when we have consumers)."""
        if not self.producer_groups and not self.consumers:
            return
        if addrs is None:
            addrs = self.all_broker_addrs(masters_only=not self.consumers)
        body = self.heartbeat_body()
        async with trio.open_nursery() as nursery:
            for addr in addrs:
                nursery.start_soon(self._heartbeat_one, addr, body)

    async def _heartbeat_one(self, addr: str, body: bytes) -> None:
        request = RemotingCommand.request(RequestCode.HEART_BEAT, body=body)
        try:
            response = await self.remoting.invoke(addr, request, self.config.api_timeout)
            if response.code != ResponseCode.SUCCESS:
                log.warning("%s: heartbeat to %s refused: %s %s", self.client_id, addr, response.code, response.remark)
        except RemotingError as exc:
            log.debug("%s: heartbeat to %s failed: %s", self.client_id, addr, exc)

    def heartbeat_soon(self) -> None:
        self._heartbeat_now.set()

    async def _heartbeat_loop(self) -> None:
        while True:
            with trio.move_on_after(self.config.heartbeat_broker_interval):
                await self._heartbeat_now.wait()
            self._heartbeat_now = trio.Event()
            try:
                await self.send_heartbeat()
            except Exception:  # noqa: BLE001
                log.exception("%s: heartbeat round failed", self.client_id)

    # -- requests from brokers -------------------------------------------------------------------------------

    async def _on_notify_consumer_ids_changed(self, connection: Any, request: RemotingCommand) -> None:
        group = request.ext_fields.get("consumerGroup", "")
        consumer = self.consumers.get(group)
        log.info("%s: broker %s says the consumers of group %s changed", self.client_id, connection.address, group)
        if consumer is not None:
            consumer.rebalance_soon()
        return None

    async def _on_running_info(self, connection: Any, request: RemotingCommand) -> RemotingCommand:
        """GET_CONSUMER_RUNNING_INFO (307), passed on by a broker for mqadmin consumerStatus: Java's
        ConsumerRunningInfo of the named group's consumer in this instance."""
        group = request.ext_fields.get("consumerGroup", "")
        consumer = self.consumers.get(group)
        if consumer is None:
            return request.make_response(
                ResponseCode.SYSTEM_ERROR, f"The Consumer Group <{group}> not exist in this consumer"
            )
        body = fastjson.dumps(consumer.running_info(), style=fastjson.FASTJSON)
        return request.make_response(ResponseCode.SUCCESS, body=body)

    async def _on_consume_directly(self, connection: Any, request: RemotingCommand) -> None:
        """CONSUME_MESSAGE_DIRECTLY (309), passed on by a broker with the stored message as the body: the group's
        listener runs on it and the answer is Java's ConsumeMessageDirectlyResult. Answered from a task, so a
        listener that talks to the broker does not hold up this connection's reader."""
        connection.start_soon(self._consume_directly, connection, request)
        return None

    async def _consume_directly(self, connection: Any, request: RemotingCommand) -> None:
        from pyrmq.client.message import decode_messages

        group = request.ext_fields.get("consumerGroup", "")
        consumer = self.consumers.get(group)
        try:
            msgs = decode_messages(request.body_bytes(), request.ext_fields.get("brokerName", ""))
        except ValueError as exc:
            msgs, problem = [], f"bad message body: {exc}"
        else:
            problem = "" if msgs else "no message in the body"
        if consumer is None or not hasattr(consumer, "consume_directly"):
            response = request.make_response(
                ResponseCode.SYSTEM_ERROR, f"The Consumer Group <{group}> not exist in this consumer"
            )
        elif problem:
            response = request.make_response(ResponseCode.SYSTEM_ERROR, problem)
        else:
            result = await consumer.consume_directly(msgs[0])
            response = request.make_response(ResponseCode.SUCCESS, body=json.dumps(result).encode())
        try:
            await connection.send_response(response)
        except RemotingError as exc:
            log.debug("%s: consume-directly answer lost: %s", self.client_id, exc)

    async def _on_reset_offset(self, connection: Any, request: RemotingCommand) -> RemotingCommand | None:
        group = request.ext_fields.get("group", "")
        topic = request.ext_fields.get("topic", "")
        consumer = self.consumers.get(group)
        if consumer is not None and request.body:
            try:
                table = fastjson.loads(request.body_bytes()).get("offsetTable") or {}
                offsets = {MessageQueue.from_json(k): int(v) for k, v in table.items()}
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                log.warning("%s: bad RESET_CONSUMER_CLIENT_OFFSET body: %s", self.client_id, exc)
            else:
                await consumer.reset_offsets(topic, offsets)
        return None if request.is_oneway else request.make_response(ResponseCode.SUCCESS)
