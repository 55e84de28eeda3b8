"""NOTIFICATION (200054) and POLLING_INFO (200055): 5.5.0's ``NotificationProcessor`` and ``PollingInfoProcessor``.

NOTIFICATION asks whether a pop would find something, without taking it: SUCCESS with ``hasMsg`` true as soon as a
queue of the topic (or the one asked for) has messages beyond the group's pop offset (a FIFO request: a blocked queue
counts as empty; a TAG expression: the first 32 consume-queue units of a backlog under 64 must match), or the group's
retry topic has; otherwise the request waits up to ``pollTime`` (its own long-polling table) and is answered
``hasMsg`` false when nothing came (``pollingFull`` when no more may wait). POLLING_INFO answers how many POP requests
wait under ``topic@group@queueId``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio

from pyrmq.plugins.broker.pop.ack import NOT_SET
from pyrmq.plugins.broker.pop.journal import now_ms
from pyrmq.plugins.broker.pop.polling import FULL, Parked, polling_key
from pyrmq.plugins.broker.topics import is_readable
from pyrmq.remoting.codes import ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.errors import HeaderError
from pyrmq.remoting.pop import (
    INIT_MODE_MAX,
    NotificationRequestHeader,
    NotificationResponseHeader,
    PollingInfoRequestHeader,
    PollingInfoResponseHeader,
    pop_retry_topic,
    pop_retry_topic_v1,
)

if TYPE_CHECKING:  # pragma: no cover - types only
    from pyrmq.plugins.broker.pop.plugin import ErrorAnswer, PopService
    from pyrmq.plugins.broker.topics import TopicConfig

#: 5.x's ``maxMessageFilterNumForNotification`` and the units it tag-matches
FILTER_BACKLOG = 64
FILTER_UNITS = 32


def notification_error(request: RemotingCommand, code: int, remark: str | None) -> RemotingCommand:
    return request.make_response(code, remark, {"hasMsg": "false", "pollingFull": "false"})


def polling_info_error(request: RemotingCommand, code: int, remark: str | None) -> RemotingCommand:
    return request.make_response(code, remark, {"pollingNum": "0"})


class NotificationProcessor:
    def __init__(self, pop: PopService) -> None:
        self.pop = pop
        self.ctx = pop.ctx

    def _checks(self, connection: Any, request: RemotingCommand, topic: str, queue_id: int, group: str,
                error: ErrorAnswer) -> tuple[TopicConfig, Any] | RemotingCommand:
        pop = self.pop
        refusal = pop.refuse_unless_master(request, error)
        if refusal is not None:
            return refusal
        settings = self.ctx.settings
        if not is_readable(settings.brokerPermission):
            return error(request, ResponseCode.NO_PERMISSION, f"the broker[{settings.brokerIP1}] peeking message is forbidden")
        return pop.popper.check_topic_and_group(connection, request, topic, queue_id, group, error=error)

    # -- NOTIFICATION ------------------------------------------------------------------------------------------------

    async def notification(self, connection: Any, request: RemotingCommand) -> RemotingCommand | None:
        try:
            h = NotificationRequestHeader.from_ext_fields(request.ext_fields)
        except HeaderError as exc:
            return notification_error(request, ResponseCode.SYSTEM_ERROR, str(exc))
        checked = self._checks(connection, request, h.topic, h.queue_id, h.consumer_group, notification_error)
        if isinstance(checked, RemotingCommand):
            return checked
        topic, group = checked
        message_filter = self.pop.popper.compile(request, h.exp_type, h.exp, error=notification_error)
        if isinstance(message_filter, RemotingCommand):
            return message_filter
        pop = self.pop
        pop.ensure_ready()
        fifo = h.order or group.consume_message_orderly
        if self.has_message(h, topic, message_filter, fifo):
            return self._answer(request, True)
        if h.poll_time > 0:
            parked = Parked(connection, request, h, message_filter, trio.current_time() + h.poll_time / 1000,
                            h.topic, h.consumer_group, h.queue_id, notification=True)
            if pop.polling.park(parked) == FULL:
                return self._answer(request, False, full=True)
            pop.note_held(parked, topic)
            return None
        return self._answer(request, False)

    @staticmethod
    def _answer(request: RemotingCommand, has: bool, *, full: bool = False) -> RemotingCommand:
        return request.make_response(ResponseCode.SUCCESS, NOT_SET,
                                     NotificationResponseHeader(has_msg=has, polling_full=full).to_ext_fields())

    async def run_parked(self, parked: Parked, final: bool) -> bool:
        pop = self.pop
        h = parked.header
        if not pop.is_master():
            await parked.connection.send_response(pop.not_master(parked.request, notification_error))
            return True
        topic = self.ctx.topics.get(h.topic)
        group = self.ctx.groups.table.get(h.consumer_group)
        has = topic is not None and self.has_message(
            h, topic, parked.message_filter, h.order or bool(group and group.consume_message_orderly))
        if not has and not final:
            if topic is not None:
                pop.note_held(parked, topic)
            return False
        await parked.connection.send_response(self._answer(parked.request, has))
        return True

    def has_message(self, h: NotificationRequestHeader, topic: TopicConfig, message_filter: Any, fifo: bool) -> bool:
        pop = self.pop
        store = self.ctx.store
        group = h.consumer_group
        now = now_ms()
        queues = [h.queue_id] if h.queue_id >= 0 else range(topic.read_queue_nums)
        for queue_id in queues:
            key = (h.topic, group, queue_id)
            if fifo and pop.book.blocked(key, h.attempt_id, now):
                continue
            offset = pop.peek_offset(key, INIT_MODE_MAX)
            backlog = store.get_max_offset_in_queue(h.topic, queue_id) - offset
            if backlog <= 0:
                continue
            if message_filter is None or backlog >= FILTER_BACKLOG or \
                    not hasattr(message_filter, "is_matched_by_consume_queue"):
                return True
            cq = store.consume_queues.get(h.topic, queue_id)
            units = cq.units_from(offset, FILTER_UNITS) if cq is not None else None
            if units is not None and any(message_filter.is_matched_by_consume_queue(u[2]) for u in units):
                return True
        if fifo:
            return False
        settings = pop.settings
        retry_topics = [pop_retry_topic(h.topic, group, settings.enableRetryTopicV2)]
        if settings.enableRetryTopicV2 and settings.retrieveMessageFromPopRetryTopicV1:
            retry_topics.append(pop_retry_topic_v1(h.topic, group))
        for name in retry_topics:
            config = self.ctx.topics.get(name)
            for queue_id in range(config.read_queue_nums if config else 0):
                offset = pop.peek_offset((name, group, queue_id), INIT_MODE_MAX)
                if store.get_max_offset_in_queue(name, queue_id) > offset:
                    return True
        return False

    # -- POLLING_INFO ------------------------------------------------------------------------------------------------

    async def polling_info(self, connection: Any, request: RemotingCommand) -> RemotingCommand:
        try:
            h = PollingInfoRequestHeader.from_ext_fields(request.ext_fields)
        except HeaderError as exc:
            return polling_info_error(request, ResponseCode.SYSTEM_ERROR, str(exc))
        checked = self._checks(connection, request, h.topic, h.queue_id, h.consumer_group, polling_info_error)
        if isinstance(checked, RemotingCommand):
            return checked
        count = self.pop.polling.count(polling_key(h.topic, h.consumer_group, h.queue_id))
        return request.make_response(ResponseCode.SUCCESS, NOT_SET, PollingInfoResponseHeader(count).to_ext_fields())
