"""Server and client over real sockets on 127.0.0.1."""

from __future__ import annotations

import logging
import socket

import pytest
import trio

from pyrmq.remoting import (
    BlockingRemotingClient,
    RemotingClient,
    RemotingClosed,
    RemotingCommand,
    RemotingCommandError,
    RemotingConnectError,
    RemotingServer,
    RemotingTimeout,
    RequestCode,
    ResponseCode,
)
from pyrmq.remoting.framing import FrameDecoder

ECHO = 1


async def echo(conn, req):
    return req.make_response(0, ext_fields={**req.ext_fields, "conn": str(conn.id)}, body=req.body)


async def fail(conn, req):
    raise ValueError("boom in processor")


class RawClient:
    """A minimal blocking-free raw socket peer, to observe exactly what the server writes."""

    def __init__(self, sock: trio.socket.SocketType):
        self.sock = sock
        self.decoder = FrameDecoder()
        self.received: list[RemotingCommand] = []

    @classmethod
    async def connect(cls, addr: str) -> RawClient:
        host, port = addr.rsplit(":", 1)
        sock = trio.socket.socket()
        await sock.connect((host, int(port)))
        return cls(sock)

    async def send(self, *cmds: RemotingCommand) -> None:
        data = b"".join(c.encode() for c in cmds)
        while data:
            n = await self.sock.send(data)
            data = data[n:]

    async def receive(self, count: int, timeout: float = 10) -> list[RemotingCommand]:
        with trio.fail_after(timeout):
            while len(self.received) < count:
                data = await self.sock.recv(65536)
                if not data:
                    raise EOFError
                self.received += self.decoder.feed(data)
        out, self.received = self.received[:count], self.received[count:]
        return out


async def test_request_response(serve):
    server, addr = await serve({ECHO: echo})
    async with RemotingClient() as client:
        for ser in (0, 1):
            req = RemotingCommand.request(ECHO, {"k": "v", "n": 1}, b"payload", serialize_type=ser)
            resp = await client.invoke(addr, req)
            assert resp.is_response and resp.opaque == req.opaque and resp.code == 0
            assert resp.serialize_type == ser and resp.language == "JAVA" and resp.version == 409
            assert resp.ext_fields["k"] == "v" and resp.ext_fields["n"] == "1" and resp.body == b"payload"
        assert len(client.connections) == 1 and len(server.connections) == 1


async def test_oneway_gets_no_response(serve):
    seen = []

    async def record(conn, req):
        seen.append(req.opaque)
        return req.make_response(0)  # returned, but the request is oneway: never sent

    async def record_fail(conn, req):
        seen.append(req.opaque)
        raise RuntimeError("not even errors are answered")

    server, addr = await serve({ECHO: echo, 2: record, 3: record_fail})
    raw = await RawClient.connect(addr)
    oneways = [RemotingCommand.request(c, oneway=True) for c in (2, 3, 999)]
    last = RemotingCommand.request(ECHO)
    await raw.send(*oneways, last)
    (resp,) = await raw.receive(1)
    assert resp.opaque == last.opaque
    assert seen == [oneways[0].opaque, oneways[1].opaque]
    with trio.move_on_after(0.1):
        await raw.receive(1)
        pytest.fail("a oneway request was answered")


async def test_invoke_oneway_from_client(serve):
    got = trio.Event()

    async def notify(conn, req):
        got.set()

    _, addr = await serve({RequestCode.UNLOCK_BATCH_MQ: notify})
    async with RemotingClient() as client:
        await client.invoke_oneway(addr, RemotingCommand.request(RequestCode.UNLOCK_BATCH_MQ))
        with trio.fail_after(5):
            await got.wait()


async def test_pipelining_1000_concurrent_invokes(serve):
    _, addr = await serve({ECHO: echo})
    results = {}
    async with RemotingClient() as client:

        async def one(i):
            resp = await client.invoke(addr, RemotingCommand.request(ECHO, {"i": str(i)}, str(i).encode() * 10))
            results[i] = resp

        async with trio.open_nursery() as nursery:
            for i in range(1000):
                nursery.start_soon(one, i)
        assert len(client.connections) == 1
    assert sorted(results) == list(range(1000))
    assert all(r.ext_fields["i"] == str(i) and r.body == str(i).encode() * 10 for i, r in results.items())
    assert len({r.ext_fields["conn"] for r in results.values()}) == 1


async def test_unknown_code(serve):
    _, addr = await serve({ECHO: echo})
    async with RemotingClient() as client:
        resp = await client.invoke(addr, RemotingCommand.request(4242))
        assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        assert resp.remark == " request type 4242 not supported"
        with pytest.raises(RemotingCommandError) as info:
            await client.invoke_checked(addr, RemotingCommand.request(4242))
        assert info.value.code == 3 and "4242" in info.value.remark


async def test_unknown_code_unanswered_like_the_name_server(serve, slow_autojump_clock):
    _, addr = await serve({ECHO: echo}, respond_unknown_code=False)
    async with RemotingClient() as client:
        with pytest.raises(RemotingTimeout):
            await client.invoke(addr, RemotingCommand.request(4242), timeout=3.0)
        assert (await client.invoke(addr, RemotingCommand.request(ECHO))).code == 0


async def test_processor_exception_is_system_error(serve, caplog):
    _, addr = await serve({ECHO: echo, 2: fail})
    async with RemotingClient() as client:
        resp = await client.invoke(addr, RemotingCommand.request(2))
        assert resp.code == ResponseCode.SYSTEM_ERROR and "boom in processor" in resp.remark
        assert (await client.invoke(addr, RemotingCommand.request(ECHO))).code == 0  # connection unaffected
    assert "processor for code 2" in caplog.text


async def test_header_error_becomes_system_error(serve):
    from pyrmq.remoting.headers import PullMessageRequestHeader

    async def pull(conn, req):
        PullMessageRequestHeader.from_ext_fields(req.ext_fields)

    _, addr = await serve({RequestCode.PULL_MESSAGE: pull})
    async with RemotingClient() as client:
        resp = await client.invoke(addr, RemotingCommand.request(RequestCode.PULL_MESSAGE, {"topic": "T"}))
        assert resp.code == 1 and "consumerGroup" in resp.remark


async def test_deferred_response_via_send_response(serve):
    release = trio.Event()
    connections = []

    async def long_poll(conn, req):
        async def answer_later():
            await release.wait()
            assert conn.in_flight == 1
            await conn.send_response(req.make_response(ResponseCode.PULL_NOT_FOUND, "held"))

        connections.append(conn)
        conn.start_soon(answer_later)
        return None

    _, addr = await serve({RequestCode.PULL_MESSAGE: long_poll, ECHO: echo})
    async with RemotingClient() as client:
        async with trio.open_nursery() as nursery:
            result = {}

            async def pull():
                result["pull"] = await client.invoke(addr, RemotingCommand.request(RequestCode.PULL_MESSAGE))

            nursery.start_soon(pull)
            with trio.fail_after(5):
                while not connections:
                    await trio.sleep(0.001)
            # the held pull does not block other requests on the same connection
            assert (await client.invoke(addr, RemotingCommand.request(ECHO))).code == 0
            assert "pull" not in result and connections[0].in_flight == 1
            release.set()
        assert result["pull"].code == ResponseCode.PULL_NOT_FOUND and result["pull"].remark == "held"
        assert connections[0].in_flight == 0


async def test_list_body_response_is_sent_as_pieces(serve):
    records = [bytes([i]) * (1000 + i) for i in range(40)]

    async def pull(conn, req):
        return req.make_response(0, body=[memoryview(r) for r in records])

    _, addr = await serve({RequestCode.PULL_MESSAGE: pull})
    async with RemotingClient() as client:
        resp = await client.invoke(addr, RemotingCommand.request(RequestCode.PULL_MESSAGE))
        assert resp.body == b"".join(records)


async def test_large_bodies_both_ways(serve):
    _, addr = await serve({ECHO: echo})
    body = bytes(range(256)) * 32768  # 8 MiB
    async with RemotingClient() as client:
        resp = await client.invoke(addr, RemotingCommand.request(ECHO, body=body), timeout=30)
        assert resp.body == body


async def test_server_initiated_requests_reach_client_handlers(serve):
    channels = []
    notified = trio.Event()
    checked = []

    async def heartbeat(conn, req):
        conn.attributes["clientID"] = req.ext_fields["clientID"]
        channels.append(conn)
        return req.make_response(0)

    async def on_notify(conn, req):
        assert req.is_oneway and req.ext_fields == {"consumerGroup": "g1"}
        notified.set()

    async def on_check(conn, req):
        checked.append(req.body)
        return req.make_response(0, ext_fields={"seen": req.ext_fields["msgId"]})

    handlers = {RequestCode.NOTIFY_CONSUMER_IDS_CHANGED: on_notify, RequestCode.CHECK_TRANSACTION_STATE: on_check}
    _, addr = await serve({RequestCode.HEART_BEAT: heartbeat})
    async with RemotingClient(request_handlers=handlers) as client:
        await client.invoke(addr, RemotingCommand.request(RequestCode.HEART_BEAT, {"clientID": "c1"}))
        (channel,) = channels
        assert channel.attributes["clientID"] == "c1"
        await channel.invoke_oneway(
            RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": "g1"}))
        with trio.fail_after(5):
            await notified.wait()
        # a ROCKETMQ-serialised request from the server is still sent as JSON (spec 1.5)
        req = RemotingCommand.request(RequestCode.CHECK_TRANSACTION_STATE, {"msgId": "M1"}, b"msg",
                                      serialize_type=1)
        resp = await channel.invoke(req, timeout=3)
        assert req.serialize_type == 0
        assert resp.code == 0 and resp.ext_fields["seen"] == "M1" and checked == [b"msg"]
        # a code the client has no handler for
        resp = await channel.invoke(RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO), timeout=3)
        assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED


async def test_open_close_callbacks(serve):
    opened, closed = [], []
    server, addr = await serve({ECHO: echo}, on_open=opened.append, on_close=closed.append)
    async with RemotingClient() as client:
        await client.invoke(addr, RemotingCommand.request(ECHO))
        assert len(opened) == 1 and not closed
        (conn,) = server.connections
        assert conn is opened[0] and conn.remote_address[0] == "127.0.0.1"
        assert conn.local_address[1] == int(addr.rsplit(":", 1)[1])
    with trio.fail_after(5):
        while not closed:
            await trio.sleep(0.01)
    assert closed == opened and not server.connections


async def test_backpressure_and_overload(serve):
    held = []
    calls = []

    async def hold(conn, req):
        calls.append(req.opaque)
        held.append((conn, req))
        return None

    server, addr = await serve({ECHO: hold}, max_in_flight=2)
    raw = await RawClient.connect(addr)
    first = [RemotingCommand.request(ECHO) for _ in range(2)]
    await raw.send(*first)
    with trio.fail_after(5):
        while len(calls) < 2:
            await trio.sleep(0.01)
    # at the bound the server stops reading: a request sent now is not processed
    late = RemotingCommand.request(ECHO)
    await raw.send(late)
    await trio.sleep(0.1)
    assert len(calls) == 2
    conn, req = held.pop(0)
    await conn.send_response(req.make_response(0))
    with trio.fail_after(5):
        while len(calls) < 3:
            await trio.sleep(0.01)
    assert calls[2] == late.opaque
    (resp,) = await raw.receive(1)
    assert resp.opaque == first[0].opaque


async def test_frames_read_beyond_the_bound_get_overload(serve):
    held = []
    peak = []

    async def hold(conn, req):
        held.append((conn, req))
        peak.append(conn.in_flight)
        return None

    _, addr = await serve({ECHO: hold}, max_in_flight=2)
    raw = await RawClient.connect(addr)
    burst = [RemotingCommand.request(ECHO) for _ in range(6)]
    await raw.send(*burst)  # one small write: read by the server as one chunk
    answers: list[RemotingCommand] = []
    with trio.fail_after(5):
        while len(answers) < len(burst):
            if held:
                conn, req = held.pop(0)
                await conn.send_response(req.make_response(0))
            else:
                with trio.move_on_after(0.05):
                    answers += await raw.receive(1)
    assert sorted(a.opaque for a in answers) == sorted(b.opaque for b in burst)
    busy = [a for a in answers if a.code == ResponseCode.SYSTEM_BUSY]
    assert busy and all(a.remark.startswith("[OVERLOAD]") for a in busy)
    assert all(a.code in (0, 2) for a in answers)
    assert max(peak) < 2  # never more than max_in_flight requests held at once


async def test_malformed_frame_closes_only_that_connection(serve, caplog):
    caplog.set_level(logging.WARNING, logger="pyrmq.remoting")
    closed = []
    _, addr = await serve({ECHO: echo}, on_close=closed.append)
    async with RemotingClient() as client:
        assert (await client.invoke(addr, RemotingCommand.request(ECHO))).code == 0
        raw = await RawClient.connect(addr)
        await raw.sock.send(b"\x7f\xff\xff\xff\x00\x00\x00\x10" + b"x" * 16)  # a 2 GiB frame
        with trio.fail_after(5):
            assert await raw.sock.recv(10) == b""  # closed by the server
        assert "exceeds the maximum" in caplog.text
        assert len(closed) == 1
        assert (await client.invoke(addr, RemotingCommand.request(ECHO))).code == 0


async def test_processor_may_close_its_connection(serve):
    async def kick(conn, req):
        conn.close("kicked")

    _, addr = await serve({ECHO: kick})
    async with RemotingClient() as client:
        with pytest.raises(RemotingClosed):
            await client.invoke(addr, RemotingCommand.request(ECHO))


async def test_connect_refused():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    async with RemotingClient() as client:
        with pytest.raises(RemotingConnectError) as info:
            await client.invoke(f"127.0.0.1:{port}", RemotingCommand.request(ECHO))
        assert info.value.address == f"127.0.0.1:{port}"
        with pytest.raises(RemotingConnectError):
            await client.invoke("nonsense", RemotingCommand.request(ECHO))


async def test_client_timeout_keeps_connection_usable(serve, slow_autojump_clock):
    async def never(conn, req):
        return None

    _, addr = await serve({ECHO: echo, 2: never})
    async with RemotingClient() as client:
        start = trio.current_time()
        with pytest.raises(RemotingTimeout) as info:
            await client.invoke(addr, RemotingCommand.request(2), timeout=3.0)
        assert trio.current_time() - start >= 3.0
        assert info.value.address == addr and info.value.code == 2
        assert (await client.invoke(addr, RemotingCommand.request(ECHO))).code == 0
        conn = client.connections[addr]
        assert conn.pending_invokes == 0


async def test_idle_connections_are_closed(serve, slow_autojump_clock):
    closed = []
    server, addr = await serve({ECHO: echo}, idle_timeout=120.0, on_close=closed.append)
    async with RemotingClient() as client:
        await client.invoke(addr, RemotingCommand.request(ECHO))
        await trio.sleep(100)
        assert not closed
        await client.invoke(addr, RemotingCommand.request(ECHO))  # activity resets the clock
        await trio.sleep(100)
        assert not closed
        await trio.sleep(100)
        assert len(closed) == 1 and not server.connections
        # the client notices and reconnects on the next invoke
        assert (await client.invoke(addr, RemotingCommand.request(ECHO))).code == 0
        assert len(server.connections) == 1


async def test_reconnect_after_server_restart(nursery, slow_autojump_clock):
    server = RemotingServer({ECHO: echo})
    port = await nursery.start(server.run)
    addr = f"127.0.0.1:{port}"
    async with RemotingClient(connect_timeout=1.0) as client:
        first = await client.invoke(addr, RemotingCommand.request(ECHO))
        server.stop()
        with trio.fail_after(5):
            while client.connections:
                await trio.sleep(0.01)
        with pytest.raises((RemotingConnectError, RemotingClosed)):
            await client.invoke(addr, RemotingCommand.request(ECHO))
        server2 = RemotingServer({ECHO: echo}, port=port)
        assert await nursery.start(server2.run) == port
        second = await client.invoke(addr, RemotingCommand.request(ECHO))
        assert first.code == second.code == 0
        assert first.ext_fields["conn"] != second.ext_fields["conn"]
        server2.stop()


async def test_pending_invokes_fail_when_server_goes_away(nursery):
    entered = trio.Event()

    async def stall(conn, req):
        entered.set()
        await trio.sleep_forever()

    server = RemotingServer({ECHO: stall})
    port = await nursery.start(server.run)
    async with RemotingClient() as client:
        async with trio.open_nursery() as inner:
            async def call():
                with pytest.raises(RemotingClosed):
                    await client.invoke(f"127.0.0.1:{port}", RemotingCommand.request(ECHO), timeout=30)

            inner.start_soon(call)
            with trio.fail_after(5):
                await entered.wait()
            server.stop()


async def test_client_exceptions_in_body_are_not_wrapped():
    with pytest.raises(KeyError):
        async with RemotingClient():
            raise KeyError("mine")


async def test_client_run_in_a_nursery(serve, nursery):
    _, addr = await serve({ECHO: echo})
    client = await nursery.start(RemotingClient().run)
    assert (await client.invoke(addr, RemotingCommand.request(ECHO))).code == 0


async def test_blocking_facade_from_plain_threads(serve):
    _, addr = await serve({ECHO: echo, 2: fail})

    def work():
        with BlockingRemotingClient() as client:
            resp = client.invoke(addr, RemotingCommand.request(ECHO, {"x": "1"}, b"b"))
            client.invoke_oneway(addr, RemotingCommand.request(ECHO))
            with pytest.raises(RemotingCommandError):
                client.invoke_checked(addr, RemotingCommand.request(2))
            import threading

            results = []
            threads = [threading.Thread(target=lambda i=i: results.append(
                client.invoke(addr, RemotingCommand.request(ECHO, {"i": str(i)})).ext_fields["i"]))
                for i in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert sorted(results, key=int) == [str(i) for i in range(8)]
            return resp

    resp = await trio.to_thread.run_sync(work)
    assert resp.code == 0 and resp.ext_fields["x"] == "1" and resp.body == b"b"


def test_blocking_facade_after_close():
    client = BlockingRemotingClient()
    client.close()
    with pytest.raises(RemotingClosed):
        client.invoke("127.0.0.1:1", RemotingCommand.request(ECHO))
