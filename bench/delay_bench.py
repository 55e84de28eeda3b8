"""Timer plugin: schedule N timer messages with random delays; inserts/s, memory and delivery lag.

Baseline measured in the same run: the raw store append rate (``MessageStore.put_message`` of the same messages
to a plain topic, no scheduler). Then, on a fresh store, N messages with ``TIMER_DELAY_SEC`` random in
[1, spread] seconds go through ``TimerService.redirect`` + ``put_message`` (what the send path does), and the
service's enqueue loop moves them into the timing wheel; then the service runs in real time until every one is
delivered. Prints rates, the ratio to the raw append, VmRSS/VmHWM along the way (the wheel keeps nothing per
message in memory: the growth is the store's mapped pages and the Python heap of the batch) and the lateness of
each delivery (store time of the delivered copy minus its TIMER_DELIVER_MS).

    python bench/delay_bench.py [--count 1000000] [--spread 120] [--dir /tmp/delay-bench]
"""

from __future__ import annotations

import argparse
import array
import os
import random
import shutil
import tempfile
import time

import trio

from pyrmq.plugins.broker.timer import TimerService
from pyrmq.store import MessageRecord, MessageStore, StoreConfig


def proc_status() -> dict[str, int]:
    """VmRSS / VmHWM, and RSS split into anonymous (heap) and file-backed (the store's mapped files), in MiB."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                out[key] = int(value.split()[0]) // 1024
    return out


def open_store(root: str) -> MessageStore:
    store = MessageStore(StoreConfig(store_path_root_dir=root, warm_mapped_file_enable=False))
    store.load()
    return store


def make_records(count: int, spread: int, seed: int = 42):
    """The same N messages each time it is called (generated lazily: the input list would dwarf the wheel)."""
    rng = random.Random(seed)
    body = b"x" * 100
    for i in range(count):
        yield MessageRecord("BenchTopic", 0, body, properties={"TIMER_DELAY_SEC": str(rng.randint(1, spread)),
                                                               "UNIQ_KEY": f"{i:032X}", "TAGS": "t"},
                            born_timestamp=0, born_host=("127.0.0.1", 1), store_host=("127.0.0.1", 10911))


def gen_rate(count: int, spread: int) -> float:
    """Time to just generate the messages (subtracted from both measured loops)."""
    begin = time.perf_counter()
    for _ in make_records(count, spread):
        pass
    return time.perf_counter() - begin


def pct(values: list[int], p: float) -> int:
    return values[min(len(values) - 1, int(len(values) * p))]


async def main(count: int, spread: int, directory: str) -> None:
    print(f"delay_bench: {count:,} timer messages, delays uniform in [1, {spread}] s, store under {directory}")
    print(f"memory at start: {proc_status()}")

    # baseline: raw appends of the same messages (their timer property is just a property here)
    gen_s = gen_rate(count, spread)
    raw = open_store(os.path.join(directory, "raw"))
    begin = time.perf_counter()
    for r in make_records(count, spread):
        raw.put_message(r)
    raw_s = time.perf_counter() - begin - gen_s
    raw.close()
    shutil.rmtree(os.path.join(directory, "raw"))
    raw_rate = count / raw_s
    print(f"(generating the messages alone: {gen_s:.2f} s, subtracted below)")
    print(f"raw store append          : {raw_rate:>12,.0f} msg/s  ({raw_s:.2f} s)")

    store = open_store(os.path.join(directory, "timer"))
    timer = TimerService(store, os.path.join(directory, "timer", "timerwheel"), flush_interval_s=10)
    timer.load()
    timer.lags = array.array("i")
    before = proc_status()
    begin = time.perf_counter()
    put = store.put_message
    redirect = timer.redirect
    for r in make_records(count, spread):
        put(redirect(r))
    park_s = time.perf_counter() - begin - gen_s
    begin = time.perf_counter()
    while timer.enqueue(65536):
        pass
    enqueue_s = time.perf_counter() - begin
    after = proc_status()
    park_rate, enqueue_rate = count / park_s, count / enqueue_s
    total_rate = count / (park_s + enqueue_s)
    log_mib = timer.wheel.log_end / 2**20
    print(f"redirect + append (park)  : {park_rate:>12,.0f} msg/s  ({park_s:.2f} s)  = {park_rate / raw_rate:.2f} x raw append")
    print(f"wheel insert (enqueue)    : {enqueue_rate:>12,.0f} msg/s  ({enqueue_s:.2f} s)")
    print(f"schedule end to end       : {total_rate:>12,.0f} msg/s  = {total_rate / raw_rate:.2f} x raw append")
    print(f"memory before/after       : {before} -> {after}; wheel in memory: 1024 slots; timer log on disk {log_mib:.1f} MiB")

    first_due = time.time()
    # lag is measured for messages due once the service runs; those that fell due while we were still parking
    # (the first seconds of the spread) are a backlog, delivered at once, like after a broker restart
    timer.lags_from_ms = int(first_due * 1000) + 1000
    async with trio.open_nursery() as nursery:
        await nursery.start(timer.run)
        last = -1
        while timer.delivered < count:
            await trio.sleep(5)
            if timer.delivered != last:
                last = timer.delivered
                print(f"  t+{time.time() - first_due:5.0f} s delivered {timer.delivered:>10,}  {proc_status()}")
        nursery.cancel_scope.cancel()
    lags = sorted(timer.lags)
    print(f"backlog due before the service started: {count - len(lags):,} (delivered first, in time order)")
    print(f"delivery lag of the {len(lags):,} due later (store time - TIMER_DELIVER_MS), ms: p50 {pct(lags, .5)}  "
          f"p99 {pct(lags, .99)}  max {lags[-1]}  min {lags[0]}  ({count / spread:,.0f} deliveries/s asked)")
    print(f"memory at end: {proc_status()}")
    timer.close()
    store.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--spread", type=int, default=120, help="delays uniform in [1, spread] seconds")
    parser.add_argument("--dir", default=None, help="work directory (default: a temporary one, removed)")
    args = parser.parse_args()
    work = args.dir or tempfile.mkdtemp(prefix="delay-bench-")
    try:
        trio.run(main, args.count, args.spread, work)
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)
