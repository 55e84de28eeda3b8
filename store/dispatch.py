"""Dispatch: what the store tells its dispatchers about each appended record (Java ``DispatchRequest`` /
``CommitLogDispatcher``).

The consume queue and the index are dispatchers themselves (:class:`~pyrmq.store.consume_queue.ConsumeQueueDispatcher`,
:class:`~pyrmq.store.index_file.IndexDispatcher`); a feature adds its own (a long-polling notifier, a delay schedule,
a filter bitmap) through the kernel's ``pyrmq_register_store_dispatchers`` hook or :meth:`MessageStore.add_dispatcher`.

The store calls every dispatcher in ascending ``order`` right after the append, synchronously, so a record is
readable through its consume queue as soon as ``put_message`` returns. On start-up, recovery re-dispatches what the
persisted state lacks: a dispatcher that implements ``has_dispatched`` is asked per record; one that does not gets
every record its consume queue lacked (the Java reput range).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import attrs


@attrs.define(slots=True)
class DispatchRequest:
    """One appended record. Mutable slots class rather than frozen: it is built once per message on the hot path
    and a frozen attrs ``__init__`` costs twice as much; dispatchers must treat it as read-only."""

    topic: str
    queue_id: int
    commit_log_offset: int
    msg_size: int
    tags_code: int
    store_timestamp: int
    #: consume-queue (logical) offset
    queue_offset: int
    keys: str | None
    uniq_key: str | None
    sys_flag: int
    prepared_transaction_offset: int
    properties: dict[str, str]
    #: True while recovery replays the commit log (a notifier may want to stay quiet)
    recovering: bool = False


@runtime_checkable
class Dispatcher(Protocol):
    name: str
    #: dispatchers run in ascending order; the consume queue is 0, the index 10
    order: int

    def dispatch(self, request: DispatchRequest) -> None: ...


class RecoverableDispatcher(Dispatcher, Protocol):
    def has_dispatched(self, topic: str, queue_id: int, queue_offset: int, commit_log_offset: int) -> bool:
        """Cheap check used by recovery, from header fields only."""
        ...


@runtime_checkable
class MessageFilter(Protocol):
    """Java ``MessageFilter``: a cheap check on the CQ tags code, then (only for matches) one on the record."""

    def is_matched_by_consume_queue(self, tags_code: int) -> bool: ...

    def is_matched_by_commit_log(self, record: memoryview) -> bool: ...


@attrs.frozen
class TagsCodeFilter:
    """Match records whose tags code is in ``codes`` (``None`` = every record): the broker's TAG filter."""

    codes: frozenset[int] | None = None

    def is_matched_by_consume_queue(self, tags_code: int) -> bool:
        return self.codes is None or tags_code in self.codes

    def is_matched_by_commit_log(self, record: memoryview) -> bool:
        return True
