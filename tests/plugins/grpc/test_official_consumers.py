"""The official RocketMQ 5.x Python client's consumers (``rocketmq-python-client`` 5.1.2 from PyPI, in its own venv)
against `pyrmq dev` in-process: SimpleConsumer receive + ack, change of invisible duration, redelivery with its
attempt counted and then the DLQ, PushConsumer with a failed consumption delivered again, a FIFO group's order.

Long polling and the smallest invisible time are shortened (``QUICK``) so a message left unacked comes back in about
a second; every wait is bounded by the scripts' own deadlines.
"""

from __future__ import annotations

import functools
import json

import pytest
import trio

import official_client
from pyrmq.client import MessageQueue, PullConsumer, PullStatus

pytestmark = pytest.mark.slow

QUICK = {"grpcClientConsumerMinLongPollingTimeoutMillis": 100, "grpcClientConsumerMaxLongPollingTimeoutMillis": 1000,
         "minInvisibleTimeMillsForRecv": 1000}


async def script(name: str, endpoint: str, **spec) -> list[dict]:
    try:
        return await trio.to_thread.run_sync(functools.partial(
            official_client.run_script, name, endpoint, json.dumps(spec), timeout=120))
    except official_client.ClientVenvError as exc:
        pytest.fail(f"the official client's venv could not be built: {exc}")


async def produce(endpoint: str, **spec) -> list[str]:
    lines = await script("produce.py", endpoint, **spec)
    assert [line for line in lines if "error" in line] == []
    return [line["message_id"] for line in lines if "sent" in line]


async def consume(endpoint: str, **spec) -> list[dict]:
    """The consumer's lines; none may be an error."""
    lines = await script("consume.py", endpoint, **spec)
    assert [line for line in lines if "error" in line] == []
    return lines


def attempts(lines: list[dict]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for line in lines:
        if "received" in line:
            out.setdefault(line["received"], []).append(line["attempt"])
    return out


async def test_a_simple_consumer_receives_what_its_tag_selects_acks_it_and_it_stays_consumed(grpc_dev):
    dev = await grpc_dev(**QUICK)
    await dev.create_topic("PySimple", 2)
    await dev.put_group("GPySimple")
    ids = await produce(dev.grpc, topic="PySimple", count=3, tag="TagA", keys=["k1"], properties={"color": "red"})
    others = await produce(dev.grpc, topic="PySimple", count=2, tag="TagB")
    lines = await consume(dev.grpc, topic="PySimple", group="GPySimple", count=3, tag="TagA")
    got = [line for line in lines if "received" in line]
    assert sorted(m["received"] for m in got) == sorted(ids)
    assert sorted(m["body"] for m in got) == ["body-0", "body-1", "body-2"]
    assert {(m["tag"], tuple(m["keys"]), m["properties"].get("color"), m["attempt"], m["topic"]) for m in got} == {
        ("TagA", ("k1",), "red", 1, "PySimple")}
    assert sorted(line["acked"] for line in lines if "acked" in line) == sorted(ids)
    assert not set(others) & set(attempts(lines))
    # acked for good: a second consumer of the group gets nothing (the TagB messages were passed over for the group,
    # as RocketMQ's POP does: one group, one subscription)
    again = await consume(dev.grpc, topic="PySimple", group="GPySimple", count=1, tag="*", deadline_s=3)
    assert [line for line in again if "received" in line] == [] and again[-1] == {"done": 0}


async def test_a_change_of_invisible_duration_brings_the_message_back_early_with_its_next_attempt(grpc_dev):
    dev = await grpc_dev(**QUICK)
    await dev.create_topic("PyChange", 1)
    await dev.put_group("GPyChange")
    ids = await produce(dev.grpc, topic="PyChange", count=2)
    # received invisible for 60 s, changed to 1 s: back within the script's 20 s deadline, with attempt 2, then acked
    lines = await consume(dev.grpc, topic="PyChange", group="GPyChange", count=2, invisible_s=60, change_s=1,
                          deadline_s=20)
    assert attempts(lines) == {i: [1, 2] for i in ids}
    assert sorted(line["changed"] for line in lines if "changed" in line) == sorted(ids)
    assert sorted(line["acked"] for line in lines if "acked" in line) == sorted(ids)
    handles = {}
    for line in lines:
        if "received" in line:
            handles.setdefault(line["received"], []).append(line["handle"])
    assert all(len(set(h)) == 2 for h in handles.values())  # each delivery has its own receipt handle


async def test_an_unacked_message_comes_back_with_its_attempts_counted_then_goes_to_the_dlq(grpc_dev, until):
    dev = await grpc_dev(**QUICK)
    await dev.create_topic("PyRedeliver", 1)
    await dev.put_group("GPyRedeliver")
    await dev.put_group("GPyDead", retryMaxTimes=1)  # 5.x: max attempts = retryMaxTimes + 1 = 2
    (kept,) = await produce(dev.grpc, topic="PyRedeliver", count=1, body="kept")
    lines = await consume(dev.grpc, topic="PyRedeliver", group="GPyRedeliver", count=1, invisible_s=1, skip=2,
                          deadline_s=30)
    assert attempts(lines) == {kept: [1, 2, 3]}
    assert [line["acked"] for line in lines if "acked" in line] == [kept]
    # the other group never acks: two deliveries, then the broker dead-letters it at the next receive
    lines = await consume(dev.grpc, topic="PyRedeliver", group="GPyDead", count=1, invisible_s=1, skip=99,
                          deadline_s=8)
    assert attempts(lines) == {kept: [1, 2]}

    async def dead_lettered():
        async with PullConsumer(dev.namesrv, "readback") as consumer:
            result = await consumer.pull(MessageQueue("%DLQ%GPyDead", "broker-a", 0), "*", 0, 8)
            return result.messages if result.status is PullStatus.FOUND else None

    (dead,) = await until(dead_lettered, "the message in %DLQ%GPyDead", timeout=20)
    assert dead.properties["UNIQ_KEY"] == kept and dead.body == b"kept-0"


async def test_a_push_consumer_gets_a_failed_message_again_with_its_attempt_counted(grpc_dev):
    dev = await grpc_dev(**QUICK)
    await dev.create_topic("PyPush", 2)
    await dev.put_group("GPyPush")
    ids = await produce(dev.grpc, topic="PyPush", count=4)
    # FAILURE: the client changes the invisible duration to its backoff's first step, the message comes back
    lines = await consume(dev.grpc, topic="PyPush", group="GPyPush", kind="push", count=4, fail=1, deadline_s=30)
    assert attempts(lines) == {i: [1, 2] for i in ids}
    assert lines[-1] == {"done": 4}


async def test_a_push_consumer_of_a_fifo_group_consumes_each_message_group_in_order(grpc_dev):
    dev = await grpc_dev(**QUICK)
    await dev.create_topic("PyFifoPush", 4, message_type="FIFO")
    await dev.put_group("GPyFifoPush", consumeMessageOrderly=True)
    sent = {g: await produce(dev.grpc, topic="PyFifoPush", kind="fifo", count=4, group=g, body=g) for g in "abc"}
    # each first consumption fails: a FIFO group retries in place, the group's later messages wait for it
    lines = await consume(dev.grpc, topic="PyFifoPush", group="GPyFifoPush", kind="push", count=12, fail=1,
                          deadline_s=60)
    for g, ids in sent.items():
        order = [line["received"] for line in lines if "received" in line and line["group"] == g]
        assert order == [i for i in ids for _ in range(2)], (g, order)
