"""Transactions across automatic failover, with real processes on 127.0.0.1: an etcd, a name server and a group of
3 SYNC_MASTER replicas (configs/failover.toml); a transaction producer in this process.

Round 1: the producer commits 10 transactions and leaves 20 unknown (acknowledged halves, so every in-sync replica
holds them), and the master is SIGKILLed at once, before any half is old enough to be checked. The new master reads
the halves from its own store and checks each back with the producer, which answers COMMIT or ROLLBACK; every
committed transaction is in the topic exactly once, no rolled-back one is, no half stays pending.
Round 2: everything resolved, the master is SIGKILLed again: the next master checks nothing and commits nothing.
"""

from __future__ import annotations

import json
import signal
import socket
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import trio

from pyrmq.client import Admin, ClientConfig, LocalTransactionState, Message, TransactionProducer
from pyrmq.kernel.bundles import packaged_bundle_path
from pyrmq.plugins.broker.failover.etcd import EtcdClient, EtcdError
from pyrmq.remoting.client import RemotingClient
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.errors import RemotingError
from pyrmq.store.format import decode_messages

TTL = 2
TOPIC = "FailoverTxn"
GROUP = "broker-x"
PREFIX = f"/pyrmq/v1/DefaultCluster/{GROUP}/"
#: a half is checked 4 s after its birth: the first master is killed long before
TX_SETTINGS = ("transactionTimeOut=4000", "transactionCheckInterval=500")


def _port() -> int:
    """A port P with P + 1 (HA) free too."""
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


class Group:
    """The replicas of broker-x, each a `pyrmq broker -c <failover bundle>` process on its own port and store."""

    def __init__(self, spawn, tmp_path: Path, etcd_endpoint: str, namesrv: str, size: int) -> None:
        self.spawn = spawn
        self.tmp_path = tmp_path
        self.namesrv = namesrv
        self.bundle = tmp_path / "failover.toml"
        text = packaged_bundle_path("failover").read_text().replace('"127.0.0.1:2379"', f'"{etcd_endpoint}"')
        self.bundle.write_text(text.replace("leaseTtl = 3", f"leaseTtl = {TTL}")
                               + "slaveSyncInterval = 500\nslaveSyncFirstDelay = 200\n")
        self.ports = {rid: _port() for rid in range(1, size + 1)}
        self.roles: dict = {}

    def addr(self, rid: int) -> str:
        return f"127.0.0.1:{self.ports[rid]}"

    def start(self, rid: int):
        settings = ["flushDiskType=SYNC_FLUSH", "mappedFileSizeCommitLog=4194304", "haSendHeartbeatInterval=500",
                    f"brokerName={GROUP}", f"brokerId={rid}", *TX_SETTINGS]
        self.roles[rid] = self.spawn(
            "broker", "-c", str(self.bundle), "--namesrv", self.namesrv, "--listen", self.addr(rid),
            "--store-dir", str(self.tmp_path / f"replica-{rid}"), *[x for kv in settings for x in ("--set", kv)],
            name=f"replica-{rid}")
        return self.roles[rid]

    def start_all(self) -> None:
        with ThreadPoolExecutor(len(self.ports)) as pool:
            list(pool.map(self.start, self.ports))

    def kill(self, rid: int) -> None:
        self.roles[rid].stop(signal.SIGKILL)


async def _master(etcd: EtcdClient) -> dict | None:
    try:
        kv = await etcd.get(PREFIX + "master")
    except EtcdError:
        return None
    return kv.json() if kv else None


async def _syncset(etcd: EtcdClient) -> set[int]:
    try:
        kv = await etcd.get(PREFIX + "syncset")
    except EtcdError:
        return set()
    return set(kv.json()["members"]) if kv else set()


async def _route_master(namesrv: str) -> str | None:
    async with RemotingClient() as rc:
        response = await rc.invoke(namesrv, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC}))
    if response.code != ResponseCode.SUCCESS:
        return None
    for data in json.loads(response.body_bytes()).get("brokerDatas", []):
        if data["brokerName"] == GROUP:
            return data["brokerAddrs"].get("0")
    return None


async def _invoke(addr: str, request: RemotingCommand) -> RemotingCommand:
    async with RemotingClient() as rc:
        return await rc.invoke(addr, request, timeout=5)


async def _create_topic(addr: str) -> bool:
    try:
        response = await _invoke(addr, RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
            "topic": TOPIC, "defaultTopic": "TBW102", "readQueueNums": "4", "writeQueueNums": "4", "perm": "6",
            "topicFilterType": "SINGLE_TAG"}))
    except RemotingError:
        return False
    return response.code == ResponseCode.SUCCESS


async def _topic_keys(addr: str) -> Counter:
    """How often each key is in the topic on ``addr`` (plain pulls of the 4 queues from offset 0)."""
    keys: Counter = Counter()
    async with RemotingClient() as rc:
        for queue_id in range(4):
            offset = 0
            while True:
                response = await rc.invoke(addr, RemotingCommand.request(RequestCode.PULL_MESSAGE, {
                    "consumerGroup": "txn_reader", "topic": TOPIC, "queueId": str(queue_id),
                    "queueOffset": str(offset), "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0",
                    "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0"}), timeout=5)
                if response.code != ResponseCode.SUCCESS:
                    break
                keys.update(m.properties["KEYS"] for m in decode_messages(response.body_bytes()))
                offset = int(response.ext_fields["nextBeginOffset"])
    return keys


async def _no_pending(namesrv: str) -> bool:
    try:
        async with Admin(namesrv) as admin:
            return await admin.pending_transactions(TOPIC) == []
    except Exception:  # noqa: BLE001 - the route or the master changing under the read
        return False


async def _failover(client: EtcdClient, group: Group, namesrv: str) -> dict:
    """SIGKILL the master; the next one elected and named by the route; the killed replica started again."""
    old = await _master(client)
    group.kill(old["replicaId"])

    async def new_master() -> dict | None:
        master = await _master(client)
        return master if master is not None and master["epoch"] > old["epoch"] else None

    new = await _until(new_master, "a new master holding the lease", TTL + 5, 0.05)
    await _until(lambda: _true(_route_master(namesrv), new["addr"]), "the route naming the new master", 15)
    group.start(old["replicaId"])
    return new


async def _true(value, want) -> bool:
    return await value == want


@pytest.mark.slow
async def test_a_new_master_checks_the_pending_halves_back_and_commits_each_exactly_once(spawn, etcd, tmp_path):
    namesrv = spawn("namesrv", "--listen", "127.0.0.1:0", name="namesrv").listening["namesrv"]
    group = Group(spawn, tmp_path, etcd.endpoint, namesrv, 3)
    group.start_all()
    checks: Counter = Counter()

    def check_local(msg) -> LocalTransactionState:
        key = msg.keys[0]
        checks[key] += 1
        if key.startswith("p-") and int(key[2:]) % 3 == 0:
            return LocalTransactionState.ROLLBACK
        return LocalTransactionState.COMMIT

    async with EtcdClient([etcd.endpoint]) as client:
        master = await _until(lambda: _master(client), "a master elected", 20)
        await _until(lambda: _create_topic(master["addr"]), "the topic created on the master")
        await _until(lambda: _true(_syncset(client), set(group.ports)), "every replica in the in-sync set", 30)
        config = ClientConfig(namesrv_addr=namesrv, poll_name_server_interval=0.5, heartbeat_broker_interval=0.5)
        async with TransactionProducer(config=config, group="failover_txn", check_local=check_local,
                                       send_timeout=5.0) as producer:
            for i in range(10):
                r = await producer.send_in_transaction(Message(TOPIC, b"c", keys=f"c-{i}"),
                                                       lambda m, a: LocalTransactionState.COMMIT)
                assert r.send_result.status.value == "SEND_OK"
            for i in range(20):
                r = await producer.send_in_transaction(Message(TOPIC, b"p", keys=f"p-{i}"),
                                                       lambda m, a: LocalTransactionState.UNKNOWN)
                assert r.send_result.status.value == "SEND_OK"  # every in-sync replica holds the half
            # round 1: the master dies with 20 halves pending (none is 4 s old yet)
            new = await _failover(client, group, namesrv)
            await _until(lambda: _no_pending(namesrv), "every half resolved by the new master", 60, 0.5)
            committed = {f"c-{i}" for i in range(10)} | {f"p-{i}" for i in range(20) if i % 3}
            keys = await _topic_keys(new["addr"])
            assert set(keys) == committed, sorted(set(keys) ^ committed)
            assert set(keys.values()) == {1}, {k: n for k, n in keys.items() if n > 1}
            assert {f"p-{i}" for i in range(20)} <= set(checks)
            # round 2: everything resolved; the next master has nothing to check and commits nothing
            await _until(lambda: _true(_syncset(client), set(group.ports)), "every replica in the in-sync set", 30)
            checked = sum(checks.values())
            third = await _failover(client, group, namesrv)
            await trio.sleep(3)  # six check passes of the third master
            assert sum(checks.values()) == checked
            assert await _topic_keys(third["addr"]) == keys
            assert await _no_pending(namesrv)
    print(json.dumps({"checks": sum(checks.values()), "committed": len(keys),
                      "masters": [master["replicaId"], new["replicaId"], third["replicaId"]]}))
