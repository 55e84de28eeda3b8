"""The soak scenario's clients: ``python soak_clients.py NAMESRV TOPIC COUNT PROGRESS_FILE [WINDOW]``.

A producer sends COUNT small messages in batches of 128 (8 batches in flight) while a pull consumer reads every
queue of the topic from the start (256 messages a pull, the broker's transfer cap raised to match); both write their
counts to PROGRESS_FILE (one JSON line a second). The producer is paced by the consumer: it never runs more than
WINDOW messages (default 2048) ahead of what was consumed, so the consumer stays within a fraction of a commit-log
segment of the head and retention, which deletes every segment but the active one, does not overtake it. When a
queue's offset was deleted by retention before the consumer got there all the same, it moves to the queue's minimum
(counted as skipped, as a Java consumer does on OFFSET_ILLEGAL). It exits when everything sent was consumed or
skipped.
"""

from __future__ import annotations

import json
import sys
import time

import trio

from pyrmq.client import Message, MessageQueue, Producer, PullConsumer, PullStatus
from pyrmq.client.errors import TopicNotFoundError

BATCH = 128
PULL = 256


async def main(namesrv: str, topic: str, count: int, progress_path: str, window: int) -> None:
    stats = {"sent": 0, "consumed": 0, "skipped": 0, "paced_s": 0.0, "done_producing": False, "done": False}
    body = b"s" * 100
    caught_up = trio.Event()

    def behind() -> int:
        return stats["sent"] - stats["consumed"] - stats["skipped"]

    async def produce(producer: Producer, share: int) -> None:
        n = 0
        while n < share:
            k = min(BATCH, share - n)
            if behind() + k > window:
                t0 = time.monotonic()
                with trio.fail_after(120):  # a consumer that stops for 2 minutes is a failure, not a pause
                    while behind() + k > window:
                        await caught_up.wait()
                stats["paced_s"] += time.monotonic() - t0
            stats["sent"] += k  # counted before the send: the window bounds what is in flight too
            await producer.send_batch([Message(topic, body, tags="soak") for _ in range(k)], timeout=30)
            n += k

    def progressed(n: int, key: str) -> None:
        nonlocal caught_up
        stats[key] += n
        if behind() <= window // 2:
            caught_up.set()  # every producer waiting wakes, and the next ones wait for the next catch-up
            caught_up = trio.Event()

    async def consume(consumer: PullConsumer, mq: MessageQueue) -> None:
        offset = 0
        while not (stats["done_producing"] and behind() <= 0):
            r = await consumer.pull(mq, offset=offset, max_nums=PULL)
            if r.status is PullStatus.FOUND:
                progressed(len(r.messages), "consumed")
                offset = r.next_begin_offset
            elif r.next_begin_offset > offset:  # below the queue's minimum: retention got there first
                progressed(r.next_begin_offset - offset, "skipped")
                offset = r.next_begin_offset
            elif r.status is PullStatus.OFFSET_ILLEGAL and (low := await consumer.min_offset(mq)) > offset:
                progressed(low - offset, "skipped")
                offset = low
            else:
                await trio.sleep(0.01)

    async def report() -> None:
        with open(progress_path, "a", buffering=1) as f:
            while True:
                f.write(json.dumps({"t": time.time(), **stats}) + "\n")
                await trio.sleep(1)

    async with Producer(namesrv, group="soak_producer") as producer, PullConsumer(namesrv, group="soak_consumer") as consumer:
        async with trio.open_nursery() as outer:
            outer.start_soon(report)
            stats["sent"] += 1
            await producer.send(Message(topic, body, tags="soak"))
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
    trio.run(main, sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4],
             int(sys.argv[5]) if len(sys.argv) > 5 else 2048)
