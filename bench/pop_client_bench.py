"""POP consumption in pyrmq.client: receive + ack rate of SimpleConsumer and of the push consumer's POP mode beside
the classic (rebalancing, pulling) push consumer, against one `pyrmq dev`, same run.

    .venv/bin/python bench/pop_client_bench.py [--count 50000] [--size 1024] [--queues 8]

`pyrmq dev` runs as a subprocess (free ports, a temporary store), so this process's CPU is the client's alone. Each
workload drains its own topic (``--queues`` queues), pre-filled with ``--count`` messages of ``--size`` bytes:

* SimpleConsumer, ``receive(32)`` then one ``ack`` per message, 4 receivers sharing the consumer;
* SimpleConsumer, ``receive(32)`` then ``ack_batch`` (one BATCH_ACK_MESSAGE), 4 receivers;
* the push consumer in POP mode (``mode="pop"``), an async listener that does nothing;
* the classic push consumer, the same listener.

Rates are messages received and acked (committed, for the classic consumer) per second, from the consumer's start
to its last ack (its shutdown left out); CPU is microseconds per message of this process (``time.process_time``)
and of the broker (``/proc/<pid>/stat``) over the same span. Printed, never asserted.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from client_bench import Broker, lib_batches  # noqa: E402

from pyrmq.client import Admin, Producer, PushConsumer, SimpleConsumer  # noqa: E402

RECEIVERS = 4


class Clock:
    """The clock of one workload: from the consumer's start to the last message acked (its shutdown left out)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.marks: list[tuple[float, float, float]] = []

    def mark(self) -> None:
        self.marks.append((time.perf_counter(), time.process_time(), self.broker.cpu()))

    def result(self, n: int) -> dict[str, float]:
        (t0, c0, b0), (t1, c1, b1) = self.marks[0], self.marks[-1]
        return {"rate": n / (t1 - t0), "client_us": (c1 - c0) / n * 1e6, "broker_us": (b1 - b0) / n * 1e6, "n": n}


async def simple(clock: Clock, namesrv: str, topic: str, total: int, batch_ack: bool) -> int:
    done = [0]
    consumer = SimpleConsumer(namesrv, f"bench_{topic}", subscribe={topic: "*"}, consume_from="first")
    clock.mark()
    async with consumer:

        async def receiver() -> None:
            while True:
                msgs = await consumer.receive(32, 60, await_duration=1)
                if batch_ack:
                    if msgs:
                        await consumer.ack_batch(msgs)
                else:
                    for m in msgs:
                        await consumer.ack(m)
                done[0] += len(msgs)
                if done[0] >= total:
                    clock.mark()
                    nursery.cancel_scope.cancel()

        with trio.move_on_after(300):
            async with trio.open_nursery() as nursery:
                for _ in range(RECEIVERS):
                    nursery.start_soon(receiver)
    return done[0]


async def push(clock: Clock, namesrv: str, topic: str, total: int, mode: str) -> int:
    count = [0]
    finished = trio.Event()

    async def on_message(msg) -> None:
        count[0] += 1
        if count[0] >= total:
            finished.set()

    consumer = PushConsumer(namesrv, f"bench_{topic}", subscribe={topic: "*"}, listener=on_message,
                            consume_from="first", mode=mode)
    clock.mark()
    async with consumer:
        with trio.move_on_after(300):
            await finished.wait()
        if mode == "pop":  # every ack answered before the clock stops
            await consumer.pop.session.acks_flushed()
        else:
            await consumer.persist_offsets()
        clock.mark()
    return count[0]


async def bench(broker: Broker, count: int, size: int, queues: int) -> list[tuple[str, dict[str, float]]]:
    body = b"x" * size
    workloads = {
        "SimpleConsumer: receive(32) + ack each (4 receivers)": lambda c, t: simple(c, broker.namesrv, t, count, False),
        "SimpleConsumer: receive(32) + ack_batch (4 receivers)": lambda c, t: simple(c, broker.namesrv, t, count, True),
        "PushConsumer mode=\"pop\" (async listener)": lambda c, t: push(c, broker.namesrv, t, count, "pop"),
        "PushConsumer classic (async listener)": lambda c, t: push(c, broker.namesrv, t, count, "classic"),
    }
    rows = []
    async with Admin(broker.namesrv) as admin, Producer(broker.namesrv, "bench_producer") as producer:
        topics = {}
        for i, name in enumerate(workloads):
            topics[name] = f"bench_pop_{i}"
            await admin.create_topic(topics[name], queues)
            await lib_batches(producer, topics[name], body, count // 64 + 1, 64, 4)
        for name, run in workloads.items():
            clock = Clock(broker)
            n = await run(clock, topics[name])
            rows.append((name, clock.result(n)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=50_000, help="messages per workload (default 50000)")
    parser.add_argument("--size", type=int, default=1024, help="body bytes (default 1024)")
    parser.add_argument("--queues", type=int, default=8, help="queues of each topic (default 8)")
    args = parser.parse_args()
    broker = Broker()
    try:
        rows = trio.run(bench, broker, args.count, args.size, args.queues)
    finally:
        broker.stop()
    print(f"pyrmq dev subprocess, {os.cpu_count()} vCPUs, Python {sys.version.split()[0]}, {args.count} messages of "
          f"{args.size} B, {args.queues} queues")
    print()
    print("| workload | msgs/s | client CPU us/msg | broker CPU us/msg |")
    print("|---|---:|---:|---:|")
    for name, r in rows:
        print(f"| {name} | {r['rate']:,.0f} | {r['client_us']:.1f} | {r['broker_us']:.1f} |")


if __name__ == "__main__":
    main()
