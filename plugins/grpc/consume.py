"""Consumption over gRPC: ReceiveMessage, AckMessage, ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue,
as RocketMQ 5.x's proxy serves them, on the broker's POP room (``kernel.plugin("pop")``).

The POP room is called through its registered object and RocketMQ's own request headers
(:mod:`pyrmq.remoting.pop`): a :class:`Reply` stands for the remoting connection its processors answer on, so a
pop parked for long polling, an answer that waits until its records are durable and every check are the POP room's,
exactly as for a 5.x remoting client. What is the proxy's is here (``proxy:grpc/v2/consumer/*``,
``processor/ConsumerProcessor``, ``service/receipt/DefaultReceiptHandleManager``):

- **ReceiveMessage** (server streaming): long polling = the request's ``long_polling_timeout``, else the deadline
  left minus half the client's request timeout, clamped to [5 s, 20 s]; more than the deadline leaves: the deadline,
  or ``ILLEGAL_POLLING_TIME`` when that is under 5 s (``BAD_REQUEST`` for clients older than 5.0.3). Invisible time:
  60 s with ``auto_renew`` (push consumers), else the request's, in [10 s, 12 h]. The group's queues on this broker
  are popped (queue -1), FIFO when the group is ``consumeMessageOrderly``, at most 32 messages. Each message gets its
  receipt handle: POP's eight fields and the record's commit-log offset. A message whose tag the subscription does
  not take is acked here; one delivered ``max_attempts`` times already (the group's ``retryMaxTimes`` + 1) goes to
  ``%DLQ%<group>`` here. The stream: ``status``, a response per message, ``delivery_timestamp``; or ``status
  MESSAGE_NOT_FOUND`` + ``delivery_timestamp``. A message that could not be written (the client went away) is made
  visible again in 1 s without counting an attempt.
- **Settings race**: a ReceiveMessage before the client's Telemetry settings waits up to a second for them, then
  goes on with the group's config (5.5.0 answers INTERNAL_SERVER_ERROR with a NullPointerException).
- **Receipt handles**: a garbage handle is ``INVALID_RECEIPT_HANDLE`` naming what is wrong (5.5.0: an exception's
  text); a handle of another broker too. After ChangeInvisibleDuration the new handle keeps the message's real
  commit-log offset (5.5.0's local mode writes 0 there, and a later ForwardMessageToDeadLetterQueue dead-letters
  the record at offset 0 of the commit log: another message).
- **Auto renew** (``enableProxyAutoRenew``): a push consumer's messages stay invisible while it holds them: renewed
  ``renewAheadTimeMillis`` before they would come back (1 m, 3 m, 5 m, 10 m, 30 m, 1 h), up to
  ``renewMaxTimeMillis``; acks, changes and dead-lettering use the newest handle; when the client goes away its
  messages come back after ``invisibleTimeMillisWhenClear``.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import attrs
import trio
from google.protobuf.message import DecodeError

from pyrmq.kernel.errors import FilterExpressionError
from pyrmq.plugins.grpc import messages, transport
from pyrmq.plugins.grpc.messages import Refused
from pyrmq.plugins.grpc.schema import pb
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.headers import ConsumerSendMsgBackRequestHeader
from pyrmq.remoting.message import decode_message
from pyrmq.remoting.pop import (
    INIT_MODE_MAX,
    MAX_POP_NUMS,
    PROPERTY_POP_CK,
    AckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    PopMessageRequestHeader,
    PopWireError,
    ReceiptHandle,
    parse_order_count_info,
    parse_start_offset_info,
    receipt_handle,
    retry_flag,
)
from pyrmq.remoting.vocabulary import MessageProperty

if TYPE_CHECKING:  # pragma: no cover
    from pyrmq.plugins.grpc.service import Ctx, MessagingService

log = logging.getLogger("pyrmq.grpc")

Code = pb.Code
P = MessageProperty

#: the client version from which ILLEGAL_POLLING_TIME exists (older ones get BAD_REQUEST), compared as text as 5.x
ILLEGAL_POLLING_TIME_SINCE = "5.0.3"
#: a message the client could not be given comes back this soon (5.x's NACK_INVISIBLE_TIME)
NACK_INVISIBLE_MS = 1000
#: auto renew: the invisible time given at each renewal (5.x's RenewStrategyPolicy)
RENEW_STEPS_MS = (60_000, 180_000, 300_000, 600_000, 1_800_000, 3_600_000)
#: what a long poll keeps in hand before the call's deadline (5.x's longPollingReserveTimeInMillis)
POLL_RESERVE_MS = 100
#: the group retry policy's delays, seconds (5.x's default CUSTOMIZED policy): where a message goes when its
#: renewals end (the delay after its delivery attempt n)
GROUP_BACKOFF_S = (1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200)

_BROKER_CODES = {
    ResponseCode.TOPIC_NOT_EXIST: Code.TOPIC_NOT_FOUND,
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: Code.CONSUMER_GROUP_NOT_FOUND,
    ResponseCode.SUBSCRIPTION_PARSE_FAILED: Code.ILLEGAL_FILTER_EXPRESSION,
    ResponseCode.NO_PERMISSION: Code.FORBIDDEN,
    ResponseCode.SLAVE_NOT_AVAILABLE: Code.FORBIDDEN,
    ResponseCode.SYSTEM_BUSY: Code.TOO_MANY_REQUESTS,
    ResponseCode.POLLING_FULL: Code.TOO_MANY_REQUESTS,
    ResponseCode.FLUSH_DISK_TIMEOUT: Code.MASTER_PERSISTENCE_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: Code.SLAVE_PERSISTENCE_TIMEOUT,
    ResponseCode.SERVICE_NOT_AVAILABLE: Code.INTERNAL_SERVER_ERROR,
    ResponseCode.INVALID_PARAMETER: Code.BAD_REQUEST,
    # an ack or change whose handle names a queue or offset this broker does not have
    ResponseCode.MESSAGE_ILLEGAL: Code.INVALID_RECEIPT_HANDLE,
    ResponseCode.NO_MESSAGE: Code.INVALID_RECEIPT_HANDLE,
}


def broker_status(response: RemotingCommand, what: str) -> Any:
    """A POP / send-back answer as a gRPC ``Status``: OK, or 5.x's mapping of the code with the broker's remark."""
    if response.code == ResponseCode.SUCCESS:
        return pb.Status(code=Code.OK, message="OK")
    code = _BROKER_CODES.get(response.code, Code.INTERNAL_SERVER_ERROR)
    return pb.Status(code=code, message=f"{what} failed: {response.remark or f'broker code {response.code}'}")


def _ms(duration: Any) -> int:
    return int(duration.seconds) * 1000 + int(duration.nanos) // 1_000_000


def now_ms() -> int:
    return int(time.time() * 1000)


class Reply:
    """The connection a POP processor answers one request on: its answer now (the processor's return value) or
    later (``send_response``: a long poll, an answer waiting until its records are durable). ``late`` gets an
    answer that came after the caller stopped waiting (the client went away)."""

    __slots__ = ("remote_address", "response", "done", "closed", "_nursery", "late", "attributes")

    def __init__(self, peer: tuple[str, int], nursery: trio.Nursery,
                 late: Callable[[RemotingCommand], None] | None = None) -> None:
        self.remote_address = peer
        self.response: RemotingCommand | None = None
        self.done = trio.Event()
        self.closed = False
        self._nursery = nursery
        self.late = late
        self.attributes: dict[str, Any] = {}

    def start_soon(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        self._nursery.start_soon(fn, *args)

    async def send_response(self, response: RemotingCommand) -> bool:
        if self.closed:
            if self.late is not None:
                self.late(response)
            return False
        self.response = response
        self.done.set()
        return True

    async def invoke(self, processor: Callable[[Any, RemotingCommand], Awaitable[RemotingCommand | None]],
                     request: RemotingCommand) -> RemotingCommand:
        """Run ``processor`` on ``request`` and wait for its answer (cancellable: the answer then goes to ``late``)."""
        try:
            response = await processor(self, request)
            if response is not None:
                return response
            await self.done.wait()
        except BaseException:
            self.closed = True
            raise
        assert self.response is not None
        return self.response


@attrs.define(eq=False)
class Held:
    """A message a push consumer holds (auto renew): the handle it was given and the newest one."""

    given: str
    current: ReceiptHandle
    group: str
    topic: str
    message_id: str
    client_id: str
    reconsume_times: int
    since: float  #: trio time it was delivered
    renewals: int = 0
    #: set while a renewal is under way (an ack waits for its new handle)
    busy: trio.Event | None = None


class Consumption:
    """The four consumer RPCs over the POP room, and the auto-renewed handles of push consumers."""

    def __init__(self, service: MessagingService) -> None:
        self.service = service
        self.kernel = service.kernel
        self.ctx = service.ctx
        self.nursery: trio.Nursery | None = None
        #: handle given to a push consumer -> what it holds now (auto renew)
        self.held: dict[str, Held] = {}
        #: counters (tests, metrics)
        self.delivered = 0
        self.acked = 0
        self.dead_lettered = 0

    # -- helpers -----------------------------------------------------------------------------------------------

    def pop(self) -> Any:
        pop = self.kernel.plugin("pop")
        if pop is None:
            raise Refused(Code.NOT_IMPLEMENTED, "this broker does not serve POP consumption (plugin pop is not loaded)")
        return pop

    def reply(self, peer: str, late: Callable[[RemotingCommand], None] | None = None) -> Reply:
        assert self.nursery is not None, "the gRPC endpoint is not serving"
        host, _, port = peer.rpartition(":")
        return Reply((host.strip("[]") or "127.0.0.1", int(port) if port.isdigit() else 0), self.nursery, late)

    def parse_handle(self, text: str) -> ReceiptHandle:
        """A receipt handle this broker gave out, or Refused(INVALID_RECEIPT_HANDLE) saying what is wrong."""
        try:
            handle = ReceiptHandle.parse(text)
        except PopWireError as exc:
            raise Refused(Code.INVALID_RECEIPT_HANDLE, f"invalid receipt_handle: {exc.args[0] if exc.args else exc}") from None
        own = self.ctx.settings.brokerName
        if handle.broker_name != own:
            raise Refused(Code.INVALID_RECEIPT_HANDLE, f"the receipt_handle was issued by broker {handle.broker_name!r}, "
                                                       f"not by this broker ({own}): send it where the message came from")
        return handle

    async def current(self, text: str) -> tuple[ReceiptHandle, Held | None]:
        """The handle to act on for ``text``: the newest one when it is an auto-renewed message (waiting for a
        renewal under way), and its record (dropped from the renewals)."""
        held = self.held.get(text)
        if held is None:
            return self.parse_handle(text), None
        while held.busy is not None:
            await held.busy.wait()
        self.held.pop(text, None)
        return held.current, held

    def _check_names(self, topic: str, group: str) -> None:
        self.service._check_topic(topic)
        self.service._check_group(group)

    # -- ReceiveMessage ------------------------------------------------------------------------------------------

    async def receive_message(self, call: transport.Call) -> None:
        from pyrmq.plugins.grpc.service import Ctx

        data = await call.recv_one()
        try:
            request = pb.ReceiveMessageRequest.FromString(data)
        except (DecodeError, ValueError):
            raise transport.GrpcError(transport.INTERNAL,
                                      "the request is not a valid apache.rocketmq.v2.ReceiveMessageRequest message") from None
        ctx = Ctx(call)
        service = self.service
        refusal = service.check_access(ctx, {request.message_queue.topic.name: "SUB"}, {request.group.name: "SUB"})
        if refusal is None and not ctx.client_id:
            refusal = pb.Status(code=Code.CLIENT_ID_REQUIRED, message="client id cannot be empty")
        if refusal is None:
            try:
                await self._receive(ctx, call, request)
                return
            except Refused as exc:
                service.refused += 1
                refusal = pb.Status(code=exc.code, message=exc.message)
        await self._end(call, refusal)

    async def _end(self, call: transport.Call, status: Any) -> None:
        """A status then the server's time, as every ReceiveMessage answer ends."""
        await call.send(pb.ReceiveMessageResponse(status=status).SerializeToString())
        done = pb.ReceiveMessageResponse()
        messages._set_ms(done.delivery_timestamp, now_ms())
        await call.send(done.SerializeToString())

    def polling_ms(self, ctx: Ctx, request: Any, settings: Any) -> int:
        s = self.service.settings()
        low, high = s.grpcClientConsumerMinLongPollingTimeoutMillis, s.grpcClientConsumerMaxLongPollingTimeoutMillis
        deadline = ctx.call.deadline
        remaining = None if math.isinf(deadline) else int((deadline - trio.current_time()) * 1000)
        if request.HasField("long_polling_timeout"):
            polling = _ms(request.long_polling_timeout)
        elif remaining is not None:
            timeout = _ms(settings.request_timeout) if settings is not None and settings.HasField("request_timeout") else 0
            polling = remaining - timeout // 2
        else:
            polling = high
        polling = min(max(polling, low), high)
        if remaining is not None and polling > remaining - POLL_RESERVE_MS:
            if remaining >= low:
                polling = max(remaining - POLL_RESERVE_MS, 0)
            else:
                old = not ctx.version or ctx.version < ILLEGAL_POLLING_TIME_SINCE
                raise Refused(Code.BAD_REQUEST if old else Code.ILLEGAL_POLLING_TIME,
                              f"the deadline time remaining ({remaining} ms) is not enough for polling: long polling "
                              f"takes at least {low} ms; please check network condition or the call's timeout")
        return polling

    async def _receive(self, ctx: Ctx, call: transport.Call, request: Any) -> None:
        service = self.service
        s = service.settings()
        session = await service.known_session(ctx)  # the Python SimpleConsumer does not wait for its settings answer
        settings = session.settings if session is not None else None
        polling = self.polling_ms(ctx, request, settings)
        topic, group = request.message_queue.topic.name, request.group.name
        self._check_names(topic, group)
        auto_renew = request.auto_renew and s.enableProxyAutoRenew
        if auto_renew:
            invisible = s.defaultInvisibleTimeMills
        else:
            invisible = _ms(request.invisible_duration)
            if invisible < s.minInvisibleTimeMillsForRecv:
                raise Refused(Code.ILLEGAL_INVISIBLE_TIME,
                              f"the invisibleTime is too small. min is {s.minInvisibleTimeMillsForRecv} "
                              f"(invisible_duration is {invisible} ms)")
            if invisible > s.maxInvisibleTimeMills:
                raise Refused(Code.ILLEGAL_INVISIBLE_TIME,
                              f"the invisibleTime is too large. max is {s.maxInvisibleTimeMills} "
                              f"(invisible_duration is {invisible} ms)")
        expression = request.filter_expression
        kind = "SQL92" if expression.type == pb.FilterType.SQL else "TAG"
        text = expression.expression.strip() or "*"
        try:
            if not (kind == "TAG" and text == "*"):
                self.ctx.compile_filter(kind, text)
        except FilterExpressionError as exc:
            raise Refused(Code.ILLEGAL_FILTER_EXPRESSION, f"filter_expression {text!r} ({kind}) does not compile: {exc}") from None
        tags = None if kind != "TAG" or text == "*" else frozenset(t.strip() for t in text.split("||") if t.strip())
        batch = request.batch_size
        if batch <= 0:
            raise Refused(Code.BAD_REQUEST, f"batch_size {batch} must be at least 1")
        batch = min(batch, MAX_POP_NUMS)
        pop = self.pop()
        config = self.ctx.groups.find_or_create(group)
        if config is None:
            raise Refused(Code.CONSUMER_GROUP_NOT_FOUND,
                          f"consumer group {group} does not exist (autoCreateSubscriptionGroup is false)")
        fifo = config.consume_message_orderly
        max_attempts = config.retry_max_times + 1
        header = PopMessageRequestHeader(
            consumer_group=group, topic=topic, queue_id=-1, max_msg_nums=batch, invisible_time=invisible,
            poll_time=polling, born_time=now_ms(), init_mode=INIT_MODE_MAX, exp_type=kind, exp=text, order=fifo,
            attempt_id=request.attempt_id if request.HasField("attempt_id") else None,
        )
        popped = RemotingCommand.request(RequestCode.POP_MESSAGE, header.to_ext_fields())
        reply = self.reply(ctx.peer, lambda late: self._returned(late, group, topic))
        response = await reply.invoke(pop.popper, popped)
        if response.code in (ResponseCode.POLLING_TIMEOUT, ResponseCode.PULL_NOT_FOUND):
            await self._end(call, pb.Status(code=Code.MESSAGE_NOT_FOUND, message="no new message"))
            return
        if response.code == ResponseCode.POLLING_FULL:
            await self._end(call, pb.Status(code=Code.TOO_MANY_REQUESTS, message="polling full"))
            return
        if response.code != ResponseCode.SUCCESS:
            await self._end(call, broker_status(response, "receive"))
            return
        found = self.decode(response, group, topic)
        deliver = []
        for msg, props, handle in found:
            if tags is not None and props.get(P.TAGS) not in tags:
                await self._ack(ctx.peer, group, topic, handle)  # the queue's tag filter let it through (a hash match)
            elif msg.reconsume_times >= max_attempts:
                await self._to_dlq(ctx.peer, group, topic, handle, msg,
                                   props.get(P.UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or msg.msg_id)
            else:
                deliver.append((msg, props, handle))
        if not deliver:
            await self._end(call, pb.Status(code=Code.MESSAGE_NOT_FOUND, message="no match message"))
            return
        await self._deliver(call, ctx, group, topic, deliver, auto_renew)

    def decode(self, response: RemotingCommand, group: str, topic: str) -> list[tuple[Any, dict[str, str], ReceiptHandle]]:
        """The messages of a POP answer with their gRPC receipt handles (POP's eight fields + commit-log offset);
        a FIFO message's reconsume count is the one its queue's order state counted (``orderCountInfo``)."""
        h = response.ext_fields
        pop_time, invisible, revive_qid = int(h["popTime"]), int(h["invisibleTime"]), int(h["reviveQid"])
        starts = parse_start_offset_info(h.get("startOffsetInfo"))
        counts = parse_order_count_info(h.get("orderCountInfo")) if h.get("orderCountInfo") else None
        body = response.body
        views = body if isinstance(body, list) else [body]
        broker = self.ctx.settings.brokerName
        out = []
        for view in views:
            pos, end = 0, len(view)
            while pos < end:
                msg, pos = decode_message(view, pos)
                props = msg.properties
                ck = props.get(PROPERTY_POP_CK)
                handle = receipt_handle(topic=msg.topic, queue_id=msg.queue_id, queue_offset=msg.queue_offset, pop_ck=ck,
                                        start_offsets=starts, pop_time=pop_time, invisible_time=invisible,
                                        revive_qid=revive_qid, broker_name=broker)
                handle = attrs.evolve(handle, commit_log_offset=msg.commit_log_offset)
                if counts is not None and not ck:
                    flag = retry_flag(msg.topic)
                    count = counts.get(f"{flag}@qo{msg.queue_id}%{msg.queue_offset}")
                    if count is None:
                        count = counts.get(f"{flag}@{msg.queue_id}")
                    if count:
                        msg = attrs.evolve(msg, reconsume_times=count)
                out.append((msg, props, handle))
        return out

    async def _deliver(self, call: transport.Call, ctx: Ctx, group: str, topic: str,
                       found: list[tuple[Any, dict[str, str], ReceiptHandle]], auto_renew: bool) -> None:
        sent = 0
        try:
            await call.send(pb.ReceiveMessageResponse(status=pb.Status(code=Code.OK, message="OK")).SerializeToString())
            for msg, props, handle in found:
                out = pb.ReceiveMessageResponse()
                messages.to_pb(msg, topic=topic, properties=props, out=out.message)
                out.message.system_properties.receipt_handle = handle.encode()
                await call.send(out.SerializeToString())
                sent += 1
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.Cancelled):
            self._nack(ctx.peer, group, topic, [h for _, _, h in found[sent:]])
            raise
        finally:
            self.delivered += sent
            if auto_renew:
                now = trio.current_time()
                for msg, props, handle in found[:sent]:
                    given = handle.encode()
                    self.held[given] = Held(given, handle, group, topic,
                                            props.get(P.UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or msg.msg_id,
                                            ctx.client_id, msg.reconsume_times, now)
        done = pb.ReceiveMessageResponse()
        messages._set_ms(done.delivery_timestamp, now_ms())
        await call.send(done.SerializeToString())

    def _returned(self, response: RemotingCommand, group: str, topic: str) -> None:
        """A pop answered after its ReceiveMessage was gone: its messages come back at once."""
        if response.code != ResponseCode.SUCCESS or not response.body:
            return
        try:
            handles = [h for _, _, h in self.decode(response, group, topic)]
        except (ValueError, KeyError) as exc:
            log.warning("a late POP answer of %s / %s does not decode: %s", group, topic, exc)
            return
        self._nack(f"{self.ctx.settings.brokerIP1}:0", group, topic, handles)

    def _nack(self, peer: str, group: str, topic: str, handles: list[ReceiptHandle]) -> None:
        if handles and self.nursery is not None:
            self.nursery.start_soon(self._nack_all, peer, group, topic, handles)

    async def _nack_all(self, peer: str, group: str, topic: str, handles: list[ReceiptHandle]) -> None:
        for handle in handles:
            await self._change(peer, group, topic, handle, NACK_INVISIBLE_MS, suspend=True)

    # -- the POP room's requests -----------------------------------------------------------------------------------

    async def _ack(self, peer: str, group: str, topic: str, handle: ReceiptHandle) -> RemotingCommand:
        header = AckMessageRequestHeader(consumer_group=group, topic=handle.real_topic(topic, group),
                                         queue_id=handle.queue_id, extra_info=handle.encode(), offset=handle.queue_offset)
        request = RemotingCommand.request(RequestCode.ACK_MESSAGE, header.to_ext_fields())
        return await self.reply(peer).invoke(self.pop().acks.ack, request)

    async def _change(self, peer: str, group: str, topic: str, handle: ReceiptHandle, invisible_ms: int, *,
                      suspend: bool = False) -> tuple[RemotingCommand, ReceiptHandle]:
        """CHANGE_MESSAGE_INVISIBLETIME; the answer and the message's new handle (the commit-log offset kept)."""
        header = ChangeInvisibleTimeRequestHeader(
            consumer_group=group, topic=handle.real_topic(topic, group), queue_id=handle.queue_id,
            extra_info=handle.encode(), offset=handle.queue_offset, invisible_time=invisible_ms, suspend=suspend,
        )
        request = RemotingCommand.request(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, header.to_ext_fields())
        response = await self.reply(peer).invoke(self.pop().acks.change_invisible_time, request)
        if response.code != ResponseCode.SUCCESS:
            return response, handle
        f = response.ext_fields
        pop_time, invisible, revive_qid = int(f["popTime"]), int(f["invisibleTime"]), int(f["reviveQid"])
        if pop_time <= 0:  # a FIFO message already committed: nothing changed
            return response, handle
        return response, ReceiptHandle(handle.queue_offset, pop_time, invisible, revive_qid, handle.retry_flag,
                                       handle.broker_name, handle.queue_id, handle.queue_offset, handle.commit_log_offset)

    async def _to_dlq(self, peer: str, group: str, topic: str, handle: ReceiptHandle, msg: Any | None,
                      message_id: str) -> Any:
        """5.x's forwardMessageToDeadLetterQueue: the record at the handle's commit-log offset sent back with delay
        level -1 (to ``%DLQ%<group>``), then the handle acked; the ``Status``."""
        if handle.commit_log_offset < 0:
            raise Refused(Code.INVALID_RECEIPT_HANDLE, "the receipt_handle carries no commit-log offset (its 9th "
                                                       "field): it was not given out by a ReceiveMessage")
        real = handle.real_topic(topic, group)
        if msg is None:
            msg = self.ctx.store.look_message_by_offset(handle.commit_log_offset)
            if msg is None or msg.topic != real or msg.queue_id != handle.queue_id or msg.queue_offset != handle.queue_offset:
                raise Refused(Code.INVALID_RECEIPT_HANDLE,
                              f"the receipt_handle's commit-log offset {handle.commit_log_offset} does not hold the message "
                              f"at {real} queue {handle.queue_id} offset {handle.queue_offset}")
        send_back = self.kernel.plugin("broker.send_back")
        if send_back is None:
            raise Refused(Code.NOT_IMPLEMENTED, "this broker has no dead-letter queues (plugin broker.send_back)")
        header = ConsumerSendMsgBackRequestHeader(offset=handle.commit_log_offset, group=group, delay_level=-1,
                                                  origin_msg_id=message_id, origin_topic=real, max_reconsume_times=0)
        request = RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, header.to_ext_fields())
        host, _, port = peer.rpartition(":")
        code, remark = send_back.handle(request, (host.strip("[]") or "127.0.0.1", int(port) if port.isdigit() else 0))
        if code != ResponseCode.SUCCESS:
            return broker_status(request.make_response(code, remark), "forward to the dead-letter queue")
        self.dead_lettered += 1
        return broker_status(await self._ack(peer, group, topic, handle), "ack after forwarding to the dead-letter queue")

    # -- AckMessage / ChangeInvisibleDuration / ForwardMessageToDeadLetterQueue -------------------------------

    async def ack_message(self, ctx: Ctx, request: Any) -> Any:
        topic, group = request.topic.name, request.group.name
        self._check_names(topic, group)
        if not request.entries:
            raise Refused(Code.BAD_REQUEST, "entries is empty: nothing to ack")
        self.pop()
        response = pb.AckMessageResponse()
        codes: list[int] = []
        for entry in request.entries:
            try:
                handle, _ = await self.current(entry.receipt_handle)
                status = broker_status(await self._ack(ctx.peer, group, topic, handle), "ack")
            except Refused as exc:
                status = pb.Status(code=exc.code, message=exc.message)
            if status.code == Code.OK:
                self.acked += 1
            response.entries.add(message_id=entry.message_id, receipt_handle=entry.receipt_handle, status=status)
            codes.append(status.code)
        if len(set(codes)) > 1:
            response.status.CopyFrom(pb.Status(code=Code.MULTIPLE_RESULTS, message="MULTIPLE_RESULTS"))
        elif len(codes) == 1:
            response.status.CopyFrom(response.entries[0].status)  # one entry: its text (5.x: the code's name)
        else:
            response.status.CopyFrom(pb.Status(code=codes[0], message=pb.Code(codes[0]).name))
        return response

    async def change_invisible_duration(self, ctx: Ctx, request: Any) -> Any:
        topic, group = request.topic.name, request.group.name
        self._check_names(topic, group)
        s = self.service.settings()
        invisible = _ms(request.invisible_duration)
        if invisible < 0:
            raise Refused(Code.ILLEGAL_INVISIBLE_TIME, f"the invisibleTime is negative: {invisible} ms")
        if invisible > s.maxInvisibleTimeMills:
            raise Refused(Code.ILLEGAL_INVISIBLE_TIME, f"the invisibleTime is too large. max is {s.maxInvisibleTimeMills} "
                                                       f"(invisible_duration is {invisible} ms)")
        self.pop()
        handle, _ = await self.current(request.receipt_handle)
        suspend = request.HasField("suspend") and request.suspend
        answer, new = await self._change(ctx.peer, group, topic, handle, invisible, suspend=suspend)
        if answer.code != ResponseCode.SUCCESS:
            return pb.ChangeInvisibleDurationResponse(status=broker_status(answer, "change invisible duration"),
                                                      receipt_handle=request.receipt_handle)
        return pb.ChangeInvisibleDurationResponse(status=pb.Status(code=Code.OK, message="OK"), receipt_handle=new.encode())

    async def forward_to_dead_letter_queue(self, ctx: Ctx, request: Any) -> Any:
        topic, group = request.topic.name, request.group.name
        self._check_names(topic, group)
        self.pop()
        handle, _ = await self.current(request.receipt_handle)
        status = await self._to_dlq(ctx.peer, group, topic, handle, None, request.message_id)
        return pb.ForwardMessageToDeadLetterQueueResponse(status=status)

    # -- auto renew ----------------------------------------------------------------------------------------------

    async def renew(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Every ``renewSchedulePeriodMillis``: push consumers' messages due back within ``renewAheadTimeMillis``
        stay invisible longer; those of clients gone come back after ``invisibleTimeMillisWhenClear``."""
        task_status.started()
        while True:
            s = self.service.settings()
            await trio.sleep(s.renewSchedulePeriodMillis / 1000)
            await self.renew_once()

    async def renew_once(self) -> None:
        s = self.service.settings()
        now, clock = now_ms(), trio.current_time()
        live = {cid for cid, session in self.service.sessions.items()
                if session.telemetry is not None and not session.telemetry.closed}
        for given, held in list(self.held.items()):
            if held.busy is not None or self.held.get(given) is not held:
                continue
            if held.client_id not in live:
                self.held.pop(given, None)
                await self._renew_one(held, s.invisibleTimeMillisWhenClear, final=True)
            elif held.current.next_visible_time - now <= s.renewAheadTimeMillis:
                if (clock - held.since) * 1000 < s.renewMaxTimeMillis:
                    await self._renew_one(held, RENEW_STEPS_MS[min(held.renewals, len(RENEW_STEPS_MS) - 1)], final=False)
                else:
                    self.held.pop(given, None)
                    delay = GROUP_BACKOFF_S[min(held.reconsume_times, len(GROUP_BACKOFF_S) - 1)] * 1000
                    await self._renew_one(held, delay, final=True)

    async def _renew_one(self, held: Held, invisible_ms: int, *, final: bool) -> None:
        held.busy = trio.Event()
        try:
            answer, new = await self._change(f"{self.ctx.settings.brokerIP1}:0", held.group, held.topic, held.current,
                                             invisible_ms)
            if answer.code == ResponseCode.SUCCESS:
                held.current = new
                held.renewals += 1
            elif not final:
                self.held.pop(held.given, None)  # acked or gone meanwhile: nothing to renew
        finally:
            busy, held.busy = held.busy, None
            busy.set()
