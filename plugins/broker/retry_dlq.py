"""Retry and dead-letter: CONSUMER_SEND_MSG_BACK (36) and the dead-letter re-routing put interceptor (spec 7.6, 3.8).

CONSUMER_SEND_MSG_BACK follows RocketMQ 4.9's ``asyncConsumerSendMsgBack``.

A consumer that failed a message sends back its commit-log offset. Steps (spec 7.6):

1. the group's config (auto-created when allowed) must exist (SUBSCRIPTION_GROUP_NOT_EXIST), the broker must be
   writable (NO_PERMISSION); a group with ``retryQueueNums <= 0`` answers SUCCESS and drops the message;
2. ``%RETRY%<group>`` is created (``retryQueueNums`` queues, perm 6) and a queue picked at random;
3. the record at ``offset`` is read (missing: SYSTEM_ERROR); ``RETRY_TOPIC`` is set to its topic unless present;
4. the maximum is the header's ``maxReconsumeTimes`` (request version >= 121) or the group's ``retryMaxTimes`` (16);
5. ``DELAY`` = the header's level if > 0, else ``3 + reconsumeTimes``;
6. a new record for ``%RETRY%<group>``: same body, flag, sysFlag, born time/host, store host, properties (+ ``DELAY``,
   + ``ORIGIN_MESSAGE_ID`` kept or the record's offset msgId), ``reconsumeTimes + 1``; it goes through the broker's
   put interceptors and is appended without waiting for the flush.

The dead-letter rule is the :class:`DeadLetterInterceptor`, for a send-back and for the client fallback (a plain
send to ``%RETRY%<group>``) alike: at ``reconsumeTimes >= max`` (or ``delayLevel < 0`` on a send-back) the record
goes to ``%DLQ%<group>`` queue 0 (1 queue, perm 6), undelayed. The delay-levels interceptor (after it) parks a
retry under SCHEDULE_TOPIC_XXXX until it is due back on ``%RETRY%<group>``.
"""

from __future__ import annotations

import logging
import random
from typing import Any

import attrs

from pyrmq.kernel.hookspecs import hookimpl
from pyrmq.kernel.types import ORDER_REROUTE, Processor, PutChain, PutContext, PutInterceptor, PutKind, Rejection
from pyrmq.kernel.kernel import Kernel
from pyrmq.plugins.broker.topics import (
    DLQ_GROUP_TOPIC_PREFIX,
    Permission,
    RETRY_GROUP_TOPIC_PREFIX,
    is_writeable,
)
from pyrmq.remoting.codes import MQVersion, RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.errors import HeaderError
from pyrmq.remoting.headers import ConsumerSendMsgBackRequestHeader
from pyrmq.remoting.vocabulary import MessageProperty
from pyrmq.store.results import PutMessageStatus

log = logging.getLogger("pyrmq.retry_dlq")

PROPERTY_DELAY = MessageProperty.DELAY_TIME_LEVEL
PROPERTY_RETRY_TOPIC = MessageProperty.RETRY_TOPIC
PROPERTY_ORIGIN_MESSAGE_ID = MessageProperty.ORIGIN_MESSAGE_ID
DLQ_NUMS_PER_GROUP = 1


def retry_topic(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_GROUP_TOPIC_PREFIX + group


class DeadLetterInterceptor:
    """Re-routes a message for ``%RETRY%<group>`` that was consumed the maximum number of times to ``%DLQ%<group>``.

    A put interceptor (order 200: after refusals, before the schedulers, so a dead letter is never delayed). The
    count and maximum come from the put context (the send header; for a send-back the stored message and the
    consumer's header), the default maximum from the group's ``retryMaxTimes`` (16).
    """

    name = "dead-letter"
    order = ORDER_REROUTE
    trigger_topic_prefixes = (RETRY_GROUP_TOPIC_PREFIX,)

    def __init__(self, topics: Any, groups: Any) -> None:
        self.topics = topics
        self.groups = groups
        self.rng = random.Random()

    @hookimpl(trylast=True)
    def pyrmq_register_put_interceptors(self) -> list[PutInterceptor]:
        return [self]

    def intercept(self, record: Any, context: PutContext) -> Any:
        topic = record.topic
        if not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return record
        group_name = topic[len(RETRY_GROUP_TOPIC_PREFIX) :]
        group = self.groups.find_or_create(group_name)
        if group is None:
            return Rejection(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {group_name}")
        max_times = group.retry_max_times if context.max_reconsume_times is None else context.max_reconsume_times
        if not context.dead_letter and context.reconsume_times < max_times:
            return record
        dlq = dlq_topic(group_name)
        config = self.topics.create_system_topic(dlq, DLQ_NUMS_PER_GROUP, Permission.READ | Permission.WRITE)
        # RocketMQ checks the DLQ's permission on a send-back only (handleRetryAndDLQ does not)
        if context.kind is PutKind.SEND_BACK and not is_writeable(config.perm):
            return Rejection(ResponseCode.NO_PERMISSION, f"the topic[{dlq}] sending message is forbidden")
        properties = dict(record.properties)
        properties.pop(PROPERTY_DELAY, None)
        log.info("a message of group %s goes to %s after %d reconsumes", group_name, dlq, context.reconsume_times)
        return attrs.evolve(
            record, topic=dlq, queue_id=self.rng.randrange(DLQ_NUMS_PER_GROUP), properties=properties,
            properties_bytes=None,
        )


class SendBackProcessor:
    """CONSUMER_SEND_MSG_BACK over the broker's store, topic and group managers and its put interceptors."""

    def __init__(
        self, *, store: Any, topics: Any, groups: Any, settings: Any, put_chain: PutChain, stats: Any = None
    ) -> None:
        self.store = store
        self.stats = stats  # plugins/broker/stats.py: SNDBCK_PUT_NUMS and the dead-letter topic's puts
        self.topics = topics
        self.groups = groups
        self.settings = settings
        self.put_chain = put_chain
        self.rng = random.Random()

    @hookimpl(trylast=True)
    def pyrmq_register_processors(self, role: str) -> dict[int, Processor] | None:
        return {RequestCode.CONSUMER_SEND_MSG_BACK: self.send_back} if role == "broker" else None

    async def send_back(self, connection: Any, request: RemotingCommand) -> RemotingCommand:
        code, remark = self.handle(request, connection.remote_address)
        return request.make_response(code, remark)

    def handle(self, request: RemotingCommand, born_host: tuple[str, int] = ("127.0.0.1", 0)) -> tuple[int, str | None]:
        """The response (code, remark) of one CONSUMER_SEND_MSG_BACK request."""
        try:
            header = ConsumerSendMsgBackRequestHeader.from_ext_fields(request.ext_fields)
        except HeaderError as exc:
            return ResponseCode.SYSTEM_ERROR, f"bad CONSUMER_SEND_MSG_BACK header: {exc}"
        s = self.settings
        # 1
        group = self.groups.find_or_create(header.group)
        if group is None:
            return ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {header.group}"
        if not is_writeable(s.brokerPermission):
            return ResponseCode.NO_PERMISSION, f"the broker[{s.brokerIP1}] sending message is forbidden"
        if group.retry_queue_nums <= 0:
            return ResponseCode.SUCCESS, None
        # 2
        topic = retry_topic(header.group)
        queue_id = self.rng.randrange(group.retry_queue_nums)
        config = self.topics.create_system_topic(topic, group.retry_queue_nums, Permission.READ | Permission.WRITE)
        if not is_writeable(config.perm):
            return ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden"
        # 3
        msg = self.store.look_message_by_offset(header.offset)
        if msg is None:
            return ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {header.offset}"
        properties = msg.properties
        properties.setdefault(PROPERTY_RETRY_TOPIC, msg.topic)
        # 4
        max_times = None
        if request.version >= MQVersion.V3_4_9 and header.max_reconsume_times is not None:
            max_times = header.max_reconsume_times
        # 5 (the dead-letter interceptor removes DELAY again when the message is dead)
        delay_level = header.delay_level
        if delay_level >= 0:
            properties[PROPERTY_DELAY] = str(delay_level if delay_level > 0 else 3 + msg.reconsume_times)
        # 6
        properties[PROPERTY_ORIGIN_MESSAGE_ID] = properties.get(PROPERTY_ORIGIN_MESSAGE_ID) or msg.msg_id
        # a new message: the reconsume count goes up; no prepared-transaction offset is carried (spec 7.6 step 6)
        record = msg.to_record(
            topic, queue_id, properties, reconsume_times=msg.reconsume_times + 1, prepared_transaction_offset=0
        )
        if self.put_chain.applies(record):
            context = PutContext(
                PutKind.SEND_BACK, request, born_host, msg.reconsume_times, max_times, dead_letter=delay_level < 0
            )
            record = self.put_chain(record, context)
            if record.__class__ is Rejection:
                return record.code, record.remark
        result = self.store.put_message(record)
        if result.status is PutMessageStatus.PUT_OK:
            if self.stats is not None and result.append is not None:
                self.stats.send_back(properties[PROPERTY_RETRY_TOPIC], header.group)
                # the retry topic, or the dead-letter topic the interceptor chose (not the delay levels' system topic)
                self.stats.put(record.topic if record.topic.startswith("%DLQ%") else topic, 1, result.append.wrote_bytes)
            return ResponseCode.SUCCESS, None
        return ResponseCode.SYSTEM_ERROR, result.status.name


# -- hooks -------------------------------------------------------------------------------------------------------


@hookimpl(trylast=True)
def pyrmq_configure(kernel: Kernel) -> None:
    from pyrmq.plugins.broker.core import register_feature

    register_feature(kernel, "broker.dead_letter", lambda ctx: DeadLetterInterceptor(ctx.topics, ctx.groups))
    register_feature(kernel, "broker.send_back", lambda ctx: SendBackProcessor(
        store=ctx.store, topics=ctx.topics, groups=ctx.groups, settings=ctx.settings, put_chain=ctx.put_chain,
        stats=ctx.stats))
