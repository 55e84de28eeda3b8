"""Broker memory while its store grows: a real `pyrmq namesrv` + `pyrmq broker` (subprocesses, free loopback
ports, a fresh store that this bench deletes afterwards), ``--count`` messages stored through the Python client in
batches, and the broker process's VmRSS / RssAnon / RssFile (/proc/<pid>/status) sampled at every
``--step`` messages stored. Prints each sample and, at the end, the last-minus-first difference (issue 18: the
broker's RSS stays flat, within 20 MiB, from 1M to 10M stored). Figures only, never asserted; not part of
`make test` (`make broker-memory`, a few minutes and ~2.5 GB of disk at the defaults).

    .venv/bin/python bench/broker_memory.py [--count 10000000] [--step 1000000] [--body 16] [--batch 500]

VmRSS counts the store's mapped pages the broker touched (commit log, consume queues, index: page cache the kernel
can take back); RssAnon is the broker's own memory (Python heap, interpreter), the figure that must stay flat.
No retention runs: every message stays stored (the default 72 h file reservation, and the disk is far from full).
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

from peers import PyrmqServer  # noqa: E402

from pyrmq.client import Admin, Message, Producer  # noqa: E402


def rss(pid: int) -> dict[str, float]:
    """VmRSS, RssAnon and RssFile of ``pid`` in MiB."""
    values = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile"):
                values[key] = int(rest.split()[0]) / 1024
    return values


def store_size_mib(root: Path) -> float:
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            try:
                total += os.stat(os.path.join(dirpath, name)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=10_000_000, help="messages to store (default 10,000,000)")
    ap.add_argument("--step", type=int, default=1_000_000, help="sample the broker's memory every N stored")
    ap.add_argument("--body", type=int, default=16, help="body bytes per message (default 16)")
    ap.add_argument("--batch", type=int, default=500, help="messages per send_batch (default 500)")
    ap.add_argument("--senders", type=int, default=4, help="batches in flight at once (default 4)")
    ap.add_argument("--queues", type=int, default=8)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="pyrmq-bmem-", dir=os.environ.get("BENCH_DIR")) as tmp:
        server = PyrmqServer(Path(tmp))
        try:
            trio.run(run, server, args)
        finally:
            server.stop()  # also deletes the store


async def run(server: PyrmqServer, args: argparse.Namespace) -> None:
    topic = "MemTopic"
    body = os.urandom(args.body)
    async with Admin(server.namesrv_addr) as admin:
        await admin.create_topic(topic, args.queues, broker_addr=server.broker_addr)
    pid = server.pid
    print(f"broker pid {pid}; {args.count:,} messages of {args.body} B (TAGS + a UNIQ_KEY each: a consume-queue "
          f"unit and an index entry each) in batches of {args.batch}, {args.senders} in flight, {args.queues} queues")
    m = rss(pid)
    print(f"{0:>12,} stored: VmRSS {m['VmRSS']:7.1f} MiB  RssAnon {m['RssAnon']:6.1f}  RssFile {m['RssFile']:7.1f}")
    samples: list[tuple[int, dict[str, float]]] = []
    stored = 0
    next_sample = args.step
    t0 = time.perf_counter()
    async with Producer(server.namesrv_addr, "mem_producer") as producer:
        sent = 0
        lock = trio.Lock()

        async def sender() -> None:
            nonlocal sent, stored, next_sample
            while True:
                async with lock:
                    n = min(args.batch, args.count - sent)
                    sent += n
                if n <= 0:
                    return
                await producer.send_batch([Message(topic, body, tags="TagA") for _ in range(n)])
                stored += n
                while stored >= next_sample:
                    # samples land within a few batches of the step (the other senders' batches in flight)
                    m = rss(pid)
                    samples.append((stored, m))
                    rate = stored / (time.perf_counter() - t0)
                    print(f"{stored:>12,} stored: VmRSS {m['VmRSS']:7.1f} MiB  RssAnon {m['RssAnon']:6.1f}  "
                          f"RssFile {m['RssFile']:7.1f}  ({rate:,.0f} msgs/s)", flush=True)
                    next_sample += args.step

        async with trio.open_nursery() as nursery:
            for _ in range(args.senders):
                nursery.start_soon(sender)
    await trio.sleep(5)
    idle = rss(pid)
    print(f"after 5 s idle: VmRSS {idle['VmRSS']:.1f} MiB  RssAnon {idle['RssAnon']:.1f}  RssFile {idle['RssFile']:.1f}")
    print(f"store on disk: {store_size_mib(server.store):,.0f} MiB ({time.perf_counter() - t0:.0f} s)")
    if len(samples) >= 2:
        (n1, a), (n2, b) = samples[0], samples[-1]
        print(f"{n2:,} - {n1:,} stored: VmRSS {b['VmRSS'] - a['VmRSS']:+.1f} MiB, RssAnon "
              f"{b['RssAnon'] - a['RssAnon']:+.1f} MiB, RssFile {b['RssFile'] - a['RssFile']:+.1f} MiB")


if __name__ == "__main__":
    main()
