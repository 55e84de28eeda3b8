"""The producer (Java ``DefaultMQProducer``; spec 3.1, 3.2, 5.5, 5.8, 5.10, 7.3).

    async with Producer("127.0.0.1:9876", group="orders") as producer:
        result = await producer.send(Message("Orders", b"...", tags="created", keys="order-17"))
        future = await producer.send_async(Message("Orders", b"..."))      # many in flight
        await producer.send_oneway(Message("Logs", b"..."))
        results = await producer.send_batch([Message("Orders", b"1"), Message("Orders", b"2")])
        await producer.send(message, selector=select_by_hash, arg=order_id)  # ordered per key

Sync sends retry (2 more attempts by default) on another broker when possible; every attempt feeds the latency
fault tolerance (:mod:`pyrmq.client.fault`). Routes come from the name servers, are cached, refreshed every 30 s
and after a failed attempt; a topic the name servers do not know is sent through TBW102's brokers, which create it.
"""

from __future__ import annotations

import collections
import logging
import time
import zlib
from collections.abc import Callable, Iterable, Sequence
from json.encoder import encode_basestring as _esc  # the C version, as RemotingCommand's JSON encoder uses
from typing import Any

import attrs
import outcome
import trio

from pyrmq.client.config import ClientConfig, check_name
from pyrmq.client.errors import BrokerError, ClientStateError, InvalidMessageError, SendFailedError
from pyrmq.client.fault import FaultStrategy
from pyrmq.client.ids import UniqIdGenerator
from pyrmq.client.instance import DEFAULT_TOPIC_QUEUE_NUMS, ClientInstance
from pyrmq.client.message import (
    Message,
    MessageQueue,
    SendResult,
    SendStatus,
    encode_properties,
)
from pyrmq.client.selectors import MessageQueueSelector, select_by_hash
from pyrmq.client.send_types import FunctionHook, SendContext, SendFuture, SendHook
from pyrmq.client.service import ClientService
from pyrmq.client.validation import MAX_MESSAGE_SIZE, MAX_PROPERTIES_SIZE, validate_message, validate_topic
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand, json_text
from pyrmq.remoting.errors import RemotingClosed, RemotingError, RemotingTimeout
from pyrmq.remoting.message import BATCH_ENTRY_HEAD, COMPRESSED_FLAG, SHORT, BatchEntry, encode_batch_body
from pyrmq.remoting.vocabulary import AUTO_CREATE_TOPIC_KEY
from pyrmq.remoting.vocabulary import RETRY_GROUP_TOPIC_PREFIX as RETRY_TOPIC_PREFIX
from pyrmq.remoting.vocabulary import MessageProperty

__all__ = ["Producer", "SendContext", "SendHook", "SendFuture", "validate_message"]

log = logging.getLogger("pyrmq.client.producer")

#: broker codes after which a sync send tries again (4.9.8 DefaultMQProducer#retryResponseCodes)
RETRY_CODES = frozenset({17, 14, 1, 16, 204, 205})
_QUEUE_NUMS = str(DEFAULT_TOPIC_QUEUE_NUMS)
_STATUS = {
    ResponseCode.SUCCESS: SendStatus.SEND_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}


@attrs.define(slots=True)
class _Prepared:
    """A message encoded once for every attempt: body (maybe compressed), sysFlag, properties text, ids."""

    topic: str
    body: bytes
    sys_flag: int
    properties: str | None
    uniq_key: str
    flag: int = 0
    reconsume_times: int | None = None
    max_reconsume_times: int | None = None
    batch: bool = False
    original: Any = None


class Producer(ClientService):
    """Sends messages; see the module docstring. Thread-unsafe: use it from the trio run that started it (the
    blocking :class:`pyrmq.client.BlockingProducer` is the one to share between threads)."""

    def __init__(
        self,
        namesrv: str | Iterable[str] | None = None,
        group: str = "pyrmq_producer",
        *,
        config: ClientConfig | None = None,
        instance: ClientInstance | None = None,
        send_timeout: float = 3.0,
        retry_times: int = 2,
        retry_times_async: int = 2,
        max_message_size: int = MAX_MESSAGE_SIZE,
        compress_over: int = 4096,
        compress_level: int = 5,
        latency_fault_tolerance: bool = True,
        retry_another_broker_when_not_store_ok: bool = False,
        hooks: Iterable[SendHook] = (),
        credentials: tuple[str, str] | None = None,
    ) -> None:
        if config is None and instance is None:
            config = ClientConfig(namesrv_addr=namesrv)
        super().__init__(instance, config, credentials)
        self.group = check_name("producer group", group)
        self.send_timeout = send_timeout
        self.retry_times = retry_times
        self.retry_times_async = retry_times_async
        self.max_message_size = max_message_size
        self.compress_over = compress_over
        self.compress_level = compress_level
        self.retry_another_broker_when_not_store_ok = retry_another_broker_when_not_store_ok
        self.fault = FaultStrategy(enabled=latency_fault_tolerance)
        self.hooks: list[SendHook] = list(hooks)
        self._ids = UniqIdGenerator(self.instance.client_ip)
        #: async sends waiting for their answer: (connection id, opaque) -> (connection, callback); the deque orders
        #: their keys by deadline for the timeout sweep (answered ones are dropped from the dict at once, so a
        #: body is not kept alive until its deadline)
        self._inflight: dict[tuple[int, int], tuple[Any, Callable[[outcome.Outcome], None]]] = {}
        self._deadlines: collections.deque[tuple[float, tuple[int, int]]] = collections.deque()
        self._flusher_running = False
        self._flush_wanted = trio.Event()
        self._to_flush: set[Any] = set()
        #: topic -> the send header's first members as JSON (group, topic, TBW102, queue count), see _request
        self._send_json: dict[str, str] = {}

    # -- life cycle ------------------------------------------------------------------------------------------

    async def _on_start(self, nursery: trio.Nursery) -> None:
        self.instance.producer_groups.add(self.group)
        nursery.start_soon(self._sweep_timeouts)
        nursery.start_soon(self._flusher)
        self.instance.heartbeat_soon()

    async def _on_shutdown(self) -> None:
        # async sends still waiting for their answer get it (up to the send timeout) before the producer stops
        with trio.move_on_after(self.send_timeout):
            while self._inflight:
                await trio.sleep(0.005)
        for (_conn_id, opaque), (conn, on_response) in list(self._inflight.items()):
            if conn.cancel_callback(opaque):
                on_response(outcome.Error(RemotingClosed(conn.address, "producer shut down")))
        self._inflight.clear()
        self._deadlines.clear()
        await self.instance.unregister(producer_group=self.group)
        self.instance.producer_groups.discard(self.group)

    def _ready(self) -> None:
        if not self.started and not self.instance.started:
            raise ClientStateError("Producer is not started (use `async with` or `await producer.start()`)")

    def add_send_hook(self, hook: SendHook | None = None, *, before: Callable | None = None, after: Callable | None = None) -> None:
        """Register a hook object, or ``before``/``after`` functions taking a :class:`SendContext`."""
        self.hooks.append(hook if hook is not None else FunctionHook(before, after))

    # -- preparing -------------------------------------------------------------------------------------------

    def _prepare(self, msg: Message, *, extra_properties: dict[str, str] | None = None) -> _Prepared:
        validate_message(msg, self.max_message_size)
        uniq = self._ids.next()
        body = msg.body
        if extra_properties is None and not msg.properties and not msg.keys and not msg.tags \
                and msg.wait_store_msg_ok and msg.delay_time_level <= 0 and len(body) < self.compress_over:
            # a plain message: its only property is its id (what encode_properties writes for {UNIQ_KEY: uniq})
            return _Prepared(msg.topic, body, 0, f"UNIQ_KEY\u0001{uniq}", uniq, msg.flag, None, None, False, msg)
        props = msg.system_properties()
        if msg.properties:
            props.update(msg.properties)
        reconsume = max_reconsume = None
        if extra_properties:
            props.update(extra_properties)
            if msg.topic.startswith(RETRY_TOPIC_PREFIX):
                # the retry counts travel in the header for %RETRY% topics (Java's sendKernelImpl)
                if MessageProperty.RECONSUME_TIME in props:
                    reconsume = int(props.pop(MessageProperty.RECONSUME_TIME))
                if MessageProperty.MAX_RECONSUME_TIMES in props:
                    max_reconsume = int(props.pop(MessageProperty.MAX_RECONSUME_TIMES))
        if extra_properties and extra_properties.get(MessageProperty.UNIQ_CLIENT_MESSAGE_ID_KEYIDX):
            uniq = extra_properties[MessageProperty.UNIQ_CLIENT_MESSAGE_ID_KEYIDX]  # a message given back for a retry keeps its id (Java setUniqID)
        props[MessageProperty.UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = uniq
        text = encode_properties(props)
        if len(text) > MAX_PROPERTIES_SIZE // 4 and len(text.encode("utf-8")) > MAX_PROPERTIES_SIZE:
            raise InvalidMessageError(f"the message properties take more than {MAX_PROPERTIES_SIZE} bytes")
        sys_flag = 0
        if len(body) >= self.compress_over:
            body = zlib.compress(body, self.compress_level)
            sys_flag |= COMPRESSED_FLAG
        return _Prepared(msg.topic, body, sys_flag, text, uniq, msg.flag, reconsume, max_reconsume, False, msg)

    def _prepare_batches(self, msgs: Sequence[Message]) -> list[_Prepared]:
        """Validate every message of a batch and encode it once, straight into SEND_BATCH_MESSAGE bodies (spec
        5.8) of at most ``max_message_size`` bytes each: per message a packed entry head, the body and the
        properties (just ``UNIQ_KEY`` for a plain message), no object in between."""
        if not msgs:
            raise InvalidMessageError("the batch is empty")
        first = msgs[0]
        topic = first.topic
        if topic.startswith(RETRY_TOPIC_PREFIX):
            raise InvalidMessageError("a batch cannot go to a %RETRY% topic")
        wait_ok = first.wait_store_msg_ok
        limit = max_size = self.max_message_size
        outer = None if wait_ok else encode_properties({MessageProperty.WAIT_STORE_MSG_OK: "false"})
        ids = self._ids.next_many(len(msgs))
        pack_head = BATCH_ENTRY_HEAD.pack
        pack_short = SHORT.pack
        uniq_key = MessageProperty.UNIQ_CLIENT_MESSAGE_ID_KEYIDX
        # (start, end, body parts) of each request; sent only once every message passed the checks
        spans: list[tuple[int, int, list]] = []
        parts: list = []
        start = size = 0
        plain_head = "UNIQ_KEY\u0001".encode()
        lead = b""  # the entry's properties length and "UNIQ_KEY\u0001", for ids of lead_len characters
        lead_len = -1
        for i, msg in enumerate(msgs):
            if i and type(msg) is Message and msg.topic == topic and not msg.properties and not msg.keys \
                    and not msg.tags and msg.delay_time_level == 0 and wait_ok and msg.wait_store_msg_ok == wait_ok:
                # a plain message after the first (which took the full checks below, the topic's included)
                body = msg.body
                if not body or len(body) > max_size:
                    validate_message(msg, max_size)  # raises the usual error
                uid = ids[i]
                if len(uid) != lead_len:
                    lead_len = len(uid)
                    lead = pack_short(len(plain_head) + lead_len) + plain_head
                tail = lead + uid.encode()  # an id is hex: ASCII
                entry_size = 20 + len(body) + len(tail)
            else:
                validate_message(msg, max_size)
                if msg.topic != topic:
                    raise InvalidMessageError(f"a batch must have one topic: {topic!r} and {msg.topic!r}")
                if msg.delay_time_level > 0:
                    raise InvalidMessageError("a batch cannot carry delayed messages (delay_time_level)")
                if msg.wait_store_msg_ok != wait_ok:
                    raise InvalidMessageError("every message of a batch needs the same wait_store_msg_ok")
                if msg.properties or msg.keys or msg.tags or not msg.wait_store_msg_ok:
                    props = msg.system_properties()
                    props.update(msg.properties)
                    props[uniq_key] = ids[i]
                    raw = encode_properties(props).encode("utf-8")
                else:
                    raw = f"UNIQ_KEY\u0001{ids[i]}".encode()
                body = msg.body
                tail = pack_short(len(raw)) + raw
                entry_size = 22 + len(body) + len(raw)
            if entry_size > limit:
                raise InvalidMessageError(f"one message of the batch takes {entry_size} bytes, over {limit}")
            if i > start and size + entry_size > limit:
                spans.append((start, i, parts))
                parts = []
                start, size = i, 0
            parts += (pack_head(entry_size, 0, 0, msg.flag, len(body)), body, tail)
            size += entry_size
        spans.append((start, len(msgs), parts))
        return [
            _Prepared(topic, b"".join(body_parts), 0, outer, ",".join(ids[a:b]), 0, None, None, True, list(msgs[a:b]))
            for a, b, body_parts in spans
        ]

    def _prepare_batch(self, msgs: Sequence[Message]) -> _Prepared:
        """Exactly one batch request for ``msgs`` (InvalidMessageError when they exceed one request)."""
        chunks = self._prepare_batches(msgs)
        if len(chunks) > 1:
            raise InvalidMessageError(f"the batch is over {self.max_message_size} bytes; use send_batch to split it")
        return chunks[0]

    def _request(self, p: _Prepared, mq: MessageQueue, born: int, *, oneway: bool = False) -> RemotingCommand:
        ext = {
            "a": self.group, "b": p.topic, "c": AUTO_CREATE_TOPIC_KEY, "d": _QUEUE_NUMS, "e": str(mq.queue_id),
            "f": str(p.sys_flag), "g": str(born), "h": str(p.flag),
        }
        if p.properties:
            ext["i"] = p.properties
        if p.reconsume_times is not None:
            ext["j"] = p.reconsume_times
        if p.max_reconsume_times is not None:
            ext["l"] = p.max_reconsume_times
        if p.batch:
            ext["m"] = "true"
        code = RequestCode.SEND_BATCH_MESSAGE if p.batch else RequestCode.SEND_MESSAGE_V2
        request = RemotingCommand.request(code, ext, p.body, oneway)
        if self.instance.remoting.signer is None and type(p.flag) is int and type(born) is int \
                and type(mq.queue_id) is int:
            # the header's members as the generic JSON encoder writes them (same bytes, RemotingCommand.ext_json),
            # from a per-topic head; a signer adds fields to ``ext``, so a signed request takes the generic encoder
            head = self._send_json.get(p.topic)
            if head is None:
                if len(self._send_json) >= 1024:
                    self._send_json.clear()
                head = self._send_json[p.topic] = (
                    f'"a":{json_text(self.group)},"b":{json_text(p.topic)},"c":{json_text(AUTO_CREATE_TOPIC_KEY)},'
                    f'"d":"{_QUEUE_NUMS}","e":"'
                )
            text = f'{head}{mq.queue_id:d}","f":"{p.sys_flag:d}","g":"{born:d}","h":"{p.flag:d}"'
            if p.properties:
                text = f'{text},"i":{_esc(p.properties)}'
            if p.reconsume_times is not None:
                text = f'{text},"j":"{p.reconsume_times:d}"'
            if p.max_reconsume_times is not None:
                text = f'{text},"l":"{p.max_reconsume_times:d}"'
            if p.batch:
                text += ',"m":"true"'
            request.ext_json = text
        return request

    def _result(self, p: _Prepared, mq: MessageQueue, response: RemotingCommand, addr: str) -> SendResult:
        status = _STATUS.get(response.code)
        if status is None:
            raise BrokerError(response.code, response.remark, addr, "send")
        ext = response.ext_fields
        qid = ext.get("queueId")
        try:
            if qid is not None and qid != str(mq.queue_id):
                mq = MessageQueue(mq.topic, mq.broker_name, int(qid))
            return SendResult(
                status, p.uniq_key, ext.get("msgId", ""), mq,
                int(ext.get("queueOffset", -1)), ext.get(MessageProperty.MSG_REGION, "DefaultRegion"), ext.get(MessageProperty.TRACE_SWITCH, "true") != "false",
                ext.get("transactionId"),
            )
        except ValueError as exc:
            raise BrokerError(response.code, f"bad send response header {ext!r}: {exc}", addr) from None

    # -- hooks -----------------------------------------------------------------------------------------------

    def _hook_context(self, p: _Prepared, mq: MessageQueue, addr: str, mode: str, born: int) -> SendContext | None:
        if not self.hooks:
            return None
        ctx = SendContext(self.group, p.original, mq, addr, mode, born)
        for hook in self.hooks:
            try:
                hook.before_send(ctx)
            except Exception:
                log.exception("send hook %r failed in before_send", hook)
        return ctx

    def _hook_after(self, ctx: SendContext | None, result: SendResult | None, exc: BaseException | None, elapsed: float) -> None:
        if ctx is None:
            return
        ctx.result, ctx.exception, ctx.elapsed_ms = result, exc, elapsed
        for hook in self.hooks:
            try:
                hook.after_send(ctx)
            except Exception:
                log.exception("send hook %r failed in after_send", hook)

    # -- sync ------------------------------------------------------------------------------------------------

    async def send(
        self,
        msg: Message,
        *,
        queue: MessageQueue | None = None,
        selector: MessageQueueSelector | None = None,
        arg: Any = None,
        timeout: float | None = None,
    ) -> SendResult:
        """Send and wait for the broker's answer. ``queue`` or ``selector(queues, msg, arg)`` pin the queue (then
        there is no retry on another broker, as in Java); otherwise round robin with retries and fault tolerance."""
        self._ready()
        p = self._prepare(msg)
        return await self._send_prepared(p, queue=queue, selector=selector, arg=arg, timeout=timeout)

    async def send_raw(self, msg: Message, properties: dict[str, str], *, timeout: float | None = None) -> SendResult:
        """Send with extra (system) properties the validation would refuse; the retry fallback uses it."""
        self._ready()
        p = self._prepare(msg, extra_properties=properties)
        return await self._send_prepared(p, timeout=timeout)

    async def send_orderly(self, msg: Message, sharding_key: Any, *, timeout: float | None = None) -> SendResult:
        """Ordered send: every message with the same ``sharding_key`` goes to the same queue (hash selector)."""
        return await self.send(msg, selector=select_by_hash, arg=sharding_key, timeout=timeout)

    async def _send_prepared(
        self,
        p: _Prepared,
        *,
        queue: MessageQueue | None = None,
        selector: MessageQueueSelector | None = None,
        arg: Any = None,
        timeout: float | None = None,
    ) -> SendResult:
        timeout = self.send_timeout if timeout is None else timeout
        deadline = trio.current_time() + timeout
        instance = self.instance
        if queue is not None or selector is not None:
            if queue is None:
                info = await instance.publish_info(p.topic)
                queue = selector(info.queues, p.original, arg)  # type: ignore[misc]
                if not isinstance(queue, MessageQueue):
                    raise InvalidMessageError(f"the queue selector returned {queue!r}, not a MessageQueue")
            return await self._attempt(p, queue, deadline, attempts=None)
        info = instance.publish.get(p.topic)
        # the deadline can only have passed before the first attempt if the route had to be fetched first
        check = timeout <= 0
        if info is None or not info.ok:
            info = await instance.publish_info(p.topic)
            check = True
        attempts: list[tuple[str, BaseException]] = []
        last_broker = None
        for _ in range(1 + self.retry_times):
            if check and trio.current_time() >= deadline:
                attempts.append(("deadline", RemotingTimeout(p.topic, timeout)))
                break
            mq = self.fault.select(info, last_broker)
            last_broker = mq.broker_name
            check = True
            try:
                result = await self._attempt(p, mq, deadline, attempts)
            except _Retry:
                info = instance.publish.get(p.topic) or info
                continue
            if result.status is not SendStatus.SEND_OK and self.retry_another_broker_when_not_store_ok:
                continue
            return result
        raise SendFailedError(p.topic, attempts)

    async def _attempt(
        self, p: _Prepared, mq: MessageQueue, deadline: float, attempts: list[tuple[str, BaseException]] | None
    ) -> SendResult:
        """One attempt. With ``attempts`` given, a retryable failure is recorded and ``_Retry`` raised."""
        instance = self.instance
        born = int(time.time() * 1000)
        addr = instance.broker_addr(mq.broker_name)
        begin = time.monotonic()
        ctx = None
        try:
            if addr is None:
                addr = await instance.broker_addr_for(mq)
            ctx = self._hook_context(p, mq, addr, "SYNC", born) if self.hooks else None
            request = self._request(p, mq, born)
            response = await instance.remoting.invoke(addr, request, max(deadline - trio.current_time(), 0.001))
            result = self._result(p, mq, response, addr)
        except (RemotingError, BrokerError) as exc:
            elapsed = (time.monotonic() - begin) * 1000
            self.fault.update(mq.broker_name, elapsed, True)
            self._hook_after(ctx, None, exc, elapsed)
            if isinstance(exc, RemotingError):
                instance.refresh_soon(p.topic)
            if attempts is None:
                if isinstance(exc, BrokerError):
                    raise
                raise SendFailedError(p.topic, [(f"{mq.broker_name}/{mq.queue_id}", exc)]) from None
            if isinstance(exc, BrokerError) and exc.code not in RETRY_CODES:
                raise
            attempts.append((f"{mq.broker_name}/{mq.queue_id}", exc))
            raise _Retry() from None
        elapsed = (time.monotonic() - begin) * 1000
        self.fault.update(mq.broker_name, elapsed, False)
        if ctx is not None:
            self._hook_after(ctx, result, None, elapsed)
        return result

    # -- batch -----------------------------------------------------------------------------------------------

    def split_batch(self, msgs: Sequence[Message]) -> list[list[Message]]:
        """How :meth:`send_batch` splits ``msgs``: consecutive chunks whose encoded body stays within
        ``max_message_size`` (spec 5.8 entry sizes)."""
        return [p.original for p in self._prepare_batches(msgs)]

    async def send_batch(
        self, msgs: Iterable[Message], *, queue: MessageQueue | None = None, timeout: float | None = None
    ) -> list[SendResult]:
        """SEND_BATCH_MESSAGE (320): one request per chunk of at most 4 MiB; one SendResult per chunk, whose
        ``msg_id`` joins the messages' UNIQ_KEYs with commas and whose ``queue_offset`` is the first message's."""
        self._ready()
        return [await self._send_prepared(p, queue=queue, timeout=timeout) for p in self._prepare_batches(list(msgs))]

    async def send_encoded_batch(
        self, topic: str, entries: Sequence[BatchEntry], uniq_keys: Sequence[str], *,
        queue: MessageQueue | None = None, timeout: float | None = None,
    ) -> SendResult:
        """SEND_BATCH_MESSAGE of entries the caller encoded itself (spec 5.8), for bulk writers that build them from
        columns (the Spark sink). Each entry's properties must already hold its UNIQ_KEY (``uniq_keys``, in order;
        :class:`pyrmq.client.ids.UniqIdGenerator` makes them); only the topic and the total size are checked here.
        Queue choice, retries, fault tolerance and the TBW102 fallback are :meth:`send`'s. Send hooks see the
        entries as the context's message."""
        self._ready()
        validate_topic(topic)
        if not entries:
            raise InvalidMessageError("the batch is empty")
        body = encode_batch_body(list(entries))
        if len(body) > self.max_message_size:
            raise InvalidMessageError(f"the batch is {len(body)} bytes, over {self.max_message_size}")
        p = _Prepared(topic, body, 0, None, ",".join(uniq_keys), 0, None, None, True, list(entries))
        return await self._send_prepared(p, queue=queue, timeout=timeout)

    # -- oneway ----------------------------------------------------------------------------------------------

    async def send_oneway(self, msg: Message, *, queue: MessageQueue | None = None,
                          selector: MessageQueueSelector | None = None, arg: Any = None) -> None:
        """Fire and forget: no answer, no retry (Java's sendOneway)."""
        self._ready()
        p = self._prepare(msg)
        info = await self.instance.publish_info(p.topic)
        if queue is None:
            queue = selector(info.queues, msg, arg) if selector is not None else self.fault.select(info, None)
        addr = await self.instance.broker_addr_for(queue)
        born = int(time.time() * 1000)
        ctx = self._hook_context(p, queue, addr, "ONEWAY", born)
        begin = time.monotonic()
        try:
            await self.instance.remoting.invoke_oneway(addr, self._request(p, queue, born, oneway=True), self.send_timeout)
        except RemotingError as exc:
            self.fault.update(queue.broker_name, (time.monotonic() - begin) * 1000, True)
            self._hook_after(ctx, None, exc, 0.0)
            raise SendFailedError(p.topic, [(f"{queue.broker_name}/{queue.queue_id}", exc)]) from None
        self._hook_after(ctx, None, None, (time.monotonic() - begin) * 1000)

    # -- async -----------------------------------------------------------------------------------------------

    async def send_async(
        self,
        msg: Message,
        callback: Callable[[SendResult | None, BaseException | None], None] | None = None,
        *,
        queue: MessageQueue | None = None,
        timeout: float | None = None,
    ) -> SendFuture:
        """Queue the send and return at once (after the request is written), without waiting for the answer.

        ``await future`` (or ``callback(result, error)``, called from the connection's reader, must not block)
        gives the outcome. A failed attempt is retried on another broker up to ``retry_times_async`` times.
        Many sends can be in flight on one connection; bound them yourself (e.g. a ``trio.Semaphore``).
        """
        self._ready()
        p = self._prepare(msg)
        future = SendFuture(callback)
        deadline = trio.current_time() + (self.send_timeout if timeout is None else timeout)
        await self._async_attempt(p, future, deadline, queue, 0, None, [])
        return future

    async def _async_attempt(
        self,
        p: _Prepared,
        future: SendFuture,
        deadline: float,
        queue: MessageQueue | None,
        attempt: int,
        last_broker: str | None,
        attempts: list[tuple[str, BaseException]],
    ) -> None:
        instance = self.instance
        try:
            info = await instance.publish_info(p.topic)
            mq = queue or self.fault.select(info, last_broker)
            addr = instance.broker_addr(mq.broker_name) or await instance.broker_addr_for(mq)
            conn = instance.remoting.connections.get(addr)
            if conn is None or conn.poll_closed():
                conn = await instance.remoting.connection(addr)
        except Exception as exc:  # noqa: BLE001 - reported through the future
            attempts.append((p.topic, exc))
            future._finish(None, exc if isinstance(exc, (BrokerError, InvalidMessageError)) else SendFailedError(p.topic, attempts))
            return
        born = int(time.time() * 1000)
        ctx = self._hook_context(p, mq, addr, "ASYNC", born)
        begin = time.monotonic()
        request = self._request(p, mq, born)
        inflight = self._inflight

        def on_response(result: outcome.Outcome) -> None:
            inflight.pop((conn.id, request.opaque), None)
            elapsed = (time.monotonic() - begin) * 1000
            try:
                send_result = self._result(p, mq, result.unwrap(), addr)
            except (RemotingError, BrokerError) as exc:
                self.fault.update(mq.broker_name, elapsed, True)
                self._hook_after(ctx, None, exc, elapsed)
                attempts.append((f"{mq.broker_name}/{mq.queue_id}", exc))
                retryable = isinstance(exc, RemotingError) or exc.code in RETRY_CODES
                if isinstance(exc, RemotingError):
                    instance.refresh_soon(p.topic)
                if retryable and queue is None and attempt < self.retry_times_async and trio.current_time() < deadline:
                    instance.spawn(self._async_attempt, p, future, deadline, None, attempt + 1, mq.broker_name, attempts)
                elif isinstance(exc, BrokerError) and not retryable:
                    future._finish(None, exc)
                else:
                    future._finish(None, SendFailedError(p.topic, attempts))
                return
            self.fault.update(mq.broker_name, elapsed, False)
            self._hook_after(ctx, send_result, None, elapsed)
            future._finish(send_result, None)

        conn.invoke_callback(request, on_response)
        key = (conn.id, request.opaque)
        if not future._done:  # not failed at once (closed connection)
            inflight[key] = (conn, on_response)
            self._deadlines.append((deadline, key))
        if self._flusher_running:
            # the flusher task writes what accumulated since its last turn in one system call (frames of several
            # sends per write: less CPU here and on the broker, which reads them in one receive)
            self._to_flush.add(conn)
            self._flush_wanted.set()
        else:
            await conn.flush()

    async def _flusher(self) -> None:
        self._flusher_running = True
        try:
            while True:
                await self._flush_wanted.wait()
                self._flush_wanted = trio.Event()
                conns, self._to_flush = self._to_flush, set()
                for conn in conns:
                    await conn.flush()
        finally:
            self._flusher_running = False

    async def _sweep_timeouts(self) -> None:
        """Fail async sends whose deadline passed (Java's scanResponseTable, here every 100 ms)."""
        deadlines = self._deadlines
        inflight = self._inflight
        while True:
            await trio.sleep(0.1)
            now = trio.current_time()
            while deadlines and deadlines[0][0] <= now:
                _deadline, key = deadlines.popleft()
                entry = inflight.pop(key, None)
                if entry is not None and entry[0].cancel_callback(key[1]):
                    entry[1](outcome.Error(RemotingTimeout(entry[0].address, self.send_timeout, RequestCode.SEND_MESSAGE_V2)))


class _Retry(Exception):
    """Internal: the attempt failed in a way that allows another one."""
