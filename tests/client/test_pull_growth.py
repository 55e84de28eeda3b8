"""A concurrent push consumer's pulls grow with the backlog (docs/decisions.md, issue 29), against `pyrmq dev`
in-process on real sockets: what the broker sees (a guard plugin records every PULL_MESSAGE's maxMsgNums and
largePull flag), what the consumer receives (every message once, in offset order for ``async for``), and RocketMQ's
per-pull caps kept for pulls without the flag."""

from __future__ import annotations

import collections

import pytest
import trio

from pyrmq.client import ClientConfig, Message, MessageQueue, Producer, PushConsumer
from pyrmq.client import api
from pyrmq.client.instance import ClientInstance
from pyrmq.client.message import MessageExt
from pyrmq.kernel.hookspecs import hookimpl
from pyrmq.remoting.codes import RequestCode
from pyrmq.remoting.vocabulary import PullSysFlag

from .conftest import FAST_DELAY_LEVELS, Dev, wait_registered, wait_until


class PullRecorder:
    """A request guard that lets everything through and records the PULL_MESSAGE requests of one topic."""

    def __init__(self) -> None:
        self.topic = ""
        #: (queueOffset, maxMsgNums, largePull flag) in arrival order
        self.pulls: list[tuple[int, int, bool]] = []

    @hookimpl
    def pyrmq_make_request_guard(self, kernel, role):
        if role != "broker":
            return None

        def guard(connection, request):
            ext = request.ext_fields
            if request.code == RequestCode.PULL_MESSAGE and ext.get("topic") == self.topic:
                self.pulls.append((int(ext["queueOffset"]), int(ext["maxMsgNums"]), ext.get("largePull") == "true"))
            return None

        return guard


@pytest.fixture
async def recorded(start_role) -> tuple[Dev, PullRecorder]:
    recorder = PullRecorder()
    kernel = await start_role("dev", {"broker.messageDelayLevel": FAST_DELAY_LEVELS}, extra_plugins=[recorder])
    namesrv = kernel.listening["namesrv"]
    await wait_registered(namesrv)
    return Dev(kernel, namesrv, kernel.listening["broker"]), recorder


async def store(dev: Dev, topic: str, n: int) -> None:
    async with Producer(dev.namesrv, "test_producer") as producer:
        for start in range(0, n, 100):
            await producer.send_batch([Message(topic, f"m{i}") for i in range(start, min(n, start + 100))])


def check_growth(pulls: list[tuple[int, int, bool]], total: int) -> None:
    """The pulls of one queue holding ``total`` messages consumed from 0 by a consumer with the defaults."""
    assert pulls[0] == (0, 32, False)  # RocketMQ's pullBatchSize first, as a Java client asks
    grown = [p for p in pulls if p[1] > 32]
    assert grown and all(large for _, _, large in grown)  # asked beyond 32: flagged
    assert max(size for _, size, _ in pulls) == 256
    assert all(not large for _, size, large in pulls if size == 32)
    # the broker answered beyond its 32-message cap: a pull started more than 32 offsets after the one before
    offsets = [offset for offset, _, _ in pulls]
    assert max(b - a for a, b in zip(offsets, offsets[1:])) > 32
    # caught up: the pull parked at the end asks RocketMQ's 32 again
    assert pulls[-1] == (total, 32, False)


async def test_async_for_pulls_grow_with_the_backlog_and_every_message_comes_once_in_order(recorded, name):
    dev, recorder = recorded
    topic, group = name("T"), name("G")
    recorder.topic = topic
    await dev.create_topic(topic, 1)
    total = 1500
    await store(dev, topic, total)
    got: list[MessageExt] = []
    async with PushConsumer(dev.namesrv, group, subscribe={topic: "*"}, consume_from="first") as consumer:
        with trio.fail_after(30):
            async for msg in consumer:
                got.append(msg)
                if len(got) == total:
                    break
        await wait_until(lambda: recorder.pulls[-1][0] == total, what="the pull parked at the queue's end")
    assert [m.queue_offset for m in got] == list(range(total))
    assert [m.text() for m in got] == [f"m{i}" for i in range(total)]
    check_growth(recorder.pulls, total)


async def test_a_listeners_pulls_grow_and_every_message_comes_once(recorded, name):
    dev, recorder = recorded
    topic, group = name("T"), name("G")
    recorder.topic = topic
    await dev.create_topic(topic, 1)
    total = 1500
    await store(dev, topic, total)
    got: list[int] = []

    async def on_message(msg: MessageExt) -> None:
        got.append(msg.queue_offset)

    async with PushConsumer(dev.namesrv, group, subscribe={topic: "*"}, listener=on_message, consume_from="first"):
        await wait_until(lambda: len(got) >= total, timeout=30, what="every message")
        await wait_until(lambda: recorder.pulls[-1][0] == total, what="the pull parked at the queue's end")
    assert sorted(got) == list(range(total))  # each once
    check_growth(recorder.pulls, total)


async def test_a_listener_that_falls_behind_pulls_32_again_until_it_catches_up(recorded, name):
    dev, recorder = recorded
    topic, group = name("T"), name("G")
    recorder.topic = topic
    await dev.create_topic(topic, 1)
    total = 1500
    await store(dev, topic, total)
    got: list[int] = []
    release = trio.Event()

    async def on_message(msg: MessageExt) -> None:
        await release.wait()  # the first message holds its worker until the queue's cache is full
        got.append(msg.queue_offset)

    async with PushConsumer(dev.namesrv, group, subscribe={topic: "*"}, listener=on_message, consume_from="first",
                            consume_thread_max=1) as consumer:
        await wait_until(lambda: consumer.stats()["held"] > 1000, what="the queue's cache full (pulls paused)")
        sizes = [size for _, size, _ in recorder.pulls]
        # 32 first; then 256 while it holds no more than one pull's worth (0 held, then 32); holding 32 + 256, and
        # more from then on: back to 32
        assert sizes[:3] == [32, 256, 256]
        assert len(sizes) > 6 and set(sizes[3:]) == {32}
        release.set()
        await wait_until(lambda: len(got) >= total, timeout=30, what="every message")
    assert sorted(got) == list(range(total))


async def test_orderly_and_pinned_consumers_keep_their_pull_size(recorded, name):
    dev, recorder = recorded
    topic = name("T")
    recorder.topic = topic
    await dev.create_topic(topic, 1)
    await store(dev, topic, 300)
    for kwargs in ({"orderly": True}, {"pull_batch_size": 64, "pull_batch_size_max": 64}):
        recorder.pulls.clear()
        got: list[int] = []

        async def on_message(msg: MessageExt) -> None:
            got.append(msg.queue_offset)

        async with PushConsumer(dev.namesrv, name("G"), subscribe={topic: "*"}, listener=on_message,
                                consume_from="first", **kwargs):
            await wait_until(lambda: len(got) >= 300, timeout=30, what="every message")
        asked = 64 if "pull_batch_size" in kwargs else 32
        assert {(size, large) for _, size, large in recorder.pulls} == {(asked, False)}
        assert collections.Counter(got) == collections.Counter(range(300))


async def test_a_pull_without_the_flag_gets_rocketmqs_caps(dev, name):
    topic, group = name("T"), name("G")
    await dev.create_topic(topic, 1)
    await store(dev, topic, 300)
    mq = MessageQueue(topic, "broker-a", 0)
    instance = ClientInstance(ClientConfig(namesrv_addr=dev.namesrv))
    async with trio.open_nursery() as nursery:
        await instance.start(nursery)
        flags = dict(sys_flag=PullSysFlag.SUBSCRIPTION, subscription="*")
        # as a Java client asking 256: maxTransferCountOnMessageInMemory (32) caps it, as in RocketMQ
        plain = await api.pull(instance, dev.broker, mq, group, 0, max_nums=256, **flags)
        large = await api.pull(instance, dev.broker, mq, group, 0, max_nums=256, large=True, **flags)
        nursery.cancel_scope.cancel()
    assert [m.queue_offset for m in plain.messages] == list(range(32))
    assert plain.next_begin_offset == 32
    assert [m.queue_offset for m in large.messages] == list(range(256))
    assert large.next_begin_offset == 256
