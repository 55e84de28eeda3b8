"""ali-ons (the real JS RocketMQ 4.x client) producing and consuming 1 KiB messages against pyrmq.

Starts `pyrmq dev` as a subprocess, creates a topic, then runs ali-ons producers (sequential and with N sends in
flight) and a push consumer, printing messages/s and the broker's CPU seconds per 10,000 messages (from
/proc/<pid>/stat, user + system). ali-ons is taken from $PYRMQ_CACHE_DIR/ali-ons (installed by the e2e tests).

    python bench/alions_bench.py [--count 20000] [--concurrency 64]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).parent
TICK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def node(modules: Path, *args: str) -> dict:
    out = subprocess.run(["node", str(HERE / "js" / "alions_bench.js"), *map(str, args)], capture_output=True, text=True,
                         env=dict(os.environ, NODE_PATH=str(modules)), timeout=1800)
    if out.returncode != 0:
        raise SystemExit(f"ali-ons failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args()
    modules = Path(os.environ.get("PYRMQ_CACHE_DIR", Path.home() / ".cache" / "pyrmq")) / "ali-ons" / "node_modules"
    if not (modules / "ali-ons").exists():
        subprocess.run(["npm", "install", "--prefix", str(modules.parent), "ali-ons@3.12.0", "--no-audit", "--no-fund"], check=True)
    ns_port, br_port = free_port(), free_port()
    store = tempfile.mkdtemp(prefix="pyrmq-bench-")
    dev = subprocess.Popen([sys.executable, "-m", "pyrmq", "dev", "--dashboard-port", "0", "--namesrv-port", str(ns_port), "--port", str(br_port),
                            "--store-dir", store], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        print(dev.stdout.readline().decode().strip(), flush=True)
        namesrv = f"127.0.0.1:{ns_port}"
        from pyrmq.remoting.blocking import BlockingRemotingClient
        from pyrmq.remoting.command import RemotingCommand

        with BlockingRemotingClient() as client:
            client.invoke(f"127.0.0.1:{br_port}", RemotingCommand.request(17, {
                "topic": "Bench", "defaultTopic": "TBW102", "readQueueNums": "4", "writeQueueNums": "4", "perm": "6",
                "topicFilterType": "SINGLE_TAG"}))
        rows = []
        for label, conc, count in (("produce, 1 in flight", 1, min(args.count, 5000)), (f"produce, {args.concurrency} in flight", args.concurrency, args.count)):
            before = cpu_seconds(dev.pid)
            result = node(modules, namesrv, "Bench", "produce", count, conc)
            cpu = cpu_seconds(dev.pid) - before
            rows.append((label, count, result["seconds"], cpu))
            print(f"{label}: {count} msgs", flush=True)
        total = sum(r[1] for r in rows)
        before = cpu_seconds(dev.pid)
        result = node(modules, namesrv, "Bench", "consume", total)
        rows.append(("consume (push consumer)", total, result["seconds"], cpu_seconds(dev.pid) - before))
        print(f"\n{'ali-ons against pyrmq, 1 KiB':32} {'messages':>9} {'msgs/s':>9} {'broker CPU s / 10k msgs':>24}")
        for label, count, seconds, cpu in rows:
            print(f"{label:32} {count:9d} {count / seconds:9.0f} {cpu / count * 10_000:24.2f}")
    finally:
        dev.send_signal(signal.SIGINT)
        dev.wait(30)


if __name__ == "__main__":
    main()
