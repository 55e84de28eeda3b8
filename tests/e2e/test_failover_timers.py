"""Timer and delay-level messages through a failover (issue 25, defect 1), with real processes on 127.0.0.1: an etcd,
a name server and a group of three SYNC_MASTER replicas (configs/failover.toml). Timer messages (TIMER_DELIVER_MS)
and delay-level messages are parked, every replica holds them, and the master is SIGKILLed long before they are due.
The new master delivers each exactly once and none early: every delivered copy's store time is at or after its due
time (TIMER_DELIVER_MS; a parked record's store time + its level's delay); the killed replica, restarted, follows
the new master and delivers nothing.

``PYRMQ_FAILOVER_TIMER_DUE`` sets how long after sending the messages are due (default 25 s in `make test`;
`make failover` uses 90 s).
"""

from __future__ import annotations

import os
import time
from collections import Counter

import pytest
import trio

from pyrmq.client import Message, Producer
from pyrmq.client.config import ClientConfig
from pyrmq.plugins.broker.failover.etcd import EtcdClient
from pyrmq.remoting.client import RemotingClient
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.errors import RemotingError
from pyrmq.store.format import decode_messages

from .failover_group import TTL, until

DUE_S = int(os.environ.get("PYRMQ_FAILOVER_TIMER_DUE", "25"))
TOPIC = "FailoverTimers"
GROUP = "broker-t"
TIMERS = 20
DELAYED = 10
#: level 2 is due DUE_S seconds after the message is stored
LEVELS = f"1s {DUE_S}s"


async def _call(addr: str, request: RemotingCommand) -> RemotingCommand | None:
    try:
        async with RemotingClient() as rc:
            return await rc.invoke(addr, request, timeout=5)
    except (RemotingError, OSError, trio.TooSlowError):
        return None


def _pull(topic: str, queue_id: int, offset: int) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, {
        "consumerGroup": "failover_timers_check", "topic": topic, "queueId": str(queue_id), "queueOffset": str(offset),
        "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*",
        "subVersion": "0"})


async def _read_queue(addr: str, topic: str, queue_id: int) -> list:
    out, offset = [], 0
    while True:
        answer = await _call(addr, _pull(topic, queue_id, offset))
        if answer is None or answer.code != ResponseCode.SUCCESS:
            return out
        out.extend(decode_messages(answer.body_bytes()))
        offset = int(answer.ext_fields["nextBeginOffset"])


async def _read_topic(addr: str) -> list:
    return [m for queue_id in range(4) for m in await _read_queue(addr, TOPIC, queue_id)]


async def _send(producer: Producer, message: Message) -> None:
    """One send, retried (a fresh attempt after a failure) until SEND_OK."""
    for _ in range(50):
        try:
            result = await producer.send(message, timeout=5)
        except Exception:  # noqa: BLE001 - any failure: try again
            await trio.sleep(0.2)
            continue
        if result.status.value == "SEND_OK":
            return
        await trio.sleep(0.2)
    raise AssertionError(f"{message.keys} never acknowledged")


@pytest.mark.slow
async def test_timer_and_delayed_messages_parked_before_a_kill_are_delivered_once_by_the_new_master(spawn, etcd,
                                                                                                    failover_group):
    namesrv = spawn("namesrv", "--listen", "127.0.0.1:0", name="namesrv").listening["namesrv"]
    group = failover_group(etcd.endpoint, namesrv, 3, f"messageDelayLevel={LEVELS}", name=GROUP)
    group.start_all()
    config = ClientConfig(namesrv_addr=namesrv, poll_name_server_interval=1.0, heartbeat_broker_interval=2.0)
    async with EtcdClient([etcd.endpoint]) as client:
        # elected, the topic created on the master and on every replica, every replica in the in-sync set
        old = await group.ready(client, TOPIC)

        # parked: timer messages due DUE_S seconds from now, delay-level messages at level 2 (DUE_S after storing)
        due: dict[str, int] = {}
        async with Producer(config=config, group="failover_timers", send_timeout=5.0) as producer:
            for i in range(TIMERS):
                key = f"timer-{i}"
                due[key] = int(time.time() * 1000) + DUE_S * 1000
                await _send(producer, Message(TOPIC, key.encode(), keys=[key],
                                              properties={"TIMER_DELIVER_MS": str(due[key])}))
            for i in range(DELAYED):
                key = f"delay-{i}"
                await _send(producer, Message(TOPIC, key.encode(), keys=[key], delay_time_level=2))
        # every replica holds them (SEND_OK under SYNC_MASTER: every in-sync replica acknowledged each)
        await until(lambda: group.holds_all(old["replicaId"]), "the parked messages on every replica", 30)
        assert await _read_topic(group.addr(old["replicaId"])) == []  # none due yet

        group.kill(old["replicaId"])
        new = await until(lambda: group.new_master(client, old["epoch"]), "a new master elected", TTL + 10, 0.05)
        assert new["replicaId"] != old["replicaId"]
        group.start(old["replicaId"])  # the old master returns as a replica: it must not deliver them again

        addr = group.addr(new["replicaId"])
        wanted = set(due) | {f"delay-{i}" for i in range(DELAYED)}

        async def all_delivered():
            got = await _read_topic(addr)
            return got if {m.body.decode() for m in got} >= wanted else None

        await until(all_delivered, "every parked message delivered by the new master", DUE_S + 90, 0.5)
        # the restarted replica caught up and back in the in-sync set: whatever it would have delivered is here
        await until(lambda: group.full(client), "every replica in the in-sync set", 60)
        await until(lambda: group.holds_all(new["replicaId"]), "every replica holding the new master's log", 30)
        delivered = await _read_topic(addr)
        parked = {m.properties["UNIQ_KEY"]: m for q in range(2) for m in await _read_queue(addr, "SCHEDULE_TOPIC_XXXX", q)}

    counts = Counter(m.body.decode() for m in delivered)
    assert set(counts) == wanted and set(counts.values()) == {1}, sorted(k for k, n in counts.items() if n > 1)
    early = []
    for m in delivered:
        key = m.body.decode()
        if key in due:
            due_ms = int(m.properties["TIMER_DELIVER_MS"])
            assert due_ms == due[key]
        else:
            due_ms = parked[m.properties["UNIQ_KEY"]].store_timestamp + DUE_S * 1000
        if m.store_timestamp < due_ms:
            early.append((key, due_ms - m.store_timestamp))
    assert not early, f"delivered before due (key, ms early): {early}"
    print(f"failover with {TIMERS} timer and {DELAYED} delayed messages due {DUE_S} s after sending: each delivered "
          f"once by replica {new['replicaId']} (epoch {new['epoch']}), latest "
          f"{max(m.store_timestamp - (due.get(m.body.decode()) or 0) for m in delivered if m.body.decode() in due)} ms after due")
