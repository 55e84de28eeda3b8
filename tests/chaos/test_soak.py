"""Soak: many messages through a broker whose retention deletes old commit-log segments while a consumer reads.

The producer is paced by the consumer (tests/chaos/soak_clients.py: at most a window of messages ahead), so the
consumer keeps up with a retention that deletes every segment but the active one; what retention still took before
the consumer read it is reported as skipped. ``CHAOS_SOAK_COUNT`` sets the number of messages and ``CHAOS_SOAK_DEADLINE_S``
the time it may take (3 hours); each sample is also printed as a progress line (``pytest -s`` shows them).

The broker's RSS, open file descriptors and in-memory tables (read through a probe plugin, tests/chaos/probe) are
sampled every couple of seconds. Reported: first sample after warm-up, last, and the largest; asserted: file
descriptors and tables do not grow with the number of messages (a leak grows with it; a cache is bounded).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest
import trio

from pyrmq.plugins.broker.core import RateCounter
from pyrmq.remoting import RemotingClient, RemotingCommand

from .harness import (
    FULL,
    PROBE_DIR,
    Cluster,
    fd_breakdown,
    fd_count,
    probe_bundle,
    report,
    rss_kib,
    spawn,
    stop,
    store_file_count,
)

pytestmark = pytest.mark.chaos

#: commit-log segment size. Retention deletes at most 10 segments a pass, a pass every 10 s (RocketMQ's
#: deleteFilesBatchMax and cleanResourceInterval): 4 MiB segments (40 MiB per 10 s) fell behind a producer writing
#: 4.7 MiB/s and the store grew; 8 MiB ones keep up
SEGMENT_MIB = 8 if FULL else 1
#: the broker's rate counters (put_stats, get_stats) keep a sample a second over their longest window: bounded by
#: time, not by the number of messages
RATE_SAMPLES = ("broker.put_stats.samples", "broker.get_stats.samples")
RATE_SAMPLES_BOUND = RateCounter.WINDOWS[-1] + 2

HERE = Path(__file__).parent
PROBE = 9101


async def tables(addr: str) -> dict[str, int]:
    client = RemotingClient()
    async with trio.open_nursery() as nursery:
        await nursery.start(client.run)
        r = await client.invoke(addr, RemotingCommand.request(PROBE, {}), timeout=10)
        nursery.cancel_scope.cancel()
    return json.loads(r.body_bytes())


def test_soak_with_retention_keeps_memory_fds_and_tables_flat(tmp_path):
    count = int(os.environ.get("CHAOS_SOAK_COUNT", 2_000_000 if FULL else 20_000))
    hours = ";".join(f"{h:02d}" for h in range(24))
    cluster = Cluster(tmp_path, {"fileReservedTime": "0", "deleteWhen": hours,
                                 "mappedFileSizeCommitLog": str(SEGMENT_MIB * 1024 * 1024),
                                 "maxTransferCountOnMessageInMemory": "256"},
                      bundle=str(probe_bundle(tmp_path / "broker-probe.toml", "chaos_probe")),
                      broker_env={"PYTHONPATH": str(PROBE_DIR)})
    progress = tmp_path / "progress.jsonl"
    clients = None
    samples = []
    try:
        cluster.start_namesrv()
        cluster.start_broker()
        t0 = time.monotonic()
        clients = spawn([sys.executable, str(HERE / "soak_clients.py"), cluster.namesrv_addr, "Soak", str(count),
                         str(progress)], tmp_path / "clients.log")
        deadline_s = float(os.environ.get("CHAOS_SOAK_DEADLINE_S", 3 * 3600))
        while clients.poll() is None:
            assert time.monotonic() < t0 + deadline_s, f"the soak did not finish within {deadline_s:.0f} s: {samples[-1:]}"
            assert cluster.broker.poll() is None, "the broker died"
            pid = cluster.broker.pid
            last = progress.read_text().splitlines()[-1] if progress.exists() and progress.stat().st_size else "{}"
            samples.append({**json.loads(last), "t": time.monotonic() - t0, "rss": rss_kib(pid), "fds": fd_count(pid),
                            "files": store_file_count(cluster.store_dir), **fd_breakdown(pid, cluster.store_dir),
                            "tables": trio.run(tables, cluster.broker_addr)})
            s = samples[-1]
            print(f"soak {s['t']:7.0f} s: sent {s.get('sent', 0):,} consumed {s.get('consumed', 0):,} "
                  f"skipped {s.get('skipped', 0):,} ({s.get('sent', 0) / max(s['t'], 1):,.0f} msgs/s) "
                  f"rss {s['rss'] / 1024:.0f} MiB fds {s['fds']} (not store {s['other']}, deleted {s['deleted']}) "
                  f"store files {s['files']}", file=sys.stderr, flush=True)
            time.sleep(2 if not FULL else 10)
        assert clients.returncode == 0, (tmp_path / "clients.log").read_text()[-3000:]
        took = time.monotonic() - t0
        t_end = time.monotonic() + 60  # retention runs every 10 s: a short run can end before its first pass
        while "retention: deleted" not in cluster.broker_log.read_text(errors="replace"):
            assert time.monotonic() < t_end, "retention deleted no segment within 60 s of the end"
            time.sleep(0.5)
        time.sleep(2)  # the end state: the load is over, pending work drained
        pid = cluster.broker.pid
        samples.append({"t": time.monotonic() - t0, "rss": rss_kib(pid), "fds": fd_count(pid),
                        "files": store_file_count(cluster.store_dir), **fd_breakdown(pid, cluster.store_dir),
                        "tables": trio.run(tables, cluster.broker_addr)})
        segments = len(list((cluster.store_dir / "commitlog").iterdir()))
        log = cluster.broker_log.read_text(errors="replace")
    finally:
        stop(clients, signal.SIGKILL)
        cluster.close()
    final = json.loads(progress.read_text().splitlines()[-1])
    deleted = log.count("retention: deleted")
    # warm-up: the first quarter of the run fills the caches and maps the first files
    warm = samples[len(samples) // 4] if len(samples) >= 4 else samples[0]
    end = samples[-1]
    # the figures first, so that a failed check still reports them
    report(f"soak ({count:,} messages, retention on, {SEGMENT_MIB} MiB segments)", seconds=f"{took:.0f}",
           msgs_per_s=f"{count / took:,.0f}", consumed=final["consumed"], skipped_by_retention=final["skipped"],
           producer_paced_s=f"{final['paced_s']:.0f}",
           retention_runs_deleting=deleted, segments_left=segments,
           rss_mib=f"warm {warm['rss'] / 1024:.0f}, peak {max(s['rss'] for s in samples) / 1024:.0f}, "
                   f"end {end['rss'] / 1024:.0f}",
           fds=f"warm {warm['fds']}, peak {max(s['fds'] for s in samples)}, end {end['fds']}",
           fds_not_store=f"warm {warm['other']}, peak {max(s['other'] for s in samples)}, end {end['other']}",
           fds_on_deleted_files=f"peak {max(s['deleted'] for s in samples)}, end {end['deleted']}",
           store_files=f"warm {warm['files']}, peak {max(s['files'] for s in samples)}, end {end['files']}",
           gc_objects=f"warm {warm['tables'].get('gc.objects')}, end {end['tables'].get('gc.objects')}",
           largest_table=max(((v, k) for k, v in end["tables"].items() if k != "gc.objects"), default=(0, "-")))
    assert final["done"] and final["sent"] == count
    assert final["consumed"] + final["skipped"] == count
    assert deleted > 0, "retention never deleted a segment"
    # a leak grows with the messages and stays; a buffer (pending work) fills and drains: compare warm with the end.
    # A table bounded by time (a rate counter's sample a second over its longest window) fills up to its bound
    grown = {name: (warm["tables"].get(name, 0), value) for name, value in end["tables"].items()
             if name != "gc.objects" and value > 2 * warm["tables"].get(name, 0) + 64
             and not (name in RATE_SAMPLES and value <= RATE_SAMPLES_BOUND)}
    assert not grown, f"tables that grew with the number of messages (warm, end): {grown}"
    # each live store file holds descriptors; retention bounds their number, not this test. A leak shows as
    # descriptors on deleted files, or as growth of the others (sockets, logs, config files)
    assert end["deleted"] == 0, f"{end['deleted']} deleted files still held open at the end"
    assert end["other"] <= warm["other"] + 16, f"other descriptors grew from {warm['other']} to {end['other']}"
