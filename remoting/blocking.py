"""A blocking facade over ``RemotingClient`` for code that is not async (plain threads).

    with BlockingRemotingClient() as client:
        response = client.invoke("127.0.0.1:9876", RemotingCommand.request(105, {"topic": "T"}))

A private trio loop runs on a daemon thread; each call hops onto it with ``trio.from_thread``. Any number of
threads may call concurrently (their requests pipeline on the shared connections). Request handlers for
server-initiated requests are async processors and run on the loop thread. Do not call this facade from inside
the loop's own handlers (that would deadlock; ``RuntimeError`` is raised).
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TypeVar, TypeVarTuple, Unpack

import trio

from .client import RemotingClient
from .command import RemotingCommand
from .connection import Processor
from .errors import RemotingClosed

__all__ = ["BlockingRemotingClient"]

_R = TypeVar("_R")
_Ts = TypeVarTuple("_Ts")


class BlockingRemotingClient:
    def __init__(
        self,
        *,
        request_handlers: Mapping[int, Processor] | None = None,
        connect_timeout: float = 3.0,
        name: str = "pyrmq-remoting-client",
        signer: Callable[[RemotingCommand], None] | None = None,
    ) -> None:
        self._client = RemotingClient(
            request_handlers=request_handlers, connect_timeout=connect_timeout, name=name, signer=signer
        )
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._ready = threading.Event()
        self._startup_error: BaseException | None = None
        self._thread = threading.Thread(target=self._thread_main, name=name, daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._startup_error is not None:
            raise self._startup_error

    def _thread_main(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as exc:  # pragma: no cover - only if trio itself fails to start
            self._startup_error = exc
            self._ready.set()

    async def _main(self) -> None:
        async with self._client:
            self._token = trio.lowlevel.current_trio_token()
            self._stop = trio.Event()
            self._ready.set()
            await self._stop.wait()

    @property
    def closed(self) -> bool:
        return not self._thread.is_alive() or self._token is None

    def _run(self, fn: Callable[[Unpack[_Ts]], Awaitable[_R]], *args: Unpack[_Ts]) -> _R:
        if self._token is None:
            raise RemotingClosed("", "blocking client is closed")
        try:
            return trio.from_thread.run(fn, *args, trio_token=self._token)
        except trio.RunFinishedError:
            raise RemotingClosed("", "blocking client is closed") from None

    def invoke(self, addr: str, request: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        return self._run(self._client.invoke, addr, request, timeout)

    def invoke_checked(
        self, addr: str, request: RemotingCommand, timeout: float = 3.0, ok_codes: Iterable[int] = (0,)
    ) -> RemotingCommand:
        return self._run(self._client.invoke_checked, addr, request, timeout, tuple(ok_codes))

    def invoke_oneway(self, addr: str, request: RemotingCommand, timeout: float = 3.0) -> None:
        self._run(self._client.invoke_oneway, addr, request, timeout)

    def close_connection(self, addr: str) -> None:
        if self._token is not None:
            trio.from_thread.run_sync(self._client.close_connection, addr, trio_token=self._token)

    def close(self) -> None:
        token, self._token = self._token, None
        if token is not None and self._stop is not None:
            try:
                trio.from_thread.run_sync(self._stop.set, trio_token=token)
            except trio.RunFinishedError:
                pass
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=5.0)

    def __enter__(self) -> BlockingRemotingClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
