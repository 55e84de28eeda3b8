"""The broker's own work for one request, against the raw trio floor of the same run (issue 29).

    .venv/bin/python bench/broker_work.py [--count 20000] [--repeat 3] [--before REV]

One blocking socket sends the same request bytes, one in flight, to each server in turn and reads each answer whole:

* ``floor``        - bench/peers.py's raw trio server: reads frames and answers each with the bytes pyrmq's broker
                     gave for the same request, nothing else (no decode, no store): trio + the socket, per request;
* ``pyrmq``        - `pyrmq broker` of this tree (with its name server), on a fresh store;
* ``pyrmq_before`` - the same as of ``--before REV`` (a ``git archive`` of it first on PYTHONPATH).

Requests: SEND_MESSAGE_V2 of a 1 KiB body as ``Producer`` encodes it (queue 0; every send is stored), and
PULL_MESSAGE of 32 stored 1 KiB messages from offset 0 (the answer of every pull carries the same 32 records).
Per request: the server's CPU (utime + stime of every thread, /proc/<pid>/stat), split into user and system, and
the round trips a second. The broker's "own work" is its CPU a request minus the floor's. The servers take turns
(first, second, ...) over ``--repeat`` runs; the table shows medians. Nothing here asserts.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import trio  # noqa: E402

from peers import BODY, PyrmqServer, RawEchoServer, checkout, progress  # noqa: E402

from pyrmq.client import Admin, Message, Producer  # noqa: E402
from pyrmq.client.api import pull_request  # noqa: E402
from pyrmq.client.message import MessageQueue  # noqa: E402

CLK = os.sysconf("SC_CLK_TCK")
TOPIC = "WorkTopic"
HEAD = struct.Struct(">i")


def cpu_split(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of ``pid`` (every thread)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / CLK, int(fields[12]) / CLK


class _Instance:
    """What :func:`pull_request` reads of a client instance: an unsigned remoting client."""

    class remoting:  # noqa: N801
        signer = None


def requests() -> dict[str, bytes]:
    """The bytes of each request kind, as pyrmq's client encodes it."""
    producer = Producer("127.0.0.1:9876", "work_producer")
    p = producer._prepare(Message(TOPIC, BODY))
    send = producer._request(p, MessageQueue(TOPIC, "broker-a", 0), int(time.time() * 1000))
    # a pull consumer's pull: the subscription travels in the request (sysFlag FLAG_SUBSCRIPTION), no heartbeat
    pull = pull_request(_Instance(), MessageQueue(TOPIC, "broker-a", 0), "work_consumer", 0, max_nums=32,
                        sys_flag=0x4, suspend_ms=0, subscription="*")
    out = {}
    for name, cmd in (("send", send), ("pull", pull)):
        parts: list = []
        cmd.encode_into(parts)
        out[name] = b"".join(parts)
    return out


class Client:
    """One blocking socket, one request in flight."""

    def __init__(self, addr: str) -> None:
        host, _, port = addr.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def round_trip(self, request: bytes) -> bytes:
        self.sock.sendall(request)
        buf = b""
        while len(buf) < 4 or len(buf) < HEAD.unpack_from(buf)[0] + 4:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise SystemExit("the server closed the connection")
            buf += chunk
        return buf

    def close(self) -> None:
        self.sock.close()


def timed(pid: int, client: Client, request: bytes, n: int) -> dict[str, float]:
    for _ in range(300):
        client.round_trip(request)
    u0, s0 = cpu_split(pid)
    t0 = time.perf_counter()
    for _ in range(n):
        client.round_trip(request)
    seconds = time.perf_counter() - t0
    u1, s1 = cpu_split(pid)
    return {"rate": n / seconds, "user": (u1 - u0) / n * 1e6, "sys": (s1 - s0) / n * 1e6}


def prepare(server: PyrmqServer, reqs: dict[str, bytes]) -> Client:
    async def create() -> None:
        async with Admin(server.namesrv_addr) as admin:
            await admin.create_topic(TOPIC, 4, broker_addr=server.broker_addr)

    trio.run(create)
    client = Client(server.broker_addr)
    for _ in range(64):  # the messages every pull reads
        client.round_trip(reqs["send"])
    return client


def answers(work: Path, reqs: dict[str, bytes]) -> dict[str, bytes]:
    """The broker's answer to each request kind (what the floor server sends back)."""
    server = PyrmqServer(work)
    try:
        client = prepare(server, reqs)
        out = {kind: client.round_trip(req) for kind, req in reqs.items()}
        client.close()
    finally:
        server.stop()
    for kind, answer in out.items():
        header_len = HEAD.unpack_from(answer, 4)[0] & 0xFFFFFF
        if b'"code":0' not in answer[8:8 + header_len]:
            raise SystemExit(f"the broker refused the {kind} request: {answer[8:8 + header_len]!r}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=20_000, help="round trips timed per request kind and server")
    ap.add_argument("--repeat", type=int, default=3, help="runs; the table shows medians")
    ap.add_argument("--before", metavar="REV", default=None, help="also run the broker as of this git revision")
    args = ap.parse_args()
    reqs = requests()
    results: dict[tuple[str, str], list[dict[str, float]]] = {}
    before_dir = Path(tempfile.mkdtemp(prefix="pyrmq-work-before-")) if args.before else None
    before = checkout(args.before, before_dir) if before_dir else None
    names = ("floor", "pyrmq") + (("pyrmq_before",) if before else ())
    try:
        with tempfile.TemporaryDirectory(prefix="pyrmq-work-") as tmp:
            work = Path(tmp)
            ans = answers(work, reqs)
            for run in range(args.repeat):
                k = run % len(names)
                for name in names[k:] + names[:k]:
                    for kind, req in reqs.items():
                        progress(f"run {run + 1}/{args.repeat}: {name} {kind} (load average {os.getloadavg()[0]:.1f})")
                        if name == "floor":
                            server = RawEchoServer(work, "trio", ans[kind])
                            client = Client(f"127.0.0.1:{server.port}")
                        else:
                            server = PyrmqServer(work, before if name == "pyrmq_before" else None)
                            client = prepare(server, reqs)
                        try:
                            row = timed(server.pid, client, req, args.count)
                        finally:
                            client.close()
                            server.stop()
                        progress(f"  {row['rate']:,.0f} round trips/s, server user {row['user']:.1f} us, "
                                 f"sys {row['sys']:.1f} us a request")
                        results.setdefault((name, kind), []).append(row)
    finally:
        if before_dir is not None:
            shutil.rmtree(before_dir, ignore_errors=True)

    def med(name: str, kind: str, key: str) -> float:
        return statistics.median(r[key] for r in results[(name, kind)])

    print()
    print(f"One request in flight, {args.count:,} round trips a run, medians of {args.repeat}; CPU is the server's, "
          f"a request (us); own work = CPU - the floor's CPU")
    print()
    head = "| request | server | round trips/s | user us | sys us | CPU us | own work us |"
    print(head)
    print("|---|---|---:|---:|---:|---:|---:|")
    for kind in reqs:
        floor = med("floor", kind, "user") + med("floor", kind, "sys")
        for name in names:
            cpu = med(name, kind, "user") + med(name, kind, "sys")
            own = "-" if name == "floor" else f"{cpu - floor:.1f}"
            print(f"| {kind} | {name} | {med(name, kind, 'rate'):,.0f} | {med(name, kind, 'user'):.1f} | "
                  f"{med(name, kind, 'sys'):.1f} | {cpu:.1f} | {own} |")
    if before:
        print()
        for kind in reqs:
            floor = med("floor", kind, "user") + med("floor", kind, "sys")
            after = med("pyrmq", kind, "user") + med("pyrmq", kind, "sys") - floor
            was = med("pyrmq_before", kind, "user") + med("pyrmq_before", kind, "sys") - floor
            ratio = f"{after / was:.2f}x" if was > 0 else "-"
            print(f"{kind}: own work {was:.1f} us before ({args.before}) -> {after:.1f} us after: {ratio}")


if __name__ == "__main__":
    main()
