"""Client library benchmark: pyrmq.client against the raw remoting client, both against `pyrmq dev`, same run.

    .venv/bin/python bench/client_bench.py [--sizes 1024,100] [--scale 1.0] [--no-pinned]

The benchmark starts `pyrmq dev` as a subprocess (free ports, a temporary store) and runs, per body size:

* sync send: one producer, one message in flight (``await producer.send``), unpinned and with both processes on
  one vCPU (docs/performance.md, The machine: this VM wakes an idle vCPU slowly, so any one-in-flight loop is latency bound);
* async send: 64 in flight (``producer.send_async`` with a callback, a window of 64);
* batch send: 64 messages per ``send_batch``, one batch in flight and 4 in flight;
* consume: a push consumer (async listener) draining a pre-filled 8-queue topic.

Next to each, the same workload through the raw remoting client with no producer/consumer logic: one precomputed
SEND_MESSAGE_V2 header (no validation, ids, properties, route, fault tolerance, results), a pre-encoded batch
body, and plain PULL_MESSAGE loops that only count records. Ratios = library / raw. CPU: this process
(``time.process_time``) and the broker (``/proc/<pid>/stat``), in microseconds per message. Figures are printed,
never asserted.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import outcome
import trio

ROOT = Path(__file__).resolve().parents[1]

from pyrmq.client import Admin, Message, Producer, PushConsumer  # noqa: E402
from pyrmq.remoting.client import RemotingClient  # noqa: E402
from pyrmq.remoting.codes import RequestCode  # noqa: E402
from pyrmq.remoting.command import RemotingCommand  # noqa: E402
from pyrmq.store.format import BatchEntry, encode_batch_body, encode_properties  # noqa: E402

TARGETS_1K = {"sync": 8_000, "async64": 30_000, "batch64": 80_000, "consume": 50_000}
CLK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_cpu(pid: int) -> float:
    """utime + stime of a process, seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK


class Broker:
    def __init__(self) -> None:
        self.store = tempfile.mkdtemp(prefix="pyrmq-client-bench-")
        ns_port = free_port()
        port = free_port()
        while abs(port - ns_port) <= 2:
            port = free_port()
        self.namesrv = f"127.0.0.1:{ns_port}"
        self.addr = f"127.0.0.1:{port}"
        env = dict(os.environ, PYRMQ_DISABLE_PLUGIN_AUTOLOAD="1")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pyrmq", "dev", "--dashboard-port", "0", "--namesrv-port", str(ns_port), "--port", str(port), "--store-dir",
             self.store], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=str(ROOT),
        )
        line = self.proc.stdout.readline().decode()
        if "started" not in line:
            raise SystemExit(f"pyrmq dev did not start: {line}{self.proc.stdout.read().decode()}")

    def cpu(self) -> float:
        return proc_cpu(self.proc.pid)

    def pin(self, cpus: set[int]) -> None:
        os.sched_setaffinity(self.proc.pid, cpus)
        for tid in os.listdir(f"/proc/{self.proc.pid}/task"):
            try:
                os.sched_setaffinity(int(tid), cpus)
            except OSError:
                pass

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.store, ignore_errors=True)


class Measure:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    async def run(self, n: int, body: Callable[[], Awaitable[int | None]]) -> dict[str, float]:
        c0, b0, t0 = time.process_time(), self.broker.cpu(), time.perf_counter()
        done = await body()
        t1, c1, b1 = time.perf_counter(), time.process_time(), self.broker.cpu()
        n = done or n
        return {"rate": n / (t1 - t0), "client_us": (c1 - c0) / n * 1e6, "broker_us": (b1 - b0) / n * 1e6, "n": n}


# ---- raw remoting workloads ----------------------------------------------------------------------------------------

def raw_header(topic: str, queue: int = -1, batch: bool = False) -> dict[str, str]:
    props = encode_properties({"UNIQ_KEY": "0" * 32})
    ext = {"a": "raw", "b": topic, "c": "TBW102", "d": "4", "e": str(queue), "f": "0", "g": str(int(time.time() * 1000)),
           "h": "0", "i": props}
    if batch:
        ext["m"] = "true"
        del ext["i"]
    return ext


async def raw_sync(client: RemotingClient, addr: str, topic: str, body: bytes, n: int) -> None:
    ext = raw_header(topic)
    for _ in range(n):
        await client.invoke(addr, RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, dict(ext), body))


async def raw_window(client: RemotingClient, addr: str, topic: str, body: bytes, n: int, window: int = 64,
                     code: int = RequestCode.SEND_MESSAGE_V2, batch: bool = False) -> None:
    ext = raw_header(topic, batch=batch)
    conn = await client.connection(addr)
    room = trio.Semaphore(window)
    finished = trio.Event()
    left = [n]

    def on_response(result: outcome.Outcome) -> None:
        room.release()
        left[0] -= 1
        if left[0] == 0:
            finished.set()

    for _ in range(n):
        await room.acquire()
        conn.invoke_callback(RemotingCommand.request(code, dict(ext), body), on_response)
        await conn.flush()
    await finished.wait()


def batch_body(body: bytes, per_batch: int) -> bytes:
    props = encode_properties({"UNIQ_KEY": "0" * 32}).encode()
    return encode_batch_body([BatchEntry(0, body, props) for _ in range(per_batch)])


async def raw_batches(client: RemotingClient, addr: str, topic: str, body: bytes, batches: int, per_batch: int,
                      in_flight: int) -> None:
    payload = batch_body(body, per_batch)
    if in_flight == 1:
        ext = raw_header(topic, batch=True)
        for _ in range(batches):
            await client.invoke(addr, RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE, dict(ext), payload))
        return
    await raw_window(client, addr, topic, payload, batches, in_flight, RequestCode.SEND_BATCH_MESSAGE, batch=True)


async def raw_consume(client: RemotingClient, addr: str, topic: str, queues: int, total: int) -> int:
    """Pull every queue from 0 to its end, one pull in flight per queue, counting records (no decoding)."""
    counted = [0]

    async def one(qid: int) -> None:
        offset = 0
        while counted[0] < total:
            ext = {"consumerGroup": "raw_consumer", "topic": topic, "queueId": str(qid), "queueOffset": str(offset),
                   "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0",
                   "subVersion": "0", "subscription": "*", "expressionType": "TAG"}
            resp = await client.invoke(addr, RemotingCommand.request(RequestCode.PULL_MESSAGE, ext), 10)
            if resp.code != 0:
                return
            body = resp.body_bytes()
            pos = 0
            while pos < len(body):
                pos += struct.unpack_from(">i", body, pos)[0]
                counted[0] += 1
            offset = int(resp.ext_fields["nextBeginOffset"])

    async with trio.open_nursery() as nursery:
        for qid in range(queues):
            nursery.start_soon(one, qid)
    return counted[0]


# ---- library workloads ---------------------------------------------------------------------------------------------

async def lib_sync(producer: Producer, topic: str, body: bytes, n: int) -> None:
    for _ in range(n):
        await producer.send(Message(topic, body))


async def lib_async(producer: Producer, topic: str, body: bytes, n: int, window: int = 64) -> None:
    room = trio.Semaphore(window)
    finished = trio.Event()
    left = [n]

    def done(result, error) -> None:
        room.release()
        left[0] -= 1
        if left[0] == 0:
            finished.set()

    for _ in range(n):
        await room.acquire()
        await producer.send_async(Message(topic, body), done)
    await finished.wait()


async def lib_batches(producer: Producer, topic: str, body: bytes, batches: int, per_batch: int, in_flight: int) -> None:
    todo = [batches]

    async def sender() -> None:
        while todo[0] > 0:
            todo[0] -= 1
            await producer.send_batch([Message(topic, body) for _ in range(per_batch)])

    async with trio.open_nursery() as nursery:
        for _ in range(in_flight):
            nursery.start_soon(sender)


async def lib_consume(namesrv: str, topic: str, total: int) -> int:
    count = [0]
    finished = trio.Event()

    async def on_message(msg) -> None:
        count[0] += 1
        if count[0] >= total:
            finished.set()

    async with PushConsumer(namesrv, f"bench_{topic}", subscribe={topic: "*"}, listener=on_message,
                            consume_from="first"):
        with trio.move_on_after(120):
            await finished.wait()
    return count[0]


# ---- driver --------------------------------------------------------------------------------------------------------

async def bench(broker: Broker, sizes: list[int], scale: float, pinned: bool, only: set[str]) -> list[tuple]:
    m = Measure(broker)
    rows = []
    k = lambda x: max(int(x * scale), 64)  # noqa: E731
    async with Admin(broker.namesrv) as admin, Producer(broker.namesrv, "bench_producer") as producer, \
            RemotingClient() as client:
        for size in sizes:
            body = b"x" * size
            tag = f"{size}B" if size < 1024 else f"{size // 1024}KiB"
            topics = {}
            for w in ("sync", "async", "batch", "consume", "rawc"):
                topics[w] = f"bench_{w}_{size}"
                await admin.create_topic(topics[w], 8)
            # warm up connections and routes
            await producer.send(Message(topics["sync"], body))
            await raw_sync(client, broker.addr, topics["sync"], body, 10)

            n = k(5000)
            if "sync" not in only:
                n = 0
            raw = n and await m.run(n, lambda: raw_sync(client, broker.addr, topics["sync"], body, n))
            lib = n and await m.run(n, lambda: lib_sync(producer, topics["sync"], body, n))
            if n:
                rows.append(("sync send, 1 in flight (unpinned)", tag, lib, raw))
            if pinned and n:
                all_cpus = os.sched_getaffinity(0)
                broker.pin({0})
                os.sched_setaffinity(0, {0})
                try:
                    raw = await m.run(n, lambda: raw_sync(client, broker.addr, topics["sync"], body, n))
                    lib = await m.run(n, lambda: lib_sync(producer, topics["sync"], body, n))
                finally:
                    os.sched_setaffinity(0, all_cpus)
                    broker.pin(all_cpus)
                rows.append(("sync send, 1 in flight (pinned, 1 vCPU)", tag, lib, raw))

            n = k(40000)
            if "async" in only:
                raw = await m.run(n, lambda: raw_window(client, broker.addr, topics["async"], body, n))
                lib = await m.run(n, lambda: lib_async(producer, topics["async"], body, n))
                rows.append(("async send, 64 in flight", tag, lib, raw))

            batches = k(2000)
            for in_flight in ((1, 4) if "batch" in only else ()):
                raw = await m.run(batches * 64, lambda: raw_batches(client, broker.addr, topics["batch"], body, batches, 64, in_flight))
                lib = await m.run(batches * 64, lambda: lib_batches(producer, topics["batch"], body, batches, 64, in_flight))
                rows.append((f"batch send, 64/batch, {in_flight} in flight", tag, lib, raw))

            total = k(2000) * 64
            if "consume" not in only:
                continue
            for t in (topics["consume"], topics["rawc"]):
                await lib_batches(producer, t, body, total // 64, 64, 4)
            raw = await m.run(total, lambda: raw_consume(client, broker.addr, topics["rawc"], 8, total))
            lib = await m.run(total, lambda: lib_consume(broker.namesrv, topics["consume"], total))
            rows.append(("push consumer (raw: pulls only)", tag, lib, raw))
    return rows


def report(rows: list[tuple]) -> None:
    print()
    print("| workload | body | pyrmq.client msgs/s | raw remoting msgs/s | lib/raw | client CPU us/msg lib (raw) "
          "| broker CPU us/msg lib (raw) | target (1 KiB) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for name, tag, lib, raw in rows:
        key = ("sync" if name.startswith("sync") else "async64" if name.startswith("async")
               else "batch64" if name.startswith("batch") else "consume")
        target = f"{TARGETS_1K[key]:,}" if tag == "1KiB" else ""
        print(f"| {name} | {tag} | {lib['rate']:,.0f} | {raw['rate']:,.0f} | {lib['rate'] / raw['rate']:.2f} "
              f"| {lib['client_us']:.1f} ({raw['client_us']:.1f}) | {lib['broker_us']:.1f} ({raw['broker_us']:.1f}) "
              f"| {target} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1024,100", help="body sizes in bytes (default 1024,100)")
    parser.add_argument("--scale", type=float, default=1.0, help="scale the message counts (default 1.0)")
    parser.add_argument("--no-pinned", action="store_true", help="skip the pinned sync run")
    parser.add_argument("--only", default="sync,async,batch,consume", help="workloads to run (default: all)")
    args = parser.parse_args()
    broker = Broker()
    try:
        rows = trio.run(bench, broker, [int(s) for s in args.sizes.split(",")], args.scale, not args.no_pinned,
                        set(args.only.split(",")))
    finally:
        broker.stop()
    print(f"pyrmq dev subprocess, {os.cpu_count()} vCPUs, Python {sys.version.split()[0]}")
    report(rows)


if __name__ == "__main__":
    main()
