"""Conformance with the official Apache RocketMQ Java client 4.9.8 (issue 12, point 2).

One `pyrmq namesrv` + `pyrmq broker` pair and one JVM running tests/e2e/java/driver/Driver.java serve the module
(fixture ``java_cluster`` in conftest.py). The broker's delay levels are all 1 s so that delayed messages and the
retries of a failed message come quickly. Which test covers which item of the spec's interoperability checklist
(section 8) is listed in docs/decisions.md ("Java client conformance").
"""

from __future__ import annotations

import collections
import re
import time

import pytest

pytestmark = pytest.mark.slow

BROKER_SETTINGS = {"messageDelayLevel": " ".join(["1s"] * 18)}
CLUSTER = "DefaultCluster"


@pytest.fixture(scope="module")
def java(java_cluster):
    return java_cluster["driver"]


def mqadmin(java, *args: str, timeout: float = 30) -> str:
    """One mqadmin command (MQAdminStartup) run by the Java driver; returns what it printed, failing on a stack trace."""
    answer = java.call("mqadmin", args=[args[0], "-n", java.namesrv, *args[1:]], timeout=timeout)
    assert "Exception" not in answer["err"], f"mqadmin {' '.join(args)} failed:\n{answer['err'][-3000:]}"
    return answer["out"]


def create_topic(java, topic: str, queues: int = 4) -> None:
    out = mqadmin(java, "updateTopic", "-c", CLUSTER, "-t", topic, "-r", str(queues), "-w", str(queues))
    assert f"create topic to {java.broker_addr} success" in out, out


def collect(java, name: str, count: int, *, timeout: float = 20, quiet: float = 0) -> list[dict]:
    """What consumer ``name`` received once it holds ``count`` messages (or ``timeout`` passed), plus ``quiet`` s."""
    return java.call("collect", name=name, count=count, timeoutMs=int(timeout * 1000), quietMs=int(quiet * 1000),
                     timeout=timeout + quiet + 10)["msgs"]


def wait_assigned(java, topic: str, expected: dict[str, int], timeout: float = 20) -> dict[str, list[str]]:
    """Polls the consumers' rebalance until each named consumer holds the expected number of queues of ``topic``."""
    deadline = time.monotonic() + timeout
    while True:
        held = {name: java.call("assigned", name=name, topic=topic)["queues"] for name in expected}
        if {name: len(q) for name, q in held.items()} == expected:
            return held
        assert time.monotonic() < deadline, f"rebalance of {topic} did not settle on {expected}: {held}"
        time.sleep(0.2)


def test_sync_async_oneway_batch_sends_split_exactly_once_between_two_clustering_consumers(java, java_cluster):
    create_topic(java, "JSplit")
    java.call("consume", name="split-1", group="gSplit", topic="JSplit", instance="split-1")
    java.call("consume", name="split-2", group="gSplit", topic="JSplit", instance="split-2")
    held = wait_assigned(java, "JSplit", {"split-1": 2, "split-2": 2})
    assert not set(held["split-1"]) & set(held["split-2"])

    sync = java.call("produce", group="pSplit", topic="JSplit", mode="sync", count=8, tags="T", keyPrefix="s")["sent"]
    async_ = java.call("produce", group="pSplit", topic="JSplit", mode="async", count=8, tags="T", keyPrefix="a",
                       timeoutMs=15000)["sent"]
    oneway = java.call("produce", group="pSplit", topic="JSplit", mode="oneway", count=8, tags="T", keyPrefix="o")["sent"]
    batch = java.call("produce", group="pSplit", topic="JSplit", mode="batch", count=8, tags="T", keyPrefix="b")["sent"]
    assert {s["status"] for s in sync + async_ + batch} == {"SEND_OK"}
    assert len({s["queueId"] for s in sync}) == 4  # round robin over the topic's queues
    assert all(s["brokerName"] == "broker-a" and s["offsetMsgId"] for s in sync + async_)
    assert len(batch[0]["msgIds"]) == 8 and len(batch[0]["msgId"].split(",")) == 8

    got: list[dict] = []
    deadline = time.monotonic() + 30
    while len(got) < 32 and time.monotonic() < deadline:
        got += collect(java, "split-1", 1, timeout=1) + collect(java, "split-2", 0)
    got += collect(java, "split-1", 0, quiet=1) + collect(java, "split-2", 0)
    keys = collections.Counter(m["keys"] for m in got)
    expected = [f"{p}-{i}" for p in "saob" for i in range(8)]
    assert sorted(keys) == sorted(expected) and set(keys.values()) == {1}, keys  # every message exactly once
    for name in ("split-1", "split-2"):
        mine = [m for m in got if m["consumer"] == name]
        assert mine and {f"{m['brokerName']}:{m['queueId']}" for m in mine} <= set(held[name])
    # the ids the producer saw are the ids the consumers see
    by_key = {m["keys"]: m for m in got}
    assert all(by_key[s["keys"]]["msgId"] == s["msgId"] and by_key[s["keys"]]["offsetMsgId"] == s["offsetMsgId"]
               for s in sync + async_)
    assert all(by_key[s["keys"]]["msgId"] == s["msgId"] for s in oneway)
    assert sorted(by_key[f"b-{i}"]["msgId"] for i in range(8)) == sorted(batch[0]["msgIds"])
    assert {by_key[f"b-{i}"]["queueId"] for i in range(8)} == {batch[0]["queueId"]}  # a batch lands on one queue
    java.call("stop", name="split-1")
    java.call("stop", name="split-2")


def test_broadcasting_consumers_each_receive_every_message(java):
    create_topic(java, "JBroad")
    for name in ("broad-1", "broad-2"):
        java.call("consume", name=name, group="gBroad", topic="JBroad", model="BROADCASTING", instance=name)
    wait_assigned(java, "JBroad", {"broad-1": 4, "broad-2": 4})
    java.call("produce", group="pBroad", topic="JBroad", mode="sync", count=12, tags="T", keyPrefix="bc")
    for name in ("broad-1", "broad-2"):
        got = collect(java, name, 12, quiet=0.5)
        assert sorted(m["keys"] for m in got) == sorted(f"bc-{i}" for i in range(12)), name
        java.call("stop", name=name)


def test_ordered_sends_are_consumed_in_order_by_an_orderly_consumer_across_a_local_retry(java):
    create_topic(java, "JOrder")
    sent = java.call("produce", group="pOrder", topic="JOrder", mode="ordered", count=40, orders=4, tags="T",
                     keyPrefix="ord")["sent"]
    queue_of_order = collections.defaultdict(set)
    for i, s in enumerate(sent):
        queue_of_order[i % 4].add(s["queueId"])
    assert all(len(q) == 1 for q in queue_of_order.values()) and len(sent) == 40  # one queue per order
    # ord-13 fails once: the orderly consumer suspends its queue and retries it locally before anything after it
    java.call("consume", name="orderly", group="gOrder", topic="JOrder", orderly=True, failOncePrefix="ord-13")
    got = collect(java, "orderly", 41, quiet=0.5)
    assert sum(m["failed"] for m in got) == 1
    for order in range(4):
        seqs = [int(m["properties"]["seq"]) for m in got if m["properties"]["order"] == str(order)]
        assert seqs == sorted(seqs), f"order {order} consumed out of order: {seqs}"
        assert sorted(set(seqs)) == list(range(order, 40, 4))
    assert [int(m["properties"]["seq"]) for m in got].count(13) == 2
    java.call("stop", name="orderly")


def test_tag_filter_delivers_only_the_subscribed_tags(java):
    create_topic(java, "JTags")
    java.call("consume", name="tags", group="gTags", topic="JTags", expr="TagA || TagC")
    java.call("produce", group="pTags", topic="JTags", mode="sync", count=12, tagCycle=["TagA", "TagB", "TagC"],
              keyPrefix="tg")
    got = collect(java, "tags", 8, quiet=1)
    assert sorted(m["keys"] for m in got) == sorted(f"tg-{i}" for i in range(12) if i % 3 != 1)
    assert {m["tags"] for m in got} == {"TagA", "TagC"}
    java.call("stop", name="tags")


def test_a_new_group_consuming_from_the_last_offset_still_reads_a_queue_that_starts_at_zero(java):
    """CONSUME_FROM_LAST_OFFSET only skips what a queue has already dropped: the broker answers offset 0 for a
    group it does not know while the queue still starts at 0, so nothing sent before the consumer came is lost."""
    create_topic(java, "JLast")
    java.call("produce", group="pLast", topic="JLast", mode="sync", count=6, tags="T", keyPrefix="early")
    java.call("consume", name="last", group="gLast", topic="JLast", **{"from": "LAST"})
    got = collect(java, "last", 6, quiet=0.5)
    assert sorted(m["keys"] for m in got) == [f"early-{i}" for i in range(6)]
    java.call("stop", name="last")


def test_delay_level_message_is_delivered_not_before_its_time(java):
    create_topic(java, "JDelay")
    java.call("consume", name="delay", group="gDelay", topic="JDelay")
    sent = java.call("produce", group="pDelay", topic="JDelay", mode="sync", count=3, tags="T", keyPrefix="d",
                     delayLevel=1)["sent"]
    assert {s["status"] for s in sent} == {"SEND_OK"}
    got = collect(java, "delay", 3, quiet=0.5)
    assert sorted(m["keys"] for m in got) == ["d-0", "d-1", "d-2"]
    for m in got:
        assert m["topic"] == "JDelay"
        assert m["storeTimestamp"] - m["bornTimestamp"] >= 1000, m  # level 1 = 1 s on this broker
        assert m["receivedAt"] - m["bornTimestamp"] >= 1000, m
    java.call("stop", name="delay")


def test_failed_message_is_retried_with_rising_reconsume_times_then_lands_in_the_dlq(java):
    create_topic(java, "JRetry")
    java.call("consume", name="retry", group="gRetry", topic="JRetry", failPrefix="fail", maxReconsumeTimes=2)
    java.call("produce", group="pRetry", topic="JRetry", mode="sync", count=1, tags="T", keyPrefix="fail")
    java.call("produce", group="pRetry", topic="JRetry", mode="sync", count=1, tags="T", keyPrefix="fine")
    got = collect(java, "retry", 4, timeout=30, quiet=1.5)
    fine = [m for m in got if m["keys"] == "fine-0"]
    failed = [m for m in got if m["keys"] == "fail-0"]
    assert len(fine) == 1 and not fine[0]["failed"]
    # delivered, retried twice (maxReconsumeTimes = 2), each time under its own topic with the count raised
    assert [m["reconsumeTimes"] for m in failed] == [0, 1, 2], failed
    assert {m["topic"] for m in failed} == {"JRetry"}
    assert all(m["properties"].get("RETRY_TOPIC") == "JRetry" for m in failed[1:])
    assert len({m["msgId"] for m in failed}) == 1  # the client keeps the original message id
    java.call("stop", name="retry")

    java.call("consume", name="dlq", group="gDlqReader", topic="%DLQ%gRetry")
    dead = collect(java, "dlq", 1, quiet=0.5)
    assert [(m["keys"], m["body"], m["topic"]) for m in dead] == [("fail-0", "body-fail-0", "%DLQ%gRetry")]
    assert dead[0]["reconsumeTimes"] == 3 and dead[0]["msgId"] == failed[0]["msgId"]
    java.call("stop", name="dlq")
    # the dead letter is found by key in the DLQ topic too
    found = java.call("admin", call="queryMessage", topic="%DLQ%gRetry", key="fail-0")["msgs"]
    assert [m["keys"] for m in found] == ["fail-0"]


def test_queries_by_key_and_msg_id_and_the_mqadmin_commands(java):
    create_topic(java, "JAdmin")
    assert "JAdmin" in mqadmin(java, "topicList").split()
    # routes: the writable master under id 0; a topic nobody serves is TOPIC_NOT_EXIST (17)
    route = java.call("admin", call="topicRoute", topic="JAdmin")["result"]
    assert route["brokerDatas"][0]["brokerAddrs"] == {"0": java.broker_addr}
    assert route["queueDatas"][0]["readQueueNums"] == 4 and route["queueDatas"][0]["perm"] == 6
    missing = java.call("admin", call="topicRoute", topic="NoSuchTopic", check=False)
    assert missing["ok"] is False and "CODE: 17" in missing["error"]
    clusters = mqadmin(java, "clusterList")
    assert CLUSTER in clusters and "broker-a" in clusters and java.broker_addr in clusters

    sent = java.call("produce", group="pAdmin", topic="JAdmin", mode="sync", count=8, tags="T", keyPrefix="q")["sent"]
    q3 = next(s for s in sent if s["keys"] == "q-3")
    # DefaultMQAdminExt: by key (QUERY_MESSAGE), by offset msgId (VIEW_MESSAGE_BY_ID), by unique msgId (QUERY_MESSAGE
    # with _UNIQUE_KEY_QUERY)
    by_key = java.call("admin", call="queryMessage", topic="JAdmin", key="q-3")["msgs"]
    assert [(m["keys"], m["body"], m["queueOffset"]) for m in by_key] == [("q-3", "body-q-3", q3["queueOffset"])]
    assert java.call("admin", call="viewMessage", msgId=q3["offsetMsgId"])["msgs"][0]["keys"] == "q-3"
    by_uniq = java.call("admin", call="viewMessage", topic="JAdmin", msgId=q3["msgId"])["msgs"]
    assert [(m["keys"], m["msgId"]) for m in by_uniq] == [("q-3", q3["msgId"])]
    assert java.call("admin", call="queryMessage", topic="JAdmin", key="no-such-key", check=False)["ok"] is False

    out = mqadmin(java, "queryMsgByKey", "-t", "JAdmin", "-k", "q-5")
    assert next(s["msgId"] for s in sent if s["keys"] == "q-5") in out

    status = mqadmin(java, "topicStatus", "-t", "JAdmin")
    rows = [line.split() for line in status.splitlines() if line.startswith("broker-a")]
    assert len(rows) == 4 and sum(int(r[3]) - int(r[2]) for r in rows) == 8  # #Broker Name #QID #Min Offset #Max Offset

    java.call("consume", name="admin", group="gAdmin", topic="JAdmin")
    first = collect(java, "admin", 8)
    assert sorted(m["keys"] for m in first) == sorted(f"q-{i}" for i in range(8))
    deadline = time.monotonic() + 20
    while True:  # the client persists its offsets every second (persistConsumerOffsetInterval)
        progress = mqadmin(java, "consumerProgress", "-g", "gAdmin")
        if "Diff Total: 0" in progress or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    rows = [line.split() for line in progress.splitlines() if line.startswith("JAdmin")]
    assert len(rows) == 4 and all(r[3] == r[4] for r in rows), progress  # #Broker Offset == #Consumer Offset
    assert "Diff Total: 0" in progress
    # queryMsgById prints the message and its track: which groups consumed it
    out = mqadmin(java, "queryMsgById", "-i", q3["offsetMsgId"])
    assert "q-3" in out and "JAdmin" in out
    assert "consumerGroup=gAdmin, trackType=CONSUMED" in out, out

    # resetOffsetByTime with the consumer online: the broker tells the consumer, which consumes everything again
    out = mqadmin(java, "resetOffsetByTime", "-g", "gAdmin", "-t", "JAdmin", "-s", "0")
    assert "rollback consumer offset" in out, out
    again = collect(java, "admin", 8, quiet=0.5)
    assert sorted(m["keys"] for m in again) == sorted(f"q-{i}" for i in range(8))

    # the clients of a group and what they run (consumerStatus and consume-directly go through the broker to them)
    connections = mqadmin(java, "consumerConnection", "-g", "gAdmin")
    client_ids = [line.split()[0] for line in connections.splitlines() if "@" in line]
    assert len(client_ids) == 1 and "JAdmin" in connections and "CONSUME_PASSIVELY" in connections
    assert "V4_9_8" in mqadmin(java, "producerConnection", "-g", "pAdmin", "-t", "JAdmin")
    status = mqadmin(java, "consumerStatus", "-g", "gAdmin")
    assert client_ids[0] in status and "Rebalance OK" in status
    out = mqadmin(java, "queryMsgById", "-i", q3["offsetMsgId"], "-g", "gAdmin", "-d", client_ids[0])
    assert "consumeResult=CR_SUCCESS" in out, out
    assert [m["keys"] for m in collect(java, "admin", 1)] == ["q-3"]  # handed to the listener directly
    java.call("stop", name="admin")

    broker_config = mqadmin(java, "getBrokerConfig", "-b", java.broker_addr)
    assert re.search(r"^brokerName\s+=\s+broker-a$", broker_config, re.M), broker_config
    assert re.search(r"^messageDelayLevel\s+=\s+1s 1s", broker_config, re.M)
    assert re.search(r"^brokerChannelExpiredTime\s+=\s+120000$", mqadmin(java, "getNamesrvConfig"), re.M)


def test_vip_channel_producer_auto_creates_a_topic_through_tbw102(java):
    sent = java.call("produce", group="pVip", topic="JAuto", mode="sync", count=4, tags="T", keyPrefix="v", vip=True)
    assert {s["status"] for s in sent["sent"]} == {"SEND_OK"}
    assert "JAuto" in mqadmin(java, "topicList").split()
    java.call("consume", name="vip", group="gVip", topic="JAuto", vip=True)
    got = collect(java, "vip", 4, quiet=0.5)
    assert sorted(m["keys"] for m in got) == [f"v-{i}" for i in range(4)]
    java.call("stop", name="vip")


def test_request_reply_round_trip_through_send_reply_message_and_the_push_to_the_requester(java):
    create_topic(java, "JRequest")
    java.call("consume", name="replier", group="gReplier", topic="JRequest", replyGroup="pReplier")
    answers = java.call("produce", group="pRequester", topic="JRequest", mode="request", count=3, tags="T",
                        keyPrefix="rq", timeoutMs=10000, timeout=40)["sent"]
    assert [(a["keys"], a["replyBody"], a["replyTopic"]) for a in answers] == [
        (f"rq-{i}", f"reply to body-rq-{i}", f"{CLUSTER}_REPLY_TOPIC") for i in range(3)]
    assert all(a["replyProperties"]["MSG_TYPE"] == "reply" and "PUSH_REPLY_TIME" in a["replyProperties"] for a in answers)
    served = collect(java, "replier", 3)
    assert sorted(m["keys"] for m in served) == ["rq-0", "rq-1", "rq-2"] and {m["replyStatus"] for m in served} == {"SEND_OK"}
    java.call("stop", name="replier")


def test_sql92_subscription_is_refused_at_start_as_by_a_broker_without_property_filtering(java):
    create_topic(java, "JSql")
    answer = java.call("consume", name="sql", group="gSql", topic="JSql", sql="a > 1", check=False)
    assert answer["ok"] is False
    assert "does not support consumer to filter message by SQL92" in (answer["error"] + str(answer.get("cause")))


def test_rocketmq_binary_serialization_and_send_message_v1_headers(java, java_cluster, java_driver, tmp_path):
    """A second JVM with the client's other wire options: ROCKETMQ (binary) headers instead of JSON, and the V1
    SendMessageRequestHeader spelling (codes 10 and 320 with long field names) instead of V2."""
    other = java_driver(java_cluster["namesrv"], tmp_path, props={
        "rocketmq.serialize.type": "ROCKETMQ", "org.apache.rocketmq.client.sendSmartMsg": "false"})
    try:
        create_topic(java, "JWire")
        other.call("consume", name="wire", group="gWire", topic="JWire")
        single = other.call("produce", group="pWire", topic="JWire", mode="sync", count=4, tags="T", keyPrefix="w")
        batch = other.call("produce", group="pWire", topic="JWire", mode="batch", count=4, tags="T", keyPrefix="wb")
        assert {s["status"] for s in single["sent"] + batch["sent"]} == {"SEND_OK"}
        got = collect(other, "wire", 8, quiet=0.5)
        assert sorted(m["keys"] for m in got) == sorted([f"w-{i}" for i in range(4)] + [f"wb-{i}" for i in range(4)])
        q = other.call("admin", call="queryMessage", topic="JWire", key="w-2")["msgs"]
        assert [m["keys"] for m in q] == ["w-2"]
        # request-reply with V1 headers: SEND_REPLY_MESSAGE (324) instead of 325
        other.call("consume", name="replier", group="gWireReplier", topic="JWire", expr="R", replyGroup="pWireReplier")
        answers = other.call("produce", group="pWireRequester", topic="JWire", mode="request", count=2, tags="R",
                             keyPrefix="wr", timeoutMs=10000, timeout=40)["sent"]
        assert [a["replyBody"] for a in answers] == ["reply to body-wr-0", "reply to body-wr-1"]
    finally:
        other.close()
    log = (tmp_path / "logs" / "rocketmq_client.log").read_text()
    assert "SerializerType:ROCKETMQ" in log  # the client really ran with binary headers


def test_oneway_requests_get_no_answer(java):
    """The Java client logs every response it cannot match to a request; an answer to a oneway request (sendOneway,
    the consumer's offset updates every second) would be one. Only this test's stretch of the log is read: a client
    that shuts down while a request is in flight logs the late answer too."""
    create_topic(java, "JOneway")
    java.call("consume", name="oneway", group="gOneway", topic="JOneway")
    start = java.client_log.stat().st_size
    java.call("produce", group="pOneway", topic="JOneway", mode="oneway", count=6, tags="T", keyPrefix="ow")
    got = collect(java, "oneway", 6, quiet=2.5)  # two rounds of offset updates (persistConsumerOffsetInterval 1 s)
    assert sorted(m["keys"] for m in got) == [f"ow-{i}" for i in range(6)]
    with open(java.client_log, "rb") as log:
        log.seek(start)
        stretch = log.read().decode(errors="replace")
    java.call("stop", name="oneway")
    assert "not matched any request" not in stretch
    assert "decode" not in stretch.lower()


def test_mqadmin_status_stats_and_a_running_pyrmq_consumer(java):
    """mqadmin against a pyrmq *client* consumer: the broker passes consumerStatus (GET_CONSUMER_RUNNING_INFO),
    queryMsgById -d (CONSUME_MESSAGE_DIRECTLY) and resetOffsetByTime (RESET_CONSUMER_CLIENT_OFFSET) on to it, and
    answers brokerStatus, statsAll (VIEW_BROKER_STATS_DATA), printMsg, queryMsgByUniqueKey and clusterList."""
    import threading

    from pyrmq.client import BlockingPushConsumer

    create_topic(java, "JPy", queues=2)
    sent = java.call("produce", group="pPy", topic="JPy", mode="sync", count=6, tags="T", keyPrefix="py")["sent"]
    received: list[str] = []
    lock = threading.Lock()

    def listener(msg) -> None:
        with lock:
            received.append(msg.keys[0])

    def wait_received(n: int, timeout: float = 20) -> list[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with lock:
                if len(received) >= n:
                    return list(received)
            time.sleep(0.1)
        raise AssertionError(f"the pyrmq consumer received {received}, expected {n} messages")

    consumer = BlockingPushConsumer(java.namesrv, "gPy", consume_from="first")
    consumer.subscribe("JPy", "*")
    consumer.register_listener(listener)
    with consumer:
        assert sorted(wait_received(6)) == [f"py-{i}" for i in range(6)]

        connections = mqadmin(java, "consumerConnection", "-g", "gPy")
        client_ids = [next(t for t in line.split() if "@" in t) for line in connections.splitlines() if "PYTHON" in line]
        assert len(client_ids) == 1, connections
        status = mqadmin(java, "consumerStatus", "-g", "gPy")
        assert client_ids[0] in status and "Same subscription in the same group of consumer" in status, status
        assert "Rebalance OK" in status
        detail = mqadmin(java, "consumerStatus", "-g", "gPy", "-i", client_ids[0])
        assert "CONSUME_PASSIVELY" in detail and "JPy" in detail, detail

        # handed to the pyrmq listener directly, outside its queues
        py3 = next(s for s in sent if s["keys"] == "py-3")
        out = mqadmin(java, "queryMsgById", "-i", py3["offsetMsgId"], "-g", "gPy", "-d", client_ids[0])
        assert "consumeResult=CR_SUCCESS" in out, out
        assert wait_received(7)[-1] == "py-3"

        # statsAll: 6 in, 7 handed out... through pulls only: the direct consume is no pull
        deadline = time.monotonic() + 20
        while True:  # the consumer commits its offsets every 5 s (persistConsumerOffsetInterval)
            stats = mqadmin(java, "statsAll", "-t", "JPy")
            row = next((line.split() for line in stats.splitlines() if line.startswith("JPy")), None)
            if (row and row[2] == "0") or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert row is not None and row[1] == "gPy", stats
        assert row[2] == "0" and row[5] == "6" and row[6] == "6", stats  # accumulation, in / out over 24 h
        assert float(row[3]) > 0 and float(row[4]) > 0  # in / out TPS over the last minute

        # reset to the start while it runs: the broker tells the pyrmq consumer, which consumes everything again
        out = mqadmin(java, "resetOffsetByTime", "-g", "gPy", "-t", "JPy", "-s", "0")
        assert "rollback consumer offset" in out, out
        again = wait_received(13)[7:]
        assert sorted(again) == [f"py-{i}" for i in range(6)]

    broker_status = mqadmin(java, "brokerStatus", "-b", java.broker_addr)
    table = dict(re.findall(r"^(\w+)[ \t]*:[ \t]*(.*)$", broker_status, re.M))
    assert int(table["msgPutTotalTodayNow"]) >= 6 and int(table["msgGetTotalTodayNow"]) >= 12, broker_status
    assert table["brokerVersionDesc"].startswith("V4_9_8")

    py5 = next(s for s in sent if s["keys"] == "py-5")
    out = mqadmin(java, "queryMsgByUniqueKey", "-i", py5["msgId"], "-t", "JPy")
    assert py5["msgId"] in out and "py-5" in out, out
    printed = mqadmin(java, "printMsg", "-t", "JPy")
    assert sorted(re.findall(r"BODY: (body-py-\d)", printed)) == [f"body-py-{i}" for i in range(6)], printed
    clusters = mqadmin(java, "clusterList")
    row = next(line.split() for line in clusters.splitlines() if java.broker_addr in line)
    assert row[0] == CLUSTER and row[1] == "broker-a", clusters
