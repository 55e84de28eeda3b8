"""Automatic failover on etcd with real processes on 127.0.0.1 (Jepsen-style): an etcd, a name server and a group of
SYNC_MASTER replicas (configs/failover.toml); a producer sends keyed messages with retries while the master is
SIGKILLed at a random point, round after round (the killed replica restarts and rejoins). After each round a new
master holds the lease within TTL + 3 s and the route shows it; at the end every SEND_OK key is consumable (acked is a
subset of received; duplicates are reported) and every replica's commit log is a byte prefix of the master's.

``PYRMQ_FAILOVER_ROUNDS`` (default 2 in `make test`) sets the rounds and ``PYRMQ_FAILOVER_SIZES`` the group sizes
(default 3); ``make failover`` runs 10 rounds with groups of 2 and 3 and writes a report.
"""

from __future__ import annotations

import json
import os
import random
import signal
import statistics
import time
from collections import Counter

import pytest
import trio

from pyrmq.client import Message, Producer, PushConsumer
from pyrmq.client.config import ClientConfig
from pyrmq.client.errors import ClientError
from pyrmq.kernel.errors import PyrmqError
from pyrmq.plugins.broker.failover.etcd import EtcdClient
from pyrmq.remoting.client import RemotingClient
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.errors import RemotingError

from .failover_group import TTL, commit_log, has_topic, route_master, until

ROUNDS = int(os.environ.get("PYRMQ_FAILOVER_ROUNDS", "2"))
#: group sizes of the rounds test (`make failover`: 2,3)
SIZES = [int(x) for x in os.environ.get("PYRMQ_FAILOVER_SIZES", "3").split(",")]
REPORT = os.environ.get("PYRMQ_FAILOVER_REPORT", "")
TOPIC = "FailoverTopic"
GROUP = "broker-f"


async def _create_topic(addr: str, topic: str = TOPIC) -> None:
    async with RemotingClient() as rc:
        create = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
            "topic": topic, "defaultTopic": "TBW102", "readQueueNums": "4", "writeQueueNums": "4", "perm": "6",
            "topicFilterType": "SINGLE_TAG"})
        assert (await rc.invoke(addr, create)).code == ResponseCode.SUCCESS


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
@pytest.mark.parametrize("size", SIZES)
async def test_failover_rounds_lose_no_acknowledged_message(spawn, etcd, failover_group, size):
    namesrv = spawn("namesrv", "--listen", "127.0.0.1:0", name="namesrv").listening["namesrv"]
    group = failover_group(etcd.endpoint, namesrv, size)
    group.start_all()
    rng = random.Random(int(os.environ.get("PYRMQ_FAILOVER_SEED", str(time.time_ns()))))
    failover_times: list[float] = []
    rounds: list[dict] = []
    async with EtcdClient([etcd.endpoint]) as client:
        await group.ready(client, TOPIC)
        config = ClientConfig(namesrv_addr=namesrv, poll_name_server_interval=1.0, heartbeat_broker_interval=2.0)
        async with Producer(config=config, group="failover_producer", send_timeout=3.0) as producer:
            sender = Sender(producer)
            async with trio.open_nursery() as nursery:
                await nursery.start(sender.run)
                for n in range(ROUNDS):
                    # every live replica in the in-sync set (the precondition for an election without loss)
                    await until(lambda: group.full(client), "every replica in the in-sync set", 30)
                    acked_before = len(sender.acked)
                    await trio.sleep(rng.uniform(0.3, 1.5))
                    old = await group.master(client)
                    group.kill(old["replicaId"])
                    killed_at = trio.current_time()
                    new = await until(
                        lambda: group.new_master(client, old["epoch"]), "a new master holding the lease", TTL + 3, 0.02)
                    elected = trio.current_time() - killed_at
                    failover_times.append(elected)
                    assert new["replicaId"] != old["replicaId"]
                    await until(lambda: _route_is(namesrv, new["addr"]), "the route naming the new master", 15)
                    group.start(old["replicaId"])
                    await until(lambda: _acked_more(sender, acked_before + 10), "sends acknowledged by the new master", 30)
                    rounds.append({"round": n, "killed": old["replicaId"], "elected": new["replicaId"],
                                   "epoch": new["epoch"], "seconds": round(elected, 3),
                                   "acked": len(sender.acked) - acked_before})
                sender.stopping = True
            master = await group.master(client)
            await group.caught_up(master["replicaId"], group.ports)
    received = await _consume(config, sender.acked, 60, "failover_consumers")
    lost = _lost(sender.acked, received)
    duplicates = sum(c - 1 for c in received.values() if c > 1)
    summary = {"replicas": size, "rounds": rounds, "acked": len(sender.acked), "lost": len(lost), "lost_keys": lost[:20],
               "duplicates": duplicates, "received": len(received), "outcomes": dict(sender.outcomes),
               "given_up": len(sender.given_up),
               "failover_p50": round(statistics.median(failover_times), 3),
               "failover_p99": round(sorted(failover_times)[min(len(failover_times) - 1, int(0.99 * len(failover_times)))], 3),
               "failover_max": round(max(failover_times), 3)}
    print(json.dumps(summary))
    if REPORT:
        with open(REPORT, "a") as f:
            f.write(json.dumps(summary) + "\n")
    assert not lost


async def _consume(config: ClientConfig, acked: set[str], timeout: float, group: str) -> Counter:
    """Every key a consumer group reads from the first offset, until ``acked`` are all in or ``timeout``."""
    received: Counter = Counter()
    async with PushConsumer(config=config, group=group, subscribe={TOPIC: "*"},
                            listener=lambda msg: received.update([msg.body.decode()]),
                            consume_from="CONSUME_FROM_FIRST_OFFSET"):
        with trio.move_on_after(timeout):
            while not acked <= set(received):
                await trio.sleep(0.2)
        await trio.sleep(0.5)  # what is still on its way (duplicates)
    return received


def _lost(acked: set[str], received: Counter) -> list[str]:
    return sorted(acked - set(received), key=lambda k: int(k.rpartition("-")[2]))


async def _route_is(namesrv: str, addr: str) -> bool:
    return await route_master(namesrv, TOPIC, GROUP) == addr


async def _acked_more(sender: Sender, n: int) -> bool:
    return len(sender.acked) >= n


def _send_request(key: str) -> RemotingCommand:
    """SEND_MESSAGE straight to one broker address (no client routing or retries)."""
    from pyrmq.store.format import encode_properties

    fields = {
        "producerGroup": "failover_raw", "topic": TOPIC, "defaultTopic": "TBW102", "defaultTopicQueueNums": 4,
        "queueId": 0, "sysFlag": 0, "bornTimestamp": int(time.time() * 1000), "flag": 0,
        "properties": encode_properties({"KEYS": key, "UNIQ_KEY": f"U{time.monotonic_ns():031d}"[:32]}),
        "reconsumeTimes": 0, "unitMode": False,
    }
    return RemotingCommand.request(RequestCode.SEND_MESSAGE, fields, key.encode())


async def _send_keys(producer: Producer, keys: list[str]) -> set[str]:
    acked = set()
    for key in keys:
        for _ in range(100):
            try:
                result = await producer.send(Message(TOPIC, key.encode(), keys=[key]), timeout=3)
            except (PyrmqError, RemotingError, trio.TooSlowError):
                await trio.sleep(0.1)
                continue
            if result.status.value == "SEND_OK":
                acked.add(key)
                break
            await trio.sleep(0.1)
    return acked


@pytest.mark.slow
async def test_partition_old_master_acknowledges_nothing_after_losing_its_lease(spawn, etcd, failover_group):
    """The master SIGSTOPped longer than the lease TTL, a send waiting in its socket: the other replica is elected;
    after SIGCONT the old master answers that send with a failure (never SEND_OK), steps down, truncates what it
    appended alone and follows the new master: its commit log is a prefix of the new master's."""
    namesrv = spawn("namesrv", "--listen", "127.0.0.1:0", name="namesrv").listening["namesrv"]
    group = failover_group(etcd.endpoint, namesrv, 2)
    group.start_all()
    config = ClientConfig(namesrv_addr=namesrv, poll_name_server_interval=1.0, heartbeat_broker_interval=2.0)
    async with EtcdClient([etcd.endpoint]) as client, Producer(config=config, group="failover_partition") as producer:
        old = await group.ready(client, TOPIC)
        acked = await _send_keys(producer, [f"before-{i}" for i in range(30)])
        assert len(acked) == 30
        group.signal(old["replicaId"], signal.SIGSTOP)
        answers: list[RemotingCommand] = []
        async with RemotingClient() as rc, trio.open_nursery() as nursery:
            async def send_to_paused() -> None:
                answers.append(await rc.invoke(group.addr(old["replicaId"]), _send_request("paused-0"), timeout=30))

            nursery.start_soon(send_to_paused)
            try:
                new = await until(lambda: group.new_master(client, old["epoch"]), "the other replica elected",
                                  TTL + 3, 0.05)
                acked |= await _send_keys(producer, [f"after-{i}" for i in range(30)])
            finally:
                group.signal(old["replicaId"], signal.SIGCONT)
        assert len(answers) == 1 and answers[0].code != ResponseCode.SUCCESS, (answers[0].code, answers[0].remark)
        print(f"the paused master answered {answers[0].code} {answers[0].remark!r}")
        assert len(acked) == 60
        assert (await group.master(client))["replicaId"] == new["replicaId"]
        await until(lambda: _route_is(namesrv, new["addr"]), "the route naming the new master", 15)
        acked |= await _send_keys(producer, ["late-0"])
        await group.caught_up(new["replicaId"], group.ports)
    received = await _consume(config, acked, 30, "failover_partition_consumers")
    assert not _lost(acked, received)


def _pull_request(offset: int, suspend_ms: int = 0) -> RemotingCommand:
    """PULL_MESSAGE of queue 0 with the subscription in the header (0x4), long polling (0x2) when suspended."""
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, {
        "consumerGroup": "failover_confirm", "topic": TOPIC, "queueId": "0", "queueOffset": str(offset),
        "maxMsgNums": "32", "sysFlag": str(0x4 | (0x2 if suspend_ms else 0)), "commitOffset": "0",
        "suspendTimeoutMillis": str(suspend_ms), "subscription": "*", "subVersion": "0"})


def _pulled_keys(response: RemotingCommand) -> list[str]:
    from pyrmq.store.format import decode_messages

    return [m.body.decode() for m in decode_messages(response.body_bytes())]


async def _queue_max(rc: RemotingClient, addr: str) -> int:
    request = RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": "0"})
    return int((await rc.invoke(addr, request, timeout=5)).ext_fields["offset"])


@pytest.mark.slow
async def test_consumers_read_only_what_every_in_sync_replica_acknowledged(spawn, etcd, failover_group):
    """The master's in-sync slave SIGSTOPped (slaveTimeout long enough that the set keeps it): a message sent now is
    stored but not SEND_OK, and a consumer pulling from the master does not get it (its long poll stays parked);
    after SIGCONT the slave acknowledges: SEND_OK, and the parked long poll and a new pull both get the message."""
    namesrv = spawn("namesrv", "--listen", "127.0.0.1:0", name="namesrv").listening["namesrv"]
    group = failover_group(etcd.endpoint, namesrv, 2, "slaveTimeout=30000")
    group.start_all()
    async with EtcdClient([etcd.endpoint]) as client, RemotingClient() as rc:
        master = await group.ready(client, TOPIC)
        addr = group.addr(master["replicaId"])
        slave = next(rid for rid in group.ports if rid != master["replicaId"])
        assert (await rc.invoke(addr, _send_request("confirmed-0"), timeout=10)).code == ResponseCode.SUCCESS
        assert _pulled_keys(await rc.invoke(addr, _pull_request(0), timeout=10)) == ["confirmed-0"]
        group.signal(slave, signal.SIGSTOP)
        sent: list[RemotingCommand] = []
        polled: list[RemotingCommand] = []
        try:
            async with trio.open_nursery() as nursery:
                async def send() -> None:
                    sent.append(await rc.invoke(addr, _send_request("unconfirmed-1"), timeout=30))

                async def long_poll() -> None:
                    polled.append(await rc.invoke(addr, _pull_request(1, suspend_ms=25_000), timeout=30))

                nursery.start_soon(send)
                await until(lambda: _true_async(_queue_max(rc, addr), 2), "the master storing the message", 10, 0.05)
                nursery.start_soon(long_poll)
                # the master has it (GET_MAX_OFFSET counts it) but no in-sync replica acknowledged it
                pulled = await rc.invoke(addr, _pull_request(1), timeout=10)
                assert pulled.code == ResponseCode.PULL_NOT_FOUND, (pulled.code, _pulled_keys(pulled))
                assert pulled.ext_fields["nextBeginOffset"] == "1"
                assert not sent and not polled
                group.signal(slave, signal.SIGCONT)
                # the parked long poll (25 s) is answered when the confirm offset passes the message
                with trio.fail_after(15):
                    while not (sent and polled):
                        await trio.sleep(0.05)
        finally:
            group.signal(slave, signal.SIGCONT)
        assert sent[0].code == ResponseCode.SUCCESS, (sent[0].code, sent[0].remark)
        assert polled[0].code == ResponseCode.SUCCESS and _pulled_keys(polled[0]) == ["unconfirmed-1"]
        assert _pulled_keys(await rc.invoke(addr, _pull_request(1), timeout=10)) == ["unconfirmed-1"]


async def _true_async(value, want) -> bool:
    return await value == want


@pytest.mark.slow
async def test_a_slave_serves_pulls_up_to_the_confirm_offset_and_never_beyond(spawn, etcd, failover_group):
    """A group of 3: a pull from a slave gets what every in-sync replica acknowledged (the confirm offset its master's
    AutoSwitch transfer headers carry); with the third replica SIGSTOPped, a message the slave holds but the stopped
    replica has not acknowledged is not served by the slave, nor found by a key query or by its offset (on the
    slave and on the master); after SIGCONT the slave serves it to all three."""
    namesrv = spawn("namesrv", "--listen", "127.0.0.1:0", name="namesrv").listening["namesrv"]
    group = failover_group(etcd.endpoint, namesrv, 3, "slaveTimeout=30000")
    group.start_all()
    async with EtcdClient([etcd.endpoint]) as client, RemotingClient() as rc:
        master = await group.ready(client, TOPIC)
        addr = group.addr(master["replicaId"])
        reader, stopped = (rid for rid in group.ports if rid != master["replicaId"])
        slave_addr = group.addr(reader)
        assert (await rc.invoke(addr, _send_request("confirmed-0"), timeout=10)).code == ResponseCode.SUCCESS

        async def slave_pulls(offset: int) -> list[str]:
            response = await rc.invoke(slave_addr, _pull_request(offset), timeout=10)
            return _pulled_keys(response) if response.code == ResponseCode.SUCCESS else []

        # the slave learns the confirm offset from its master's next transfer header
        assert await until(lambda: slave_pulls(0), "the slave serving the confirmed message", 10) == ["confirmed-0"]
        # the next record starts where this one ends (VIEW_MESSAGE_BY_ID takes a commit-log offset)
        from pyrmq.store.format import decode_messages

        (first,) = decode_messages((await rc.invoke(slave_addr, _pull_request(0), timeout=10)).body_bytes())
        confirmed_end = first.commit_log_offset + first.total_size
        group.signal(stopped, signal.SIGSTOP)
        sent: list[RemotingCommand] = []
        try:
            async with trio.open_nursery() as nursery:
                async def send() -> None:
                    sent.append(await rc.invoke(addr, _send_request("unconfirmed-1"), timeout=30))

                nursery.start_soon(send)
                # the slave stored it (its consume queue counts it) but the stopped replica did not acknowledge it
                await until(lambda: _true_async(_queue_max(rc, slave_addr), 2), "the slave storing the message", 10, 0.05)
                pulled = await rc.invoke(slave_addr, _pull_request(1), timeout=10)
                assert pulled.code == ResponseCode.PULL_NOT_FOUND, (pulled.code, _pulled_keys(pulled))
                for where in (slave_addr, addr):
                    assert (await rc.invoke(where, _query("unconfirmed-1"), timeout=10)).code == ResponseCode.QUERY_NOT_FOUND
                    view = await rc.invoke(where, _view(confirmed_end), timeout=10)
                    assert view.code == ResponseCode.SYSTEM_ERROR and "not confirmed" in view.remark, view.remark
                assert not sent
                group.signal(stopped, signal.SIGCONT)
                with trio.fail_after(15):
                    while not sent:
                        await trio.sleep(0.05)
        finally:
            group.signal(stopped, signal.SIGCONT)
        assert sent[0].code == ResponseCode.SUCCESS, (sent[0].code, sent[0].remark)
        assert await until(lambda: slave_pulls(1), "the slave serving the message once confirmed", 10) == ["unconfirmed-1"]
        queried = await rc.invoke(slave_addr, _query("unconfirmed-1"), timeout=10)
        assert queried.code == ResponseCode.SUCCESS and _pulled_keys(queried) == ["unconfirmed-1"]
        viewed = await rc.invoke(slave_addr, _view(confirmed_end), timeout=10)
        assert viewed.code == ResponseCode.SUCCESS and _pulled_keys(viewed) == ["unconfirmed-1"]


def _query(key: str) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.QUERY_MESSAGE, {
        "topic": TOPIC, "key": key, "maxNum": "32", "beginTimestamp": "0", "endTimestamp": str(2**62)})


def _view(offset: int) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(offset)})


async def _closed_by_peer(stream: trio.SocketStream, timeout: float = 10) -> bool:
    """Whether the peer closes the connection (reads until EOF or a reset) within ``timeout`` seconds."""
    with trio.move_on_after(timeout):
        try:
            while await stream.receive_some(65536):
                pass
        except trio.BrokenResourceError:
            pass
        return True
    return False


@pytest.mark.slow
async def test_the_autoswitch_handshake_on_a_raw_socket_and_malformed_frames_close_only_their_connection(
        spawn, etcd, failover_group):
    """The master's HA port speaks 5.x's AutoSwitch frames: a slave handshake (state 1, flags, slaveBrokerId) is
    answered with the master's epoch entries, an ACK with a TRANSFER header (epoch, epoch start, confirm offset). A
    frame with an unknown state, an ACK before the handshake, or a frame cut short closes that connection only: the
    group keeps acknowledging sends."""
    from pyrmq.plugins.broker.ha import autoswitch as wire

    namesrv = spawn("namesrv", "--listen", "127.0.0.1:0", name="namesrv").listening["namesrv"]
    group = failover_group(etcd.endpoint, namesrv, 2)
    group.start_all()
    async with EtcdClient([etcd.endpoint]) as client, RemotingClient() as rc:
        master = await group.ready(client, TOPIC)
        addr = group.addr(master["replicaId"])
        assert (await rc.invoke(addr, _send_request("before"), timeout=10)).code == ResponseCode.SUCCESS
        host, _, port = master["haAddr"].rpartition(":")
        for garbage in (b"\x00\x00\x00\x07" + bytes(12),   # state 7
                        wire.pack_ack(0),                      # an ACK before the handshake
                        b"\x00\x00\x00\x01\x00"):           # a handshake cut short, then the write side closed
            stream = await trio.open_tcp_stream(host, int(port))
            async with stream:
                await stream.send_all(garbage)
                if len(garbage) < 12:
                    await stream.send_eof()
                assert await _closed_by_peer(stream), garbage
        # a well-formed handshake (an async learner, so that it never joins the in-sync set)
        stream = await trio.open_tcp_stream(host, int(port))
        async with stream:
            await stream.send_all(wire.pack_slave_handshake(77, sync_from_last_file=False, async_learner=True))
            buffer = b""
            with trio.fail_after(10):
                while len(buffer) < wire.MASTER_HANDSHAKE.size:
                    buffer += await stream.receive_some(65536)
                state, size, max_offset, epoch = wire.MASTER_HANDSHAKE.unpack_from(buffer)
                while len(buffer) < wire.MASTER_HANDSHAKE.size + size:
                    buffer += await stream.receive_some(65536)
            assert (state, epoch) == (wire.HANDSHAKE, master["epoch"])
            assert max_offset == len(commit_log(group.store(master["replicaId"]))) > 0
            entries = [wire.EPOCH_ENTRY.unpack_from(buffer, wire.MASTER_HANDSHAKE.size + i) for i in range(0, size, 12)]
            epochs = {json.loads(kv.value)["startOffset"]: int(kv.key.rsplit("/", 1)[1])
                      for kv in await client.range(group.prefix + "epochs/")}
            assert entries == sorted((e, start) for start, e in epochs.items())
            assert entries[-1][0] == master["epoch"]
            # an ACK at the master's end: a TRANSFER header with no body, the master's epoch and confirm offset
            await stream.send_all(wire.pack_ack(max_offset))
            buffer = buffer[wire.MASTER_HANDSHAKE.size + size:]
            with trio.fail_after(10):
                while len(buffer) < wire.MASTER_TRANSFER.size:
                    buffer += await stream.receive_some(65536)
            state, size, offset, epoch, epoch_start, confirm = wire.MASTER_TRANSFER.unpack_from(buffer)
            assert (state, size, offset, epoch) == (wire.TRANSFER, 0, max_offset, master["epoch"])
            assert (epoch_start, confirm) == (entries[-1][1], max_offset)
        assert (await rc.invoke(addr, _send_request("after"), timeout=10)).code == ResponseCode.SUCCESS
        assert master == await group.master(client)


async def _receive_exactly(stream: trio.SocketStream, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = await stream.receive_some(size - len(data))
        assert chunk, f"closed after {len(data)} of {size} bytes"
        data += chunk
    return data


@pytest.mark.slow
async def test_a_follower_refuses_a_malformed_or_wrong_epoch_handshake_and_acks_a_good_one(
        spawn, etcd, failover_group):
    """A replica follows the master etcd names, here a raw socket of the test's (epoch 3): its handshake is 5.x's
    (state 1, isSyncFromLastFile 0, isAsyncLearner 0, its replica id); an answer with an unknown state, then one of
    another epoch than etcd's, each close that connection (the replica reconnects, still running); the right answer
    gets its ACK (state 2, its max offset)."""
    from pyrmq.plugins.broker.ha import autoswitch as wire

    namesrv = spawn("namesrv", "--listen", "127.0.0.1:0", name="namesrv").listening["namesrv"]
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    ha_port = listeners[0].socket.getsockname()[1]
    group = failover_group(etcd.endpoint, namesrv, 1)
    async with EtcdClient([etcd.endpoint]) as client:
        lease = await client.grant(60)
        await client.put(group.prefix + "master", json.dumps(
            {"replicaId": 9, "addr": "127.0.0.1:1", "haAddr": f"127.0.0.1:{ha_port}", "epoch": 3}), lease=lease)
        await client.put(group.prefix + "epoch", "3")
        await client.put(group.prefix + "epochs/3", json.dumps({"startOffset": 0, "replicaId": 9}))
        await client.put(group.prefix + "syncset", json.dumps({"epoch": 3, "members": [9]}))
        replica = group.start(1)
        handshake = wire.pack_slave_handshake(1, sync_from_last_file=False)
        answers = [
            (b"\x00\x00\x00\x09" + bytes(16), b""),                                    # state 9: closed
            (wire.pack_master_handshake(0, 2, [wire.EpochEntry(2, 0)]), b""),           # epoch 2, etcd says 3
            (wire.pack_master_handshake(0, 3, [wire.EpochEntry(3, 0)]), wire.pack_ack(0)),
        ]
        with trio.fail_after(20):
            for answer, expected in answers:
                stream = await listeners[0].accept()
                async with stream:
                    assert await _receive_exactly(stream, len(handshake)) == handshake
                    await stream.send_all(answer)
                    if expected:
                        assert await _receive_exactly(stream, len(expected)) == expected
                    else:
                        assert await _closed_by_peer(stream)
                assert replica.proc.poll() is None
        await client.revoke(lease)
    await listeners[0].aclose()


@pytest.mark.slow
async def test_etcd_cluster_down_writes_continue_and_nobody_is_elected(spawn, etcd_cluster, failover_group):
    """A 3-member etcd cluster: one member SIGKILLed (the replicas use the next endpoint), then all three for
    longer than the lease TTL (``PYRMQ_FAILOVER_ETCD_OUTAGE`` s, 10 in `make failover`): the master keeps
    acknowledging writes; when etcd is back the same master holds the same epoch."""
    outage = float(os.environ.get("PYRMQ_FAILOVER_ETCD_OUTAGE", "3"))
    namesrv = spawn("namesrv", "--listen", "127.0.0.1:0", name="namesrv").listening["namesrv"]
    group = failover_group(",".join(etcd_cluster.endpoints), namesrv, 2)
    group.start_all()
    config = ClientConfig(namesrv_addr=namesrv, poll_name_server_interval=1.0, heartbeat_broker_interval=2.0)
    async with EtcdClient(etcd_cluster.endpoints) as client, Producer(config=config, group="failover_outage") as producer:
        before = await group.ready(client, TOPIC)
        acked = await _send_keys(producer, [f"before-{i}" for i in range(20)])
        etcd_cluster.members[0].kill()
        acked |= await _send_keys(producer, [f"one-down-{i}" for i in range(20)])
        for member in etcd_cluster.members[1:]:
            member.kill()
        outcomes: Counter = Counter()
        n = 0
        with trio.move_on_after(outage):
            while True:
                key = f"outage-{n}"
                n += 1
                result = await producer.send(Message(TOPIC, key.encode(), keys=[key]), timeout=3)
                outcomes[result.status.value] += 1
                acked.add(key)
                await trio.sleep(0.01)
        etcd_cluster.start()
        assert outcomes == Counter({"SEND_OK": n - 1}) or outcomes == Counter({"SEND_OK": n}), outcomes
        await until(lambda: group.master(client), "etcd answering again", 20)
        await trio.sleep(TTL + 1)  # longer than a lease: an expiry would have shown by now
        after = await group.master(client)
        assert (after["replicaId"], after["epoch"]) == (before["replicaId"], before["epoch"])
        acked |= await _send_keys(producer, [f"after-{i}" for i in range(20)])
        await group.caught_up(before["replicaId"], group.ports)
    print(f"sent during the {outage:.0f} s etcd outage: {dict(outcomes)}")
    received = await _consume(config, acked, 30, "failover_outage_consumers")
    assert not _lost(acked, received)


@pytest.mark.slow
async def test_negative_control_async_master_with_unclean_election_loses_messages(spawn, etcd, failover_group):
    """The checker can see loss: ASYNC_MASTER (SEND_OK before any slave has the message), the slave down while 50
    sends are acknowledged, the master SIGKILLed, the stale slave restarted and elected (uncleanElection): the
    acknowledged messages it never had are reported lost."""
    namesrv = spawn("namesrv", "--listen", "127.0.0.1:0", name="namesrv").listening["namesrv"]
    group = failover_group(etcd.endpoint, namesrv, 2, "brokerRole=ASYNC_MASTER",
                  plugin="uncleanElection = true\nasyncFailover = true\n")
    group.start_all()
    config = ClientConfig(namesrv_addr=namesrv, poll_name_server_interval=1.0, heartbeat_broker_interval=2.0)
    async with EtcdClient([etcd.endpoint]) as client, Producer(config=config, group="failover_negative") as producer:
        old = await group.ready(client, TOPIC)
        acked = await _send_keys(producer, [f"before-{i}" for i in range(10)])
        await group.caught_up(old["replicaId"], group.ports)
        slave = next(rid for rid in group.ports if rid != old["replicaId"])
        # stalled for good: a SIGSTOPped slave would still find the transfers in its socket buffer when resumed
        group.kill(slave)
        tail = await _send_keys(producer, [f"tail-{i}" for i in range(50)])
        assert len(tail) == 50
        group.kill(old["replicaId"])
        group.start(slave)
        await until(lambda: group.new_master(client, old["epoch"]), "the stale slave elected", TTL + 3 + 5, 0.05)
        acked |= tail
        acked |= await _send_keys(producer, [f"after-{i}" for i in range(10)])
    # wait for what the stale slave does have, then count what it does not
    received = await _consume(config, acked - tail, 30, "failover_negative_consumers")
    lost = _lost(acked, received)
    print(f"negative control: {len(acked)} acked, {len(lost)} lost: {lost[:5]}...")
    assert set(lost) == {f"tail-{i}" for i in range(50)}


@pytest.mark.slow
async def test_the_official_java_client_produces_and_consumes_through_a_failover(
        spawn, etcd, failover_group, tmp_path, java_driver):
    """Apache RocketMQ's Java client 4.9.8, unchanged: keyed sync sends (one per driver call, a failed one sent
    again) and a push consumer from the first offset; the master is SIGKILLed midway. It follows the new master
    through its route polls; every key it got SEND_OK for is consumed."""
    namesrv = spawn("namesrv", "--listen", "127.0.0.1:0", name="namesrv").listening["namesrv"]
    group = failover_group(etcd.endpoint, namesrv, 2)
    group.start_all()
    async with EtcdClient([etcd.endpoint]) as client:
        old = await group.ready(client, TOPIC)
        java = java_driver(namesrv, tmp_path / "java")
        java.call("consume", name="fo", group="gFailover", topic=TOPIC)
        acked: set[str] = set()
        failures: Counter = Counter()

        def send(keys: list[str]) -> None:
            for key in keys:
                for _ in range(200):
                    answer = java.call("produce", check=False, group="pFailover", topic=TOPIC, mode="sync", count=1,
                                       keyPrefix=key, timeout=30)
                    status = answer["sent"][0]["status"] if answer.get("ok") else answer.get("error", "error")[:60]
                    if status == "SEND_OK":
                        acked.add(f"{key}-0")
                        break
                    failures[status] += 1
                    time.sleep(0.1)

        send([f"before-{i}" for i in range(30)])
        group.kill(old["replicaId"])
        send([f"after-{i}" for i in range(30)])
        new = await group.master(client)
        assert new is not None and new["replicaId"] != old["replicaId"] and new["epoch"] > old["epoch"]
        assert len(acked) == 60, failures
        got: list[dict] = []
        deadline = time.monotonic() + 60
        while not acked <= {m["keys"] for m in got} and time.monotonic() < deadline:
            got += java.call("collect", name="fo", count=1, timeoutMs=1000, quietMs=0, timeout=15)["msgs"]
        received = Counter(m["keys"] for m in got)
        print(f"Java client: {len(acked)} acked, {len(received)} received, failed attempts {dict(failures)}")
        assert acked <= set(received), sorted(acked - set(received))[:10]
        assert all(m["brokerName"] == GROUP for m in got)
        java.call("stop", name="fo")


@pytest.mark.slow
async def test_a_topic_created_just_before_the_master_dies_is_known_to_the_next_master(
        spawn, etcd, failover_group):
    """The master publishes its topic table to etcd; the slave, paused so that its metadata sync cannot fetch the new
    topic, is elected after the master is SIGKILLed and takes the table from etcd: producers can send to it."""
    namesrv = spawn("namesrv", "--listen", "127.0.0.1:0", name="namesrv").listening["namesrv"]
    group = failover_group(etcd.endpoint, namesrv, 2)
    group.start_all()
    async with EtcdClient([etcd.endpoint]) as client:
        old = await group.ready(client, TOPIC)
        slave = next(rid for rid in group.ports if rid != old["replicaId"])
        group.signal(slave, signal.SIGSTOP)
        try:
            await _create_topic(group.addr(old["replicaId"]), "FailoverLate")

            async def published():
                kv = await client.get(group.prefix + "config/topics")
                return kv is not None and "FailoverLate" in kv.json()["topicConfigTable"]

            await until(published, "the new topic in etcd", 10)
            group.kill(old["replicaId"])
        finally:
            group.signal(slave, signal.SIGCONT)
        assert not await has_topic(group.addr(slave), "FailoverLate")  # the metadata sync never brought it
        new = await until(lambda: group.new_master(client, old["epoch"]), "the slave elected", TTL + 3, 0.05)
        assert new["replicaId"] == slave
        assert await has_topic(group.addr(slave), "FailoverLate")
    config = ClientConfig(namesrv_addr=namesrv, poll_name_server_interval=1.0)
    async with Producer(config=config, group="failover_late") as producer:
        async def sent():
            try:
                return (await producer.send(Message("FailoverLate", b"x"), timeout=3)).status.value == "SEND_OK"
            except (PyrmqError, RemotingError):
                return False

        await until(sent, "a send to the topic through the new master", 20, 0.2)
