"""The pull consumer and the admin API against `pyrmq dev` in-process on real sockets."""

from __future__ import annotations

import time

import pytest
import trio

from pyrmq.client import (
    Admin,
    BlockingPullConsumer,
    BrokerError,
    ClientError,
    Message,
    MessageQueue,
    Producer,
    PullConsumer,
    PullStatus,
    TopicNotFoundError,
)
from pyrmq.remoting.message import decode_messages


async def test_pull_consumer_reads_from_explicit_offsets_and_commits(dev, name):
    topic, group = name("T"), name("G")
    await dev.create_topic(topic, 2)
    async with Producer(dev.namesrv, "p") as producer:
        for i in range(10):
            queue = MessageQueue(topic, "broker-a", i % 2)
            await producer.send(Message(topic, f"m{i}", tags="A" if i % 4 < 2 else "B"), queue=queue)
    async with PullConsumer(dev.namesrv, group) as consumer:
        queues = await consumer.fetch_queues(topic)
        assert [mq.queue_id for mq in queues] == [0, 1]
        mq = queues[0]
        assert await consumer.committed_offset(mq) in (-1, 0)
        assert await consumer.min_offset(mq) == 0 and await consumer.max_offset(mq) == 5
        result = await consumer.pull(mq, "*", 2, 32)
        assert result.status is PullStatus.FOUND and [m.queue_offset for m in result.messages] == [2, 3, 4]
        assert result.next_begin_offset == 5 and result.max_offset == 5
        only_b = await consumer.pull(mq, "B", 0, 32)
        assert {m.tags for m in only_b.messages} == {"B"}
        empty = await consumer.pull(mq, "*", 5, 32)
        assert empty.status is PullStatus.NO_NEW_MSG and not empty.messages
        await consumer.commit_offset(mq, 4)
        consumer.update_offset(queues[1], 1)
        assert await consumer.search_offset(mq, int(time.time() * 1000) + 60_000) in (4, 5)
    async with PullConsumer(dev.namesrv, group) as again:
        assert await again.committed_offset(mq) == 4
        assert await again.committed_offset(queues[1]) == 1  # update_offset was committed at shutdown


async def test_long_polling_pull_returns_when_a_message_arrives(dev, name):
    topic = name("T")
    await dev.create_topic(topic, 1)
    async with PullConsumer(dev.namesrv, name("G")) as consumer:
        (mq,) = await consumer.fetch_queues(topic)

        async def send_later() -> None:
            await trio.sleep(0.3)
            async with Producer(dev.namesrv, "p") as producer:
                await producer.send(Message(topic, b"wake up"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(send_later)
            began = trio.current_time()
            result = await consumer.pull(mq, "*", 0, 32, block=True, suspend_ms=10_000)
        assert [m.body for m in result.messages] == [b"wake up"]
        assert 0.2 < trio.current_time() - began < 5


async def test_admin_topics_clusters_and_routes(dev, name):
    topic = name("T")
    async with Admin(dev.namesrv) as admin:
        assert await admin.create_topic(topic, 6) == ["broker-a"]
        assert topic in await admin.list_topics()
        route = await admin.topic_route(topic)
        assert [(q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm) for q in route.queue_datas] == [
            ("broker-a", 6, 6, 6)]
        (broker,) = await admin.list_clusters()
        assert (broker.cluster, broker.broker_name, broker.broker_id, broker.addr) == (
            "DefaultCluster", "broker-a", 0, dev.broker)
        assert broker.version and broker.max_offset >= 0
        stats = await admin.topic_stats(topic)
        assert len(stats) == 6 and all(low == high == 0 for _mq, low, high, _t in stats)
        await admin.delete_topic(topic)
        assert topic not in await admin.list_topics()
        with pytest.raises(TopicNotFoundError):
            await admin.topic_route(topic)
        with pytest.raises(ClientError, match="no cluster named 'Nope'"):
            await admin.create_topic(name("X"), 1, cluster="Nope")


async def test_admin_group_progress_and_offset_reset(dev, name):
    topic, group = name("T"), name("G")
    await dev.create_topic(topic, 2)
    async with Producer(dev.namesrv, "p") as producer:
        for i in range(10):
            await producer.send(Message(topic, f"m{i}"))
        await trio.sleep(0.3)
        middle = int(time.time() * 1000)  # nearest stored message: the first of the second half (spec 7.13)
        for i in range(10, 20):
            await producer.send(Message(topic, f"m{i}"))
    async with PullConsumer(dev.namesrv, group) as consumer:
        for mq in await consumer.fetch_queues(topic):
            await consumer.commit_offset(mq, 3)
    async with Admin(dev.namesrv) as admin:
        progress = [p for p in await admin.group_progress(group) if p.topic == topic]
        assert [(p.queue_id, p.broker_offset, p.consumer_offset, p.lag) for p in progress] == [(0, 10, 3, 7), (1, 10, 3, 7)]
        reset = await admin.reset_offset(group, topic, middle)
        assert sorted(reset.values()) == [5, 5]
        progress = [p for p in await admin.group_progress(group, topic) if p.topic == topic]
        assert [p.consumer_offset for p in progress] == [5, 5]


async def test_admin_finds_messages_by_key_and_by_id(dev, name):
    topic = name("T")
    await dev.create_topic(topic, 2)
    async with Producer(dev.namesrv, "p") as producer:
        results = [await producer.send(Message(topic, f"order {i}", keys=[f"order-{i}", "all"])) for i in range(5)]
    async with Admin(dev.namesrv) as admin:
        (found,) = await admin.query_message_by_key(topic, "order-3")
        assert found.body == b"order 3" and found.msg_id == results[3].msg_id
        assert len(await admin.query_message_by_key(topic, "all")) == 5
        assert await admin.query_message_by_key(topic, "missing") == []
        by_offset_id = await admin.query_message_by_id(results[1].offset_msg_id)
        assert by_offset_id.body == b"order 1" and by_offset_id.broker_name == "broker-a"
        by_uniq = await admin.query_message_by_id(results[2].msg_id, topic)
        assert by_uniq.body == b"order 2"
        with pytest.raises(ClientError, match="not found"):
            await admin.query_message_by_id("0" * 32)


async def test_pull_range_hands_out_raw_bodies_in_order_and_stops_when_asked(dev, name):
    topic = name("T")
    await dev.create_topic(topic, 1)
    mq = MessageQueue(topic, "broker-a", 0)
    async with Producer(dev.namesrv, "p") as producer:
        await producer.send_batch([Message(topic, f"m{i}", tags="even" if i % 2 == 0 else "odd") for i in range(100)], queue=mq)
    async with PullConsumer(dev.namesrv, name("G")) as consumer:
        seen: list[tuple[int, bytes]] = []

        async def keep(batch) -> bool:
            seen.extend((m.queue_offset, m.body) for m in decode_messages(batch.body) if batch.start <= m.queue_offset < batch.end)
            return True

        await consumer.pull_range(mq, 10, 90, keep, window=4)
        assert seen == [(i, f"m{i}".encode()) for i in range(10, 90)]

        seen.clear()
        await consumer.pull_range(mq, 0, 100, keep, expression="odd")
        assert [o for o, _ in seen] == list(range(1, 100, 2))

        batches = []

        async def first_only(batch) -> bool:
            batches.append(batch)
            return False

        await consumer.pull_range(mq, 0, 100, first_only)
        assert len(batches) == 1 and batches[0].start == 0

        with pytest.raises(BrokerError, match="no message at offset 100"):
            await consumer.pull_range(mq, 0, 120, keep)


async def test_blocking_pull_range_is_an_iterator_that_can_be_closed_early(dev, name):
    topic = name("T")
    mq = MessageQueue(topic, "broker-a", 0)
    await dev.create_topic(topic, 1)
    async with Producer(dev.namesrv, "p") as producer:
        await producer.send_batch([Message(topic, f"m{i}") for i in range(50)], queue=mq)

    def read() -> tuple[list[int], int, int]:
        with BlockingPullConsumer(dev.namesrv, name("G")) as consumer:
            offsets = [m.queue_offset for b in consumer.pull_range(mq, 0, 50, window=2) for m in decode_messages(b.body)
                       if b.start <= m.queue_offset < b.end]
            it = consumer.pull_range(mq, 0, 50, window=2)
            first = next(it).start
            it.close()  # stops the pulls on the client loop
            return offsets, first, len(consumer.pull(mq, "*", 0, 32).messages)

    with trio.fail_after(30):
        offsets, first, after = await trio.to_thread.run_sync(read)
    assert offsets == list(range(50))
    assert first == 0
    assert after == 32  # the consumer still works after the closed iterator
