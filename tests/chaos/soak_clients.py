"""The soak scenario's clients: ``python soak_clients.py NAMESRV TOPIC COUNT PROGRESS_FILE``.

A producer sends COUNT small messages in batches of 128 (8 batches in flight) while a pull consumer reads every
queue of the topic from the start; both write their counts to PROGRESS_FILE (one JSON line a second). When a queue's
offset was deleted by retention before the consumer got there, it moves to the queue's minimum (counted as skipped).
It exits when everything sent was consumed or skipped.
"""

from __future__ import annotations

import json
import sys
import time

import trio

from pyrmq.client import Message, MessageQueue, Producer, PullConsumer, PullStatus
from pyrmq.client.errors import TopicNotFoundError

BATCH = 128


async def main(namesrv: str, topic: str, count: int, progress_path: str) -> None:
    stats = {"sent": 0, "consumed": 0, "skipped": 0, "done_producing": False, "done": False}
    body = b"s" * 100

    async def produce(producer: Producer, share: int) -> None:
        n = 0
        while n < share:
            k = min(BATCH, share - n)
            await producer.send_batch([Message(topic, body, tags="soak") for _ in range(k)], timeout=30)
            n += k
            stats["sent"] += k

    async def consume(consumer: PullConsumer, mq: MessageQueue) -> None:
        offset = 0
        while not (stats["done_producing"] and stats["consumed"] + stats["skipped"] >= stats["sent"]):
            r = await consumer.pull(mq, offset=offset, max_nums=32)
            if r.status is PullStatus.FOUND:
                stats["consumed"] += len(r.messages)
                offset = r.next_begin_offset
            elif r.next_begin_offset > offset:  # below the queue's minimum: retention got there first
                stats["skipped"] += r.next_begin_offset - offset
                offset = r.next_begin_offset
            elif r.status is PullStatus.OFFSET_ILLEGAL and (low := await consumer.min_offset(mq)) > offset:
                stats["skipped"] += low - offset
                offset = low
            else:
                await trio.sleep(0.05)

    async def report() -> None:
        with open(progress_path, "a", buffering=1) as f:
            while True:
                f.write(json.dumps({"t": time.time(), **stats}) + "\n")
                await trio.sleep(1)

    async with Producer(namesrv, group="soak_producer") as producer, PullConsumer(namesrv, group="soak_consumer") as consumer:
        async with trio.open_nursery() as outer:
            outer.start_soon(report)
            await producer.send(Message(topic, body, tags="soak"))
            stats["sent"] += 1
            # the broker registers an auto-created topic with the name server a moment after the first send
            with trio.fail_after(30):
                while True:
                    try:
                        queues = await consumer.fetch_queues(topic)
                        break
                    except TopicNotFoundError:
                        await trio.sleep(0.1)
            async with trio.open_nursery() as nursery:
                for mq in queues:
                    nursery.start_soon(consume, consumer, mq)
                async with trio.open_nursery() as producers:
                    for i in range(8):
                        producers.start_soon(produce, producer, (count - 1) // 8 + (1 if i < (count - 1) % 8 else 0))
                stats["done_producing"] = True
            stats["done"] = True
            with open(progress_path, "a") as f:
                f.write(json.dumps({"t": time.time(), **stats}) + "\n")
            outer.cancel_scope.cancel()


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4])
