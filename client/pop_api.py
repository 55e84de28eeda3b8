"""POP consumption on the client side (RocketMQ 5.x): the requests of 5.x's remoting client (``MQClientAPIImpl``
popMessageAsync, ackMessageAsync, batchAckMessageAsync, changeInvisibleTimeAsync), the message a pop hands out
(:class:`PopMessage`, with its receipt handle), and :class:`PopSession`, what :class:`~pyrmq.client.SimpleConsumer`
and the push consumer's POP mode share: the group's settings as the brokers hold them, pops with the gRPC proxy's
filtering (tag re-check, dead-lettering at the group's retryMaxTimes), acks batched per broker, changes of invisible
time, and the 5.x back-off.

The wire format (headers, handles, info strings, batch-ack body) is :mod:`pyrmq.remoting.pop`, shared with the
broker.
"""

from __future__ import annotations

import datetime
import enum
import logging
import math
import time
import uuid
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import trio

from pyrmq.client.errors import BrokerError, InvalidMessageError, TopicNotFoundError
from pyrmq.client.message import MessageExt, decode_messages, raw_tags
from pyrmq.remoting.message import HEADER_STRUCTS
from pyrmq.remoting import fastjson
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.errors import RemotingError
from pyrmq.remoting.vocabulary import MessageProperty
from pyrmq.remoting.pop import (
    INIT_MODE_MAX,
    INIT_MODE_MIN,
    MAX_POP_NUMS,
    PROPERTY_POP_CK,
    AckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    PopMessageRequestHeader,
    ReceiptHandle,
    batch_acks,
    encode_batch_ack_body,
    parse_order_count_info,
    parse_start_offset_info,
    receipt_handle,
    retry_flag,
)

if TYPE_CHECKING:  # pragma: no cover
    from pyrmq.client.consumer import ConsumerCore, Subscription
    from pyrmq.client.instance import ClientInstance

__all__ = [
    "PopMessage", "PopStatus", "PopResult", "PopSession", "GroupSettings", "DEFAULT_RETRY_BACKOFF",
    "MAX_INVISIBLE_DURATION", "seconds", "pop", "ack", "batch_ack", "change_invisible_time", "forward_to_dlq",
    "group_settings",
]

log = logging.getLogger("pyrmq.client.pop")

#: the group retry policy 5.x gives its consumers when the group sets none (``CustomizedRetryPolicy``: the delay
#: before attempt n + 1 after attempt n failed, in seconds; the last one repeats)
DEFAULT_RETRY_BACKOFF: tuple[float, ...] = (1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800,
                                            3600, 7200)
#: the longest invisible time (5.x's gRPC proxy ``maxInvisibleTimeMills``: 12 h)
MAX_INVISIBLE_DURATION = 12 * 3600.0
#: the group settings a broker without the group's config stands for (5.x's SubscriptionGroupConfig defaults)
DEFAULT_RETRY_MAX_TIMES = 16
#: a background ack request waits this long (s) for more acks unless ACK_BATCH are pending
ACK_LINGER = 0.002
ACK_BATCH = 32
#: how often a consumer reads its group's settings again (the gRPC proxy's cache refresh: 20 s)
GROUP_SETTINGS_INTERVAL = 20.0

#: RocketMQ 5.x's GET_SUBSCRIPTIONGROUP_CONFIG (one group's config; 4.x brokers serve the whole table only)
GET_SUBSCRIPTIONGROUP_CONFIG = RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG

_POP_CK_MARK = PROPERTY_POP_CK.encode() + b"\x01"


def seconds(value: float | int | datetime.timedelta, what: str, *, low: float = 0.0, high: float = MAX_INVISIBLE_DURATION,
            low_inclusive: bool = True) -> float:
    """A duration in seconds (a number or a timedelta), checked against ``[low, high]``; InvalidMessageError naming
    ``what`` otherwise."""
    if isinstance(value, datetime.timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise InvalidMessageError(f"{what} must be a number of seconds or a timedelta, not {value!r}")
    if value < low or (value == low and not low_inclusive) or value > high:
        bound = "[" if low_inclusive else "("
        raise InvalidMessageError(f"{what} {value} s is out of range {bound}{low:g}, {high:g}] s")
    return float(value)


def _raw_property(raw: bytes, mark: bytes) -> str | None:
    """A property straight from the raw properties bytes (``mark`` = name + \\x01)."""
    i = raw.find(mark)
    while i > 0 and raw[i - 1] != 2:
        i = raw.find(mark, i + 1)
    if i < 0:
        return None
    start = i + len(mark)
    end = raw.find(b"\x02", start)
    return (raw[start:] if end < 0 else raw[start:end]).decode("utf-8", "replace") or None


class PopMessage(MessageExt):
    """A popped message: every field of :class:`MessageExt` plus its receipt handle (what ack and a change of
    invisible time name). ``topic`` is the topic subscribed, also for a message that came back through the group's
    retry topic; ``reconsume_times`` counts earlier deliveries (``delivery_attempt`` = reconsume_times + 1)."""

    __slots__ = ("receipt_handle", "consumer_group")

    receipt_handle: ReceiptHandle
    consumer_group: str

    @property
    def delivery_attempt(self) -> int:
        """1 for the first delivery (5.x's ``MessageView.getDeliveryAttempt``)."""
        return self.reconsume_times + 1

    @property
    def handle(self) -> str:
        """The receipt handle as text (5.x's POP_CK / extraInfo)."""
        return self.receipt_handle.encode()

    @property
    def invisible_until(self) -> float:
        """When the message becomes visible again unless acked (seconds since the epoch)."""
        return self.receipt_handle.next_visible_time / 1000

    @property
    def fifo(self) -> bool:
        """Popped from a FIFO group: the queue's next messages wait until this one is acked or visible again."""
        return self.receipt_handle.is_order

    @property
    def real_topic(self) -> str:
        """The topic the message is stored in now: its topic, or the group's POP retry topic after a redelivery."""
        return self.receipt_handle.real_topic(self.topic, self.consumer_group)

    @property
    def message_group(self) -> str | None:
        """The sharding key a 5.x producer set (``__SHARDINGKEY``), if any."""
        return self.properties.get(MessageProperty.SHARDING_KEY)

    def __repr__(self) -> str:
        return (f"<PopMessage {self.topic}/{self.broker_name}/{self.queue_id}@{self.queue_offset} id={self.msg_id}"
                f" tags={self.tags!r} attempt={self.delivery_attempt} handle={self.handle!r}>")


class PopStatus(enum.Enum):
    FOUND = "FOUND"
    #: the long poll ended with nothing (POLLING_TIMEOUT, or PULL_NOT_FOUND from an old broker)
    NO_NEW_MSG = "NO_NEW_MSG"
    #: the broker holds too many waiting pops of this queue (POLLING_FULL)
    POLLING_FULL = "POLLING_FULL"


@attrs.frozen
class PopResult:
    status: PopStatus
    messages: list[PopMessage]
    rest_num: int = 0
    pop_time: int = 0
    invisible_time: int = 0
    revive_qid: int = 0

    @property
    def fifo(self) -> bool:
        return self.revive_qid == 999


_POP_STATUS: dict[int, PopStatus] = {
    ResponseCode.SUCCESS: PopStatus.FOUND,
    ResponseCode.POLLING_FULL: PopStatus.POLLING_FULL,
    ResponseCode.POLLING_TIMEOUT: PopStatus.NO_NEW_MSG,
    ResponseCode.PULL_NOT_FOUND: PopStatus.NO_NEW_MSG,
}


def _int(fields: dict[str, Any], name: str, addr: str) -> int:
    try:
        return int(fields.get(name) or 0)
    except (TypeError, ValueError):
        raise BrokerError(ResponseCode.SYSTEM_ERROR, f"POP answer's {name} is not a number: {fields.get(name)!r}",
                          addr, "POP_MESSAGE") from None


def pop_result(response: RemotingCommand, addr: str, broker_name: str, topic: str, group: str) -> PopResult:
    """Decode a POP_MESSAGE answer as 5.x's client does (``processPopResponse``): each message gets its receipt handle
    (``POP_CK`` when the broker put one, else from the answer's ``startOffsetInfo``), the topic popped, the broker's
    name and, for a FIFO pop, its reconsume count from ``orderCountInfo``. Raises BrokerError for any other code."""
    status = _POP_STATUS.get(response.code)
    if status is None:
        raise BrokerError(response.code, response.remark, addr, "POP_MESSAGE")
    h = response.ext_fields
    rest = _int(h, "restNum", addr)
    if status is not PopStatus.FOUND:
        return PopResult(status, [], rest)
    pop_time = _int(h, "popTime", addr)
    invisible = _int(h, "invisibleTime", addr)
    revive_qid = _int(h, "reviveQid", addr)
    try:
        msgs: list[PopMessage] = decode_messages(response.body_bytes(), broker_name, cls=PopMessage)  # type: ignore[assignment]
        starts = parse_start_offset_info(h.get("startOffsetInfo"))
        counts = parse_order_count_info(h.get("orderCountInfo")) if h.get("orderCountInfo") else None
        for m in msgs:
            stored_topic = m.topic
            # the two header fields needed here, without filling every lazy field of the message
            head = m._head
            fields = HEADER_STRUCTS[(head[39] >> 4) & 3].unpack_from(head)
            m.queue_id = queue_id = fields[3]
            m.reconsume_times = fields[14]
            ck = _raw_property(m.raw_properties, _POP_CK_MARK) if _POP_CK_MARK in m.raw_properties else None
            handle = receipt_handle(topic=stored_topic, queue_id=queue_id, queue_offset=m.queue_offset, pop_ck=ck,
                                    start_offsets=starts, pop_time=pop_time, invisible_time=invisible,
                                    revive_qid=revive_qid, broker_name=broker_name)
            m.receipt_handle = handle
            m.consumer_group = group
            m.topic = topic
            if counts is not None and not ck:
                flag = retry_flag(stored_topic)
                count = counts.get(f"{flag}@qo{queue_id}%{m.queue_offset}")
                if count is None:
                    count = counts.get(f"{flag}@{queue_id}")
                if count:
                    m.reconsume_times = count
    except ValueError as exc:  # PopWireError is a ValueError too
        raise BrokerError(response.code, f"undecodable POP answer: {exc}", addr, "POP_MESSAGE") from None
    return PopResult(status, msgs, rest, pop_time, invisible, revive_qid)


def pop_request(group: str, topic: str, queue_id: int, max_nums: int, invisible_ms: int, poll_ms: int, *,
                init_mode: int = INIT_MODE_MAX, expression_type: str = "TAG", expression: str = "*",
                order: bool = False, attempt_id: str | None = None, broker_name: str | None = None) -> RemotingCommand:
    header = PopMessageRequestHeader(
        consumer_group=group, topic=topic, queue_id=queue_id, max_msg_nums=max_nums, invisible_time=invisible_ms,
        poll_time=poll_ms, born_time=int(time.time() * 1000), init_mode=init_mode, exp_type=expression_type,
        exp=expression, order=order, attempt_id=attempt_id,
    ).to_ext_fields()
    if broker_name:
        header["bname"] = broker_name
    return RemotingCommand.request(RequestCode.POP_MESSAGE, header)


async def pop(instance: ClientInstance, addr: str, broker_name: str, group: str, topic: str, *, queue_id: int = -1,
              max_nums: int = 32, invisible_ms: int = 60_000, poll_ms: int = 15_000, init_mode: int = INIT_MODE_MAX,
              expression_type: str = "TAG", expression: str = "*", order: bool = False,
              attempt_id: str | None = None, timeout: float | None = None) -> PopResult:
    """POP_MESSAGE (200050) of ``group`` from ``topic`` (``queue_id`` -1: every readable queue of the broker)."""
    request = pop_request(group, topic, queue_id, max_nums, invisible_ms, poll_ms, init_mode=init_mode,
                          expression_type=expression_type, expression=expression, order=order, attempt_id=attempt_id,
                          broker_name=broker_name)
    if timeout is None:
        timeout = poll_ms / 1000 + max(instance.config.api_timeout, 5.0)
    response = await instance.remoting.invoke(addr, request, timeout)
    return pop_result(response, addr, broker_name, topic, group)


def _ack_header(group: str, msg: PopMessage) -> dict[str, str]:
    h = msg.receipt_handle
    ext = AckMessageRequestHeader(consumer_group=group, topic=h.real_topic(msg.topic, group), queue_id=h.queue_id,
                                  extra_info=h.encode(), offset=h.queue_offset).to_ext_fields()
    ext["bname"] = h.broker_name
    return ext


async def ack(instance: ClientInstance, addr: str, group: str, msg: PopMessage) -> None:
    """ACK_MESSAGE (200051): the message is consumed for good. BrokerError when the broker refuses."""
    request = RemotingCommand.request(RequestCode.ACK_MESSAGE, _ack_header(group, msg))
    await instance.invoke_broker(addr, request, name="ACK_MESSAGE")


async def batch_ack(instance: ClientInstance, addr: str, group: str, msgs: Sequence[PopMessage]) -> None:
    """BATCH_ACK_MESSAGE (200151): the messages (one broker's) acked in one request, grouped per checkpoint as 5.x's
    client does. A broker without the code (REQUEST_CODE_NOT_SUPPORTED) gets one ACK_MESSAGE each."""
    if len(msgs) == 1:
        await ack(instance, addr, group, msgs[0])
        return
    by_topic: dict[str, list[ReceiptHandle]] = {}
    for m in msgs:
        by_topic.setdefault(m.topic, []).append(m.receipt_handle)
    entries = [entry for topic, handles in by_topic.items() for entry in batch_acks(topic, group, handles)]
    body = encode_batch_ack_body(entries, msgs[0].receipt_handle.broker_name)
    request = RemotingCommand.request(RequestCode.BATCH_ACK_MESSAGE, {}, body)
    response = await instance.remoting.invoke(addr, request, instance.config.api_timeout)
    if response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
        for m in msgs:
            await ack(instance, addr, group, m)
        return
    if response.code != ResponseCode.SUCCESS:
        raise BrokerError(response.code, response.remark, addr, "BATCH_ACK_MESSAGE")


async def change_invisible_time(instance: ClientInstance, addr: str, group: str, msg: PopMessage, invisible_ms: int, *,
                                suspend: bool = False) -> ReceiptHandle:
    """CHANGE_MESSAGE_INVISIBLETIME (200053): the message stays invisible ``invisible_ms`` from now; its new handle
    (set on ``msg`` too), built as 5.x's client builds it from the answer."""
    h = msg.receipt_handle
    ext = ChangeInvisibleTimeRequestHeader(
        consumer_group=group, topic=h.real_topic(msg.topic, group), queue_id=h.queue_id, extra_info=h.encode(),
        offset=h.queue_offset, invisible_time=invisible_ms, suspend=suspend or None,  # type: ignore[arg-type]
    ).to_ext_fields()
    ext["bname"] = h.broker_name
    request = RemotingCommand.request(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, ext)
    response = await instance.invoke_broker(addr, request, name="CHANGE_MESSAGE_INVISIBLETIME")
    f = response.ext_fields
    try:
        pop_time, invisible, revive_qid = int(f["popTime"]), int(f["invisibleTime"]), int(f["reviveQid"])
    except (KeyError, TypeError, ValueError):
        raise BrokerError(response.code, f"CHANGE_MESSAGE_INVISIBLETIME answer without popTime/invisibleTime/reviveQid: "
                                         f"{dict(f)}", addr, "CHANGE_MESSAGE_INVISIBLETIME") from None
    if pop_time <= 0:  # a FIFO message already committed: nothing changed
        return h
    new = ReceiptHandle(h.queue_offset, pop_time, invisible, revive_qid, h.retry_flag, h.broker_name, h.queue_id,
                        h.queue_offset)
    msg.receipt_handle = new
    return new


async def forward_to_dlq(instance: ClientInstance, addr: str, group: str, msg: PopMessage) -> None:
    """CONSUMER_SEND_MSG_BACK with delayLevel -1, as 5.x's proxy forwards a message to the dead-letter queue
    (``ProducerProcessor.forwardMessageToDeadLetterQueue``): the stored record (its commit-log offset) goes to
    ``%DLQ%<group>``. The caller acks the message once this succeeded."""
    ext = {
        "offset": msg.commit_log_offset, "group": group, "delayLevel": -1, "originMsgId": msg.msg_id,
        "originTopic": msg.real_topic, "unitMode": "false", "maxReconsumeTimes": 0,
        "bname": msg.receipt_handle.broker_name,
    }
    request = RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, ext)
    await instance.invoke_broker(addr, request, name="CONSUMER_SEND_MSG_BACK")


@attrs.frozen
class GroupSettings:
    """What a consumer of the group needs from its subscription-group config (as the broker holds it)."""

    retry_max_times: int = DEFAULT_RETRY_MAX_TIMES
    fifo: bool = False
    #: False: the broker has no config of the group (it creates one at the first pop, with these defaults)
    exists: bool = False

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> GroupSettings:
        return cls(int(data.get("retryMaxTimes", DEFAULT_RETRY_MAX_TIMES)), bool(data.get("consumeMessageOrderly")),
                   True)


async def group_settings(instance: ClientInstance, addr: str, group: str) -> GroupSettings:
    """The group's config on one broker: GET_SUBSCRIPTIONGROUP_CONFIG (352, RocketMQ 5.x), or, from a broker that
    does not serve it, the whole table (GET_ALL_SUBSCRIPTIONGROUP_CONFIG, 201)."""
    timeout = instance.config.api_timeout
    request = RemotingCommand.request(GET_SUBSCRIPTIONGROUP_CONFIG, {"group": group})
    response = await instance.remoting.invoke(addr, request, timeout)
    if response.code == ResponseCode.SUCCESS and response.body:
        return GroupSettings.from_json(fastjson.loads(response.body_bytes()))
    if response.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST:
        return GroupSettings()
    request = RemotingCommand.request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
    response = await instance.invoke_broker(addr, request, timeout, name="GET_ALL_SUBSCRIPTIONGROUP_CONFIG")
    table = (fastjson.loads(response.body_bytes()) if response.body else {}).get("subscriptionGroupTable") or {}
    data = table.get(group)
    return GroupSettings.from_json(data) if isinstance(data, dict) else GroupSettings()


class _AckBatcher:
    """Acks of one broker, sent in the background: one request at a time, each with what gathered meanwhile (a
    BATCH_ACK_MESSAGE when there are several); a request waits up to ACK_LINGER for ACK_BATCH acks (each request
    costs both sides far more than an ack in it)."""

    def __init__(self, session: PopSession, broker_name: str) -> None:
        self.session = session
        self.broker_name = broker_name
        self.pending: list[PopMessage] = []
        self.waiters: list[trio.Event] = []
        self.full = trio.Event()
        self.running = False

    def add(self, msgs: Iterable[PopMessage]) -> None:
        self.pending.extend(msgs)
        if not self.running:
            self.running = True
            self.session.instance.spawn(self._run)
        elif len(self.pending) >= ACK_BATCH:
            self.full.set()

    async def flushed(self) -> None:
        """Wait until every ack added so far has been answered (or failed)."""
        if self.running or self.pending:
            done = trio.Event()
            self.waiters.append(done)
            with trio.move_on_after(self.session.instance.config.api_timeout * 2):
                await done.wait()

    async def _run(self) -> None:
        session = self.session
        try:
            while self.pending:
                if len(self.pending) < ACK_BATCH and not self.waiters:
                    with trio.move_on_after(ACK_LINGER):
                        await self.full.wait()
                self.full = trio.Event()
                msgs, self.pending = self.pending, []
                waiters, self.waiters = self.waiters, []
                try:
                    await session.send_acks(self.broker_name, msgs)
                except Exception as exc:  # noqa: BLE001 - an ack lost: the message comes back after its invisible time
                    log.warning("%s: ack of %d message(s) on %s failed: %s", session.group, len(msgs),
                                self.broker_name, exc)
                for w in waiters:
                    w.set()
        finally:
            self.running = False
            for w in self.waiters:
                w.set()
            self.waiters = []


class PopSession:
    """A consumer group's POP traffic over a client instance: what SimpleConsumer and the push consumer's POP mode
    share.

    * ``order``: None = the group's ``consumeMessageOrderly`` (read from the brokers, refreshed every 20 s),
      True/False = FIFO pops or not whatever the group says (a pyrmq broker also pops FIFO for a FIFO group);
    * ``max_reconsume_times``: None = the group's ``retryMaxTimes``; a message delivered more than that plus one
      times is forwarded to ``%DLQ%<group>`` and acked instead of being handed out (the gRPC proxy's rule), unless
      ``dead_letter`` is False;
    * ``retry_backoff``: seconds a failed message stays invisible before its next attempt, by attempt.
    """

    def __init__(self, consumer: ConsumerCore, *, order: bool | None = None, max_reconsume_times: int | None = None,
                 dead_letter: bool = True, retry_backoff: Sequence[float] = DEFAULT_RETRY_BACKOFF,
                 init_mode: int = INIT_MODE_MAX) -> None:
        if max_reconsume_times is not None and max_reconsume_times < 0:
            raise InvalidMessageError(f"max_reconsume_times {max_reconsume_times} is negative (None: the group's "
                                      "retryMaxTimes)")
        backoff = tuple(float(seconds(b, "a retry back-off step")) for b in retry_backoff)
        if not backoff:
            raise InvalidMessageError("retry_backoff names no delay")
        self.consumer = consumer
        self.order = order
        self.max_reconsume_times = max_reconsume_times
        self.dead_letter = dead_letter
        self.retry_backoff = backoff
        self.init_mode = init_mode
        #: broker name -> the group's settings there
        self.settings: dict[str, GroupSettings] = {}
        self._ackers: dict[str, _AckBatcher] = {}
        #: messages forwarded to the dead-letter queue / acked because their tag did not match
        self.dead_lettered = 0
        self.unmatched = 0

    @property
    def instance(self) -> ClientInstance:
        return self.consumer.instance

    @property
    def group(self) -> str:
        return self.consumer.group

    # -- group settings ----------------------------------------------------------------------------------------------

    def group_settings(self, broker_name: str) -> GroupSettings:
        found = self.settings.get(broker_name)
        if found is None and self.settings:
            found = next(iter(self.settings.values()))
        return found or GroupSettings()

    def fifo(self, broker_name: str) -> bool:
        return self.group_settings(broker_name).fifo if self.order is None else self.order

    def max_attempts(self, broker_name: str) -> int:
        """Deliveries a message gets (5.x's maxAttempts = retryMaxTimes + 1)."""
        times = self.max_reconsume_times
        return (self.group_settings(broker_name).retry_max_times if times is None else times) + 1

    def backoff(self, attempt: int) -> float:
        """Seconds before the next attempt after delivery ``attempt`` failed."""
        steps = self.retry_backoff
        return steps[min(max(attempt, 1), len(steps)) - 1]

    def broker_names(self) -> list[str]:
        names = {mq.broker_name for topic in self.consumer.subscriptions
                 for mq in self.consumer.topic_queues.get(topic, ())}
        return sorted(names)

    async def refresh_settings(self) -> None:
        """Read the group's settings from each broker of the subscribed topics (a failure keeps the old ones)."""
        for name in self.broker_names():
            addr = self.instance.broker_addr(name)
            if addr is None:
                continue
            try:
                self.settings[name] = await group_settings(self.instance, addr, self.group)
            except (RemotingError, BrokerError, ValueError, TypeError, AttributeError) as exc:
                log.debug("%s: reading the group's settings from %s failed: %s", self.group, addr, exc)

    async def settings_loop(self) -> None:
        while True:
            await trio.sleep(GROUP_SETTINGS_INTERVAL)
            await self.refresh_settings()

    # -- popping -------------------------------------------------------------------------------------------------

    async def broker_addr(self, broker_name: str, topic: str) -> str:
        addr = self.instance.broker_addr(broker_name)
        if addr is None:
            await self.instance.update_route(topic)
            addr = self.instance.broker_addr(broker_name)
        if addr is None:
            raise TopicNotFoundError(topic, f"broker {broker_name} has no master in the route")
        return addr

    async def pop(self, broker_name: str, sub: Subscription, max_nums: int, invisible: float, poll: float, *,
                  attempt_id: str | None = None, queue_id: int = -1) -> tuple[PopResult, list[PopMessage]]:
        """One POP_MESSAGE to the broker's master; the answer and the messages to hand out: a message whose tag the
        subscription does not take is acked, one delivered too often goes to the DLQ (both from a task)."""
        addr = await self.broker_addr(broker_name, sub.topic)
        order = self.fifo(broker_name)
        result = await pop(
            self.instance, addr, broker_name, self.group, sub.topic, queue_id=queue_id,
            max_nums=min(max_nums, MAX_POP_NUMS), invisible_ms=int(invisible * 1000), poll_ms=int(poll * 1000),
            init_mode=self.init_mode, expression_type=sub.expression_type, expression=sub.expression, order=order,
            attempt_id=attempt_id if order else None,
        )
        msgs = result.messages
        if not msgs:
            return result, msgs
        tags = sub.tags
        max_attempts = self.max_attempts(broker_name)
        shown: list[PopMessage] = []
        skip: list[PopMessage] = []
        dead: list[PopMessage] = []
        for m in msgs:
            if tags and raw_tags(m.raw_properties) not in tags:
                skip.append(m)
            elif self.dead_letter and m.reconsume_times >= max_attempts:
                dead.append(m)
            else:
                shown.append(m)
        if skip:
            self.unmatched += len(skip)
            self.acker(broker_name).add(skip)
        if dead:
            self.instance.spawn(self._dead_letter, broker_name, dead)
        return result, shown

    @staticmethod
    def new_attempt_id() -> str:
        return str(uuid.uuid4())

    # -- acks, changes, dead letters -----------------------------------------------------------------------------

    def acker(self, broker_name: str) -> _AckBatcher:
        acker = self._ackers.get(broker_name)
        if acker is None:
            acker = self._ackers[broker_name] = _AckBatcher(self, broker_name)
        return acker

    def ack_soon(self, msgs: Iterable[PopMessage]) -> None:
        """Ack in the background, batched per broker (a lost ack: the message comes back)."""
        by_broker: dict[str, list[PopMessage]] = {}
        for m in msgs:
            by_broker.setdefault(m.receipt_handle.broker_name, []).append(m)
        for name, group in by_broker.items():
            self.acker(name).add(group)

    async def acks_flushed(self) -> None:
        for acker in list(self._ackers.values()):
            await acker.flushed()

    async def send_acks(self, broker_name: str, msgs: Sequence[PopMessage]) -> None:
        """Ack ``msgs`` of one broker now: one ACK_MESSAGE, or one BATCH_ACK_MESSAGE for several."""
        addr = await self.broker_addr(broker_name, msgs[0].topic)
        await batch_ack(self.instance, addr, self.group, msgs)

    async def ack(self, msg: PopMessage) -> None:
        addr = await self.broker_addr(msg.receipt_handle.broker_name, msg.topic)
        await ack(self.instance, addr, self.group, msg)

    async def change_invisible(self, msg: PopMessage, duration: float, *, suspend: bool = False) -> ReceiptHandle:
        addr = await self.broker_addr(msg.receipt_handle.broker_name, msg.topic)
        return await change_invisible_time(self.instance, addr, self.group, msg, int(duration * 1000), suspend=suspend)

    async def nack(self, msg: PopMessage) -> None:
        """A failed delivery (the push consumer): back after the back-off of its attempt, or to the DLQ once it had
        its last attempt (the gRPC push consumer's rule); a failure is only logged (the message then comes back
        when its invisible time ends)."""
        try:
            if self.dead_letter and msg.delivery_attempt >= self.max_attempts(msg.receipt_handle.broker_name):
                await self._dead_letter(msg.receipt_handle.broker_name, [msg])
            else:
                await self.change_invisible(msg, self.backoff(msg.delivery_attempt))
        except (RemotingError, BrokerError, TopicNotFoundError) as exc:
            log.warning("%s: giving %s back failed: %s", self.group, msg.msg_id, exc)

    async def release(self, msgs: Sequence[PopMessage]) -> None:
        """Messages popped but never consumed (shutdown): visible again at once, their attempt not counted."""
        for m in msgs:
            try:
                await self.change_invisible(m, 0, suspend=True)
            except (RemotingError, BrokerError, TopicNotFoundError) as exc:
                log.debug("%s: releasing %s failed: %s", self.group, m.msg_id, exc)

    async def _dead_letter(self, broker_name: str, msgs: list[PopMessage]) -> None:
        for m in msgs:
            try:
                addr = await self.broker_addr(broker_name, m.topic)
                await forward_to_dlq(self.instance, addr, self.group, m)
                await ack(self.instance, addr, self.group, m)
                self.dead_lettered += 1
                log.info("%s: %s forwarded to %%DLQ%%%s after %d deliveries", self.group, m.msg_id, self.group,
                         m.reconsume_times)
            except (RemotingError, BrokerError, TopicNotFoundError) as exc:
                log.warning("%s: forwarding %s to the dead-letter queue failed (it comes back later): %s", self.group,
                            m.msg_id, exc)


def init_mode_of(consume_from: Any) -> int:
    """ConsumeInitMode of a consumer's ``consume_from``: FIRST_OFFSET → MIN, anything else → MAX (5.x's push
    consumer; the gRPC proxy always pops with MAX)."""
    from pyrmq.client.consumer import ConsumeFrom

    return INIT_MODE_MIN if consume_from is ConsumeFrom.FIRST_OFFSET else INIT_MODE_MAX
