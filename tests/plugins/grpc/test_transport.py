"""gRPC over HTTP/2 (plugins/grpc/transport.py) with handlers of the test's own: framing, trailers, deadlines,
limits, compression, flow control, resets, GOAWAY, on real sockets."""

from __future__ import annotations

import gzip
import zlib

import h2.events
import pytest
import trio

from pyrmq.plugins.grpc.transport import GrpcError, GrpcServer, parse_timeout
from rawclient import RawClient

P = "/test.Svc/"


def make_server(**kwargs) -> tuple[GrpcServer, dict]:
    seen: dict = {"cancelled": trio.Event()}

    async def echo(call):
        await call.send(await call.recv_one())

    async def stream(call):
        count = int(await call.recv_one())
        for i in range(count):
            await call.send(str(i).encode())

    async def bidi(call):
        while (data := await call.recv()) is not None:
            await call.send(data.upper())

    async def forever(call):
        await call.recv_one()
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            seen["cancelled"].set()
            raise

    async def boom(call):
        raise RuntimeError("secret internals")

    async def refuse(call):
        raise GrpcError(9, "not now")

    handlers = {P + "Echo": echo, P + "Stream": stream, P + "Bidi": bidi, P + "Forever": forever, P + "Boom": boom,
                P + "Refuse": refuse}
    return GrpcServer(handlers, **kwargs), seen


@pytest.fixture
async def server(nursery):
    async def start(**kwargs):
        srv, seen = make_server(**kwargs)
        await nursery.start(srv.run)
        return srv, seen

    return start


def test_grpc_timeout_units():
    assert parse_timeout(b"3010m") == pytest.approx(3.01)
    assert parse_timeout(b"8760H") == 8760 * 3600
    assert parse_timeout(b"5S") == 5 and parse_timeout(b"7u") == pytest.approx(7e-6)
    for bad in (b"", b"5", b"123456789S", b"1.5S", b"-1S", b"5s"):
        with pytest.raises(ValueError):
            parse_timeout(bad)


async def test_unary_server_streaming_and_bidi_calls(server, raw):
    srv, _ = await server()
    client = await raw(srv.address)
    answer = await client.call(P + "Echo", b"ping")
    assert answer.messages == [b"ping"] and answer.grpc_status == 0
    assert answer.headers[":status"] == "200" and answer.headers["content-type"] == "application/grpc"
    streamed = await client.call(P + "Stream", b"5")
    assert streamed.messages == [b"0", b"1", b"2", b"3", b"4"] and streamed.grpc_status == 0
    sid = await client.open(P + "Bidi")
    for i, word in enumerate([b"a", b"bc", b"def"]):
        await client.send(sid, word)
        assert await client.next_message(sid, i) == word.upper()
    await client.end(sid)
    with trio.fail_after(10):
        await client.answers[sid].done.wait()
    assert client.answers[sid].grpc_status == 0


async def test_errors_are_statuses_on_their_stream_and_never_exception_texts(server, raw):
    srv, _ = await server()
    client = await raw(srv.address)
    boom = await client.call(P + "Boom", b"")
    assert boom.grpc_status == 13 and "secret internals" not in boom.grpc_message and boom.messages == []
    refused = await client.call(P + "Refuse", b"")
    assert (refused.grpc_status, refused.grpc_message) == (9, "not now")
    missing = await client.call(P + "Nope", b"")
    assert missing.grpc_status == 12 and "test.Svc/Nope" in missing.grpc_message
    bad_timeout = await client.call(P + "Echo", b"x", timeout="soon")
    assert bad_timeout.grpc_status == 13 and "grpc-timeout" in bad_timeout.grpc_message
    sid = await client.open(P + "Echo", content_type="text/plain")
    await client.send(sid, b"x", end=True)
    with trio.fail_after(10):
        await client.answers[sid].done.wait()
    assert client.answers[sid].headers[":status"] == "415"
    two = await client.open(P + "Echo")
    await client.send(two, b"a")
    await client.send(two, b"b", end=True)
    with trio.fail_after(10):
        await client.answers[two].done.wait()
    assert client.answers[two].grpc_status == 12  # a unary call with two request messages
    # the connection is still good
    assert (await client.call(P + "Echo", b"still")).messages == [b"still"]


async def test_a_deadline_cancels_the_call_and_answers_deadline_exceeded(server, raw):
    srv, seen = await server()
    client = await raw(srv.address)
    answer = await client.call(P + "Forever", b"", timeout="300m")
    assert answer.grpc_status == 4 and answer.grpc_message == "deadline exceeded"
    assert seen["cancelled"].is_set()


async def test_a_client_reset_cancels_its_call_only(server, raw):
    srv, seen = await server()
    client = await raw(srv.address)
    sid = await client.open(P + "Forever")
    await client.send(sid, b"", end=True)
    with trio.fail_after(10):
        while not srv.connections or not next(iter(srv.connections)).calls:
            await trio.sleep(0.01)
    client.h2.reset_stream(sid)
    await client.flush()
    with trio.fail_after(10):
        await seen["cancelled"].wait()
    assert (await client.call(P + "Echo", b"next")).messages == [b"next"]


async def test_message_size_limit_is_enforced_before_buffering_and_compression_is_inflated(server, raw):
    srv, _ = await server(max_message_size=1000)
    client = await raw(srv.address)
    big = await client.call(P + "Echo", b"x" * 2000)
    assert big.grpc_status == 8 and "2000" in big.grpc_message
    zipped = await client.call(P + "Echo", b"y" * 900, gzip_body=True)
    assert zipped.messages == [b"y" * 900]
    bomb = await client.call(P + "Echo", b"z" * 5000, gzip_body=True)  # 5000 bytes once inflated
    assert bomb.grpc_status == 8
    sid = await client.open(P + "Echo")  # compressed flag, no grpc-encoding
    await client.send(sid, zlib.compress(b"q"), end=True, compressed=True)
    with trio.fail_after(10):
        await client.answers[sid].done.wait()
    assert client.answers[sid].grpc_status == 13
    assert gzip.decompress(gzip.compress(b"")) == b""
    assert (await client.call(P + "Echo", b"ok")).messages == [b"ok"]


async def test_large_messages_flow_both_ways_within_flow_control(server, raw):
    srv, _ = await server()
    client = await raw(srv.address)
    payload = bytes(range(256)) * (3 * 4096)  # 3 MiB: beyond every initial window
    answer = await client.call(P + "Echo", payload, wait=60)
    assert answer.grpc_status == 0 and answer.messages == [payload]


async def test_a_malformed_frame_closes_that_connection_only_with_goaway(server, raw, nursery):
    srv, _ = await server()
    good = await raw(srv.address)
    bad = await raw(srv.address)
    # a DATA frame on stream 0 is a connection error (RFC 9113 6.1)
    await bad.stream.send_all(b"\x00\x00\x04\x00\x00\x00\x00\x00\x00abcd")
    with trio.fail_after(10):
        await bad.closed.wait()
    assert bad.goaway is not None and bad.goaway.error_code != 0
    assert srv.protocol_errors == 1
    assert (await good.call(P + "Echo", b"fine")).messages == [b"fine"]


async def test_pings_are_answered_and_an_idle_connection_gets_goaway(server, raw):
    srv, _ = await server(idle_timeout=1.0)
    client = await raw(srv.address)
    acks = []
    original = client._event

    def spy(event):
        if isinstance(event, h2.events.PingAckReceived):
            acks.append(event.ping_data)
        original(event)

    client._event = spy
    client.h2.ping(b"12345678")
    await client.flush()
    assert (await client.call(P + "Echo", b"x")).messages == [b"x"]
    with trio.fail_after(15):
        await client.closed.wait()
    assert acks == [b"12345678"]
    assert client.goaway is not None and client.goaway.error_code == 0
