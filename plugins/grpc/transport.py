"""gRPC over HTTP/2 on trio, with ``h2`` (sans-IO): one event loop, like ``remoting/``. Generic: knows paths and
bytes, not RocketMQ (the service is :mod:`pyrmq.plugins.grpc.service`).

Per connection: an ``H2Connection`` fed by a reader task, a writer task that sends what h2 queued (the reader waits
for it before reading on, so a peer that does not read stops being read: no unbounded buffers), and one task per
call. What the gRPC spec asks of a server, and what this does:

- **Requests**: ``POST`` with ``content-type: application/grpc[+proto]``; another content type gets HTTP 415, a path
  nobody serves gRPC ``UNIMPLEMENTED``. Messages are length-prefixed (flag byte + 4-byte length); a length above
  ``max_message_size`` is refused before it is buffered (``RESOURCE_EXHAUSTED``, that stream only). ``gzip`` /
  ``deflate`` messages (``grpc-encoding``) are inflated up to the same limit; a compressed flag without an encoding
  is ``INTERNAL``.
- **Deadlines**: ``grpc-timeout`` (``\\d{1,8}[HMSmun]``) becomes the call's trio deadline; when it passes the call is
  cancelled and answered ``DEADLINE_EXCEEDED``. A malformed value answers ``INTERNAL``.
- **Answers**: headers (``:status 200``, ``content-type application/grpc``) before the first message, then the
  messages, then trailers ``grpc-status`` (+ percent-encoded ``grpc-message``); an answer without message is one
  trailers-only HEADERS frame. A handler that raises answers ``INTERNAL`` with a fixed text (the exception is logged,
  never sent).
- **Flow control**: received data is acknowledged as it arrives (the per-message limit bounds memory); sends wait
  for window updates and go out in frames of at most the peer's ``MAX_FRAME_SIZE``.
- **Streams**: unary, server streaming (many messages, then trailers) and bidi (a handler reads with
  :meth:`Call.recv` while other tasks may :meth:`Call.send`). A client's ``RST_STREAM`` cancels its call.
- **Connection**: PINGs are acknowledged by h2; a malformed frame or HPACK block is a protocol error: GOAWAY with
  h2's error code, that connection closed, nothing else affected. A connection without calls for
  ``idle_timeout`` gets GOAWAY(NO_ERROR) (grpc-java's ``maxConnectionIdle``; the proxy's 120 s). At shutdown every
  connection gets GOAWAY and its calls are cancelled.
"""

from __future__ import annotations

import logging
import math
import re
import struct
import zlib
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote, unquote

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
import trio

log = logging.getLogger("pyrmq.grpc.transport")


class _Quiet:
    """hpack's module logger calls ``log.debug`` for every header it codes (about 50 calls a gRPC request, 8 % of
    the endpoint's CPU per call); what it would log is never wanted, so those calls go nowhere."""

    def debug(self, *args: object, **kwargs: object) -> None:
        pass


def _quiet_hpack() -> None:
    import hpack.hpack
    import hpack.table

    for module in (hpack.hpack, hpack.table):
        if isinstance(getattr(module, "log", None), logging.Logger):
            module.log = _Quiet()  # type: ignore[attr-defined]


_quiet_hpack()

# gRPC status codes (grpc/doc/statuscodes.md)
OK = 0
CANCELLED = 1
UNKNOWN = 2
INVALID_ARGUMENT = 3
DEADLINE_EXCEEDED = 4
RESOURCE_EXHAUSTED = 8
UNIMPLEMENTED = 12
INTERNAL = 13
UNAVAILABLE = 14
UNAUTHENTICATED = 16

_PREFIX = struct.Struct(">BI")
_OK_TRAILERS = [(b"grpc-status", b"0")]
_TIMEOUT = re.compile(rb"^(\d{1,8})([HMSmun])$")
_UNITS = {b"H": 3600.0, b"M": 60.0, b"S": 1.0, b"m": 1e-3, b"u": 1e-6, b"n": 1e-9}
#: what the proxy's grpc-java server advertises (measured), except the stream limit
DEFAULT_WINDOW = 1024 * 1024
MAX_HEADER_LIST = 8192
MAX_STREAMS = 4096
READ_SIZE = 65536
HIGH_WATER = 256 * 1024


class GrpcError(Exception):
    """End the call with gRPC status ``code`` and ``message`` (a text for the client: never an exception's)."""

    def __init__(self, code: int, message: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def parse_timeout(value: bytes) -> float:
    """``grpc-timeout`` in seconds; ValueError when malformed."""
    match = _TIMEOUT.match(value)
    if match is None:
        raise ValueError(f"malformed grpc-timeout {value!r}")
    return int(match.group(1)) * _UNITS[match.group(2)]


def encode_message(payload: bytes) -> bytes:
    return _PREFIX.pack(0, len(payload)) + payload


Handler = Callable[["Call"], Awaitable[None]]


class Call:
    """One RPC on a stream: what the client sent (path, metadata, messages) and the way back.

    ``metadata`` holds the request headers that are not pseudo-headers, names lower case, values as text (latin-1;
    ``-bin`` values stay base64 text). ``deadline`` is a trio time (``inf`` without ``grpc-timeout``).
    """

    __slots__ = ("conn", "stream_id", "path", "metadata", "deadline", "peer", "scope", "_buffer", "_messages",
                 "_ended", "_arrived", "_headers_sent", "_closed", "_send_lock", "_encoding", "attributes", "_error")

    def __init__(self, conn: GrpcConnection, stream_id: int, path: str, metadata: dict[str, str], deadline: float,
                 encoding: str | None) -> None:
        self.conn = conn
        self.stream_id = stream_id
        self.path = path
        self.metadata = metadata
        self.deadline = deadline
        self.peer = conn.peer
        self.scope: trio.CancelScope | None = None
        self._buffer = bytearray()
        self._messages: list[bytes] = []
        self._ended = False
        self._arrived = trio.Event()
        self._headers_sent = False
        self._closed = False
        self._send_lock = trio.Lock()
        self._encoding = encoding
        #: why the client's input was refused (too large, does not inflate): the call ends with it
        self._error: GrpcError | None = None
        #: per-call data the service keeps (the authenticated account, ...)
        self.attributes: dict[str, Any] = {}

    # -- input ---------------------------------------------------------------------------------------------

    def _data(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        limit = self.conn.server.max_message_size
        while len(buffer) >= 5:
            flag, length = _PREFIX.unpack_from(buffer)
            if length > limit:
                raise GrpcError(RESOURCE_EXHAUSTED, f"received message larger than max ({length} vs. {limit})")
            if len(buffer) < 5 + length:
                break
            payload = bytes(buffer[5 : 5 + length])
            del buffer[: 5 + length]
            if flag == 1:
                payload = self._inflate(payload, limit)
            elif flag:
                raise GrpcError(INTERNAL, f"message flag {flag} is neither 0 nor 1")
            self._messages.append(payload)
        self._arrived.set()

    def _inflate(self, payload: bytes, limit: int) -> bytes:
        encoding = self._encoding
        if encoding in (None, "identity"):
            raise GrpcError(INTERNAL, "compressed message without grpc-encoding")
        wbits = 31 if encoding == "gzip" else 15 if encoding == "deflate" else None
        if wbits is None:
            raise GrpcError(UNIMPLEMENTED, f"message encoding {encoding} is not supported (gzip, deflate, identity)")
        inflater = zlib.decompressobj(wbits)
        try:
            out = inflater.decompress(payload, limit + 1)
        except zlib.error:
            raise GrpcError(INTERNAL, f"the {encoding} message does not inflate") from None
        if len(out) > limit or inflater.unconsumed_tail:
            raise GrpcError(RESOURCE_EXHAUSTED, f"inflated message larger than max ({limit})")
        return out

    def _end(self) -> None:
        self._ended = True
        self._arrived.set()

    async def recv(self) -> bytes | None:
        """The next message from the client, or None once it half-closed its side."""
        if self._error is not None:
            raise self._error
        while not self._messages:
            if self._ended:
                if self._buffer:
                    raise GrpcError(INTERNAL, "the request ended inside a message")
                return None
            self._arrived = trio.Event()
            await self._arrived.wait()
            if self._error is not None:
                raise self._error
        return self._messages.pop(0)

    async def recv_one(self) -> bytes:
        """The single request message of a unary or server-streaming call."""
        while not self._ended:
            self._arrived = trio.Event()
            if self._ended:
                break
            await self._arrived.wait()
        if self._error is not None:
            raise self._error
        if self._buffer:
            raise GrpcError(INTERNAL, "the request ended inside a message")
        if len(self._messages) != 1:
            raise GrpcError(UNIMPLEMENTED if self._messages else INTERNAL,
                            "a unary call carries exactly one request message" if self._messages else
                            "the request has no message")
        return self._messages.pop()

    # -- output --------------------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    async def send(self, payload: bytes) -> None:
        """One message to the client (headers first if not yet sent). Raises ``trio.ClosedResourceError`` once the
        call is over."""
        if self._closed:
            raise trio.ClosedResourceError("the call is over")
        async with self._send_lock:
            conn = self.conn
            if not self._headers_sent:
                self._headers_sent = True
                conn.h2.send_headers(self.stream_id, conn.server.response_headers)
            await conn.send_data(self.stream_id, encode_message(payload))

    async def reply(self, payload: bytes) -> None:
        """The one answer of a unary call and its OK trailers, queued in one step (one write to the socket) when the
        flow-control windows allow, else as :meth:`send` then :meth:`finish`."""
        conn = self.conn
        framed = encode_message(payload)
        h2conn = conn.h2
        if (self._closed or self._headers_sent or self._send_lock.locked()
                or len(framed) > min(h2conn.local_flow_control_window(self.stream_id), h2conn.max_outbound_frame_size)):
            await self.send(payload)
            await self.finish(OK)
            return
        self._closed = self._headers_sent = True
        try:
            h2conn.send_headers(self.stream_id, conn.server.response_headers)
            h2conn.send_data(self.stream_id, framed)
            h2conn.send_headers(self.stream_id, _OK_TRAILERS, end_stream=True)
        except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError):
            return  # the client reset the stream meanwhile
        conn.wake_writer()

    async def finish(self, code: int = OK, message: str = "") -> None:
        """Trailers: ``grpc-status`` and ``grpc-message``; trailers-only when nothing was sent."""
        if self._closed:
            return
        async with self._send_lock:
            if self._closed:
                return
            self._closed = True
            conn = self.conn
            trailers = [(b"grpc-status", str(code).encode())]
            if message:
                trailers.append((b"grpc-message", quote(message, safe=" !\"#$&'()*+,-./:;<=>?@[\\]^_`{|}~").encode()))
            try:
                if self._headers_sent:
                    conn.h2.send_headers(self.stream_id, trailers, end_stream=True)
                else:
                    conn.h2.send_headers(self.stream_id, conn.server.response_headers + trailers, end_stream=True)
            except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError):
                return  # the client reset the stream meanwhile
            conn.wake_writer()


class PrefixedStream(trio.abc.Stream):
    """A stream whose first bytes were read already (to tell TLS from plaintext): they are received again first."""

    def __init__(self, stream: trio.abc.Stream, prefix: bytes) -> None:
        self.stream = stream
        self.prefix = prefix

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self.prefix:
            data, self.prefix = self.prefix, b""
            return data
        return await self.stream.receive_some(max_bytes)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.stream.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        await self.stream.aclose()


#: the first byte of a TLS record carrying a handshake (ClientHello)
TLS_HANDSHAKE = 0x16
TLS_MODES = ("permissive", "enforcing", "disabled")


class GrpcServer:
    """Serves ``handlers`` (``path -> async handler(call)``) on ``host:port``; ``port`` 0 takes a free one
    (:attr:`address` once bound).

    With an ``ssl_context`` the port speaks TLS (ALPN ``h2``) as RocketMQ 5.x's proxy does: ``permissive`` (its
    default) takes TLS and plaintext on the same port, told apart by the first byte of the connection (a TLS
    handshake record is 0x16, the HTTP/2 preface starts with ``P``); ``enforcing`` closes plaintext connections."""

    def __init__(self, handlers: dict[str, Handler], *, host: str = "127.0.0.1", port: int = 0,
                 max_message_size: int = 130 * 1024 * 1024, idle_timeout: float = 120.0,
                 unknown_method: Handler | None = None, name: str = "grpc", ssl_context: Any = None,
                 tls_mode: str = "permissive") -> None:
        self.handlers = handlers
        self.host = host
        self.port = port
        self.max_message_size = max_message_size
        self.idle_timeout = idle_timeout
        self.unknown_method = unknown_method
        self.name = name
        self.ssl_context = ssl_context if tls_mode != "disabled" else None
        self.tls_mode = tls_mode
        self.address = ""
        self.connections: set[GrpcConnection] = set()
        self.response_headers = [(b":status", b"200"), (b"content-type", b"application/grpc"),
                                 (b"grpc-accept-encoding", b"identity,deflate,gzip")]
        #: counters (tests, metrics)
        self.calls = 0
        self.protocol_errors = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            listeners = await trio.open_tcp_listeners(self.port, host=self.host)
        except OSError as exc:
            if self.port == 0:
                raise
            # another broker on this host (a slave beside its master, a test cluster) has the port: the endpoint is
            # published with the port it got, so routes still lead 5.x clients here; the ready line names it
            log.warning("gRPC: cannot listen on %s:%d (%s); using a free port", self.host, self.port, exc)
            listeners = await trio.open_tcp_listeners(0, host=self.host)
        sock = listeners[0].socket
        host, port = sock.getsockname()[:2]
        self.address = f"{host}:{port}"
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio.serve_listeners, self._serve, listeners)
                task_status.started()
        finally:
            for conn in list(self.connections):
                conn.goaway_now()

    async def _serve(self, socket_stream: trio.SocketStream) -> None:
        try:
            peer = socket_stream.socket.getpeername()
            peer_text = f"{peer[0]}:{peer[1]}"
        except OSError:
            peer_text = "?"
        stream: trio.abc.Stream = socket_stream
        if self.ssl_context is not None:
            with trio.move_on_after(10) as waited:
                try:
                    first = await socket_stream.receive_some(READ_SIZE)
                except (trio.BrokenResourceError, OSError):
                    first = b""
            if waited.cancelled_caught or not first:
                await socket_stream.aclose()
                return
            if first[0] == TLS_HANDSHAKE:
                tls = trio.SSLStream(PrefixedStream(socket_stream, first), self.ssl_context, server_side=True)
                with trio.move_on_after(10):
                    try:
                        await tls.do_handshake()
                    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                        pass
                    else:
                        stream = tls
                if stream is not tls:
                    log.info("gRPC connection from %s: TLS handshake failed or timed out", peer_text)
                    await socket_stream.aclose()
                    return
            elif self.tls_mode == "enforcing":
                log.info("gRPC connection from %s: plaintext refused (TLS enforcing)", peer_text)
                await socket_stream.aclose()
                return
            else:
                stream = PrefixedStream(socket_stream, first)
        conn = GrpcConnection(self, stream, peer_text)
        self.connections.add(conn)
        try:
            await conn.run()
        finally:
            self.connections.discard(conn)


class GrpcConnection:
    """One client connection: the h2 state machine, its reader and writer, the calls in flight."""

    def __init__(self, server: GrpcServer, stream: trio.abc.Stream, peer: str) -> None:
        self.server = server
        self.stream = stream
        self.peer = peer
        # what comes in is validated; what goes out is ours and already well-formed (lower case, no connection headers)
        config = h2.config.H2Configuration(client_side=False, header_encoding=None, validate_inbound_headers=True,
                                           validate_outbound_headers=False, normalize_outbound_headers=False)
        self.h2 = h2.connection.H2Connection(config=config)
        self.calls: dict[int, Call] = {}
        self._writer_wake = trio.Event()
        self._drained = trio.Event()
        #: bytes the reader took from h2 (its answers to the peer: SETTINGS ACK, PING ACK, WINDOW_UPDATE, resets)
        #: for the writer; above HIGH_WATER the reader waits for the writer, so a peer that does not read is not read
        self._queued: list[bytes] = []
        self._queued_bytes = 0
        self._windows: dict[int, trio.Event] = {}
        self._nursery: trio.Nursery | None = None
        self._closing = False
        self._last_active = trio.current_time()
        #: per-connection data the service keeps (authentication results by header value, ...)
        self.attributes: dict[str, Any] = {}

    # -- writer ----------------------------------------------------------------------------------------------

    def wake_writer(self) -> None:
        """Have the writer send what h2 queued (after a call's headers, data or trailers)."""
        self._writer_wake.set()

    def _take(self) -> bytes:
        data = self.h2.data_to_send()
        if self._queued:
            data = b"".join(self._queued) + data
            self._queued.clear()
            self._queued_bytes = 0
        return data

    async def _writer(self) -> None:
        while True:
            await self._writer_wake.wait()
            self._writer_wake = trio.Event()
            data = self._take()
            while data:
                await self.stream.send_all(data)
                data = self._take()
            self._drained.set()

    async def drain(self) -> None:
        """Wait until the writer sent everything queued so far."""
        self._drained = trio.Event()
        self._writer_wake.set()
        await self._drained.wait()

    async def send_data(self, stream_id: int, data: bytes) -> None:
        """``data`` on ``stream_id`` within the flow-control windows (waits for WINDOW_UPDATE as needed)."""
        h2conn = self.h2
        view = memoryview(data)
        while view:
            window = h2conn.local_flow_control_window(stream_id)
            if window <= 0:
                event = self._windows.get(stream_id)
                if event is None:
                    event = self._windows[stream_id] = trio.Event()
                self.wake_writer()
                await event.wait()
                continue
            size = min(window, h2conn.max_outbound_frame_size, len(view))
            h2conn.send_data(stream_id, view[:size].tobytes())
            view = view[size:]
        self.wake_writer()

    # -- reader ----------------------------------------------------------------------------------------------

    async def run(self) -> None:
        h2conn = self.h2
        h2conn.local_settings = h2.settings.Settings(client=False, initial_values={
            h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: MAX_STREAMS,
            h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: DEFAULT_WINDOW,
            h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: MAX_HEADER_LIST,
        })
        h2conn.initiate_connection()
        h2conn.increment_flow_control_window(16 * DEFAULT_WINDOW)
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._writer)
                nursery.start_soon(self._idle_watch)
                self.wake_writer()
                await self._read_loop()
                nursery.cancel_scope.cancel()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            for call in self.calls.values():
                if call.scope is not None:
                    call.scope.cancel()
            with trio.CancelScope(shield=True):
                await self.stream.aclose()

    async def _read_loop(self) -> None:
        h2conn = self.h2
        stream = self.stream
        while True:
            try:
                data = await stream.receive_some(READ_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                return
            if not data:
                return
            try:
                events = h2conn.receive_data(data)
            except h2.exceptions.ProtocolError as exc:
                # h2 queued a GOAWAY with the error code: send it, then close this connection only
                self.server.protocol_errors += 1
                log.info("gRPC connection from %s: HTTP/2 protocol error, closed: %s", self.peer, exc)
                await self._final_flush()
                return
            for event in events:
                self._event(event)
            out = h2conn.data_to_send()
            if out:
                self._queued.append(out)
                self._queued_bytes += len(out)
                self._writer_wake.set()
            if self._queued_bytes > HIGH_WATER:
                await self.drain()  # a peer that does not read is not read either
            if self._closing and not self.calls:
                await self._final_flush()
                return

    async def _final_flush(self) -> None:
        """Send what is queued (a GOAWAY) through the writer, for at most a second."""
        with trio.move_on_after(1):
            await self.drain()

    def _event(self, event: h2.events.Event) -> None:
        kind = type(event)
        if kind is h2.events.RequestReceived:
            self._request(event)  # type: ignore[arg-type]
        elif kind is h2.events.DataReceived:
            self._data_received(event)  # type: ignore[arg-type]
        elif kind is h2.events.StreamEnded:
            call = self.calls.get(event.stream_id)  # type: ignore[attr-defined]
            if call is not None:
                call._end()
        elif kind is h2.events.StreamReset:
            self._reset(event.stream_id)  # type: ignore[attr-defined]
        elif kind is h2.events.WindowUpdated:
            stream_id = event.stream_id  # type: ignore[attr-defined]
            if stream_id == 0:
                windows, self._windows = self._windows, {}
                for waiting in windows.values():
                    waiting.set()
            else:
                one = self._windows.pop(stream_id, None)
                if one is not None:
                    one.set()
        elif kind is h2.events.RemoteSettingsChanged:
            windows, self._windows = self._windows, {}
            for waiting in windows.values():
                waiting.set()
        elif kind is h2.events.ConnectionTerminated:
            # the client opens no new stream; the calls it started go on and end with their trailers (a client's
            # graceful shutdown half-closes its streams and sends GOAWAY at once, then waits for those trailers)
            self._closing = True
            self._keep_streams_open()
            if not self.calls and self._nursery is not None:
                self._nursery.start_soon(self._close_after_flush)

    def _request(self, event: h2.events.RequestReceived) -> None:
        stream_id = event.stream_id
        self._last_active = trio.current_time()
        if self._closing:
            self._refuse(stream_id, h2.errors.ErrorCodes.REFUSED_STREAM)
            return
        method = path = content_type = b""
        timeout: bytes | None = None
        encoding: bytes | None = None
        metadata: dict[str, str] = {}
        for name, value in event.headers or ():
            if name[:1] == b":":
                if name == b":path":
                    path = value
                elif name == b":method":
                    method = value
                continue
            if name == b"content-type":
                content_type = value
            elif name == b"grpc-timeout":
                timeout = value
            elif name == b"grpc-encoding":
                encoding = value
            metadata[name.decode("latin-1")] = value.decode("latin-1")
        if method != b"POST":
            self._http_error(stream_id, b"405")
            return
        if not content_type.startswith(b"application/grpc"):
            self._http_error(stream_id, b"415")
            return
        text_path = path.decode("latin-1")
        handler = self.server.handlers.get(text_path) or self.server.unknown_method
        deadline = math.inf
        error: GrpcError | None = None
        if timeout is not None:
            try:
                deadline = trio.current_time() + parse_timeout(timeout)
            except ValueError:
                error = GrpcError(INTERNAL, "malformed grpc-timeout header")
        if handler is None and error is None:
            error = GrpcError(UNIMPLEMENTED, f"Method not found: {text_path.lstrip('/')}")
        call = Call(self, stream_id, text_path, metadata, deadline,
                    encoding.decode("latin-1") if encoding is not None else None)
        self.calls[stream_id] = call
        self.server.calls += 1
        assert self._nursery is not None
        self._nursery.start_soon(self._run_call, call, handler, error)

    def _http_error(self, stream_id: int, status: bytes) -> None:
        try:
            self.h2.send_headers(stream_id, [(b":status", status)], end_stream=True)
        except h2.exceptions.ProtocolError:
            pass

    def _refuse(self, stream_id: int, code: int) -> None:
        try:
            self.h2.reset_stream(stream_id, code)
        except h2.exceptions.ProtocolError:
            pass

    def _data_received(self, event: h2.events.DataReceived) -> None:
        stream_id = event.stream_id
        length = event.flow_controlled_length
        try:
            if length:
                self.h2.acknowledge_received_data(length, stream_id)
        except h2.exceptions.ProtocolError:  # pragma: no cover - the stream closed meanwhile
            pass
        call = self.calls.get(stream_id)
        if call is None or call._closed or call._error is not None:
            return
        try:
            call._data(event.data or b"")
        except GrpcError as exc:
            # this stream only: the call ends with this status, what else it sends is dropped
            call._error = exc
            call._buffer.clear()
            call._messages.clear()
            call._end()
            if call.scope is not None:
                call.scope.cancel()

    def _reset(self, stream_id: int) -> None:
        call = self.calls.get(stream_id)
        if call is not None:
            call._closed = True
            call._end()
            if call.scope is not None:
                call.scope.cancel()
        waiting = self._windows.pop(stream_id, None)
        if waiting is not None:
            waiting.set()

    async def _run_call(self, call: Call, handler: Handler | None, error: GrpcError | None) -> None:
        try:
            if error is None and handler is not None:
                with trio.CancelScope(deadline=call.deadline) as scope:
                    call.scope = scope
                    try:
                        await handler(call)
                    except GrpcError as exc:
                        error = exc
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        pass
                    except Exception:  # noqa: BLE001 - a bug must not take the connection down; it is logged
                        log.exception("gRPC call %s from %s failed", call.path, self.peer)
                        error = GrpcError(INTERNAL, "internal error while serving the call (see the broker log)")
                if call._error is not None:
                    error = call._error
                elif scope.cancelled_caught and not call._closed:
                    if trio.current_time() >= call.deadline:
                        error = GrpcError(DEADLINE_EXCEEDED, "deadline exceeded")
                    elif self._closing:
                        error = GrpcError(UNAVAILABLE, "the server is shutting down")
                    else:
                        error = GrpcError(CANCELLED, "cancelled")
            if error is not None:
                await call.finish(error.code, error.message)
            else:
                await call.finish(OK)
            if not call._ended:
                # answered before the client finished sending (an error, a handler that needed less): grpc's
                # RST_STREAM(NO_ERROR) after the trailers tells it to stop
                self._refuse(call.stream_id, h2.errors.ErrorCodes.NO_ERROR)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            self.calls.pop(call.stream_id, None)
            self._windows.pop(call.stream_id, None)
            self._last_active = trio.current_time()
            self.wake_writer()
            if self._closing and not self.calls and self._nursery is not None:
                self._nursery.start_soon(self._close_after_flush)  # GOAWAY was sent or received: the last call ended

    # -- idle and shutdown -----------------------------------------------------------------------------------

    async def _idle_watch(self) -> None:
        idle = self.server.idle_timeout
        if idle <= 0:
            return
        while True:
            await trio.sleep(max(1.0, idle / 4))
            if not self.calls and trio.current_time() - self._last_active >= idle:
                self.goaway()
                return

    def goaway(self) -> None:
        """Tell the client no new call will be taken (GOAWAY NO_ERROR); the connection closes once its calls end."""
        if self._closing:
            return
        self._closing = True
        try:
            self.h2.close_connection(error_code=h2.errors.ErrorCodes.NO_ERROR)
        except h2.exceptions.ProtocolError:
            pass
        self._keep_streams_open()
        self.wake_writer()
        if not self.calls:
            # nothing in flight: close now (the reader may be waiting for bytes that will never come)
            if self._nursery is not None:
                self._nursery.start_soon(self._close_after_flush)

    def _keep_streams_open(self) -> None:
        """h2 closes its connection state machine on any GOAWAY, sent or received, and then refuses to send headers
        or data on any stream; HTTP/2 (RFC 9113 6.8) lets the streams already open finish. Back to open, so their
        answers and trailers still go out; new streams are refused by :meth:`_request` (``_closing``)."""
        machine = self.h2.state_machine
        if machine.state is h2.connection.ConnectionState.CLOSED:
            machine.state = h2.connection.ConnectionState.SERVER_OPEN

    async def _close_after_flush(self) -> None:
        with trio.move_on_after(1):
            await self.drain()
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    def goaway_now(self) -> None:
        """Shutdown: GOAWAY, cancel every call."""
        self.goaway()
        for call in self.calls.values():
            if call.scope is not None:
                call.scope.cancel()


def decode_grpc_message(value: str) -> str:
    """``grpc-message`` as sent (percent-encoded) -> text (tests, tools)."""
    return unquote(value)
