"""Replication benchmark: send throughput of a master without a slave, an ASYNC_MASTER with a slave and a
SYNC_MASTER with a slave, in one run; the slave's lag under that load; replication throughput (an empty slave
catching up a master's commit log) next to raw loopback TCP.

    .venv/bin/python bench/ha_bench.py [--count 20000] [--size 1024] [--catch-up-mb 64]

Per scenario it starts `pyrmq namesrv`, a master and (except "no slave") a slave as subprocesses on 127.0.0.1
(free ports, temporary stores, ASYNC_FLUSH), then sends ``count`` messages of ``size`` bytes two ways through
pyrmq.client: single sends with 64 in flight, and batches of 100 with 4 batches in flight. While sending, the
master's GET_BROKER_RUNTIME_INFO is sampled every 100 ms for its worst slave's lag (haBehindBytes /
haBehindSeconds). Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

from pyrmq.client import Message, Producer
from pyrmq.client.config import ClientConfig
from pyrmq.remoting.client import RemotingClient
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand

TOPIC = "HaBench"


def free_broker_port() -> int:
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        try:
            for p in (port - 2, port, port + 1):
                with socket.socket() as t:
                    t.bind(("127.0.0.1", p))
        except OSError:
            continue
        if port > 1100:
            return port
    raise RuntimeError("no free port")


class Proc:
    def __init__(self, args: list[str], log: Path) -> None:
        self.log = open(log, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "pyrmq", "--log-level", "WARNING", *args],
                                     stdout=subprocess.PIPE, stderr=self.log)
        deadline = time.monotonic() + 60
        self.listening: dict[str, str] = {}
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline().decode()
            if not line:
                raise RuntimeError(f"{args} exited; see {log}")
            if line.startswith("pyrmq ") and " on " in line:
                for part in line.split(":", 1)[1].split("(")[0].split(","):
                    role, _, addr = part.strip().partition(" on ")
                    self.listening[role] = addr.strip()
                return
        raise RuntimeError(f"{args} did not start")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)
        self.log.close()


def broker(namesrv: str, store: Path, log: Path, *sets: str) -> Proc:
    port = free_broker_port()
    args = ["broker", "-c", "broker", "--namesrv", namesrv, "--listen", f"127.0.0.1:{port}", "--store-dir", str(store)]
    for kv in ("haSendHeartbeatInterval=1000", *sets):
        args += ["--set", kv]
    return Proc(args, log)


async def runtime_info(rc: RemotingClient, addr: str) -> dict[str, str]:
    resp = await rc.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO, {}))
    return json.loads(resp.body_bytes())["table"]


async def wait_replicating(producer: Producer) -> None:
    with trio.fail_after(60):
        while (await producer.send(Message(TOPIC, b"probe"))).status.value != "SEND_OK":
            await trio.sleep(0.2)


async def load(producer: Producer, count: int, size: int, batch: int, in_flight: int) -> tuple[float, dict]:
    body = b"x" * size
    statuses: dict[str, int] = {}
    per_worker = count // in_flight
    start = time.perf_counter()

    async def worker() -> None:
        done = 0
        while done < per_worker:
            n = min(batch, per_worker - done)
            if batch == 1:
                results = [await producer.send(Message(TOPIC, body))]
            else:
                results = await producer.send_batch([Message(TOPIC, body) for _ in range(n)])
            for r in results:  # a batch's one result stands for its n messages
                statuses[r.status.value] = statuses.get(r.status.value, 0) + (1 if batch == 1 else n)
            done += n

    async with trio.open_nursery() as nursery:
        for _ in range(in_flight):
            nursery.start_soon(worker)
    return per_worker * in_flight / (time.perf_counter() - start), statuses


async def sample_lag(rc: RemotingClient, addr: str, out: list[tuple[int, float]]) -> None:
    while True:
        table = await runtime_info(rc, addr)
        if "haBehindBytes" in table:
            out.append((int(table["haBehindBytes"]), float(table.get("haBehindSeconds", "0"))))
        await trio.sleep(0.1)


async def scenario(name: str, role: str, with_slave: bool, args: argparse.Namespace, work: Path) -> None:
    procs: list[Proc] = []
    try:
        namesrv = Proc(["namesrv", "--listen", "127.0.0.1:0"], work / f"{name}-namesrv.log")
        procs.append(namesrv)
        ns = namesrv.listening["namesrv"]
        master = broker(ns, work / f"{name}-master", work / f"{name}-master.log", f"brokerRole={role}")
        procs.append(master)
        if with_slave:
            procs.append(broker(ns, work / f"{name}-slave", work / f"{name}-slave.log", "brokerRole=SLAVE", "brokerId=1"))
        maddr = master.listening["broker"]
        async with RemotingClient() as rc:
            create = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
                "topic": TOPIC, "defaultTopic": "TBW102", "readQueueNums": "8", "writeQueueNums": "8", "perm": "6",
                "topicFilterType": "SINGLE_TAG"})
            assert (await rc.invoke(maddr, create)).code == ResponseCode.SUCCESS
            config = ClientConfig(namesrv_addr=ns)
            async with Producer(config=config, group="ha_bench", send_timeout=10) as producer:
                if with_slave:
                    await wait_replicating(producer)
                for label, batch, in_flight in (("single, 64 in flight", 1, 64), ("batch 100, 4 in flight", 100, 4)):
                    lag: list[tuple[int, float]] = []
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(sample_lag, rc, maddr, lag)
                        rate, statuses = await load(producer, args.count, args.size, batch, in_flight)
                        nursery.cancel_scope.cancel()
                    worst = max(lag, default=(0, 0.0))
                    lag_text = f"max slave lag {worst[0] / 1024:.0f} KiB / {worst[1]:.2f} s" if with_slave else ""
                    print(f"{name:<24} {label:<24} {rate:>9.0f} msg/s  {statuses}  {lag_text}", flush=True)
    finally:
        for p in reversed(procs):
            p.stop()


async def catch_up(args: argparse.Namespace, work: Path) -> None:
    """An empty slave catching up ``catch_up_mb`` of commit log, next to raw loopback TCP of the same bytes."""
    procs: list[Proc] = []
    try:
        namesrv = Proc(["namesrv", "--listen", "127.0.0.1:0"], work / "cu-namesrv.log")
        procs.append(namesrv)
        ns = namesrv.listening["namesrv"]
        master = broker(ns, work / "cu-master", work / "cu-master.log", "brokerRole=ASYNC_MASTER")
        procs.append(master)
        maddr = master.listening["broker"]
        async with RemotingClient() as rc:
            create = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
                "topic": TOPIC, "defaultTopic": "TBW102", "readQueueNums": "8", "writeQueueNums": "8", "perm": "6",
                "topicFilterType": "SINGLE_TAG"})
            await rc.invoke(maddr, create)
            async with Producer(config=ClientConfig(namesrv_addr=ns), group="ha_fill") as producer:
                count = args.catch_up_mb * 1024 * 1024 // (args.size + 200)
                await load(producer, count - count % 100, args.size, 100, 4)
            total = int((await runtime_info(rc, maddr))["commitLogMaxOffset"])
            slave = broker(ns, work / "cu-slave", work / "cu-slave.log", "brokerRole=SLAVE", "brokerId=1")
            procs.append(slave)
            saddr = slave.listening["broker"]
            with trio.fail_after(600):
                # timed from the first replicated bytes (not the slave's start-up and first report)
                while (first := int((await runtime_info(rc, saddr))["commitLogMaxOffset"])) == 0:
                    await trio.sleep(0.01)
                started = time.perf_counter()
                while int((await runtime_info(rc, saddr))["commitLogMaxOffset"]) < total:
                    await trio.sleep(0.01)
            elapsed = time.perf_counter() - started
            total -= first
        raw = await raw_loopback(total)
        print(f"catch-up of {total / 2**20:.0f} MiB by a fresh slave: {total / 2**20 / elapsed:.0f} MB/s "
              f"({elapsed:.2f} s, from its first replicated bytes); "
              f"raw loopback TCP, 32 KiB writes: {raw:.0f} MB/s", flush=True)
    finally:
        for p in reversed(procs):
            p.stop()


async def raw_loopback(total: int) -> float:
    chunk = b"\0" * (32 * 1024 + 12)
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    done = trio.Event()

    async def sink(stream):
        got = 0
        while got < total:
            data = await stream.receive_some(256 * 1024)
            if not data:
                break
            got += len(data)
        done.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, sink, listeners)
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        start = time.perf_counter()
        sent = 0
        while sent < total:
            await stream.send_all(chunk)
            sent += len(chunk)
        await done.wait()
        elapsed = time.perf_counter() - start
        await stream.aclose()
        nursery.cancel_scope.cancel()
    return total / 2**20 / elapsed


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--catch-up-mb", type=int, default=64)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pyrmq-ha-bench-"))
    try:
        for name, role, with_slave in (("no slave (ASYNC_MASTER)", "ASYNC_MASTER", False),
                                       ("ASYNC_MASTER + slave", "ASYNC_MASTER", True),
                                       ("SYNC_MASTER + slave", "SYNC_MASTER", True)):
            await scenario(name, role, with_slave, args, work)
        await catch_up(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    trio.run(main)
