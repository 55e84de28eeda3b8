"""Transaction messages on a `pyrmq dev` subprocess: sends/s with commit next to plain sync sends (same run, same
broker), then check-backs/s for a large number of pending halves, and the broker's RSS along the way.

1. ``--sends`` plain sync sends, then ``--sends`` transactional sends with a local transaction that commits at once
   (half + END_TRANSACTION oneway + the broker's commit and op record), one producer, one at a time.
2. ``--pending`` halves left UNKNOWN (sent by ``--senders`` concurrent producers) with a 10-minute check interval;
   the broker is stopped and started again with a 1-second interval and a producer whose ``check_local`` commits:
   check-backs/s = pending / (first commit visible .. all committed), read from the real topic's max offsets.

    python bench/transaction_bench.py [--sends 2000] [--pending 100000] [--senders 32]
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import trio

from pyrmq.client import Admin, ClientConfig, LocalTransactionState, Message, Producer, TransactionProducer
from pyrmq.remoting.client import RemotingClient
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand

T0 = time.monotonic()


def say(text: str) -> None:
    print(f"[{time.monotonic() - T0:7.1f} s] {text}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mib(pid: int) -> str:
    """``RSS (RssAnon)`` in MiB: RSS counts the commit log's mapped pages, RssAnon the Python heap."""
    values = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "RssAnon"):
                values[key] = int(rest.split()[0]) / 1024
    return f"{values.get('VmRSS', 0):.0f} ({values.get('RssAnon', 0):.0f})"


class Broker:
    def __init__(self, store: str) -> None:
        self.store = store
        self.namesrv_port, self.port = free_port(), free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def namesrv(self) -> str:
        return f"127.0.0.1:{self.namesrv_port}"

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, interval_ms: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pyrmq", "--no-entry-points", "--log-level", "WARNING", "dev", "--dashboard-port", "0", "--store-dir", self.store,
             "--namesrv-port", str(self.namesrv_port), "--port", str(self.port),
             "--set", f"broker.transactionCheckInterval={interval_ms}", "--set", "broker.transactionTimeOut=1000",
             "--set", "broker.flushDiskType=ASYNC_FLUSH"],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.store, "..", "broker.log"), "ab"),
        )

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(120)

    async def wait_ready(self) -> None:
        async with Admin(self.namesrv) as admin:
            with trio.fail_after(120):
                while True:
                    try:
                        if (await admin.cluster_info()).brokers:
                            return
                    except Exception:  # noqa: BLE001 - not up yet
                        pass
                    await trio.sleep(0.1)


async def topic_total(client: RemotingClient, addr: str, topic: str, queues: int = 4) -> int:
    total = 0
    for q in range(queues):
        r = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": str(q)}),
                                timeout=30)
        if r.code == ResponseCode.SUCCESS:
            total += int(r.ext_fields["offset"])
    return total


async def sends(broker: Broker, n: int) -> tuple[float, float]:
    commit = lambda m, a: LocalTransactionState.COMMIT  # noqa: E731
    async with Producer(broker.namesrv, "bench_plain") as plain, TransactionProducer(broker.namesrv, "bench_txn") as txn:
        await plain.send(Message("BenchPlain", b"w"))
        await txn.send_in_transaction(Message("BenchTxn", b"w"), commit)
        body = b"x" * 100
        t = time.perf_counter()
        for _ in range(n):
            await plain.send(Message("BenchPlain", body))
        plain_rate = n / (time.perf_counter() - t)
        t = time.perf_counter()
        for _ in range(n):
            await txn.send_in_transaction(Message("BenchTxn", body), commit)
        txn_rate = n / (time.perf_counter() - t)
    return plain_rate, txn_rate


async def fill(broker: Broker, pending: int, senders: int) -> float:
    unknown = lambda m, a: LocalTransactionState.UNKNOWN  # noqa: E731
    counter = iter(range(pending))
    t = time.perf_counter()
    async with TransactionProducer(broker.namesrv, "bench_checked") as producer:
        async def worker() -> None:
            for i in counter:
                await producer.send_in_transaction(Message("BenchChecked", b"y" * 100, keys=f"k{i}"), unknown)

        async with trio.open_nursery() as nursery:
            for _ in range(senders):
                nursery.start_soon(worker)
    return pending / (time.perf_counter() - t)


async def resolve(broker: Broker, pending: int) -> tuple[float, float]:
    config = ClientConfig(namesrv_addr=broker.namesrv, heartbeat_broker_interval=1.0)
    async with RemotingClient() as client, TransactionProducer(
        config=config, group="bench_checked", check_local=lambda m: LocalTransactionState.COMMIT
    ) as producer:
        # from the checker's start: includes up to one check interval (1 s) before the first pass
        t = time.perf_counter()
        with trio.fail_after(3600):
            while (done := await topic_total(client, broker.addr, "BenchChecked")) < pending:
                await trio.sleep(0.2)
        elapsed = time.perf_counter() - t
        say(f"{done} committed by check-back; {producer.checks_answered} checks answered")
    return pending / elapsed, elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sends", type=int, default=2000)
    ap.add_argument("--pending", type=int, default=100_000)
    ap.add_argument("--senders", type=int, default=32)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="txn-bench-") as tmp:
        store = os.path.join(tmp, "store")
        os.makedirs(store)
        broker = Broker(store)
        broker.start(600_000)
        try:
            trio.run(broker.wait_ready)
            rss_start = rss_mib(broker.proc.pid)
            say(f"broker up, RSS (RssAnon) {rss_start} MiB")
            plain_rate, txn_rate = trio.run(sends, broker, args.sends)
            say(f"sync sends {plain_rate:,.0f}/s, transactional sends with commit {txn_rate:,.0f}/s")
            fill_rate = trio.run(fill, broker, args.pending, args.senders)
            rss_filled = rss_mib(broker.proc.pid)
            say(f"{args.pending:,} pending halves sent at {fill_rate:,.0f}/s; RSS (RssAnon) {rss_filled} MiB")
            broker.stop()
            t = time.perf_counter()
            broker.start(1000)
            trio.run(broker.wait_ready)
            restart_s = time.perf_counter() - t
            rss_restarted = rss_mib(broker.proc.pid)
            say(f"restarted in {restart_s:.1f} s (pending halves re-read), RSS (RssAnon) {rss_restarted} MiB")
            check_rate, elapsed = trio.run(resolve, broker, args.pending)
            rss_end = rss_mib(broker.proc.pid)
        finally:
            broker.stop()
    print(f"transaction bench ({args.sends:,} sends each; {args.pending:,} pending halves; 2-core machine)")
    print(f"  plain sync sends                 {plain_rate:10,.0f} /s")
    print(f"  transactional sends with commit  {txn_rate:10,.0f} /s   ({txn_rate / plain_rate:.2f} x plain)")
    print(f"  halves sent ({args.senders} senders)          {fill_rate:10,.0f} /s")
    print(f"  check-backs resolved             {check_rate:10,.0f} /s   ({args.pending:,} in {elapsed:.1f} s from the "
          "checker's start, first 1 s pass wait included)")
    print(f"  broker restart with the halves   {restart_s:10.1f} s")
    print(f"  broker RSS (RssAnon) MiB: start {rss_start}, {args.pending:,} pending {rss_filled}, "
          f"after restart {rss_restarted}, all resolved {rss_end}")


if __name__ == "__main__":
    main()
