"""HA interop with Apache RocketMQ's Java broker 4.9.7 (tests/e2e/java/javabroker.py; 4.9.8's broker is not on
Maven Central): a Java slave replicating from a pyrmq SYNC_MASTER and serving the official Java consumer once the
master is gone, and a pyrmq slave replicating from a Java SYNC_MASTER. Both check the commit logs byte for byte."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

from pyrmq.client import Message, Producer
from pyrmq.client.config import ClientConfig
from pyrmq.kernel.bundles import packaged_bundle_path
from pyrmq.remoting.client import RemotingClient
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.store.format import decode_messages

sys.path.insert(0, str(Path(__file__).resolve().parent / "java"))
from javabroker import JavaRocketMQ  # noqa: E402

pytestmark = pytest.mark.slow

FILE_SIZE = 8 * 1024 * 1024
COUNT = 300


def _create_topic(topic: str) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
        "topic": topic, "defaultTopic": "TBW102", "readQueueNums": "4", "writeQueueNums": "4", "perm": "6",
        "topicFilterType": "SINGLE_TAG"})


def _first_file(store: Path) -> bytes:
    return (store / "commitlog" / f"{0:020d}").read_bytes()


async def _send_replicated(namesrv: str, topic: str, until) -> tuple[list[str], int]:
    """Sends until the master acknowledges a replicated send, then COUNT more; all must be SEND_OK. Returns the
    bodies and how many probes were stored before."""
    config = ClientConfig(namesrv_addr=namesrv, poll_name_server_interval=1.0)
    probes = 0
    async with Producer(config=config, group="ha_interop") as producer:
        async def replicated():
            nonlocal probes
            try:
                status = (await producer.send(Message(topic, b"probe"))).status.value
            except Exception:  # noqa: BLE001 - route not there yet
                return False
            probes += 1
            return status == "SEND_OK"

        await until(replicated, "a SYNC_MASTER send acknowledged by the slave", 90)
        statuses = []
        for i in range(COUNT):
            statuses.append((await producer.send(Message(topic, f"m-{i}".encode(), keys=[f"m-{i}"]))).status.value)
    assert statuses == ["SEND_OK"] * COUNT
    return [f"m-{i}" for i in range(COUNT)], probes


async def test_a_java_slave_replicates_from_a_pyrmq_master_and_serves_a_java_consumer(spawn, tmp_path, java_driver,
                                                                                    broker_port, until):
    namesrv = spawn("namesrv", "--listen", "127.0.0.1:0", name="namesrv").listening["namesrv"]
    mport = broker_port()
    mstore = tmp_path / "master"
    master = spawn("broker", "-c", "broker", "--namesrv", namesrv, "--listen", f"127.0.0.1:{mport}",
                   "--store-dir", str(mstore), "--set", "brokerRole=SYNC_MASTER",
                   "--set", f"mappedFileSizeCommitLog={FILE_SIZE}", name="master")
    java = JavaRocketMQ(tmp_path / "java", tmp_path / "java-slave", broker_conf={
        "brokerRole": "SLAVE", "brokerId": 1, "namesrvAddr": namesrv, "mappedFileSizeCommitLog": FILE_SIZE,
        "haSendHeartbeatInterval": 500})
    try:
        java.start_broker()
        async with RemotingClient() as rc:
            assert (await rc.invoke(master.listening["broker"], _create_topic("HaJava"))).code == ResponseCode.SUCCESS
        bodies, probes = await _send_replicated(namesrv, "HaJava", until)

        async def same():
            return _first_file(mstore) == _first_file(tmp_path / "java-slave")

        await until(same, "the Java slave's commit log equal to the pyrmq master's")
        master.stop(signal.SIGKILL)
        driver = java_driver(namesrv, tmp_path)
        driver.call("consume", name="from-slave", group="gHaJava", topic="HaJava")
        got = driver.call("collect", name="from-slave", count=COUNT + probes, timeoutMs=60_000, quietMs=0, timeout=80)["msgs"]
        assert set(bodies) <= {m["body"] for m in got}
    finally:
        java.stop()


async def test_a_pyrmq_slave_replicates_from_a_java_master(spawn, tmp_path, broker_port, until):
    java = JavaRocketMQ(tmp_path / "java", tmp_path / "java-master", broker_conf={
        "brokerRole": "SYNC_MASTER", "mappedFileSizeCommitLog": FILE_SIZE})
    with java:
        sport = broker_port()
        sstore = tmp_path / "slave"
        bundle = tmp_path / "slave.toml"
        bundle.write_text(packaged_bundle_path("broker").read_text()
                          + '\n[plugins."pyrmq.plugins.broker.ha.plugin"]\nslaveSyncInterval = 500\nslaveSyncFirstDelay = 200\n')
        slave = spawn("broker", "-c", str(bundle), "--namesrv", java.namesrv_addr, "--listen", f"127.0.0.1:{sport}",
                      "--store-dir", str(sstore), "--set", "brokerRole=SLAVE", "--set", "brokerId=1",
                      "--set", f"mappedFileSizeCommitLog={FILE_SIZE}", "--set", "haSendHeartbeatInterval=500",
                      name="slave")
        async with RemotingClient() as rc:
            assert (await rc.invoke(java.broker_addr, _create_topic("HaFromJava"))).code == ResponseCode.SUCCESS
            bodies, _ = await _send_replicated(java.namesrv_addr, "HaFromJava", until)

            async def same():
                return _first_file(tmp_path / "java-master") == _first_file(sstore)

            await until(same, "the pyrmq slave's commit log equal to the Java master's")

            # the slave's own consume queues serve pulls once the topic config came over from the Java master
            async def pulled():
                got = []
                for qid in range(4):
                    pull = {"consumerGroup": "gFromJava", "topic": "HaFromJava", "queueId": str(qid), "queueOffset": "0",
                            "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0",
                            "subscription": "*", "subVersion": "0"}
                    offset = 0
                    while True:
                        pull["queueOffset"] = str(offset)
                        resp = await rc.invoke(slave.listening["broker"], RemotingCommand.request(RequestCode.PULL_MESSAGE, pull))
                        if resp.code != ResponseCode.SUCCESS:
                            break
                        msgs = decode_messages(resp.body_bytes())
                        got += [m.body.decode() for m in msgs]
                        offset = int(resp.ext_fields["nextBeginOffset"])
                return set(bodies) <= set(got)

            await until(pulled, "every message pulled from the pyrmq slave", 30)
