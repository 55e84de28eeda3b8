"""Hostile input: the decoders fuzzed with atheris (coverage guided), and mutated frames thrown over TCP at a live
name server and broker while a real client keeps sending, which must see no failure."""

from __future__ import annotations

import json
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

from pyrmq.remoting.codes import RequestCode

from .harness import FULL, Cluster, check_consistency, read_acks, read_store, report, spawn, stop

pytestmark = pytest.mark.chaos

HERE = Path(__file__).parent
CAPTURES = HERE.parent / "data" / "captures"
TARGETS = ["frame", "header", "batch", "properties", "fastjson"]


@pytest.mark.parametrize("target", TARGETS)
def test_fuzzed_decoder_raises_only_our_own_errors(target, tmp_path):
    runs = 1_000_000 if FULL else 3_000
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for f in CAPTURES.glob("*.bin"):
        shutil.copy(f, corpus / f.name)
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, str(HERE / "fuzz_targets.py"), target, f"-runs={runs}", "-max_len=8192",
                        f"-artifact_prefix={tmp_path}/", "-print_final_stats=1", str(corpus)],
                       capture_output=True, text=True, timeout=1800)
    took = time.monotonic() - t0
    out = r.stdout + r.stderr
    assert r.returncode == 0, f"atheris found an input that raises outside our error types:\n{out[-4000:]}"
    done = re.search(r"Done (\d+) runs", out)
    assert done and int(done.group(1)) >= runs, out[-2000:]
    cov = re.search(r"stat::number_of_executed_units:\s*(\d+)", out)
    report(f"fuzz (atheris): {target}", inputs=int(done.group(1)), crashes=0, seconds=f"{took:.0f}",
           executed_units=cov.group(1) if cov else "-")


# ---------------------------------------------------------------------------------------------------------------
# Mutated frames over TCP
# ---------------------------------------------------------------------------------------------------------------

#: valid commands that legitimately change what a client sees (admin requests): a well-formed admin request is not
#: hostile input, RocketMQ 4.x has no authorisation by default either
ADMIN = {c.value for c in RequestCode if any(w in c.name for w in (
    "DELETE", "WIPE", "UPDATE_BROKER_CONFIG", "UPDATE_AND_CREATE", "RESET", "CLEAN", "UNREGISTER_BROKER",
    "REGISTER_BROKER", "PUT_KV", "DELETE_KV", "UPDATE_NAMESRV", "ADD_WRITE_PERM", "CLONE", "LOCK", "UNLOCK",
    "PERM", "ACL", "RESUME", "STOP", "NOTIFY_MIN_BROKER"))}


def _prefix(total: int, word: int) -> bytes:
    return struct.pack(">II", total & 0xFFFFFFFF, word & 0xFFFFFFFF)


def _load_frames() -> list[tuple[dict, bytes]]:
    out = []
    for meta in sorted(CAPTURES.glob("*.json")):
        info = json.loads(meta.read_text())
        raw = meta.with_suffix(".bin").read_bytes()
        if info.get("serialize_type") == "JSON" and "header" in info:
            out.append((info["header"], raw))
    return out


def _json_frame(header: dict, body: bytes) -> bytes:
    h = json.dumps(header).encode()
    return _prefix(4 + len(h) + len(body), len(h)) + h + body


def mutate(rng: random.Random, frames: list[tuple[dict, bytes]]) -> bytes:
    header, raw = rng.choice(frames)
    kind = rng.randrange(10)
    if kind == 0:  # bit flips anywhere
        b = bytearray(raw)
        for _ in range(rng.randrange(1, 8)):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        return bytes(b)
    if kind == 1:  # truncated
        return raw[: rng.randrange(1, len(raw))]
    if kind == 2:  # a lying length prefix
        return _prefix(rng.choice([0, 3, 4, len(raw) + 10, 0x7FFFFFFF, 0xFFFFFFFF]), len(raw)) + raw[8:]
    if kind == 3:  # two frames spliced
        other = rng.choice(frames)[1]
        return raw[: rng.randrange(len(raw))] + other[rng.randrange(len(other)):]
    if kind == 4:  # random bytes
        return rng.randbytes(rng.randrange(1, 512))
    # a well-formed frame with a hostile header: other codes, values of the wrong type, missing fields
    h = json.loads(json.dumps(header))
    ext = dict(h.get("extFields") or {})
    for k in list(ext):
        r = rng.randrange(6)
        if r == 0:
            del ext[k]
        elif r == 1:
            ext[k] = rng.choice(["", "-1", "9" * 30, "x" * 300, "\u0000\u0001\u0002", "NaN", "-2147483649"])
        elif r == 2:
            ext[k] = rng.choice([None, [], {}, 1.5, True, -(2**63)])
    h["extFields"] = ext
    if kind == 6:
        h["code"] = rng.choice([c for c in range(0, 400) if c not in ADMIN])
    if kind == 7:
        h["flag"] = rng.choice([1, 2, 3, -1])  # a "response" nobody asked for, oneway flags
    if kind == 8:
        h["opaque"] = rng.choice([-1, 0, 2**31 - 1])
    if h.get("code") in ADMIN:
        h["code"] = 105
    body = raw[8 + (struct.unpack(">I", raw[4:8])[0] & 0xFFFFFF):]
    if kind == 9:
        body = rng.randbytes(rng.randrange(0, 2048))
    return _json_frame(h, body)


async def throw(addrs: list[str], count: int, seed: int) -> dict[str, int]:
    frames = _load_frames()
    sent = {"frames": 0, "connections": 0, "closed_by_server": 0}

    async def one(worker: int, n: int) -> None:
        r = random.Random(seed * 1000 + worker)
        while n > 0:
            host, port = r.choice(addrs).split(":")
            try:
                stream = await trio.open_tcp_stream(host, int(port))
            except OSError:
                await trio.sleep(0.05)
                continue
            sent["connections"] += 1
            try:
                for _ in range(r.randrange(1, 40)):
                    if n <= 0:
                        break
                    await stream.send_all(mutate(r, frames))
                    sent["frames"] += 1
                    n -= 1
                with trio.move_on_after(0.05):
                    while await stream.receive_some(65536):
                        pass
                    sent["closed_by_server"] += 1
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                sent["closed_by_server"] += 1
            finally:
                with trio.move_on_after(1) as cs:
                    cs.shield = True
                    await stream.aclose()

    workers = 8
    with trio.fail_after(1800):
        async with trio.open_nursery() as nursery:
            for w in range(workers):
                nursery.start_soon(one, w, count // workers + (1 if w < count % workers else 0))
    return sent


def test_mutated_frames_over_tcp_disturb_no_real_client(tmp_path):
    count = 1_000_000 if FULL else 3_000
    cluster = Cluster(tmp_path, {"flushDiskType": "SYNC_FLUSH"})
    producer = None
    try:
        cluster.start_namesrv()
        cluster.start_broker()
        acks_log = tmp_path / "producer.acks"
        producer = spawn([sys.executable, str(HERE / "producer_proc.py"), cluster.namesrv_addr, "Hostile", "h0",
                          str(acks_log), "4"], tmp_path / "producer.log")
        deadline = time.monotonic() + 60
        while not read_acks([acks_log])[0]:
            assert time.monotonic() < deadline, "the producer acknowledged nothing within 60 s"
            assert producer.poll() is None
            time.sleep(0.2)
        t0 = time.monotonic()
        sent = trio.run(throw, [cluster.namesrv_addr, cluster.broker_addr], count, 20)
        took = time.monotonic() - t0
        time.sleep(1)
        assert cluster.broker.poll() is None, "the broker died"
        assert cluster.namesrv.poll() is None, "the name server died"
        producer.send_signal(signal.SIGKILL)
        producer.wait(10)
        acks, failed = read_acks([acks_log])
    finally:
        stop(producer, signal.SIGKILL)
        cluster.close()
    retried = sum(1 for a in acks.values() if a.attempts > 1)
    assert retried == 0 and failed == 0, f"the real client saw {retried} failed sends"
    img = read_store(cluster.store_dir)
    structure = check_consistency(img)
    assert not any(structure.values()), (structure, img.problems[:5])
    stored = {r.properties.get("cid") for r in img.records}
    assert set(acks) <= stored
    report("hostile frames over TCP (name server + broker)", frames=sent["frames"], connections=sent["connections"],
           seconds=f"{took:.0f}", real_client_sends_ok=len(acks), real_client_failures=retried)
