"""What a PushConsumer holds while far behind: ``--count`` unread messages stored, then a consumer that takes them
slowly (``async for`` or a listener). Prints, every second for ``--seconds``, the messages and bytes held in its
process queues (pulled, not yet consumed) and the client process's RSS, next to the pull thresholds
(``pull_threshold_for_queue`` messages and ``pull_threshold_size_for_queue_mib`` per queue, as RocketMQ's
``pullThresholdForQueue`` / ``pullThresholdSizeForQueue``). Figures only, never asserted.

    .venv/bin/python bench/consumer_memory.py [--count 1000000] [--body 1024] [--queues 8] [--mode iter|listener]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from peers import PyrmqServer, proc_rss_mib  # noqa: E402

from pyrmq.client import Admin, Message, Producer, PushConsumer  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=1_000_000)
    ap.add_argument("--body", type=int, default=1024)
    ap.add_argument("--queues", type=int, default=8)
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--mode", choices=("iter", "listener"), default="iter")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="pyrmq-cmem-") as tmp:
        server = PyrmqServer(Path(tmp))
        try:
            trio.run(run, server, args, os.getpid())
        finally:
            server.stop()


async def run(server: PyrmqServer, args: argparse.Namespace, pid: int) -> None:
    topic = "MemTopic"
    body = b"x" * args.body
    async with Admin(server.namesrv_addr) as admin:
        await admin.create_topic(topic, args.queues, broker_addr=server.broker_addr)
    t0 = time.perf_counter()
    async with Producer(server.namesrv_addr, "mem_producer") as producer:
        for start in range(0, args.count, 100):
            await producer.send_batch([Message(topic, body) for _ in range(min(100, args.count - start))])
    print(f"stored {args.count:,} messages of {args.body} B in {time.perf_counter() - t0:.1f} s; "
          f"client RSS {proc_rss_mib(pid)[0]:.0f} MiB before the consumer starts")
    consumed = 0

    async def slow(msg) -> None:
        nonlocal consumed
        consumed += 1
        await trio.sleep(0.001)

    consumer = PushConsumer(server.namesrv_addr, "mem_consumer", subscribe={topic: "*"}, consume_from="first",
                            listener=slow if args.mode == "listener" else None)
    print(f"mode {args.mode}; thresholds per queue: {consumer.pull_threshold_for_queue} messages, "
          f"{consumer.pull_threshold_size // (1024 * 1024)} MiB; {args.queues} queues")
    async with consumer:
        async def iterate() -> None:
            nonlocal consumed
            async for _msg in consumer:
                consumed += 1
                await trio.sleep(0.001)

        async with trio.open_nursery() as nursery:
            if args.mode == "iter":
                nursery.start_soon(iterate)
            peak = 0
            for second in range(1, args.seconds + 1):
                await trio.sleep(1)
                pqs = list(consumer.process_queues.values())
                held, size = sum(pq.count for pq in pqs), sum(pq.size for pq in pqs)
                peak = max(peak, held)
                rss, anon = proc_rss_mib(pid)
                print(f"{second:3d} s: consumed {consumed:>8,}  held {held:>6,} msgs / {size / 2**20:6.1f} MiB "
                      f"in {len(pqs)} process queues (max per queue {max((pq.count for pq in pqs), default=0):,})  "
                      f"client RSS {rss:.0f} MiB (anon {anon:.0f})")
            print(f"peak held {peak:,} messages; threshold x queues = "
                  f"{consumer.pull_threshold_for_queue * args.queues:,} (+ one pull batch per queue)")
            nursery.cancel_scope.cancel()


if __name__ == "__main__":
    main()
