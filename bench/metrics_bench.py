"""What counting traffic costs the send and pull paths: metrics on vs off, in the same run.

An in-process broker (the ``broker`` bundle, real store in a temporary directory) is driven by calling its
SEND_MESSAGE_V2 and PULL_MESSAGE processors directly with real requests (no socket, so the figures are the broker's
own per-request cost, where a counting overhead would show most). Three set-ups alternate, several rounds each:

* **off**: the counters replaced by a no-op object and the processors unwrapped (the floor: what a broker with the
  exporter off runs: nothing counted, nothing timed);
* **count**: the broker's counters (plugins/broker/stats.py) counting every send and pull, requests not timed;
* **on**: as shipped with the exporter on: counting, and every request timed into ``rocketmq_rpc_latency``.

The three take turns in small blocks on one broker (the machine's load hits both alike). ``/metrics`` costs the send
and pull paths nothing (it reads the counters when scraped); what a scrape takes from the event loop is printed.
Also printed: the per-call cost of the counters (``BrokerStats.put`` / ``get``) next to one send and one pull.

    python bench/metrics_bench.py [--sends N] [--block B]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from typing import Any

import trio

from pyrmq.kernel.bundles import load_bundle
from pyrmq.kernel.service import build_kernel, serve_kernel
from pyrmq.plugins.broker.core import BROKER
from pyrmq.plugins.broker.stats import BrokerStats
from pyrmq.plugins.builtin.metrics import ENDPOINTS
from pyrmq.remoting.codes import RequestCode
from pyrmq.remoting.command import RemotingCommand

TOPIC, GROUP = "BenchMetrics", "gBenchMetrics"
MODES = ("off", "count", "on")
BODY = b"x" * 100


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


def send_request(i: int) -> RemotingCommand:
    ext = {"a": "pBench", "b": TOPIC, "c": "TBW102", "d": "4", "e": str(i % 4), "f": "0",
           "g": str(int(time.time() * 1000)), "h": "0", "i": f"KEYS\x01k{i}\x02TAGS\x01T\x02", "j": "0", "k": "false"}
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext, BODY)


def pull_request(queue_id: int, offset: int) -> RemotingCommand:
    ext = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": str(queue_id), "queueOffset": str(offset),
           "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0", "subVersion": "0",
           "expressionType": "TAG", "subscription": "*"}
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, ext)


async def measure(sends: int, block: int) -> tuple[dict[str, tuple[float, float]], float]:
    """One broker; small blocks of sends and pulls run in turn with the counters on and off, so the machine's load
    hits both alike; per mode the fastest quarter of its blocks is averaged. Then /metrics is scraped 20 times."""
    root = tempfile.mkdtemp(prefix="pyrmq-metrics-bench-")
    overrides = {"broker.storePathRootDir": root, "broker.listenPort": 0, "broker.mappedFileSizeCommitLog": 256 << 20,
                 "broker.maxHashSlotNum": 100_000, "broker.maxIndexNum": 2_000_000,
                 "broker.metricsExporterType": "PROM", "broker.metricsPromExporterPort": 0}
    kernel = build_kernel(load_bundle("broker").with_overrides(overrides), entry_points=False)
    times: dict[str, dict[str, list[float]]] = {m: {"send": [], "pull": []} for m in MODES}
    scrape_times: list[float] = []
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(serve_kernel, kernel)
            ctx = kernel.state.get(BROKER)
            counting, floor = ctx.stats, NoStats(ctx.settings.brokerClusterName)
            timed_send = kernel.processors["broker"][RequestCode.SEND_MESSAGE_V2]
            timed_pull = kernel.processors["broker"][RequestCode.PULL_MESSAGE]
            # the exporter wraps each processor once at start (rocketmq_rpc_latency); the floor runs them bare
            plain_send, plain_pull = timed_send.__wrapped__, timed_pull.__wrapped__
            send, pull = timed_send, timed_pull
            conn = Harness()
            for i in range(4 * 32 * 4):  # something to pull: 4 queues x 128 messages (the first creates the topic)
                await send(conn, send_request(i))
            pulls = [pull_request(q, o) for q in range(4) for o in range(0, 96, 32)]
            sent = 0
            while sent < sends:
                for mode in MODES:
                    ctx.stats = floor if mode == "off" else counting
                    send, pull = (timed_send, timed_pull) if mode == "on" else (plain_send, plain_pull)
                    requests = [send_request(sent + i) for i in range(block)]
                    began = time.perf_counter()
                    for r in requests:
                        response = await send(conn, r)
                        if response.code != 0:
                            raise SystemExit(f"send failed: {response.code} {response.remark}")
                    times[mode]["send"].append((time.perf_counter() - began) / block)
                    sent += block
                    began = time.perf_counter()
                    for r in pulls:
                        response = await pull(conn, r)
                        if response.code != 0:
                            raise SystemExit(f"pull failed: {response.code} {response.remark}")
                    times[mode]["pull"].append((time.perf_counter() - began) / len(pulls))
                    await trio.lowlevel.checkpoint()  # let the flusher run between blocks
            ctx.stats = counting
            port = kernel.state.get(ENDPOINTS)["broker"].port
            for _ in range(20):
                began = time.perf_counter()
                stream = await trio.open_tcp_stream("127.0.0.1", port)
                async with stream:
                    await stream.send_all(b"GET /metrics HTTP/1.1\r\n\r\n")
                    while await stream.receive_some(65536):
                        pass
                scrape_times.append(time.perf_counter() - began)
            kernel.request_stop()
            nursery.cancel_scope.cancel()
    finally:
        shutil.rmtree(root, ignore_errors=True)

    def fast_quarter(xs: list[float]) -> float:
        xs = sorted(xs)[: max(len(xs) // 4, 1)]
        return sum(xs) / len(xs)

    rates = {m: (1 / fast_quarter(t["send"]), 1 / fast_quarter(t["pull"])) for m, t in times.items()}
    return rates, sorted(scrape_times)[len(scrape_times) // 2]


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


async def main(sends: int, block: int) -> None:
    rates, scrape = await measure(sends, block)
    put, get = counter_cost()
    print(f"{sends} sends of {len(BODY)} bytes and {sends // block * 12} pulls of 32 per mode, in blocks of {block} "
          "sends + 12 pulls taking turns; mean of each mode's fastest quarter of blocks")
    print(f"{'':24}{'sends/s':>12}{'pulls/s':>12}")
    print(f"{'off (nothing counted)':24}{rates['off'][0]:>12,.0f}{rates['off'][1]:>12,.0f}")
    print(f"{'count (counting only)':24}{rates['count'][0]:>12,.0f}{rates['count'][1]:>12,.0f}")
    print(f"{'on (counting + rpc timing)':24}{rates['on'][0]:>12,.0f}{rates['on'][1]:>12,.0f}")
    for mode in ("count", "on"):
        send_cost = 100 * (1 - rates[mode][0] / rates["off"][0])
        pull_cost = 100 * (1 - rates[mode][1] / rates["off"][1])
        print(f"{'overhead ' + mode:24}{send_cost:>11.1f}%{pull_cost:>11.1f}%")
    print(f"one scrape of /metrics (median of 20): {scrape * 1000:.1f} ms = {scrape * 100:.2f} % of the event loop "
          "at one scrape a second")
    print(f"counter calls alone: BrokerStats.put {put * 1e9:.0f} ns, .get {get * 1e9:.0f} ns "
          f"(one send here: {1e9 / rates['off'][0]:,.0f} ns, one pull of 32: {1e9 / rates['off'][1]:,.0f} ns)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sends", type=int, default=60_000, help="sends per mode (default 60000)")
    parser.add_argument("--block", type=int, default=100, help="sends per block (default 100)")
    args = parser.parse_args()
    trio.run(main, args.sends, args.block)
