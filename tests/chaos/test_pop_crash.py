"""POP across kill -9 of the broker (issue 26): messages popped and not acked at each kill.

A `pyrmq broker` subprocess holds thousands of messages (2,000; 20,000 with ``CHAOS_FULL=1``) in a 4-queue topic;
two consumer processes (tests/chaos/pop_proc.py, the real ``SimpleConsumer``) pop them at a bounded pace, each
message invisible for 3 s, and ack all but the first delivery of every 5th message. The broker is SIGKILLed at
random moments (2 times; 8 with ``CHAOS_FULL=1``) and started again on its store; the consumers wait out each
restart. At every kill some hundreds of messages are popped and not acked (left so on purpose, or whose ack the
kill cut off), and some were acked just before it.

From the consumers' logs (broker pop times from the receipt handles, the wall clock of each ack's answer), after the
last restart once every message's last delivery is acked:

* **none lost**: every message delivered, and every delivery left unacked was delivered again;
* **no acked message ever again**: no delivery after an ack the broker answered SUCCESS within the invisible time;
* **not before its invisible time**: a redelivery's pop time is never before the previous delivery's pop time plus
  its invisible time (a copy while the first was invisible would show here too).

The counts go to the reliability suite's table (deliveries, redeliveries, acks in doubt: sent, answer lost to a kill).
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from . import pop_proc
from .harness import FULL, Cluster, report, spawn, stop

pytestmark = pytest.mark.chaos

TOPIC = "PopChaos"
GROUP = "GPOPCHAOS"
POP_PROC = Path(__file__).with_name("pop_proc.py")
INVISIBLE_MS = 3000


def send_all(cluster: Cluster, count: int) -> list[str]:
    """``count`` keyed messages in batches of 100 (the keys returned once every batch is SEND_OK)."""
    from pyrmq.client import Admin, BlockingProducer, Message
    import trio

    async def create() -> None:
        async with Admin(cluster.namesrv_addr) as admin:
            await admin.create_topic(TOPIC, 4)

    trio.run(create)
    keys = [f"m{i}" for i in range(count)]
    with BlockingProducer(cluster.namesrv_addr, "pop_chaos_producer") as producer:
        for start in range(0, count, 100):
            chunk = keys[start:start + 100]
            for result in producer.send_batch([Message(TOPIC, k.encode() * 16, keys=k) for k in chunk]):
                assert result.status.value == "SEND_OK", result
    return keys


def start_consumers(cluster: Cluster, n: int, rate: float) -> tuple[list[subprocess.Popen], list[Path]]:
    procs, logs = [], []
    for i in range(n):
        log = cluster.root / f"pop-{i}.log"
        logs.append(log)
        procs.append(spawn([sys.executable, str(POP_PROC), cluster.namesrv_addr, TOPIC, GROUP, str(log),
                            str(INVISIBLE_MS), str(rate), "5"], cluster.root / f"pop-{i}.out"))
    return procs, logs


def in_flight(logs: list[Path]) -> tuple[int, int]:
    """(deliveries not acked whose invisible time has not ended, acks answered in the last 2 s), read now."""
    now = int(time.time() * 1000)
    pending = recent = 0
    for deliveries in pop_proc.read(logs).values():
        for d in deliveries:
            if d.acked is None and d.due > now:
                pending += 1
            if d.acked is not None and now - d.acked < 2000:
                recent += 1
    return pending, recent


def test_kill_9_with_messages_popped_and_not_acked(tmp_path):
    count = 20_000 if FULL else 2_000
    kills = 8 if FULL else 2
    rate = 200.0 if FULL else 150.0  # per consumer: the run outlasts the kills
    rng = random.Random()
    cluster = Cluster(tmp_path, {"reviveQueueNum": "4"})
    consumers: list[subprocess.Popen] = []
    recovery: list[float] = []
    at_kill: list[tuple[int, int]] = []
    try:
        cluster.start_namesrv()
        cluster.start_broker()
        import trio

        trio.run(cluster.registered)
        keys = send_all(cluster, count)
        consumers, logs = start_consumers(cluster, 2, rate)
        t_end = time.monotonic() + 60
        while not any(pop_proc.read(logs).values()):
            assert time.monotonic() < t_end, f"nothing consumed within 60 s: see {cluster.root}"
            assert all(c.poll() is None for c in consumers), f"a consumer exited: see {cluster.root}"
            time.sleep(0.2)
        for _ in range(kills):
            time.sleep(rng.uniform(2.0, 5.0))
            assert all(c.poll() is None for c in consumers), f"a consumer exited: see {cluster.root}"
            at_kill.append(in_flight(logs))
            cluster.kill_broker()
            recovery.append(cluster.start_broker())
        t_end = time.monotonic() + (900 if FULL else 180)
        while not pop_proc.settled(logs, keys):
            assert time.monotonic() < t_end, (
                f"not every message consumed after the last restart: see {cluster.root}; "
                f"{pop_proc.analyse(logs, keys).figures()}")
            assert all(c.poll() is None for c in consumers), f"a consumer exited: see {cluster.root}"
            time.sleep(0.5)
        time.sleep(INVISIBLE_MS / 1000 + 2)  # a message acked in doubt or delivered twice would show by now
        for c in consumers:
            stop(c, signal.SIGKILL)
        result = pop_proc.analyse(logs, keys)
    finally:
        for c in consumers:
            stop(c, signal.SIGKILL)
        cluster.close()
    assert all(pending > 0 for pending, _ in at_kill), f"a kill found no message popped and not acked: {at_kill}"
    assert not result.lost, f"{len(result.lost)} messages lost: {result.lost[:10]}; see {tmp_path}"
    assert not result.acked_again, f"acked messages delivered again: {result.acked_again[:10]}; see {tmp_path}"
    assert not result.early, f"redelivered before the invisible time ended: {result.early[:10]}; see {tmp_path}"
    assert result.redeliveries >= count // 5 // 2, result.figures()  # the skipped first deliveries came back
    report("POP across kill -9 (ASYNC_FLUSH)", kills=kills, messages=count,
           popped_not_acked_at_kill=", ".join(str(p) for p, _ in at_kill),
           acked_in_the_2_s_before_kill=", ".join(str(r) for _, r in at_kill), **result.figures(),
           recovery_s=f"median {sorted(recovery)[len(recovery) // 2]:.2f}, max {max(recovery):.2f}")


def test_the_checker_sees_a_lost_an_acked_again_and_an_early_delivery(tmp_path):
    """Negative control of :func:`pop_proc.analyse` on a hand-written log."""
    log = tmp_path / "pop.log"
    log.write_text("".join([
        "P ok 1 1000 3000 1000\n", "a ok 1000 1000\n", "A ok 1000 1005\n",
        "P skipped 1 1000 3000 1000\n",  # left unacked, never again: lost
        "P again 1 1000 3000 1000\n", "a again 1000 1000\n", "A again 1000 1010\n",
        "P again 2 5000 3000 5000\n", "a again 5000 5000\n", "A again 5000 5001\n",  # after a valid ack
        "P early 1 1000 3000 1000\n", "P early 2 2000 3000 2000\n", "a early 2000 2000\n",  # before 4000
        "P late 1 1000 3000 1000\n", "a late 1000 1000\n", "A late 1000 4500\n",  # answered after its due time
        "P late 2 4001 3000 4001\n", "a late 4001 4001\n", "A late 4001 4002\n",
        "P doubt 1 1000 3000 1000\n", "a doubt 1000 1000\n",
        "P twin 2 6000 3000 6000\n", "a twin 6000 6000\n", "P twin 2 6000 3000 6000\n", "a twin 6000 6000\n",
        "A twin 6000 6001\n",  # two copies in one answer
        "P cut 1 10",  # a line cut by a kill
    ]))
    result = pop_proc.analyse([log], ["ok", "skipped", "again", "early", "late", "doubt", "twin", "never"])
    assert (result.lost, result.acked_again, result.early) == (["skipped", "never"], ["again"], ["early"])
    assert result.copies == ["twin"]
    assert (result.acked, result.acks_in_doubt, result.redeliveries) == (4, 2, 4)
