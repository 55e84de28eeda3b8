"""Hostile HTTP/2 + gRPC + protobuf input at a live broker's gRPC endpoint (plugins/grpc), generated with hypothesis:
random bytes after the connection preface, well-formed frames of every type with random flags, streams and payloads,
and gRPC requests of every MessagingService method whose headers, message prefix and protobuf bytes are valid,
mutated or random. Every example goes over its own TCP connection to a `pyrmq dev` subprocess. What must hold: the
process stays up, and well-formed calls on a fresh connection (QueryRoute, then a SendMessage) are answered OK after every batch of examples (CHAOS_FULL=1: 20,000 examples, else 300)."""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import hpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyrmq.plugins.grpc.schema import METHOD_TABLE, pb

from .harness import FULL, report

pytestmark = pytest.mark.chaos

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
EXAMPLES = 20_000 if FULL else 300
PATHS = sorted(METHOD_TABLE)
STATS = {"examples": 0, "bytes": 0, "goaway": 0, "health_checks": 0}


def frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream & 0x7FFFFFFF) + payload


def settings_frame() -> bytes:
    return frame(0x4, 0, 0, b"")


def request_headers(path: str, extra: list[tuple[str, str]] = ()) -> bytes:
    return hpack.Encoder().encode([(":method", "POST"), (":scheme", "http"), (":path", path), (":authority", "fuzz"),
                                   ("content-type", "application/grpc"), ("te", "trailers"),
                                   ("x-mq-client-id", "fuzz@1"), *extra])


def grpc_message(payload: bytes, flag: int = 0) -> bytes:
    return struct.pack(">BI", flag, len(payload)) + payload


def valid_send(topic: str, body: bytes, message_id: str) -> bytes:
    m = pb.Message()
    m.topic.name = topic
    m.body = body
    m.system_properties.message_id = message_id
    m.system_properties.message_type = pb.MessageType.NORMAL
    return pb.SendMessageRequest(messages=[m]).SerializeToString()


raw_frames = st.builds(frame, st.integers(0, 12), st.integers(0, 255), st.integers(0, 9), st.binary(max_size=64))
timeouts = st.sampled_from([[], [("grpc-timeout", "50m")], [("grpc-timeout", "x")], [("grpc-encoding", "gzip")]])


@st.composite
def grpc_calls(draw) -> bytes:
    path = draw(st.sampled_from(PATHS))
    stream = draw(st.sampled_from([1, 3, 5]))
    request_cls = METHOD_TABLE[path][1]
    if draw(st.booleans()):
        payload = draw(st.binary(max_size=200))
    else:
        base = bytearray(valid_send("FuzzTopic", b"x", "ID") if path.endswith("SendMessage") else request_cls().SerializeToString())
        for _ in range(draw(st.integers(0, 4))):
            if base:
                base[draw(st.integers(0, len(base) - 1))] = draw(st.integers(0, 255))
        payload = bytes(base) + draw(st.binary(max_size=16))
    message = grpc_message(payload, draw(st.sampled_from([0, 0, 0, 1, 2])))
    if draw(st.booleans()):
        message = message[: draw(st.integers(0, len(message)))]
    headers = request_headers(path, draw(timeouts))
    return frame(0x1, 0x4, stream, headers) + frame(0x0, draw(st.sampled_from([0, 1])), stream, message)


inputs = st.lists(st.one_of(raw_frames, grpc_calls(), st.binary(min_size=1, max_size=64)), min_size=1, max_size=6)


class Endpoint:
    """A `pyrmq dev` subprocess: its addresses from the ready line."""

    def __init__(self, tmp: Path) -> None:
        self.log = open(tmp / "dev.log", "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pyrmq", "dev", "--store-dir", str(tmp / "store"), "--no-dashboard",
             "--namesrv-port", "0", "--port", "0", "--set", "broker.grpcServerPort=0"],
            stdout=subprocess.PIPE, stderr=self.log)
        deadline = time.monotonic() + 60
        line = b""
        while b" on " not in line:
            assert time.monotonic() < deadline, "pyrmq dev did not start"
            line = self.proc.stdout.readline()
            assert line, f"pyrmq dev exited: {(tmp / 'dev.log').read_text()[-2000:]}"
        parts = dict(p.strip().split(" on ") for p in line.decode().split(":", 1)[1].split("(")[0].split(","))
        self.grpc, self.namesrv = parts["grpc"], parts["namesrv"]

    def connect(self) -> socket.socket:
        host, _, port = self.grpc.rpartition(":")
        return socket.create_connection((host, int(port)), timeout=5)

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def exchange(endpoint: Endpoint, data: bytes, wait: float = 0.1) -> bytes:
    sock = endpoint.connect()
    try:
        sock.sendall(PREFACE + settings_frame() + data)
        sock.settimeout(wait)
        got = b""
        try:
            while len(got) < 1 << 20:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                got += chunk
        except (TimeoutError, socket.timeout):
            pass
        except ConnectionResetError:
            pass
        return got
    finally:
        sock.close()


def unary(endpoint: Endpoint, rpc: str, request: bytes) -> bytes:
    """A well-formed call on a fresh connection; the first response message (fails when there is none)."""
    import h2.connection
    import h2.events

    conn = h2.connection.H2Connection()
    conn.initiate_connection()
    conn.send_headers(1, [(":method", "POST"), (":scheme", "http"), (":authority", "fuzz"),
                          (":path", f"/apache.rocketmq.v2.MessagingService/{rpc}"),
                          ("content-type", "application/grpc"), ("te", "trailers"), ("x-mq-client-id", "health@1")])
    conn.send_data(1, grpc_message(request), end_stream=True)
    sock = endpoint.connect()
    try:
        sock.sendall(conn.data_to_send())
        body = b""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            chunk = sock.recv(65536)
            assert chunk, "the endpoint closed a well-formed call's connection"
            for event in conn.receive_data(chunk):
                if isinstance(event, h2.events.DataReceived):
                    body += event.data
                if isinstance(event, h2.events.StreamEnded):
                    assert len(body) >= 5, "a well-formed call got no response message"
                    return body[5:]
            sock.sendall(conn.data_to_send())
        raise AssertionError("a well-formed call was not answered within 10 s")
    finally:
        sock.close()


def health(endpoint: Endpoint, n: int) -> None:
    assert endpoint.proc.poll() is None, "the broker died"
    route = pb.QueryRouteResponse.FromString(unary(endpoint, "QueryRoute", pb.QueryRouteRequest(
        topic=pb.Resource(name="FuzzTopic")).SerializeToString()))
    assert route.status.code == pb.Code.OK and route.message_queues
    sent = pb.SendMessageResponse.FromString(unary(endpoint, "SendMessage", valid_send("FuzzTopic", b"health", f"H{n}")))
    assert sent.status.code == pb.Code.OK, sent.status
    STATS["health_checks"] += 1


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("grpc-fuzz")
    ep = Endpoint(tmp)
    try:
        subprocess.run([sys.executable, "-m", "pyrmq", "admin", "topic", "create", "-n", ep.namesrv, "--topic",
                        "FuzzTopic", "-q", "2"], check=True, capture_output=True, timeout=60)
        yield ep
    finally:
        ep.close()


def test_fuzzed_http2_grpc_and_protobuf_input_leaves_the_broker_serving(endpoint):
    began = time.monotonic()

    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(inputs)
    def one(frames: list[bytes]) -> None:
        data = b"".join(frames)
        got = exchange(endpoint, data)
        STATS["examples"] += 1
        STATS["bytes"] += len(data)
        if b"\x07\x00\x00\x00\x00\x00" in got:  # a GOAWAY frame header on stream 0
            STATS["goaway"] += 1
        if STATS["examples"] % 50 == 0:
            health(endpoint, STATS["examples"])

    one()
    health(endpoint, -1)
    # a bug in a handler is answered INTERNAL and logged with its traceback: there must be none
    log = (endpoint.log.name and Path(endpoint.log.name).read_text(errors="replace"))
    assert "Traceback" not in log, log[-4000:]
    report("fuzz (hypothesis): gRPC endpoint over TCP", examples=STATS["examples"], bytes=STATS["bytes"],
           goaways=STATS["goaway"], health_checks_ok=STATS["health_checks"], seconds=f"{time.monotonic() - began:.0f}")
    assert STATS["examples"] >= EXAMPLES * 0.9
