"""The pipelined pull of a queue range, against an in-process broker whose per-pull cap cuts answers short.

Records of uneven sizes against a small byte cap make answers stop short of the speculative next offsets: the
reader must still hand out every offset of the range once, in order. No Spark here.
"""

from __future__ import annotations

import random
import socket
import threading

import pytest
import trio

from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.headers import CreateTopicRequestHeader, SendMessageRequestHeader
from pyrmq.client import BlockingPullConsumer, MessageQueue
from pyrmq.client.errors import BrokerError
from pyrmq.client.pipelined_pull import blocking_pull_range, direct_pull_range
from pyrmq.spark_plugin.records import Columns
from pyrmq.store.format import encode_properties


async def _fill(client, addr: str, topic: str, n: int) -> list[bytes]:
    header = CreateTopicRequestHeader(topic=topic, default_topic="TBW102", read_queue_nums=1, write_queue_nums=1, perm=6, topic_filter_type="SINGLE_TAG")
    assert (await client.invoke(addr, RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, header.to_ext_fields()))).code == 0
    rng = random.Random(7)
    bodies = []
    for i in range(n):
        body = bytes([i % 251]) * rng.randrange(10, 3000)
        props = encode_properties({"TAGS": "even" if i % 2 == 0 else "odd"})
        h = SendMessageRequestHeader(
            producer_group="p", topic=topic, default_topic="TBW102", default_topic_queue_nums=1, queue_id=0,
            sys_flag=0, born_timestamp=0, flag=0, properties=props,
        )
        resp = await client.invoke(addr, RemotingCommand.request(RequestCode.SEND_MESSAGE, h.to_ext_fields(), body))
        assert resp.code == ResponseCode.SUCCESS
        bodies.append(body)
    return bodies


def _records(batches, topic: str) -> list[tuple[int, bytes]]:
    out = []
    for batch in batches:
        cols = Columns(topic, "broker-a", 0)
        cols.add_all(batch.body, batch.start, batch.end)
        out.extend((h[5], b) for h, b in zip(cols.headers, cols.bodies))
    return out


def _read(namesrv: str, topic: str, start: int, end: int, subscription: str = "*", direct: bool = False) -> list[tuple[int, bytes]]:
    mq = MessageQueue(topic, "broker-a", 0)
    with BlockingPullConsumer(namesrv, "pipeline-test") as consumer:
        if direct:  # the plain-socket path of the calling thread (what the data source reads with)
            return _records(direct_pull_range(consumer, mq, start, end, expression=subscription, window=4), topic)
        return _records(consumer.pull_range(mq, start, end, expression=subscription, window=4), topic)


@pytest.mark.parametrize("direct", [False, True], ids=["client-loop", "direct-socket"])
async def test_a_pyrmq_broker_answers_the_range_reader_beyond_rocketmqs_32_a_pull(start_role, remoting_client, direct) -> None:
    """The range reader flags its pulls largePull: with the broker's defaults (RocketMQ's 32 messages / 256 KiB a
    pull for everyone else) its answers hold up to largePullMaxCount messages, here set to 300."""
    kernel = await start_role("dev", {"broker.largePullMaxCount": 300})
    addr = kernel.listening["broker"]
    namesrv = kernel.listening["namesrv"]
    bodies = await _fill(remoting_client, addr, "PIPEBIG", 700)

    def read() -> list:
        mq = MessageQueue("PIPEBIG", "broker-a", 0)
        with BlockingPullConsumer(namesrv, "pipeline-big") as consumer:
            if direct:
                return list(direct_pull_range(consumer, mq, 0, 700, window=4))
            return list(consumer.pull_range(mq, 0, 700, window=4))

    batches = await trio.to_thread.run_sync(read)
    got = _records(batches, "PIPEBIG")
    assert [o for o, _ in got] == list(range(700)) and [b for _, b in got] == bodies
    # bodies of 10-3,000 bytes: 256 KiB would stop a pull near 170 records; 4 MiB does not, 300 does
    sizes = [len(_records([b], "PIPEBIG")) for b in batches]
    assert max(sizes) == 300 and sum(sizes) == 700


@pytest.mark.parametrize("direct", [False, True], ids=["client-loop", "direct-socket"])
async def test_pipelined_pull_hands_out_every_offset_once_in_order(start_role, remoting_client, direct) -> None:
    kernel = await start_role(
        "dev", {"broker.maxTransferCountOnMessageInMemory": 40, "broker.maxTransferBytesOnMessageInMemory": 20_000,
                # the range reader's pulls carry largePull: its caps are the ones that cut them short
                "broker.largePullMaxCount": 40, "broker.largePullMaxBytes": 20_000}
    )
    addr = kernel.listening["broker"]
    namesrv = kernel.listening["namesrv"]
    bodies = await _fill(remoting_client, addr, "PIPE", 400)

    got = await trio.to_thread.run_sync(_read, namesrv, "PIPE", 0, 400, "*", direct)
    assert [o for o, _ in got] == list(range(400))
    assert [b for _, b in got] == bodies

    middle = await trio.to_thread.run_sync(_read, namesrv, "PIPE", 123, 321, "*", direct)
    assert [o for o, _ in middle] == list(range(123, 321))

    # a filtered read: the broker answers with the entries it scanned; only matching offsets come back
    odd = await trio.to_thread.run_sync(_read, namesrv, "PIPE", 0, 400, "odd", direct)
    assert [o for o, _ in odd] == list(range(1, 400, 2))


class _CuttingProxy:
    """A TCP relay to the broker that closes its first connection once the broker has sent ``cut_after`` bytes
    through it; later connections are relayed whole."""

    def __init__(self, target: str, cut_after: int) -> None:
        host, _, port = target.rpartition(":")
        self.target = (host, int(port))
        self.cut_after = cut_after
        self.connections = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.addr = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            upstream = socket.create_connection(self.target)
            self.sockets += [client, upstream]
            limit = self.cut_after if self.connections == 1 else None
            threading.Thread(target=self._pipe, args=(client, upstream, None), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, limit), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, limit: int | None) -> None:
        sent = 0
        try:
            while data := src.recv(65536):
                if limit is not None and sent + len(data) >= limit:
                    dst.sendall(data[: limit - sent])
                    break
                dst.sendall(data)
                sent += len(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        self.listener.close()
        for s in self.sockets:
            s.close()


async def test_direct_pull_reconnects_after_a_cut_and_stops_at_a_missing_offset(start_role, remoting_client) -> None:
    kernel = await start_role(
        "dev", {"broker.maxTransferCountOnMessageInMemory": 40, "broker.maxTransferBytesOnMessageInMemory": 20_000,
                # the range reader's pulls carry largePull: its caps are the ones that cut them short
                "broker.largePullMaxCount": 40, "broker.largePullMaxBytes": 20_000}
    )
    addr = kernel.listening["broker"]
    bodies = await _fill(remoting_client, addr, "CUT", 300)
    mq = MessageQueue("CUT", "broker-a", 0)
    proxy = _CuttingProxy(addr, cut_after=150_000)  # mid-frame, a few answers into the range
    try:
        def read(start: int, end: int) -> list[tuple[int, bytes]]:
            return _records(blocking_pull_range(proxy.addr, mq, start, end, group="cut-test", window=4, timeout=5.0), "CUT")

        with trio.fail_after(60):
            got = await trio.to_thread.run_sync(read, 0, 300)
        assert proxy.connections == 2  # the read went on over a new connection
        assert [o for o, _ in got] == list(range(300))
        assert [b for _, b in got] == bodies

        def past_the_end() -> None:
            read(250, 320)

        with trio.fail_after(60), pytest.raises(BrokerError, match="no message at offset 300"):
            await trio.to_thread.run_sync(past_the_end)

        def first_then_close() -> int:
            it = blocking_pull_range(addr, mq, 0, 300, group="cut-test", window=4)
            first = next(it).start
            it.close()  # closes its connection; nothing left running
            return first

        assert await trio.to_thread.run_sync(first_then_close) == 0
    finally:
        proxy.close()
