"""What a send hands back and what send hooks see: :class:`SendFuture` (the outcome of an async send),
:class:`SendContext` and :class:`SendHook` (tracing around each attempt, like Java's SendMessageHook).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import attrs
import trio

from pyrmq.client.errors import ClientStateError
from pyrmq.client.message import Message, MessageQueue, SendResult

__all__ = ["SendContext", "SendHook", "SendFuture", "FunctionHook"]

log = logging.getLogger("pyrmq.client.producer")


@attrs.define
class SendContext:
    """What a send hook sees: one attempt of one send (``message`` is a list for a batch)."""

    producer_group: str
    message: Message | list[Message]
    message_queue: MessageQueue
    broker_addr: str
    mode: str  # SYNC, ASYNC or ONEWAY
    born_timestamp: int
    props: dict[str, Any] = attrs.Factory(dict)
    result: SendResult | None = None
    exception: BaseException | None = None
    elapsed_ms: float = 0.0


class SendHook:
    """Subclass (or duck-type) to trace sends: ``before_send`` runs before each attempt, ``after_send`` after it
    with ``result`` or ``exception`` set. Hooks run inline and must be quick; an exception in a hook is logged."""

    def before_send(self, context: SendContext) -> None:  # pragma: no cover - default
        pass

    def after_send(self, context: SendContext) -> None:  # pragma: no cover - default
        pass


class FunctionHook(SendHook):
    def __init__(self, before: Callable[[SendContext], None] | None, after: Callable[[SendContext], None] | None) -> None:
        self._before, self._after = before, after

    def before_send(self, context: SendContext) -> None:
        if self._before:
            self._before(context)

    def after_send(self, context: SendContext) -> None:
        if self._after:
            self._after(context)


class SendFuture:
    """The outcome of :meth:`Producer.send_async`: ``await future`` gives the SendResult (or raises)."""

    __slots__ = ("_result", "_error", "_done", "_event", "_callback")

    def __init__(self, callback: Callable[[SendResult | None, BaseException | None], None] | None = None) -> None:
        self._result: SendResult | None = None
        self._error: BaseException | None = None
        self._done = False
        self._event: trio.Event | None = None
        self._callback = callback

    def done(self) -> bool:
        return self._done

    def result(self) -> SendResult:
        if not self._done:
            raise ClientStateError("the send has not completed")
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    def exception(self) -> BaseException | None:
        return self._error

    def _finish(self, result: SendResult | None, error: BaseException | None) -> None:
        if self._done:
            return
        self._result, self._error, self._done = result, error, True
        if self._event is not None:
            self._event.set()
        if self._callback is not None:
            try:
                self._callback(result, error)
            except Exception:
                log.exception("send callback failed")

    async def wait(self) -> SendResult:
        if not self._done:
            if self._event is None:
                self._event = trio.Event()
            await self._event.wait()
        return self.result()

    def __await__(self) -> Any:
        return self.wait().__await__()
