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
from collections import Counter

import pytest
import trio

from pyrmq.client import Admin, ClientConfig, LocalTransactionState, Message, TransactionProducer
from pyrmq.plugins.broker.failover.etcd import EtcdClient
from pyrmq.remoting.client import RemotingClient
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.store.format import decode_messages

from .failover_group import TTL, FailoverGroup, equals, route_master, until

TOPIC = "FailoverTxn"
GROUP = "broker-x"
#: a half is checked 4 s after its birth: the first master is killed long before
TX_SETTINGS = ("transactionTimeOut=4000", "transactionCheckInterval=500")


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


async def _no_pending(namesrv: str, master: str) -> bool:
    """No pending half on ``master``, the master the name server lists for the group (a listing without it, the
    master gone, would be empty too)."""
    try:
        async with Admin(namesrv) as admin:
            data = (await admin.cluster_info()).brokers.get(GROUP)
            if data is None or data.broker_addrs.get(0) != master:
                return False
            return await admin.pending_transactions(TOPIC) == []
    except Exception:  # noqa: BLE001 - the route or the master changing under the read
        return False


async def _failover(client: EtcdClient, group: FailoverGroup, namesrv: str) -> dict:
    """SIGKILL the master; the next one elected and named by the route; the killed replica started again."""
    old = await group.master(client)
    group.kill(old["replicaId"])
    new = await until(lambda: group.new_master(client, old["epoch"]), "a new master holding the lease", TTL + 5, 0.05)
    await until(lambda: equals(route_master(namesrv, TOPIC, GROUP), new["addr"]),
                            "the route naming the new master", 15)
    group.start(old["replicaId"])
    return new


@pytest.mark.slow
async def test_a_new_master_checks_the_pending_halves_back_and_commits_each_exactly_once(spawn, etcd, failover_group):
    namesrv = spawn("namesrv", "--listen", "127.0.0.1:0", name="namesrv").listening["namesrv"]
    group = failover_group(etcd.endpoint, namesrv, 3, *TX_SETTINGS, name=GROUP)
    group.start_all()
    checks: Counter = Counter()

    def check_local(msg) -> LocalTransactionState:
        key = msg.keys[0]
        checks[key] += 1
        if key.startswith("p-") and int(key[2:]) % 3 == 0:
            return LocalTransactionState.ROLLBACK
        return LocalTransactionState.COMMIT

    async with EtcdClient([etcd.endpoint]) as client:
        master = await group.ready(client, TOPIC)  # elected, the topic on every replica, all of them in sync
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
            await until(lambda: _no_pending(namesrv, new["addr"]), "every half resolved by the new master", 60, 0.5)
            committed = {f"c-{i}" for i in range(10)} | {f"p-{i}" for i in range(20) if i % 3}
            keys = await _topic_keys(new["addr"])
            assert set(keys) == committed, sorted(set(keys) ^ committed)
            assert set(keys.values()) == {1}, {k: n for k, n in keys.items() if n > 1}
            assert {f"p-{i}" for i in range(20)} <= set(checks)
            # round 2: everything resolved; the next master has nothing to check and commits nothing
            await until(lambda: group.full(client), "every replica in the in-sync set", 30)
            checked = sum(checks.values())
            third = await _failover(client, group, namesrv)
            await trio.sleep(3)  # six check passes of the third master
            assert sum(checks.values()) == checked
            assert await _topic_keys(third["addr"]) == keys
            assert await _no_pending(namesrv, third["addr"])
    print(json.dumps({"checks": sum(checks.values()), "committed": len(keys),
                      "masters": [master["replicaId"], new["replicaId"], third["replicaId"]]}))
