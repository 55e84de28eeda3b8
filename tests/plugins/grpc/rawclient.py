"""A small gRPC client on trio + h2 for the tests: whatever a test wants on the wire, frame by frame if need be.

Not a product: a real client (the official 5.x ones) is what the e2e tests use; this one sends what they never
would (bad protobuf, no client id, a compressed message, a malformed frame) and reads every header and trailer.
"""

from __future__ import annotations

import gzip
import struct
from typing import Any
from urllib.parse import unquote

import h2.config
import h2.connection
import h2.events
import trio

SERVICE = "/apache.rocketmq.v2.MessagingService/"
DEFAULT_METADATA = {"x-mq-client-id": "raw-client@1", "x-mq-language": "PYTHON", "x-mq-client-version": "5.1.2",
                    "x-mq-protocol": "GRPC_V2"}


class Answer:
    """What came back on one stream: response headers, messages, trailers, or a reset."""

    def __init__(self) -> None:
        self.headers: dict[str, str] = {}
        self.trailers: dict[str, str] = {}
        self.messages: list[bytes] = []
        self.reset: int | None = None
        self.done = trio.Event()
        self.arrived = trio.Event()
        self._buffer = b""

    @property
    def grpc_status(self) -> int | None:
        value = self.trailers.get("grpc-status", self.headers.get("grpc-status"))
        return None if value is None else int(value)

    @property
    def grpc_message(self) -> str:
        return unquote(self.trailers.get("grpc-message", self.headers.get("grpc-message", "")))

    def parse(self, cls: Any, index: int = 0) -> Any:
        return cls.FromString(self.messages[index])


class RawClient:
    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="latin-1"))
        self.answers: dict[int, Answer] = {}
        self.goaway: h2.events.ConnectionTerminated | None = None
        self.closed = trio.Event()
        self._windows = trio.Event()
        self._send_lock = trio.Lock()

    @classmethod
    async def connect(cls, nursery: trio.Nursery, address: str) -> RawClient:
        host, _, port = address.rpartition(":")
        client = cls(await trio.open_tcp_stream(host, int(port)))
        client.h2.initiate_connection()
        await client.flush()
        nursery.start_soon(client._read)
        return client

    async def flush(self) -> None:
        async with self._send_lock:
            data = self.h2.data_to_send()
            if data:
                await self.stream.send_all(data)

    async def _read(self) -> None:
        try:
            while True:
                data = await self.stream.receive_some(65536)
                if not data:
                    break
                for event in self.h2.receive_data(data):
                    self._event(event)
                await self.flush()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            self.closed.set()
            for answer in self.answers.values():
                answer.done.set()
                answer.arrived.set()

    def _event(self, event: Any) -> None:
        answer = self.answers.get(getattr(event, "stream_id", 0))
        if isinstance(event, h2.events.ResponseReceived) and answer is not None:
            answer.headers = dict(event.headers)
        elif isinstance(event, h2.events.TrailersReceived) and answer is not None:
            answer.trailers = dict(event.headers)
        elif isinstance(event, h2.events.DataReceived) and answer is not None:
            self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            answer._buffer += event.data
            while len(answer._buffer) >= 5:
                _flag, length = struct.unpack(">BI", answer._buffer[:5])
                if len(answer._buffer) < 5 + length:
                    break
                answer.messages.append(answer._buffer[5 : 5 + length])
                answer._buffer = answer._buffer[5 + length :]
                answer.arrived.set()
        elif isinstance(event, h2.events.StreamEnded) and answer is not None:
            answer.done.set()
            answer.arrived.set()
        elif isinstance(event, h2.events.StreamReset) and answer is not None:
            answer.reset = event.error_code
            answer.done.set()
            answer.arrived.set()
        elif isinstance(event, h2.events.ConnectionTerminated):
            self.goaway = event
        elif isinstance(event, h2.events.WindowUpdated):
            self._windows.set()

    async def open(self, rpc: str, *, metadata: dict[str, str] | None = None, timeout: str | None = None,
                   content_type: str = "application/grpc", extra: list[tuple[str, str]] | None = None) -> int:
        stream_id = self.h2.get_next_available_stream_id()
        headers = [(":method", "POST"), (":scheme", "http"), (":path", rpc if rpc.startswith("/") else SERVICE + rpc),
                   (":authority", "pyrmq"), ("content-type", content_type), ("te", "trailers")]
        if timeout is not None:
            headers.append(("grpc-timeout", timeout))
        for k, v in {**DEFAULT_METADATA, **(metadata or {})}.items():
            if v is not None:
                headers.append((k, v))
        headers += extra or []
        self.answers[stream_id] = Answer()
        self.h2.send_headers(stream_id, headers)
        await self.flush()
        return stream_id

    async def send(self, stream_id: int, payload: bytes, *, end: bool = False, compressed: bool = False) -> None:
        data = struct.pack(">BI", 1 if compressed else 0, len(payload)) + payload
        while data:
            window = min(self.h2.local_flow_control_window(stream_id), self.h2.max_outbound_frame_size)
            if window <= 0:
                self._windows = trio.Event()
                await self._windows.wait()
                continue
            chunk, data = data[:window], data[window:]
            self.h2.send_data(stream_id, chunk, end_stream=end and not data)
            await self.flush()
        if end and not payload and False:  # pragma: no cover
            pass

    async def end(self, stream_id: int) -> None:
        self.h2.end_stream(stream_id)
        await self.flush()

    async def call(self, rpc: str, request: Any = b"", *, metadata: dict[str, str] | None = None,
                   timeout: str | None = "10S", gzip_body: bool = False, wait: float = 15) -> Answer:
        """A unary (or server-streaming) call: one message, end of stream, wait for the end of the answer."""
        payload = request if isinstance(request, bytes) else request.SerializeToString()
        if gzip_body:
            payload = gzip.compress(payload)
        extra = [("grpc-encoding", "gzip")] if gzip_body else None
        stream_id = await self.open(rpc, metadata=metadata, timeout=timeout, extra=extra)
        await self.send(stream_id, payload, end=True, compressed=gzip_body)
        answer = self.answers[stream_id]
        with trio.fail_after(wait):
            await answer.done.wait()
        return answer

    async def next_message(self, stream_id: int, index: int, wait: float = 15) -> bytes:
        answer = self.answers[stream_id]
        with trio.fail_after(wait):
            while len(answer.messages) <= index:
                if answer.done.is_set():
                    raise AssertionError(f"stream ended ({answer.grpc_status} {answer.grpc_message!r}) before message {index}")
                answer.arrived = trio.Event()
                await answer.arrived.wait()
        return answer.messages[index]

    async def aclose(self) -> None:
        await self.stream.aclose()
