"""``pyrmq dev --demo`` (what ``make run`` runs): once the embedded name server and broker are up, show messages
flowing through the client library - create a topic, send ten messages with tags and keys, receive them with a
push consumer, one line per message - then return and leave the broker serving.
"""

from __future__ import annotations

import logging
from typing import Any

import trio

log = logging.getLogger("pyrmq.client.demo")

DEMO_TOPIC = "DemoTopic"
DEMO_GROUP = "demo_consumer"
DEMO_PRODUCER_GROUP = "demo_producer"
COUNT = 10
TIMEOUT = 30.0


async def run_demo(kernel: Any) -> None:
    """Run the demo against ``kernel.listening["namesrv"]``; never raises (the broker keeps serving)."""
    try:
        await _demo(kernel)
    except Exception as exc:  # noqa: BLE001 - a failed demo must not stop the development broker
        log.exception("demo failed")
        print(f"demo: failed: {exc}", flush=True)


async def _demo(kernel: Any) -> None:
    from pyrmq.client import Admin, Message, MessageExt, Producer, PushConsumer

    namesrv = await kernel.wait_listening("namesrv")
    await kernel.wait_listening("broker")
    async with Admin(namesrv) as admin:
        with trio.fail_after(10):
            # the broker registers with the name server right after it starts listening
            while not (await admin.cluster_info()).brokers:
                await trio.sleep(0.05)
        if DEMO_TOPIC not in await admin.list_topics():
            await admin.create_topic(DEMO_TOPIC, queue_nums=4)
            print(f"demo: created topic {DEMO_TOPIC} (4 queues)", flush=True)

    expected: set[str] = set()
    received: set[str] = set()
    all_in = trio.Event()

    async def on_message(msg: MessageExt) -> None:
        if msg.msg_id in received:
            return
        received.add(msg.msg_id)
        print(f"demo: received {msg.msg_id} queue={msg.queue_id} offset={msg.queue_offset} tags={msg.tags} "
              f"keys={','.join(msg.keys)} body={msg.text()!r}", flush=True)
        if expected and expected <= received:
            all_in.set()

    consumer = PushConsumer(namesrv, DEMO_GROUP, subscribe={DEMO_TOPIC: "*"}, listener=on_message)
    async with consumer:
        async with Producer(namesrv, DEMO_PRODUCER_GROUP) as producer:
            for i in range(COUNT):
                tag = "TagA" if i % 2 == 0 else "TagB"
                message = Message(DEMO_TOPIC, f"Hello pyrmq #{i}", tags=tag, keys=f"demo-key-{i}")
                result = await producer.send(message)
                expected.add(result.msg_id)
                print(f"demo: sent     {result.msg_id} queue={result.message_queue.queue_id} "
                      f"offset={result.queue_offset} tags={tag} keys=demo-key-{i} status={result.status.value}", flush=True)
        if expected <= received:
            all_in.set()
        with trio.move_on_after(TIMEOUT):
            await all_in.wait()
    got = len(expected & received)
    print(f"demo: {got} of {COUNT} messages received; the broker keeps serving (Ctrl-C stops it)", flush=True)
