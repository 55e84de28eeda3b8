"""The shapes of what hooks return, as structural protocols.

The kernel never imports the store or remoting implementations: these protocols say what the collected callables
must look like, and the concrete classes (``pyrmq.store.consume_queue.ConsumeQueueDispatcher``, ...) satisfy them.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, runtime_checkable

#: ``async (connection, request) -> response | None``; None = answered later or oneway (see pyrmq_register_processors)
Processor = Callable[[Any, Any], Awaitable[Any]]

#: ``strategy(consumer_group, current_cid, mq_all, cid_all) -> list of the queues current_cid consumes`` (spec 7.10)
AllocateStrategy = Callable[[str, str, Sequence[Any], Sequence[str]], list[Any]]


@runtime_checkable
class StoreDispatcher(Protocol):
    """Sees every record appended to the commit log, in ``order`` (consume queue 0, index 10, features later)."""

    name: str
    order: int

    def dispatch(self, request: Any) -> None: ...


@runtime_checkable
class MessageFilter(Protocol):
    """A compiled subscription, handed to the store's read path (RocketMQ's MessageFilter).

    ``is_matched_by_consume_queue`` is the cheap check on a consume-queue entry's tags code;
    ``is_matched_by_commit_log`` the full check on the stored record (SQL92 reads its properties).
    """

    def is_matched_by_consume_queue(self, tags_code: int) -> bool: ...

    def is_matched_by_commit_log(self, record: memoryview) -> bool: ...


@runtime_checkable
class FlushPolicy(Protocol):
    """How the store makes appended bytes durable (ASYNC_FLUSH interval flush or SYNC_FLUSH group commit)."""

    async def run(self, target: Any, *, task_status: Any = ...) -> None: ...

    async def wait_flushed(self, target: Any, offset: int, timeout: float) -> bool: ...


@runtime_checkable
class Replicator(Protocol):
    """Ships appended commit-log bytes to slaves; the send path awaits it for SYNC_MASTER."""

    async def wait_replicated(self, end_offset: int, timeout: float) -> Any: ...


@runtime_checkable
class DelayScheduler(Protocol):
    """Redirects a message that must be delivered later (DELAY levels, timer) and delivers it when due."""

    property_keys: frozenset[str]

    def redirect(self, record: Any) -> Any | None:
        """The record to store instead, None to store it unchanged; ValueError for a bad property value."""
        ...


class TransactionDecision(enum.IntEnum):
    """Outcome of a transaction check; values are the END_TRANSACTION commitOrRollback codes (spec 3.6)."""

    UNKNOWN = 0
    COMMIT = 8
    ROLLBACK = 12
