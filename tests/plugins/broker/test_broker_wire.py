"""The broker over its wire protocol: send, pull (with long polling), heartbeats, offsets, queries, locks, admin.

These speak RocketMQ's remoting protocol directly (as a Java/Go/C++ client would), against `pyrmq dev` started
in-process on free ports.
"""

from __future__ import annotations

import json
import time

import pytest
import trio

from pyrmq.remoting import fastjson
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.store.format import (
    BatchEntry,
    decode_message_id,
    decode_messages,
    encode_batch_body,
    encode_properties,
)

GROUP = "g1"


def send_request(topic, body, *, tags=None, keys=None, queue_id=-1, v2=True, extra_props=None, code=None):
    props = {"UNIQ_KEY": f"U{time.monotonic_ns():030d}"[:32], "WAIT": "true"}
    if tags:
        props["TAGS"] = tags
    if keys:
        props["KEYS"] = keys
    props.update(extra_props or {})
    fields = {
        "producerGroup": "pg", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": 4,
        "queueId": queue_id, "sysFlag": 0, "bornTimestamp": int(time.time() * 1000), "flag": 0,
        "properties": encode_properties(props), "reconsumeTimes": 0, "unitMode": False,
    }
    if v2:
        short = dict(zip(["producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId", "sysFlag",
                          "bornTimestamp", "flag", "properties", "reconsumeTimes", "unitMode"], "abcdefghijk"))
        fields = {short[k]: v for k, v in fields.items()}
    return RemotingCommand.request(code or (RequestCode.SEND_MESSAGE_V2 if v2 else RequestCode.SEND_MESSAGE), fields, body)


def pull_request(topic, queue_id, offset, *, sub="*", suspend_ms=0, sys_flag=None, commit_offset=0, max_nums=32):
    flag = sys_flag if sys_flag is not None else (0x4 | (0x2 if suspend_ms else 0))
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, {
        "consumerGroup": GROUP, "topic": topic, "queueId": str(queue_id), "queueOffset": str(offset),
        "maxMsgNums": str(max_nums), "sysFlag": str(flag), "commitOffset": str(commit_offset),
        "suspendTimeoutMillis": str(suspend_ms), "subscription": sub, "subVersion": "0",
    })


def create_topic(topic, queues=4, perm=6):
    return RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
        "topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(queues), "writeQueueNums": str(queues),
        "perm": str(perm), "topicFilterType": "SINGLE_TAG",
    })


@pytest.fixture
async def broker(start_role):
    kernel = await start_role("dev")
    return kernel


async def test_send_v1_and_v2_then_pull_the_same_bytes_back(broker, remoting_client):
    addr = broker.listening["broker"]
    assert (await remoting_client.invoke(addr, create_topic("T1", 2))).code == 0
    r1 = await remoting_client.invoke(addr, send_request("T1", b"one", tags="A", keys="k1 k2", queue_id=1))
    r2 = await remoting_client.invoke(addr, send_request("T1", b"two", tags="B", queue_id=1, v2=False))
    assert r1.code == r2.code == ResponseCode.SUCCESS
    assert (r1.ext_fields["queueId"], r1.ext_fields["queueOffset"], r2.ext_fields["queueOffset"]) == ("1", "0", "1")
    assert r1.ext_fields["MSG_REGION"] == "DefaultRegion" and r1.ext_fields["TRACE_ON"] == "true"
    ip, port, offset = decode_message_id(r1.ext_fields["msgId"])
    assert (ip, port, offset) == ("127.0.0.1", int(addr.rsplit(":", 1)[1]), 0)

    pulled = await remoting_client.invoke(addr, pull_request("T1", 1, 0))
    assert pulled.code == ResponseCode.SUCCESS and pulled.remark == "FOUND"
    assert pulled.ext_fields["nextBeginOffset"] == "2" and pulled.ext_fields["maxOffset"] == "2"
    messages = decode_messages(pulled.body_bytes())
    assert [m.body for m in messages] == [b"one", b"two"]
    first = messages[0]
    assert first.topic == "T1" and first.queue_offset == 0 and first.msg_id == r1.ext_fields["msgId"]
    assert first.properties["KEYS"] == "k1 k2" and first.properties["CLUSTER"] == "DefaultCluster"
    assert "WAIT" not in first.properties


async def _raw_round_trip(addr, request):
    """The response frame's JSON header text for ``request``, as the broker wrote it (a plain TCP stream)."""
    host, port = addr.rsplit(":", 1)
    with trio.fail_after(10):
        stream = await trio.open_tcp_stream(host, int(port))
        async with stream:
            await stream.send_all(request.encode())
            data = b""
            while len(data) < 8 or len(data) < 4 + int.from_bytes(data[:4], "big"):
                chunk = await stream.receive_some(65536)
                assert chunk, "connection closed before the whole response"
                data += chunk
    header_len = int.from_bytes(data[4:8], "big") & 0xFFFFFF
    return data[8 : 8 + header_len].decode()


async def test_pull_answers_write_the_generic_encoders_header_bytes(broker, remoting_client):
    """The pull answer's extFields come from a template (``ext_json``): on the wire, for each status a pull can end
    with, the header is byte for byte what the generic encoder writes for the same fields, and those fields are
    PullMessageResponseHeader's."""
    from pyrmq.remoting.framing import FrameDecoder

    addr = broker.listening["broker"]
    assert (await remoting_client.invoke(addr, create_topic("TPullHead", 1))).code == 0
    for i in range(5):
        sent = await remoting_client.invoke(addr, send_request("TPullHead", b"%d" % i, tags="A", queue_id=0))
        assert sent.code == ResponseCode.SUCCESS
    cases = [
        (pull_request("TPullHead", 0, 0), ResponseCode.SUCCESS, "FOUND", "5"),
        (pull_request("TPullHead", 0, 3, max_nums=1), ResponseCode.SUCCESS, "FOUND", "4"),
        (pull_request("TPullHead", 0, 5), ResponseCode.PULL_NOT_FOUND, "OFFSET_OVERFLOW_ONE", "5"),
        (pull_request("TPullHead", 0, 9), ResponseCode.PULL_OFFSET_MOVED, "OFFSET_OVERFLOW_BADLY", "5"),
        (pull_request("TPullHead", 0, 0, sub="B"), ResponseCode.PULL_RETRY_IMMEDIATELY, "NO_MATCHED_MESSAGE", "5"),
    ]
    for request, code, remark, next_begin in cases:
        header = await _raw_round_trip(addr, request)
        [decoded] = FrameDecoder().feed(_frame_of(header))
        assert (decoded.code, decoded.remark) == (code, remark), header
        assert decoded.ext_fields == {"suggestWhichBrokerId": "0", "nextBeginOffset": next_begin, "minOffset": "0",
                                      "maxOffset": "5"}
        assert decoded.encode_header().decode() == header


def _frame_of(header: str) -> bytes:
    """A bodiless remoting frame holding ``header`` (JSON serialisation)."""
    raw = header.encode()
    return (4 + len(raw)).to_bytes(4, "big") + len(raw).to_bytes(4, "big") + raw


async def test_single_send_paths_answer_and_store_alike(broker, remoting_client):
    """SEND_MESSAGE_V2 (short names) takes the broker's one-pass single-send path, SEND_MESSAGE (long names) the
    general one: the same response header bytes but for the message's own id and offsets, the same stored
    properties (WAIT dropped, CLUSTER added last), both indexed by key."""
    addr = broker.listening["broker"]
    assert (await remoting_client.invoke(addr, create_topic("T9", 2))).code == 0
    same = {"UNIQ_KEY": "AC1100020001000000000000000000AB"}
    headers = []
    for v2 in (True, False):
        request = send_request("T9", b"body", tags="A", keys="k9", queue_id=1, v2=v2, extra_props=same)
        request.opaque = 77
        headers.append(await _raw_round_trip(addr, request))
    fast, general = (json.loads(h) for h in headers)
    assert fast["code"] == general["code"] == ResponseCode.SUCCESS
    assert list(fast["extFields"]) == list(general["extFields"]) == [
        "MSG_REGION", "TRACE_ON", "msgId", "queueId", "queueOffset"]
    assert (fast["extFields"]["queueOffset"], general["extFields"]["queueOffset"]) == ("0", "1")
    assert headers[0].replace(fast["extFields"]["msgId"], "ID").replace('"queueOffset":"0"', "") == (
        headers[1].replace(general["extFields"]["msgId"], "ID").replace('"queueOffset":"1"', ""))
    pulled = decode_messages((await remoting_client.invoke(addr, pull_request("T9", 1, 0))).body_bytes())
    assert [m.msg_id for m in pulled] == [fast["extFields"]["msgId"], general["extFields"]["msgId"]]
    stored = encode_properties({**same, "TAGS": "A", "KEYS": "k9", "CLUSTER": "DefaultCluster"}).encode()
    assert [m.properties_bytes for m in pulled] == [stored, stored]
    query = RemotingCommand.request(RequestCode.QUERY_MESSAGE, {
        "topic": "T9", "key": "k9", "maxNum": "32", "beginTimestamp": "0", "endTimestamp": str(2**62)})
    found = await remoting_client.invoke(addr, query)
    assert found.code == ResponseCode.SUCCESS and len(decode_messages(found.body_bytes())) == 2


async def test_pull_statuses_match_the_spec_table(broker, remoting_client):
    addr = broker.listening["broker"]
    await remoting_client.invoke(addr, create_topic("T2", 1))
    empty = await remoting_client.invoke(addr, pull_request("T2", 0, 0))
    assert empty.code == ResponseCode.PULL_NOT_FOUND and empty.ext_fields["nextBeginOffset"] == "0"
    moved = await remoting_client.invoke(addr, pull_request("T2", 0, 5))
    assert moved.code == ResponseCode.PULL_OFFSET_MOVED
    await remoting_client.invoke(addr, send_request("T2", b"x", queue_id=0))
    at_end = await remoting_client.invoke(addr, pull_request("T2", 0, 1))
    assert at_end.code == ResponseCode.PULL_NOT_FOUND and at_end.remark == "OFFSET_OVERFLOW_ONE"
    badly = await remoting_client.invoke(addr, pull_request("T2", 0, 9))
    assert badly.code == ResponseCode.PULL_OFFSET_MOVED and badly.ext_fields["nextBeginOffset"] == "1"
    bad_queue = await remoting_client.invoke(addr, pull_request("T2", 3, 0))
    assert bad_queue.code == ResponseCode.SYSTEM_ERROR and "queueId[3] is illegal" in bad_queue.remark
    no_topic = await remoting_client.invoke(addr, pull_request("Nope", 0, 0))
    assert no_topic.code == ResponseCode.TOPIC_NOT_EXIST


async def test_tag_filter_skips_other_tags_and_says_retry_immediately(broker, remoting_client):
    addr = broker.listening["broker"]
    await remoting_client.invoke(addr, create_topic("T3", 1))
    for tag in ("A", "B", "A", "C"):
        await remoting_client.invoke(addr, send_request("T3", tag.encode(), tags=tag, queue_id=0))
    only_a = await remoting_client.invoke(addr, pull_request("T3", 0, 0, sub="A"))
    assert [m.body for m in decode_messages(only_a.body_bytes())] == [b"A", b"A"]
    b_or_c = await remoting_client.invoke(addr, pull_request("T3", 0, 0, sub="B || C"))
    assert [m.body for m in decode_messages(b_or_c.body_bytes())] == [b"B", b"C"]
    none = await remoting_client.invoke(addr, pull_request("T3", 0, 0, sub="Z"))
    assert none.code == ResponseCode.PULL_RETRY_IMMEDIATELY and none.ext_fields["nextBeginOffset"] == "4"


async def test_long_polling_answers_as_soon_as_a_matching_message_arrives(broker, remoting_client):
    addr = broker.listening["broker"]
    await remoting_client.invoke(addr, create_topic("T4", 1))
    results = {}

    async def parked_pull():
        results["pull"] = await remoting_client.invoke(addr, pull_request("T4", 0, 0, sub="Wanted", suspend_ms=15000), timeout=30)
        results["at"] = trio.current_time()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(parked_pull)
        await trio.sleep(0.3)
        assert "pull" not in results  # parked, no answer yet
        await remoting_client.invoke(addr, send_request("T4", b"ignored", tags="Other", queue_id=0))
        await trio.sleep(0.3)
        assert "pull" not in results  # a message not matching the filter does not wake it
        sent_at = trio.current_time()
        await remoting_client.invoke(addr, send_request("T4", b"hello", tags="Wanted", queue_id=0))
    assert results["pull"].code == ResponseCode.SUCCESS
    assert [m.body for m in decode_messages(results["pull"].body_bytes())] == [b"hello"]
    assert results["at"] - sent_at < 5  # woken by the dispatch, not by the 5 s re-check or the 15 s timeout


async def test_long_poll_times_out_with_not_found(broker, remoting_client):
    addr = broker.listening["broker"]
    await remoting_client.invoke(addr, create_topic("T5", 1))
    resp = await remoting_client.invoke(addr, pull_request("T5", 0, 0, suspend_ms=300), timeout=10)
    assert resp.code == ResponseCode.PULL_NOT_FOUND


async def test_batch_send_gets_consecutive_offsets_and_comma_joined_ids(broker, remoting_client):
    addr = broker.listening["broker"]
    await remoting_client.invoke(addr, create_topic("T6", 1))
    entries = [BatchEntry(0, f"m{i}".encode(), encode_properties({"UNIQ_KEY": f"B{i}", "KEYS": f"bk{i}"}).encode()) for i in range(5)]
    req = send_request("T6", encode_batch_body(entries), queue_id=0, code=RequestCode.SEND_BATCH_MESSAGE)
    req.ext_fields["m"] = "true"
    resp = await remoting_client.invoke(addr, req)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert resp.ext_fields["queueOffset"] == "0" and len(resp.ext_fields["msgId"].split(",")) == 5
    pulled = decode_messages((await remoting_client.invoke(addr, pull_request("T6", 0, 0))).body_bytes())
    assert [(m.body, m.queue_offset, m.properties["KEYS"]) for m in pulled] == [(f"m{i}".encode(), i, f"bk{i}") for i in range(5)]


async def test_batch_like_a_java_producer_stores_tags_keys_and_cluster_and_indexes_every_key(broker, remoting_client):
    """Entries as the Java client encodes them (UNIQ_KEY, KEYS, TAGS and WAIT in each, WAIT in the header too): the
    stored properties drop WAIT and carry CLUSTER, tag filtering and key queries see every message."""
    addr = broker.listening["broker"]
    await remoting_client.invoke(addr, create_topic("T6b", 1))
    entries = [
        BatchEntry(i, f"m{i}".encode(), encode_properties({
            "UNIQ_KEY": f"7F00000100002A9F00000000000{i:05X}", "KEYS": f"order-{i} every-order", "WAIT": "true",
            "TAGS": "TagA" if i % 2 else "TagB",
        }).encode())
        for i in range(6)
    ]
    req = send_request("T6b", encode_batch_body(entries), queue_id=0, code=RequestCode.SEND_BATCH_MESSAGE)
    req.ext_fields["m"] = "true"
    req.ext_fields["i"] = encode_properties({"WAIT": "true"})  # the batch's own properties: no UNIQ_KEY of its own
    resp = await remoting_client.invoke(addr, req)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    pulled = decode_messages((await remoting_client.invoke(addr, pull_request("T6b", 0, 0))).body_bytes())
    assert [(m.body, m.flag, m.queue_offset) for m in pulled] == [(f"m{i}".encode(), i, i) for i in range(6)]
    for i, m in enumerate(pulled):
        props = m.properties
        assert "WAIT" not in props and props["CLUSTER"] == "DefaultCluster"
        assert (props["KEYS"], props["TAGS"]) == (f"order-{i} every-order", "TagA" if i % 2 else "TagB")
    tag_a = decode_messages((await remoting_client.invoke(addr, pull_request("T6b", 0, 0, sub="TagA"))).body_bytes())
    assert [m.body for m in tag_a] == [b"m1", b"m3", b"m5"]
    now = int(time.time() * 1000)

    async def query(key):
        found = await remoting_client.invoke(addr, RemotingCommand.request(RequestCode.QUERY_MESSAGE, {
            "topic": "T6b", "key": key, "maxNum": "32", "beginTimestamp": str(now - 60_000),
            "endTimestamp": str(now + 60_000)}))
        return sorted(m.body for m in decode_messages(found.body_bytes())) if found.code == 0 else []

    assert await query("order-4") == [b"m4"]
    assert await query("every-order") == [f"m{i}".encode() for i in range(6)]
    assert await query("7F00000100002A9F0000000000000003") == [b"m3"]

    delayed = [BatchEntry(0, b"late", encode_properties({"UNIQ_KEY": "D1", "DELAY": "3"}).encode())]
    req = send_request("T6b", encode_batch_body(entries[:1] + delayed), queue_id=0, code=RequestCode.SEND_BATCH_MESSAGE)
    req.ext_fields["m"] = "true"
    refused = await remoting_client.invoke(addr, req)
    assert refused.code == ResponseCode.MESSAGE_ILLEGAL, refused.remark


async def test_auto_create_through_tbw102_and_refusals_with_remarks(start_role, remoting_client):
    kernel = await start_role("dev")
    addr = kernel.listening["broker"]
    resp = await remoting_client.invoke(addr, send_request("AutoTopic", b"x"))
    assert resp.code == ResponseCode.SUCCESS
    route = await remoting_client.invoke(kernel.listening["namesrv"], RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "AutoTopic"}))
    with trio.fail_after(5):
        while route.code != 0:  # registration after auto-creation is asynchronous (oneway), as in RocketMQ
            await trio.sleep(0.05)
            route = await remoting_client.invoke(kernel.listening["namesrv"], RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "AutoTopic"}))
    assert json.loads(route.body_bytes())["queueDatas"][0]["writeQueueNums"] == 4  # min(header 4, TBW102's 8)

    bad = await remoting_client.invoke(addr, send_request("bad topic!", b"x"))
    assert bad.code == ResponseCode.SYSTEM_ERROR and "[%|a-zA-Z0-9_-]" in bad.remark
    forbidden = await remoting_client.invoke(addr, send_request("SCHEDULE_TOPIC_XXXX", b"x"))
    assert forbidden.code == ResponseCode.NO_PERMISSION
    out_of_range = await remoting_client.invoke(addr, send_request("AutoTopic", b"x", queue_id=9))
    assert out_of_range.code == ResponseCode.SYSTEM_ERROR and "queueId[9] is illegal" in out_of_range.remark
    batch = RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE, send_request("AutoTopic", b"").ext_fields, b"\x00\x00\x00\x10garbage")
    batch_resp = await remoting_client.invoke(addr, batch)
    assert batch_resp.code == ResponseCode.MESSAGE_ILLEGAL and "batch body" in batch_resp.remark


async def test_without_auto_creation_unknown_topics_are_refused(start_role, remoting_client):
    kernel = await start_role("dev", {"broker.autoCreateTopicEnable": False})
    resp = await remoting_client.invoke(kernel.listening["broker"], send_request("Unknown", b"x"))
    assert resp.code == ResponseCode.TOPIC_NOT_EXIST and "apply first" in resp.remark


async def test_oversized_body_is_message_illegal(start_role, remoting_client):
    kernel = await start_role("dev", {"broker.maxMessageSize": 1024})
    addr = kernel.listening["broker"]
    await remoting_client.invoke(addr, create_topic("Big", 1))
    resp = await remoting_client.invoke(addr, send_request("Big", b"x" * 2048, queue_id=0))
    assert resp.code == ResponseCode.MESSAGE_ILLEGAL


def heartbeat(client_id, group=GROUP, topic="T7", sub="*", version=1):
    body = {
        "clientID": client_id,
        "consumerDataSet": [{
            "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
            "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False,
            "subscriptionDataSet": [{"topic": topic, "subString": sub, "classFilterMode": False,
                                     "tagsSet": [] if sub == "*" else [sub], "codeSet": [], "subVersion": version}],
        }],
        "producerDataSet": [],
    }
    return RemotingCommand.request(RequestCode.HEART_BEAT, {}, json.dumps(body).encode())


async def test_heartbeats_register_consumers_and_notify_the_group(broker):
    from pyrmq.remoting.client import RemotingClient

    addr = broker.listening["broker"]
    notified = []

    async def on_notify(conn, request):
        notified.append(request.ext_fields["consumerGroup"])

    async with RemotingClient(request_handlers={RequestCode.NOTIFY_CONSUMER_IDS_CHANGED: on_notify}) as first, RemotingClient() as second:
        await first.invoke(addr, create_topic("T7", 2))
        assert (await first.invoke(addr, heartbeat("10.0.0.1@1"))).code == 0
        listing = await first.invoke(addr, RemotingCommand.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": GROUP}))
        assert json.loads(listing.body_bytes()) == {"consumerIdList": ["10.0.0.1@1"]}
        notified.clear()
        assert (await second.invoke(addr, heartbeat("10.0.0.2@1"))).code == 0
        with trio.fail_after(5):
            while not notified:
                await trio.sleep(0.01)
        assert notified == [GROUP]
        listing = await first.invoke(addr, RemotingCommand.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": GROUP}))
        assert json.loads(listing.body_bytes())["consumerIdList"] == ["10.0.0.1@1", "10.0.0.2@1"]
        # the retry topic of the group exists once a consumer heartbeats
        pull_retry = await first.invoke(addr, pull_request("%RETRY%g1", 0, 0))
        assert pull_retry.code == ResponseCode.PULL_NOT_FOUND
        notified.clear()
        second.close_connection(addr)
        with trio.fail_after(5):
            while True:
                listing = await first.invoke(addr, RemotingCommand.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": GROUP}))
                if json.loads(listing.body_bytes())["consumerIdList"] == ["10.0.0.1@1"]:
                    break
                await trio.sleep(0.01)
        with trio.fail_after(5):
            while not notified:
                await trio.sleep(0.01)
    # pulls without a subscription flag use the subscription registered by heartbeat
    unknown = await RemotingClient().__aenter__()
    try:
        resp = await unknown.invoke(addr, pull_request("T7", 0, 0, sys_flag=0))
        assert resp.code == ResponseCode.SUBSCRIPTION_NOT_EXIST
    finally:
        await unknown.__aexit__(None, None, None)


async def test_offsets_commit_query_and_survive_a_restart(start_role, remoting_client, tmp_path):
    store_dir = tmp_path / "offsets-store"
    kernel = await start_role("dev", {"broker.storePathRootDir": str(store_dir)})
    addr = kernel.listening["broker"]
    await remoting_client.invoke(addr, create_topic("T8", 2))
    for i in range(3):
        await remoting_client.invoke(addr, send_request("T8", b"x", queue_id=0))
    q = RemotingCommand.request(RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": GROUP, "topic": "T8", "queueId": "0"})
    assert (await remoting_client.invoke(addr, q)).ext_fields["offset"] == "0"  # new group, first message still there
    upd = RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, {"consumerGroup": GROUP, "topic": "T8", "queueId": "0", "commitOffset": "2"})
    assert (await remoting_client.invoke(addr, upd)).code == 0
    # the commit offset carried by a pull is stored too
    await remoting_client.invoke(addr, pull_request("T8", 1, 0, sys_flag=0x1 | 0x4, commit_offset=0))
    max_off = RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": "T8", "queueId": "0"})
    assert (await remoting_client.invoke(addr, max_off)).ext_fields["offset"] == "3"
    min_off = RemotingCommand.request(RequestCode.GET_MIN_OFFSET, {"topic": "T8", "queueId": "0"})
    assert (await remoting_client.invoke(addr, min_off)).ext_fields["offset"] == "0"
    earliest = RemotingCommand.request(RequestCode.GET_EARLIEST_MSG_STORETIME, {"topic": "T8", "queueId": "0"})
    ts = int((await remoting_client.invoke(addr, earliest)).ext_fields["timestamp"])
    assert abs(ts - time.time() * 1000) < 60_000
    search = RemotingCommand.request(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {"topic": "T8", "queueId": "0", "timestamp": str(ts + 3_600_000)})
    assert (await remoting_client.invoke(addr, search)).ext_fields["offset"] in ("2", "3")
    kernel.request_stop()
    with trio.fail_after(10):  # stopped: offsets persisted, store closed and unlocked (kernel.nursery cleared)
        while kernel.nursery is not None:
            await trio.sleep(0.01)
    saved = fastjson.loads((store_dir / "config" / "consumerOffset.json").read_text())
    assert saved["offsetTable"]["T8@g1"] == {"0": 2, "1": 0}

    again = await start_role("dev", {"broker.storePathRootDir": str(store_dir)})
    q2 = RemotingCommand.request(RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": GROUP, "topic": "T8", "queueId": "0"})
    assert (await remoting_client.invoke(again.listening["broker"], q2)).ext_fields["offset"] == "2"


async def test_query_by_key_and_view_by_msg_id(broker, remoting_client):
    addr = broker.listening["broker"]
    await remoting_client.invoke(addr, create_topic("T9", 1))
    sent = await remoting_client.invoke(addr, send_request("T9", b"find me", keys="order-42 other", queue_id=0))
    await remoting_client.invoke(addr, send_request("T9", b"not me", keys="order-43", queue_id=0))
    now = int(time.time() * 1000)
    query = RemotingCommand.request(RequestCode.QUERY_MESSAGE, {
        "topic": "T9", "key": "order-42", "maxNum": "32", "beginTimestamp": str(now - 60_000), "endTimestamp": str(now + 60_000)})
    found = await remoting_client.invoke(addr, query)
    assert found.code == 0 and [m.body for m in decode_messages(found.body_bytes())] == [b"find me"]
    query.ext_fields["key"] = "nothing"
    missing = await remoting_client.invoke(addr, RemotingCommand.request(RequestCode.QUERY_MESSAGE, query.ext_fields))
    assert missing.code == ResponseCode.QUERY_NOT_FOUND

    _, _, offset = decode_message_id(sent.ext_fields["msgId"])
    view = await remoting_client.invoke(addr, RemotingCommand.request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(offset)}))
    assert decode_messages(view.body_bytes())[0].body == b"find me"
    nowhere = await remoting_client.invoke(addr, RemotingCommand.request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": "999999"}))
    assert nowhere.code == ResponseCode.SYSTEM_ERROR and "999999" in nowhere.remark


async def test_queue_locks_are_exclusive_per_group(broker, remoting_client):
    addr = broker.listening["broker"]

    def lock(client_id, code=RequestCode.LOCK_BATCH_MQ):
        body = {"clientId": client_id, "consumerGroup": GROUP, "mqSet": [{"brokerName": "broker-a", "queueId": q, "topic": "T10"} for q in (0, 1)]}
        return RemotingCommand.request(code, {}, json.dumps(body).encode())

    first = await remoting_client.invoke(addr, lock("c1"))
    assert len(json.loads(first.body_bytes())["lockOKMQSet"]) == 2
    assert json.loads((await remoting_client.invoke(addr, lock("c2"))).body_bytes())["lockOKMQSet"] == []
    assert len(json.loads((await remoting_client.invoke(addr, lock("c1"))).body_bytes())["lockOKMQSet"]) == 2  # renewal
    assert (await remoting_client.invoke(addr, lock("c1", RequestCode.UNLOCK_BATCH_MQ))).code == 0
    assert len(json.loads((await remoting_client.invoke(addr, lock("c2"))).body_bytes())["lockOKMQSet"]) == 2


async def test_admin_topic_lifecycle_and_consume_stats(broker, remoting_client):
    addr = broker.listening["broker"]
    assert (await remoting_client.invoke(addr, create_topic("TA", 3))).code == 0
    conflict = await remoting_client.invoke(addr, create_topic("TBW102", 3))
    assert conflict.code == ResponseCode.SYSTEM_ERROR
    topics = json.loads((await remoting_client.invoke(addr, RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG))).body_bytes())
    assert topics["topicConfigTable"]["TA"]["writeQueueNums"] == 3 and "TBW102" in topics["topicConfigTable"]
    await remoting_client.invoke(addr, send_request("TA", b"x", queue_id=2))
    upd = RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, {"consumerGroup": GROUP, "topic": "TA", "queueId": "2", "commitOffset": "0"})
    await remoting_client.invoke(addr, upd)
    stats = await remoting_client.invoke(addr, RemotingCommand.request(RequestCode.GET_CONSUME_STATS, {"consumerGroup": GROUP, "topic": "TA"}))
    table = fastjson.loads(stats.body_bytes())["offsetTable"]
    by_queue = {key["queueId"]: value for key, value in table.items()}
    assert by_queue[2] == {"brokerOffset": 1, "consumerOffset": 0, "lastTimestamp": 0}
    assert (await remoting_client.invoke(addr, RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "TA"}))).code == 0
    assert (await remoting_client.invoke(addr, pull_request("TA", 0, 0))).code == ResponseCode.TOPIC_NOT_EXIST


def _two_free_ports_apart() -> int:
    import socket

    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        try:
            with socket.socket() as vip:
                vip.bind(("127.0.0.1", port - 2))
            return port
        except OSError:
            continue
    raise AssertionError("no free port pair")


async def test_vip_port_serves_sends_but_not_pulls(start_role, remoting_client):
    port = _two_free_ports_apart()
    kernel = await start_role("dev", {"broker.listenPort": port})
    vip = kernel.listening["broker-vip"]
    assert vip == f"127.0.0.1:{port - 2}"
    await remoting_client.invoke(vip, create_topic("TV", 1))
    assert (await remoting_client.invoke(vip, send_request("TV", b"via vip", queue_id=0))).code == ResponseCode.SUCCESS
    refused = await remoting_client.invoke(vip, pull_request("TV", 0, 0))
    assert refused.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    pulled = await remoting_client.invoke(kernel.listening["broker"], pull_request("TV", 0, 0))
    assert decode_messages(pulled.body_bytes())[0].body == b"via vip"


async def test_heartbeat_enums_as_ordinals_are_understood(broker, remoting_client):
    addr = broker.listening["broker"]
    body = {"clientID": "cpp@1", "producerDataSet": [{"groupName": "pg-cpp"}], "consumerDataSet": [{
        "groupName": "g-cpp", "consumeType": 1, "messageModel": 0, "consumeFromWhere": 4, "unitMode": False,
        "subscriptionDataSet": [{"topic": "TE", "subString": "*", "tagsSet": [], "codeSet": [], "subVersion": 1}]}]}
    assert (await remoting_client.invoke(addr, RemotingCommand.request(RequestCode.HEART_BEAT, {}, json.dumps(body).encode()))).code == 0
    from pyrmq.plugins.broker.core import BROKER

    info = broker.state.get(BROKER).consumers.groups["g-cpp"]
    assert (info.consume_type, info.message_model, info.consume_from_where) == ("CONSUME_PASSIVELY", "BROADCASTING", "CONSUME_FROM_FIRST_OFFSET")
    bad = await remoting_client.invoke(addr, RemotingCommand.request(RequestCode.HEART_BEAT, {}, b"{not json"))
    assert bad.code == ResponseCode.SYSTEM_ERROR and "HeartbeatData" in bad.remark


async def test_sync_flush_answers_after_the_group_commit(start_role, remoting_client):
    kernel = await start_role("dev", {"broker.flushDiskType": "SYNC_FLUSH"})
    addr = kernel.listening["broker"]
    await remoting_client.invoke(addr, create_topic("TS", 1))
    async with trio.open_nursery() as nursery:
        results = []

        async def send(i):
            results.append(await remoting_client.invoke(addr, send_request("TS", f"m{i}".encode(), queue_id=0)))

        for i in range(50):
            nursery.start_soon(send, i)
    assert [r.code for r in results] == [ResponseCode.SUCCESS] * 50
    assert sorted(int(r.ext_fields["queueOffset"]) for r in results) == list(range(50))
    from pyrmq.plugins.broker.core import BROKER

    store = kernel.state.get(BROKER).store
    assert store.flushed_phy_offset >= store.max_phy_offset  # acknowledged means on disk


async def test_sync_master_without_a_slave_answers_slave_not_available(start_role, remoting_client):
    kernel = await start_role("dev", {"broker.brokerRole": "SYNC_MASTER"})
    addr = kernel.listening["broker"]
    await remoting_client.invoke(addr, create_topic("TM", 1))
    resp = await remoting_client.invoke(addr, send_request("TM", b"x", queue_id=0))
    # stored, but not replicated: the status RocketMQ gives a SYNC_MASTER without slaves (spec 2.2, 7.12)
    assert resp.code == ResponseCode.SLAVE_NOT_AVAILABLE and resp.ext_fields["queueOffset"] == "0"
    assert decode_messages((await remoting_client.invoke(addr, pull_request("TM", 0, 0))).body_bytes())[0].body == b"x"
