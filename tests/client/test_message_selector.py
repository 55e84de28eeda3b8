"""SQL92 subscriptions from the Python client: checked before anything is sent, evaluated by the broker for push and
pull consumers and for `pyrmq consume --sql`; a broker without enablePropertyFilter refuses the start."""

from __future__ import annotations

import json
import sys

import pytest
import trio

from pyrmq.client import (
    Admin,
    BrokerError,
    InvalidSubscriptionError,
    Message,
    MessageQueue,
    MessageSelector,
    Producer,
    PullConsumer,
    PushConsumer,
)
from pyrmq.remoting.codes import ResponseCode

from .conftest import Dev, wait_registered

SQL = "region = 'eu' AND amount BETWEEN 100 AND 500"


@pytest.fixture
async def sql_dev(start_role) -> Dev:
    kernel = await start_role("dev", {"broker.enablePropertyFilter": True})
    namesrv = kernel.listening["namesrv"]
    await wait_registered(namesrv)
    return Dev(kernel, namesrv, kernel.listening["broker"])


def mixed(topic: str, n: int) -> list[Message]:
    """Every 10th message matches SQL; others miss on region, amount, or lack a property."""
    out = []
    for i in range(n):
        props = {"region": "eu" if i % 2 == 0 else "us", "amount": str(150 if i % 10 == 0 else 600 + i)}
        if i % 7 == 3:
            del props["amount"]
        out.append(Message(topic, f"m{i}", tags="T", properties=props))
    return out


def matching(n: int) -> set[str]:
    return {f"m{i}" for i in range(n) if i % 10 == 0 and i % 7 != 3}


async def produce(namesrv: str, messages: list[Message]) -> None:
    async with Producer(namesrv, "sql_producer") as producer:
        for msg in messages:
            await producer.send(msg)


def test_bad_sql_is_refused_before_anything_is_sent():
    with pytest.raises(InvalidSubscriptionError) as info:
        MessageSelector.by_sql("region = 'eu' AND amount >")
    assert (info.value.line, info.value.column) == (1, 27) and "line 1, column 27" in str(info.value)
    consumer = PushConsumer("127.0.0.1:1", "g_sql")  # never started: nothing reaches the network
    with pytest.raises(InvalidSubscriptionError):
        consumer.subscribe("T", sql="a = 1 OR")
    consumer.subscribe("T", MessageSelector.by_sql("a IN ('x', 'y')"))
    assert (consumer.subscriptions["T"].expression_type, consumer.subscriptions["T"].expression) == ("SQL92", "a IN ('x', 'y')")


async def test_push_consumer_receives_exactly_the_matching_messages(sql_dev, name):
    topic, group = name("T"), name("G")
    await sql_dev.create_topic(topic, 4)
    await produce(sql_dev.namesrv, mixed(topic, 200))
    got: list[str] = []
    consumer = PushConsumer(sql_dev.namesrv, group, consume_from="first", listener=lambda m: got.append(m.text()))
    consumer.subscribe(topic, sql=SQL)
    async with consumer:
        with trio.fail_after(30):
            while len(got) < len(matching(200)):
                await trio.sleep(0.05)
        await trio.sleep(0.5)  # nothing more arrives
    assert sorted(got) == sorted(matching(200))


async def test_pull_consumer_with_a_selector(sql_dev, name):
    topic = name("T")
    await sql_dev.create_topic(topic, 1)
    await produce(sql_dev.namesrv, mixed(topic, 40))
    async with PullConsumer(sql_dev.namesrv, name("G")) as consumer:
        mq = MessageQueue(topic, "broker-a", 0)
        result = await consumer.pull(mq, MessageSelector.by_sql(SQL), 0, 32)
        texts = [m.text() for m in result.messages]
        result = await consumer.pull(mq, offset=result.next_begin_offset, sql=SQL)
        texts += [m.text() for m in result.messages]
    assert sorted(texts) == sorted(matching(40))


async def test_broker_without_property_filter_refuses_the_start(dev, name):
    topic = name("T")
    await dev.create_topic(topic, 1)
    consumer = PushConsumer(dev.namesrv, name("G"))
    consumer.subscribe(topic, sql=SQL)
    with pytest.raises(BrokerError) as info:
        async with consumer:
            pass
    assert info.value.code == ResponseCode.SYSTEM_ERROR
    assert "does not support consumer to filter message by SQL92" in str(info.value)


async def test_console_consume_with_sql(sql_dev, name):
    topic = name("T")
    await sql_dev.create_topic(topic, 2)
    await produce(sql_dev.namesrv, mixed(topic, 60))
    with trio.fail_after(60):
        out = await trio.run_process(
            [sys.executable, "-m", "pyrmq", "consume", "-n", sql_dev.namesrv, "-t", topic, "-g", name("G"), "--from",
             "first", "--sql", SQL, "--json", "--count", str(len(matching(60))), "--timeout", "20"],
            capture_stdout=True, capture_stderr=True, check=False,
        )
    assert out.returncode == 0, out.stderr.decode()
    assert sorted(json.loads(line)["body"] for line in out.stdout.decode().splitlines()) == sorted(matching(60))
    with trio.fail_after(60):
        bad = await trio.run_process([sys.executable, "-m", "pyrmq", "consume", "-n", sql_dev.namesrv, "-t", topic, "-g",
                                      "g", "--sql", "amount >"], capture_stdout=True, capture_stderr=True, check=False)
    assert bad.returncode != 0 and "line 1, column 9" in bad.stderr.decode()


async def broker_has_expression(namesrv: str, group: str, topic: str, expression: str) -> None:
    """Wait until the broker shows the group subscribed with ``expression`` (what ``mqadmin consumerConnection``
    prints): the heartbeat carrying it has arrived."""
    async with Admin(namesrv) as admin:
        with trio.fail_after(15):
            while (await admin.group_connections(group))["subscriptions"].get(topic, {}).get("subString") != expression:
                await trio.sleep(0.05)


async def test_running_push_consumer_changes_its_expression(sql_dev, name):
    """A started consumer subscribes again with another expression: the broker filters with the new one from the next
    pull on (its pull parked with the old filter included), without a restart."""
    topic, group = name("T"), name("G")
    await sql_dev.create_topic(topic, 1)  # one queue: the consumer is past the first stream once its last match is in
    got: list[str] = []
    consumer = PushConsumer(sql_dev.namesrv, group, consume_from="first", listener=lambda m: got.append(m.text()))
    consumer.subscribe(topic, sql="region = 'eu'")

    def stream(prefix: str) -> list[Message]:
        return [Message(topic, f"{prefix}{i}", properties={"region": ("us", "apac", "eu")[i % 3]}) for i in range(30)]

    async with consumer:
        await produce(sql_dev.namesrv, stream("a"))  # a29, the last one, is in 'eu'
        with trio.fail_after(30):
            while "a29" not in got:
                await trio.sleep(0.05)
        await trio.sleep(0.3)  # the next pull parks with the old filter
        consumer.subscribe(topic, sql="region = 'us' OR region = 'apac'")
        await broker_has_expression(sql_dev.namesrv, group, topic, "region = 'us' OR region = 'apac'")
        await produce(sql_dev.namesrv, stream("b"))
        with trio.fail_after(30):
            while len(got) < 30:
                await trio.sleep(0.05)
        await trio.sleep(0.5)  # nothing more arrives
    assert sorted(got) == sorted([f"a{i}" for i in range(2, 30, 3)] + [f"b{i}" for i in range(30) if i % 3 != 2])


def test_subscribing_again_always_gives_a_newer_version():
    consumer = PushConsumer("127.0.0.1:1", "g_sql")  # never started: nothing reaches the network
    versions = []
    for i in range(50):  # many within one millisecond
        consumer.subscribe("T", sql=f"a = {i}")
        versions.append(consumer.subscriptions["T"].version)
    assert all(later > earlier for earlier, later in zip(versions, versions[1:]))
