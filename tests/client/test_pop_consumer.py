"""POP consumption through the client API only (SimpleConsumer, its blocking face, the push consumer's POP mode, the
group admin), against `pyrmq dev` in process on real sockets."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
import trio

from pyrmq.client import (
    Admin,
    BlockingAdmin,
    BlockingSimpleConsumer,
    BrokerError,
    ConsumeResult,
    InvalidMessageError,
    InvalidSubscriptionError,
    Message,
    Producer,
    PushConsumer,
    SimpleConsumer,
)
from pyrmq.client.dlq import list_dlq

from .conftest import wait_until

_short = itertools.count(1)


@pytest.fixture
def name(request):
    """Short unique names: a POP retry topic is %RETRY%<group>_<topic>, and a topic name has at most 127 bytes."""
    base = "".join(c for c in request.node.name.removeprefix("test_") if c.isalnum())[:16]

    def make(prefix: str) -> str:
        return f"{prefix}_{base}_{next(_short)}"

    return make


async def send(namesrv: str, topic: str, n: int, **kwargs) -> list[str]:
    async with Producer(namesrv) as producer:
        return [(await producer.send(Message(topic, f"m{i}", **kwargs))).msg_id for i in range(n)]


async def receive_all(consumer: SimpleConsumer, n: int, invisible: float = 30.0, *, timeout: float = 20.0,
                      batch: int = 16, ack: bool = True) -> list:
    got: list = []
    with trio.fail_after(timeout):
        while len(got) < n:
            msgs = await consumer.receive(batch, invisible, await_duration=1)
            got += msgs
            if ack:
                for m in msgs:
                    await consumer.ack(m)
    return got


async def dead_letters(namesrv: str, group: str, n: int) -> list:
    with trio.fail_after(20):
        while True:
            letters = await list_dlq(namesrv, group, 100)
            if len(letters) >= n:
                return letters
            await trio.sleep(0.1)


# -- SimpleConsumer ---------------------------------------------------------------------------------------------------

async def test_receive_ack_and_nothing_comes_back(dev, name):
    topic, group = name("T"), name("G")
    await dev.create_topic(topic, 2)
    sent = await send(dev.namesrv, topic, 6)
    async with SimpleConsumer(dev.namesrv, group, subscribe={topic: "*"}, consume_from="first") as consumer:
        got = await receive_all(consumer, 6, invisible=1.0)
        assert sorted(m.msg_id for m in got) == sorted(sent)
        assert {m.delivery_attempt for m in got} == {1}
        assert {m.topic for m in got} == {topic}
        assert all(m.receipt_handle.queue_offset == m.queue_offset and m.handle.count(" ") == 7 for m in got)
        # acked messages never return, even once their invisible time (1 s) is long over: a control message that
        # is not acked comes back first
        control = (await send(dev.namesrv, topic, 1))[0]
        first = await receive_all(consumer, 1, invisible=1.0, ack=False)
        assert [m.msg_id for m in first] == [control]
        again = await receive_all(consumer, 1, invisible=30.0, ack=False)
        assert [(m.msg_id, m.delivery_attempt) for m in again] == [(control, 2)]


async def test_expiry_redelivers_with_attempts_and_new_handles(dev, name):
    topic, group = name("T"), name("G")
    await dev.create_topic(topic, 1)
    [msg_id] = await send(dev.namesrv, topic, 1, tags="A", keys="k1")
    async with SimpleConsumer(dev.namesrv, group, subscribe={topic: "*"}, consume_from="first") as consumer:
        handles = []
        for attempt in (1, 2, 3):
            [m] = await receive_all(consumer, 1, invisible=1.0, ack=False)
            assert (m.msg_id, m.delivery_attempt, m.topic, m.tags, m.keys, m.body) == \
                (msg_id, attempt, topic, "A", ("k1",), b"m0")
            handles.append(m.handle)
        assert len(set(handles)) == 3
        assert m.real_topic == f"%RETRY%{group}_{topic}"  # a redelivered message lives in the POP retry topic
        await consumer.ack(m)


async def test_change_invisible_duration(dev, name):
    topic, group = name("T"), name("G")
    await dev.create_topic(topic, 1)
    await send(dev.namesrv, topic, 2)
    async with SimpleConsumer(dev.namesrv, group, subscribe={topic: "*"}, consume_from="first") as consumer:
        a, b = await receive_all(consumer, 2, invisible=1.0, ack=False, batch=2)
        old = a.handle
        handle = await consumer.change_invisible_duration(a, 3600)  # a stays hidden; b comes back first
        assert a.handle == handle.encode() != old
        [back] = await receive_all(consumer, 1, invisible=30.0, ack=False)
        assert (back.msg_id, back.delivery_attempt) == (b.msg_id, 2)
        await consumer.change_invisible_duration(a, 0)  # visible again at once
        [again] = await receive_all(consumer, 1, invisible=30.0, ack=False)
        assert (again.msg_id, again.delivery_attempt) == (a.msg_id, 2)
        await consumer.ack(again)
        await consumer.ack(back)
        with pytest.raises(InvalidMessageError, match="invisible_duration"):
            await consumer.change_invisible_duration(again, -1)
        with pytest.raises(InvalidMessageError, match="max_messages"):
            await consumer.receive(33, 10)


async def test_retry_then_dead_letter_queue(dev, name):
    topic, group = name("T"), name("G")
    await dev.create_topic(topic, 1)
    async with Admin(dev.namesrv) as admin:
        await admin.put_group({"groupName": group, "retryMaxTimes": 1})
    [msg_id] = await send(dev.namesrv, topic, 1)
    async with SimpleConsumer(dev.namesrv, group, subscribe={topic: "*"}, consume_from="first") as consumer:
        attempts = []
        for _ in range(2):  # retryMaxTimes 1: two deliveries
            [m] = await receive_all(consumer, 1, invisible=1.0, ack=False)
            attempts.append((m.msg_id, m.delivery_attempt))
        assert attempts == [(msg_id, 1), (msg_id, 2)]
        # the third time the consumer forwards it to %DLQ%<group> instead of handing it out
        letters: list = []
        with trio.fail_after(20):
            while not letters:
                assert await consumer.receive(1, 30, await_duration=1) == []
                letters = await list_dlq(dev.namesrv, group, 10)
        [letter] = letters
        assert letter.uniq_key == msg_id and letter.body == b"m0"
        # and it is acked: a control message sent now is the next thing received
        [control] = await send(dev.namesrv, topic, 1)
        got = await receive_all(consumer, 1, invisible=30.0)
        assert [m.msg_id for m in got] == [control]


async def test_fifo_order_per_message_group_with_several_consumers(dev, name):
    topic, group = name("T"), name("G")
    await dev.create_topic(topic, 2)
    async with Admin(dev.namesrv) as admin:
        await admin.put_group({"groupName": group, "consumeMessageOrderly": True})
    keys = [f"order-{k}" for k in range(6)]
    async with Producer(dev.namesrv) as producer:
        for i in range(60):
            key = keys[i % len(keys)]
            await producer.send_orderly(Message(topic, f"{key}:{i}", keys=key), sharding_key=key)
    consumed: dict[str, list[int]] = {k: [] for k in keys}
    holders: dict[str, str] = {}
    overlap = []
    done = trio.Event()

    async def consume(cid: str) -> None:
        async with SimpleConsumer(dev.namesrv, group, subscribe={topic: "*"}, consume_from="first") as consumer:
            first_round = True
            while not done.is_set():
                msgs = await consumer.receive(4, 30, await_duration=0.5)
                assert all(m.fifo for m in msgs)
                if first_round and msgs and cid == "c0":
                    # c0 gives up on its first batch: the same messages come back, in order, to someone
                    first_round = False
                    for m in msgs:
                        await consumer.change_invisible_duration(m, 0)
                    continue
                for m in msgs:
                    if m.msg_id in holders:
                        overlap.append((m.msg_id, holders[m.msg_id], cid))
                    holders[m.msg_id] = cid
                for m in msgs:
                    key, i = m.body.decode().split(":")
                    consumed[key].append(int(i))
                    await trio.sleep(0)
                    await consumer.ack(m)
                    del holders[m.msg_id]
                if sum(map(len, consumed.values())) >= 60:
                    done.set()

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            for c in range(3):
                nursery.start_soon(consume, f"c{c}")
    assert overlap == []
    for k, seen in consumed.items():
        assert seen == sorted(seen) and len(seen) == 10, (k, seen)


async def test_eight_consumers_share_a_one_queue_topic(dev, name):
    topic, group = name("T"), name("G")
    await dev.create_topic(topic, 1)
    await send(dev.namesrv, topic, 1)  # the group starts at the queue's head ("first")
    received: dict[int, list[str]] = {c: [] for c in range(8)}
    held: dict[str, int] = {}
    overlap = []
    total = 161
    all_in = trio.Event()
    parked = Counter()

    async def consume(c: int) -> None:
        async with SimpleConsumer(dev.namesrv, group, subscribe={topic: "*"}, consume_from="first") as consumer:
            parked[c] += 1
            while not all_in.is_set():
                # one message per receive at first: eight parked pops, each woken by its own arrival
                msgs = await consumer.receive(1 if not received[c] else 4, 30, await_duration=1)
                for m in msgs:
                    if m.msg_id in held:
                        overlap.append((m.msg_id, held[m.msg_id], c))
                    held[m.msg_id] = c
                    received[c].append(m.msg_id)
                for m in msgs:
                    await consumer.ack(m)
                    del held[m.msg_id]
                if sum(map(len, received.values())) >= total:
                    all_in.set()

    async with trio.open_nursery() as nursery:
        for c in range(8):
            nursery.start_soon(consume, c)
        await wait_until(lambda: len(parked) == 8, what="eight consumers started")
        with trio.fail_after(30):
            async with Producer(dev.namesrv) as producer:
                for i in range(total - 1):
                    await producer.send(Message(topic, f"m{i}"))
                    if i < 8:
                        await trio.sleep(0.05)  # let the next parked pop take it
            await all_in.wait()
    ids = [i for got in received.values() for i in got]
    assert overlap == [] and len(ids) == len(set(ids)) == total
    assert all(received[c] for c in range(8)), {c: len(v) for c, v in received.items()}


async def test_tag_and_sql92_filters(dev, name):
    topic, tag_group, sql_group = name("T"), name("GT"), name("GS")
    await dev.create_topic(topic, 2)
    async with Producer(dev.namesrv) as producer:
        for i in range(9):
            await producer.send(Message(topic, f"m{i}", tags="ABC"[i % 3], properties={"a": str(i)}))
    async with SimpleConsumer(dev.namesrv, tag_group, subscribe={topic: "A || C"}, consume_from="first") as consumer:
        got = await receive_all(consumer, 6)
        assert sorted(m.body for m in got) == [b"m0", b"m2", b"m3", b"m5", b"m6", b"m8"]
        assert await consumer.receive(16, 30, await_duration=0.3) == []
    consumer = SimpleConsumer(dev.namesrv, sql_group, consume_from="first")
    consumer.subscribe(topic, sql="a > 5 AND TAGS <> 'B'")
    async with consumer:
        got = await receive_all(consumer, 2)
        assert sorted(m.body for m in got) == [b"m6", b"m8"]
        assert await consumer.receive(16, 30, await_duration=0.3) == []
    with pytest.raises(InvalidSubscriptionError):
        SimpleConsumer(dev.namesrv, name("GB")).subscribe(topic, sql="a >")


async def test_blocking_simple_consumer(dev, name):
    topic, group = name("T"), name("G")
    await dev.create_topic(topic, 2)
    sent = await send(dev.namesrv, topic, 5)

    def work() -> tuple[list[str], list[int], list]:
        with BlockingSimpleConsumer(dev.namesrv, group, subscribe={topic: "*"}, consume_from="first") as consumer:
            got = []
            while len(got) < 5:
                got += consumer.receive(8, 1.0, await_duration=1)
            first = got[0]
            consumer.change_invisible_duration(first, 0)
            again = []
            while not again:
                again = [m for m in consumer.receive(8, 30, await_duration=1) if m.msg_id == first.msg_id]
            consumer.ack_batch(got[1:])
            consumer.ack(again[0])
            rest = consumer.receive(8, 30, await_duration=0.5)
            return [m.msg_id for m in got], [m.delivery_attempt for m in again], rest

    with trio.fail_after(30):
        ids, attempts, rest = await trio.to_thread.run_sync(work)
    assert sorted(ids) == sorted(sent) and attempts == [2] and rest == []


async def test_blocking_admin_declares_updates_and_deletes_a_group(dev, name):
    group = name("G")

    def work() -> tuple[list[str], dict, list[str], list[str]]:
        with BlockingAdmin(dev.namesrv) as admin:
            created = admin.put_group({"groupName": group, "consumeMessageOrderly": True, "retryMaxTimes": 3})
            listed = {g["group"]: g for g in admin.list_groups()}[group]
            deleted = admin.delete_group(group)
            after = [g["group"] for g in admin.list_groups()]
        return created, listed, deleted, after

    with trio.fail_after(30):
        created, listed, deleted, after = await trio.to_thread.run_sync(work)
    assert created == deleted == ["broker-a"]
    assert (listed["consumeMessageOrderly"], listed["retryMaxTimes"]) == (True, 3)
    assert group not in after


# -- the push consumer's POP mode --------------------------------------------------------------------------------------

async def test_pop_push_consumer_backlog_new_messages_and_retries(dev, name):
    topic, group = name("T"), name("G")
    await dev.create_topic(topic, 4)
    backlog = await send(dev.namesrv, topic, 40)
    seen: Counter = Counter()
    attempts: dict[str, list[int]] = {}

    async def listener(msg) -> ConsumeResult:
        seen[msg.msg_id] += 1
        attempts.setdefault(msg.msg_id, []).append(msg.delivery_attempt)
        if msg.body.endswith(b"7") and msg.delivery_attempt == 1:
            return ConsumeResult.RECONSUME_LATER  # back after the first back-off step
        return ConsumeResult.SUCCESS

    consumer = PushConsumer(dev.namesrv, group, subscribe={topic: "*"}, listener=listener, mode="pop",
                            consume_from="first", retry_backoff=(0.5,))
    async with consumer:
        fresh = await send(dev.namesrv, topic, 40)
        everything = set(backlog) | set(fresh)
        await wait_until(lambda: set(seen) == everything and consumer.stats()["consumed"] == 80, timeout=30,
                         what="every message consumed")
        assert consumer.assigned_queues() == set()  # no rebalance: nothing owned
        assert consumer.stats()["mode"] == "pop"
    retried = {i: a for i, a in attempts.items() if len(a) > 1}
    assert len(retried) == 8 and all(a == [1, 2] for a in retried.values())
    assert all(n == 1 for i, n in seen.items() if i not in retried)
    async with Admin(dev.namesrv) as admin:  # acked for good: nothing left to pop for the group
        progress = await admin.group_progress(group, topic)
    assert sum(p.lag for p in progress) == 0


async def test_pop_push_consumer_async_for_and_dead_letters(dev, name):
    topic, group = name("T"), name("G")
    await dev.create_topic(topic, 2)
    async with Admin(dev.namesrv) as admin:
        await admin.put_group({"groupName": group, "retryMaxTimes": 1})
    sent = await send(dev.namesrv, topic, 6)
    poison = sent[0]
    got: list[tuple[str, int]] = []
    async with PushConsumer(dev.namesrv, group, subscribe={topic: "*"}, mode="pop", consume_from="first",
                            retry_backoff=(0.3,)) as consumer:
        with trio.fail_after(30):
            async for msg in consumer:
                got.append((msg.msg_id, msg.delivery_attempt))
                if msg.msg_id == poison:
                    consumer.reconsume_later(msg)
                if len(got) == 7:  # five good ones, the poison one twice (attempts 1 and 2), then the DLQ
                    break
    assert sorted(a for i, a in got if i == poison) == [1, 2]
    assert sorted(i for i, _ in got if i != poison) == sorted(sent[1:])
    [letter] = await dead_letters(dev.namesrv, group, 1)
    assert letter.uniq_key == poison


async def test_pop_push_fifo_group_in_order_across_consumers(dev, name):
    topic, group = name("T"), name("G")
    await dev.create_topic(topic, 2)
    async with Admin(dev.namesrv) as admin:
        await admin.put_group({"groupName": group, "consumeMessageOrderly": True})
    keys = [f"k{k}" for k in range(4)]
    consumed: dict[str, list[int]] = {k: [] for k in keys}
    failed_once: set[int] = set()

    async def listener(msg) -> bool:
        key, i = msg.body.decode().split(":")
        if int(i) % 10 == 3 and int(i) not in failed_once:
            failed_once.add(int(i))
            return False  # retried here, in place: the ones after it wait
        consumed[key].append(int(i))
        await trio.sleep(0)
        return True

    consumers = [PushConsumer(dev.namesrv, group, subscribe={topic: "*"}, listener=listener, mode="pop",
                              consume_from="first", retry_backoff=(0.2,)) for _ in range(2)]
    async with consumers[0], consumers[1], Producer(dev.namesrv) as producer:
        for i in range(40):
            key = keys[i % 4]
            await producer.send_orderly(Message(topic, f"{key}:{i}"), sharding_key=key)
        await wait_until(lambda: sum(map(len, consumed.values())) >= 40, timeout=30, what="40 consumed")
    for k, seen in consumed.items():
        assert seen == sorted(seen) and len(seen) == 10, (k, seen)
    assert failed_once == {3, 13, 23, 33}


async def test_pop_group_and_classic_group_on_one_topic(dev, name):
    topic, pop_group, classic_group = name("T"), name("GP"), name("GC")
    await dev.create_topic(topic, 4)
    pop_got: Counter = Counter()
    classic_got: Counter = Counter()
    pop_consumer = PushConsumer(dev.namesrv, pop_group, subscribe={topic: "*"}, mode="pop", consume_from="first",
                                listener=lambda m: pop_got.update([m.msg_id]))
    classic = PushConsumer(dev.namesrv, classic_group, subscribe={topic: "*"}, consume_from="first",
                           listener=lambda m: classic_got.update([m.msg_id]))
    sent = await send(dev.namesrv, topic, 30)
    async with pop_consumer, classic:
        sent += await send(dev.namesrv, topic, 30)
        await wait_until(lambda: set(pop_got) == set(sent) and set(classic_got) == set(sent), timeout=30,
                         what="both groups got everything")
    assert set(pop_got.values()) == {1} and set(classic_got.values()) == {1}
    async with Admin(dev.namesrv) as admin:
        assert sum(p.lag for p in await admin.group_progress(classic_group, topic)) == 0
        assert sum(p.lag for p in await admin.group_progress(pop_group, topic)) == 0


async def test_change_invisible_duration_right_after_receive(dev, name):
    """A message received alone (its checkpoint starts at its own offset) and given back in the same millisecond:
    the new checkpoint of CHANGE_MESSAGE_INVISIBLETIME would have the old one's (topic, group, queue, startOffset,
    popTime), and the message must still come back. The broker moves the new popTime one millisecond on in that case,
    so the change is repeated until its popTime is at most the pop's + 1 ms."""
    topic, group = name("T"), name("G")
    await dev.create_topic(topic, 1)
    async with Producer(dev.namesrv) as producer, \
            SimpleConsumer(dev.namesrv, group, subscribe={topic: "*"}, consume_from="first") as consumer:
        for attempt in range(500):
            await producer.send(Message(topic, f"m{attempt}"))
            [m] = await receive_all(consumer, 1, invisible=60.0, ack=False)
            popped_at = m.receipt_handle.pop_time
            new = await consumer.change_invisible_duration(m, 0.2)
            if new.pop_time - popped_at <= 1 and m.receipt_handle.ck_queue_offset == m.queue_offset:
                break
            await consumer.ack(m)
        else:
            raise AssertionError("no change of invisible time within the pop's millisecond in 500 tries")
        [back] = await receive_all(consumer, 1, invisible=60.0, ack=False)
        assert (back.msg_id, back.delivery_attempt) == (m.msg_id, 2)
