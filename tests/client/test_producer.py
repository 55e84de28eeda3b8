"""The producer against `pyrmq dev` in-process on real sockets: every send mode, batches, ordered sends,
compression, auto-created topics, hooks and errors."""

from __future__ import annotations

import collections

import pytest
import trio

from pyrmq.client import (
    BrokerError,
    InvalidMessageError,
    Message,
    MessageQueue,
    NameServerUnreachable,
    Producer,
    PullConsumer,
    SendContext,
    SendStatus,
    TopicNotFoundError,
    select_by_hash,
)
from pyrmq.client.ids import UniqIdGenerator
from pyrmq.client.message import MessageExt
from pyrmq.remoting.message import BatchEntry, encode_properties
from pyrmq.store.format import COMPRESSED_FLAG


async def read_all(namesrv: str, topic: str, group: str = "reader") -> list[MessageExt]:
    """Every message of ``topic``, queue by queue, through the pull consumer."""
    out: list[MessageExt] = []
    async with PullConsumer(namesrv, group) as consumer:
        for mq in await consumer.fetch_queues(topic):
            offset = 0
            while True:
                result = await consumer.pull(mq, "*", offset, 32)
                if not result.messages:
                    break
                out.extend(result.messages)
                offset = result.next_begin_offset
    return out


async def test_sync_send_returns_ids_queue_and_offset(dev, name):
    topic = name("T")
    await dev.create_topic(topic, 4)
    async with Producer(dev.namesrv, name("pg")) as producer:
        results = [await producer.send(Message(topic, f"m{i}", tags="TagA", keys=[f"key-{i}"])) for i in range(8)]
    assert all(r.status is SendStatus.SEND_OK for r in results)
    assert len({r.msg_id for r in results}) == 8
    assert sorted(r.message_queue.queue_id for r in results) == [0, 0, 1, 1, 2, 2, 3, 3]  # round robin
    stored = {m.msg_id: m for m in await read_all(dev.namesrv, topic)}
    for i, r in enumerate(results):
        m = stored[r.msg_id]
        assert m.body == f"m{i}".encode() and m.tags == "TagA" and m.keys == (f"key-{i}",)
        assert m.offset_msg_id == r.offset_msg_id and m.queue_offset == r.queue_offset


async def test_async_oneway_and_callback_sends(dev, name):
    topic = name("T")
    await dev.create_topic(topic, 2)
    called = []
    async with Producer(dev.namesrv, name("pg")) as producer:
        futures = [await producer.send_async(Message(topic, f"a{i}")) for i in range(50)]
        await producer.send_async(Message(topic, "cb"), lambda result, error: called.append((result, error)))
        results = [await f for f in futures]
        for i in range(5):
            await producer.send_oneway(Message(topic, f"o{i}"))
        with trio.fail_after(5):
            while not called:
                await trio.sleep(0.01)
    assert all(r.status is SendStatus.SEND_OK for r in results)
    assert called[0][1] is None and called[0][0].status is SendStatus.SEND_OK
    with trio.fail_after(5):
        while len(bodies := {m.body for m in await read_all(dev.namesrv, topic)}) < 56:
            await trio.sleep(0.05)
    assert bodies == {f"a{i}".encode() for i in range(50)} | {b"cb"} | {f"o{i}".encode() for i in range(5)}


async def test_batch_send_keeps_order_ids_and_splits_at_4_mib(dev, name):
    topic = name("T")
    await dev.create_topic(topic, 1)
    msgs = [Message(topic, f"b{i}", keys=f"k{i}") for i in range(64)]
    big = [Message(topic, bytes([65 + i]) * (1536 * 1024)) for i in range(5)]  # 7.5 MiB: two or more requests
    async with Producer(dev.namesrv, name("pg")) as producer:
        (result,) = await producer.send_batch(msgs)
        big_results = await producer.send_batch(big)
    assert len(result.msg_id.split(",")) == 64 and len(result.offset_msg_id.split(",")) == 64
    assert len(big_results) >= 2
    stored = await read_all(dev.namesrv, topic)
    assert [m.body for m in stored[:64]] == [m.body for m in msgs]
    assert [m.msg_id for m in stored[:64]] == result.msg_id.split(",")
    assert [m.body for m in stored[64:]] == [m.body for m in big]


async def test_ordered_send_puts_every_message_of_a_key_on_one_queue(dev, name):
    topic = name("T")
    await dev.create_topic(topic, 8)
    sent = collections.defaultdict(list)
    async with Producer(dev.namesrv, name("pg")) as producer:
        for i in range(60):
            order = f"order-{i % 6}"
            r = await producer.send(Message(topic, f"{order}:{i}", keys=order), selector=select_by_hash, arg=order)
            sent[order].append(r.message_queue)
            r2 = await producer.send_orderly(Message(topic, f"{order}:{i}b", keys=order), order)
            sent[order].append(r2.message_queue)
    for order, mqs in sent.items():
        assert len(set(mqs)) == 1, order
    stored = await read_all(dev.namesrv, topic)
    by_queue = collections.defaultdict(list)
    for m in sorted(stored, key=lambda m: m.queue_offset):
        by_queue[m.queue_id].append(m.text())
    for order in sent:
        (queue,) = {m.queue_id for m in stored if m.keys == (order,)}
        in_queue = [t for t in by_queue[queue] if t.startswith(order + ":")]
        assert in_queue == [f"{order}:{i}{s}" for i in range(60) if f"order-{i % 6}" == order for s in ("", "b")]


async def test_compression_round_trip(dev, name):
    topic = name("T")
    await dev.create_topic(topic, 1)
    body = ("pyrmq " * 4000).encode()  # 24 KB, compresses well
    async with Producer(dev.namesrv, name("pg")) as producer:
        await producer.send(Message(topic, body))
        await producer.send(Message(topic, b"small"))
    big, small = await read_all(dev.namesrv, topic)
    assert big.body == body and big.sys_flag & COMPRESSED_FLAG
    assert big.store_size < len(body) // 4  # stored compressed
    assert small.body == b"small" and not small.sys_flag & COMPRESSED_FLAG


async def test_unknown_topic_is_created_through_tbw102(dev, name):
    topic = name("Auto")
    async with Producer(dev.namesrv, name("pg")) as producer:
        result = await producer.send(Message(topic, b"first"))
        assert result.status is SendStatus.SEND_OK
        assert result.message_queue.queue_id < 4  # min(4, TBW102's queues) like Java
    stored = await read_all(dev.namesrv, topic)
    assert [m.body for m in stored] == [b"first"]


async def test_delay_level_is_carried(dev, name):
    topic = name("T")
    await dev.create_topic(topic, 1)
    async with Producer(dev.namesrv, name("pg")) as producer:
        sent_at = trio.current_time()
        await producer.send(Message(topic, b"later", delay_time_level=1))  # 1 s on this broker
    with trio.fail_after(10):
        while not (stored := await read_all(dev.namesrv, topic)):
            await trio.sleep(0.1)
    assert trio.current_time() - sent_at >= 0.9
    assert stored[0].body == b"later" and stored[0].delay_time_level == 0  # DELAY removed on delivery


async def test_send_hooks_see_each_attempt(dev, name):
    topic = name("T")
    await dev.create_topic(topic, 2)
    before: list[SendContext] = []
    after: list[SendContext] = []

    def tag_trace(ctx: SendContext) -> None:
        ctx.props["trace"] = "t-1"
        before.append(ctx)

    async with Producer(dev.namesrv, name("pg")) as producer:
        producer.add_send_hook(before=tag_trace, after=after.append)
        await producer.send(Message(topic, b"x"))
        await producer.send_oneway(Message(topic, b"y"))
    assert [c.mode for c in before] == ["SYNC", "ONEWAY"]
    assert after[0].result is not None and after[0].exception is None and after[0].props["trace"] == "t-1"
    assert after[0].broker_addr == dev.broker and after[0].message_queue.topic == topic


async def test_refusals_say_why(dev, name):
    topic = name("T")
    await dev.create_topic(topic, 2)
    readonly = name("RO")
    await dev.create_topic(readonly, 2, perm=4)
    async with Producer(dev.namesrv, name("pg")) as producer:
        with pytest.raises(BrokerError, match="queueId\\[9\\] is illegal") as info:
            await producer.send(Message(topic, b"x"), queue=MessageQueue(topic, "broker-a", 9))
        assert info.value.code == 1 and info.value.broker == dev.broker
        with pytest.raises(TopicNotFoundError, match="no writable queue"):
            await producer.send(Message(readonly, b"x"))


async def test_unreachable_name_server_is_reported_clearly():
    async with Producer("127.0.0.1:1", "pg") as producer:
        with pytest.raises(NameServerUnreachable, match="cannot reach any name server \\(127.0.0.1:1\\)"):
            await producer.send(Message("T", b"x"))


async def test_leaving_the_producer_waits_for_async_sends_in_flight(dev, name):
    topic = name("T")
    await dev.create_topic(topic, 2)
    outcomes = []
    async with Producer(dev.namesrv, name("pg")) as producer:
        for i in range(100):
            await producer.send_async(Message(topic, f"x{i}"), lambda result, error: outcomes.append((result, error)))
    assert len(outcomes) == 100 and all(error is None and result.status is SendStatus.SEND_OK for result, error in outcomes)


async def test_a_pre_encoded_batch_reaches_a_new_topic_through_tbw102(dev, name):
    topic = name("T")  # no route yet: sent through TBW102's brokers, which create it
    ids = UniqIdGenerator()
    keys = [ids.next() for _ in range(3)]
    entries = [BatchEntry(0, f"b{i}".encode(), encode_properties({"TAGS": "t", "UNIQ_KEY": k}).encode())
               for i, k in enumerate(keys)]
    async with Producer(dev.namesrv, name("pg")) as producer:
        result = await producer.send_encoded_batch(topic, entries, keys)
        assert result.status is SendStatus.SEND_OK and result.msg_id == ",".join(keys)
        with pytest.raises(InvalidMessageError, match="system topic"):
            await producer.send_encoded_batch("SCHEDULE_TOPIC_XXXX", entries, keys)
        with pytest.raises(InvalidMessageError, match="empty"):
            await producer.send_encoded_batch(topic, [], [])
    got = await read_all(dev.namesrv, topic)
    assert sorted((m.body, m.tags, m.uniq_key) for m in got) == [(f"b{i}".encode(), "t", k) for i, k in enumerate(keys)]
