"""Torn and corrupted files: a store written by a real broker, then one file damaged (the commit log's tail, a
consume queue, an index file, the checkpoint, a config JSON), then a new broker started on it.

The broker starts, moves bad commit-log bytes aside and names the file and offset in its log, and serves every
intact message (by queue and by key); a corrupt config file falls back to its ``.bak`` as RocketMQ's
``ConfigManager.load`` does, and says so.
"""

from __future__ import annotations

import os
import random
import shutil
import time
from pathlib import Path

import pytest
import trio

from pyrmq.client import Admin, Message, MessageQueue, Producer, PullConsumer, PullStatus
from pyrmq.store.config_files import fastjson_loads
from pyrmq.store.format import CQ_UNIT

from .harness import FULL, Cluster, read_store, report

pytestmark = pytest.mark.chaos

TOPIC = "Torn"
QUEUES = 4
GROUP = "torn_group"
N = 120
SETTINGS = {"flushDiskType": "SYNC_FLUSH", "messageDelayLevel": "1s 2s", "flushDelayOffsetInterval": "200",
            "flushConsumerOffsetInterval": "200", "mappedFileSizeCommitLog": str(256 * 1024)}


async def _fill(cluster: Cluster) -> None:
    async with Admin(cluster.namesrv_addr) as admin:
        await admin.create_topic(TOPIC, QUEUES, broker_addr=cluster.broker_addr)
    await cluster.registered(TOPIC)
    async with Producer(cluster.namesrv_addr, group="torn_producer") as producer:
        with trio.fail_after(60):
            for i in range(N):
                m = Message(TOPIC, f"torn-{i} ".encode() * 40, keys=[f"torn-{i}"], properties={"cid": f"torn-{i}"})
                if i in (10, 11):
                    m.delay_time_level = 1
                if i == N - 5:  # the delayed ones delivered first: the commit log ends with plain messages
                    await trio.sleep(3)
                await producer.send(m)
    async with PullConsumer(cluster.namesrv_addr, group=GROUP) as consumer:
        for step in (5, 10):  # two saves: consumerOffset.json.bak holds the first
            for q in range(QUEUES):
                await consumer.commit_offset(MessageQueue(TOPIC, "chaos-broker", q), step + q)
            await trio.sleep(0.6)
    await trio.sleep(3)  # the two delayed messages are delivered and delayOffset.json is saved


@pytest.fixture(scope="module")
def base_store(tmp_path_factory) -> Path:
    """A store a real broker wrote and stopped cleanly (then started and stopped once more, so every config file
    has a ``.bak``)."""
    root = tmp_path_factory.mktemp("torn-base")
    cluster = Cluster(root, dict(SETTINGS))
    try:
        cluster.start_namesrv()
        cluster.start_broker()
        trio.run(_fill, cluster)
        cluster.close()
        cluster.start_namesrv()
        cluster.start_broker()
        time.sleep(1)
    finally:
        cluster.close()
    return cluster.store_dir


async def _serve(cluster: Cluster, sample_keys: list[str]) -> tuple[list[str], dict[int, int], dict[str, int]]:
    """Everything the restarted broker serves: the cids of the topic by pulling every queue, the committed
    offsets, and how many messages each sampled key query finds."""
    cids: list[str] = []
    await cluster.registered(TOPIC)
    async with PullConsumer(cluster.namesrv_addr, group="torn_reader") as reader:
        for q in range(QUEUES):
            mq = MessageQueue(TOPIC, "chaos-broker", q)
            offset = 0
            with trio.fail_after(60):
                while True:
                    r = await reader.pull(mq, offset=offset, max_nums=32)
                    if r.status is not PullStatus.FOUND:
                        break
                    cids += [m.properties["cid"] for m in r.messages]
                    offset = r.next_begin_offset
    offsets = {}
    async with PullConsumer(cluster.namesrv_addr, group=GROUP) as consumer:
        for q in range(QUEUES):
            offsets[q] = await consumer.committed_offset(MessageQueue(TOPIC, "chaos-broker", q))
    found = {}
    async with Admin(cluster.namesrv_addr) as admin:
        for key in sample_keys:
            found[key] = len(await admin.query_message_by_key(TOPIC, key))
    return cids, offsets, found


def _last_file(d: Path) -> Path:
    return sorted(p for p in d.iterdir() if p.name.isdigit())[-1]


def _last_record(store: Path):
    return max(read_store(store).records, key=lambda r: r.phy)


def corrupt(case: str, store: Path, rng: random.Random) -> tuple[set[str], str | None]:
    """Damage ``store``; returns the cids no longer expected (their bytes are what was damaged) and the text the
    broker's log must contain (where it put the bad bytes, or which file it fell back from), if any."""
    if case.startswith("commitlog"):
        (store / "abort").touch()  # a torn write means the broker died
        last = _last_record(store)
        seg = _last_file(store / "commitlog")
        pos = last.phy - int(seg.name)
        with open(seg, "r+b") as f:
            if case == "commitlog-torn-tail":  # the record's second half never reached the disk
                f.seek(pos + last.size // 2)
                f.write(b"\0" * (last.size - last.size // 2))
            elif case == "commitlog-bitflip-tail":  # one bit of the last record's body flipped (the body CRC
                # covers the body only, as in RocketMQ: a flipped property byte cannot be detected)
                body = last.body_pos + last.body_len // 2 - int(seg.name)
                f.seek(body)
                b = f.read(1)
                f.seek(body)
                f.write(bytes([b[0] ^ 0x10]))
            else:  # commitlog-garbage-after-tail: random bytes after the last record
                f.seek(pos + last.size)
                f.write(rng.randbytes(300))
        lost = {last.properties["cid"]} if case != "commitlog-garbage-after-tail" else set()
        return lost, "commit log recovery: moved"
    if case.startswith("cq"):
        (store / "abort").touch()
        qfile = _last_file(store / "consumequeue" / TOPIC / "0")
        units = [CQ_UNIT.unpack_from(qfile.read_bytes(), i * 20) for i in range(8)]
        n = sum(1 for u in units if u[1] > 0)
        with open(qfile, "r+b") as f:
            if case == "cq-garbage-units":  # the last units of queue 0 overwritten with random bytes
                f.seek(max(0, n - 3) * CQ_UNIT.size)
                f.write(rng.randbytes(3 * CQ_UNIT.size))
            else:  # cq-torn-unit: the last unit half written
                f.seek((n - 1) * CQ_UNIT.size + 10)
                f.write(b"\0" * 10)
        return set(), None
    if case.startswith("index"):
        idx = _last_file(store / "index")
        if case == "index-truncated":
            os.truncate(idx, os.path.getsize(idx) // 2)
        else:  # index-garbage: random bytes over the header and the first slots
            with open(idx, "r+b") as f:
                f.write(rng.randbytes(4096))
        return set(), "index" if case == "index-truncated" else None
    if case.startswith("checkpoint"):
        (store / "abort").touch()
        cp = store / "checkpoint"
        if case == "checkpoint-empty":
            cp.write_bytes(b"")
        else:
            cp.write_bytes(rng.randbytes(4096))
        return set(), None
    name = {"config-topics": "topics.json", "config-topics-not-an-object": "topics.json",
            "config-offsets": "consumerOffset.json", "config-delay": "delayOffset.json"}[case]
    path = store / "config" / name
    assert (store / "config" / (name + ".bak")).exists(), f"the base store has no {name}.bak"
    if case == "config-topics-not-an-object":
        path.write_text("[]")
    else:
        data = bytearray(path.read_bytes())
        for _ in range(8):
            data[rng.randrange(len(data))] = rng.randrange(256)
        path.write_bytes(bytes(data[: len(data) * 2 // 3]))  # torn: the last third never written
    return set(), f"{name}.bak"


CASES = ["commitlog-torn-tail", "commitlog-bitflip-tail", "commitlog-garbage-after-tail", "cq-garbage-units",
         "cq-torn-unit", "index-truncated", "index-garbage", "checkpoint-empty", "checkpoint-garbage",
         "config-topics", "config-topics-not-an-object", "config-offsets", "config-delay"]


#: inside `make test`: one commit-log and one config case (the full list runs in `make chaos`)
SHORT = ["commitlog-torn-tail", "config-topics"]


@pytest.mark.parametrize("case", CASES if FULL else SHORT)
def test_broker_starts_on_a_damaged_store_and_serves_what_is_intact(case, base_store, tmp_path):
    rng = random.Random(case)
    cluster = Cluster(tmp_path, dict(SETTINGS))
    shutil.copytree(base_store, cluster.store_dir)
    before = read_store(cluster.store_dir)
    all_cids = {r.properties["cid"] for r in before.records if r.topic == TOPIC}
    bak_offsets = fastjson_loads((cluster.store_dir / "config" / "consumerOffset.json.bak").read_text())
    lost, says = corrupt(case, cluster.store_dir, rng)
    sample = sorted(all_cids - lost, key=lambda c: int(c.split("-")[1]))[-5:]
    try:
        cluster.start_namesrv()
        took = cluster.start_broker()
        time.sleep(2.5)  # anything delayed that the damage would make the broker deliver again arrives by now
        cids, offsets, found = trio.run(_serve, cluster, sample)
    finally:
        cluster.close()
    log = cluster.broker_log.read_text(errors="replace")
    assert set(cids) == all_cids - lost, (case, sorted(all_cids - lost - set(cids))[:5], sorted(set(cids) - all_cids)[:5])
    assert len(cids) == len(set(cids)), f"{case}: served a message twice"
    assert all(found[k] == 1 for k in sample), found
    if case == "config-offsets":
        expected = {int(q): int(o) for q, o in bak_offsets["offsetTable"][f"{TOPIC}@{GROUP}"].items()}
    else:
        expected = {q: 10 + q for q in range(QUEUES)}
    assert offsets == expected
    if says:
        assert says in log, f"{case}: the broker's log does not say {says!r}:\n{log[-2000:]}"
    after = read_store(cluster.store_dir)
    assert not after.bad_crc
    report(f"torn/corrupt: {case}", start_s=f"{took:.2f}", served=len(cids), lost_to_damage=len(lost),
           said=says or "-")
