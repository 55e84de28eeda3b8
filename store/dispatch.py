"""Dispatch: what the store tells its dispatchers about each appended record (Java ``DispatchRequest`` /
``CommitLogDispatcher``), and the one ordered list of dispatchers a store calls.

How dispatch works: ``put_message`` / ``put_messages`` append to the commit log and then, in the same synchronous
call, hand each appended record to every dispatcher in ascending ``order``: the store's own consume-queue builder
(order 0) and index builder (order 10) first, then whatever a feature added (the broker's long-polling wake-up,
order 20, comes through the kernel's ``pyrmq_register_store_dispatchers`` hook). There is no background reput loop
tailing the commit log as in Java: one writer appends on the event loop, so dispatching right away costs nothing
extra and a record is readable through its consume queue the moment ``put_message`` returns (Java's reput thread
exists because its appends come from many threads; its lag is what ``pull`` then has to wait for).

The commit log is walked only when records reached it some other way: at start-up, recovery re-dispatches what the
persisted consume queues and index lack (:mod:`pyrmq.store.reput`), and a slave re-dispatches raw bytes replicated
from its master (:meth:`~pyrmq.store.message_store.MessageStore.append_raw`).
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol, runtime_checkable

import attrs

from .format import decode_properties

log = logging.getLogger(__name__)


class DispatchRequest:
    """One appended record. A plain slots class rather than a frozen attrs one: it is built once per message on the
    hot path; dispatchers must treat it as read-only.

    ``properties`` may be handed over still encoded (``properties_bytes``, what the batch path stores): it is
    decoded the first time a dispatcher reads it, so a record whose dispatchers only need ``keys``, ``uniq_key``
    and ``tags_code`` (the usual case) never builds the dict."""

    __slots__ = (
        "topic", "queue_id", "commit_log_offset", "msg_size", "tags_code", "store_timestamp", "queue_offset", "keys",
        "uniq_key", "sys_flag", "prepared_transaction_offset", "_properties", "_properties_bytes", "recovering",
    )

    def __init__(
        self,
        topic: str,
        queue_id: int,
        commit_log_offset: int,
        msg_size: int,
        tags_code: int,
        store_timestamp: int,
        queue_offset: int,  # consume-queue (logical) offset
        keys: str | None,
        uniq_key: str | None,
        sys_flag: int,
        prepared_transaction_offset: int,
        properties: dict[str, str] | None,
        recovering: bool = False,  # True while recovery replays the commit log (a notifier may want to stay quiet)
        properties_bytes: bytes | None = None,
    ) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.commit_log_offset = commit_log_offset
        self.msg_size = msg_size
        self.tags_code = tags_code
        self.store_timestamp = store_timestamp
        self.queue_offset = queue_offset
        self.keys = keys
        self.uniq_key = uniq_key
        self.sys_flag = sys_flag
        self.prepared_transaction_offset = prepared_transaction_offset
        self._properties = properties
        self._properties_bytes = properties_bytes
        self.recovering = recovering

    @property
    def properties(self) -> dict[str, str]:
        props = self._properties
        if props is None:
            raw = self._properties_bytes
            props = self._properties = decode_properties(raw) if raw else {}
        return props

    def __repr__(self) -> str:
        return (f"DispatchRequest(topic={self.topic!r}, queue_id={self.queue_id}, commit_log_offset="
                f"{self.commit_log_offset}, msg_size={self.msg_size}, queue_offset={self.queue_offset})")


class DispatchBatch:
    """The records of one batch append as columns: one topic-queue, consecutive queue offsets from
    ``queue_offset``, one store timestamp and sys flag, and per record (same index in each list) its commit-log
    offset, size, tags code, KEYS, UNIQ_KEY and properties (``properties``: the dicts, or ``properties_bytes``:
    still encoded, the other None). The store's own dispatchers read the columns (``dispatch_columns``); a
    dispatcher that takes records gets :meth:`requests`, built once per batch and only if one asks."""

    __slots__ = (
        "topic", "queue_id", "sys_flag", "store_timestamp", "queue_offset", "offsets", "sizes", "tags_codes", "keys",
        "uniq_keys", "properties", "properties_bytes", "_requests",
    )

    def __init__(
        self,
        topic: str,
        queue_id: int,
        sys_flag: int,
        store_timestamp: int,
        queue_offset: int,
        offsets: Sequence[int],
        sizes: Sequence[int],
        tags_codes: Sequence[int],
        keys: Sequence[str | None],
        uniq_keys: Sequence[str | None],
        properties: Sequence[dict[str, str]] | None = None,
        properties_bytes: Sequence[bytes] | None = None,
    ) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.sys_flag = sys_flag
        self.store_timestamp = store_timestamp
        self.queue_offset = queue_offset
        self.offsets = offsets
        self.sizes = sizes
        self.tags_codes = tags_codes
        self.keys = keys
        self.uniq_keys = uniq_keys
        self.properties = properties
        self.properties_bytes = properties_bytes
        self._requests: list[DispatchRequest] | None = None

    def __len__(self) -> int:
        return len(self.offsets)

    def requests(self) -> list[DispatchRequest]:
        """One :class:`DispatchRequest` per record (built on the first call; a batch stores no prepared offset)."""
        out = self._requests
        if out is None:
            topic, queue_id, sys_flag, ts, qoff = (
                self.topic, self.queue_id, self.sys_flag, self.store_timestamp, self.queue_offset,
            )
            n = len(self.offsets)
            props = self.properties or (None,) * n
            raw = self.properties_bytes or (None,) * n
            out = self._requests = [
                DispatchRequest(topic, queue_id, offset, size, tags_code, ts, qoff + i, keys, uniq_key, sys_flag, 0,
                                p, False, b)
                for i, (offset, size, tags_code, keys, uniq_key, p, b) in enumerate(
                    zip(self.offsets, self.sizes, self.tags_codes, self.keys, self.uniq_keys, props, raw)
                )
            ]
        return out


@runtime_checkable
class Dispatcher(Protocol):
    name: str
    #: dispatchers run in ascending order; the consume queue is 0, the index 10
    order: int

    def dispatch(self, request: DispatchRequest) -> None: ...

    # optional: ``dispatch_batch(requests)``, the requests of one batch append in one call (Dispatchers.dispatch_batch);
    # ``dispatch_columns(batch)``, a batch append as a DispatchBatch (Dispatchers.dispatch_columns: what the store's
    # batch puts call), without a request per record; ``visible(bound)``, the store's read bound changed (a commit-log
    # offset, or None: no bound), called by MessageStore.set_read_bound / advance_read_bound, never on the append path;
    # ``truncated(offset)``, the commit log was cut at ``offset``
    # (a failover replica dropping a tail its new master never had: MessageStore.truncate_replica), after the cut;
    # ``replicated_only = True``: it sees only records replicated from a master (MessageStore.append_raw), never the
    # store's own appends or recovery (nothing on the append path: a feature following its master's writes)


class RecoverableDispatcher(Dispatcher, Protocol):
    def has_dispatched(self, topic: str, queue_id: int, queue_offset: int, commit_log_offset: int, sys_flag: int) -> bool:
        """Cheap check used by recovery, from header fields only."""
        ...


class Dispatchers:
    """The store's dispatchers, in ascending ``order`` (ties keep the order they were added in).

    Starts with the store's own consume-queue dispatcher (and the index dispatcher when the index is enabled);
    :meth:`add` appends a feature's. The store's write path iterates :attr:`calls`, the collected ``dispatch``
    methods, and calls them directly, one after the other, for each appended record. A failing consume-queue
    dispatcher fails the put (the record would be unreadable); any other dispatcher's failure is logged
    (:meth:`failed`) and the next one still runs. A dispatcher marked ``replicated_only`` is kept apart
    (:attr:`replicated_calls`): only records replicated from a master reach it, after the others.
    """

    def __init__(self, queue: RecoverableDispatcher, *others: Dispatcher) -> None:
        #: the consume-queue dispatcher (the one whose failure is the caller's failure; recovery asks it what it has)
        self.queue = queue
        self._list: list[Dispatcher] = []
        #: bound ``dispatch`` methods in the same order as the dispatchers: what the hot path iterates
        self.calls: tuple[Callable[[DispatchRequest], None], ...] = ()
        #: per dispatcher, in the same order, what a batch append calls with all its requests: the dispatcher's
        #: own ``dispatch_batch`` when it has one, else its ``dispatch`` once per request
        self.batch_calls: tuple[Callable[[list[DispatchRequest]], None], ...] = ()
        #: per dispatcher, in the same order, what a batch put calls with its :class:`DispatchBatch`: the
        #: dispatcher's own ``dispatch_columns`` when it has one, else its batch call with ``batch.requests()``
        self.column_calls: tuple[Callable[[DispatchBatch], None], ...] = ()
        #: the ``visible(bound)`` methods of the dispatchers that have one: told when the store's read bound changes
        #: (what records clients may read: a long poll parked in front of the bound wakes up)
        self.visible_calls: tuple[Callable[[int | None], None], ...] = ()
        #: the dispatchers that see only replicated records, and their ``dispatch`` methods, in ``order``
        self._replicated: list[Dispatcher] = []
        self.replicated_calls: tuple[Callable[[DispatchRequest], None], ...] = ()
        #: the ``truncated(offset)`` methods of the dispatchers that have one (told after a truncation)
        self.truncated_calls: tuple[Callable[[int], None], ...] = ()
        for d in (queue, *others):
            self.add(d)

    def add(self, dispatcher: Dispatcher) -> None:
        """Add a dispatcher: it sees every record appended (and, at recovery, re-dispatched) from now on."""
        if not isinstance(getattr(dispatcher, "name", None), str) or not isinstance(getattr(dispatcher, "order", None), int):
            raise TypeError(f"a store dispatcher needs a str name and an int order: {dispatcher!r}")
        if not callable(getattr(dispatcher, "dispatch", None)):
            raise TypeError(f"store dispatcher {dispatcher.name!r} has no dispatch(request) method")
        if any(d is dispatcher for d in (*self._list, *self._replicated)):
            raise ValueError(f"store dispatcher {dispatcher.name!r} is already added")
        if getattr(dispatcher, "replicated_only", False):
            at = bisect.bisect_right([d.order for d in self._replicated], dispatcher.order)
            self._replicated.insert(at, dispatcher)
            self.replicated_calls = tuple(d.dispatch for d in self._replicated)
            self._truncations()
            return
        at = bisect.bisect_right([d.order for d in self._list], dispatcher.order)
        self._list.insert(at, dispatcher)
        self.calls = tuple(d.dispatch for d in self._list)
        self.batch_calls = tuple(getattr(d, "dispatch_batch", None) or self._one_by_one(d.dispatch) for d in self._list)
        self.column_calls = tuple(
            getattr(d, "dispatch_columns", None) or _from_columns(many) for d, many in zip(self._list, self.batch_calls)
        )
        self.visible_calls = tuple(call for d in self._list if callable(call := getattr(d, "visible", None)))
        self._truncations()

    def _truncations(self) -> None:
        self.truncated_calls = tuple(
            call for d in (*self._list, *self._replicated) if callable(call := getattr(d, "truncated", None)))

    def _one_by_one(self, call: Callable[[DispatchRequest], None]) -> Callable[[list[DispatchRequest]], None]:
        def each(requests: list[DispatchRequest]) -> None:
            for request in requests:
                try:
                    call(request)
                except Exception:
                    if self.failed(call, request):
                        raise

        return each

    def dispatch_batch(self, requests: list[DispatchRequest]) -> None:
        """Hand the requests of one batch append (one topic-queue, consecutive queue offsets, one store timestamp
        and sys flag) to every dispatcher in order: a dispatcher with a ``dispatch_batch(requests)`` method gets
        them in one call, the others one ``dispatch`` call each. Failures as for single records."""
        for many, call in zip(self.batch_calls, self.calls):
            try:
                many(requests)
            except Exception:
                if self.failed(call, requests[0]):
                    raise

    def dispatch_columns(self, batch: DispatchBatch) -> None:
        """Hand one batch append to every dispatcher in order, as columns to those that read them
        (``dispatch_columns``), as requests to the others. Failures as for single records."""
        for columns, call in zip(self.column_calls, self.calls):
            try:
                columns(batch)
            except Exception:
                if self.failed(call, batch.requests()[0]):
                    raise

    def failed(self, call: Callable[[DispatchRequest], None], request: DispatchRequest) -> bool:
        """Called from the ``except`` block of a failed ``call``: True for the consume-queue dispatcher (the caller
        re-raises), otherwise logs the error and returns False."""
        dispatcher = self._list[self.calls.index(call)]
        if dispatcher is self.queue:
            return True
        log.exception("dispatcher %s failed on the record at %d", dispatcher.name, request.commit_log_offset)
        return False

    def __iter__(self) -> Iterator[Dispatcher]:
        """The dispatchers every appended record goes through, in ``order`` (not the replicated-only ones)."""
        return iter(list(self._list))

    def replicated(self) -> list[Dispatcher]:
        """The replicated-only dispatchers, in ``order``."""
        return list(self._replicated)

    def __len__(self) -> int:
        return len(self._list)

    def __contains__(self, dispatcher: object) -> bool:
        return any(d is dispatcher for d in (*self._list, *self._replicated))

    def __repr__(self) -> str:
        return "Dispatchers(" + ", ".join(f"{d.name}:{d.order}" for d in (*self._list, *self._replicated)) + ")"


def _from_columns(many: Callable[[list[DispatchRequest]], None]) -> Callable[[DispatchBatch], None]:
    def requests(batch: DispatchBatch) -> None:
        many(batch.requests())

    return requests


@runtime_checkable
class MessageFilter(Protocol):
    """Java ``MessageFilter``: a cheap check on the CQ tags code, then (only for matches) one on the record."""

    def is_matched_by_consume_queue(self, tags_code: int) -> bool: ...

    def is_matched_by_commit_log(self, record: memoryview) -> bool: ...


@attrs.frozen
class TagsCodeFilter:
    """Match records whose tags code is in ``codes`` (``None`` = every record): the broker's TAG filter."""

    codes: frozenset[int] | None = None

    @property
    def matches_everything(self) -> bool:
        """True for ``*``: the store reads such a pull without asking the filter record by record."""
        return self.codes is None

    def is_matched_by_consume_queue(self, tags_code: int) -> bool:
        return self.codes is None or tags_code in self.codes

    def is_matched_by_commit_log(self, record: memoryview) -> bool:
        return True
