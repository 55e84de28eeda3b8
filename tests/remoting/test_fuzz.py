"""Garbage thrown at a live server never disturbs a well-behaved client on another connection."""

from __future__ import annotations

import json
import logging
import random
import struct

import trio

from pyrmq.remoting import RemotingClient, RemotingCommand

ECHO = 1


async def echo(conn, req):
    return req.make_response(0, ext_fields=req.ext_fields, body=req.body)


def _prefix(total: int, word: int) -> bytes:
    return struct.pack(">II", total & 0xFFFFFFFF, word & 0xFFFFFFFF)


def _frame(header: bytes, body: bytes = b"", ser: int = 0) -> bytes:
    return _prefix(4 + len(header) + len(body), (ser << 24) | len(header)) + header + body


def garbage(rng: random.Random) -> bytes:
    """One hostile byte string: random, truncated, absurd lengths, bad JSON, bad binary headers."""
    good = RemotingCommand.request(ECHO, {"t": "x" * rng.randrange(50)}, rng.randbytes(rng.randrange(200))).encode()
    kind = rng.randrange(12)
    if kind == 0:
        return rng.randbytes(rng.randrange(1, 2000))
    if kind == 1:  # truncated good frame, then the peer goes away
        return good[:rng.randrange(1, len(good))]
    if kind == 2:  # absurd total length
        return _prefix(rng.choice([0xFFFFFFFF, 0x7FFFFFFF, 16 * 1024 * 1024 + 1]), 10) + rng.randbytes(30)
    if kind == 3:  # header length larger than the frame
        return _prefix(20, 0x00FFFFFF) + rng.randbytes(16)
    if kind == 4:  # total length too small to hold the header word
        return _prefix(rng.randrange(4), 0) + rng.randbytes(8)
    if kind == 5:  # invalid JSON header
        return _frame(rng.choice([b"{", b"{\"code\":", b"not json", b"[1,2]", b'{"code":"x"}', b"\xff\xfe\xfd",
                                  b'{"code":1,"extFields":5}', b'{"code":1,"flag":null}']))
    if kind == 6:  # JSON nested absurdly deep
        return _frame(b"[" * 100_000)
    if kind == 7:  # ROCKETMQ header with lying lengths
        return _frame(struct.pack(">hBhiii", 10, 0, 1, 1, 0, rng.randrange(-5, 5000)) + rng.randbytes(10), ser=1)
    if kind == 8:  # unknown serialize type
        return _frame(b'{"code":1}', ser=rng.randrange(2, 256))
    if kind == 9:  # good frames followed by junk
        return good * rng.randrange(1, 5) + rng.randbytes(rng.randrange(1, 64))
    if kind == 10:  # a JSON header with hostile but valid content: unknown code, huge numbers, odd types
        h = {"code": rng.choice([0, -1, 2**40, 4242]), "flag": rng.choice([0, 1, 2, 3]), "opaque": 2**62,
             "extFields": {"a": [1, {"b": None}], "c": 1e308, "d": False}, "remark": {"x": 1}, "language": 99}
        return _frame(json.dumps(h).encode(), rng.randbytes(rng.randrange(10)))
    return _prefix(100, 50) + rng.randbytes(rng.randrange(0, 40))  # announced frame never completes


async def test_fuzz_live_server(serve, caplog):
    caplog.set_level(logging.WARNING, logger="pyrmq.remoting")
    opened, closed = [], []
    server, addr = await serve({ECHO: echo}, on_open=opened.append, on_close=closed.append)
    host, port = addr.rsplit(":", 1)
    rng = random.Random(20261121)
    answered = []
    attacks = 300
    done = trio.Event()

    async def well_behaved(client: RemotingClient):
        i = 0
        while not done.is_set():
            i += 1
            body = str(i).encode() * 50
            resp = await client.invoke(addr, RemotingCommand.request(ECHO, {"i": str(i)}, body), timeout=10)
            assert resp.code == 0 and resp.ext_fields == {"i": str(i)} and resp.body == body
            answered.append(i)
            await trio.sleep(0)

    async def attacker(payloads: list[bytes]):
        for payload in payloads:
            sock = trio.socket.socket()
            try:
                await sock.connect((host, int(port)))
                await sock.send(payload)
                with trio.move_on_after(0.02):  # read what the server says, if anything, then leave
                    while await sock.recv(65536):
                        pass
            except OSError:
                pass  # the server closing on us mid-send is fine
            finally:
                sock.close()

    payloads = [garbage(rng) for _ in range(attacks)]
    async with RemotingClient() as client:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(well_behaved, client)
            async with trio.open_nursery() as attackers:
                for k in range(4):
                    attackers.start_soon(attacker, payloads[k::4])
            answered_during_attack = len(answered)
            done.set()
        # the good connection survived everything and still answers
        assert (await client.invoke(addr, RemotingCommand.request(ECHO, {"after": "1"}))).ext_fields == {"after": "1"}
        assert len([c for c in server.connections]) >= 1

    assert answered_during_attack > 0
    assert len(opened) >= attacks
    assert "closing connection from" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    # every attacker connection is gone once the attackers are
    with trio.fail_after(5):
        while len(server.connections) > 0:
            await trio.sleep(0.01)
    assert len(closed) == len(opened)
