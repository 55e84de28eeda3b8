"""A lone invoke on a client connection reads its own answer (the reader task lends it the socket): what a user sees
stays the same - answers, requests the server sends, timeouts, cancellation, a server going away.

Each test first makes the reader lend the socket (one invoke answered, nothing else pending) and checks that it did
(``conn._lent``), so the behaviour below is the one of an invoking task that reads."""

from __future__ import annotations

import pytest
import trio

from pyrmq.remoting import RemotingClient, RemotingClosed, RemotingCommand, RemotingServer, RemotingTimeout, RequestCode

ECHO = 1
NEVER = 2
ASKS_CLIENT = 3


async def echo(conn, req):
    return req.make_response(0, ext_fields=dict(req.ext_fields), body=req.body)


async def never(conn, req):
    return None


async def lent_connection(client: RemotingClient, addr: str):
    """Invoke until the connection's reader has lent the socket (the first answer goes through the reader)."""
    with trio.fail_after(10):
        while True:
            resp = await client.invoke(addr, RemotingCommand.request(ECHO, {"warm": "1"}))
            assert resp.code == 0
            conn = client.connections[addr]
            if conn._lent:
                return conn
            await trio.sleep(0.001)  # let the reader find nothing more to read


async def test_lone_invokes_get_their_own_answers(serve):
    _, addr = await serve({ECHO: echo})
    async with RemotingClient() as client:
        conn = await lent_connection(client, addr)
        for i in range(200):
            req = RemotingCommand.request(ECHO, {"i": str(i)}, str(i).encode() * 100)
            resp = await client.invoke(addr, req)
            assert resp.opaque == req.opaque and resp.ext_fields["i"] == str(i) and resp.body == str(i).encode() * 100
        assert client.connections[addr] is conn and conn.pending_invokes == 0


async def test_server_request_during_an_invoke_that_waits_for_it(serve):
    """The server asks the client (CHECK_TRANSACTION_STATE) before it answers the client's invoke: the invoking
    task reads that request and must hand it to the reader, or both would wait forever."""
    async def asks_client(conn, req):
        async def ask_then_answer():  # the server's reader reads the client's answer meanwhile
            check = await conn.invoke(
                RemotingCommand.request(RequestCode.CHECK_TRANSACTION_STATE, {"n": req.ext_fields["n"]}), timeout=5)
            await conn.send_response(req.make_response(0, ext_fields={"checked": check.ext_fields["seen"]}))

        conn.start_soon(ask_then_answer)
        return None

    async def on_check(conn, req):
        return req.make_response(0, ext_fields={"seen": req.ext_fields["n"]})

    _, addr = await serve({ECHO: echo, ASKS_CLIENT: asks_client})
    async with RemotingClient(request_handlers={RequestCode.CHECK_TRANSACTION_STATE: on_check}) as client:
        await lent_connection(client, addr)
        with trio.fail_after(10):
            for n in range(20):
                resp = await client.invoke(addr, RemotingCommand.request(ASKS_CLIENT, {"n": str(n)}), timeout=5)
                assert resp.code == 0 and resp.ext_fields["checked"] == str(n)
                # and the next plain invoke still gets its answer
                assert (await client.invoke(addr, RemotingCommand.request(ECHO, {"k": str(n)}))).ext_fields["k"] == str(n)


async def test_server_request_between_invokes_is_processed(serve):
    channels: list = []
    notified: list[str] = []
    got = trio.Event()

    async def register(conn, req):
        channels.append(conn)
        return req.make_response(0)

    async def on_notify(conn, req):
        notified.append(req.ext_fields["consumerGroup"])
        got.set()

    _, addr = await serve({ECHO: echo, RequestCode.HEART_BEAT: register})
    async with RemotingClient(request_handlers={RequestCode.NOTIFY_CONSUMER_IDS_CHANGED: on_notify}) as client:
        await client.invoke(addr, RemotingCommand.request(RequestCode.HEART_BEAT))
        await lent_connection(client, addr)
        (channel,) = channels
        # no invoke runs on the client now: the parked reader still reads the server's request
        await channel.invoke_oneway(RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": "g1"}))
        with trio.fail_after(10):
            await got.wait()
        assert notified == ["g1"]
        # a server request arriving together with answers while invokes keep running
        got = trio.Event()
        await channel.invoke_oneway(RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": "g2"}))
        with trio.fail_after(10):
            while not got.is_set():
                assert (await client.invoke(addr, RemotingCommand.request(ECHO))).code == 0
        assert notified == ["g1", "g2"]


async def test_a_server_request_sent_before_an_answer_is_handled_before_the_invoke_returns(nursery):
    """A server that writes a request (NOTIFY_CONSUMER_IDS_CHANGED) and then its answer in one write: the invoking
    task reads both, and returns only once the reader has handled the request, as when the reader reads them (what
    a caller saw before the socket was lent: a request that came first was handled first)."""
    from pyrmq.remoting.framing import FrameDecoder

    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]

    async def raw_server() -> None:
        conn, _ = await listener.accept()
        decoder = FrameDecoder()
        n = 0
        with conn:
            while data := await conn.recv(65536):
                for req in decoder.feed(data):
                    n += 1
                    notify = RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": f"g{n}"})
                    notify.flag |= 2  # oneway
                    answer = req.make_response(0)
                    answer.flag |= 1
                    await conn.send(notify.encode() + answer.encode())

    nursery.start_soon(raw_server)
    notified: list[str] = []

    async def on_notify(conn, req):
        notified.append(req.ext_fields["consumerGroup"])

    addr = f"127.0.0.1:{port}"
    async with RemotingClient(request_handlers={RequestCode.NOTIFY_CONSUMER_IDS_CHANGED: on_notify}) as client:
        with trio.fail_after(20):
            lent = 0
            for i in range(1, 201):
                assert (await client.invoke(addr, RemotingCommand.request(ECHO))).code == 0
                assert notified == [f"g{k}" for k in range(1, i + 1)], i
                lent += client.connections[addr]._lent
                await trio.sleep(0.001)  # let the reader lend the socket again
        assert lent > 0  # the invoking task did read (the case this test is about)
    listener.close()


async def test_concurrent_invokes_and_callbacks_while_lent(serve):
    _, addr = await serve({ECHO: echo})
    async with RemotingClient() as client:
        conn = await lent_connection(client, addr)
        results: dict[int, str] = {}
        called: list[str] = []

        async def one(i: int) -> None:
            resp = await client.invoke(addr, RemotingCommand.request(ECHO, {"i": str(i)}))
            results[i] = resp.ext_fields["i"]

        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                for i in range(300):
                    nursery.start_soon(one, i)
                    if i % 50 == 0:
                        conn.invoke_callback(RemotingCommand.request(ECHO, {"cb": str(i)}),
                                             lambda out: called.append(out.unwrap().ext_fields["cb"]))
                        await conn.flush()
            while len(called) < 6:
                await trio.sleep(0.01)
        assert results == {i: str(i) for i in range(300)}
        assert sorted(called, key=int) == [str(i) for i in range(0, 300, 50)]
        # back to one at a time: answered as before
        for i in range(20):
            assert (await client.invoke(addr, RemotingCommand.request(ECHO, {"i": str(i)}))).ext_fields["i"] == str(i)


async def test_lone_invoke_timeout_closes_the_connection_like_java(serve, slow_autojump_clock):
    """Java's client closes the channel when a sync invoke times out (clientCloseSocketIfTimeout, true by default);
    a lone invoke reading its own answer does the same. The next invoke opens a new connection."""
    _, addr = await serve({ECHO: echo, NEVER: never})
    async with RemotingClient() as client:
        conn = await lent_connection(client, addr)
        start = trio.current_time()
        with pytest.raises(RemotingTimeout) as info:
            await client.invoke(addr, RemotingCommand.request(NEVER), timeout=3.0)
        assert trio.current_time() - start >= 3.0
        assert info.value.address == addr and info.value.code == NEVER
        assert conn.closed
        assert (await client.invoke(addr, RemotingCommand.request(ECHO, {"k": "again"}))).ext_fields["k"] == "again"
        assert client.connections[addr] is not conn


async def test_cancelled_lone_invoke_leaves_the_connection_working(serve):
    channels: list = []
    got = trio.Event()

    async def register(conn, req):
        channels.append(conn)
        return req.make_response(0)

    async def on_notify(conn, req):
        got.set()

    _, addr = await serve({ECHO: echo, NEVER: never, RequestCode.HEART_BEAT: register})
    async with RemotingClient(request_handlers={RequestCode.NOTIFY_CONSUMER_IDS_CHANGED: on_notify}) as client:
        await client.invoke(addr, RemotingCommand.request(RequestCode.HEART_BEAT))
        conn = await lent_connection(client, addr)
        with trio.move_on_after(0.2) as scope:
            await client.invoke(addr, RemotingCommand.request(NEVER), timeout=30)
        assert scope.cancelled_caught and not conn.closed and conn.pending_invokes == 0
        assert (await client.invoke(addr, RemotingCommand.request(ECHO, {"k": "v"}))).ext_fields["k"] == "v"
        assert client.connections[addr] is conn
        await channels[0].invoke_oneway(RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": "g"}))
        with trio.fail_after(10):
            await got.wait()


async def test_lone_invoke_fails_when_the_server_goes_away(nursery):
    entered = trio.Event()

    async def stall(conn, req):
        entered.set()
        await trio.sleep_forever()

    server = RemotingServer({ECHO: echo, NEVER: stall})
    port = await nursery.start(server.run)
    addr = f"127.0.0.1:{port}"
    async with RemotingClient() as client:
        conn = await lent_connection(client, addr)
        async with trio.open_nursery() as inner:
            async def call():
                with pytest.raises(RemotingClosed):
                    await client.invoke(addr, RemotingCommand.request(NEVER), timeout=30)

            inner.start_soon(call)
            with trio.fail_after(5):
                await entered.wait()
            server.stop()
        assert conn.closed


async def test_a_close_while_lent_is_noticed_before_the_next_invoke(serve, slow_autojump_clock):
    """The server closes the connection while no task reads it and the loop is busy (the parked reader gets no
    turn): the next invoke notices the close before it writes, and goes over a new connection, as it would have
    had the reader seen the close."""
    import select

    server, addr = await serve({ECHO: echo})
    async with RemotingClient() as client:
        conn = await lent_connection(client, addr)
        (server_conn,) = server.connections
        server_conn.close()
        # no checkpoint from here on: the loop is busy, as in a blocking call between two sends
        readable, _, _ = select.select([conn._sock], [], [], 10)  # the close has reached the client's socket
        assert readable and not conn.closed
        slow_autojump_clock.jump(1.0)  # some time passes
        resp = await client.invoke(addr, RemotingCommand.request(ECHO, {"k": "again"}))
        assert resp.ext_fields["k"] == "again"
        assert conn.closed and client.connections[addr] is not conn
