"""Crash under load: a SYNC_FLUSH broker killed with SIGKILL at random moments while 4 producer processes keep 64
sends each in flight (keyed messages, batches, delayed and timer messages) and a transaction producer process keeps
transactions in flight (committed, rolled back, and left unknown for the check-back to commit or roll back);
restarted each time.

After every restart the checker reads the store files (commit log, consume queues, index) and the producers' logs:
every acknowledged message is stored (none lost), once (duplicates from a client's retry of a send whose answer was
lost are counted apart; any other duplicate is a failure), its queue offsets have no gaps, its consume-queue unit
points at it, its key is in the index, and no record has a bad CRC. Delayed and timer messages are stored parked
first, then delivered to the topic exactly once. Transactions: every acknowledged half is stored; a rolled-back
transaction's message is never in the topic; a committed one's is there at most once per stored half (the op
records say which halves are resolved, and a resolved committed half has its message). At the end, with the
transaction producer still answering check-backs: every half resolved, every committed transaction delivered
exactly once, every transaction left unknown checked back, and every half that was pending at a kill resolved
after the restart. The broker's recovery time is reported, never asserted on.

The ASYNC_FLUSH case measures what a crash of the machine (not only of the process) could lose: acknowledged
messages newer than the last durable checkpoint at the moment of the kill.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pyrmq.store.format import CHECKPOINT

from .harness import (
    FULL,
    Cluster,
    StoreImage,
    check_consistency,
    iter_lines,
    key_hash,
    read_acks,
    read_checks,
    read_store,
    report,
    spawn,
    stop,
)

pytestmark = pytest.mark.chaos

TOPIC = "Chaos"
PARKED = ("SCHEDULE_TOPIC_XXXX", "rmq_sys_wheel_timer")
PRODUCER = Path(__file__).with_name("producer_proc.py")
TXN_PRODUCER = Path(__file__).with_name("txn_proc.py")
HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
#: a transaction's fate (tests/chaos/txn_proc.py): committed by its producer or by the check-back, rolled back
#: by either, answered UNKNOWN first (so the broker must check it back)
TX_COMMITTED = ("txc", "txuc")
TX_ROLLED_BACK = ("txr", "txur")
TX_UNKNOWN = ("txuc", "txur")
#: transaction settings of the crash broker: a half unanswered for 3 s is checked, every second
TX_SETTINGS = {"transactionTimeOut": "3000", "transactionCheckInterval": "1000", "transactionCheckMax": "100"}


def start_producers(cluster: Cluster, n: int, inflight: int) -> tuple[list[subprocess.Popen], list[Path]]:
    procs, logs = [], []
    for i in range(n):
        log = cluster.root / f"producer-{i}.acks"
        logs.append(log)
        procs.append(spawn([sys.executable, str(PRODUCER), cluster.namesrv_addr, TOPIC, f"p{i}", str(log),
                            str(inflight)], cluster.root / f"producer-{i}.log"))
    return procs, logs


def wait_for_acks(logs: list[Path], producers: list[subprocess.Popen], deadline_s: float = 90) -> None:
    """Wait until every producer has had a send acknowledged (routes found, topic created)."""
    t_end = time.monotonic() + deadline_s
    while not all(read_acks([log])[0] for log in logs):
        assert time.monotonic() < t_end, f"a producer had nothing acknowledged within {deadline_s} s"
        assert all(p.poll() is None for p in producers), "a producer exited"
        time.sleep(0.2)


def start_txn_producer(cluster: Cluster, inflight: int) -> tuple[subprocess.Popen, Path]:
    log = cluster.root / "txn.acks"
    proc = spawn([sys.executable, str(TXN_PRODUCER), cluster.namesrv_addr, TOPIC, "tx", str(log), str(inflight)],
                 cluster.root / "txn.log")
    return proc, log


def transactions(img: StoreImage) -> dict[str, list[bool]]:
    """cid -> [resolved?] per transaction stored (its original half; check copies belong to it through their
    preparedTransactionOffset), resolved when an op record names the queue offset of the half or of a copy."""
    resolved_offsets = set()
    for r in img.records:
        if r.topic == OP_TOPIC:
            resolved_offsets.update(int(p) for p in r.body.decode("ascii", "replace").split(",") if p.isdigit())
    origins: dict[int, list] = {}
    for r in img.records:
        if r.topic != HALF_TOPIC or "cid" not in r.properties:
            continue
        origin = r.prepared_transaction_offset if "TRANSACTION_CHECK_TIMES" in r.properties else r.phy
        o = origins.setdefault(origin, [r.properties["cid"], False])
        o[1] = o[1] or r.queue_offset in resolved_offsets
    out: dict[str, list[bool]] = {}
    for cid, resolved in origins.values():
        out.setdefault(cid, []).append(resolved)
    return out


def unresolved(img: StoreImage) -> set[tuple[str, int]]:
    """(cid, n) of every transaction not resolved yet."""
    return {(cid, i) for cid, states in transactions(img).items() for i, ok in enumerate(states) if not ok}


def verify(img: StoreImage, acks: dict, *, final: bool, checked: set[str] | None = None) -> dict[str, int]:
    """Every acknowledged message against the store image; returns the counts. ``checked``: the cids the
    transaction producer answered a check-back for."""
    figures = check_consistency(img)
    delivered: dict[str, list] = {}
    parked: dict[str, list] = {}
    for r in img.records:
        cid = r.properties.get("cid")
        if cid is None:
            continue
        if r.topic == TOPIC:
            delivered.setdefault(cid, []).append(r)
        elif r.topic in PARKED:
            parked.setdefault(cid, []).append(r)
    lost = dups = retry_dups = pending = index_missing = 0
    tx = transactions(img)
    tx_acked = tx_pending = tx_rolled_back_delivered = tx_unchecked = 0
    lost_ids = []
    for cid, ack in acks.items():
        got = delivered.get(cid, [])
        if ack.kind in TX_COMMITTED or ack.kind in TX_ROLLED_BACK:
            tx_acked += 1
            halves = tx.get(cid, [])
            if not halves:
                lost += 1
                lost_ids.append(cid)
                continue
            tx_pending += halves.count(False)
            if ack.kind in TX_UNKNOWN and checked is not None and cid not in checked:
                tx_unchecked += 1
            if ack.kind in TX_ROLLED_BACK:
                tx_rolled_back_delivered += len(got)
                if got:
                    img.problems.append(f"rolled back but delivered: {cid}")
                continue
            if len(got) > len(halves):
                dups += len(got) - len(halves)  # committed more often than it was stored
            elif len(got) < halves.count(True) if ack.attempts == 1 else (final and not got):
                # resolved (op record written) but its commit is not in the topic. (A half of a failed attempt may
                # rightly be rolled back: the client rolls back a half stored with a status other than SEND_OK.)
                lost += 1
                lost_ids.append(cid)
            extra = min(len(got), len(halves)) - 1
        elif ack.kind in ("delay", "timer"):
            stored = len(parked.get(cid, []))
            if stored == 0:
                lost += 1
                lost_ids.append(cid)
                continue
            if len(got) > stored:
                dups += len(got) - stored  # delivered more often than it was stored
            elif len(got) < stored:
                pending += stored - len(got)
            extra = stored - 1
        else:
            if not got:
                lost += 1
                lost_ids.append(cid)
                continue
            extra = len(got) - 1
        if extra > 0:
            if ack.attempts > 1:
                retry_dups += extra
            else:
                dups += extra
        for r in got:
            if (key_hash(TOPIC, cid), r.phy) not in img.index_entries:
                index_missing += 1
    stored_ids = set(delivered) | set(parked) | set(tx)
    figures.update(acked=len(acks), lost=lost, duplicated=dups, retry_duplicates=retry_dups,
                   pending_delivery=pending, index_missing=index_missing,
                   stored_not_acked=len(stored_ids - set(acks)), records=len(img.records),
                   tx_acked=tx_acked, tx_pending=tx_pending, tx_rolled_back_delivered=tx_rolled_back_delivered,
                   tx_unchecked=tx_unchecked)
    if lost_ids:
        img.problems.append(f"lost: {sorted(lost_ids)[:10]}")
    return figures


def settle(cluster: Cluster, acks: dict, *, final: bool, deadline_s: float,
           checks: Path | None = None) -> tuple[dict[str, int], StoreImage]:
    """Check until the broker's asynchronous work (dispatch after restart, due deliveries; at the end, transactions
    checked back and resolved) has caught up, or the deadline passes; returns the last figures. Losses and broken
    structure do not heal, so they fail right away. ``checks``: the transaction producer's log."""
    t_end = time.monotonic() + deadline_s
    while True:
        img = read_store(cluster.store_dir)
        figures = verify(img, acks, final=final, checked=read_checks([checks]) if checks else None)
        settled = figures["missing_units"] == 0 and figures["index_missing"] == 0 and (
            not final or (figures["pending_delivery"] == 0 and figures["tx_pending"] == 0
                          and figures["tx_unchecked"] == 0))
        if settled or time.monotonic() > t_end:
            return figures, img
        time.sleep(0.5)


def assert_clean(figures: dict[str, int], img: StoreImage, where: str) -> None:
    bad = {k: figures[k] for k in ("lost", "duplicated", "bad_crc", "offset_gaps", "offset_repeats", "bad_units",
                                    "missing_units", "index_missing", "tx_rolled_back_delivered") if figures[k]}
    assert not bad, f"{where}: {bad}; {img.problems[:10]}; broker log: see {where}"


def test_sigkill_under_load_loses_and_duplicates_nothing(tmp_path):
    rounds = 20 if FULL else 1
    inflight = 64 if FULL else 16
    rng = random.Random()
    cluster = Cluster(tmp_path, {"flushDiskType": "SYNC_FLUSH", "messageDelayLevel": "1s 2s", **TX_SETTINGS})
    producers: list[subprocess.Popen] = []
    recovery: list[float] = []
    totals: dict[str, int] = {}
    pending_at_kill: set[tuple[str, int]] = set()
    try:
        cluster.start_namesrv()
        cluster.start_broker()
        producers, logs = start_producers(cluster, 4, inflight)
        txn, txn_log = start_txn_producer(cluster, inflight // 2)
        producers.append(txn)
        logs.append(txn_log)
        wait_for_acks(logs, producers)
        for rnd in range(rounds):
            time.sleep(rng.uniform(2.0, 5.0))
            for p in producers:
                assert p.poll() is None, f"producer exited: see {cluster.root}"
            cluster.kill_broker()
            for p in producers:  # a stable picture for the check: nothing new is acknowledged while it reads
                p.send_signal(signal.SIGSTOP)
            recovery.append(cluster.start_broker())
            acks, _ = read_acks(logs)
            figures, img = settle(cluster, acks, final=False, deadline_s=20)
            assert_clean(figures, img, f"round {rnd + 1}, {cluster.root}")
            # transactions the kill left open: the restarted broker must check them back (or a late END_TRANSACTION
            # of the producer, resumed next, resolve them)
            pending_at_kill |= unresolved(img)
            for p in producers:
                p.send_signal(signal.SIGCONT)
            totals = figures
        for p in producers[:-1]:
            stop(p, signal.SIGKILL)
        # the transaction producer stops starting transactions and goes on answering check-backs
        txn.send_signal(signal.SIGUSR1)
        t_end = time.monotonic() + 60
        while "S" not in iter_lines(txn_log):
            assert time.monotonic() < t_end, f"the transaction producer did not finish its transactions: see {cluster.root}"
            assert txn.poll() is None, f"the transaction producer exited: see {cluster.root}"
            time.sleep(0.2)
        acks, _ = read_acks(logs)
        figures, img = settle(cluster, acks, final=True, deadline_s=60, checks=txn_log)
        assert_clean(figures, img, f"after the last round, {cluster.root}")
        assert figures["pending_delivery"] == 0, "delayed/timer messages not delivered"
        assert figures["tx_pending"] == 0, f"{figures['tx_pending']} transactions never resolved: see {cluster.root}"
        assert figures["tx_unchecked"] == 0, f"{figures['tx_unchecked']} unknown transactions never checked back"
        left_open = pending_at_kill & unresolved(img)
        assert not left_open, f"transactions open at a kill and never resolved after it: {sorted(left_open)[:10]}"
        assert pending_at_kill, "no transaction was open at any kill: the scenario did not test the check-back"
        totals = figures
        stop(cluster.broker)
        dump = subprocess.run([sys.executable, "-m", "pyrmq", "store", "dump", "--verify", str(cluster.store_dir)],
                              capture_output=True, text=True, timeout=600)
        assert dump.returncode == 0, dump.stdout[-3000:]
        assert dump.stdout.rstrip().endswith("verify: OK")
    finally:
        for p in producers:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
            stop(p, signal.SIGKILL)
        cluster.close()
    assert totals["acked"] > 0
    report("crash under load (SYNC_FLUSH, kill -9)", rounds=rounds, producers=f"4 x {inflight} in flight",
           acked=totals["acked"], lost=totals["lost"], duplicated=totals["duplicated"],
           retry_duplicates=totals["retry_duplicates"], stored_not_acked=totals["stored_not_acked"],
           bad_crc=totals["bad_crc"], offset_gaps=totals["offset_gaps"],
           transactions=f"{totals['tx_acked']} acked halves, {len(pending_at_kill)} open at a kill and resolved "
                        f"after the restart, {totals['tx_rolled_back_delivered']} rolled back but delivered, "
                        f"{totals['tx_pending']} unresolved",
           recovery_s=f"median {sorted(recovery)[len(recovery) // 2]:.2f}, max {max(recovery):.2f}")


def test_async_flush_exposure_is_bounded_by_the_flush_interval(tmp_path):
    """SIGKILL leaves the page cache intact, so even ASYNC_FLUSH loses nothing to a process crash (asserted); what a
    machine crash could lose is what was acknowledged after the last durable checkpoint (measured)."""
    rounds = 5 if FULL else 1
    cluster = Cluster(tmp_path, {"flushDiskType": "ASYNC_FLUSH", "flushIntervalCommitLog": "500",
                                 "messageDelayLevel": "1s 2s"})
    producers: list[subprocess.Popen] = []
    windows, exposed, lost_total = [], [], 0
    try:
        cluster.start_namesrv()
        cluster.start_broker()
        producers, logs = start_producers(cluster, 2, 16)
        wait_for_acks(logs, producers)
        for _ in range(rounds):
            time.sleep(random.uniform(2.0, 4.0) if FULL else 1.5)
            cluster.kill_broker()
            kill_ms = int(time.time() * 1000)
            for p in producers:
                p.send_signal(signal.SIGSTOP)
            # the durable store time, read before the restart rewrites the checkpoint
            durable_ms = CHECKPOINT.unpack_from((cluster.store_dir / "checkpoint").read_bytes(), 0)[0]
            acks, _ = read_acks(logs)
            cluster.start_broker()
            figures, img = settle(cluster, acks, final=False, deadline_s=20)
            assert figures["lost"] == 0, img.problems[:5]
            lost_total += figures["lost"]
            newer = [r for r in img.records if r.topic == "Chaos" and r.properties.get("cid") in acks
                     and r.store_timestamp > durable_ms]
            windows.append(kill_ms - durable_ms)
            exposed.append(len(newer))
            for p in producers:
                p.send_signal(signal.SIGCONT)
    finally:
        for p in producers:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
            stop(p, signal.SIGKILL)
        cluster.close()
    report("ASYNC_FLUSH exposure (flushIntervalCommitLog 500 ms)", rounds=rounds, lost=lost_total,
           unflushed_window_ms=f"median {sorted(windows)[len(windows) // 2]}, max {max(windows)}",
           acked_but_unflushed=f"median {sorted(exposed)[len(exposed) // 2]}, max {max(exposed)}")
