"""Disk full: the broker's store on a small tmpfs (the suite runs as root and mounts it), then the file system filled
to the last byte by another writer while producers keep sending.

Writes are refused with a clear code and remark (no crash: a store writing through mmap into sparse files would take a
SIGBUS on a full file system), reads keep working, nothing already written is damaged, and writes resume once the
space comes back.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
import trio

from pyrmq.client import BrokerError, ClientError, Message, MessageQueue, Producer, PullConsumer, PullStatus

from .harness import Cluster, check_consistency, read_store, report

pytestmark = pytest.mark.chaos

TOPIC = "Full"


@pytest.fixture
def small_fs(tmp_path):
    """A 48 MiB tmpfs mounted under tmp_path, unmounted at teardown."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(mnt)], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0, f"mounting a tmpfs needs root (or CAP_SYS_ADMIN): {r.stderr.strip()}"
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=30)


def fill(path: Path) -> int:
    """Write to ``path`` until the file system says ENOSPC; returns the bytes written."""
    n = 0
    chunk = b"\xa5" * (64 * 1024)
    with open(path, "wb", buffering=0) as f:
        while True:
            try:
                n += f.write(chunk)
            except OSError:
                break
        for size in (4096, 512, 1):  # the last partial chunks too
            while True:
                try:
                    n += f.write(chunk[:size])
                except OSError:
                    break
    return n


async def _scenario(cluster: Cluster, mnt: Path) -> dict:
    acked: list[str] = []
    refusals: list[str] = []
    # the first send creates the topic from TBW102's route, without a retry: the broker's registration first
    await cluster.registered()
    async with Producer(cluster.namesrv_addr, group="full_producer", retry_times=0) as producer:

        async def send(i: int) -> bool:
            m = Message(TOPIC, f"full-{i} ".encode() * 100, keys=[f"full-{i}"], properties={"cid": f"full-{i}"})
            try:
                await producer.send(m, timeout=5)
            except ClientError as exc:
                cause = exc if isinstance(exc, BrokerError) else getattr(exc, "last", exc)
                refusals.append(str(cause))
                return False
            acked.append(f"full-{i}")
            return True

        with trio.fail_after(120):
            for i in range(200):
                assert await send(i), refusals[-1:]
            ballast = mnt / "ballast"
            filled = await trio.to_thread.run_sync(fill, ballast)
            ok_while_full = 0
            i = 200
            t_full = time.monotonic()
            # keep sending into the full file system until the current segment is used up and writes are
            # refused, then a little longer
            while len(refusals) < 50:
                assert time.monotonic() - t_full < 90, "nothing refused within 90 s of the disk filling up"
                ok_while_full += await send(i)
                i += 1
                assert cluster.broker.poll() is None, "the broker died on a full disk"
            # reads keep working (the route of the topic the first send created: a registration that follows it)
            await cluster.registered(TOPIC)
            served = []
            async with PullConsumer(cluster.namesrv_addr, group="full_reader") as reader:
                for q in range(4):
                    offset = 0
                    while True:
                        r = await reader.pull(MessageQueue(TOPIC, "chaos-broker", q), offset=offset, max_nums=32)
                        if r.status is not PullStatus.FOUND:
                            break
                        served += [m.properties["cid"] for m in r.messages]
                        offset = r.next_begin_offset
            os.unlink(ballast)
            t_free = time.monotonic()
            resumed_after = None
            while resumed_after is None:
                if await send(i):
                    resumed_after = time.monotonic() - t_free
                i += 1
                await trio.sleep(0.2)
    return dict(acked=acked, refusals=refusals, ok_while_full=ok_while_full, served=served,
                resumed_after=resumed_after, filled=filled)


def test_full_disk_refuses_writes_clearly_keeps_reads_and_resumes(tmp_path, small_fs):
    # preallocateStoreFiles: a file system filled behind the broker's disk-ratio check refuses writes with ENOSPC
    # instead of a SIGBUS on a sparse page (off by default, as RocketMQ; docs/decisions.md)
    cluster = Cluster(tmp_path, {"flushDiskType": "SYNC_FLUSH", "mappedFileSizeCommitLog": str(1024 * 1024),
                                 "maxHashSlotNum": "5000", "maxIndexNum": "20000", "preallocateStoreFiles": "true"})
    cluster.store_path = store = small_fs / "store"
    try:
        cluster.start_namesrv()
        cluster.start_broker()
        figures = trio.run(_scenario, cluster, small_fs)
    finally:
        cluster.close()
    assert cluster.broker.returncode in (0, -15), f"the broker exited with {cluster.broker.returncode}"
    refusals = figures["refusals"]
    assert refusals, "nothing was refused on a full file system"
    assert all("disk" in r.lower() or "space" in r.lower() for r in refusals), refusals[:3]
    assert set(figures["acked"][:200]) <= set(figures["served"])
    img = read_store(store)
    structure = check_consistency(img)
    assert not any(structure.values()), (structure, img.problems[:5])
    stored = {r.properties.get("cid") for r in img.records if r.topic == TOPIC}
    assert set(figures["acked"]) <= stored
    report("disk full (48 MiB tmpfs filled by another writer)", acked_before=200,
           accepted_while_full=figures["ok_while_full"], refused=len(refusals), first_refusal=refusals[0][:90],
           reads_served=len(figures["served"]), writes_resumed_after_s=f"{figures['resumed_after']:.1f}",
           damaged_records=len(img.bad_crc))
