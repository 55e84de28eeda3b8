"""Retry and dead-letter: CONSUMER_SEND_MSG_BACK (36) as RocketMQ 4.9's ``asyncConsumerSendMsgBack`` (spec 7.6, 3.8).

A consumer that failed a message sends back its commit-log offset. Steps (spec 7.6):

1. the group's config (auto-created when allowed) must exist (SUBSCRIPTION_GROUP_NOT_EXIST), the broker must be
   writable (NO_PERMISSION); a group with ``retryQueueNums <= 0`` answers SUCCESS and drops the message;
2. ``%RETRY%<group>`` is created (``retryQueueNums`` queues, perm 6) and a queue picked at random;
3. the record at ``offset`` is read (missing: SYSTEM_ERROR); ``RETRY_TOPIC`` is set to its topic unless present;
4. the maximum is the header's ``maxReconsumeTimes`` (request version >= 121) or the group's ``retryMaxTimes`` (16);
5. at ``reconsumeTimes >= max`` or ``delayLevel < 0`` the target is ``%DLQ%<group>`` queue 0 (1 queue, perm 6),
   undelayed; otherwise ``DELAY`` = the header's level if > 0, else ``3 + reconsumeTimes``;
6. a new record: same body, flag, sysFlag, born time/host, store host, properties (+ ``DELAY``, + ``ORIGIN_MESSAGE_ID``
   kept or the record's offset msgId), ``reconsumeTimes + 1``; appended without waiting for the flush. A delayed one
   goes through the ``DELAY`` scheduler (SCHEDULE_TOPIC_XXXX, then ``%RETRY%<group>``).

The client fallback (a plain send to ``%RETRY%<group>``) is handled by the send plugin (``retry_and_dlq``).
"""

from __future__ import annotations

import logging
import random
from typing import Any

from pyrmq.kernel.hookspecs import hookimpl
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


class SendBackProcessor:
    """CONSUMER_SEND_MSG_BACK over the broker's store, topic and group managers and its delay schedulers."""

    def __init__(self, *, store: Any, topics: Any, groups: Any, settings: Any, delay_schedulers: list[Any]) -> None:
        self.store = store
        self.topics = topics
        self.groups = groups
        self.settings = settings
        self.delay_schedulers = delay_schedulers
        self.rng = random.Random()

    def _delay_scheduler(self) -> Any | None:
        for scheduler in self.delay_schedulers:
            if PROPERTY_DELAY in scheduler.property_keys:
                return scheduler
        return None

    async def send_back(self, connection: Any, request: RemotingCommand) -> RemotingCommand:
        code, remark = self.handle(request)
        return request.make_response(code, remark)

    def handle(self, request: RemotingCommand) -> tuple[int, str | None]:
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
        max_times = group.retry_max_times
        if request.version >= MQVersion.V3_4_9 and header.max_reconsume_times is not None:
            max_times = header.max_reconsume_times
        # 5
        delay_level = header.delay_level
        if msg.reconsume_times >= max_times or delay_level < 0:
            topic = dlq_topic(header.group)
            queue_id = self.rng.randrange(DLQ_NUMS_PER_GROUP)
            config = self.topics.create_system_topic(topic, DLQ_NUMS_PER_GROUP, Permission.READ | Permission.WRITE)
            if not is_writeable(config.perm):
                return ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden"
            properties.pop(PROPERTY_DELAY, None)
            log.info("message %s of group %s goes to %s after %d reconsumes", msg.msg_id, header.group, topic,
                     msg.reconsume_times)
        else:
            if delay_level == 0:
                delay_level = 3 + msg.reconsume_times
            properties[PROPERTY_DELAY] = str(delay_level)
        # 6
        properties[PROPERTY_ORIGIN_MESSAGE_ID] = properties.get(PROPERTY_ORIGIN_MESSAGE_ID) or msg.msg_id
        # a new message: the reconsume count goes up; no prepared-transaction offset is carried (spec 7.6 step 6)
        record = msg.to_record(
            topic, queue_id, properties, reconsume_times=msg.reconsume_times + 1, prepared_transaction_offset=0
        )
        if PROPERTY_DELAY in properties:
            scheduler = self._delay_scheduler()
            if scheduler is not None:
                try:
                    record = scheduler.redirect(record) or record
                except ValueError as exc:
                    return ResponseCode.MESSAGE_ILLEGAL, str(exc)
        result = self.store.put_message(record)
        if result.status is PutMessageStatus.PUT_OK:
            return ResponseCode.SUCCESS, None
        return ResponseCode.SYSTEM_ERROR, result.status.name


# -- hooks -------------------------------------------------------------------------------------------------------


@hookimpl(trylast=True)
def pyrmq_register_processors(kernel: Any, role: str) -> dict[int, Any] | None:
    from pyrmq.plugins.broker.core import BROKER

    ctx = kernel.state.find(BROKER)
    if role != "broker" or ctx is None:
        return None
    processor = SendBackProcessor(
        store=ctx.store, topics=ctx.topics, groups=ctx.groups, settings=ctx.settings,
        delay_schedulers=ctx.delay_schedulers,
    )
    return {RequestCode.CONSUMER_SEND_MSG_BACK: processor.send_back}
