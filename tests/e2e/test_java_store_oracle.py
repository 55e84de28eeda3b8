"""The Apache RocketMQ Java broker (4.9.7) as the store-format oracle, both directions (issue 12, point 3).

(a) A store written by the Java broker (messages from the official Java client: tags, keys, user properties, two
    topics, six queues, a batch; offsets committed by a Java push consumer) is opened by `pyrmq broker` and served:
    every message pulled at its queue offset with its body and properties, found by key and by offset msgId, the
    committed offsets kept, and new messages continue the queues; delay-level messages still pending when the Java
    broker stopped are delivered by pyrmq, not before their time.
(b) A store written by `pyrmq broker` (messages from pyrmq's client, offsets committed by pyrmq's consumer) is
    opened by the Java broker and the official Java push consumer reads every message with its offsets and
    properties; a group's committed offsets are honoured, and pyrmq's pending delay-level messages are delivered by
    the Java broker on time.
(c) and (d) The same after a crash: a store the Java broker left behind when killed with SIGKILL (abort file
    present, checkpoint as last flushed) is recovered and served by pyrmq, and a store pyrmq left behind when killed
    is recovered by the Java broker and read by the Java consumer.

Both sides run with a delay table whose level 3 is 20 s, so the delayed messages are still pending at the handover.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from pyrmq.client import Admin, Message, Producer, PullConsumer, api
from pyrmq.client.message import MessageQueue, PullStatus
from pyrmq.store.config_files import DelayOffsetFile
from pyrmq.store.format import decode_message_id

sys.path.insert(0, str(Path(__file__).resolve().parent / "java"))
from javabroker import JavaRocketMQ  # noqa: E402
from javapeers import compile_sources, java_command  # noqa: E402

pytestmark = pytest.mark.slow

ORACLE_SRC = Path(__file__).resolve().parent / "java" / "oracle"
QUEUES = {"OracleA": 4, "OracleB": 2}
SYSTEM = {"KEYS", "TAGS", "UNIQ_KEY", "WAIT", "MIN_OFFSET", "MAX_OFFSET", "CONSUME_START_TIME", "CLUSTER", "DELAY",
          "REAL_TOPIC", "REAL_QID",
          # pyrmq's mark on a delivered delayed copy: the parked record's offset, so a replica follows its master's
          # deliveries (docs/decisions.md; 5.x's timer adds TIMER_* properties to its copies the same way)
          "DELAY_PARKED_OFFSET"}
DELAYS = "1s 5s 20s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
LEVEL, LEVEL_MS = 3, 20_000


@pytest.fixture(scope="module")
def oracle_classes() -> Path:
    return compile_sources(ORACLE_SRC, "client")


def run_oracle(classes: Path, home: Path, *args: object, timeout: float = 120) -> list[dict]:
    argv = java_command("client", "Oracle", *map(str, args), extra_classpath=[classes], heap="128m",
                        props={"user.home": str(home)})
    out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"Oracle {args[0]} failed ({out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def user_props(props: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in props.items() if k not in SYSTEM}


def start_pyrmq(spawn, store: Path, port: int):
    """`pyrmq namesrv` + `pyrmq broker` (on ``port``) on ``store``; returns (namesrv address, broker address,
    [roles])."""
    namesrv = spawn("namesrv", "--listen", "127.0.0.1:0", name="namesrv")
    addr = namesrv.listening["namesrv"]
    broker = spawn("broker", "-c", "broker", "--namesrv", addr, "--listen", f"127.0.0.1:{port}",
                   "--store-dir", str(store), "--set", f"messageDelayLevel={DELAYS}", name="broker")
    return addr, broker.listening["broker"], [broker, namesrv]


def test_a_store_written_by_the_java_broker_is_served_by_pyrmq(oracle_classes, spawn, tmp_path, broker_port):
    store = tmp_path / "store"
    with JavaRocketMQ(tmp_path / "java", store, broker_conf={"messageDelayLevel": DELAYS}) as rmq:
        first = run_oracle(oracle_classes, tmp_path, "produce", rmq.namesrv_addr, rmq.broker_addr, 0, 20, 0)
        consumed = run_oracle(oracle_classes, tmp_path, "consume", rmq.namesrv_addr, "oracle_g1", "OracleA", 20, 60)
        assert consumed[-1] == {"end": 20}
        rest = run_oracle(oracle_classes, tmp_path, "produce", rmq.namesrv_addr, rmq.broker_addr, 20, 40, 1)
        late = run_oracle(oracle_classes, tmp_path, "delayed", rmq.namesrv_addr, "OracleA", 1, LEVEL, 2)
        assert rmq.stop_broker() in (0, 143)  # 143: the JVM exits by its SIGTERM hook after a clean shutdown
    # still pending: the Java broker's delay progress for the level did not move
    assert DelayOffsetFile(str(store / "config" / "delayOffset.json")).load_table().get(LEVEL, 0) == 0
    sent = first + rest
    assert len(sent) == 90 and {s["status"] for s in sent} == {"SEND_OK"}
    assert not (store / "abort").exists() and (store / "config" / "consumerOffset.json").exists()
    by_position = {(s["topic"], s["queueId"], s["queueOffset"]): s for s in sent}
    assert len(by_position) == 90

    namesrv, broker_addr, _ = start_pyrmq(spawn, store, broker_port())

    async def check() -> None:
        async with PullConsumer(namesrv, "oracle_g1") as consumer:
            # the delayed messages arrive at the end of OracleA queue 1, not before their time
            [mq1] = [mq for mq in await consumer.fetch_queues("OracleA") if mq.queue_id == 1]
            delivered = []
            with trio.fail_after(60):
                while len(delivered) < len(late):
                    result = await consumer.pull(mq1, "*", 10 + len(delivered), 32, block=True, suspend_ms=2000)
                    delivered += result.messages if result.status is PullStatus.FOUND else []
            assert [(m.queue_offset, m.msg_id, m.tags, " ".join(m.keys), m.body.decode(), user_props(m.properties))
                    for m in delivered] == [(10 + i, s["msgId"], "late", s["keys"], s["body"], user_props(s["properties"]))
                                            for i, s in enumerate(late)]
            assert all(m.store_timestamp >= m.born_timestamp + LEVEL_MS for m in delivered)

            pulled = {}
            committed = {}
            for topic, n in QUEUES.items():
                queues = await consumer.fetch_queues(topic)
                assert sorted(mq.queue_id for mq in queues) == list(range(n))
                for mq in queues:
                    committed[(topic, mq.queue_id)] = await consumer.committed_offset(mq)
                    offset = 0
                    while True:
                        result = await consumer.pull(mq, "*", offset, 32)
                        if result.status is not PullStatus.FOUND:
                            break
                        for m in result.messages:
                            pulled[(m.topic, m.queue_id, m.queue_offset)] = m
                        offset = result.next_begin_offset
            assert set(pulled) == set(by_position) | {("OracleA", 1, 10), ("OracleA", 1, 11)}
            for position in [("OracleA", 1, 10), ("OracleA", 1, 11)]:
                del pulled[position]
            for position, m in pulled.items():
                s = by_position[position]
                assert (m.msg_id, m.offset_msg_id, m.tags, " ".join(m.keys), m.body.decode()) == (
                    s["msgId"], s["offsetMsgId"], s["tags"], s["keys"], s["body"]), position
                assert user_props(m.properties) == user_props(s["properties"]), position
            # the Java consumer committed the first 20 messages of OracleA: 5 per queue; OracleB has none
            assert {q: o for (t, q), o in committed.items() if t == "OracleA"} == {0: 5, 1: 5, 2: 5, 3: 5}
            assert all(committed[("OracleB", q)] in (-1, 0) for q in range(2))

            # the queues continue where the Java broker left them
            async with Producer(namesrv, "oracle_py_producer") as producer:
                result = await producer.send(Message("OracleA", b"after", tags="py"),
                                             queue=MessageQueue("OracleA", "broker-a", 0))
            assert result.queue_offset == 10

        async with Admin(namesrv) as admin:
            # QUERY_MESSAGE by key: one key of one message, one key shared by every fifth message of OracleA
            found = await admin.query_message_by_key("OracleA", "key-OracleA-7")
            assert [m.body.decode() for m in found] == [by_msg_key("key-OracleA-7")["body"]]
            shared = await admin.query_message_by_key("OracleA", "shared-3", max_num=64)
            assert sorted(m.msg_id for m in shared) == sorted(
                s["msgId"] for s in sent if s["topic"] == "OracleA" and "shared-3" in s["keys"].split())
            # VIEW_MESSAGE_BY_ID: the commit-log offset in the Java broker's offset msgId
            for s in (sent[0], sent[45], sent[-1]):
                _, _, offset = decode_message_id(s["offsetMsgId"])
                m = await api.view_message(admin.instance, broker_addr, offset, "broker-a")
                assert (m.topic, m.queue_id, m.queue_offset, m.msg_id, m.body.decode()) == (
                    s["topic"], s["queueId"], s["queueOffset"], s["msgId"], s["body"])
            # and by the client msgId (UNIQ_KEY) through the index
            uniq = await admin.query_message_by_unique_key("OracleB", sent[-1]["msgId"])
            assert [m.body.decode() for m in uniq] == [sent[-1]["body"]]

    def by_msg_key(key: str) -> dict:
        return next(s for s in sent if key in s["keys"].split())

    trio.run(check)


def test_a_store_written_by_pyrmq_is_served_by_the_java_broker(oracle_classes, spawn, tmp_path, broker_port):
    store = tmp_path / "store"
    namesrv, broker_addr, roles = start_pyrmq(spawn, store, broker_port())
    sent: dict[tuple[str, int, int], dict] = {}

    async def produce() -> None:
        async with Admin(namesrv) as admin:
            for topic, n in QUEUES.items():
                await admin.create_topic(topic, n, broker_addr=broker_addr)
        async with Producer(namesrv, "oracle_py_producer") as producer:
            for i in range(40):
                for topic, n in QUEUES.items():
                    msg = Message(topic, f"body-{topic}-{i}-" + "y" * (i % 89), tags=f"tag{i % 3}",
                                  keys=[f"key-{topic}-{i}", f"shared-{i % 5}"], properties={"idx": str(i), "color": "red"})
                    r = await producer.send(msg, queue=MessageQueue(topic, "broker-a", i % n))
                    sent[(topic, r.message_queue.queue_id, r.queue_offset)] = {
                        "msgId": r.msg_id, "offsetMsgId": r.offset_msg_id, "tags": msg.tags, "keys": " ".join(msg.keys),
                        "body": msg.body.decode(), "props": {"idx": str(i), "color": "red"}}
            batch = [Message("OracleB", f"batch-{i}", tags="tagB", keys=f"bk-{i}", properties={"idx": str(100 + i)})
                     for i in range(10)]
            [r] = await producer.send_batch(batch, queue=MessageQueue("OracleB", "broker-a", 0))
            for i, (msg, msg_id) in enumerate(zip(batch, r.msg_id.split(","), strict=True)):
                sent[("OracleB", 0, r.queue_offset + i)] = {
                    "msgId": msg_id, "offsetMsgId": None, "tags": "tagB", "keys": f"bk-{i}", "body": msg.body.decode(),
                    "props": {"idx": str(100 + i)}}
            for i in range(2):  # due 20 s from now: pending when the Java broker takes over
                msg = Message("OracleA", f"delayed-{i}", tags="late", keys=f"delayed-OracleA-{i}", delay_time_level=LEVEL,
                              properties={"idx": f"d{i}"})
                r = await producer.send(msg, queue=MessageQueue("OracleA", "broker-a", 1))
                sent[("OracleA", 1, 10 + i)] = {"msgId": r.msg_id, "offsetMsgId": None, "tags": "late",
                                                "keys": msg.keys[0], "body": msg.body.decode(), "props": {"idx": f"d{i}"},
                                                "delayed": True}
        # group py_g1 commits 4 messages of each OracleA queue
        async with PullConsumer(namesrv, "py_g1") as consumer:
            for mq in await consumer.fetch_queues("OracleA"):
                await consumer.commit_offset(mq, 4)

    trio.run(produce)
    assert len(sent) == 92
    for role in roles:  # SIGTERM: a clean shutdown, before the Java broker opens the store
        assert role.stop() == 0
    assert not (store / "abort").exists()

    with JavaRocketMQ(tmp_path / "java", store, broker_conf={"messageDelayLevel": DELAYS}) as rmq:
        got = []
        for topic, n in QUEUES.items():
            count = sum(1 for t, _, _ in sent if t == topic)
            lines = run_oracle(oracle_classes, tmp_path, "consume", rmq.namesrv_addr, "java_g", topic, count, 90)
            assert lines[-1] == {"end": count}, topic
            got += lines[:-1]
        assert sorted((m["topic"], m["queueId"], m["queueOffset"]) for m in got) == sorted(sent)
        for m in got:
            s = sent[(m["topic"], m["queueId"], m["queueOffset"])]
            assert (m["msgId"], m["tags"], m["keys"], m["body"], m["reconsumeTimes"]) == (
                s["msgId"], s["tags"], s["keys"], s["body"], 0), m
            assert user_props(m["properties"]) == s["props"], m
            if s["offsetMsgId"]:
                assert m["offsetMsgId"] == s["offsetMsgId"], m
            if s.get("delayed"):
                assert m["storeTimestamp"] >= m["bornTimestamp"] + LEVEL_MS, m
        # py_g1 committed offset 4 on every OracleA queue in pyrmq: the Java broker hands out only the rest
        rest = run_oracle(oracle_classes, tmp_path, "consume", rmq.namesrv_addr, "py_g1", "OracleA", 26, 60)
        assert rest[-1] == {"end": 26}
        assert sorted((m["queueId"], m["queueOffset"]) for m in rest[:-1]) == sorted(
            [(q, o) for q in range(4) for o in range(4, 10)] + [(1, 10), (1, 11)])



async def pull_all(namesrv: str, group: str) -> dict[tuple[str, int, int], object]:
    """Every message of the oracle topics, pulled queue by queue from offset 0, by (topic, queue, offset)."""
    pulled = {}
    async with PullConsumer(namesrv, group) as consumer:
        for topic, n in QUEUES.items():
            queues = await consumer.fetch_queues(topic)
            assert sorted(mq.queue_id for mq in queues) == list(range(n))
            for mq in queues:
                offset = 0
                while True:
                    result = await consumer.pull(mq, "*", offset, 32)
                    if result.status is not PullStatus.FOUND:
                        break
                    for m in result.messages:
                        pulled[(m.topic, m.queue_id, m.queue_offset)] = m
                    offset = result.next_begin_offset
    return pulled


def test_a_java_broker_killed_with_sigkill_leaves_a_store_pyrmq_recovers(oracle_classes, spawn, tmp_path, broker_port):
    store = tmp_path / "store"
    with JavaRocketMQ(tmp_path / "java", store) as rmq:
        sent = run_oracle(oracle_classes, tmp_path, "produce", rmq.namesrv_addr, rmq.broker_addr, 0, 30, 1)
        rmq.broker.kill()  # kill -9: no shutdown hook, the abort file stays, the checkpoint is whatever was flushed
    assert (store / "abort").exists()
    namesrv, _, _ = start_pyrmq(spawn, store, broker_port())

    async def check() -> None:
        pulled = await pull_all(namesrv, "oracle_crash")
        assert sorted(pulled) == sorted((s["topic"], s["queueId"], s["queueOffset"]) for s in sent)
        for s in sent:
            m = pulled[(s["topic"], s["queueId"], s["queueOffset"])]
            assert (m.msg_id, m.offset_msg_id, m.tags, m.body.decode(), user_props(m.properties)) == (
                s["msgId"], s["offsetMsgId"], s["tags"], s["body"], user_props(s["properties"]))
        async with Producer(namesrv, "oracle_py_producer") as producer:
            result = await producer.send(Message("OracleB", b"after"), queue=MessageQueue("OracleB", "broker-a", 0))
        assert result.queue_offset == 15 + 10  # 15 single sends and the batch of 10 before it

    trio.run(check)


def test_pyrmq_killed_with_sigkill_leaves_a_store_the_java_broker_recovers(oracle_classes, spawn, tmp_path,
                                                                           broker_port):
    store = tmp_path / "store"
    namesrv, broker_addr, roles = start_pyrmq(spawn, store, broker_port())
    sent: dict[tuple[str, int, int], str] = {}

    async def produce() -> None:
        async with Admin(namesrv) as admin:
            for topic, n in QUEUES.items():
                await admin.create_topic(topic, n, broker_addr=broker_addr)
        async with Producer(namesrv, "oracle_py_producer") as producer:
            for i in range(30):
                for topic, n in QUEUES.items():
                    r = await producer.send(Message(topic, f"crash-{topic}-{i}", tags="t", keys=f"k{i}"),
                                            queue=MessageQueue(topic, "broker-a", i % n))
                    sent[(topic, r.message_queue.queue_id, r.queue_offset)] = r.msg_id

    trio.run(produce)
    roles[0].kill()  # the broker, kill -9
    assert (store / "abort").exists()
    with JavaRocketMQ(tmp_path / "java", store) as rmq:
        got = {}
        for topic in QUEUES:
            lines = run_oracle(oracle_classes, tmp_path, "consume", rmq.namesrv_addr, "java_crash", topic, 30, 60)
            assert lines[-1] == {"end": 30}, topic
            got.update({(m["topic"], m["queueId"], m["queueOffset"]): m for m in lines[:-1]})
        assert sorted(got) == sorted(sent)
        assert all(got[p]["msgId"] == msg_id and got[p]["body"] == f"crash-{p[0]}-{int(got[p]['keys'][1:])}"
                   for p, msg_id in sent.items())
