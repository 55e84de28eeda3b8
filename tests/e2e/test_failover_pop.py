"""POP across automatic failover, with real processes on 127.0.0.1 (issue 26): an etcd, a name server and a group
of 3 replicas (configs/failover.toml); two POP consumer processes (tests/chaos/pop_proc.py, the real
``SimpleConsumer``) consuming 1,000 messages at a bounded pace, each message invisible for 3 s, every 5th first
delivery left unacked.

The master is SIGKILLed twice while messages are popped and not acked; each time another replica is elected and
reads the POP state (checkpoints, acks, pop offsets) from its own replicated store. Once every message's last
delivery is acked: none lost (every unacked delivery came again), no acked message delivered again, no redelivery
before its invisible time (the checks of tests/chaos/test_pop_crash.py, on the consumers' logs).
"""

from __future__ import annotations

import importlib.util
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

from pyrmq.client import ClientConfig, Message, Producer
from pyrmq.plugins.broker.failover.etcd import EtcdClient

from .failover_group import TTL, equals, route_master, until

TOPIC = "PopFailover"
GROUP = "broker-p"
CONSUMER_GROUP = "GPOPFAIL"
INVISIBLE_MS = 3000
COUNT = 1000
POP_PROC = Path(__file__).parents[1] / "chaos" / "pop_proc.py"


def _pop_proc():
    """tests/chaos/pop_proc.py (the consumer process and its log checker), loaded by path."""
    spec = importlib.util.spec_from_file_location("pop_proc", POP_PROC)
    module = importlib.util.module_from_spec(spec)
    sys.modules["pop_proc"] = module
    spec.loader.exec_module(module)
    return module


def _in_flight(pop_proc, logs: list[Path]) -> int:
    now = int(time.time() * 1000)
    return sum(1 for ds in pop_proc.read(logs).values() for d in ds if d.acked is None and d.due > now)


@pytest.mark.slow
async def test_pop_across_two_failovers_loses_nothing_and_delivers_no_acked_message_again(spawn, etcd, tmp_path,
                                                                                          failover_group):
    pop_proc = _pop_proc()
    namesrv = spawn("namesrv", "--listen", "127.0.0.1:0", name="namesrv").listening["namesrv"]
    group = failover_group(etcd.endpoint, namesrv, 3, name=GROUP)
    group.start_all()
    consumers: list[subprocess.Popen] = []
    logs = [tmp_path / f"pop-{i}.log" for i in range(2)]
    masters, at_failover = [], []
    try:
        async with EtcdClient([etcd.endpoint]) as client:
            master = await group.ready(client, TOPIC)
            masters.append(master["replicaId"])
            await until(lambda: equals(route_master(namesrv, TOPIC, GROUP), master["addr"]), "the route naming the master",
                        15)
            keys = [f"m{i}" for i in range(COUNT)]
            config = ClientConfig(namesrv_addr=namesrv, poll_name_server_interval=0.5)
            async with Producer(config=config, group="pop_failover_producer", send_timeout=5.0) as producer:
                for start in range(0, COUNT, 100):
                    results = await producer.send_batch([Message(TOPIC, k.encode() * 16, keys=k)
                                                         for k in keys[start:start + 100]])
                    assert all(r.status.value == "SEND_OK" for r in results)
            for i, log in enumerate(logs):
                consumers.append(subprocess.Popen(
                    [sys.executable, str(POP_PROC), namesrv, TOPIC, CONSUMER_GROUP, str(log), str(INVISIBLE_MS), "60",
                     "5"], stdout=open(tmp_path / f"pop-{i}.out", "ab"), stderr=subprocess.STDOUT))
            for _ in range(2):
                await until(lambda: group.full(client), "every replica in the in-sync set", 30)

                async def popped_not_acked() -> int:
                    assert all(c.poll() is None for c in consumers), f"a consumer exited: see {tmp_path}"
                    return _in_flight(pop_proc, logs)

                await until(popped_not_acked, "messages popped and not acked", 30)
                at_failover.append(_in_flight(pop_proc, logs))
                old = await group.master(client)
                group.kill(old["replicaId"])
                new = await until(lambda: group.new_master(client, old["epoch"]), "a new master holding the lease",
                                  TTL + 8, 0.05)
                masters.append(new["replicaId"])
                await until(lambda: equals(route_master(namesrv, TOPIC, GROUP), new["addr"]),
                            "the route naming the new master", 15)
                group.start(old["replicaId"])
            deadline = time.monotonic() + 120
            while not pop_proc.settled(logs, keys):
                assert time.monotonic() < deadline, (f"not every message consumed after the failovers: see {tmp_path}; "
                                                     f"{pop_proc.analyse(logs, keys).figures()}")
                assert all(c.poll() is None for c in consumers), f"a consumer exited: see {tmp_path}"
                await trio.sleep(0.5)
            await trio.sleep(INVISIBLE_MS / 1000 + 2)  # an acked message delivered again would show by now
    finally:
        for c in consumers:
            if c.poll() is None:
                c.send_signal(signal.SIGKILL)
                c.wait(10)
    result = pop_proc.analyse(logs, keys)
    assert all(n > 0 for n in at_failover), f"a failover found no message popped and not acked: {at_failover}"
    assert not result.lost, f"{len(result.lost)} messages lost: {result.lost[:10]}; see {tmp_path}"
    assert not result.acked_again, f"acked messages delivered again: {result.acked_again[:10]}; see {tmp_path}"
    assert not result.early, f"redelivered before the invisible time ended: {result.early[:10]}; see {tmp_path}"
    print(json.dumps({"masters": masters, "popped_not_acked_at_failover": at_failover, **result.figures()}))
