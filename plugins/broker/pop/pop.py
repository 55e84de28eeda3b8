"""POP_MESSAGE (200050) and PEEK_MESSAGE (200052): 5.5.0's ``PopMessageProcessor`` and ``PeekMessageProcessor``.

A pop reads the group's queues from their pop offsets (:mod:`.offsets`) through the subscription's filter and hands
the messages out: each queue read gives one checkpoint (a ``ck`` record of the revive topic, written before the
answer; :mod:`.ledger` keeps it open until its messages are acked or revived), or for a FIFO pop the queue's new
order state (:mod:`.fifo`). Checks, in 5.5.0's order, each answered with its code and remark:

1. ``now - bornTime - pollTime > 500`` → POLLING_TIMEOUT; 2. broker not readable → NO_PERMISSION;
3. ``maxMsgNums > 32`` → INVALID_PARAMETER; 5. unknown topic → TOPIC_NOT_EXIST; 6. topic not readable →
NO_PERMISSION; 7. ``queueId >= readQueueNums`` → INVALID_PARAMETER; 8. unknown group (no auto-creation) →
SUBSCRIPTION_GROUP_NOT_EXIST, consume disabled → NO_PERMISSION; 9. an expression that does not compile →
SUBSCRIPTION_PARSE_FAILED. (5.x's check 4, ``timerWheelEnable``, has no counterpart: POP does not use the timer.)
pyrmq adds: a negative ``invisibleTime`` → INVALID_PARAMETER; a group whose retry topic name the store could not
take (over 127 bytes: :meth:`PopMessageProcessor.retry_topic_problem`) → INVALID_PARAMETER, FIFO pops excepted.

Reading order: with probability ``popFromRetryProbability`` % (never for FIFO) the group's retry topic first; then
the topic (the queue asked for, or every readable queue from a random one); then, when the answer is not full, the
retry topic. A queue another pop holds is never waited for: appends and reads happen on one event loop, so a pop's
read and its checkpoint are one step and eight pops of one queue each get their own messages. Messages of the topic
go out as stored; messages of a retry topic under the topic popped, with ``POP_CK`` (their handle) added.
"""

from __future__ import annotations

import logging
import random
from typing import TYPE_CHECKING, Any

import attrs
import trio

from pyrmq.kernel.errors import FilterExpressionError
from pyrmq.plugins.broker.pop.journal import now_ms
from pyrmq.plugins.broker.pop.polling import FULL, Parked
from pyrmq.plugins.broker.pop.records import CheckPoint, QueueKey
from pyrmq.plugins.broker.topics import MAX_TOPIC_LENGTH, is_readable
from pyrmq.remoting.codes import ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.errors import HeaderError
from pyrmq.remoting.message import decode_message, encode_properties, encode_record
from pyrmq.remoting.pop import (
    MAX_POP_NUMS,
    POP_ORDER_REVIVE_QUEUE,
    PROPERTY_POP_CK,
    PeekMessageRequestHeader,
    PopMessageRequestHeader,
    PopMessageResponseHeader,
    build_extra_info,
    join_info,
    msg_offset_entry,
    order_count_entry,
    order_count_offset_entry,
    pop_retry_topic,
    pop_retry_topic_v1,
    start_offset_entry,
)
from pyrmq.store.results import GetMessageStatus, PutMessageStatus

if TYPE_CHECKING:  # pragma: no cover - types only
    from pyrmq.plugins.broker.groups import SubscriptionGroupConfig
    from pyrmq.plugins.broker.pop.plugin import ErrorAnswer, PopService
    from pyrmq.plugins.broker.topics import TopicConfig

log = logging.getLogger("pyrmq.pop")

#: 5.x's FAQ hint after "apply first please!"
APPLY_TOPIC_URL = "See https://rocketmq.apache.org/docs/bestPractice/06FAQ for further details."
#: a request whose born time plus poll time is this far in the past is answered POLLING_TIMEOUT at once
BORN_TIME_SLACK_MS = 500

_RETRY_READ_STATUSES = (GetMessageStatus.OFFSET_TOO_SMALL, GetMessageStatus.OFFSET_OVERFLOW_BADLY,
                        GetMessageStatus.OFFSET_FOUND_NULL)
_MOVED_ONLY = (GetMessageStatus.NO_MATCHED_MESSAGE, GetMessageStatus.OFFSET_FOUND_NULL,
               GetMessageStatus.MESSAGE_WAS_REMOVING, GetMessageStatus.NO_MATCHED_LOGIC_QUEUE)


def peer(connection: Any) -> str:
    """A client's address as Java prints a channel's (``/127.0.0.1:50212``)."""
    address = getattr(connection, "remote_address", None)
    return f"/{address[0]}:{address[1]}" if address else "unknown"


def pop_error(request: RemotingCommand, code: int, remark: str | None) -> RemotingCommand:
    """An answer that is not messages: 5.x's still carries the response header, its numbers at 0."""
    return request.make_response(code, remark, {"popTime": "0", "invisibleTime": "0", "reviveQid": "0", "restNum": "0"})


@attrs.define
class Answer:
    """What one pop gathered: the message buffers and the info strings, and what must happen once it is durable."""

    pop_time: int
    revive_qid: int
    fifo: bool
    buffers: list[Any] = attrs.field(factory=list)
    count: int = 0
    rest: int = 0
    start_info: list[str] = attrs.field(factory=list)
    msg_info: list[str] = attrs.field(factory=list)
    order_info: list[str] = attrs.field(factory=list)
    #: commit-log end of the last record written for it (answers wait until it is durable, as sends do)
    end_offset: int = 0
    #: consumer offsets to commit once durable
    commits: list[tuple[QueueKey, int]] = attrs.field(factory=list)


class PopMessageProcessor:
    """POP_MESSAGE and PEEK_MESSAGE over the POP service's parts."""

    def __init__(self, pop: PopService) -> None:
        self.pop = pop
        self.ctx = pop.ctx
        self.rng = random.Random()
        #: 5.x's ``ckMessageNumber``: the revive queue of each request's checkpoints, round robin (even empty pops)
        self.counter = 0
        #: (topic, group) -> why its pops are refused (:meth:`retry_topic_problem`), or None
        self._retry_problems: dict[tuple[str, str], str | None] = {}

    # -- checks shared by POP, PEEK, NOTIFICATION, POLLING_INFO ---------------------------------------------------

    def check_topic_and_group(
        self, connection: Any, request: RemotingCommand, topic_name: str, queue_id: int, group_name: str, *,
        error: ErrorAnswer | None = None,
    ) -> tuple[TopicConfig, SubscriptionGroupConfig] | RemotingCommand:
        """Checks 5-8 (topic, queue, group), each answered as 5.5.0 does."""
        make: ErrorAnswer = error or pop_error
        ctx = self.ctx
        topic = ctx.topics.get(topic_name)
        if topic is None:
            return make(request, ResponseCode.TOPIC_NOT_EXIST,
                        f"topic[{topic_name}] not exist, apply first please! {APPLY_TOPIC_URL}")
        if not is_readable(topic.perm):
            return make(request, ResponseCode.NO_PERMISSION, f"the topic[{topic_name}] peeking message is forbidden")
        if queue_id >= topic.read_queue_nums:
            return make(request, ResponseCode.INVALID_PARAMETER,
                        f"queueId[{queue_id}] is illegal, topic:[{topic_name}] topicConfig.readQueueNums:"
                        f"[{topic.read_queue_nums}] consumer:[{peer(connection)}]")
        group = ctx.groups.find_or_create(group_name)
        if group is None:
            return make(request, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                        f"subscription group [{group_name}] does not exist, {APPLY_TOPIC_URL}")
        if not group.consume_enable:
            return make(request, ResponseCode.NO_PERMISSION, f"subscription group no permission, {group_name}")
        return topic, group

    def compile(self, request: RemotingCommand, exp_type: str | None, exp: str | None, *,
                error: ErrorAnswer | None = None) -> Any:
        """The subscription's filter (None for every message), or the SUBSCRIPTION_PARSE_FAILED answer. POP takes
        SQL92 without ``enablePropertyFilter``, as 5.x does."""
        expression = (exp or "").strip() or "*"
        kind = (exp_type or "TAG").upper() or "TAG"
        if kind == "TAG" and expression == "*":
            return None
        try:
            return self.ctx.compile_filter(kind, expression)
        except FilterExpressionError as exc:
            log.info("POP subscription %s %r does not compile: %s", kind, expression, exc)
            return (error or pop_error)(request, ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                                        "parse the consumer's subscription failed")

    def retry_topic_problem(self, topic: str, group: str) -> str | None:
        """Why a (non-FIFO) pop of ``topic`` by ``group`` must be refused, or None: an unacked message comes back
        through the group's retry topic ``%RETRY%<group>_<topic>``, which the store must be able to take. pyrmq's
        commit log writes RocketMQ's message format V1, whose topic is at most 127 bytes; 5.5.0 writes a V2 record for
        a longer retry topic (up to 255 bytes; beyond, its revive fails forever). Refused here, before any message is
        handed out that could never come back."""
        key = (topic, group)
        cache = self._retry_problems
        if key in cache:
            return cache[key]
        name = pop_retry_topic(topic, group, self.pop.settings.enableRetryTopicV2)
        size = len(name.encode())
        problem = None if size <= MAX_TOPIC_LENGTH else (
            f"the retry topic {name} of consumer group {group} and topic {topic} would be {size} bytes, longer than "
            f"{MAX_TOPIC_LENGTH}: an unacked message could never come back; use a shorter group or topic name "
            f"(group + topic at most {MAX_TOPIC_LENGTH - len('%RETRY%_')} bytes)")
        if len(cache) > 4096:
            cache.clear()
        cache[key] = problem
        return problem

    # -- POP_MESSAGE ---------------------------------------------------------------------------------------------

    async def __call__(self, connection: Any, request: RemotingCommand) -> RemotingCommand | None:
        try:
            h = PopMessageRequestHeader.from_ext_fields(request.ext_fields)
        except HeaderError as exc:
            return pop_error(request, ResponseCode.SYSTEM_ERROR, str(exc))
        pop = self.pop
        refusal = pop.refuse_unless_master(request, pop_error)
        if refusal is not None:
            return refusal
        ctx = self.ctx
        settings = ctx.settings
        now = now_ms()
        born = h.born_time or now
        if now - born - h.poll_time > BORN_TIME_SLACK_MS:
            return pop_error(request, ResponseCode.POLLING_TIMEOUT,
                             f"the broker[{settings.brokerIP1}] pop message is timeout too much")
        if not is_readable(settings.brokerPermission):
            return pop_error(request, ResponseCode.NO_PERMISSION, f"the broker[{settings.brokerIP1}] pop message is forbidden")
        if h.max_msg_nums > MAX_POP_NUMS:
            return pop_error(request, ResponseCode.INVALID_PARAMETER,
                             f"the broker[{settings.brokerIP1}] pop message's num is greater than {MAX_POP_NUMS}")
        checked = self.check_topic_and_group(connection, request, h.topic, h.queue_id, h.consumer_group)
        if isinstance(checked, RemotingCommand):
            return checked
        topic, group = checked
        message_filter = self.compile(request, h.exp_type, h.exp)
        if isinstance(message_filter, RemotingCommand):
            return message_filter
        if h.invisible_time < 0:
            return pop_error(request, ResponseCode.INVALID_PARAMETER,
                             f"invisibleTime {h.invisible_time} is negative: the ms a popped message stays invisible")
        fifo = h.order or group.consume_message_orderly
        if not fifo:
            problem = self.retry_topic_problem(h.topic, h.consumer_group)
            if problem is not None:
                return pop_error(request, ResponseCode.INVALID_PARAMETER, problem)
        pop.ensure_ready()
        answer = self.execute(h, topic, message_filter, fifo)
        if answer.count:
            return self._found(connection, request, h, answer)
        if h.poll_time > 0:
            parked = Parked(connection, request, h, message_filter, trio.current_time() + h.poll_time / 1000,
                            h.topic, h.consumer_group, h.queue_id)
            if pop.polling.park(parked) == FULL:
                return self._empty(request, h, answer, ResponseCode.POLLING_FULL)
            pop.note_held(parked, topic)
            return None
        return self._empty(request, h, answer, ResponseCode.POLLING_TIMEOUT)

    async def run_parked(self, parked: Parked, final: bool) -> bool:
        """A parked pop woken by an arrival or its deadline: run it again; False when it should wait on."""
        h = parked.header
        request = parked.request
        pop = self.pop
        if not pop.is_master():
            await parked.connection.send_response(pop.not_master(request, pop_error))
            return True
        topic = self.ctx.topics.get(h.topic)
        group = self.ctx.groups.table.get(h.consumer_group)
        if topic is None or group is None:
            checked = self.check_topic_and_group(parked.connection, request, h.topic, h.queue_id, h.consumer_group)
            if isinstance(checked, RemotingCommand):
                await parked.connection.send_response(checked)
                return True
            topic, group = checked
        pop.ensure_ready()
        answer = self.execute(h, topic, parked.message_filter, h.order or group.consume_message_orderly)
        if answer.count:
            response = self._found(parked.connection, request, h, answer)
            if response is not None:
                await parked.connection.send_response(response)
            return True
        if not final:
            pop.note_held(parked, topic)
            return False
        await parked.connection.send_response(self._empty(request, h, answer, ResponseCode.POLLING_TIMEOUT))
        return True

    def _header(self, h: PopMessageRequestHeader, answer: Answer) -> dict[str, str]:
        return PopMessageResponseHeader(
            pop_time=answer.pop_time, invisible_time=h.invisible_time, revive_qid=answer.revive_qid,
            rest_num=answer.rest, start_offset_info=join_info(answer.start_info),
            msg_offset_info=join_info(answer.msg_info),
            order_count_info=join_info(answer.order_info) if answer.fifo else None,
        ).to_ext_fields()

    def _empty(self, request: RemotingCommand, h: PopMessageRequestHeader, answer: Answer, code: int) -> RemotingCommand:
        self.pop.apply_commits(answer.commits)
        return request.make_response(code, GetMessageStatus.NO_MESSAGE_IN_QUEUE.value, self._header(h, answer))

    def _found(self, connection: Any, request: RemotingCommand, h: PopMessageRequestHeader,
               answer: Answer) -> RemotingCommand | None:
        pop = self.pop
        if answer.rest > 0:
            pop.polling.notify(h.topic, h.consumer_group, h.queue_id)  # another waiting pop of the key takes the rest
        response = request.make_response(ResponseCode.SUCCESS, GetMessageStatus.FOUND.value, self._header(h, answer),
                                         answer.buffers)
        if pop.journal.waits and answer.end_offset:
            connection.start_soon(pop.answer_when_durable, connection, response, answer.end_offset, answer.commits)
            return None
        pop.apply_commits(answer.commits)
        return response

    def execute(self, h: PopMessageRequestHeader, topic: TopicConfig, message_filter: Any, fifo: bool) -> Answer:
        """One pop: read the queues in 5.x's order, take checkpoints (or FIFO states); synchronous."""
        pop = self.pop
        settings = pop.settings
        if fifo:
            revive_qid = POP_ORDER_REVIVE_QUEUE
        else:
            revive_qid = self.counter % settings.reviveQueueNum
            self.counter += 1
        answer = Answer(now_ms(), revive_qid, fifo)
        rand = self.rng.randrange(100)
        need_retry = rand < settings.popFromRetryProbability and not fifo
        retry_topic = pop_retry_topic(h.topic, h.consumer_group, settings.enableRetryTopicV2)
        if settings.enableRetryTopicV2 and settings.retrieveMessageFromPopRetryTopicV1 and rand % 2 == 0:
            retry_topic = pop_retry_topic_v1(h.topic, h.consumer_group)
        if need_retry:
            self._read_topic(retry_topic, h, None, answer, rand, retry=True)
        if h.queue_id < 0:
            self._read_topic(h.topic, h, message_filter, answer, rand, retry=False)
        else:
            self._read_queue(h.topic, h.queue_id, h, message_filter, answer, retry=False)
        if not need_retry and not fifo and answer.count < h.max_msg_nums:
            self._read_topic(retry_topic, h, None, answer, rand, retry=True)
        return answer

    def _read_topic(self, topic_name: str, h: PopMessageRequestHeader, message_filter: Any, answer: Answer, rand: int,
                    *, retry: bool) -> None:
        config = self.ctx.topics.get(topic_name)
        if config is None:
            return
        n = config.read_queue_nums
        for i in range(n):
            self._read_queue(topic_name, (rand + i) % n, h, message_filter, answer, retry=retry)

    def _read_queue(self, topic: str, queue_id: int, h: PopMessageRequestHeader, message_filter: Any, answer: Answer,
                    *, retry: bool) -> None:
        pop = self.pop
        ctx = self.ctx
        store = ctx.store
        group = h.consumer_group
        key = (topic, group, queue_id)
        offset = pop.offsets.get(key, h.init_mode)
        if answer.fifo:
            if pop.book.blocked(key, h.attempt_id, answer.pop_time):
                return  # 5.x adds nothing to restNum for a blocked FIFO queue
        elif pop.settings.enablePopMessageThreshold and \
                pop.ledger.inflight.get(key, 0) > pop.settings.popInflightMessageThreshold:
            answer.rest += max(store.get_max_offset_in_queue(topic, queue_id) - offset, 0)
            return
        if answer.count >= h.max_msg_nums:
            answer.rest += max(store.get_max_offset_in_queue(topic, queue_id) - offset, 0)
            return
        result = store.get_message(group, topic, queue_id, offset, h.max_msg_nums - answer.count, message_filter)
        if result.status in _RETRY_READ_STATUSES:
            # the offset is not (or no longer) in the queue: start again where the store says
            offset = result.next_begin_offset
            if answer.fifo:
                pop.offsets.set(key, offset)
            else:
                pop.offsets.advance(key, offset)
                answer.commits.append((key, offset))
            result = store.get_message(group, topic, queue_id, offset, h.max_msg_nums - answer.count, message_filter)
        buffers = result.buffers
        if buffers:
            offsets = result.queue_offsets
            if answer.fifo:
                previous = pop.book.states.get(key)
                state = pop.book.update(key, h.attempt_id, answer.pop_time, h.invisible_time, offsets, offset,
                                        answer.pop_time)
                if not pop.write_order(state, replaces=previous):
                    if previous is None:
                        pop.book.states.pop(key, None)
                    else:
                        pop.book.states[key] = previous
                    answer.rest += result.max_offset - offset
                    return
                answer.end_offset = max(answer.end_offset, pop.last_end)
                counted, least = pop.book.count_info(state)
                answer.order_info += [order_count_offset_entry(topic, queue_id, o, c) for o, c in counted]
                answer.order_info.append(order_count_entry(topic, queue_id, least))
                pop.offsets.set(key, offset)
            else:
                ck = CheckPoint(topic, group, queue_id, offset, answer.pop_time, h.invisible_time,
                                [o - offset for o in offsets], ctx.settings.brokerName, answer.revive_qid,
                                gen=pop.offsets.gen.get(key, 0))
                written = pop.write_checkpoint(ck)
                if written is not PutMessageStatus.PUT_OK:
                    answer.rest += result.max_offset - offset
                    return
                answer.end_offset = max(answer.end_offset, pop.last_end)
                pop.offsets.advance(key, result.next_begin_offset)
                answer.commits.append((key, result.next_begin_offset))
            answer.start_info.append(start_offset_entry(topic, queue_id, offset))
            answer.msg_info.append(msg_offset_entry(topic, queue_id, offsets))
            size = result.buffer_total_size
            ctx.get_stats.add(len(buffers))
            ctx.stats.get(topic, group, len(buffers), size)
            if retry and not pop.settings.popResponseReturnActualRetryTopic:
                answer.buffers += [self._as_popped(view, h, answer, offset) for view in buffers]
            else:
                answer.buffers += buffers
            answer.count += len(buffers)
        elif result.status in _MOVED_ONLY and result.next_begin_offset > -1:
            # everything read was filtered out: only the offset moves (nothing to revive, so no checkpoint)
            if answer.fifo:
                pop.offsets.set(key, result.next_begin_offset)
            else:
                pop.offsets.advance(key, result.next_begin_offset)
                answer.commits.append((key, result.next_begin_offset))
        answer.rest += max(result.max_offset - result.next_begin_offset, 0)

    def _as_popped(self, view: memoryview, h: PopMessageRequestHeader, answer: Answer, ck_offset: int) -> bytes:
        """A retry-topic record as a POP answer carries it: under the topic popped, with its handle in ``POP_CK``."""
        msg, _ = decode_message(view)
        properties = msg.properties
        properties.setdefault(PROPERTY_POP_CK, build_extra_info(
            ck_offset, answer.pop_time, h.invisible_time, answer.revive_qid, msg.topic,
            self.ctx.settings.brokerName, msg.queue_id, msg.queue_offset))
        return encode_record(
            queue_id=msg.queue_id, flag=msg.flag, queue_offset=msg.queue_offset,
            commit_log_offset=msg.commit_log_offset, sys_flag=msg.sys_flag, born_timestamp=msg.born_timestamp,
            born_host=msg.born_host, store_timestamp=msg.store_timestamp, store_host=msg.store_host,
            reconsume_times=msg.reconsume_times, prepared_transaction_offset=msg.prepared_transaction_offset,
            body=msg.body, topic=h.topic.encode(), properties=encode_properties(properties).encode(),
            body_crc_value=msg.body_crc, magic_code=msg.magic_code,
        )

    # -- PEEK_MESSAGE ------------------------------------------------------------------------------------------------

    async def peek(self, connection: Any, request: RemotingCommand) -> RemotingCommand:
        """PEEK_MESSAGE: the messages the next pop would get, from the pop offsets; nothing moves, nothing waits."""
        try:
            h = PeekMessageRequestHeader.from_ext_fields(request.ext_fields)
        except HeaderError as exc:
            return pop_error(request, ResponseCode.SYSTEM_ERROR, str(exc))
        pop = self.pop
        refusal = pop.refuse_unless_master(request, pop_error)
        if refusal is not None:
            return refusal
        settings = self.ctx.settings
        if not is_readable(settings.brokerPermission):
            return pop_error(request, ResponseCode.NO_PERMISSION, f"the broker[{settings.brokerIP1}] peek message is forbidden")
        checked = self.check_topic_and_group(connection, request, h.topic, h.queue_id, h.consumer_group)
        if isinstance(checked, RemotingCommand):
            return checked
        topic, _group = checked
        pop.ensure_ready()
        rand = self.rng.randrange(100)
        buffers: list[Any] = []
        rest = 0
        retry_topic = pop_retry_topic(h.topic, h.consumer_group, pop.settings.enableRetryTopicV2)
        retry_first = rand % 5 == 0
        queues = [(h.topic, q) for q in ([h.queue_id] if h.queue_id >= 0 else
                                          [(rand + i) % topic.read_queue_nums for i in range(topic.read_queue_nums)])]
        retry_config = self.ctx.topics.get(retry_topic)
        retry_queues = [(retry_topic, q) for q in range(retry_config.read_queue_nums)] if retry_config else []
        for name, queue_id in (retry_queues + queues if retry_first else queues + retry_queues):
            key = (name, h.consumer_group, queue_id)
            store = self.ctx.store
            offset = pop.offsets.next.get(key)
            if offset is None:
                table = self.ctx.offsets.query(h.consumer_group, name, queue_id)
                offset = table if table >= 0 else pop.offsets.init_offset(key, 0 if name.startswith("%RETRY%") else 1)
            if len(buffers) >= h.max_msg_nums:
                rest += max(store.get_max_offset_in_queue(name, queue_id) - offset, 0)
                continue
            result = store.get_message(h.consumer_group, name, queue_id, offset, h.max_msg_nums - len(buffers), None)
            buffers += result.buffers
            rest += max(result.max_offset - result.next_begin_offset, 0)
        header = {"popTime": "0", "invisibleTime": "0", "reviveQid": "0", "restNum": str(rest)}
        if not buffers:
            return request.make_response(ResponseCode.PULL_NOT_FOUND, GetMessageStatus.NO_MESSAGE_IN_QUEUE.value, header)
        return request.make_response(ResponseCode.SUCCESS, GetMessageStatus.FOUND.value, header, buffers)
