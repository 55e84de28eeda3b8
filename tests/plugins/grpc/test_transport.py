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


def goaway_frame(last_stream_id: int) -> bytes:
    """A GOAWAY(NO_ERROR) frame as a client's graceful shutdown sends it (built by hand: the test's own h2 would
    refuse to read the answers after sending one)."""
    return b"\x00\x00\x08\x07\x00\x00\x00\x00\x00" + last_stream_id.to_bytes(4, "big") + b"\x00\x00\x00\x00"


async def test_calls_open_at_the_clients_goaway_still_get_their_answers_and_trailers(server, raw):
    """A client shutting down (grpc-java's channel shutdown) half-closes its streams and sends GOAWAY at once; the
    streams already open must still end with their trailers (RFC 9113 6.8), or the client's awaitTermination waits
    forever."""
    srv, _ = await server()
    client = await raw(srv.address)
    bidi = await client.open(P + "Bidi")
    await client.send(bidi, b"a")
    assert await client.next_message(bidi, 0) == b"A"  # the handler waits in recv()
    unary = await client.open(P + "Echo")
    async with client._send_lock:  # the last message, the half-closes and GOAWAY in one write
        client.h2.send_data(unary, b"\x00\x00\x00\x00\x04last", end_stream=True)
        client.h2.end_stream(bidi)
        await client.stream.send_all(client.h2.data_to_send() + goaway_frame(unary))
    with trio.fail_after(10):
        await client.answers[bidi].done.wait()
        await client.answers[unary].done.wait()
    assert (client.answers[bidi].grpc_status, client.answers[bidi].reset) == (0, None)
    assert client.answers[unary].messages == [b"last"] and client.answers[unary].grpc_status == 0
    with trio.fail_after(10):
        await client.closed.wait()  # the server closes the connection once those calls ended
