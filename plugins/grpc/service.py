"""``apache.rocketmq.v2.MessagingService`` on the broker: RocketMQ 5.x's proxy behaviour (5.5.0, measured) over the
broker's own store, topics, groups and transactions.

Every unary RPC answers gRPC status OK with a ``Status`` inside its response (5.x clients read that one): the
request is decoded (a bad protobuf: gRPC ``INTERNAL`` on that stream), checked against the ACL when ``aclEnable``
(``UNAUTHORIZED`` for who, ``FORBIDDEN`` for what), then ``CLIENT_ID_REQUIRED`` for a blank ``x-mq-client-id``,
then served. Texts name the field and the limit; never an exception's text. The methods 5.5.0 leaves out
(PullMessage, UpdateOffset, GetOffset, QueryOffset) and those not served here yet answer gRPC ``UNIMPLEMENTED``.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import logging
import secrets
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import trio
from google.protobuf.message import DecodeError

from pyrmq.kernel.types import PutContext, PutKind, Rejection, TransactionState
from pyrmq.plugins.broker.topics import (
    is_writeable,
    message_type_of,
    topic_problem,
)
from pyrmq.plugins.grpc import messages, transport
from pyrmq.plugins.grpc.consume import Consumption
from pyrmq.plugins.grpc.messages import ACCEPTED_TYPES, Limits, Refused
from pyrmq.plugins.grpc.routes import RouteError, Routes, broker_entries, parse_endpoint, queue_permissions
from pyrmq.plugins.grpc.schema import METHOD_TABLE, pb
from pyrmq.plugins.grpc.settings import GrpcSettings
from pyrmq.remoting.codes import ResponseCode
from pyrmq.remoting.headers import EndTransactionRequestHeader
from pyrmq.remoting.message import MessageRecord, StoredMessage
from pyrmq.remoting.vocabulary import DLQ_GROUP_TOPIC_PREFIX, MASTER_ID, RETRY_GROUP_TOPIC_PREFIX, MessageProperty
from pyrmq.store.results import PutMessageStatus

if TYPE_CHECKING:  # pragma: no cover
    from pyrmq.plugins.broker.core import BrokerContext

log = logging.getLogger("pyrmq.grpc")

Code = pb.Code
ClientType = pb.ClientType
P = MessageProperty

#: how long Heartbeat / NotifyClientTermination wait for a client's Telemetry settings (5.x clients race them)
SETTINGS_WAIT = 1.0
#: transactions remembered for EndTransaction (transaction id -> the half's offsets); older ones are looked up
MAX_TRANSACTIONS = 100_000
_CONSUMERS = frozenset({ClientType.PUSH_CONSUMER, ClientType.SIMPLE_CONSUMER, ClientType.PULL_CONSUMER,
                        ClientType.LITE_PUSH_CONSUMER, ClientType.LITE_SIMPLE_CONSUMER})
_PUT_STATUS = {
    PutMessageStatus.FLUSH_DISK_TIMEOUT: (Code.MASTER_PERSISTENCE_TIMEOUT, "the message is stored but not flushed to disk in time"),
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: (Code.SLAVE_PERSISTENCE_TIMEOUT, "the message is stored but no slave confirmed it in time"),
    PutMessageStatus.SLAVE_NOT_AVAILABLE: (Code.HA_NOT_AVAILABLE, "the message is stored but no slave is available"),
}
#: 5.x's default consumer retry policy (CUSTOMIZED): 1s 5s 10s 30s 1m ... 2h
_CUSTOMIZED_BACKOFF = [1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200]


def status(code: int, message: str) -> Any:
    return pb.Status(code=code, message=message)


OK_STATUS = status(Code.OK, "OK")


class Session:
    """One 5.x client (by ``x-mq-client-id``): its settings (Telemetry), the stream to push commands on, what it
    publishes or consumes."""

    def __init__(self, client_id: str) -> None:
        self.client_id = client_id
        self.settings: Any = None
        self.settings_known = trio.Event()
        self.telemetry: transport.Call | None = None
        self.topics: frozenset[str] = frozenset()
        self.group: str | None = None
        self.language = ""
        self.version = ""
        self.peer = ""
        self.last_seen = trio.current_time()
        #: nonce -> (event, answer) of commands sent on Telemetry and waiting for the client's answer
        self.pending: dict[str, list[Any]] = {}

    @property
    def client_type(self) -> int:
        return int(self.settings.client_type) if self.settings is not None else int(ClientType.CLIENT_TYPE_UNSPECIFIED)

    async def push(self, command: Any) -> bool:
        """A command on the client's Telemetry stream; False when it has none (or it just closed)."""
        call = self.telemetry
        if call is None or call.closed:
            return False
        try:
            await call.send(command.SerializeToString())
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return False
        return True

    async def ask(self, command: Any, kind: str, timeout: float) -> Any:
        """Send a command carrying a fresh nonce (``print_thread_stack_trace_command`` / ``verify_message_command``)
        and wait for the client's answer with that nonce (``thread_stack_trace`` / ``verify_message_result``), with
        its status; None when it does not answer in time or has no Telemetry stream."""
        nonce = secrets.token_hex(8)
        getattr(command, kind).nonce = nonce
        slot: list[Any] = [trio.Event(), None]
        self.pending[nonce] = slot
        try:
            if not await self.push(command):
                return None
            with trio.move_on_after(timeout):
                await slot[0].wait()
            return slot[1]
        finally:
            self.pending.pop(nonce, None)


class Ctx:
    """What a call carries besides its request."""

    __slots__ = ("call", "client_id", "language", "version", "namespace", "peer")

    def __init__(self, call: transport.Call) -> None:
        md = call.metadata
        self.call = call
        self.client_id = md.get("x-mq-client-id", "").strip()
        self.language = md.get("x-mq-language", "")
        self.version = md.get("x-mq-client-version", "")
        self.namespace = md.get("x-mq-namespace", "")
        self.peer = call.peer


Resources = tuple[dict[str, str], dict[str, str]]


def _consumer_resources(request: Any) -> Resources:
    return {request.topic.name: "SUB"}, {request.group.name: "SUB"}


class MessagingService:
    """The RPCs; :meth:`handlers` is the transport's path table."""

    def __init__(self, kernel: Any, ctx: BrokerContext, routes: Routes) -> None:
        self.kernel = kernel
        self.ctx = ctx
        self.routes = routes
        self.sessions: dict[str, Session] = {}
        self._round_robin: dict[str, itertools.count[int]] = {}
        #: (topic, transaction id) -> (commit-log offset, queue offset) of the half (or its latest check copy)
        self.transactions: OrderedDict[tuple[str, str], tuple[int, int]] = OrderedDict()
        #: ReceiveMessage, AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue (on the POP room)
        self.consumption = Consumption(self)
        #: counters (tests, metrics)
        self.sent = 0
        self.refused = 0

    def settings(self) -> GrpcSettings:
        return self.kernel.settings(GrpcSettings)  # type: ignore[no-any-return]

    def limits(self) -> Limits:
        s = self.settings()
        return Limits(
            max_body=self.ctx.settings.maxMessageSize, max_user_properties=s.userPropertyMaxNum,
            max_properties_size=s.maxUserPropertySize, max_delay_ms=s.maxDelayTimeMills,
            max_group_size=s.maxMessageGroupSize, max_recovery_s=s.maxTransactionRecoverySecond,
            check_empty_body=s.enableMessageBodyEmptyCheck,
        )

    # -- the path table ------------------------------------------------------------------------------------

    def handlers(self) -> dict[str, transport.Handler]:
        served: dict[str, tuple[Callable[[Ctx, Any], Awaitable[Any]], Callable[[Any], Resources]]] = {
            "QueryRoute": (self.query_route, lambda r: ({r.topic.name: "ANY"}, {})),
            "Heartbeat": (self.heartbeat, lambda r: ({}, {r.group.name: "SUB"} if r.HasField("group") and r.group.name
                                                         and r.client_type in _CONSUMERS else {})),
            "SendMessage": (self.send_message, lambda r: ({r.messages[0].topic.name: "PUB"} if r.messages else {}, {})),
            "QueryAssignment": (self.query_assignment, lambda r: ({r.topic.name: "SUB"}, {r.group.name: "SUB"})),
            "EndTransaction": (self.end_transaction, lambda r: ({r.topic.name: "PUB"}, {})),
            "NotifyClientTermination": (self.notify_client_termination,
                                        lambda r: ({}, {r.group.name: "SUB"} if r.HasField("group") and r.group.name else {})),
            "AckMessage": (self.consumption.ack_message, _consumer_resources),
            "ChangeInvisibleDuration": (self.consumption.change_invisible_duration, _consumer_resources),
            "ForwardMessageToDeadLetterQueue": (self.consumption.forward_to_dead_letter_queue, _consumer_resources),
        }
        table: dict[str, transport.Handler] = {}
        for path, (rpc, request_cls, _response_cls, _cs, _ss) in METHOD_TABLE.items():
            if rpc == "Telemetry":
                table[path] = self.telemetry
            elif rpc == "ReceiveMessage":
                table[path] = self.consumption.receive_message
            elif rpc in served:
                fn, resources = served[rpc]
                table[path] = self._unary(rpc, request_cls, fn, resources)
            else:
                table[path] = self._unimplemented(rpc)
        return table

    @staticmethod
    def _unimplemented(rpc: str) -> transport.Handler:
        text = f"Method not found: apache.rocketmq.v2.MessagingService/{rpc}"

        async def handler(call: transport.Call) -> None:
            raise transport.GrpcError(transport.UNIMPLEMENTED, text)

        return handler

    def _unary(self, rpc: str, request_cls: Any, fn: Callable[[Ctx, Any], Awaitable[Any]],
               resources: Callable[[Any], Resources]) -> transport.Handler:
        response_cls = METHOD_TABLE[f"/apache.rocketmq.v2.MessagingService/{rpc}"][2]
        type_name = request_cls.DESCRIPTOR.full_name

        async def handler(call: transport.Call) -> None:
            data = await call.recv_one()
            try:
                request = request_cls.FromString(data)
            except (DecodeError, ValueError):
                raise transport.GrpcError(transport.INTERNAL, f"the request is not a valid {type_name} message") from None
            ctx = Ctx(call)
            refusal = self.check_access(ctx, *resources(request))
            if refusal is not None:
                response = response_cls(status=refusal)
            elif not ctx.client_id:
                response = response_cls(status=status(Code.CLIENT_ID_REQUIRED, "client id cannot be empty"))
            else:
                try:
                    response = await fn(ctx, request)
                except Refused as exc:
                    self.refused += 1
                    response = response_cls(status=status(exc.code, exc.message))
            await call.reply(response.SerializeToString())

        return handler

    # -- access control ------------------------------------------------------------------------------------

    def check_access(self, ctx: Ctx, topics: dict[str, str], groups: dict[str, str]) -> Any:
        """None when the call may go on, else the ``Status`` refusing it (``aclEnable``: the ``authorization``
        header's MQv2-HMAC-SHA1 signature of ``x-mq-date-time`` checked against plain_acl.yml's accounts)."""
        acl = self.kernel.plugin("broker.acl")
        if acl is None:
            return None
        md = ctx.call.metadata
        header = md.get("authorization", "")
        access_key, signature = parse_authorization(header)
        date = md.get("x-mq-date-time", "")
        if access_key and not date:
            return status(Code.UNAUTHORIZED, "the x-mq-date-time header the signature covers is missing")
        refused = acl.validator.check_access(
            access_key=access_key, signature=signature.lower() if signature else signature,
            sign=lambda secret: hmac.new(secret.encode("utf-8"), date.encode("utf-8"), hashlib.sha1).hexdigest(),
            host=messages.host_of(ctx.peer), topics={k: v for k, v in topics.items() if k},
            groups={k: v for k, v in groups.items() if k},
        )
        if refused is None:
            return None
        kind, text = refused
        self.refused += 1
        return status(Code.UNAUTHORIZED if kind == "authentication" else Code.FORBIDDEN, text)

    # -- sessions ------------------------------------------------------------------------------------------

    def session(self, ctx: Ctx) -> Session:
        session = self.sessions.get(ctx.client_id)
        if session is None:
            session = self.sessions[ctx.client_id] = Session(ctx.client_id)
        session.language, session.version, session.peer = ctx.language, ctx.version, ctx.peer
        session.last_seen = trio.current_time()
        return session

    async def known_session(self, ctx: Ctx) -> Session | None:
        """The client's session once its settings are known (waits up to SETTINGS_WAIT: 5.x clients send the
        first Heartbeat without waiting for the settings answer)."""
        session = self.session(ctx)
        if session.settings is None:
            with trio.move_on_after(SETTINGS_WAIT):
                await session.settings_known.wait()
        return session if session.settings is not None else None

    def producers_of(self, topic: str) -> list[Session]:
        return [s for s in self.sessions.values()
                if topic in s.topics and s.telemetry is not None and not s.telemetry.closed]

    async def expire_sessions(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Forget clients without a Telemetry stream that were not heard of for channelExpiredTimeout."""
        task_status.started()
        while True:
            await trio.sleep(10)
            limit = self.ctx.settings.channelExpiredTimeout / 1000
            now = trio.current_time()
            for client_id, session in list(self.sessions.items()):
                live = session.telemetry is not None and not session.telemetry.closed
                if not live and now - session.last_seen > limit:
                    del self.sessions[client_id]

    # -- QueryRoute / QueryAssignment ------------------------------------------------------------------------

    def _check_topic(self, topic: str) -> None:
        problem = topic_problem(topic)
        if problem:
            raise Refused(Code.ILLEGAL_TOPIC, problem)
        # 5.x's GrpcValidator: TopicValidator.isSystemTopic (its set, the broker's own names, the rmq_sys_ prefix)
        if self.ctx.topics.is_system_topic(topic):
            raise Refused(Code.ILLEGAL_TOPIC, f"cannot access system topic {topic}")

    def _check_group(self, group: str) -> None:
        problem = topic_problem(group)
        if problem:
            raise Refused(Code.ILLEGAL_CONSUMER_GROUP, problem.replace("topic", "consumer group"))

    async def _route(self, topic: str) -> Any:
        try:
            return await self.routes.route(topic)
        except RouteError as exc:
            raise Refused(Code.TOPIC_NOT_FOUND if exc.not_found else Code.INTERNAL_SERVER_ERROR, exc.message) from None

    async def _accepted_types(self, topic: str, route: Any) -> list[int]:
        kind = await self.routes.topic_type(topic, route)
        return ACCEPTED_TYPES.get(kind, [pb.MessageType.MESSAGE_TYPE_UNSPECIFIED])

    async def query_route(self, ctx: Ctx, request: Any) -> Any:
        topic = request.topic.name
        self._check_topic(topic)
        route = await self._route(topic)
        endpoints = await self.routes.endpoints(route)
        accepted = await self._accepted_types(topic, route)
        response = pb.QueryRouteResponse(status=OK_STATUS)
        for broker, broker_id, endpoint, queue in broker_entries(route, endpoints):
            address = parse_endpoint(endpoint)
            if address is None:
                continue
            for queue_id, permission in queue_permissions(queue):
                mq = response.message_queues.add()
                mq.topic.name = topic
                mq.topic.resource_namespace = request.topic.resource_namespace
                mq.id = queue_id
                mq.permission = getattr(pb.Permission, permission)
                mq.broker.name = broker.broker_name
                mq.broker.id = broker_id
                mq.broker.endpoints.scheme = (pb.AddressScheme.IPv6 if messages.is_ipv6(address[0])
                                              else pb.AddressScheme.IPv4 if address[0].replace(".", "").isdigit()
                                              else pb.AddressScheme.DOMAIN_NAME)
                mq.broker.endpoints.addresses.add(host=address[0], port=address[1])
                mq.accept_message_types.extend(accepted)
        return response

    async def query_assignment(self, ctx: Ctx, request: Any) -> Any:
        topic, group = request.topic.name, request.group.name
        self._check_topic(topic)
        self._check_group(group)
        route = await self._route(topic)
        endpoints = await self.routes.endpoints(route)
        config = self.ctx.groups.table.get(group)
        orderly = bool(getattr(config, "consume_message_orderly", False))
        response = pb.QueryAssignmentResponse(status=OK_STATUS)
        accepted = await self._accepted_types(topic, route)
        for broker, broker_id, endpoint, queue in broker_entries(route, endpoints):
            address = parse_endpoint(endpoint)
            if broker_id != MASTER_ID or address is None or not queue.readable:
                continue
            ids = range(queue.read_queue_nums) if orderly else [-1]
            for queue_id in ids:
                mq = response.assignments.add().message_queue
                mq.topic.name = topic
                mq.topic.resource_namespace = request.topic.resource_namespace
                mq.id = queue_id
                mq.permission = pb.Permission.READ_WRITE if queue.writable else pb.Permission.READ
                mq.broker.name = broker.broker_name
                mq.broker.id = broker_id
                mq.broker.endpoints.scheme = pb.AddressScheme.IPv4
                mq.broker.endpoints.addresses.add(host=address[0], port=address[1])
                mq.accept_message_types.extend(accepted)
        if not response.assignments:
            return pb.QueryAssignmentResponse(status=status(Code.FORBIDDEN, f"no readable queue of topic {topic}"))
        return response

    # -- Heartbeat / NotifyClientTermination -----------------------------------------------------------------

    async def heartbeat(self, ctx: Ctx, request: Any) -> Any:
        session = await self.known_session(ctx)
        if session is None:
            return pb.HeartbeatResponse(status=status(Code.UNRECOGNIZED_CLIENT_TYPE,
                                                      "cannot find client settings for this client: send them on "
                                                      "Telemetry first"))
        if request.client_type in _CONSUMERS and request.HasField("group"):
            self._check_group(request.group.name)
        return pb.HeartbeatResponse(status=OK_STATUS)

    async def notify_client_termination(self, ctx: Ctx, request: Any) -> Any:
        session = await self.known_session(ctx)
        if session is None:
            return pb.NotifyClientTerminationResponse(status=status(
                Code.UNRECOGNIZED_CLIENT_TYPE, "cannot find client settings for this client"))
        self.sessions.pop(ctx.client_id, None)
        return pb.NotifyClientTerminationResponse(status=OK_STATUS)

    # -- SendMessage -----------------------------------------------------------------------------------------

    def _queue_for(self, topic: str, write_queues: int, group: str | None) -> int:
        if group is not None:
            return messages.guava_consistent_hash(_java_hash(group), write_queues)
        counter = self._round_robin.get(topic)
        if counter is None:
            counter = self._round_robin[topic] = itertools.count()
        return next(counter) % write_queues

    async def send_message(self, ctx: Ctx, request: Any) -> Any:
        if not request.messages:
            raise Refused(Code.MESSAGE_CORRUPTED, "no message to send")
        topic = request.messages[0].topic.name
        self._check_topic(topic)
        for message in request.messages[1:]:
            if message.topic.name != topic:
                raise Refused(Code.MESSAGE_CORRUPTED, f"topic in message is not same: {message.topic.name} is not {topic}")
        if topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)):
            raise Refused(Code.ILLEGAL_TOPIC, f"cannot send to the retry or dead-letter topic {topic}")
        limits = self.limits()
        outgoing = [messages.convert(m, topic, ctx.peer, limits) for m in request.messages]
        config = self.ctx.topics.get(topic)
        if self.settings().enableTopicMessageTypeCheck:
            expected = message_type_of(config)
            for out in outgoing:
                conflict = messages.type_conflict(expected, out.message_type)
                if conflict and config is not None:
                    raise Refused(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, conflict)
        if config is None:
            raise Refused(Code.TOPIC_NOT_FOUND, f"topic {topic} does not exist on broker {self.ctx.settings.brokerName}")
        s = self.ctx.settings
        if s.brokerRole == "SLAVE" or not self.ctx.role.is_master:
            raise Refused(Code.FORBIDDEN, f"the broker {s.brokerName} is a slave: sending is not allowed")
        if not is_writeable(config.perm & s.brokerPermission) or config.write_queue_nums < 1:
            raise Refused(Code.FORBIDDEN, f"no writable queue of topic {topic} on broker {s.brokerName}")
        response = pb.SendMessageResponse()
        codes = set()
        for out in outgoing:
            entry = await self._put(ctx, topic, config, out)
            response.entries.append(entry)
            codes.add(entry.status.code)
        if len(codes) == 1:
            response.status.CopyFrom(response.entries[0].status)
        else:
            response.status.CopyFrom(status(Code.MULTIPLE_RESULTS, "the messages got different results"))
        return response

    async def _put(self, ctx: Ctx, topic: str, config: Any, out: messages.Outgoing) -> Any:
        broker = self.ctx
        queue_id = self._queue_for(topic, config.write_queue_nums, out.group)
        properties = out.properties
        properties[P.CLUSTER] = broker.settings.brokerClusterName
        host, _, port = ctx.peer.rpartition(":")
        record = MessageRecord(
            topic=topic, queue_id=queue_id, body=out.body, properties=properties, sys_flag=out.sys_flag,
            born_timestamp=out.born_timestamp, born_host=(host.strip("[]") or "127.0.0.1", int(port) if port.isdigit() else 0),
            store_host=broker.store_host,
        )
        chain = broker.put_chain
        if chain.applies(record):
            record = chain(record, PutContext(PutKind.SEND, None, record.born_host))
            if record.__class__ is Rejection:
                code = Code.FORBIDDEN if record.code == ResponseCode.NO_PERMISSION else Code.BAD_REQUEST
                return pb.SendResultEntry(status=status(code, record.remark), message_id=out.message_id)
        result = broker.store.put_message(record)
        append = result.append
        if result.status is PutMessageStatus.PUT_OK and append is not None:
            broker.put_stats.add(1)
            broker.stats.put(topic, 1, append.wrote_bytes)
            result.status = await self._durable(append.end_offset)
        if append is None or not result.status.is_ok:
            text = result.remark or result.status.value
            return pb.SendResultEntry(status=status(Code.INTERNAL_SERVER_ERROR, f"the store refused the message: {text}"),
                                      message_id=out.message_id)
        self.sent += 1
        entry = pb.SendResultEntry(message_id=out.message_id, offset=append.queue_offset)
        if out.message_type == "TRANSACTION":
            entry.transaction_id = out.message_id
            self.remember_transaction(topic, out.message_id, append.wrote_offset, append.queue_offset)
        code, text = _PUT_STATUS.get(result.status, (Code.OK, "OK"))
        entry.status.CopyFrom(status(code, text))
        return entry

    async def _durable(self, end_offset: int) -> PutMessageStatus:
        s = self.ctx.settings
        if s.flushDiskType == "SYNC_FLUSH" and not await self.ctx.store.wait_flushed(end_offset):
            return PutMessageStatus.FLUSH_DISK_TIMEOUT
        if s.brokerRole == "SYNC_MASTER":
            replicator = self.ctx.replicator
            if replicator is None:
                return PutMessageStatus.SLAVE_NOT_AVAILABLE
            return await replicator.wait_replicated(end_offset)  # type: ignore[no-any-return]
        return PutMessageStatus.PUT_OK

    # -- transactions ----------------------------------------------------------------------------------------

    def remember_transaction(self, topic: str, transaction_id: str, commit_log_offset: int, queue_offset: int) -> None:
        key = (topic, transaction_id)
        self.transactions[key] = (commit_log_offset, queue_offset)
        self.transactions.move_to_end(key)
        while len(self.transactions) > MAX_TRANSACTIONS:
            self.transactions.popitem(last=False)

    def _find_half(self, topic: str, transaction_id: str) -> tuple[int, int] | None:
        known = self.transactions.get((topic, transaction_id))
        if known is not None:
            return known
        # not remembered (a restart, or many transactions since): the index has the half under its UNIQ_KEY
        from pyrmq.remoting.vocabulary import TRANS_HALF_TOPIC

        found = self.ctx.store.query_message(TRANS_HALF_TOPIC, transaction_id, 32, 0, 2**63 - 1)
        best = None
        for view in found.buffers:
            from pyrmq.remoting.message import decode_message

            msg = decode_message(view)[0]
            if msg.properties.get(P.PRODUCER_GROUP) == topic and (best is None or msg.commit_log_offset > best[0]):
                best = (msg.commit_log_offset, msg.queue_offset)
        return best

    async def end_transaction(self, ctx: Ctx, request: Any) -> Any:
        topic = request.topic.name
        self._check_topic(topic)
        transaction_id = request.transaction_id
        if not transaction_id.strip():
            raise Refused(Code.INVALID_TRANSACTION_ID, "transaction id cannot be empty")
        if request.resolution == pb.TransactionResolution.COMMIT:
            state = TransactionState.COMMIT
        elif request.resolution == pb.TransactionResolution.ROLLBACK:
            state = TransactionState.ROLLBACK
        else:
            # 5.x: UNKNOWN leaves the half to the check (nothing written)
            return pb.EndTransactionResponse(status=OK_STATUS)
        transactions = self.kernel.plugin("transaction")
        if transactions is None:
            raise Refused(Code.NOT_IMPLEMENTED, "this broker does not run transactions")
        half = self._find_half(topic, transaction_id)
        if half is None:
            raise Refused(Code.INVALID_TRANSACTION_ID,
                          f"no half message of transaction {transaction_id} for topic {topic} on this broker")
        header = EndTransactionRequestHeader(
            producer_group=topic, tran_state_table_offset=half[1], commit_log_offset=half[0],
            commit_or_rollback=int(state), msg_id=request.message_id,
            from_transaction_check=request.source == pb.TransactionSource.SOURCE_SERVER_CHECK,
            transaction_id=transaction_id,
        )
        answer = transactions.end_transaction(header)
        if answer is None or answer[0] == ResponseCode.SUCCESS:
            self.transactions.pop((topic, transaction_id), None)
            return pb.EndTransactionResponse(status=OK_STATUS)
        code, remark = answer
        mapped = Code.HA_NOT_AVAILABLE if code == ResponseCode.SLAVE_NOT_AVAILABLE else Code.INVALID_TRANSACTION_ID
        return pb.EndTransactionResponse(status=status(mapped, remark or "the transaction could not be ended"))

    async def check_transaction(self, message: StoredMessage) -> bool:
        """A check-back of a half whose producer group is a topic a 5.x producer publishes (5.x: producer group =
        topic): RecoverOrphanedTransactionCommand on one of their Telemetry streams, round-robin. False when no
        such producer is connected (the transaction plugin then asks 4.x producers of the group)."""
        props = message.properties
        group = props.get(P.PRODUCER_GROUP, "")
        producers = self.producers_of(group)
        if not producers:
            return False
        real_topic = props.get(P.REAL_TOPIC) or group
        transaction_id = props.get(P.UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or message.msg_id
        self.remember_transaction(group, transaction_id, message.commit_log_offset, message.queue_offset)
        command = pb.TelemetryCommand()
        command.recover_orphaned_transaction_command.transaction_id = transaction_id
        command.recover_orphaned_transaction_command.message.CopyFrom(messages.to_pb(message, topic=real_topic))
        start = next(self._round_robin.setdefault("\x00check", itertools.count()))
        for i in range(len(producers)):
            if await producers[(start + i) % len(producers)].push(command):
                return True
        return False

    # -- Telemetry -------------------------------------------------------------------------------------------

    async def telemetry(self, call: transport.Call) -> None:
        ctx = Ctx(call)
        if not ctx.client_id:
            raise transport.GrpcError(transport.INVALID_ARGUMENT, "client id cannot be empty (x-mq-client-id)")
        session: Session | None = None
        try:
            while True:
                data = await call.recv()
                if data is None:
                    return
                try:
                    command = pb.TelemetryCommand.FromString(data)
                except (DecodeError, ValueError):
                    raise transport.GrpcError(transport.INVALID_ARGUMENT,
                                              "a Telemetry message is not a valid apache.rocketmq.v2.TelemetryCommand") from None
                kind = command.WhichOneof("command")
                if kind == "settings":
                    session = await self._settings(ctx, command.settings)
                elif kind in ("thread_stack_trace", "verify_message_result"):
                    target = self.sessions.get(ctx.client_id)
                    nonce = getattr(command, kind).nonce
                    slot = target.pending.get(nonce) if target is not None else None
                    if slot is not None:
                        slot[1] = command
                        slot[0].set()
                # anything else a client may send is ignored, as 5.x does
        finally:
            if session is not None and session.telemetry is call:
                session.telemetry = None
                session.last_seen = trio.current_time()

    async def _settings(self, ctx: Ctx, settings: Any) -> Session:
        call = ctx.call
        kind = settings.WhichOneof("pub_sub")
        if kind is None:
            raise transport.GrpcError(transport.INVALID_ARGUMENT, "there is no publishing or subscription data in settings")
        topics: dict[str, str] = {}
        groups: dict[str, str] = {}
        if kind == "publishing":
            for resource in settings.publishing.topics:
                topics[resource.name] = "PUB"
        else:
            if settings.subscription.group.name:
                groups[settings.subscription.group.name] = "SUB"
            for entry in settings.subscription.subscriptions:
                topics[entry.topic.name] = "SUB"
        refusal = self.check_access(ctx, topics, groups)
        if refusal is not None:
            await call.send(pb.TelemetryCommand(status=refusal).SerializeToString())
            raise transport.GrpcError(transport.UNAUTHENTICATED if refusal.code == Code.UNAUTHORIZED
                                      else transport.INVALID_ARGUMENT, refusal.message)
        try:
            answer = self._settings_answer(settings, kind)
        except Refused as exc:
            raise transport.GrpcError(transport.INVALID_ARGUMENT,
                                      f"process client telemetryCommand failed. {exc.message}") from None
        session = self.session(ctx)
        session.settings = settings
        session.telemetry = call
        if kind == "publishing":
            session.topics = frozenset(r.name for r in settings.publishing.topics)
        else:
            session.group = settings.subscription.group.name
        session.settings_known.set()
        await call.send(pb.TelemetryCommand(status=OK_STATUS, settings=answer).SerializeToString())
        return session

    def _settings_answer(self, settings: Any, kind: str) -> Any:
        s = self.settings()
        answer = pb.Settings()
        answer.CopyFrom(settings)
        if kind == "publishing":
            for resource in settings.publishing.topics:
                self._check_topic(resource.name)
            policy = answer.backoff_policy
            policy.Clear()
            policy.max_attempts = s.grpcClientProducerMaxAttempts
            exp = policy.exponential_backoff
            _duration(exp.initial, s.grpcClientProducerBackoffInitialMillis)
            _duration(exp.max, s.grpcClientProducerBackoffMaxMillis)
            exp.multiplier = s.grpcClientProducerBackoffMultiplier
            answer.publishing.max_body_size = self.ctx.settings.maxMessageSize
            answer.publishing.validate_message_type = s.enableTopicMessageTypeCheck
        else:
            sub = answer.subscription
            group = sub.group.name
            self._check_group(group)
            config = self.ctx.groups.table.get(group)
            if config is None:
                if not self.ctx.settings.autoCreateSubscriptionGroup:
                    raise Refused(Code.CONSUMER_GROUP_NOT_FOUND, f"group not found: {group} "
                                                                 "(autoCreateSubscriptionGroup is false)")
                config = self.ctx.groups.find_or_create(group)
            sub.receive_batch_size = s.grpcClientConsumerLongPollingBatchSize
            _duration(sub.long_polling_timeout, s.grpcClientConsumerMaxLongPollingTimeoutMillis)
            sub.fifo = bool(getattr(config, "consume_message_orderly", False))
            policy = answer.backoff_policy
            policy.Clear()
            policy.max_attempts = (config.retry_max_times if config is not None else 16) + 1
            for seconds in _CUSTOMIZED_BACKOFF:
                policy.customized_backoff.next.add(seconds=seconds)
        answer.metric.on = False
        return answer


def _duration(field: Any, ms: int) -> None:
    field.seconds, millis = divmod(ms, 1000)
    field.nanos = millis * 1_000_000


def _java_hash(text: str) -> int:
    from pyrmq.remoting.message import java_string_hash

    return java_string_hash(text)


def parse_authorization(header: str) -> tuple[str | None, str | None]:
    """(access key, signature) of ``MQv2-HMAC-SHA1 Credential=<ak>[/...], SignedHeaders=x-mq-date-time,
    Signature=<hex>``; (None, None) when absent or unreadable, the access key empty when the client has none."""
    scheme, _, rest = header.strip().partition(" ")
    if not scheme:
        return None, None
    values: dict[str, str] = {}
    for part in rest.split(","):
        key, eq, value = part.strip().partition("=")
        if eq:
            values[key.strip()] = value.strip()
    credential = values.get("Credential")
    if credential is None:
        return None, None
    return credential.partition("/")[0] or None, values.get("Signature") or None
