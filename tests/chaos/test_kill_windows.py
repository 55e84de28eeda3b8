"""Kill -9 in the exact window between an append and the record that says it was made.

The delay levels and the timer wheel deliver a parked message by appending a copy to its real topic, then record
that they did (the level's progress slot, the wheel's done log); a transaction's commit appends the message to its
real topic, then the op record that closes the half. A SIGKILL between the two must not deliver the message again
after the restart. Random kills (test_crash.py) hit these windows rarely; here a test-only broker plugin
(tests/chaos/probe/chaos_kill.py) kills the broker with SIGKILL from inside the append of the first delivered copy or
commit, after it is in the commit log and before the next step. The restarted broker must deliver every message
exactly once: the checker counts the copies in the store files.
"""

from __future__ import annotations

import signal
import time

import pytest
import trio

from pyrmq.client import ClientConfig, LocalTransactionState, Message, Producer, SendStatus, TransactionProducer

from .harness import PROBE_DIR, Cluster, probe_bundle, read_acks, read_store, report
from .test_crash import PARKED, TOPIC, TX_SETTINGS, assert_clean, settle

pytestmark = pytest.mark.chaos

COUNT = 12


async def send_parked(cluster: Cluster, kind: str, log_path) -> None:
    """Send COUNT messages due in a second (timer) or at delay level 1; log each acknowledged one as the crash
    scenario's producers do (``A cid kind attempts``)."""
    await cluster.registered()  # the topic does not exist yet: the producer needs TBW102's route
    with open(log_path, "w") as log:
        async with Producer(cluster.namesrv_addr, group="chaos_kill_window", retry_times=0) as producer:
            for i in range(COUNT):
                cid = f"{kind}-{i}"
                m = Message(TOPIC, cid.encode(), tags=kind, keys=[cid], properties={"cid": cid})
                if kind == "timer":
                    m.properties["TIMER_DELAY_SEC"] = "1"
                else:
                    m.delay_time_level = 1
                r = await producer.send(m, timeout=5)
                assert r.status is SendStatus.SEND_OK, r
                log.write(f"A {cid} {kind} 1\n")


@pytest.mark.parametrize("kind", ["timer", "delay"])
def test_a_kill_between_delivery_and_progress_does_not_deliver_twice(tmp_path, kind):
    kill_file = tmp_path / "kill"
    cluster = Cluster(tmp_path, {"messageDelayLevel": "1s 2s"},
                      bundle=str(probe_bundle(tmp_path / "broker-kill.toml", "chaos_kill")),
                      broker_env={"PYTHONPATH": str(PROBE_DIR), "CHAOS_KILL_FILE": str(kill_file)})
    acks_log = tmp_path / "producer.acks"
    try:
        cluster.start_namesrv()
        kill_file.write_text(kind)
        cluster.start_broker()
        trio.run(send_parked, cluster, kind, acks_log)
        t_end = time.monotonic() + 30
        while cluster.broker.poll() is None:
            assert time.monotonic() < t_end, f"no {kind} delivery reached the kill switch within 30 s"
            time.sleep(0.05)
        assert cluster.broker.returncode == -signal.SIGKILL, f"the broker exited with {cluster.broker.returncode}"
        assert not kill_file.exists()
        acks, _ = read_acks([acks_log])
        img = read_store(cluster.store_dir)
        delivered_at_kill = sum(1 for r in img.records if r.topic == TOPIC)
        assert delivered_at_kill >= 1, "the kill came before the delivered copy was appended"
        recovery_s = cluster.start_broker()
        figures, img = settle(cluster, acks, final=True, deadline_s=30)
        assert_clean(figures, img, f"{kind} kill window, {cluster.root}")
        assert figures["pending_delivery"] == 0, f"{kind} messages not delivered after the restart"
        parked = sum(1 for r in img.records if r.topic in PARKED)
        delivered = sum(1 for r in img.records if r.topic == TOPIC)
        assert parked == delivered == COUNT
        # the restarted broker recognised the copy made just before the kill (and says so)
        assert "just before the crash" in cluster.broker_log.read_text(errors="replace")
    finally:
        cluster.close()
    report(f"kill window: {kind} delivery before its progress record", parked=COUNT,
           delivered_before_kill=delivered_at_kill, delivered=delivered, duplicated=figures["duplicated"],
           recovery_s=f"{recovery_s:.2f}")


def test_a_kill_between_a_commit_and_its_op_record_does_not_commit_twice(tmp_path):
    """The broker is killed inside the append of a transaction's commit: the message is in its topic, the op record
    that closes the half is not. After the restart the half must not be checked back and committed again."""
    kill_file = tmp_path / "kill"
    cluster = Cluster(tmp_path, {**TX_SETTINGS, "transactionTimeOut": "1000"},
                      bundle=str(probe_bundle(tmp_path / "broker-kill.toml", "chaos_kill")),
                      broker_env={"PYTHONPATH": str(PROBE_DIR), "CHAOS_KILL_FILE": str(kill_file)})
    checked: list[str] = []

    def copies(cid: str) -> int:
        return sum(1 for r in read_store(cluster.store_dir).records if r.topic == TOPIC and r.properties.get("cid") == cid)

    def check_local(msg) -> LocalTransactionState:
        checked.append(msg.properties["cid"])
        return LocalTransactionState.COMMIT

    async def scenario() -> float:
        await cluster.registered()  # the topic does not exist yet: the producer needs TBW102's route
        config = ClientConfig(namesrv_addr=cluster.namesrv_addr, heartbeat_broker_interval=1.0)
        async with TransactionProducer(config=config, group="chaos_kill_commit", retry_times=0,
                                       check_local=check_local) as producer:
            m = Message(TOPIC, b"committed", keys=["c-0"], properties={"cid": "c-0"})
            r = await producer.send_in_transaction(m, lambda msg, arg: LocalTransactionState.COMMIT, timeout=5)
            assert r.send_result.status is SendStatus.SEND_OK
            with trio.fail_after(30):  # END_TRANSACTION is oneway: the commit's append kills the broker
                while cluster.broker.poll() is None:
                    await trio.sleep(0.05)
            assert cluster.broker.returncode == -signal.SIGKILL, f"the broker exited with {cluster.broker.returncode}"
            assert copies("c-0") == 1 and not kill_file.exists()
            recovery_s = cluster.start_broker()
            # a second transaction left UNKNOWN: once the check-back committed it, the check service has made its
            # passes after the restart; a check of the first half would have come before (queue order, one connection)
            m = Message(TOPIC, b"checked", keys=["u-1"], properties={"cid": "u-1"})
            await producer.send_in_transaction(m, lambda msg, arg: LocalTransactionState.UNKNOWN, timeout=5)
            with trio.fail_after(60):
                while copies("u-1") == 0:
                    await trio.sleep(0.2)
        return recovery_s

    try:
        cluster.start_namesrv()
        kill_file.write_text("commit")
        cluster.start_broker()
        recovery_s = trio.run(scenario)
        delivered = copies("c-0")
        log = cluster.broker_log.read_text(errors="replace")
    finally:
        cluster.close()
    assert "u-1" in checked
    assert delivered == 1, f"the transaction committed before the kill is in the topic {delivered} times"
    assert "c-0" not in checked, "the half committed before the kill was checked back"
    assert "its op record was not written" in log
    report("kill window: transaction commit before its op record", committed=1, delivered=delivered,
           checked_back=checked.count("c-0"), recovery_s=f"{recovery_s:.2f}")
