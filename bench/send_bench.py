"""Per-request cost of the broker's send processor, called in-process (no socket), warm: the one-pass single send
(SEND_MESSAGE_V2, short header names: ``SendProcessor._send_one``), the general single send (SEND_MESSAGE, long
names: header object, checks, record, ``put_message``) and SEND_BATCH_MESSAGE of 100 entries (``put_entries``).

One broker (the ``broker`` bundle: every broker plugin, its put interceptors and dispatchers, real store in a
temporary directory, ASYNC_FLUSH); the modes take turns in blocks, each block's time per message is recorded and
the mean of the fastest quarter of the blocks is printed (the least disturbed by other load on the machine), with
process CPU time per message likewise. Messages carry TAGS, KEYS and UNIQ_KEY (a Java producer's properties).
Never asserted anywhere.

    python bench/send_bench.py [--count N] [--block B]
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
import time
from typing import Any

import trio

from pyrmq.kernel.bundles import load_bundle
from pyrmq.kernel.service import build_kernel, serve_kernel
from pyrmq.plugins.broker.core import BROKER
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.store.format import BatchEntry, encode_batch_body

TOPIC = "BenchSend"
BODY = b"x" * 100
V2_CODE, V1_CODE, BATCH_CODE = int(RequestCode.SEND_MESSAGE_V2), int(RequestCode.SEND_MESSAGE), int(
    RequestCode.SEND_BATCH_MESSAGE)
MODES = ("one-pass", "general", "batch x100")


class Harness:
    """The caller side of a processor call: where the request came from (no socket)."""

    remote_address = ("127.0.0.1", 40000)

    def start_soon(self, fn: Any, *args: Any) -> None:
        raise RuntimeError("the bench runs ASYNC_FLUSH: nothing is answered later")


def props(i: int) -> str:
    return f"KEYS\x01order-{i}\x02TAGS\x01TagA\x02UNIQ_KEY\x017F0000010FA318B4AAC2{i:012X}\x02WAIT\x01true"


def single(i: int, v2: bool) -> RemotingCommand:
    ext = {"producerGroup": "pBench", "topic": TOPIC, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
           "queueId": str(i % 4), "sysFlag": "0", "bornTimestamp": "1700000000000", "flag": "0",
           "properties": props(i), "reconsumeTimes": "0", "unitMode": "false", "maxReconsumeTimes": "16"}
    if v2:
        ext = dict(zip("abcdefghijkl", ext.values()))
    return RemotingCommand.request(V2_CODE if v2 else V1_CODE, ext, BODY)


def batch(i: int) -> RemotingCommand:
    entries = [BatchEntry(0, BODY, props(i * 100 + j).replace("\x02WAIT\x01true", "").encode()) for j in range(100)]
    ext = {"a": "pBench", "b": TOPIC, "c": "TBW102", "d": "4", "e": str(i % 4), "f": "0", "g": "1700000000000",
           "h": "0", "i": "WAIT\x01true", "j": "0", "k": "false", "m": "true"}
    return RemotingCommand.request(BATCH_CODE, ext, encode_batch_body(entries))


def fast_quarter(xs: list[float]) -> float:
    xs = sorted(xs)[: max(len(xs) // 4, 1)]
    return sum(xs) / len(xs)


async def measure(count: int, block: int) -> dict[str, tuple[float, float]]:
    root = tempfile.mkdtemp(prefix="pyrmq-send-bench-")
    overrides = {"broker.storePathRootDir": root, "broker.listenPort": 0, "broker.namesrvAddr": "",
                 "broker.mappedFileSizeCommitLog": 1 << 30, "broker.maxHashSlotNum": 500_000,
                 "broker.maxIndexNum": 8_000_000}
    kernel = build_kernel(load_bundle("broker").with_overrides(overrides), entry_points=False)
    wall: dict[str, list[float]] = {m: [] for m in MODES}
    cpu: dict[str, list[float]] = {m: [] for m in MODES}
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(serve_kernel, kernel)
            ctx = kernel.state.get(BROKER)
            ctx.topics.create_in_send(TOPIC, "TBW102", 4)
            table = kernel.processors["broker"]
            conn = Harness()
            requests = {
                "one-pass": [single(i, True) for i in range(1024)],
                "general": [single(i, False) for i in range(1024)],
                "batch x100": [batch(i) for i in range(64)],
            }
            per_request = {"one-pass": 1, "general": 1, "batch x100": 100}
            for mode in MODES:  # warm up, and check every mode is answered SUCCESS
                for r in requests[mode][:64]:
                    response = await table[r.code](conn, r)
                    if response.code != ResponseCode.SUCCESS:
                        raise SystemExit(f"{mode}: {response.code} {response.remark}")
            done, turn = 0, 0
            while done < count:
                turn += 1
                for mode in MODES if turn % 2 else MODES[::-1]:
                    reqs = requests[mode]
                    n = max(block // per_request[mode], 1)
                    processor = table[reqs[0].code]
                    began, c0 = time.perf_counter(), time.process_time()
                    for k in range(n):
                        await processor(conn, reqs[k % len(reqs)])
                    messages = n * per_request[mode]
                    wall[mode].append((time.perf_counter() - began) / messages)
                    cpu[mode].append((time.process_time() - c0) / messages)
                    await trio.sleep(0)
                done += block
            kernel.request_stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {m: (fast_quarter(wall[m]), fast_quarter(cpu[m])) for m in MODES}


def main() -> None:
    logging.getLogger("pyrmq").setLevel(logging.ERROR)  # no name server: intended
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=200_000, help="messages per mode (default 200,000)")
    ap.add_argument("--block", type=int, default=2_000, help="messages per timed block (default 2,000)")
    args = ap.parse_args()
    results = trio.run(measure, args.count, args.block)
    print(f"pyrmq send processor, in-process, warm: {args.count:,} messages per mode, blocks of {args.block:,}, "
          f"mean of the fastest quarter of blocks, python {sys.version.split()[0]}")
    print("| mode | µs per message (wall) | µs per message (CPU) |")
    print("|---|---|---|")
    for mode, (w, c) in results.items():
        print(f"| {mode} | {w * 1e6:.2f} | {c * 1e6:.2f} |")


if __name__ == "__main__":
    main()
