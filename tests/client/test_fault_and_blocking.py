"""Two brokers and one stopped: the producer routes around it. The blocking API from plain threads."""

from __future__ import annotations

import collections
import socket
import threading
import time

import trio

from pyrmq.client import (
    Admin,
    BlockingAdmin,
    BlockingProducer,
    BlockingPullConsumer,
    BlockingPushConsumer,
    Message,
    Producer,
    SendContext,
    SendStatus,
)

from .conftest import wait_registered


async def test_latency_fault_tolerance_routes_around_a_stopped_broker(dev, start_role, name):
    broker_b = await start_role("broker", {"broker.brokerName": "broker-b", "broker.namesrvAddr": dev.namesrv})
    await wait_registered(dev.namesrv, brokers=2)
    topic = name("T")
    async with Admin(dev.namesrv) as admin:
        assert sorted(await admin.create_topic(topic, 4)) == ["broker-a", "broker-b"]
    attempts: list[SendContext] = []
    async with Producer(dev.namesrv, name("pg"), send_timeout=3.0) as producer:
        producer.add_send_hook(after=attempts.append)
        first = [await producer.send(Message(topic, f"before {i}")) for i in range(16)]
        assert {r.message_queue.broker_name for r in first} == {"broker-a", "broker-b"}

        broker_b.request_stop()
        host, port = broker_b.listening["broker"].split(":")
        with trio.fail_after(10):  # until broker-b no longer accepts connections
            while True:
                try:
                    stream = await trio.open_tcp_stream(host, int(port))
                except OSError:
                    break
                await stream.aclose()
                await trio.sleep(0.05)
        attempts.clear()
        after = [await producer.send(Message(topic, f"after {i}")) for i in range(40)]
    assert all(r.status is SendStatus.SEND_OK for r in after)
    assert {r.message_queue.broker_name for r in after} == {"broker-a"}
    failed_on_b = [a for a in attempts if a.exception is not None]
    # no send waited for broker-b more than once: one failed attempt on it, then it is avoided
    assert len(failed_on_b) == 1 and failed_on_b[0].message_queue.broker_name == "broker-b"
    assert not producer.fault.tolerance.is_available("broker-b")  # isolated for 600 s


async def test_blocking_producer_sends_on_through_a_stopped_broker_and_its_hooks_see_every_send(dev, start_role, name):
    broker_b = await start_role("broker", {"broker.brokerName": "broker-b", "broker.namesrvAddr": dev.namesrv})
    await wait_registered(dev.namesrv, brokers=2)
    topic = name("T")
    async with Admin(dev.namesrv) as admin:
        assert sorted(await admin.create_topic(topic, 4)) == ["broker-a", "broker-b"]
    host, port = broker_b.listening["broker"].split(":")

    def scenario(stop_b) -> tuple[list, list, list]:
        with BlockingProducer(dev.namesrv, name("pg"), send_timeout=3.0) as producer:
            before = [producer.send(Message(topic, f"before {i}")) for i in range(16)]
            stop_b()
            after = [producer.send(Message(topic, f"after {i}")) for i in range(16)]
            seen: list[SendContext] = []
            producer.add_send_hook(after=seen.append)
            hooked = [producer.send(Message(topic, f"hooked {i}")) for i in range(4)]
        return before, after, [(r.msg_id, [c.result.msg_id for c in seen if c.result is not None]) for r in hooked]

    def stop_b() -> None:
        trio.from_thread.run_sync(broker_b.request_stop)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # until broker-b no longer accepts connections
            try:
                socket.create_connection((host, int(port)), timeout=1).close()
            except OSError:
                return
            time.sleep(0.05)
        raise AssertionError("broker-b still accepts connections")

    before, after, hooked = await trio.to_thread.run_sync(scenario, stop_b)
    assert {r.message_queue.broker_name for r in before} == {"broker-a", "broker-b"}
    assert all(r.status is SendStatus.SEND_OK for r in before + after)
    assert {r.message_queue.broker_name for r in after} == {"broker-a"}
    assert all(msg_id in seen for msg_id, seen in hooked)


async def test_blocking_api_from_plain_threads(dev, name):
    topic, group = name("T"), name("G")

    def scenario() -> dict:
        with BlockingAdmin(dev.namesrv) as admin:
            admin.create_topic(topic, 4)
            assert topic in admin.list_topics()
        received: list[str] = []
        listener_threads: set[str] = set()
        lock = threading.Lock()

        def on_message(msg) -> None:  # runs in worker threads
            with lock:
                received.append(msg.msg_id)
                listener_threads.add(threading.current_thread().name)

        consumer = BlockingPushConsumer(dev.namesrv, group, consume_from="first")
        consumer.subscribe(topic, "*")
        consumer.register_listener(on_message)
        consumer.start()
        sent: list[str] = []
        with BlockingProducer(dev.namesrv, name("pg")) as producer:
            def send_some(k: int) -> None:
                for i in range(25):
                    r = producer.send(Message(topic, f"thread {k} message {i}", keys=f"t{k}-{i}"))
                    with lock:
                        sent.append(r.msg_id)

            threads = [threading.Thread(target=send_some, args=(k,)) for k in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            futures = [producer.send_async(Message(topic, f"async {i}")) for i in range(10)]
            sent += [f.result(timeout=5).msg_id for f in futures]
            (batch,) = producer.send_batch([Message(topic, f"batch {i}") for i in range(5)])
            sent += batch.msg_id.split(",")
        deadline = time.monotonic() + 15
        while len(set(received)) < len(sent) and time.monotonic() < deadline:
            time.sleep(0.02)
        assigned = consumer.assigned_queues()
        consumer.shutdown()

        with BlockingPullConsumer(dev.namesrv, name("pull")) as puller:
            queues = puller.fetch_queues(topic)
            pulled = sum(len(puller.pull(mq, "*", 0, 64).messages) for mq in queues)

        iterating = BlockingPushConsumer(dev.namesrv, name("G"), consume_from="first")
        iterating.subscribe(topic)
        iterated = []
        deadline = time.monotonic() + 30
        with iterating:
            while time.monotonic() < deadline and (msg := iterating.receive(timeout=2)) is not None:
                iterated.append(msg.msg_id)
                if len(iterated) == len(sent):
                    break
        return {"sent": sent, "received": received, "threads": listener_threads, "pulled": pulled,
                "assigned": assigned, "iterated": iterated}

    result = await trio.to_thread.run_sync(scenario)
    assert len(result["sent"]) == 115
    assert sorted(set(result["received"])) == sorted(result["sent"])
    assert "MainThread" not in result["threads"]
    assert result["pulled"] == 115 and {mq.topic for mq in result["assigned"]} >= {topic}
    assert sorted(result["iterated"]) == sorted(result["sent"])
    assert collections.Counter(result["received"]).most_common(1)[0][1] == 1
