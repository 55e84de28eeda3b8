"""What counting and timing traffic cost the send and pull paths: metrics on vs off, in the same run.

One broker (the ``broker`` bundle, real store in a temporary directory, exporter on) is driven two ways, one after
the other:

* **socket** (what users see): a load-generator subprocess (its own process, so the broker keeps this one) sends
  SEND_MESSAGE_V2 requests over a real TCP connection to the broker's port, 64 in flight, and pulls, in blocks the
  broker process orders over a pipe; per block the broker's wall time and its process CPU time are measured;
* **in-process**: the SEND_MESSAGE_V2 and PULL_MESSAGE processors called directly with real requests (no socket:
  the broker's own per-request cost, where an overhead shows most).

Set-ups that take turns in small blocks on the one broker (the machine's load hits all alike):

* **off**: the counters replaced by a no-op object, requests not timed (the floor: nothing counted, nothing timed);
* **count**: the broker's counters (plugins/broker/stats.py) counting every send and pull, requests not timed;
* **wrap**: counting, and every request timed the way pyrmq did before (each processor wrapped in a timing
  coroutine: a perf_counter_ns pair, a dict lookup and a bisect; kept here only as the comparison);
* **on**: as shipped with the exporter on: counting, and the connection timing each request into
  ``rocketmq_rpc_latency`` (a monotonic_ns pair and a call of the role's recorder, rows made at start).

``/metrics`` costs the send and pull paths nothing (it reads the counters when scraped); what a scrape takes from the
event loop is printed. Also printed: the per-call cost of the counters (``BrokerStats.put`` / ``get``).

    python bench/metrics_bench.py [--sends N] [--block B] [--socket-sends N] [--socket-block B]
"""

from __future__ import annotations

import argparse
from bisect import bisect_left
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

import outcome
import trio

from pyrmq.kernel.bundles import load_bundle
from pyrmq.kernel.service import build_kernel, serve_kernel
from pyrmq.plugins.broker.core import BROKER
from pyrmq.plugins.broker.stats import BrokerStats
from pyrmq.plugins.builtin.metrics import ENDPOINTS, RpcLatency, _RPC_BOUNDS_NS
from pyrmq.plugins.builtin.remoting_server import SERVERS
from pyrmq.remoting.codes import RequestCode
from pyrmq.remoting.command import RemotingCommand

TOPIC, GROUP = "BenchMetrics", "gBenchMetrics"
MODES = ("off", "count", "wrap", "on")
BODY = b"x" * 100
WINDOW = 64
# plain ints, as decoded off the wire (an IntEnum hashes in Python)
SEND_CODE, PULL_CODE = int(RequestCode.SEND_MESSAGE_V2), int(RequestCode.PULL_MESSAGE)


class Harness:
    """The caller side of a processor call: where the request came from (no socket)."""

    remote_address = ("127.0.0.1", 40000)

    def start_soon(self, fn: Any, *args: Any) -> None:
        raise RuntimeError("the bench runs ASYNC_FLUSH: nothing is answered later")


class NoStats(BrokerStats):
    """The floor: counts nothing."""

    def put(self, topic: str, nums: int, size: int) -> None:
        pass

    def get(self, topic: str, group: str, nums: int, size: int) -> None:
        pass


def wrap_processors(table: dict[int, Any], latency: RpcLatency, common: tuple[str, str, str]) -> dict[int, Any]:
    """How requests were timed before the connection's request_timer (the comparison 'wrap'): each processor wrapped
    in a coroutine that reads perf_counter_ns twice, finds its row by response code and bisects the bounds."""

    def timed(request_code: int, processor: Any) -> Any:
        by_response: dict[int | None, list[int]] = {}

        async def run(connection: Any, request: Any, _clock: Any = time.perf_counter_ns, _bisect: Any = bisect_left,
                      _bounds: Any = _RPC_BOUNDS_NS) -> Any:
            start = _clock()
            response = await processor(connection, request)
            elapsed = _clock() - start
            code = None if response is None else response.code
            cell = by_response.get(code)
            if cell is None:
                cell = by_response[code] = latency.cell(common, request_code, code)
            cell[_bisect(_bounds, elapsed)] += 1
            cell[-1] += elapsed
            return response

        return run

    return {code: timed(code, processor) for code, processor in table.items()}


def send_ext(i: int) -> dict[str, str]:
    return {"a": "pBench", "b": TOPIC, "c": "TBW102", "d": "4", "e": str(i % 4), "f": "0",
            "g": str(int(time.time() * 1000)), "h": "0", "i": f"KEYS\x01k{i}\x02TAGS\x01T\x02", "j": "0", "k": "false"}


def send_request(i: int) -> RemotingCommand:
    return RemotingCommand.request(SEND_CODE, send_ext(i), BODY)


def pull_request(queue_id: int, offset: int) -> RemotingCommand:
    ext = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": str(queue_id), "queueOffset": str(offset),
           "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0", "subVersion": "0",
           "expressionType": "TAG", "subscription": "*"}
    return RemotingCommand.request(PULL_CODE, ext)


PULLS = [(q, o) for q in range(4) for o in range(0, 96, 32)]
SOCKET_PULL_ROUNDS = 2  # pulls per block over TCP: 2 x 12


def fast_quarter(xs: list[float]) -> float:
    xs = sorted(xs)[: max(len(xs) // 4, 1)]
    return sum(xs) / len(xs)


# ---- the load generator (subprocess) -------------------------------------------------------------------------------

async def client_main(addr: str) -> None:
    """Reads 'send N' / 'pull' lines on stdin, does them over one TCP connection, answers 'ok' (or the error)."""
    from pyrmq.remoting.client import RemotingClient

    stdin = trio.lowlevel.FdStream(os.dup(0))
    buf = b""
    async with RemotingClient() as client:
        conn = await client.connection(addr)
        sent = 0
        while True:
            while b"\n" not in buf:
                chunk = await stdin.receive_some(4096)
                if not chunk:
                    return
                buf += chunk
            line, _, buf = buf.partition(b"\n")
            words = line.decode().split()
            requests = ([send_request(sent + i) for i in range(int(words[1]))] if words[0] == "send"
                        else [pull_request(q, o) for q, o in PULLS] * SOCKET_PULL_ROUNDS)
            sent += len(requests) if words[0] == "send" else 0
            room = trio.Semaphore(WINDOW)
            finished = trio.Event()
            left, errors = [len(requests)], []

            def on_response(result: outcome.Outcome) -> None:
                room.release()
                try:
                    response = result.unwrap()
                    if response.code != 0:
                        errors.append(f"{response.code} {response.remark}")
                except Exception as exc:  # noqa: BLE001 - reported to the broker side, which stops
                    errors.append(repr(exc))
                left[0] -= 1
                if left[0] == 0:
                    finished.set()

            for r in requests:
                await room.acquire()
                conn.invoke_callback(r, on_response)
                await conn.flush()
            with trio.fail_after(60):
                await finished.wait()
            print("ok" if not errors else f"error {errors[0]}", flush=True)


# ---- the broker side -----------------------------------------------------------------------------------------------

async def measure(sends: int, block: int, socket_sends: int, socket_block: int) -> dict[str, Any]:
    root = tempfile.mkdtemp(prefix="pyrmq-metrics-bench-")
    overrides = {"broker.storePathRootDir": root, "broker.listenPort": 0, "broker.mappedFileSizeCommitLog": 256 << 20,
                 "broker.maxHashSlotNum": 100_000, "broker.maxIndexNum": 2_000_000,
                 "broker.metricsExporterType": "PROM", "broker.metricsPromExporterPort": 0}
    kernel = build_kernel(load_bundle("broker").with_overrides(overrides), entry_points=False)
    inproc: dict[str, dict[str, list[float]]] = {m: {"send": [], "pull": []} for m in MODES}
    sock: dict[str, dict[str, list[float]]] = {m: {"send": [], "pull": [], "cpu": [], "pull_cpu": []} for m in MODES}
    scrape_times: list[float] = []
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(serve_kernel, kernel)
            ctx = kernel.state.get(BROKER)
            counting, floor = ctx.stats, NoStats(ctx.settings.brokerClusterName)
            server = kernel.state.get(SERVERS)["broker"]
            record = server.request_timer  # set at start by the metrics plugin (exporter on)
            assert record is not None, "the exporter did not give the broker's listener a request timer"
            plain = server.processors
            endpoint = kernel.state.get(ENDPOINTS)["broker"]
            common = (ctx.settings.brokerClusterName, "broker", ctx.settings.brokerName)
            wrapped = wrap_processors(plain, endpoint.rpc_latency, common)

            def set_mode(mode: str) -> None:
                ctx.stats = floor if mode == "off" else counting
                server.processors = wrapped if mode == "wrap" else plain
                server.request_timer = record if mode == "on" else None

            conn = Harness()
            for i in range(4 * 32 * 4):  # something to pull: 4 queues x 128 messages (the first creates the topic)
                await plain[SEND_CODE](conn, send_request(i))
            pulls = [pull_request(q, o) for q, o in PULLS]

            # -- over a socket: the load generator in its own process --
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [os.path.dirname(__file__),
                                                                            os.environ.get("PYTHONPATH")])))
            proc = await trio.lowlevel.open_process(
                [sys.executable, __file__, "--client", f"127.0.0.1:{server.port}"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
            lines = b""

            async def order(command: str) -> None:
                nonlocal lines
                await proc.stdin.send_all(command.encode() + b"\n")
                with trio.fail_after(120):
                    while b"\n" not in lines:
                        chunk = await proc.stdout.receive_some(4096)
                        if not chunk:
                            raise SystemExit("the load generator exited")
                        lines += chunk
                answer, _, lines = lines.partition(b"\n")
                if answer != b"ok":
                    raise SystemExit(f"load generator: {answer.decode()}")

            try:
                await order(f"send {socket_block}")  # connect and warm up
                sent, turn = 0, 0
                while sent < socket_sends:
                    turn += 1
                    for mode in MODES if turn % 2 else MODES[::-1]:  # no mode always first after another
                        set_mode(mode)
                        began, cpu = time.perf_counter(), time.process_time()
                        await order(f"send {socket_block}")
                        sock[mode]["send"].append((time.perf_counter() - began) / socket_block)
                        sock[mode]["cpu"].append((time.process_time() - cpu) / socket_block)
                        n = len(PULLS) * SOCKET_PULL_ROUNDS
                        began, cpu = time.perf_counter(), time.process_time()
                        await order("pull")
                        sock[mode]["pull"].append((time.perf_counter() - began) / n)
                        sock[mode]["pull_cpu"].append((time.process_time() - cpu) / n)
                    sent += socket_block
            finally:
                await proc.stdin.aclose()
                with trio.move_on_after(10):
                    await proc.wait()
                if proc.returncode is None:
                    proc.kill()

            # -- in-process: the processors called directly --
            sent, turn = 0, 0
            while sent < sends:
                turn += 1
                for mode in MODES if turn % 2 else MODES[::-1]:
                    set_mode(mode)
                    table = server.processors
                    send, pull = table[SEND_CODE], table[PULL_CODE]
                    timer, clock = server.request_timer, time.monotonic_ns
                    requests = [send_request(sent + i) for i in range(block)]
                    began = time.perf_counter()
                    for r in requests:
                        if timer is None:
                            response = await send(conn, r)
                        else:  # what the connection does with a request timer
                            t0 = clock()
                            response = await send(conn, r)
                            timer(r, response, clock() - t0)
                        if response.code != 0:
                            raise SystemExit(f"send failed: {response.code} {response.remark}")
                    inproc[mode]["send"].append((time.perf_counter() - began) / block)
                    began = time.perf_counter()
                    for r in pulls:
                        if timer is None:
                            response = await pull(conn, r)
                        else:
                            t0 = clock()
                            response = await pull(conn, r)
                            timer(r, response, clock() - t0)
                        if response.code != 0:
                            raise SystemExit(f"pull failed: {response.code} {response.remark}")
                    inproc[mode]["pull"].append((time.perf_counter() - began) / len(pulls))
                    await trio.lowlevel.checkpoint()  # let the flusher run between blocks
                sent += block
            set_mode("on")
            for _ in range(20):
                began = time.perf_counter()
                stream = await trio.open_tcp_stream("127.0.0.1", endpoint.port)
                async with stream:
                    await stream.send_all(b"GET /metrics HTTP/1.1\r\n\r\n")
                    while await stream.receive_some(65536):
                        pass
                scrape_times.append(time.perf_counter() - began)
            kernel.request_stop()
            nursery.cancel_scope.cancel()
    finally:
        shutil.rmtree(root, ignore_errors=True)

    def paired(series: str, mode: str) -> float:
        """Median over rounds of (mode / off) - 1 for one round's adjacent blocks: robust to the machine's drift."""
        ratios = sorted(a / b for a, b in zip(sock[mode][series], sock["off"][series]))
        return ratios[len(ratios) // 2] - 1

    return {
        "paired": {m: {k: paired(k, m) for k in ("send", "pull", "cpu", "pull_cpu")} for m in MODES[1:]},
        # CPU: the mean over all blocks (the modes alternate block by block, so the machine's load adds to each alike)
        "socket": {m: (1 / fast_quarter(t["send"]), 1 / fast_quarter(t["pull"]), sum(t["cpu"]) / len(t["cpu"]),
                       sum(t["pull_cpu"]) / len(t["pull_cpu"])) for m, t in sock.items()},
        "inproc": {m: (1 / fast_quarter(t["send"]), 1 / fast_quarter(t["pull"])) for m, t in inproc.items()},
        "scrape": sorted(scrape_times)[len(scrape_times) // 2],
    }


def counter_cost(n: int = 200_000) -> tuple[float, float]:
    stats = BrokerStats("c")
    begin = time.perf_counter()
    for _ in range(n):
        stats.put(TOPIC, 1, 200)
    put = (time.perf_counter() - begin) / n
    begin = time.perf_counter()
    for _ in range(n):
        stats.get(TOPIC, GROUP, 32, 6400)
    get = (time.perf_counter() - begin) / n
    return put, get


LABELS = {"off": "off (nothing)", "count": "count (counting only)", "wrap": "wrap (count + old timing)",
          "on": "on (count + timing)"}


async def main(sends: int, block: int, socket_sends: int, socket_block: int) -> None:
    r = await measure(sends, block, socket_sends, socket_block)
    put, get = counter_cost()
    sock, inproc = r["socket"], r["inproc"]
    print(f"over TCP: {socket_sends} sends of {len(BODY)} bytes per mode ({WINDOW} in flight, load generator in "
          f"another process), per block of {socket_block} sends {len(PULLS) * SOCKET_PULL_ROUNDS} pulls of 32; modes "
          "take turns; rates: mean of each mode's fastest quarter of blocks; broker CPU (this process's CPU time): mean of "
          "all blocks")
    print(f"{'':28}{'sends/s':>10}{'pulls/s':>10}{'CPU us/send':>13}{'CPU us/pull':>13}")
    for mode in MODES:
        print(f"{LABELS[mode]:28}{sock[mode][0]:>10,.0f}{sock[mode][1]:>10,.0f}{sock[mode][2] * 1e6:>13.2f}"
              f"{sock[mode][3] * 1e6:>13.2f}")
    for mode in MODES[1:]:
        print(f"{'overhead ' + mode:28}{100 * (1 - sock[mode][0] / sock['off'][0]):>9.1f}%"
              f"{100 * (1 - sock[mode][1] / sock['off'][1]):>9.1f}%"
              f"{100 * (sock[mode][2] / sock['off'][2] - 1):>12.1f}%{100 * (sock[mode][3] / sock['off'][3] - 1):>12.1f}%")
    print("paired (median over rounds of each block against the adjacent 'off' block; time and CPU per request):")
    for mode in MODES[1:]:
        d = r["paired"][mode]
        print(f"{'overhead ' + mode:28}{100 * d['send']:>9.1f}%{100 * d['pull']:>9.1f}%{100 * d['cpu']:>12.1f}%"
              f"{100 * d['pull_cpu']:>12.1f}%")
    print()
    print(f"in-process: {sends} sends and {sends // block * 12} pulls of 32 per mode, processors called directly, "
          f"in blocks of {block} sends + 12 pulls taking turns")
    print(f"{'':28}{'sends/s':>10}{'pulls/s':>10}")
    for mode in MODES:
        print(f"{LABELS[mode]:28}{inproc[mode][0]:>10,.0f}{inproc[mode][1]:>10,.0f}")
    for mode in MODES[1:]:
        print(f"{'overhead ' + mode:28}{100 * (1 - inproc[mode][0] / inproc['off'][0]):>9.1f}%"
              f"{100 * (1 - inproc[mode][1] / inproc['off'][1]):>9.1f}%")
    print()
    scrape = r["scrape"]
    print(f"one scrape of /metrics (median of 20): {scrape * 1000:.1f} ms = {scrape * 100:.2f} % of the event loop "
          "at one scrape a second")
    print(f"counter calls alone: BrokerStats.put {put * 1e9:.0f} ns, .get {get * 1e9:.0f} ns "
          f"(one in-process send here: {1e9 / inproc['off'][0]:,.0f} ns, one pull of 32: {1e9 / inproc['off'][1]:,.0f} ns)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sends", type=int, default=60_000, help="in-process sends per mode (default 60000)")
    parser.add_argument("--block", type=int, default=100, help="in-process sends per block (default 100)")
    parser.add_argument("--socket-sends", type=int, default=60_000, help="sends over TCP per mode (default 60000)")
    parser.add_argument("--socket-block", type=int, default=250, help="sends over TCP per block (default 250)")
    parser.add_argument("--client", help=argparse.SUPPRESS)  # the load generator subprocess: broker address
    args = parser.parse_args()
    if args.client:
        trio.run(client_main, args.client)
    else:
        trio.run(main, args.sends, args.block, args.socket_sends, args.socket_block)
