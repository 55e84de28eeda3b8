"""FrameDecoder (sans-IO): any chunking of a byte stream yields the same commands; bad frames raise."""

from __future__ import annotations

import struct

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.errors import ProtocolError
from pyrmq.remoting.framing import FrameDecoder, split_frames

from .conftest import load_captures


def _commands(n: int) -> list[RemotingCommand]:
    return [
        RemotingCommand.request(10 + i % 3, {"topic": f"T{i}", "queueId": str(i % 4)}, bytes([i % 256]) * (i * 7),
                                serialize_type=i % 2)
        for i in range(n)
    ]


def test_many_frames_in_one_feed():
    cmds = _commands(50)
    stream = b"".join(c.encode() for c in cmds)
    dec = FrameDecoder()
    assert dec.feed(stream) == cmds
    assert dec.buffered == 0


def test_byte_by_byte():
    cmds = _commands(5)
    stream = b"".join(c.encode() for c in cmds)
    dec = FrameDecoder()
    got = []
    for i in range(len(stream)):
        got += dec.feed(stream[i:i + 1])
    assert got == cmds and dec.buffered == 0


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 20), st.lists(st.integers(1, 400), min_size=1, max_size=30))
def test_any_chunking(n, sizes):
    cmds = _commands(n)
    stream = b"".join(c.encode() for c in cmds)
    dec = FrameDecoder()
    got, pos, i = [], 0, 0
    while pos < len(stream):
        size = sizes[i % len(sizes)]
        got += dec.feed(memoryview(stream)[pos:pos + size])
        pos += size
        i += 1
    assert got == cmds


def test_large_frame_accumulates():
    body = bytes(range(256)) * 40_000  # ~10 MiB
    cmd = RemotingCommand.request(10, body=body)
    frame = cmd.encode()
    dec = FrameDecoder()
    got = []
    for pos in range(0, len(frame), 65536):
        got += dec.feed(frame[pos:pos + 65536])
    assert len(got) == 1 and got[0].body == body


def test_frame_over_the_maximum_is_rejected_from_its_prefix():
    dec = FrameDecoder()
    with pytest.raises(ProtocolError, match="exceeds"):
        dec.feed(struct.pack(">II", 16 * 1024 * 1024 + 1, 10))


def test_smaller_configured_maximum():
    dec = FrameDecoder(max_frame_size=100)
    with pytest.raises(ProtocolError):
        dec.feed(RemotingCommand.request(1, body=bytes(200)).encode())


@pytest.mark.parametrize("prefix", [
    struct.pack(">II", 3, 0),  # total shorter than the header-length word
    struct.pack(">II", 10, 50),  # header longer than the frame
    struct.pack(">II", 10, (9 << 24) | 2) + b"{}" + b"\x00" * 4,  # unknown serialize type
])
def test_malformed_prefixes(prefix):
    with pytest.raises(ProtocolError):
        FrameDecoder().feed(prefix + b"\x00" * 16)


def test_split_frames_of_captures():
    frames = [frame for _, frame, _ in load_captures()]
    assert split_frames(b"".join(frames) + b"\x00\x00") == frames


async def test_decoder_over_a_memory_stream():
    """The decoder behind a trio stream: sender writes frames in odd-sized pieces, receiver parses as it reads."""
    client, server = trio.testing.memory_stream_pair()
    cmds = _commands(100) + [RemotingCommand.decode(f) for _, f, _ in load_captures()]
    stream = b"".join(c.encode() for c in cmds)
    got: list[RemotingCommand] = []

    async def sender():
        for pos in range(0, len(stream), 777):
            await client.send_all(stream[pos:pos + 777])
        await client.aclose()

    async def receiver():
        dec = FrameDecoder()
        while data := await server.receive_some(65536):
            got.extend(dec.feed(data))
        assert dec.buffered == 0

    with trio.fail_after(10):  # a frame the decoder never completes would leave the receiver waiting
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sender)
            nursery.start_soon(receiver)
    assert got == cmds


async def test_memory_stream_request_response_loop():
    """A sans-IO echo 'server' on one end of a memory stream answers pipelined requests in order."""
    client, server = trio.testing.memory_stream_pair()
    requests = _commands(64)

    async def echo_server():
        dec = FrameDecoder()
        while data := await server.receive_some(65536):
            out = b"".join(r.make_response(0, ext_fields={"n": r.ext_fields["topic"]}).encode() for r in dec.feed(data))
            if out:
                await server.send_all(out)
        await server.aclose()

    with trio.fail_after(10):  # a response missing would leave the loop waiting
        async with trio.open_nursery() as nursery:
            nursery.start_soon(echo_server)
            await client.send_all(b"".join(r.encode() for r in requests))
            dec = FrameDecoder()
            responses: list[RemotingCommand] = []
            while len(responses) < len(requests):
                responses += dec.feed(await client.receive_some(65536))
            await client.aclose()
    assert [r.opaque for r in responses] == [r.opaque for r in requests]
    assert all(r.is_response and r.ext_fields["n"] == q.ext_fields["topic"] for r, q in zip(responses, requests))
    assert [r.serialize_type for r in responses] == [q.serialize_type for q in requests]
