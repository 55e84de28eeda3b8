"""Remoting benchmark: pyrmq.remoting against a raw trio socket echo with the same framing, in the same run.

    .venv/bin/python bench/remoting_bench.py [--seconds 2] [--repeat 3] [--body 1024] [--no-pinned]

Server and client run in separate processes (the server is a subprocess, so they never share an event loop).
Measured, 1 KiB request bodies, one TCP connection on 127.0.0.1:

* sequential: one request in flight, round trips per second; unpinned and with both processes on one vCPU
  (``taskset -c 0``), because this VM wakes an idle vCPU slowly (docs/performance.md, The machine);
* pipelined: 64 requests in flight, requests per second: 64 tasks each awaiting ``invoke`` (the plain API), and
  one task keeping a window of 64 with ``Connection.invoke_callback`` (Java's invokeAsync style).

Baseline ("raw"): a trio server that splits frames by their length prefix and echoes each frame back, one send per
received chunk; a trio client that sends the same precomputed frame and waits for a whole frame back (sequential)
or keeps 64 frames in flight. pyrmq's server decodes the JSON header, calls the processor, encodes a response
header with three extFields and echoes the body. Figures are printed, never asserted; medians of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import time

import outcome
import trio

CODE = 10
PIPELINE = 64


# ---- servers (subprocess) ------------------------------------------------------------------------------------------

async def raw_server(port_out) -> None:
    listener = trio.socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    await listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    print(listener.getsockname()[1], file=port_out, flush=True)

    async def handle(sock):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = b""
        with sock:
            while True:
                data = await sock.recv(262144)
                if not data:
                    return
                buf += data
                pos, n = 0, len(buf)
                while n - pos >= 4:
                    (total,) = struct.unpack_from(">I", buf, pos)
                    if n - pos < 4 + total:
                        break
                    pos += 4 + total
                if pos:
                    out, buf = buf[:pos], buf[pos:]
                    await sock.send(out)  # loopback: whole chunk accepted at once

    async with trio.open_nursery() as nursery:
        while True:
            sock, _ = await listener.accept()
            nursery.start_soon(handle, sock)


async def pyrmq_server(port_out) -> None:
    from pyrmq.remoting import RemotingServer

    async def send_like(conn, req):
        return req.make_response(0, ext_fields={"msgId": "7F00000100002A9F0000000000000000", "queueId": "1",
                                                "queueOffset": "12345"}, body=req.body)

    server = RemotingServer({CODE: send_like})
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.run)
        print(port, file=port_out, flush=True)


# ---- clients (subprocess) -------------------------------------------------------------------------------------------

def request_frame(body_size: int) -> bytes:
    from pyrmq.remoting import RemotingCommand

    return RemotingCommand.request(CODE, {"a": "PID-bench", "b": "TopicBench", "e": "1"}, b"x" * body_size).encode()


async def raw_connect(port: int):
    sock = trio.socket.socket()
    await sock.connect(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


async def raw_seq(port: int, seconds: float, body: int) -> float:
    frame = request_frame(body)
    sock = await raw_connect(port)
    n = 0
    start = time.perf_counter()
    end = start + seconds
    while True:
        await sock.send(frame)
        buf = b""
        while True:
            buf += await sock.recv(262144)
            if len(buf) >= 4 and len(buf) >= 4 + struct.unpack_from(">I", buf)[0]:
                break
        n += 1
        if n % 64 == 0 and time.perf_counter() > end:
            break
    elapsed = time.perf_counter() - start
    sock.close()
    return n / elapsed


async def raw_pipelined(port: int, seconds: float, body: int) -> float:
    frame = request_frame(body)
    sock = await raw_connect(port)
    await sock.send(frame * PIPELINE)
    n = 0
    buf = b""
    start = time.perf_counter()
    end = start + seconds
    while time.perf_counter() < end:
        buf += await sock.recv(262144)
        pos, size, k = 0, len(buf), 0
        while size - pos >= 4:
            (total,) = struct.unpack_from(">I", buf, pos)
            if size - pos < 4 + total:
                break
            pos += 4 + total
            k += 1
        buf = buf[pos:]
        n += k
        if k:
            await sock.send(frame * k)
    elapsed = time.perf_counter() - start
    sock.close()
    return n / elapsed


async def pyrmq_seq(port: int, seconds: float, body: int) -> float:
    from pyrmq.remoting import RemotingClient, RemotingCommand

    payload = b"x" * body
    addr = f"127.0.0.1:{port}"
    async with RemotingClient() as client:
        await client.invoke(addr, RemotingCommand.request(CODE, body=payload))
        n = 0
        start = time.perf_counter()
        end = start + seconds
        while True:
            resp = await client.invoke(addr, RemotingCommand.request(
                CODE, {"a": "PID-bench", "b": "TopicBench", "e": "1"}, payload))
            assert resp.code == 0
            n += 1
            if n % 64 == 0 and time.perf_counter() > end:
                break
        return n / (time.perf_counter() - start)


async def pyrmq_pipelined_tasks(port: int, seconds: float, body: int) -> float:
    from pyrmq.remoting import RemotingClient, RemotingCommand

    payload = b"x" * body
    addr = f"127.0.0.1:{port}"
    count = 0
    async with RemotingClient() as client:
        await client.invoke(addr, RemotingCommand.request(CODE, body=payload))
        end = time.perf_counter() + seconds

        async def worker():
            nonlocal count
            while time.perf_counter() < end:
                await client.invoke(addr, RemotingCommand.request(
                    CODE, {"a": "PID-bench", "b": "TopicBench", "e": "1"}, payload))
                count += 1

        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(PIPELINE):
                nursery.start_soon(worker)
        return count / (time.perf_counter() - start)


async def pyrmq_pipelined_callback(port: int, seconds: float, body: int) -> float:
    from pyrmq.remoting import RemotingClient, RemotingCommand

    payload = b"x" * body
    addr = f"127.0.0.1:{port}"
    async with RemotingClient() as client:
        conn = await client.connection(addr)
        finished = trio.Event()
        count = 0
        end = time.perf_counter() + seconds

        def on_response(result):
            nonlocal count
            if isinstance(result, outcome.Error):  # in flight when the client closed
                return
            count += 1
            if time.perf_counter() < end:
                # queued here, sent by the reader after this batch of responses: no task switch per request
                conn.invoke_callback(RemotingCommand.request(
                    CODE, {"a": "PID-bench", "b": "TopicBench", "e": "1"}, payload), on_response)
            elif count % PIPELINE == 0 or not conn.pending_invokes:
                finished.set()

        start = time.perf_counter()
        for _ in range(PIPELINE):
            conn.invoke_callback(RemotingCommand.request(CODE, body=payload), on_response)
        await conn.flush()
        with trio.move_on_after(seconds + 5):
            await finished.wait()
        return count / (time.perf_counter() - start)


CLIENTS = {
    "raw_seq": raw_seq,
    "raw_pipelined": raw_pipelined,
    "pyrmq_seq": pyrmq_seq,
    "pyrmq_pipelined_tasks": pyrmq_pipelined_tasks,
    "pyrmq_pipelined_callback": pyrmq_pipelined_callback,
}


# ---- orchestration ----------------------------------------------------------------------------------------------------

def _cmd(pinned: bool, *args: str) -> list[str]:
    base = [sys.executable, os.path.abspath(__file__), *args]
    return ["taskset", "-c", "0", *base] if pinned else base


def measure(server: str, client: str, seconds: float, body: int, pinned: bool) -> float:
    env = dict(os.environ, PYTHONHASHSEED="0")
    srv = subprocess.Popen(_cmd(pinned, "_server", server), stdout=subprocess.PIPE, text=True, env=env)
    try:
        port = int(srv.stdout.readline())
        out = subprocess.run(_cmd(pinned, "_client", client, str(port), str(seconds), str(body)),
                             capture_output=True, text=True, env=env, timeout=seconds * 10 + 30)
        if out.returncode:
            raise RuntimeError(f"{client} failed:\n{out.stderr}")
        return float(json.loads(out.stdout)["rate"])
    finally:
        srv.kill()
        srv.wait()


def median_of(repeat: int, *args) -> tuple[float, list[float]]:
    runs = [measure(*args) for _ in range(repeat)]
    return statistics.median(runs), runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--body", type=int, default=1024)
    parser.add_argument("--no-pinned", action="store_true")
    args = parser.parse_args()
    pinned_modes = [False] if args.no_pinned or not shutil.which("taskset") else [False, True]

    print(f"pyrmq.remoting benchmark: {args.body} B bodies, 127.0.0.1, server and client in separate processes, "
          f"median of {args.repeat} x {args.seconds:g} s, {os.cpu_count()} vCPUs")
    rows = []
    for pinned in pinned_modes:
        tag = "pinned (taskset -c 0)" if pinned else "unpinned"
        raw, raw_runs = median_of(args.repeat, "raw", "raw_seq", args.seconds, args.body, pinned)
        ours, our_runs = median_of(args.repeat, "pyrmq", "pyrmq_seq", args.seconds, args.body, pinned)
        rows.append((f"sequential, {tag}", raw, ours, raw_runs, our_runs))
    raw, raw_runs = median_of(args.repeat, "raw", "raw_pipelined", args.seconds, args.body, False)
    for client, label in (("pyrmq_pipelined_tasks", "64 tasks x invoke"),
                          ("pyrmq_pipelined_callback", "window 64, invoke_callback")):
        ours, our_runs = median_of(args.repeat, "pyrmq", client, args.seconds, args.body, False)
        rows.append((f"pipelined 64, {label}", raw, ours, raw_runs, our_runs))

    print(f"\n{'measurement':<46} {'raw trio /s':>12} {'pyrmq /s':>10} {'ratio':>7}   runs (raw | pyrmq)")
    for label, raw, ours, raw_runs, our_runs in rows:
        runs = f"{' '.join(f'{r:,.0f}' for r in raw_runs)} | {' '.join(f'{r:,.0f}' for r in our_runs)}"
        print(f"{label:<46} {raw:>12,.0f} {ours:>10,.0f} {ours / raw:>6.0%}   {runs}")
    print("\ntargets: sequential >= 60 % of raw trio; pipelined >= 100,000 requests/s")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_server":
        trio.run({"raw": raw_server, "pyrmq": pyrmq_server}[sys.argv[2]], sys.stdout)
    elif len(sys.argv) > 1 and sys.argv[1] == "_client":
        name, port, seconds, body = sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
        rate = trio.run(CLIENTS[name], port, seconds, body)
        print(json.dumps({"rate": rate}))
    else:
        main()
