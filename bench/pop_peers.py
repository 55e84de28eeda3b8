"""POP consumption, pyrmq beside Apache RocketMQ 5.5.0, driven by the official 5.5.0 Java remoting client (issue 26).

    .venv/bin/python bench/pop_peers.py [--count 200000] [--poppers 8]     (or: bench/peers.py --with-pop)

`pyrmq namesrv` + `pyrmq broker` and the Apache RocketMQ 5.5.0 name server + broker (Maven Central, JDK 17, run by
tests/e2e/java/javabroker.py), each with a fresh store holding ``--count`` + 5,000 messages of 1 KiB in a 4-queue
topic, each consumed three times by bench/java5/PopLoad.java (rocketmq-client 5.5.0), each time by a group of its own:

* **POP, raw**: ``--poppers`` threads, each its own client instance: POP_MESSAGE of 32 (all queues, invisible 60 s)
  then one BATCH_ACK_MESSAGE of the answer;
* **POP, push consumer**: DefaultMQPushConsumer in POP mode (client rebalance off, request mode POP: queue -1), one
  ACK_MESSAGE per message (what the 5.5.0 client sends);
* **pull**: DefaultMQPushConsumer, classic (queues rebalanced, PULL_MESSAGE of 32): the pull consumption beside.

After 5,000 warm-up messages, the next ``--count`` are timed: messages/s (received and acked) and the broker's CPU
a message (utime + stime of the broker process over the timed window, /proc/<pid>/stat, every thread). One run;
figures printed, never asserted.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "e2e" / "java"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from javabroker import JavaRocketMQ  # noqa: E402
from javapeers import JavaPeerError, classpath, compile_sources, java_command  # noqa: E402

from peers import PyrmqServer, java_load_with, progress  # noqa: E402

TOPIC = "PopPeers"
WARM_UP = 5000  # PopLoad.WARM_UP
WORKLOADS = (
    ("pop", "POP, raw: pop 32 + batch ack"),
    ("pushpop", "POP, push consumer (POP mode)"),
    ("pull", "pull, push consumer (classic)"),
)


class Java5Server:
    """The Apache RocketMQ 5.5.0 name server + broker on a fresh store; ``pid`` is the broker JVM's."""

    name = "java5"

    def __init__(self, work: Path) -> None:
        self.store = work / "java5-store"
        self.rmq = JavaRocketMQ(work / "java5-home", self.store, broker_heap="1g", kind="server5").start()
        self.namesrv_addr, self.broker_addr = self.rmq.namesrv_addr, self.rmq.broker_addr
        self.pid = self.rmq.broker.pid

    def stop(self) -> None:
        import shutil

        self.rmq.stop()
        shutil.rmtree(self.store, ignore_errors=True)


def load(classes: Path, server, work: Path, *args: object) -> dict:
    return java_load_with("client5", "PopLoad", classes, server, work, *args)


def measure(server, classes: Path, work: Path, count: int, poppers: int) -> dict[str, dict]:
    load(classes, server, work, "topics", server.namesrv_addr, server.broker_addr, 4, TOPIC)
    stored = load(classes, server, work, "store", server.namesrv_addr, TOPIC, count + WARM_UP)
    if stored["errors"]:
        raise SystemExit(f"{server.name}: {stored['errors']} messages not stored")
    out = {}
    for workload, args in (
        ("pop", ("pop", server.namesrv_addr, server.broker_addr, "pop_peers_pop", TOPIC, count, poppers)),
        ("pushpop", ("pushpop", server.namesrv_addr, server.broker_addr, "pop_peers_pushpop", TOPIC, count)),
        ("pull", ("pull", server.namesrv_addr, "pop_peers_pull", TOPIC, count)),
    ):
        r = load(classes, server, work, *args)
        out[workload] = {"rate": r["count"] / r["seconds"], "cpu_us": r["cpu"] / max(r["count"], 1) * 1e6,
                         "count": r["count"], "errors": r["errors"], "rss": r["rss"]}
        progress(f"  {server.name:6s} {workload:8s} {r['count']:>9,} msgs  {out[workload]['rate']:>10,.0f} msgs/s  "
                 f"broker cpu {out[workload]['cpu_us']:6.1f} us/msg  rss {r['rss']:6.0f} MiB"
                 + (f"  {r['errors']} FAILED" if r["errors"] else ""))
    return out


def table(results: dict[str, dict[str, dict]], count: int, poppers: int) -> str:
    lines = [f"POP consumption, {count:,} messages of 1 KiB timed after {WARM_UP:,}, 4 queues; load: the official "
             f"RocketMQ 5.5.0 Java client ({poppers} raw poppers)",
             "",
             f"{'workload':<34} {'pyrmq msgs/s':>13} {'us/msg':>7} {'5.5.0 msgs/s':>13} {'us/msg':>7} {'rate x':>7} "
             f"{'cpu x':>6}"]
    for workload, title in WORKLOADS:
        ours, theirs = results.get("pyrmq", {}).get(workload), results.get("java5", {}).get(workload)
        if not ours or not theirs:
            continue
        lines.append(f"{title:<34} {ours['rate']:>13,.0f} {ours['cpu_us']:>7.1f} {theirs['rate']:>13,.0f} "
                     f"{theirs['cpu_us']:>7.1f} {ours['rate'] / theirs['rate']:>6.2f}x "
                     f"{theirs['cpu_us'] / ours['cpu_us']:>5.2f}x")
    lines.append("")
    lines.append("rate x: pyrmq's rate / 5.5.0's (>= 1: pyrmq as fast or faster); cpu x: 5.5.0's broker CPU a message / "
                 "pyrmq's (>= 1: pyrmq as cheap or cheaper). us/msg: the broker's CPU (every thread) a message.")
    pop, pull = results.get("pyrmq", {}).get("pop"), results.get("pyrmq", {}).get("pull")
    if pop and pull:
        lines.append(f"pyrmq POP (raw) beside pyrmq pull: {pop['rate'] / pull['rate']:.2f}x the rate, "
                     f"{pop['cpu_us'] / pull['cpu_us']:.2f}x the broker CPU a message.")
    return "\n".join(lines)


def run(work: Path, count: int, poppers: int, order: tuple[str, ...] = ("pyrmq", "java5")) -> dict[str, dict]:
    """One run of both brokers (in ``order``); what :func:`table` prints. bench/peers.py --with-pop calls this."""
    try:
        classes = compile_sources(ROOT / "bench" / "java5", "client5")
        classpath("server5")
    except JavaPeerError as exc:
        raise SystemExit(str(exc)) from None
    results: dict[str, dict] = {}
    for name in order:
        progress(f"POP: {name} broker, RocketMQ 5.5.0 Java client load (load average {os.getloadavg()[0]:.1f})")
        server = Java5Server(work) if name == "java5" else PyrmqServer(work)
        try:
            results[name] = measure(server, classes, work, count, poppers)
        finally:
            server.stop()
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=200_000, help="messages timed per workload (default 200,000)")
    ap.add_argument("--poppers", type=int, default=8, help="raw POP threads (default 8)")
    ap.add_argument("--java-first", action="store_true", help="run the 5.5.0 broker first")
    args = ap.parse_args()
    progress(f"{os.cpu_count()} CPUs, load average {os.getloadavg()}")
    with tempfile.TemporaryDirectory(prefix="pyrmq-pop-peers-") as tmp:
        results = run(Path(tmp), args.count, args.poppers,
                      ("java5", "pyrmq") if args.java_first else ("pyrmq", "java5"))
    print(table(results, args.count, args.poppers))


if __name__ == "__main__":
    main()
