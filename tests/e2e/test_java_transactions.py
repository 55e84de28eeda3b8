"""Transaction messages between pyrmq and Apache RocketMQ's own Java code, both directions.

(a) The official Java client's ``TransactionMQProducer`` (4.9.8; tests/e2e/java/txn/TxnPeer.java) against `pyrmq`
    (name server + broker subprocesses): its commit and rollback, and the broker's check-backs (CHECK_TRANSACTION_STATE
    decoded by the Java client, answered by END_TRANSACTION) commit and roll back the undecided ones.
(b) pyrmq's ``TransactionProducer`` against the Apache RocketMQ 4.9.7 Java broker: the same four outcomes, the
    Java broker's check-backs answered by ``check_local``; ``pyrmq admin``'s pending listing reads its queues too.

Checks run every second on halves older than a second on both brokers.
"""

from __future__ import annotations

import collections
import json
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from pyrmq.client import Admin, LocalTransactionState, Message, PullConsumer, TransactionProducer
from pyrmq.client.message import PullStatus
from pyrmq.store.format import TRANSACTION_COMMIT_TYPE, TRANSACTION_TYPE_MASK

sys.path.insert(0, str(Path(__file__).resolve().parent / "java"))
from javabroker import JavaRocketMQ  # noqa: E402
from javapeers import compile_sources, java_command  # noqa: E402

pytestmark = pytest.mark.slow

TXN_SRC = Path(__file__).resolve().parent / "java" / "txn"
FAST = {"transactionCheckInterval": 1000, "transactionTimeOut": 1000}


async def pull_topic(namesrv: str, topic: str) -> list:
    out = []
    async with PullConsumer(namesrv, "txn_reader") as consumer:
        for mq in await consumer.fetch_queues(topic):
            offset = 0
            while True:
                result = await consumer.pull(mq, "*", offset, 32)
                if result.status is not PullStatus.FOUND:
                    break
                out.extend(result.messages)
                offset = result.next_begin_offset
    return out


async def wait_for_messages(namesrv: str, topic: str, n: int, timeout: float = 30.0) -> list:
    with trio.fail_after(timeout):
        while True:
            try:
                found = await pull_topic(namesrv, topic)
            except Exception:  # noqa: BLE001 - the topic's route may not be there yet
                found = []
            if len(found) >= n:
                return found
            await trio.sleep(0.2)


def test_the_java_transaction_producer_commits_rolls_back_and_answers_checks_of_pyrmq(spawn, tmp_path, broker_port):
    classes = compile_sources(TXN_SRC, "client")
    namesrv = spawn("namesrv", "--listen", "127.0.0.1:0", name="namesrv").listening["namesrv"]
    spawn("broker", "-c", "broker", "--namesrv", namesrv, "--listen", f"127.0.0.1:{broker_port()}",
          "--store-dir", str(tmp_path / "store"), *(a for k, v in FAST.items() for a in ("--set", f"{k}={v}")),
          name="broker")
    argv = java_command("client", "TxnPeer", namesrv, "JavaTxn", "java_txn_pg", extra_classpath=[classes], heap="128m",
                        props={"user.home": str(tmp_path)})
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"TxnPeer failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
    lines = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    sent = {e["sent"]: e for e in lines if "sent" in e}
    assert {k: (e["status"], e["local"]) for k, e in sent.items()} == {
        "commit-1": ("SEND_OK", "COMMIT_MESSAGE"), "rollback-1": ("SEND_OK", "ROLLBACK_MESSAGE"),
        "check-commit-1": ("SEND_OK", "UNKNOW"), "check-rollback-1": ("SEND_OK", "UNKNOW")}
    checks = [e for e in lines if "check" in e]
    # each undecided transaction checked once, the check message decoded under its real topic
    assert sorted(e["check"] for e in checks) == ["check-commit-1", "check-rollback-1"]
    assert all(e["topic"] == "JavaTxn" and e["checkTimes"] == "1" for e in checks)
    assert lines[-1] == {"done": True}

    async def read():
        messages = await wait_for_messages(namesrv, "JavaTxn", 2)
        await trio.sleep(1.5)  # another check pass: nothing else arrives
        return messages, await pull_topic(namesrv, "JavaTxn")

    first, messages = trio.run(read)
    assert sorted(m.keys[0] for m in messages) == ["check-commit-1", "commit-1"]
    for m in messages:
        assert m.tags == "java-tag" and m.properties["shop"] == "17" and m.body == f"body of {m.keys[0]}".encode()
        assert m.msg_id == sent[m.keys[0]]["msgId"]
        assert m.sys_flag & TRANSACTION_TYPE_MASK == TRANSACTION_COMMIT_TYPE
        assert not {"TRAN_MSG", "REAL_TOPIC", "REAL_QID"} & set(m.properties)


def test_the_pyrmq_transaction_producer_against_the_java_broker(tmp_path):
    with JavaRocketMQ(tmp_path / "java", tmp_path / "store", broker_conf=FAST) as rmq:
        namesrv = rmq.namesrv_addr

        async def main():
            checks = collections.Counter()

            def check_local(msg):
                checks[msg.keys[0]] += 1
                return LocalTransactionState.COMMIT if msg.keys[0].startswith("check-commit") else LocalTransactionState.ROLLBACK

            async with TransactionProducer(namesrv, "py_txn_pg", check_local=check_local) as producer:
                states = {}
                for key, local in (("commit-1", LocalTransactionState.COMMIT), ("rollback-1", LocalTransactionState.ROLLBACK),
                                   ("check-commit-1", LocalTransactionState.UNKNOWN), ("check-rollback-1", LocalTransactionState.UNKNOWN)):
                    msg = Message("PyTxn", f"body of {key}", tags="py-tag", keys=key, properties={"shop": "17"})
                    result = await producer.send_in_transaction(msg, lambda m, a: a, local)
                    states[key] = result.local_state
                assert states["check-commit-1"] is LocalTransactionState.UNKNOWN
                with trio.fail_after(40):
                    while set(checks) != {"check-commit-1", "check-rollback-1"}:
                        await trio.sleep(0.1)
                messages = await wait_for_messages(namesrv, "PyTxn", 2)
                await trio.sleep(1.5)  # another check pass: nothing else arrives
                messages = await pull_topic(namesrv, "PyTxn")
                async with Admin(namesrv) as admin:
                    pending = await admin.pending_transactions("PyTxn")
            return checks, messages, pending

        checks, messages, pending = trio.run(main)
    assert sorted(m.keys[0] for m in messages) == ["check-commit-1", "commit-1"]
    for m in messages:
        assert m.tags == "py-tag" and m.properties["shop"] == "17" and m.body == f"body of {m.keys[0]}".encode()
        assert m.sys_flag & TRANSACTION_TYPE_MASK == TRANSACTION_COMMIT_TYPE
    assert set(checks) == {"check-commit-1", "check-rollback-1"}
    assert pending == []
