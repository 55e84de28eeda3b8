"""Kill -9 in the exact window between a scheduler's delivery and its progress record.

The delay levels and the timer wheel deliver a parked message by appending a copy to its real topic, then record
that they did (the level's progress slot, the wheel's done log). A SIGKILL between the two must not deliver the
message again after the restart. Random kills (test_crash.py) hit this window rarely; here a test-only broker
plugin (tests/chaos/probe/chaos_kill.py) kills the broker with SIGKILL from inside the append of the first delivered
copy, after the copy is in the commit log and before the scheduler's next step. The restarted broker must deliver
every parked message exactly once: the checker counts the copies in the store files.
"""

from __future__ import annotations

import signal
import time

import pytest
import trio

from pyrmq.client import Message, Producer, SendStatus

from .harness import PROBE_DIR, Cluster, probe_bundle, read_acks, read_store, report
from .test_crash import PARKED, TOPIC, assert_clean, settle

pytestmark = pytest.mark.chaos

COUNT = 12


async def send_parked(namesrv: str, kind: str, log_path) -> None:
    """Send COUNT messages due in a second (timer) or at delay level 1; log each acknowledged one as the crash
    scenario's producers do (``A cid kind attempts``)."""
    with open(log_path, "w") as log:
        async with Producer(namesrv, group="chaos_kill_window", retry_times=0) as producer:
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
        trio.run(send_parked, cluster.namesrv_addr, kind, acks_log)
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
