"""POP consumption on a `pyrmq dev` subprocess: receive + ack rate and broker CPU a message, beside pull consumption of
the same messages on the same broker (same run), then how late an unacked message comes back after its invisible time.

1. ``--messages`` messages of ``--size`` bytes on a topic of ``--queues`` queues (sent in batches of 100).
2. Pull: one task per queue, PULL_MESSAGE of 32 from the committed offset (commit travels with the next pull), until
   every message is read: msgs/s and broker CPU ms per 1,000 messages (/proc/<pid>/stat utime + stime).
3. POP: ``--poppers`` concurrent consumers of one group, each POP_MESSAGE of 32 (queueId -1, invisible 60 s) then
   one BATCH_ACK_MESSAGE of the answer, until every message is acked; the same figures.
4. Redelivery: ``--revive`` messages popped with a 1 s invisible time and not acked; consumers long-polling the
   topic get them back; each return's delay = the new pop's popTime - (old popTime + 1000) (the broker's own clock:
   how late the revive is, plus the long-polling wake-up). p50 / p99 / max.

Figures are printed, never asserted.

    python bench/pop_bench.py [--messages 100000] [--size 100] [--queues 4] [--poppers 4] [--revive 2000]
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

import trio

from pyrmq.remoting.client import RemotingClient
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.message import BatchEntry, decode_messages, encode_batch_body, encode_properties
from pyrmq.remoting.pop import (
    BatchAck,
    PopMessageRequestHeader,
    encode_batch_ack_body,
    parse_msg_offset_info,
    parse_start_offset_info,
)

TOPIC = "PopBench"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def invoke(client: RemotingClient, addr: str, code: int, ext: dict, body: bytes = b"") -> RemotingCommand:
    return await client.invoke(addr, RemotingCommand.request(code, {k: str(v) for k, v in ext.items()}, body=body),
                               timeout=60)


async def fill(client, addr: str, topic: str, messages: int, size: int, queues: int) -> None:
    body = b"x" * size
    sent = 0
    batch_no = 0
    while sent < messages:
        n = min(100, messages - sent)
        entries = [BatchEntry(0, body, encode_properties({"UNIQ_KEY": uuid.uuid4().hex.upper(), "KEYS": f"m{sent + i}"}).encode())
                   for i in range(n)]
        response = await invoke(client, addr, RequestCode.SEND_BATCH_MESSAGE, {
            "producerGroup": "bench_pg", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": queues,
            "queueId": batch_no % queues, "sysFlag": 0, "bornTimestamp": int(time.time() * 1000), "flag": 0,
            "properties": "", "batch": "true"}, encode_batch_body(entries))
        assert response.code == ResponseCode.SUCCESS, response.remark
        sent += n
        batch_no += 1


async def pull_all(client, addr: str, topic: str, queues: int, group: str) -> int:
    total = 0

    async def one(queue_id: int) -> None:
        nonlocal total
        offset = 0
        while True:
            response = await invoke(client, addr, RequestCode.PULL_MESSAGE, {
                "consumerGroup": group, "topic": topic, "queueId": queue_id, "queueOffset": offset, "maxMsgNums": 32,
                "sysFlag": 5, "commitOffset": offset, "suspendTimeoutMillis": 0, "subscription": "*", "subVersion": 0})
            if response.code != ResponseCode.SUCCESS:
                return
            total += len(decode_messages(response.body_bytes()))
            offset = int(response.ext_fields["nextBeginOffset"])

    async with trio.open_nursery() as nursery:
        for q in range(queues):
            nursery.start_soon(one, q)
    return total


def pop_header(group: str, topic: str, n: int, invisible: int, poll: int) -> dict[str, str]:
    return PopMessageRequestHeader(group, topic, -1, n, invisible, poll, int(time.time() * 1000), 0).to_ext_fields()


def acks_of(response: RemotingCommand, group: str, topic: str) -> list[BatchAck]:
    ext = response.ext_fields
    starts = parse_start_offset_info(ext.get("startOffsetInfo"))
    out = []
    for key, offsets in parse_msg_offset_info(ext.get("msgOffsetInfo")).items():
        flag, queue_id = key.split("@")
        out.append(BatchAck(group, topic, flag, starts[key], int(queue_id), int(ext["reviveQid"]), int(ext["popTime"]),
                            int(ext["invisibleTime"]), tuple(offsets)))
    return out


async def pop_all(client, addr: str, topic: str, group: str, poppers: int, messages: int) -> int:
    acked = 0

    async def popper() -> None:
        nonlocal acked
        while acked < messages:
            response = await invoke(client, addr, RequestCode.POP_MESSAGE, pop_header(group, topic, 32, 60_000, 1000))
            if response.code != ResponseCode.SUCCESS:
                continue
            acks = acks_of(response, group, topic)
            answer = await invoke(client, addr, RequestCode.BATCH_ACK_MESSAGE, {},
                                  encode_batch_ack_body(acks, "broker-a"))
            assert answer.code == ResponseCode.SUCCESS, answer.remark
            acked += sum(len(a.offsets) for a in acks)

    async with trio.open_nursery() as nursery:
        for _ in range(poppers):
            nursery.start_soon(popper)
    return acked


async def redelivery(client, addr: str, count: int, queues: int) -> list[int]:
    topic, group = TOPIC + "Revive", "bench_revive"
    await invoke(client, addr, RequestCode.UPDATE_AND_CREATE_TOPIC, {
        "topic": topic, "defaultTopic": "TBW102", "readQueueNums": queues, "writeQueueNums": queues, "perm": 6,
        "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": "false"})
    await fill(client, addr, topic, count, 100, queues)
    first_pop: dict[str, int] = {}
    while len(first_pop) < count:
        response = await invoke(client, addr, RequestCode.POP_MESSAGE, pop_header(group, topic, 32, 1000, 0))
        if response.code == ResponseCode.SUCCESS:
            for m in decode_messages(response.body_bytes()):
                first_pop[m.properties["KEYS"]] = int(response.ext_fields["popTime"])
    delays: list[int] = []

    async def popper() -> None:
        while len(delays) < count:
            response = await invoke(client, addr, RequestCode.POP_MESSAGE, pop_header(group, topic, 32, 60_000, 5000))
            if response.code != ResponseCode.SUCCESS:
                continue
            back = int(response.ext_fields["popTime"])
            for m in decode_messages(response.body_bytes()):
                delays.append(back - (first_pop[m.properties["KEYS"]] + 1000))

    async with trio.open_nursery() as nursery:
        for _ in range(4):
            nursery.start_soon(popper)
    return delays


async def main(args: argparse.Namespace) -> None:
    root = tempfile.mkdtemp(prefix="pop-bench-")
    namesrv_port, port = free_port(), free_port()
    cmd = [sys.executable, "-m", "pyrmq", "--no-entry-points", "--log-level", "WARNING", "dev", "--dashboard-port", "0",
           "--store-dir", root, "--namesrv-port", str(namesrv_port), "--port", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    addr = f"127.0.0.1:{port}"
    client = RemotingClient()
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(client.run)
            with trio.fail_after(60):
                while True:
                    try:
                        r = await invoke(client, addr, RequestCode.GET_MAX_OFFSET, {"topic": "TBW102", "queueId": 0})
                        if r.code == ResponseCode.SUCCESS:
                            break
                    except Exception:  # noqa: BLE001 - not up yet
                        await trio.sleep(0.2)
            await invoke(client, addr, RequestCode.UPDATE_AND_CREATE_TOPIC, {
                "topic": TOPIC, "defaultTopic": "TBW102", "readQueueNums": args.queues, "writeQueueNums": args.queues,
                "perm": 6, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": "false"})
            await fill(client, addr, TOPIC, args.messages, args.size, args.queues)
            print(f"pyrmq POP bench: {args.messages:,} messages of {args.size} B on {args.queues} queues, broker "
                  f"`pyrmq dev` subprocess, python {sys.version.split()[0]}")
            print("| consumption | msgs/s | broker CPU ms / 1,000 msgs |")
            print("|---|---|---|")
            for label, run in (
                (f"pull, {args.queues} tasks (one a queue), 32 a request", lambda: pull_all(client, addr, TOPIC, args.queues, "bench_pull")),
                (f"POP + batch ack, {args.poppers} consumers, 32 a pop", lambda: pop_all(client, addr, TOPIC, "bench_pop", args.poppers, args.messages)),
            ):
                cpu0, t0 = cpu_seconds(proc.pid), time.perf_counter()
                n = await run()
                elapsed, cpu = time.perf_counter() - t0, cpu_seconds(proc.pid) - cpu0
                print(f"| {label} | {n / elapsed:,.0f} | {cpu * 1e6 / n:.1f} |")
            delays = sorted(await redelivery(client, addr, args.revive, args.queues))
            q = statistics.quantiles(delays, n=100)
            print(f"\nredelivery of {len(delays):,} unacked messages (1 s invisible), ms after the invisible time ended "
                  f"(the new pop's popTime): p50 {q[49]:.0f}, p99 {q[98]:.0f}, max {delays[-1]}, min {delays[0]} "
                  "(5.5.0 measured: ~3,000)")
            nursery.cancel_scope.cancel()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--queues", type=int, default=4)
    ap.add_argument("--poppers", type=int, default=4)
    ap.add_argument("--revive", type=int, default=2000)
    trio.run(main, ap.parse_args())
