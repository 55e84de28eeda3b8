"""The push consumer against `pyrmq dev` in-process on real sockets: queue split and rebalance, broadcasting,
committed offsets, tag filtering, retries, orderly consumption and async iteration."""

from __future__ import annotations

import collections

import trio

from pyrmq.client import (
    Admin,
    ClientConfig,
    ConsumeResult,
    Message,
    MessageQueue,
    Producer,
    PushConsumer,
    select_by_hash,
)
from pyrmq.client import api
from pyrmq.client.instance import ClientInstance
from pyrmq.client.message import MessageExt
from pyrmq.remoting.vocabulary import PullSysFlag

from .conftest import wait_until


class Collector:
    """A listener that records what each consumer received."""

    def __init__(self) -> None:
        self.by_consumer: dict[str, list[MessageExt]] = collections.defaultdict(list)
        self.all: list[MessageExt] = []

    def listener(self, who: str):
        async def on_message(msg: MessageExt) -> None:
            self.by_consumer[who].append(msg)
            self.all.append(msg)

        return on_message

    def ids(self, who: str | None = None) -> list[str]:
        return [m.msg_id for m in (self.by_consumer[who] if who else self.all)]


def topic_queues(consumer: PushConsumer, topic: str) -> set[MessageQueue]:
    return {mq for mq in consumer.assigned_queues() if mq.topic == topic}


async def send(namesrv: str, topic: str, n: int, prefix: str = "m", **kwargs) -> list[str]:
    async with Producer(namesrv, "test_producer") as producer:
        return [(await producer.send(Message(topic, f"{prefix}{i}", **kwargs))).msg_id for i in range(n)]


async def test_two_consumers_split_the_queues_and_receive_every_message_exactly_once(dev, name):
    topic, group = name("T"), name("G")
    await dev.create_topic(topic, 8)
    seen = Collector()
    c1 = PushConsumer(dev.namesrv, group, subscribe={topic: "*"}, listener=seen.listener("c1"))
    c2 = PushConsumer(dev.namesrv, group, subscribe={topic: "*"}, listener=seen.listener("c2"))
    async with c1, c2:
        def split() -> bool:
            a, b = topic_queues(c1, topic), topic_queues(c2, topic)
            return len(a) == 4 and len(b) == 4 and not a & b

        await wait_until(split, what="the queues split 4/4")
        sent = await send(dev.namesrv, topic, 200)
        await wait_until(lambda: len(seen.all) >= 200, what="200 messages")
        await trio.sleep(0.3)  # nothing more may arrive
    assert sorted(seen.ids()) == sorted(sent)  # every message, once
    assert seen.by_consumer["c1"] and seen.by_consumer["c2"]
    queues1 = {m.queue_id for m in seen.by_consumer["c1"]}
    queues2 = {m.queue_id for m in seen.by_consumer["c2"]}
    assert not queues1 & queues2


async def test_adding_and_removing_a_consumer_rebalances_without_loss(dev, name):
    topic, group = name("T"), name("G")
    await dev.create_topic(topic, 4)
    seen = Collector()
    sent: list[str] = []
    done_sending = trio.Event()

    async def produce() -> None:
        async with Producer(dev.namesrv, "test_producer") as producer:
            for i in range(300):
                sent.append((await producer.send(Message(topic, f"m{i}"))).msg_id)
                if i % 10 == 0:
                    await trio.sleep(0.01)
        done_sending.set()

    c1 = PushConsumer(dev.namesrv, group, subscribe={topic: "*"}, listener=seen.listener("c1"))
    async with c1:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(produce)
            await wait_until(lambda: len(seen.all) >= 30, what="c1 consuming")
            async with PushConsumer(dev.namesrv, group, subscribe={topic: "*"}, listener=seen.listener("c2")) as c2:
                await wait_until(lambda: len(topic_queues(c1, topic)) == 2 and len(topic_queues(c2, topic)) == 2,
                                 what="the queues split 2/2")
                await wait_until(lambda: len(seen.by_consumer["c2"]) >= 10, what="c2 consuming")
            # c2 left: c1 takes every queue back
            await wait_until(lambda: len(topic_queues(c1, topic)) == 4, what="c1 holding all queues again")
            with trio.fail_after(20):
                await done_sending.wait()
        await wait_until(lambda: set(sent) <= set(seen.ids()), what="every message")
    assert set(seen.ids()) == set(sent)  # no loss (a message may come twice around a rebalance)


async def test_broadcasting_delivers_every_message_to_every_consumer(dev, name, tmp_path):
    topic, group = name("T"), name("G")
    await dev.create_topic(topic, 4)
    seen = Collector()
    consumers = [
        PushConsumer(dev.namesrv, group, subscribe={topic: "*"}, listener=seen.listener(f"c{i}"),
                     message_model="BROADCASTING", offset_store_dir=tmp_path / f"offsets{i}")
        for i in range(3)
    ]
    async with consumers[0], consumers[1], consumers[2]:
        for c in consumers:
            assert len(topic_queues(c, topic)) == 4  # everyone holds every queue
        sent = await send(dev.namesrv, topic, 40)
        await wait_until(lambda: all(len(seen.by_consumer[f"c{i}"]) >= 40 for i in range(3)), what="3 x 40 messages")
    for i in range(3):
        assert sorted(seen.ids(f"c{i}")) == sorted(sent)
    files = list(tmp_path.glob("offsets0/*/*/offsets.json"))
    assert files and "offsetTable" in files[0].read_text()


async def test_a_restarted_consumer_resumes_from_committed_offsets(dev, name):
    topic, group = name("T"), name("G")
    await dev.create_topic(topic, 4)
    first = Collector()
    async with PushConsumer(dev.namesrv, group, subscribe={topic: "*"}, listener=first.listener("c")):
        sent1 = await send(dev.namesrv, topic, 50, "a")
        await wait_until(lambda: len(first.all) >= 50, what="first 50")
    # shut down: offsets committed; the next messages arrive while nobody consumes
    sent2 = await send(dev.namesrv, topic, 30, "b")
    second = Collector()
    async with PushConsumer(dev.namesrv, group, subscribe={topic: "*"}, listener=second.listener("c")):
        await wait_until(lambda: len(second.all) >= 30, what="the 30 new messages")
        await trio.sleep(0.5)
    assert sorted(first.ids()) == sorted(sent1)
    assert sorted(second.ids()) == sorted(sent2)  # nothing consumed again
    async with Admin(dev.namesrv) as admin:
        progress = [p for p in await admin.group_progress(group, topic) if p.topic == topic]
    assert sum(p.lag for p in progress) == 0 and sum(p.consumer_offset for p in progress) == 80


async def test_tag_expressions_filter_and_the_client_rechecks_hash_collisions(dev, name):
    topic, group = name("T"), name("G")
    await dev.create_topic(topic, 2)
    seen = Collector()
    async with Producer(dev.namesrv, "test_producer") as producer:
        for i in range(6):
            for tag in ("TagA", "TagB", "TagC", None):
                await producer.send(Message(topic, f"{tag}-{i}", tags=tag))
    async with PushConsumer(dev.namesrv, group, subscribe={topic: "TagA || TagC"}, listener=seen.listener("c"),
                            consume_from="first"):
        await wait_until(lambda: len(seen.all) >= 12, what="TagA and TagC messages")
        await trio.sleep(0.3)
    assert sorted(m.tags for m in seen.all) == ["TagA"] * 6 + ["TagC"] * 6

    # "Aa" and "BB" have the same Java hash code (2112): the broker lets both through, the client drops BB
    collide = name("C")
    await dev.create_topic(collide, 1)
    async with Producer(dev.namesrv, "test_producer") as producer:
        for i in range(5):
            await producer.send(Message(collide, f"Aa-{i}", tags="Aa"))
            await producer.send(Message(collide, f"BB-{i}", tags="BB"))
    group2 = name("G")
    instance = ClientInstance(ClientConfig(namesrv_addr=dev.namesrv))
    async with trio.open_nursery() as nursery:
        await instance.start(nursery)
        # the broker filters by the tag's hash only: a pull without the client re-check gets both tags
        raw = await api.pull(instance, dev.broker, MessageQueue(collide, "broker-a", 0), group2, 0,
                             sys_flag=PullSysFlag.SUBSCRIPTION, subscription="Aa")
        assert sorted({m.tags for m in raw.messages}) == ["Aa", "BB"]
        nursery.cancel_scope.cancel()
    seen2 = Collector()
    async with PushConsumer(dev.namesrv, group2, subscribe={collide: "Aa"}, listener=seen2.listener("c"),
                            consume_from="first") as consumer:
        await wait_until(lambda: len(seen2.all) >= 5, what="the Aa messages")
        await trio.sleep(0.3)
        await consumer.persist_offsets()
    assert [m.text() for m in seen2.all] == [f"Aa-{i}" for i in range(5)]
    async with Admin(dev.namesrv) as admin:  # the filtered messages were skipped, not left behind
        progress = [p for p in await admin.group_progress(group2, collide) if p.topic == collide]
    assert progress and progress[0].lag == 0


async def test_a_failed_message_comes_back_with_its_topic_and_a_raised_reconsume_count(dev, name):
    topic, group = name("T"), name("G")
    await dev.create_topic(topic, 2)
    attempts: list[MessageExt] = []

    async def flaky(msg: MessageExt) -> ConsumeResult:
        attempts.append(msg)
        return ConsumeResult.RECONSUME_LATER if msg.reconsume_times == 0 else ConsumeResult.SUCCESS

    async with PushConsumer(dev.namesrv, group, subscribe={topic: "*"}, listener=flaky):
        (msg_id,) = await send(dev.namesrv, topic, 1, keys="retry-me")
        await wait_until(lambda: len(attempts) >= 2, timeout=15, what="the redelivery")
    first, again = attempts[:2]
    assert first.msg_id == again.msg_id == msg_id
    assert again.topic == topic  # restored from RETRY_TOPIC
    assert again.reconsume_times == 1 and again.keys == ("retry-me",) and again.body == b"m0"


async def test_the_client_falls_back_to_sending_to_the_retry_topic(dev, name, monkeypatch):
    topic, group = name("T"), name("G")
    await dev.create_topic(topic, 1)

    async def refused(*args, **kwargs):
        raise api.BrokerError(1, "send back refused for this test", dev.broker, "CONSUMER_SEND_MSG_BACK")

    monkeypatch.setattr(api, "send_back", refused)
    attempts: list[MessageExt] = []

    def flaky(msg: MessageExt) -> bool:  # a plain function: runs in a worker thread
        attempts.append(msg)
        if msg.reconsume_times == 0:
            raise RuntimeError("boom")
        return True

    async with PushConsumer(dev.namesrv, group, subscribe={topic: "*"}, listener=flaky):
        (msg_id,) = await send(dev.namesrv, topic, 1, tags="T1")
        await wait_until(lambda: len(attempts) >= 2, timeout=15, what="the redelivery through the fallback")
    again = attempts[1]
    assert again.msg_id == msg_id and again.topic == topic and again.reconsume_times == 1 and again.tags == "T1"


async def test_orderly_consumption_keeps_queue_order_across_a_failure_and_a_rebalance(dev, name):
    topic, group = name("T"), name("G")
    await dev.create_topic(topic, 4)
    consumed: list[tuple[str, int, int, str]] = []  # (consumer, queue, offset, body), in time order
    failed_once: set[str] = set()

    def listener(who: str):
        async def on_message(msg: MessageExt) -> ConsumeResult:
            body = msg.text()
            if body.endswith(":7") and body not in failed_once:
                failed_once.add(body)  # fail once: retried locally after 1 s, nothing after it overtakes it
                return ConsumeResult.RECONSUME_LATER
            await trio.sleep(0.002)
            consumed.append((who, msg.queue_id, msg.queue_offset, body))
            return ConsumeResult.SUCCESS

        return on_message

    keys = [f"order{k}" for k in range(8)]
    sent = collections.defaultdict(list)

    async def produce(rounds: range) -> None:
        async with Producer(dev.namesrv, "test_producer") as producer:
            for i in rounds:
                for key in keys:
                    body = f"{key}:{i}"
                    await producer.send(Message(topic, body), selector=select_by_hash, arg=key)
                    sent[key].append(body)

    c1 = PushConsumer(dev.namesrv, group, subscribe={topic: "*"}, listener=listener("c1"), orderly=True)
    async with c1:
        await produce(range(0, 15))
        await wait_until(lambda: len(consumed) >= 40, what="c1 consuming")
        async with PushConsumer(dev.namesrv, group, subscribe={topic: "*"}, listener=listener("c2"), orderly=True) as c2:
            await produce(range(15, 30))
            await wait_until(lambda: len(topic_queues(c1, topic)) == 2 and len(topic_queues(c2, topic)) == 2,
                             timeout=15, what="the queues split 2/2")
            await produce(range(30, 40))
            await wait_until(lambda: len(consumed) >= 40 * len(keys), timeout=20, what="every message")
    assert {who for who, *_ in consumed} == {"c1", "c2"}
    by_queue = collections.defaultdict(list)
    for who, queue, offset, body in consumed:
        by_queue[queue].append(offset)
    for queue, offsets in by_queue.items():
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets))), f"queue {queue} out of order"
        assert offsets[0] == 0
    for key in keys:  # each key's messages in the order they were sent
        assert [b for *_, b in consumed if b.startswith(key + ":")] == sent[key]
    assert failed_once


async def test_async_iteration_acknowledges_what_the_loop_finished(dev, name):
    topic, group = name("T"), name("G")
    await dev.create_topic(topic, 2)
    sent = await send(dev.namesrv, topic, 20)
    got: list[str] = []
    async with PushConsumer(dev.namesrv, group, subscribe={topic: "*"}, consume_from="first") as consumer:
        with trio.fail_after(20):  # fewer than 12 messages delivered must fail, not wait forever
            async for msg in consumer:
                got.append(msg.msg_id)
                if len(got) == 12:
                    break
    rest: list[str] = []
    async with PushConsumer(dev.namesrv, group, subscribe={topic: "*"}) as consumer:
        with trio.move_on_after(5):
            async for msg in consumer:
                rest.append(msg.msg_id)
                if set(got) | set(rest) >= set(sent):
                    break
    assert set(got) | set(rest) == set(sent)
    assert not set(got) & set(rest)  # what the first loop finished was committed
