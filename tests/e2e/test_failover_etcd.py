"""Automatic failover on etcd with real processes on 127.0.0.1 (Jepsen-style): an etcd, a name server and a group of
SYNC_MASTER replicas (configs/failover.toml); a producer sends keyed messages with retries while the master is
SIGKILLed at a random point, round after round (the killed replica restarts and rejoins). After each round a new
master holds the lease within TTL + 3 s and the route shows it; at the end every SEND_OK key is consumable (acked is a
subset of received; duplicates are reported) and every replica's commit log is a byte prefix of the master's.

``PYRMQ_FAILOVER_ROUNDS`` (default 2 in `make test`) sets the rounds; ``make failover`` runs 10 with a report.
"""

from __future__ import annotations

import json
import os
import random
import signal
import statistics
import time
from collections import Counter
from pathlib import Path

import pytest
import trio

from pyrmq.client import Message, Producer, PushConsumer
from pyrmq.client.config import ClientConfig
from pyrmq.client.errors import ClientError
from pyrmq.kernel.errors import PyrmqError
from pyrmq.kernel.bundles import packaged_bundle_path
from pyrmq.plugins.broker.failover.etcd import EtcdClient
from pyrmq.remoting.client import RemotingClient
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.errors import RemotingError

ROUNDS = int(os.environ.get("PYRMQ_FAILOVER_ROUNDS", "2"))
REPORT = os.environ.get("PYRMQ_FAILOVER_REPORT", "")
TTL = 2
TOPIC = "FailoverTopic"
CLUSTER = "DefaultCluster"
GROUP = "broker-f"
PREFIX = f"/pyrmq/v1/{CLUSTER}/{GROUP}/"


def _port() -> int:
    """A port P with P + 1 (HA) free too."""
    import socket

    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port > 65000:
            continue
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", port + 1))
        except OSError:
            continue
        return port
    raise AssertionError("no port with a free neighbour on 127.0.0.1")


async def _until(predicate, what: str, timeout: float = 30.0, interval: float = 0.1):
    with trio.move_on_after(timeout):
        while True:
            value = await predicate()
            if value:
                return value
            await trio.sleep(interval)
    raise AssertionError(f"{what}: not within {timeout} s")


def _commit_log(store: Path) -> bytes:
    """The replica's commit log as written (trailing zero bytes of the last file are not data)."""
    directory = store / "commitlog"
    files = sorted(directory.iterdir()) if directory.exists() else []
    return b"".join(f.read_bytes() for f in files).rstrip(b"\0")


class Group:
    """The replicas of broker-f, each a `pyrmq broker -c <failover bundle>` process on its own port and store."""

    def __init__(self, spawn, tmp_path: Path, etcd_endpoint: str, namesrv: str, size: int, *sets: str) -> None:
        self.spawn = spawn
        self.tmp_path = tmp_path
        self.namesrv = namesrv
        self.bundle = tmp_path / "failover.toml"
        text = packaged_bundle_path("failover").read_text().replace('"127.0.0.1:2379"', f'"{etcd_endpoint}"')
        text = text.replace("leaseTtl = 3", f"leaseTtl = {TTL}")
        self.bundle.write_text(text + "slaveSyncInterval = 500\nslaveSyncFirstDelay = 200\n")
        self.sets = sets
        self.ports = {rid: _port() for rid in range(1, size + 1)}
        self.roles: dict = {}

    def store(self, rid: int) -> Path:
        return self.tmp_path / f"replica-{rid}"

    def addr(self, rid: int) -> str:
        return f"127.0.0.1:{self.ports[rid]}"

    def start(self, rid: int):
        settings = ["flushDiskType=SYNC_FLUSH", "mappedFileSizeCommitLog=4194304", "haSendHeartbeatInterval=500",
                    f"brokerName={GROUP}", f"brokerId={rid}", "slaveTimeout=3000", *self.sets]
        self.roles[rid] = self.spawn(
            "broker", "-c", str(self.bundle), "--namesrv", self.namesrv, "--listen", self.addr(rid),
            "--store-dir", str(self.store(rid)), *[x for kv in settings for x in ("--set", kv)], name=f"replica-{rid}")
        return self.roles[rid]

    def kill(self, rid: int) -> None:
        self.roles[rid].stop(signal.SIGKILL)


async def _master(etcd: EtcdClient) -> dict | None:
    kv = await etcd.get(PREFIX + "master")
    return kv.json() if kv else None


async def _syncset(etcd: EtcdClient) -> list[int]:
    kv = await etcd.get(PREFIX + "syncset")
    return kv.json()["members"] if kv else []


async def _route_master(namesrv: str) -> str | None:
    async with RemotingClient() as rc:
        response = await rc.invoke(namesrv, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC}))
    if response.code != ResponseCode.SUCCESS:
        return None
    route = json.loads(response.body_bytes())
    for data in route.get("brokerDatas", []):
        if data["brokerName"] == GROUP:
            return data["brokerAddrs"].get("0")
    return None


async def _create_topic(addr: str) -> None:
    async with RemotingClient() as rc:
        create = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
            "topic": TOPIC, "defaultTopic": "TBW102", "readQueueNums": "4", "writeQueueNums": "4", "perm": "6",
            "topicFilterType": "SINGLE_TAG"})
        assert (await rc.invoke(addr, create)).code == ResponseCode.SUCCESS


async def _has_topic(addr: str) -> bool:
    try:
        async with RemotingClient() as rc:
            topics = await rc.invoke(addr, RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG, {}), timeout=2)
    except RemotingError:
        return False
    return TOPIC in topics.body_bytes().decode()


class Sender:
    """Keyed sends, each retried (a fresh attempt after any failure) until SEND_OK or the give-up deadline."""

    def __init__(self, producer: Producer) -> None:
        self.producer = producer
        self.acked: set[str] = set()
        self.attempts: Counter = Counter()
        self.outcomes: Counter = Counter()
        self.given_up: list[str] = []
        self.next = 0
        self.stopping = False

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while not self.stopping:
            key = f"k-{self.next}"
            self.next += 1
            deadline = trio.current_time() + 20
            while trio.current_time() < deadline:
                self.attempts[key] += 1
                try:
                    result = await self.producer.send(Message(TOPIC, key.encode(), keys=[key]), timeout=3)
                except (ClientError, RemotingError, trio.TooSlowError, PyrmqError) as exc:
                    self.outcomes[type(exc).__name__] += 1
                    await trio.sleep(0.05)
                    continue
                self.outcomes[result.status.value] += 1
                if result.status.value == "SEND_OK":
                    self.acked.add(key)
                    break
                await trio.sleep(0.05)
            else:
                self.given_up.append(key)


@pytest.mark.slow
async def test_failover_rounds_lose_no_acknowledged_message(spawn, etcd, tmp_path):
    namesrv = spawn("namesrv", "--listen", "127.0.0.1:0", name="namesrv").listening["namesrv"]
    group = Group(spawn, tmp_path, etcd.endpoint, namesrv, 3)
    for rid in group.ports:
        group.start(rid)
    rng = random.Random(int(os.environ.get("PYRMQ_FAILOVER_SEED", str(time.time_ns()))))
    failover_times: list[float] = []
    rounds: list[dict] = []
    async with EtcdClient([etcd.endpoint]) as client:
        first = await _until(lambda: _master(client), "a master elected", 20)
        await _create_topic(group.addr(first["replicaId"]))
        for rid in group.ports:
            await _until(lambda rid=rid: _has_topic(group.addr(rid)), f"{TOPIC} on replica {rid}")
        config = ClientConfig(namesrv_addr=namesrv, poll_name_server_interval=1.0, heartbeat_broker_interval=2.0)
        async with Producer(config=config, group="failover_producer", send_timeout=3.0) as producer:
            sender = Sender(producer)
            async with trio.open_nursery() as nursery:
                await nursery.start(sender.run)
                for n in range(ROUNDS):
                    # every live replica in the in-sync set (the precondition for an election without loss)
                    await _until(lambda: _full(client, group), "every replica in the in-sync set", 30)
                    acked_before = len(sender.acked)
                    await trio.sleep(rng.uniform(0.3, 1.5))
                    old = await _master(client)
                    group.kill(old["replicaId"])
                    killed_at = trio.current_time()
                    new = await _until(
                        lambda: _new_master(client, old["epoch"]), "a new master holding the lease", TTL + 3, 0.02)
                    elected = trio.current_time() - killed_at
                    failover_times.append(elected)
                    assert new["replicaId"] != old["replicaId"]
                    await _until(lambda: _route_is(namesrv, new["addr"]), "the route naming the new master", 15)
                    group.start(old["replicaId"])
                    await _until(lambda: _acked_more(sender, acked_before + 10), "sends acknowledged by the new master", 30)
                    rounds.append({"round": n, "killed": old["replicaId"], "elected": new["replicaId"],
                                   "epoch": new["epoch"], "seconds": round(elected, 3),
                                   "acked": len(sender.acked) - acked_before})
                sender.stopping = True
            master = await _master(client)
            # the replicas catch up with the master (their logs grow to its length)
            want = _commit_log(group.store(master["replicaId"]))
            for rid in group.ports:
                await _until(lambda rid=rid: _true(len(_commit_log(group.store(rid))) >= len(want)),
                             f"replica {rid} caught up", 30)
    master_log = _commit_log(group.store(master["replicaId"]))
    for rid in group.ports:
        log = _commit_log(group.store(rid))
        assert master_log.startswith(log), f"replica {rid}'s commit log is not a prefix of master {master['replicaId']}'s"

    received: Counter = Counter()
    async with PushConsumer(config=config, group="failover_consumers", subscribe={TOPIC: "*"},
                            listener=lambda msg: received.update([msg.body.decode()]),
                            consume_from="CONSUME_FROM_FIRST_OFFSET"):
        try:
            await _until(lambda: _true(sender.acked <= set(received)), "every SEND_OK key consumed", 60, 0.2)
        finally:
            lost = sorted(sender.acked - set(received), key=lambda k: int(k[2:]))
            duplicates = sum(c - 1 for c in received.values() if c > 1)
            summary = {"rounds": rounds, "acked": len(sender.acked), "lost": len(lost), "lost_keys": lost[:20],
                       "duplicates": duplicates, "received": len(received), "outcomes": dict(sender.outcomes),
                       "given_up": len(sender.given_up),
                       "failover_p50": statistics.median(failover_times) if failover_times else None,
                       "failover_max": max(failover_times, default=None)}
            print(json.dumps(summary))
            if REPORT:
                with open(REPORT, "a") as f:
                    f.write(json.dumps(summary) + "\n")
    assert not lost


async def _true(value) -> bool:
    return bool(value)


async def _full(client: EtcdClient, group: Group) -> bool:
    return set(await _syncset(client)) == set(group.ports)


async def _new_master(client: EtcdClient, old_epoch: int) -> dict | None:
    master = await _master(client)
    return master if master is not None and master["epoch"] > old_epoch else None


async def _route_is(namesrv: str, addr: str) -> bool:
    return await _route_master(namesrv) == addr


async def _acked_more(sender: Sender, n: int) -> bool:
    return len(sender.acked) >= n
