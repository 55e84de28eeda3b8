"""Proof with a real client: the pure-JS RocketMQ 4.x client ali-ons against `pyrmq namesrv` + `pyrmq broker`
running as real subprocesses (issue 5).
"""

from __future__ import annotations

import json
import time

import pytest

from pyrmq.remoting.blocking import BlockingRemotingClient
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.store.format import decode_message_id, decode_messages

pytestmark = pytest.mark.slow


def create_topic(client: BlockingRemotingClient, broker: str, topic: str, queues: int = 4) -> None:
    resp = client.invoke(broker, RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
        "topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(queues), "writeQueueNums": str(queues),
        "perm": "6", "topicFilterType": "SINGLE_TAG"}))
    assert resp.code == ResponseCode.SUCCESS, resp.remark


def route(client: BlockingRemotingClient, namesrv: str, topic: str) -> dict | None:
    resp = client.invoke(namesrv, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}))
    return json.loads(resp.body_bytes()) if resp.code == ResponseCode.SUCCESS else None


def start_broker(spawn, namesrv: str, port: int, store: str, name: str = "broker-a"):
    return spawn("broker", "-c", "broker", "--namesrv", namesrv, "--listen", f"127.0.0.1:{port}", "--store-dir", store,
                 "--set", f"brokerName={name}", name=name)


def test_alions_produces_consumes_survives_restart_and_is_queryable(run_js, spawn, tmp_path, broker_port):
    namesrv = spawn("namesrv", "--listen", "127.0.0.1:0", name="namesrv").listening["namesrv"]
    port = broker_port()
    store = str(tmp_path / "store")
    broker = start_broker(spawn, namesrv, port, store)
    broker_addr = broker.listening["broker"]
    with BlockingRemotingClient() as client:
        create_topic(client, broker_addr, "E2ETopic")
        assert route(client, namesrv, "E2ETopic") is not None

        sent = run_js("produce.js", namesrv, "E2ETopic", 100, "TagA", "k")
        sent += run_js("produce.js", namesrv, "E2ETopic", 20, "TagB", "x")
        assert len(sent) == 120 and {s["status"] for s in sent} == {"SEND_OK"}
        assert len({s["queueId"] for s in sent}) == 4  # spread over the topic's queues

        got = run_js("consume.js", namesrv, "E2ETopic", "g1", "TagA", 100, 20)
        assert sorted(m["keys"][0] if isinstance(m["keys"], list) else m["keys"] for m in got) == sorted(f"k-{i}" for i in range(100))
        assert {m["tags"] for m in got} == {"TagA"} and all(m["size"] == 1024 for m in got)

        # restart the broker: the committed offsets of g1 survive, nothing is delivered twice
        assert broker.stop() == 0
        broker = start_broker(spawn, namesrv, port, store)
        again = run_js("consume.js", namesrv, "E2ETopic", "g1", "TagA", 1, 12)
        assert again == []
        run_js("produce.js", namesrv, "E2ETopic", 5, "TagA", "n")
        fresh = run_js("consume.js", namesrv, "E2ETopic", "g1", "TagA", 5, 20)
        assert sorted(str(m["keys"]) for m in fresh) == sorted(str([f"n-{i}"]) if isinstance(fresh[0]["keys"], list) else f"n-{i}" for i in range(5))

        # query by key (QUERY_MESSAGE) and by the offset msgId the consumer saw (VIEW_MESSAGE_BY_ID)
        now = int(time.time() * 1000)
        found = client.invoke(broker_addr, RemotingCommand.request(RequestCode.QUERY_MESSAGE, {
            "topic": "E2ETopic", "key": "k-7", "maxNum": "32", "beginTimestamp": str(now - 600_000), "endTimestamp": str(now + 60_000)}))
        assert found.code == ResponseCode.SUCCESS
        records = decode_messages(found.body_bytes())
        assert [r.properties["KEYS"] for r in records] == ["k-7"]
        k7 = next(m for m in got if "k-7" in (m["keys"] if isinstance(m["keys"], list) else [m["keys"]]))
        _, _, offset = decode_message_id(k7["msgId"])
        viewed = client.invoke(broker_addr, RemotingCommand.request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(offset)}))
        assert decode_messages(viewed.body_bytes())[0].properties["KEYS"] == "k-7"


def test_two_brokers_one_topic_and_a_killed_broker_leaves_the_routes(run_js, spawn, tmp_path, broker_port):
    namesrv = spawn("namesrv", "--listen", "127.0.0.1:0", name="namesrv").listening["namesrv"]
    a = start_broker(spawn, namesrv, broker_port(), str(tmp_path / "a"), "broker-a")
    b = start_broker(spawn, namesrv, broker_port(), str(tmp_path / "b"), "broker-b")
    with BlockingRemotingClient() as client:
        for broker in (a, b):
            create_topic(client, broker.listening["broker"], "Spread", 2)
        r = route(client, namesrv, "Spread")
        assert sorted(q["brokerName"] for q in r["queueDatas"]) == ["broker-a", "broker-b"]

        sent = run_js("produce.js", namesrv, "Spread", 40, "T", "s")
        assert {s["status"] for s in sent} == {"SEND_OK"}
        per_broker = {}
        for broker in (a, b):
            addr = broker.listening["broker"]
            per_broker[addr] = sum(
                int(client.invoke(addr, RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": "Spread", "queueId": str(q)})).ext_fields["offset"])
                for q in range(2)
            )
        assert sum(per_broker.values()) == 40 and all(n > 0 for n in per_broker.values())

        b.kill()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            r = route(client, namesrv, "Spread")
            if r and [q["brokerName"] for q in r["queueDatas"]] == ["broker-a"]:
                break
            time.sleep(0.2)
        assert [q["brokerName"] for q in r["queueDatas"]] == ["broker-a"]
        after = run_js("produce.js", namesrv, "Spread", 10, "T", "after")
        assert {s["status"] for s in after} == {"SEND_OK"}
