"""Master/slave replication (plugins/broker/ha/) in-process on real sockets: the RocketMQ 4.x HA wire, SYNC_MASTER
answers, the slave's store and metadata, and the replicator hook."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import trio

from pyrmq.kernel.bundles import packaged_bundle_path
from pyrmq.kernel.hookspecs import hookimpl
from pyrmq.plugins.broker.core import BROKER
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.store.config_files import DelayOffsetFile, config_path
from pyrmq.store.format import decode_messages, encode_properties
from pyrmq.store.results import PutMessageStatus

GROUP = "g-ha"


def send_request(topic, body, props=None, *, queue_id=0):
    properties = {"UNIQ_KEY": f"U{time.monotonic_ns():030d}"[:32]}
    properties.update(props or {})
    fields = {
        "producerGroup": "pg", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": 4,
        "queueId": queue_id, "sysFlag": 0, "bornTimestamp": int(time.time() * 1000), "flag": 0,
        "properties": encode_properties(properties), "reconsumeTimes": 0, "unitMode": False,
    }
    return RemotingCommand.request(RequestCode.SEND_MESSAGE, fields, body)


def pull_request(topic, queue_id=0, offset=0, max_nums=32):
    fields = {
        "consumerGroup": GROUP, "topic": topic, "queueId": str(queue_id), "queueOffset": str(offset),
        "maxMsgNums": str(max_nums), "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0",
        "subscription": "*", "subVersion": "0",
    }
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, fields)


def create_topic(topic, queues=4):
    return RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
        "topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(queues), "writeQueueNums": str(queues),
        "perm": "6", "topicFilterType": "SINGLE_TAG",
    })


def fast_sync_bundle(tmp_path: Path, name: str) -> str:
    """The packaged bundle with the slave's metadata sync every 300 ms (first after 100 ms)."""
    text = packaged_bundle_path(name).read_text()
    path = tmp_path / f"{name}-fast-sync.toml"
    path.write_text(text + '\n[plugins."pyrmq.plugins.broker.ha.plugin"]\nslaveSyncInterval = 300\nslaveSyncFirstDelay = 100\n')
    return str(path)


async def master_and_slave(start_role, tmp_path, role="SYNC_MASTER", master_overrides=None, **slave_overrides):
    master = await start_role("dev", {"broker.brokerRole": role, "broker.haSendHeartbeatInterval": 200, **(master_overrides or {})})
    namesrv = master.listening["namesrv"]
    overrides = {
        "broker.brokerRole": "SLAVE", "broker.brokerId": 1, "broker.namesrvAddr": namesrv,
        "broker.haSendHeartbeatInterval": 200,
    }
    overrides.update(slave_overrides)
    slave = await start_role(fast_sync_bundle(tmp_path, "broker"), overrides)
    return master, slave


async def wait_for(predicate, timeout=15.0):
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.05)


async def test_sync_master_send_is_acknowledged_once_the_slave_has_it(start_role, remoting_client, tmp_path):
    master, slave = await master_and_slave(start_role, tmp_path)
    mctx, sctx = master.state.get(BROKER), slave.state.get(BROKER)
    maddr, saddr = master.listening["broker"], slave.listening["broker"]
    await wait_for(lambda: mctx.replicator.ha.slaves)
    assert (await remoting_client.invoke(maddr, create_topic("THA", 2))).code == ResponseCode.SUCCESS
    codes = []
    for i in range(200):
        resp = await remoting_client.invoke(maddr, send_request("THA", b"m%d" % i, {"KEYS": f"k{i}"}, queue_id=i % 2))
        codes.append(resp.code)
        # acknowledged SUCCESS means the slave has the message already
        assert sctx.store.commit_log.max_offset >= mctx.replicator.ha.push_to_slave_max
    assert codes == [ResponseCode.SUCCESS] * 200
    await wait_for(lambda: sctx.store.commit_log.max_offset == mctx.store.commit_log.max_offset)
    # byte for byte
    m_file = mctx.store.commit_log.queue.files[0]
    s_file = sctx.store.commit_log.queue.files[0]
    n = mctx.store.commit_log.max_offset
    assert bytes(m_file.view[:n]) == bytes(s_file.view[:n])
    # the slave's own consume queues answer the same pulls (after the topic config is synchronised)
    await wait_for(lambda: sctx.topics.get("THA") is not None)
    for qid in (0, 1):
        m = decode_messages((await remoting_client.invoke(maddr, pull_request("THA", qid, 0))).body_bytes())
        s_resp = await remoting_client.invoke(saddr, pull_request("THA", qid, 0))
        assert s_resp.code == ResponseCode.SUCCESS, s_resp.remark
        s = decode_messages(s_resp.body_bytes())
        assert [x.body for x in s] == [x.body for x in m] and len(m) == 32
    # the slave refuses sends
    resp = await remoting_client.invoke(saddr, send_request("THA", b"no"))
    assert resp.code == ResponseCode.SERVICE_NOT_AVAILABLE and "slave" in resp.remark


async def test_sync_master_without_a_slave_answers_slave_not_available_and_stores(start_role, remoting_client):
    master = await start_role("dev", {"broker.brokerRole": "SYNC_MASTER"})
    maddr = master.listening["broker"]
    await remoting_client.invoke(maddr, create_topic("TNS", 1))
    resp = await remoting_client.invoke(maddr, send_request("TNS", b"x"))
    assert resp.code == ResponseCode.SLAVE_NOT_AVAILABLE and resp.ext_fields["queueOffset"] == "0"
    # WAIT=false does not wait for a slave at all
    resp = await remoting_client.invoke(maddr, send_request("TNS", b"y", {"WAIT": "false"}))
    assert resp.code == ResponseCode.SUCCESS
    got = decode_messages((await remoting_client.invoke(maddr, pull_request("TNS", 0, 0))).body_bytes())
    assert [m.body for m in got] == [b"x", b"y"]


class StalledSlave:
    """A raw HA peer speaking the 4.x wire: reports offset 0 once, then reads and never acknowledges."""

    def __init__(self) -> None:
        self.received = bytearray()

    async def run(self, addr: str, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        host, _, port = addr.rpartition(":")
        stream = await trio.open_tcp_stream(host, int(port))
        async with stream:
            await stream.send_all((0).to_bytes(8, "big"))
            task_status.started()
            while True:
                data = await stream.receive_some(65536)
                if not data:
                    return
                self.received += data


async def test_a_stalled_slave_gives_flush_slave_timeout_with_the_message_stored(start_role, remoting_client, nursery):
    master = await start_role("dev", {"broker.brokerRole": "SYNC_MASTER", "broker.slaveTimeout": 300})
    mctx = master.state.get(BROKER)
    maddr = master.listening["broker"]
    stalled = StalledSlave()
    await nursery.start(stalled.run, mctx.registration.ha_server_addr)
    await wait_for(lambda: mctx.replicator.ha.slaves)
    await remoting_client.invoke(maddr, create_topic("TST", 1))
    resp = await remoting_client.invoke(maddr, send_request("TST", b"late"))
    assert resp.code == ResponseCode.FLUSH_SLAVE_TIMEOUT
    got = decode_messages((await remoting_client.invoke(maddr, pull_request("TST", 0, 0))).body_bytes())
    assert [m.body for m in got] == [b"late"]
    # the wire: a 12-byte header (offset 0, size) then the raw commit log from offset 0
    await wait_for(lambda: len(stalled.received) >= 12)
    offset, size = int.from_bytes(stalled.received[:8], "big"), int.from_bytes(stalled.received[8:12], "big")
    assert offset == 0 and 0 < size <= 32 * 1024
    await wait_for(lambda: len(stalled.received) >= 12 + size)
    assert bytes(stalled.received[12:12 + size]) == bytes(mctx.store.commit_log.queue.files[0].view[:size])


async def test_the_slave_synchronises_topics_groups_and_offsets(start_role, remoting_client, tmp_path):
    master, slave = await master_and_slave(start_role, tmp_path, role="ASYNC_MASTER")
    mctx, sctx = master.state.get(BROKER), slave.state.get(BROKER)
    maddr = master.listening["broker"]
    await remoting_client.invoke(maddr, create_topic("TSYNC", 3))
    update = RemotingCommand.request(
        RequestCode.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "gsync", "topic": "TSYNC", "queueId": "2", "commitOffset": "7"}
    )
    assert (await remoting_client.invoke(maddr, update)).code == ResponseCode.SUCCESS
    await wait_for(lambda: sctx.topics.get("TSYNC") is not None and sctx.offsets.table.get("TSYNC@gsync"))
    assert sctx.topics.get("TSYNC").write_queue_nums == 3
    assert sctx.offsets.table["TSYNC@gsync"] == {2: 7}
    assert sctx.topics.data_version.to_json() == mctx.topics.data_version.to_json()
    # delay offsets: a level-1 (1 s) message delivered on the master moves its offset; the slave's file follows
    resp = await remoting_client.invoke(maddr, send_request("TSYNC", b"later", {"DELAY": "1"}))
    assert resp.code == ResponseCode.SUCCESS
    delay_file = DelayOffsetFile(config_path(str(sctx.settings.store_root), "delayOffset.json"))
    await wait_for(lambda: delay_file.load_table() == {1: 1})


class FixedReplicator:
    """A replicator of a test plugin: every SYNC_MASTER wait answers FLUSH_SLAVE_TIMEOUT and is recorded."""

    def __init__(self) -> None:
        self.waited: list[int] = []

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()

    async def wait_replicated(self, end_offset: int) -> PutMessageStatus:
        self.waited.append(end_offset)
        return PutMessageStatus.FLUSH_SLAVE_TIMEOUT

    def status(self) -> dict:
        return {"waited": len(self.waited)}


class ReplicatorPlugin:
    def __init__(self) -> None:
        self.replicator = FixedReplicator()

    @hookimpl
    def pyrmq_make_replicator(self, kernel, broker):
        return self.replicator


@pytest.mark.hook("pyrmq_make_replicator")
async def test_a_replicator_plugin_answers_sync_master_sends(start_role, remoting_client):
    plugin = ReplicatorPlugin()
    master = await start_role("dev", {"broker.brokerRole": "SYNC_MASTER"}, extra_plugins=[plugin])
    maddr = master.listening["broker"]
    assert master.state.get(BROKER).replicator is plugin.replicator  # the plugin answered before the shipped one
    await remoting_client.invoke(maddr, create_topic("TRP", 1))
    resp = await remoting_client.invoke(maddr, send_request("TRP", b"abc"))
    assert resp.code == ResponseCode.FLUSH_SLAVE_TIMEOUT
    assert plugin.replicator.waited == [master.state.get(BROKER).store.commit_log.max_offset]


async def test_a_lagging_consumer_is_sent_to_the_slave_when_slave_read_is_enabled(start_role, remoting_client, tmp_path):
    from pyrmq.client import PushConsumer
    from pyrmq.client.config import ClientConfig

    # accessMessageInMemoryMaxRatio = 0: any pull not at the very end counts as "consuming slowly"
    settings = {"broker.slaveReadEnable": True, "broker.accessMessageInMemoryMaxRatio": 0}
    master, slave = await master_and_slave(start_role, tmp_path, role="ASYNC_MASTER", master_overrides=settings, **settings)
    master_settings_off = await start_role("dev", {"broker.accessMessageInMemoryMaxRatio": 0})
    mctx, sctx = master.state.get(BROKER), slave.state.get(BROKER)
    maddr = master.listening["broker"]
    assert (await remoting_client.invoke(maddr, create_topic("TREAD", 1))).code == ResponseCode.SUCCESS
    for i in range(100):
        assert (await remoting_client.invoke(maddr, send_request("TREAD", b"r%d" % i))).code == ResponseCode.SUCCESS
    await wait_for(lambda: sctx.store.commit_log.max_offset == mctx.store.commit_log.max_offset)
    # the master's pull answer names broker id 1 (the group's whichBrokerWhenConsumeSlowly)
    resp = await remoting_client.invoke(maddr, pull_request("TREAD", 0, 0))
    assert resp.code == ResponseCode.SUCCESS and resp.ext_fields["suggestWhichBrokerId"] == "1"
    # without slaveReadEnable the master is always suggested
    other = master_settings_off.listening["broker"]
    await remoting_client.invoke(other, create_topic("TREAD", 1))
    await remoting_client.invoke(other, send_request("TREAD", b"x"))
    await remoting_client.invoke(other, send_request("TREAD", b"y"))
    resp = await remoting_client.invoke(other, pull_request("TREAD", 0, 0, max_nums=1))
    assert resp.code == ResponseCode.SUCCESS and resp.ext_fields["suggestWhichBrokerId"] == "0"
    # the pyrmq consumer follows the suggestion: the slave serves pulls, every message arrives
    await wait_for(lambda: sctx.topics.get("TREAD") is not None)
    seen: set[bytes] = set()
    config = ClientConfig(namesrv_addr=master.listening["namesrv"], poll_name_server_interval=1.0)
    async with PushConsumer(config=config, group="g-read", subscribe={"TREAD": "*"}, listener=lambda m: seen.add(m.body),
                            consume_from="CONSUME_FROM_FIRST_OFFSET", pull_batch_size=8):
        await wait_for(lambda: len(seen) == 100, timeout=30)
    assert sctx.get_stats.total > 0


async def test_a_master_whose_ha_port_is_taken_listens_elsewhere_and_registers_it(start_role, free_port):
    import socket

    for _ in range(50):
        port = free_port()
        blocker = socket.socket()
        try:
            blocker.bind(("127.0.0.1", port + 1))
            break
        except OSError:
            blocker.close()
    else:
        raise AssertionError("no free port pair on 127.0.0.1")
    with blocker:
        blocker.listen()
        master = await start_role("dev", {"broker.listenPort": port, "broker.fastListenEnable": False})
        mctx = master.state.get(BROKER)
        assert mctx.replicator.ha.port not in (0, port + 1)
        assert mctx.registration.ha_server_addr == f"127.0.0.1:{mctx.replicator.ha.port}"


async def test_an_empty_slave_starts_at_the_masters_last_commit_log_file(start_role, remoting_client, tmp_path):
    small = {"broker.mappedFileSizeCommitLog": 64 * 1024}
    master = await start_role("dev", {"broker.haSendHeartbeatInterval": 200, **small})
    mctx = master.state.get(BROKER)
    maddr = master.listening["broker"]
    await remoting_client.invoke(maddr, create_topic("TEMPTY", 1))
    for i in range(300):
        assert (await remoting_client.invoke(maddr, send_request("TEMPTY", b"%04d" % i + b"x" * 1000))).code == 0
    files = mctx.store.commit_log.queue.files
    assert len(files) >= 4
    last = files[-1].file_from_offset
    slave = await start_role(fast_sync_bundle(tmp_path, "broker"), {
        "broker.brokerRole": "SLAVE", "broker.brokerId": 1, "broker.namesrvAddr": master.listening["namesrv"],
        "broker.haSendHeartbeatInterval": 200, **small})
    sctx = slave.state.get(BROKER)
    await wait_for(lambda: sctx.store.commit_log.max_offset == mctx.store.commit_log.max_offset)
    # 4.x: an empty slave gets the master's last file only; that file is byte for byte the master's
    assert [f.file_from_offset for f in sctx.store.commit_log.queue.files] == [last]
    n = files[-1].wrote_position
    assert bytes(sctx.store.commit_log.queue.files[0].view[:n]) == bytes(files[-1].view[:n])
    # the slave's consume queue starts where its first record sits; the newest message pulls the same from both
    await wait_for(lambda: sctx.topics.get("TEMPTY") is not None)
    top = mctx.store.get_max_offset_in_queue("TEMPTY", 0)
    assert sctx.store.get_max_offset_in_queue("TEMPTY", 0) == top
    got = [decode_messages((await remoting_client.invoke(a, pull_request("TEMPTY", 0, top - 1))).body_bytes())
           for a in (maddr, slave.listening["broker"])]
    assert [m.body for m in got[0]] == [m.body for m in got[1]] and got[0][0].body.startswith(b"0299")
    # and it keeps following
    assert (await remoting_client.invoke(maddr, send_request("TEMPTY", b"after"))).code == 0
    await wait_for(lambda: sctx.store.commit_log.max_offset == mctx.store.commit_log.max_offset)


# -- what features copy from the master (pyrmq_register_slave_sync) ----------------------------------------------

CURSOR_CODE = 9301


class CursorOnMaster:
    """A feature's master side: a document of its own behind a request code (as GET_ALL_DELAY_OFFSET is)."""

    def __init__(self) -> None:
        self.cursor = 7

    @hookimpl
    def pyrmq_register_processors(self, kernel, role):
        async def cursor(connection, request):
            return request.make_response(ResponseCode.SUCCESS, body=json.dumps({"cursor": self.cursor}).encode())

        return {CURSOR_CODE: cursor} if role == "broker" else None


class CursorStep:
    name = "audit-cursor"

    def __init__(self) -> None:
        self.seen: list[int] = []

    async def sync(self, fetch):
        self.seen.append((await fetch(CURSOR_CODE))["cursor"])


class CursorOnSlave:
    def __init__(self) -> None:
        self.step = CursorStep()

    @hookimpl
    def pyrmq_register_slave_sync(self, kernel):
        return [self.step]


@pytest.mark.hook("pyrmq_register_slave_sync")
async def test_a_feature_adds_a_step_to_the_slaves_metadata_sync(start_role, tmp_path):
    """The slave's metadata sync runs every feature's step each round against its master: the HA plugin knows none
    of them (the delay levels' offsets come the same way)."""
    on_master, on_slave = CursorOnMaster(), CursorOnSlave()
    master = await start_role("dev", {"broker.brokerRole": "ASYNC_MASTER"}, extra_plugins=[on_master])
    slave = await start_role(fast_sync_bundle(tmp_path, "broker"), {
        "broker.brokerRole": "SLAVE", "broker.brokerId": 1, "broker.namesrvAddr": master.listening["namesrv"],
    }, extra_plugins=[on_slave])
    sync = slave.state.get(BROKER).replicator.sync
    # the test's own step beside the bundle's (delay-level offsets, the POP room's request modes), in plugin order
    assert [step.name for step in sync.steps] == ["audit-cursor", "delay-offsets", "pop-request-modes"]
    await wait_for(lambda: 7 in on_slave.step.seen)
    on_master.cursor = 8
    await wait_for(lambda: on_slave.step.seen[-1:] == [8])
    assert sync.rounds >= 2


async def test_a_slave_derives_the_tags_code_of_replicated_parked_messages_as_the_master(start_role, remoting_client,
                                                                                        tmp_path):
    """Issue 25, defect 1: a parked delayed or timed message's consume-queue unit holds its delivery time on the
    slave as on the master (the store's tags-code resolver, built from the schedulers, applies to replicated bytes),
    not the hash of its TAGS."""
    from pyrmq.plugins.broker.timer import TIMER_TOPIC
    from pyrmq.remoting.vocabulary import SCHEDULE_TOPIC

    master, slave = await master_and_slave(start_role, tmp_path, role="ASYNC_MASTER")
    mctx, sctx = master.state.get(BROKER), slave.state.get(BROKER)
    maddr = master.listening["broker"]
    due = int(time.time() * 1000) + 3_600_000
    for props in ({"DELAY": "3", "TAGS": "a"}, {"TIMER_DELIVER_MS": str(due), "TAGS": "b"},
                  {"TIMER_DELAY_SEC": "600", "TAGS": "c"}):
        assert (await remoting_client.invoke(maddr, send_request("TPARK", b"p", props))).code == ResponseCode.SUCCESS
    await wait_for(lambda: sctx.store.commit_log.max_offset == mctx.store.commit_log.max_offset)
    for topic, queue_id, count in ((SCHEDULE_TOPIC, 2, 1), (TIMER_TOPIC, 0, 2)):
        on_master = [mctx.store.consume_queues.get(topic, queue_id).get_unit(i) for i in range(count)]
        on_slave = [sctx.store.consume_queues.get(topic, queue_id).get_unit(i) for i in range(count)]
        assert on_slave == on_master
    assert mctx.store.consume_queues.get(TIMER_TOPIC, 0).get_unit(0)[2] == due
    [parked] = decode_messages((await remoting_client.invoke(maddr, pull_request(SCHEDULE_TOPIC, 2, 0))).body_bytes())
    # RocketMQ's rule: store time + the level's delay (level 3: 10 s)
    assert mctx.store.consume_queues.get(SCHEDULE_TOPIC, 2).get_unit(0)[2] == parked.store_timestamp + 10_000
