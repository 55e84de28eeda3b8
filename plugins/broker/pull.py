"""PULL_MESSAGE with long polling (spec 2.3, 3.3, 3.4, 7.5).

A pull that finds nothing and carries the suspend flag is parked under ``topic@queueId`` (no response yet). It is
answered as soon as a message matching its filter is dispatched to that queue (the ``long-polling`` store
dispatcher wakes the hold service), or when its suspend timeout passes (checked every 5 s, 1 s with short polling,
and at each deadline). A re-executed pull never parks again and never commits the consumer offset again.

The store may serve reads only up to a bound (what clients may see yet): a pull parked while its queue holds
messages beyond what it could read is kept aside and executed again when the store says more became visible (the
hold service is a store dispatcher with a ``visible(bound)`` method, :meth:`PullRequestHoldService.visible`).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any

import attrs
import trio

from pyrmq.kernel.errors import FilterExpressionError
from pyrmq.kernel.hookspecs import hookimpl
from pyrmq.kernel.kernel import Kernel
from pyrmq.kernel.types import Processor, StoreDispatcher
from pyrmq.kernel.settings import at_least, setting
from pyrmq.plugins.broker.consumer_filter import RETRY_GROUP_TOPIC_PREFIX, FilterResultsDispatcher, RetryTopicFilter, is_tag_type
from pyrmq.plugins.broker.core import register_feature
from pyrmq.plugins.broker.topics import is_readable
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.headers import PullMessageRequestHeader, PullMessageResponseHeader
from pyrmq.remoting.vocabulary import LARGE_PULL_FIELD, PullSysFlag
from pyrmq.store.results import GetMessageStatus

log = logging.getLogger("pyrmq.broker.pull")

#: the sysFlag bits as plain ints: ``int & IntFlag`` builds an enum member on every test
_FLAG_COMMIT_OFFSET = int(PullSysFlag.COMMIT_OFFSET)
_FLAG_SUSPEND = int(PullSysFlag.SUSPEND)
_FLAG_SUBSCRIPTION = int(PullSysFlag.SUBSCRIPTION)
_PULL_SUCCESS = int(ResponseCode.SUCCESS)
#: PullMessageResponseHeader's wire names, in the order its to_ext_fields() writes them
_SUGGEST, _NEXT_BEGIN, _MIN_OFFSET, _MAX_OFFSET = PullMessageResponseHeader(
    suggest_which_broker_id=0, next_begin_offset=0, min_offset=0, max_offset=0).to_ext_fields()


# GetMessageStatus -> pull response code (spec 2.3); NO_MESSAGE_IN_QUEUE depends on the request offset
_STATUS_CODE = {
    GetMessageStatus.FOUND: ResponseCode.SUCCESS,
    GetMessageStatus.NO_MATCHED_MESSAGE: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetMessageStatus.MESSAGE_WAS_REMOVING: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetMessageStatus.NO_MATCHED_LOGIC_QUEUE: ResponseCode.PULL_NOT_FOUND,
    GetMessageStatus.OFFSET_FOUND_NULL: ResponseCode.PULL_NOT_FOUND,
    GetMessageStatus.OFFSET_OVERFLOW_ONE: ResponseCode.PULL_NOT_FOUND,
    GetMessageStatus.OFFSET_OVERFLOW_BADLY: ResponseCode.PULL_OFFSET_MOVED,
    GetMessageStatus.OFFSET_TOO_SMALL: ResponseCode.PULL_OFFSET_MOVED,
}


def _matches_arrival(message_filter: Any, request: Any) -> bool:
    """A property filter (SQL92) checks the arriving message's properties before waking a parked pull, as Java's
    ``isMatchedByCommitLog(null, properties)`` at arrival (a registered one reads the answer dispatch just kept);
    other filters wake on the consume-queue check alone."""
    kept = getattr(message_filter, "is_matched_on_arrival", None)
    if kept is not None:
        return kept(request.queue_offset, request.properties)
    check = getattr(message_filter, "is_matched_by_properties", None)
    return check is None or check(request.properties)


@attrs.define(eq=False)
class ParkedPull:
    connection: Any
    request: RemotingCommand
    header: PullMessageRequestHeader
    message_filter: Any
    deadline: float


class PullRequestHoldService:
    """Parked pulls by ``topic@queueId``; woken by dispatch of a matching message or by their deadline."""

    def __init__(self, processor: PullMessageProcessor, check_interval: float) -> None:
        self.processor = processor
        self.check_interval = check_interval
        self.parked: dict[str, list[ParkedPull]] = defaultdict(list)
        self._ready: set[str] = set()
        #: whether the store bounds what may be read (its last ``visible`` event named a bound)
        self._bounded = False
        #: keys of pulls parked while their queue holds messages they could not read yet (beyond the store's bound)
        self._held: set[str] = set()
        self._wake = trio.Event()

    def park(self, pull: ParkedPull) -> None:
        key = f"{pull.header.topic}@{pull.header.queue_id}"
        self.parked[key].append(pull)
        if self._bounded:
            self._note_held(key, pull)
        self._wake.set()  # the deadline may be earlier than the current sleep

    def _note_held(self, key: str, pull: ParkedPull) -> None:
        # nothing found although the queue goes further: its next message is not visible yet
        store = self.processor.ctx.store
        if store.get_max_offset_in_queue(pull.header.topic, pull.header.queue_id) > pull.header.queue_offset:
            self._held.add(key)

    def visible(self, bound: int | None) -> None:
        """Store event: what clients may read changed (``bound``: a commit-log offset, None when every record is
        readable). The pulls parked in front of what was visible before are executed again."""
        self._bounded = bound is not None
        if self._held:
            self._ready |= self._held
            self._held = set()
            self._wake.set()

    # store dispatcher: called for every appended record, in the append path; must stay cheap
    name = "long-polling"
    order = 20

    def dispatch(self, request: Any) -> None:
        if not self.parked:
            return
        key = f"{request.topic}@{request.queue_id}"
        waiting = self.parked.get(key)
        if not waiting:
            return
        for pull in waiting:
            f = pull.message_filter
            if f is None or f.is_matched_by_consume_queue(request.tags_code) and _matches_arrival(f, request):
                self._ready.add(key)
                self._wake.set()
                return

    def dispatch_columns(self, batch: Any) -> None:
        """A batch put (:class:`~pyrmq.store.dispatch.DispatchBatch`): its records one by one only when pulls of
        its queue are parked."""
        if self.parked and self.parked.get(f"{batch.topic}@{batch.queue_id}"):
            for request in batch.requests():
                self.dispatch(request)

    def filter_changed(self, topic: str, group: str) -> None:
        """A group's registered filter of ``topic`` changed (a heartbeat with a new expression): its parked pulls are
        executed again with the new filter, and park again if nothing matches it."""
        for key, pulls in self.parked.items():
            if any(p.header.topic == topic and p.header.consumer_group == group for p in pulls):
                self._ready.add(key)
                self._wake.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            now = trio.current_time()
            next_deadline = now + self.check_interval
            for pulls in self.parked.values():
                for pull in pulls:
                    next_deadline = min(next_deadline, pull.deadline)
            with trio.move_on_at(next_deadline):
                await self._wake.wait()
            self._wake = trio.Event()
            await self._answer_due()

    async def _answer_due(self) -> None:
        now = trio.current_time()
        ready, self._ready = self._ready, set()
        answers: list[tuple[Any, RemotingCommand]] = []
        # decide synchronously, then send: pulls parked while we send land in fresh lists
        for key in list(self.parked):
            keep: list[ParkedPull] = []
            for pull in self.parked[key]:
                if pull.connection.closed:
                    continue
                timed_out = pull.deadline <= now
                if key not in ready and not timed_out:
                    keep.append(pull)
                    continue
                # resolved again, as Java re-runs the whole request: a changed subscription applies from here on
                message_filter = self.processor.resolve_filter(pull.request, pull.header)
                if isinstance(message_filter, RemotingCommand):
                    answers.append((pull.connection, message_filter))
                    continue
                pull.message_filter = message_filter
                response = self.processor.execute(pull.connection, pull.request, pull.header, message_filter, first=False)
                if response.code == ResponseCode.PULL_NOT_FOUND and not timed_out:
                    keep.append(pull)  # woken by a message that does not match (or is not readable yet): keep waiting
                    if self._bounded:
                        self._note_held(key, pull)
                    continue
                answers.append((pull.connection, response))
            if keep:
                self.parked[key] = keep
            else:
                del self.parked[key]
        for connection, response in answers:
            await connection.send_response(response)


@attrs.frozen
class PullSettings:
    """The pull plugin's broker.conf keys (RocketMQ 4.9.8's names and defaults)."""

    longPollingEnable: bool = setting(True, help="park a pull that finds nothing until a message arrives")
    shortPollingTimeMills: int = setting(1000, check=at_least(1), help="ms a pull is parked without long polling")
    slaveReadEnable: bool = setting(False, help="suggest the slave to consumers far behind (spec 3.3)")
    # pyrmq: a pull flagged largePull (pyrmq's client growing its pulls with the backlog) is capped by these, at
    # least the maxTransfer*OnMessageInMemory ones; other pulls get RocketMQ's caps (docs/decisions.md)
    largePullMaxCount: int = setting(1024, check=at_least(1), help="pyrmq: most messages a largePull pull gets")
    largePullMaxBytes: int = setting(4 * 1024 * 1024, check=at_least(1), help="pyrmq: most bytes a largePull pull gets")


class PullMessageProcessor:
    """PULL_MESSAGE and its long polling; registered as a plugin (``broker.pull``)."""

    def __init__(self, ctx: Any, settings: PullSettings) -> None:
        self.ctx = ctx
        self.settings = settings
        check = 5.0 if settings.longPollingEnable else settings.shortPollingTimeMills / 1000
        self.hold = PullRequestHoldService(self, check)
        store_settings = ctx.settings
        #: (messages, bytes) a pull flagged largePull may get
        self.large_caps = (
            max(settings.largePullMaxCount, store_settings.maxTransferCountOnMessageInMemory),
            max(settings.largePullMaxBytes, store_settings.maxTransferBytesOnMessageInMemory),
        )

    @hookimpl(trylast=True)
    def pyrmq_register_processors(self, role: str) -> dict[int, Processor] | None:
        return {RequestCode.PULL_MESSAGE: self} if role == "broker" else None

    @hookimpl(trylast=True)
    def pyrmq_register_store_dispatchers(self) -> list[StoreDispatcher]:
        if not self.ctx.settings.enablePropertyFilter:
            return [self.hold]  # no SQL92 pulls to serve: nothing to evaluate at dispatch
        return [self.hold, FilterResultsDispatcher(self.ctx.consumer_filters)]

    @hookimpl(trylast=True)
    async def pyrmq_serve(self, nursery: trio.Nursery) -> None:
        await nursery.start(self.hold.run)

    def _error(self, request: RemotingCommand, code: int, remark: str) -> RemotingCommand:
        return request.make_response(code, remark)

    async def __call__(self, connection: Any, request: RemotingCommand) -> RemotingCommand | None:
        header = PullMessageRequestHeader.from_ext_fields(request.ext_fields)
        ctx = self.ctx
        settings = ctx.settings
        if not is_readable(settings.brokerPermission):
            return self._error(request, ResponseCode.NO_PERMISSION, f"the broker[{settings.brokerIP1}] pulling message is forbidden")
        group = ctx.groups.find_or_create(header.consumer_group)
        if group is None:
            return self._error(
                request, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group [{header.consumer_group}] does not exist"
            )
        if not group.consume_enable:
            return self._error(request, ResponseCode.NO_PERMISSION, f"subscription group no permission, {header.consumer_group}")
        topic = ctx.topics.get(header.topic)
        if topic is None:
            return self._error(request, ResponseCode.TOPIC_NOT_EXIST, f"topic[{header.topic}] not exist, apply first please!")
        if not is_readable(topic.perm):
            return self._error(request, ResponseCode.NO_PERMISSION, f"the topic[{header.topic}] pulling message is forbidden")
        if not 0 <= header.queue_id < topic.read_queue_nums:
            return self._error(
                request,
                ResponseCode.SYSTEM_ERROR,
                f"queueId[{header.queue_id}] is illegal, topic:[{header.topic}] topicConfig.readQueueNums:[{topic.read_queue_nums}]",
            )
        message_filter = self.resolve_filter(request, header)
        if isinstance(message_filter, RemotingCommand):
            return message_filter
        if header.max_msg_nums < 0 and self._would_read(header):
            # RocketMQ 4.9.7 fails in its store (an ArrayList of negative capacity) when there is a message to read
            # (and never answers such a pull once parked: pyrmq refuses that one at once, docs/decisions.md)
            return self._error(
                request, ResponseCode.SYSTEM_ERROR,
                f"the custom field <maxMsgNums> is {header.max_msg_nums}: expected a number of messages, 0 or more",
            )
        response = self.execute(connection, request, header, message_filter, first=True)
        if response is None:
            own = self.settings
            timeout = header.suspend_timeout_millis if own.longPollingEnable else own.shortPollingTimeMills
            self.hold.park(ParkedPull(connection, request, header, message_filter, trio.current_time() + timeout / 1000))
        return response

    def _would_read(self, header: PullMessageRequestHeader) -> bool:
        """Whether the pull reads a message now (its offset holds one) or may park until one comes."""
        store = self.ctx.store
        return bool(header.sys_flag & _FLAG_SUSPEND) or (
            store.get_min_offset_in_queue(header.topic, header.queue_id)
            <= header.queue_offset
            < store.get_max_offset_in_queue(header.topic, header.queue_id)
        )

    def resolve_filter(self, request: RemotingCommand, header: PullMessageRequestHeader) -> Any:
        """The pull's filter, or the error response: the subscription in the header (sysFlag 0x4), else the group's
        registered one. Resolved again when a parked pull is re-executed (Java runs the whole request again), so a
        consumer that changed its expression gets the new filter from its next pull on. A group's registered
        property filter (SQL92) answers from the results kept at dispatch (:class:`FilterResultsDispatcher`)."""
        ctx = self.ctx
        settings = ctx.settings
        expression_type = header.expression_type or "TAG"  # as sent: Java's isTagType knows "TAG" only
        if header.sys_flag & _FLAG_SUBSCRIPTION:
            # Java delivers everything when SQL in the header does not compile; we refuse it (docs/decisions.md)
            if not is_tag_type(expression_type) and not settings.enablePropertyFilter:
                return self._error(request, ResponseCode.SYSTEM_ERROR, f"The broker does not support consumer to filter message by {expression_type}")
            try:
                message_filter = ctx.compile_filter(expression_type, header.subscription or "*")
            except FilterExpressionError as exc:
                return self._error(request, ResponseCode.SUBSCRIPTION_PARSE_FAILED, f"parse the consumer's subscription failed: {exc}")
            if not is_tag_type(expression_type):
                # the group's registered filter data for the same expression (ali-ons registers it by heartbeat too)
                data = ctx.consumer_filters.get(header.topic, header.consumer_group)
                if (data is not None and data.compiled is not None and data.expression == header.subscription
                        and data.expression_type == expression_type):
                    message_filter = data.pull_filter(header.queue_id)
        else:
            info = ctx.consumers.groups.get(header.consumer_group)
            if info is None:
                return self._error(request, ResponseCode.SUBSCRIPTION_NOT_EXIST, f"the consumer's group info not exist: {header.consumer_group}")
            sub = info.subscriptions.get(header.topic)
            if sub is None:
                return self._error(request, ResponseCode.SUBSCRIPTION_NOT_EXIST, f"the consumer's subscription not exist: {header.topic}")
            if sub.sub_version < header.sub_version:
                return self._error(request, ResponseCode.SUBSCRIPTION_NOT_LATEST, "the consumer's subscription not latest")
            message_filter = sub.message_filter
            if not is_tag_type(sub.expression_type):
                # the group's filter data, registered by heartbeats and versioned by subVersion (spec 7.11)
                data = ctx.consumer_filters.get(header.topic, header.consumer_group)
                if data is None or data.compiled is None:
                    return self._error(
                        request, ResponseCode.FILTER_DATA_NOT_EXIST,
                        "The broker's consumer filter data is not exist!Your expression may be wrong!",
                    )
                if data.client_version < header.sub_version:
                    return self._error(request, ResponseCode.FILTER_DATA_NOT_LATEST, "the consumer's consumer filter data not latest")
                if not settings.enablePropertyFilter:
                    return self._error(request, ResponseCode.SYSTEM_ERROR, f"The broker does not support consumer to filter message by {sub.expression_type}")
                message_filter = data.pull_filter(header.queue_id)
        if settings.filterSupportRetry and header.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            message_filter = RetryTopicFilter(message_filter, header.consumer_group, ctx.consumer_filters)
        return message_filter

    def _suggest(self, header: PullMessageRequestHeader, result: Any) -> int:
        """suggestWhichBrokerId (PullMessageProcessor): the master unless slaveReadEnable; then the group's
        whichBrokerWhenConsumeSlowly when the pull lags beyond accessMessageInMemoryMaxRatio, else its brokerId."""
        if not self.settings.slaveReadEnable:
            return 0
        config = self.ctx.groups.table.get(header.consumer_group)
        if config is None:
            return 1 if result.suggest_pulling_from_slave else 0
        return config.which_broker_when_consume_slowly if result.suggest_pulling_from_slave else config.broker_id

    def execute(
        self, connection: Any, request: RemotingCommand, header: PullMessageRequestHeader, message_filter: Any, *, first: bool
    ) -> RemotingCommand | None:
        """Read from the store and build the response; None = park (first execution with the suspend flag)."""
        ctx = self.ctx
        result = ctx.store.get_message(
            header.consumer_group, header.topic, header.queue_id, header.queue_offset, header.max_msg_nums, message_filter,
            coalesce=True,  # the answer's body is the records back to back: a view per run of adjacent records
            transfer_caps=self.large_caps if request.ext_fields.get(LARGE_PULL_FIELD) == "true" else None,
        )
        status = result.status
        next_begin = result.next_begin_offset
        if status is GetMessageStatus.NO_MESSAGE_IN_QUEUE:
            code = ResponseCode.PULL_OFFSET_MOVED if header.queue_offset != 0 else ResponseCode.PULL_NOT_FOUND
        else:
            code = _STATUS_CODE.get(status, ResponseCode.SYSTEM_ERROR)
        if first and code == ResponseCode.PULL_NOT_FOUND and header.sys_flag & _FLAG_SUSPEND:
            result.release()
            self._commit(header, first)
            return None
        self._commit(header, first)
        # PullMessageResponseHeader's fields, as its to_ext_fields() renders them, and the same members pre-rendered
        # as JSON (RemotingCommand.ext_json: byte-identical to the generic encoder's, tested)
        suggest = str(self._suggest(header, result))
        next_text, min_text, max_text = str(next_begin), str(result.min_offset), str(result.max_offset)
        ext = {_SUGGEST: suggest, _NEXT_BEGIN: next_text, _MIN_OFFSET: min_text, _MAX_OFFSET: max_text}
        if code == _PULL_SUCCESS:
            count = result.message_count
            ctx.get_stats.add(count)
            ctx.stats.get(header.topic, header.consumer_group, count, result.buffer_total_size)
            response = request.make_response(code, status.value, ext, result.buffers)
        else:
            response = request.make_response(code, status.value, ext, b"")
        response.ext_json = (f'"{_SUGGEST}":"{suggest}","{_NEXT_BEGIN}":"{next_text}","{_MIN_OFFSET}":"{min_text}",'
                             f'"{_MAX_OFFSET}":"{max_text}"')
        return response

    def _commit(self, header: PullMessageRequestHeader, first: bool) -> None:
        # the commit offset travels with the pull; stored on the first execution, by a master only (spec 3.3)
        if first and header.sys_flag & _FLAG_COMMIT_OFFSET and self.ctx.settings.brokerRole != "SLAVE":
            self.ctx.offsets.commit(header.consumer_group, header.topic, header.queue_id, header.commit_offset)


# -- plugin ------------------------------------------------------------------------------------------------------

@hookimpl(trylast=True)
def pyrmq_register_settings() -> dict[str, type]:
    return {"broker": PullSettings}


@hookimpl(trylast=True)
def pyrmq_configure(kernel: Kernel) -> None:
    processor = register_feature(kernel, "broker.pull", lambda ctx: PullMessageProcessor(ctx, kernel.settings(PullSettings)))
    if processor is not None:
        processor.ctx.consumer_filters.listeners.append(processor.hold.filter_changed)
