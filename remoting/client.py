"""The remoting client: one reused connection per ``"host:port"``, pipelined invokes matched by opaque.

    async with RemotingClient(request_handlers={RequestCode.NOTIFY_CONSUMER_IDS_CHANGED: on_notify}) as client:
        response = await client.invoke("127.0.0.1:9876", RemotingCommand.request(105, {"topic": "T"}))
        if response.code != ResponseCode.SUCCESS: ...

The client owns a nursery (its connections' reader tasks live there), so use it as an async context manager inside
trio, or ``await nursery.start(client.run)`` to tie it to an existing nursery. A connection that fails is dropped
and the next invoke to that address opens a new one. Requests the server sends to us (CHECK_TRANSACTION_STATE,
NOTIFY_CONSUMER_IDS_CHANGED ... ) go to ``request_handlers[code]`` with the processor contract of the server.

Errors: ``RemotingConnectError`` (cannot connect), ``RemotingTimeout`` (no answer in time), ``RemotingClosed``
(connection lost while waiting). A response with a non-zero code is returned, not raised; ``invoke_checked``
raises ``RemotingCommandError(code, remark)`` instead.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import socket
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from types import TracebackType
from typing import AsyncIterator

import trio

from .command import MAX_FRAME_SIZE, RemotingCommand
from .connection import Connection, Processor
from .errors import RemotingClosed, RemotingCommandError, RemotingConnectError, RemotingTimeout

__all__ = ["RemotingClient", "parse_address"]

log = logging.getLogger("pyrmq.remoting")


def parse_address(addr: str) -> tuple[str, int]:
    """``"host:port"`` (or ``"[v6]:port"``) -> (host, port)."""
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise RemotingConnectError(addr, "address is not host:port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


async def open_socket(host: str, port: int) -> socket.socket:
    """A connected, non-blocking TCP socket with TCP_NODELAY (addresses tried in getaddrinfo order)."""
    infos = await trio.socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    error: OSError | None = None
    for family, type_, proto, _, sockaddr in infos:
        sock = socket.socket(family, type_, proto)
        try:
            sock.setblocking(False)
            err = sock.connect_ex(sockaddr)
            if err in (errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EAGAIN):
                await trio.lowlevel.wait_writable(sock)
                err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                raise OSError(err, os.strerror(err))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock
        except OSError as exc:
            sock.close()
            error = exc
        except BaseException:
            sock.close()
            raise
    raise error or OSError(f"no address for {host}")


class _ConnectAttempt:
    __slots__ = ("done", "conn", "reason")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.conn: Connection | None = None
        self.reason = ""


class RemotingClient:
    def __init__(
        self,
        *,
        request_handlers: Mapping[int, Processor] | None = None,
        connect_timeout: float = 3.0,
        max_frame_size: int = MAX_FRAME_SIZE,
        max_in_flight: int = 4096,
        name: str = "remoting-client",
        signer: Callable[[RemotingCommand], None] | None = None,
    ) -> None:
        self.processors: Mapping[int, Processor] = dict(request_handlers or {})
        self.connect_timeout = connect_timeout
        self.max_frame_size = max_frame_size
        self.max_in_flight = max_in_flight
        self.name = name
        #: signs every request sent (ACL: :class:`pyrmq.remoting.signing.RequestSigner`); None sends them as they are
        self.signer = signer
        self._conns: dict[str, Connection] = {}
        self._connecting: dict[str, _ConnectAttempt] = {}
        self._nursery: trio.Nursery | None = None
        self._cm: AbstractAsyncContextManager[RemotingClient] | None = None

    def __repr__(self) -> str:
        return f"<RemotingClient {self.name} {len(self._conns)} connections>"

    # ---- lifetime ---------------------------------------------------------------------------------------------

    @asynccontextmanager
    async def _lifetime(self) -> AsyncIterator[RemotingClient]:
        body_exc: BaseException | None = None
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            try:
                yield self
            except BaseException as exc:  # re-raised below, outside the nursery, so it is not wrapped in a group
                body_exc = exc
            finally:
                self._shutdown()
                nursery.cancel_scope.cancel()
        if body_exc is not None:
            raise body_exc

    async def __aenter__(self) -> RemotingClient:
        self._cm = self._lifetime()
        return await self._cm.__aenter__()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        cm, self._cm = self._cm, None
        assert cm is not None, "__aexit__ without __aenter__"
        return await cm.__aexit__(exc_type, exc, tb)

    async def run(self, *, task_status: trio.TaskStatus[RemotingClient] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled; ``task_status.started(self)`` once usable."""
        async with self._lifetime():
            task_status.started(self)
            await trio.sleep_forever()

    def _shutdown(self) -> None:
        for conn in list(self._conns.values()):
            conn.close("client closed")
        self._conns.clear()
        self._nursery = None

    # ---- connections ------------------------------------------------------------------------------------------

    @property
    def connections(self) -> Mapping[str, Connection]:
        return self._conns

    async def connection(self, addr: str) -> Connection:
        """The open connection to ``addr``, connecting first if needed (raises RemotingConnectError)."""
        conn = self._conns.get(addr)
        if conn is not None and not conn.poll_closed():
            return conn
        if self._nursery is None:
            raise RemotingClosed(addr, "client is not running")
        attempt = self._connecting.get(addr)
        if attempt is None:
            attempt = self._connecting[addr] = _ConnectAttempt()
            self._nursery.start_soon(self._connect, addr, attempt)
        await attempt.done.wait()
        if attempt.conn is None:
            raise RemotingConnectError(addr, attempt.reason)
        return attempt.conn

    async def _connect(self, addr: str, attempt: _ConnectAttempt) -> None:
        # Runs in the client's nursery so that a caller giving up (timeout) does not abort it for the others.
        try:
            host, port = parse_address(addr)
            sock = None
            with trio.move_on_after(self.connect_timeout):
                sock = await open_socket(host, port)
            if sock is None:
                attempt.reason = f"timeout after {self.connect_timeout:g} s"
                return
            nursery = self._nursery
            if nursery is None:
                sock.close()
                attempt.reason = "client closed"
                return
            conn = Connection(
                sock,
                self,
                nursery,
                server_side=False,
                max_in_flight=self.max_in_flight,
                max_frame_size=self.max_frame_size,
                on_close=functools.partial(self._connection_closed, addr),
            )
            conn.signer = self.signer
            self._conns[addr] = conn
            attempt.conn = conn
            nursery.start_soon(conn.serve)
        except RemotingConnectError as exc:
            attempt.reason = exc.reason
        except (OSError, ValueError) as exc:
            attempt.reason = str(exc) or repr(exc)
        except Exception as exc:  # never let a connect failure take the client's nursery down
            log.exception("%s: unexpected error connecting to %s", self.name, addr)
            attempt.reason = repr(exc)
        finally:
            if self._connecting.get(addr) is attempt:
                del self._connecting[addr]
            attempt.done.set()

    def _connection_closed(self, addr: str, conn: Connection) -> None:
        if self._conns.get(addr) is conn:
            del self._conns[addr]

    def close_connection(self, addr: str) -> None:
        conn = self._conns.pop(addr, None)
        if conn is not None:
            conn.close("closed by client")

    # ---- requests ---------------------------------------------------------------------------------------------

    async def _connection_until(self, addr: str, deadline: float, timeout: float, code: int) -> Connection:
        conn = self._conns.get(addr)
        if conn is not None and not conn.poll_closed():
            return conn
        conn = None
        with trio.move_on_at(deadline):
            conn = await self.connection(addr)
        if conn is None:
            raise RemotingTimeout(addr, timeout, code)
        return conn

    async def invoke(self, addr: str, request: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        """Send ``request`` to ``addr`` and return the response, whatever its code."""
        conn = self._conns.get(addr)
        if conn is None or conn.poll_closed():
            deadline = trio.current_time() + timeout
            conn = await self._connection_until(addr, deadline, timeout, request.code)
            timeout = max(deadline - trio.current_time(), 0.0)
        try:
            return await conn.invoke(request, timeout)
        except RemotingTimeout:
            raise RemotingTimeout(addr, timeout, request.code) from None

    async def invoke_checked(
        self, addr: str, request: RemotingCommand, timeout: float = 3.0, ok_codes: Iterable[int] = (0,)
    ) -> RemotingCommand:
        """``invoke``, raising ``RemotingCommandError(code, remark)`` unless the response code is in ok_codes."""
        response = await self.invoke(addr, request, timeout)
        if response.code not in ok_codes:
            raise RemotingCommandError(response.code, response.remark)
        return response

    async def invoke_oneway(self, addr: str, request: RemotingCommand, timeout: float = 3.0) -> None:
        """Send ``request`` flagged oneway; returns when it is handed to the socket (no response)."""
        deadline = trio.current_time() + timeout
        conn = await self._connection_until(addr, deadline, timeout, request.code)
        with trio.move_on_at(deadline):
            await conn.invoke_oneway(request)
            return
        raise RemotingTimeout(addr, timeout, request.code)
