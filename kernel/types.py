"""The shapes of what hooks return, as structural protocols.

The kernel never imports the store or remoting implementations: these protocols say what the collected callables
must look like, and the concrete classes (``pyrmq.store.consume_queue.ConsumeQueueDispatcher``, ...) satisfy them.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

#: ``async (connection, request) -> response | None``; None = answered later or oneway (see pyrmq_register_processors)
Processor = Callable[[Any, Any], Awaitable[Any]]

#: ``guard(connection, request) -> refusal response | None``, run before every processor of a role (see
#: pyrmq_make_request_guard)
RequestGuard = Callable[[Any, Any], Any]


def guard_processors(table: dict[int, Processor], guard: RequestGuard) -> dict[int, Processor]:
    """``table`` with each processor wrapped so that ``guard`` runs first and its refusal, if any, is the answer."""

    def guarded(processor: Processor) -> Processor:
        async def run(connection: Any, request: Any) -> Any:
            refusal = guard(connection, request)
            if refusal is not None:
                return refusal
            return await processor(connection, request)

        run.__wrapped__ = processor  # type: ignore[attr-defined]
        run.__qualname__ = f"guarded({getattr(processor, '__qualname__', processor)!s})"
        return run

    return {code: guarded(processor) for code, processor in table.items()}


#: ``strategy(consumer_group, current_cid, mq_all, cid_all) -> list of the queues current_cid consumes`` (spec 7.10)
AllocateStrategy = Callable[[str, str, Sequence[Any], Sequence[str]], list[Any]]


@runtime_checkable
class StoreDispatcher(Protocol):
    """Sees every record appended to the commit log, in ``order`` (consume queue 0, index 10, long polling 20).

    Optional: ``visible(bound)`` is called when the store's read bound changes (automatic failover's confirm offset:
    consumers read only what every in-sync replica holds; the long-polling wake-up answers the pulls parked in front
    of it). A dispatcher without the method costs nothing there.
    """

    name: str
    order: int

    def dispatch(self, request: Any) -> None: ...


@runtime_checkable
class MessageFilter(Protocol):
    """A compiled subscription, handed to the store's read path (RocketMQ's MessageFilter).

    ``is_matched_by_consume_queue`` is the cheap check on a consume-queue entry's tags code;
    ``is_matched_by_commit_log`` the full check on the stored record (a property filter reads its properties).
    """

    def is_matched_by_consume_queue(self, tags_code: int) -> bool: ...

    def is_matched_by_commit_log(self, record: memoryview) -> bool: ...


@runtime_checkable
class Replicator(Protocol):
    """A broker's master/slave replication (``pyrmq_make_replicator``): a service, and the SYNC_MASTER wait."""

    async def run(self, *, task_status: Any = ...) -> None: ...

    async def wait_replicated(self, end_offset: int) -> Any: ...

    def status(self) -> dict[str, str]:
        """Runtime-info entries (GET_BROKER_RUNTIME_INFO), e.g. ``haBehindBytes``."""
        ...


class FlushPolicy(Protocol):
    """How the commit log reaches the disk (``pyrmq_make_flush_policy``; the store's
    :class:`pyrmq.store.flush.FlushPolicy`): a service over the store's flush target, and the SYNC_FLUSH wait."""

    async def run(self, target: Any, *, task_status: Any = ...) -> None: ...

    async def wait_flushed(self, target: Any, offset: int, timeout: float) -> bool: ...


@runtime_checkable
class MetricCollector(Protocol):
    """A ``prometheus_client`` custom collector (``pyrmq_register_metric_collectors``): ``collect()`` yields metric
    families, computed when ``/metrics`` is scraped."""

    def collect(self) -> Iterable[Any]: ...


class Role(enum.Enum):
    """Whether a broker writes (the master of its group) or only takes replicated bytes and serves reads."""

    MASTER = "MASTER"
    SLAVE = "SLAVE"


@attrs.frozen
class RoleChange:
    """What ``pyrmq_role_changed`` says: the broker's role now, its failover epoch (None without automatic
    failover) and the broker id it registers with (0 for a master)."""

    role: Role
    broker_id: int
    epoch: int | None = None

    @property
    def is_master(self) -> bool:
        return self.role is Role.MASTER


class PutKind(enum.Enum):
    """Which request a put comes from; an interceptor may treat them differently."""

    SEND = "send"  #: SEND_MESSAGE, SEND_MESSAGE_V2, SEND_REPLY_MESSAGE(_V2)
    BATCH = "batch"  #: SEND_BATCH_MESSAGE, once per message of the batch (all must stay in the batch's queue)
    SEND_BACK = "send_back"  #: CONSUMER_SEND_MSG_BACK (a consumer returns a message for retry)


class PutContext:
    """What a put interceptor may know besides the record (RocketMQ's SendMessageContext), one per message.

    ``request`` is the remoting command (``code``, ``version``, ``ext_fields`` for credentials), ``born_host`` the
    client's address. ``reconsume_times`` / ``max_reconsume_times`` are what the dead-letter rule compares (the send
    header's values; for a send-back the stored message's count and the consumer's maximum; None = the group's
    ``retryMaxTimes``); ``dead_letter`` is True when the consumer asked for the dead-letter queue (send-back with
    ``delayLevel < 0``). ``scheduled_by`` is set by the first scheduler (delay levels, timer) that claims the
    message: later schedulers leave it alone.
    """

    __slots__ = ("kind", "request", "born_host", "reconsume_times", "max_reconsume_times", "dead_letter", "scheduled_by")

    def __init__(
        self,
        kind: PutKind,
        request: Any,
        born_host: tuple[str, int],
        reconsume_times: int = 0,
        max_reconsume_times: int | None = None,
        dead_letter: bool = False,
    ) -> None:
        self.kind = kind
        self.request = request
        self.born_host = born_host
        self.reconsume_times = reconsume_times
        self.max_reconsume_times = max_reconsume_times
        self.dead_letter = dead_letter
        self.scheduled_by: str | None = None


@attrs.frozen
class Rejection:
    """A put refused by an interceptor: the client gets ``code`` (a RocketMQ ResponseCode) and ``remark``."""

    code: int
    remark: str


#: suggested bands for :attr:`PutInterceptor.order`: refuse first, then re-address, then park for later delivery
ORDER_REFUSE = 100
ORDER_REROUTE = 200
ORDER_SCHEDULE = 300


@runtime_checkable
class PutInterceptor(Protocol):
    """Sees every message a client puts (send, batch send, send-back) between "decoded" and "appended".

    ``intercept(record, context)`` returns the record to append (the same object when it does not apply), a
    re-addressed copy (``attrs.evolve``), or a :class:`Rejection`. Interceptors run in ascending ``order`` (then
    ``name``), each on the previous one's output.

    Optional triggers keep a plain send cheap: an interceptor with ``trigger_properties`` (a frozenset of property
    names) and/or ``trigger_topic_prefixes`` (a tuple) asks to see only messages carrying one of those properties or
    addressed to such a topic; one without either sees every message (an ACL check). The chain runs, all of it, only
    for a message some interceptor's trigger matches, so ``intercept`` must still check for itself.
    """

    name: str
    order: int

    def intercept(self, record: Any, context: PutContext) -> Any: ...


@runtime_checkable
class Scheduler(Protocol):
    """A delay scheduler (``pyrmq_register_schedulers``): a put interceptor that parks the messages carrying one of
    its ``trigger_properties`` for later delivery (RocketMQ's delay levels and timer). ``summary()`` is one line for
    ``pyrmq plugins --codes``.

    A scheduler that parks under a topic of its own says so with two optional members: ``parking_topic`` (the topic)
    and ``tags_code(properties, store_timestamp) -> int | None`` (the consume-queue tags code of a parked record, from
    its stored properties and store time; None: the hash of ``TAGS``). The broker core hands the store one
    :class:`~pyrmq.store.reput.TagsCodeResolver` built from them before the store loads, so a parked record's unit
    is the same at the append, after recovery, on a replica and after a truncation (RocketMQ's
    ``CommitLog.checkMessageAndReturnSize``)."""

    name: str
    order: int
    trigger_properties: frozenset[str]

    def intercept(self, record: Any, context: PutContext) -> Any: ...

    def summary(self) -> str: ...


#: ``await fetch(request_code)`` -> the master's answer to a request without header or body, its JSON body parsed
#: (what RocketMQ's SlaveSynchronize asks: GET_ALL_TOPIC_CONFIG, GET_ALL_DELAY_OFFSET, ...)
MasterFetch = Callable[[int], Awaitable[Any]]


@runtime_checkable
class SlaveSyncStep(Protocol):
    """One step of a slave's metadata sync (``pyrmq_register_slave_sync``; RocketMQ's ``SlaveSynchronize``), run each
    round after the topics, groups and consumer offsets. ``sync(fetch)`` asks the master what the feature keeps
    (``await fetch(RequestCode.GET_ALL_DELAY_OFFSET)``) and takes it; an exception fails that round (logged)."""

    name: str

    async def sync(self, fetch: MasterFetch) -> None: ...


class PutChain:
    """The broker's put interceptors, collected once at start (:meth:`Kernel.collect`) and called directly.

    ``steps`` is a tuple of the interceptors' bound ``intercept`` methods. A processor asks :meth:`applies` first
    (one set test and one ``startswith`` when every interceptor has a trigger, False at once for an empty chain)
    and builds a :class:`PutContext` and calls the chain only then. Calling the chain returns the record to append
    or the first :class:`Rejection`.
    """

    __slots__ = ("interceptors", "steps", "always", "trigger_properties", "trigger_topic_prefixes")

    def __init__(self, interceptors: Sequence[PutInterceptor] = ()) -> None:
        self.set(interceptors)

    def set(self, interceptors: Sequence[PutInterceptor]) -> None:
        self.interceptors = tuple(sorted(interceptors, key=lambda i: (i.order, i.name)))
        self.steps: tuple[Callable[[Any, PutContext], Any], ...] = tuple(i.intercept for i in self.interceptors)
        properties: set[str] = set()
        prefixes: list[str] = []
        always = False
        for interceptor in self.interceptors:
            keys = getattr(interceptor, "trigger_properties", None)
            starts = getattr(interceptor, "trigger_topic_prefixes", None)
            if keys is None and starts is None:
                always = True
            properties.update(keys or ())
            prefixes.extend(starts or ())
        self.always = always
        self.trigger_properties = frozenset(properties)
        self.trigger_topic_prefixes = tuple(prefixes)

    def applies(self, record: Any) -> bool:
        """Whether any interceptor wants to see ``record`` (see :class:`PutInterceptor`'s triggers)."""
        return (
            self.always
            or not self.trigger_properties.isdisjoint(record.properties)
            or record.topic.startswith(self.trigger_topic_prefixes)
        )

    def __bool__(self) -> bool:
        return bool(self.steps)

    def __call__(self, record: Any, context: PutContext) -> Any:
        for step in self.steps:
            record = step(record, context)
            if record.__class__ is Rejection:
                break
        return record


class TransactionState(enum.IntEnum):
    """A verdict on a half message, valued as END_TRANSACTION's ``commitOrRollback`` (sysFlag transaction bits)."""

    UNKNOWN = 0
    COMMIT = 8
    ROLLBACK = 12
