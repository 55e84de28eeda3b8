"""The remoting server: a trio TCP listener feeding ``Connection`` reader tasks (spec 1.1, 1.5).

    server = RemotingServer({RequestCode.HEART_BEAT: heartbeat, ...}, port=10911, on_open=..., on_close=...)
    port = await nursery.start(server.run)   # listening once this returns
    ...
    server.stop()                            # or cancel the enclosing scope

The processor table is a plain mapping read per received chunk, so the kernel may swap ``server.processors`` for a
new dict when its configuration changes. See ``connection.py`` for what a processor may do.
"""

from __future__ import annotations

import errno
import logging
import socket as _stdlib_socket
from collections.abc import Callable, Mapping, ValuesView

import trio

from .command import MAX_FRAME_SIZE, RemotingCommand
from .connection import Connection, Processor

__all__ = ["RemotingServer"]

log = logging.getLogger("pyrmq.remoting")

# accept() errors that mean "out of resources, try again later" (as trio.serve_listeners handles them)
_ACCEPT_CAPACITY_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS}


class RemotingServer:
    """Listens on ``host:port`` and serves each accepted socket with a ``Connection``.

    ``on_open(conn)`` / ``on_close(conn)`` are plain callables invoked when a connection is accepted / gone (the
    broker and name server use them for liveness); they must not block and their exceptions are logged.
    ``respond_unknown_code=False`` reproduces the Java name server, which never answers an unknown code.
    """

    def __init__(
        self,
        processors: Mapping[int, Processor],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        on_open: Callable[[Connection], None] | None = None,
        on_close: Callable[[Connection], None] | None = None,
        max_in_flight: int = 4096,
        idle_timeout: float | None = 120.0,
        respond_unknown_code: bool = True,
        max_frame_size: int = MAX_FRAME_SIZE,
        backlog: int = 1024,
        name: str = "remoting-server",
    ) -> None:
        self.processors = processors
        self.host = host
        self.requested_port = port
        self.port: int | None = None
        self.on_open = on_open
        self.on_close = on_close
        self.max_in_flight = max_in_flight
        self.idle_timeout = idle_timeout
        self.respond_unknown_code = respond_unknown_code
        self.max_frame_size = max_frame_size
        self.backlog = backlog
        self.name = name
        #: ``request_timer(request, response, elapsed_ns)`` after each processed request (rocketmq_rpc_latency), or None
        self.request_timer: Callable[[RemotingCommand, RemotingCommand | None, int], None] | None = None
        self._conns: dict[int, Connection] = {}
        self._scope: trio.CancelScope | None = None

    def __repr__(self) -> str:
        return f"<RemotingServer {self.name} {self.host}:{self.port or self.requested_port}>"

    @property
    def connections(self) -> ValuesView[Connection]:
        """Live view of the open connections (a dict values view; copy it before awaiting while iterating)."""
        return self._conns.values()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def stop(self) -> None:
        """Stop listening and close every connection (``run`` returns)."""
        if self._scope is not None:
            self._scope.cancel()

    async def run(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Bind, then ``task_status.started(port)`` and serve until cancelled or ``stop()``."""
        family = _stdlib_socket.AF_INET6 if ":" in self.host else _stdlib_socket.AF_INET
        listener = _stdlib_socket.socket(family, _stdlib_socket.SOCK_STREAM)
        try:
            listener.setsockopt(_stdlib_socket.SOL_SOCKET, _stdlib_socket.SO_REUSEADDR, 1)
            listener.bind((self.host, self.requested_port))
            listener.listen(self.backlog)
            listener.setblocking(False)
            self.port = listener.getsockname()[1]
            with trio.CancelScope() as self._scope:
                async with trio.open_nursery() as nursery:
                    if self.idle_timeout:
                        nursery.start_soon(self._close_idle)
                    log.info("%s listening on %s:%s", self.name, self.host, self.port)
                    task_status.started(self.port)
                    await self._accept_loop(listener, nursery)
        finally:
            trio.lowlevel.notify_closing(listener)
            listener.close()
            for conn in list(self._conns.values()):
                conn.close("server stopped")
            self._scope = None

    async def _accept_loop(self, listener: _stdlib_socket.socket, nursery: trio.Nursery) -> None:
        while True:
            try:
                sock, _ = listener.accept()
            except BlockingIOError:
                await trio.lowlevel.wait_readable(listener)
                continue
            except OSError as exc:
                if exc.errno in _ACCEPT_CAPACITY_ERRNOS:
                    log.error("%s: accept failed (%s); retrying in 100 ms", self.name, exc)
                    await trio.sleep(0.1)
                continue
            try:
                sock.setsockopt(_stdlib_socket.IPPROTO_TCP, _stdlib_socket.TCP_NODELAY, 1)
                conn = Connection(
                    sock,
                    self,
                    nursery,
                    server_side=True,
                    max_in_flight=self.max_in_flight,
                    respond_unknown_code=self.respond_unknown_code,
                    max_frame_size=self.max_frame_size,
                    on_close=self._connection_closed,
                )
            except OSError as exc:  # the peer is already gone (getpeername fails)
                log.debug("%s: dropping a connection that closed during accept: %s", self.name, exc)
                sock.close()
                continue
            self._conns[conn.id] = conn
            if self.on_open is not None:
                try:
                    self.on_open(conn)
                except Exception:
                    log.exception("%s: on_open failed for %s", self.name, conn)
            nursery.start_soon(conn.serve)
            await trio.lowlevel.checkpoint()  # a connection storm must not starve the others

    def _connection_closed(self, conn: Connection) -> None:
        self._conns.pop(conn.id, None)
        if self.on_close is not None:
            try:
                self.on_close(conn)
            except Exception:
                log.exception("%s: on_close failed for %s", self.name, conn)

    async def _close_idle(self) -> None:
        # Java closes a channel idle (no read, no write) for serverChannelMaxIdleTimeSeconds = 120.
        idle = self.idle_timeout
        assert idle
        interval = min(max(idle / 4, 0.01), 30.0)
        while True:
            await trio.sleep(interval)
            horizon = trio.current_time() - idle
            for conn in list(self._conns.values()):
                if conn.last_activity < horizon and not conn._writing:
                    log.info("%s: closing %s, idle for more than %g s", self.name, conn.address, idle)
                    conn.close(f"idle for more than {idle:g} s")
