"""Overload: 1,000 connections each holding a long poll, a consumer that stops reading its socket, and producers of
4 MiB messages as fast as they can, all at once; meanwhile an ordinary producer sends small messages.

The broker keeps serving the ordinary producer (every send succeeds; its latency p50/p99 reported), its memory
stays bounded (RSS sampled, peak reported and bounded at 1.5 GiB), and it pushes back (SYSTEM_BUSY, or TCP
back-pressure on the flooding connection) rather than queueing without limit.
"""

from __future__ import annotations

import os
import time

import pytest
import trio

from pyrmq.client import Admin, BrokerError, ClientError, Message, Producer
from pyrmq.remoting.codes import RequestCode
from pyrmq.remoting.command import RemotingCommand

from .harness import FULL, Cluster, percentile, report, rss_kib

pytestmark = pytest.mark.chaos


def pull_frame(topic: str, offset: int, suspend_ms: int, opaque: int) -> bytes:
    cmd = RemotingCommand.request(RequestCode.PULL_MESSAGE, {
        "consumerGroup": "overload_g", "topic": topic, "queueId": "0", "queueOffset": str(offset),
        "maxMsgNums": "32", "sysFlag": "6", "commitOffset": "0", "suspendTimeoutMillis": str(suspend_ms),
        "subscription": "*", "subVersion": "0"})
    cmd.opaque = opaque
    return cmd.encode()


async def scenario(cluster: Cluster, seconds: float, polls: int) -> dict:
    host, port = "127.0.0.1", cluster.broker_port
    out = {"latency_ms": [], "victim_errors": [], "big_ok": 0, "big_busy": 0, "big_other": [], "rss": [],
           "polls_open": 0, "polls_answered": 0}
    async with Admin(cluster.namesrv_addr) as admin:
        for topic in ("Idle", "Big", "Victim"):
            await admin.create_topic(topic, 1, broker_addr=cluster.broker_addr)
    # the producers send to Big and Victim: their routes first (a topic created before the broker's first
    # registration reaches the name server with that registration)
    for topic in ("Big", "Victim"):
        await cluster.registered(topic)
    big_body = os.urandom(4 * 1024 * 1024 - 4096)  # incompressible: the client's zlib cannot shrink it
    async with Producer(cluster.namesrv_addr, group="overload_big") as big, \
            Producer(cluster.namesrv_addr, group="overload_victim") as victim:
        for i in range(20):  # something for the stalled consumer to be sent
            await big.send(Message("Big", big_body[: 256 * 1024], keys=[f"seed-{i}"]), timeout=30)
        streams: list[trio.SocketStream] = []
        try:
            with trio.fail_after(120):
                for i in range(polls):  # long polls held on an empty queue
                    s = await trio.open_tcp_stream(host, port)
                    await s.send_all(pull_frame("Idle", 0, 60_000, i + 1))
                    streams.append(s)
                stalled = await trio.open_tcp_stream(host, port)  # asks for a lot and never reads
                streams.append(stalled)
                for i in range(400):
                    with trio.move_on_after(2) as cs:
                        await stalled.send_all(pull_frame("Big", 0, 0, 100_000 + i))
                    if cs.cancelled_caught:  # the broker stopped reading us: TCP back-pressure
                        break
            t_end = trio.current_time() + seconds

            async def flood() -> None:
                while trio.current_time() < t_end:
                    try:
                        await big.send(Message("Big", big_body), timeout=30)
                        out["big_ok"] += 1
                    except ClientError as exc:
                        cause = exc if isinstance(exc, BrokerError) else getattr(exc, "last", None)
                        if isinstance(cause, BrokerError) and cause.code == 2:  # SYSTEM_BUSY: back-pressure
                            out["big_busy"] += 1
                        else:
                            out["big_other"].append(str(exc)[:200])

            async def ordinary() -> None:
                i = 0
                while trio.current_time() < t_end:
                    t0 = time.perf_counter()
                    try:
                        await victim.send(Message("Victim", b"v" * 1024, keys=[f"v-{i}"]), timeout=10)
                        out["latency_ms"].append((time.perf_counter() - t0) * 1000)
                    except ClientError as exc:
                        out["victim_errors"].append(str(exc)[:200])
                    i += 1

            async def sample() -> None:
                while trio.current_time() < t_end:
                    out["rss"].append(rss_kib(cluster.broker.pid))
                    await trio.sleep(0.5)

            with trio.fail_after(seconds + 120):
                async with trio.open_nursery() as nursery:
                    for _ in range(4):
                        nursery.start_soon(flood)
                    nursery.start_soon(ordinary)
                    nursery.start_soon(sample)
            # the long polls are still held (or answered), never dropped
            for s in streams[:polls]:
                with trio.move_on_after(0.01):
                    data = await s.receive_some(65536)
                    if data == b"":
                        continue
                    out["polls_answered"] += 1
                out["polls_open"] += 1
        finally:
            for s in streams:
                with trio.move_on_after(1) as cs:
                    cs.shield = True
                    await s.aclose()
    return out


def test_overload_keeps_serving_an_ordinary_producer_with_bounded_memory(tmp_path):
    seconds = 60 if FULL else 4
    polls = 1000 if FULL else 200
    cluster = Cluster(tmp_path, {"flushDiskType": "ASYNC_FLUSH", "mappedFileSizeCommitLog": str(64 * 1024 * 1024)})
    try:
        cluster.start_namesrv()
        cluster.start_broker()
        rss_idle = rss_kib(cluster.broker.pid)
        out = trio.run(scenario, cluster, seconds, polls)
        assert cluster.broker.poll() is None, "the broker died"
    finally:
        cluster.close()
    assert not out["victim_errors"], out["victim_errors"][:5]
    assert out["latency_ms"], "the ordinary producer got nothing through"
    assert not out["big_other"], out["big_other"][:5]
    assert out["polls_open"] == polls, f"{polls - out['polls_open']} long polls were dropped"
    peak = max(out["rss"])
    assert peak < 1536 * 1024, f"broker RSS reached {peak // 1024} MiB"
    lat = out["latency_ms"]
    report(f"overload ({polls} long polls held, 1 stalled reader, 4 x 4 MiB producers, {seconds} s)",
           ordinary_sends=len(lat), ordinary_failures=len(out["victim_errors"]),
           ordinary_latency_ms=f"p50 {percentile(lat, 50):.1f}, p99 {percentile(lat, 99):.1f}, max {max(lat):.1f}",
           big_sent=out["big_ok"], big_system_busy=out["big_busy"],
           broker_rss_mib=f"idle {rss_idle // 1024}, peak {peak // 1024}")
