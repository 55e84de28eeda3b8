"""What the official Java client and RocketMQ's admin tools (mqadmin, DefaultMQAdminExt) needed from the broker,
found by the Java-client conformance tests (tests/e2e/test_java_client.py) and checked here over the wire: the runtime
figures `mqadmin clusterList` reads, QUERY_TOPIC_CONSUME_BY_WHO (`mqadmin queryMsgById`'s message track),
RESET_CONSUMER_CLIENT_OFFSET pushed to running consumers on INVOKE_BROKER_TO_RESET_OFFSET, and request-reply
(SEND_REPLY_MESSAGE pushed to the requester as PUSH_REPLY_MESSAGE_TO_CLIENT).
"""

from __future__ import annotations

import json
import time

import pytest
import trio

from pyrmq.plugins.broker.core import RateCounter
from pyrmq.remoting import fastjson
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.store.format import encode_properties


def send(topic: str, body: bytes, queue_id: int) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.SEND_MESSAGE, {
        "producerGroup": "pg", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
        "queueId": str(queue_id), "sysFlag": "0", "bornTimestamp": str(int(time.time() * 1000)), "flag": "0",
        "properties": encode_properties({"UNIQ_KEY": f"U{time.monotonic_ns():031d}"[:32], "WAIT": "true"}),
        "reconsumeTimes": "0", "unitMode": "false",
    }, body)


def create_topic(topic: str, queues: int = 2) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
        "topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(queues), "writeQueueNums": str(queues),
        "perm": "6", "topicFilterType": "SINGLE_TAG"})


def heartbeat(client_id: str, group: str, topic: str) -> RemotingCommand:
    body = {"clientID": client_id, "producerDataSet": [], "consumerDataSet": [{
        "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "unitMode": False,
        "subscriptionDataSet": [{"topic": topic, "subString": "*", "classFilterMode": False, "tagsSet": [],
                                 "codeSet": [], "subVersion": 1}]}]}
    return RemotingCommand.request(RequestCode.HEART_BEAT, {}, json.dumps(body).encode())


def commit(group: str, topic: str, queue_id: int, offset: int) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, {
        "consumerGroup": group, "topic": topic, "queueId": str(queue_id), "commitOffset": str(offset)})


@pytest.fixture
async def broker(start_role):
    return await start_role("dev")


def test_rate_counter_reports_the_rate_over_each_window():
    now = [1000.0]
    rate = RateCounter(clock=lambda: now[0])
    for _ in range(20):  # 10 messages a second for 20 s
        now[0] += 1
        rate.add(10)
    assert rate.total == 200
    assert rate.tps(10) == pytest.approx(10)
    assert rate.describe() == "10.00 10.00 10.00"  # 1 min and 10 min: since the first sample, 20 s ago
    now[0] += 10  # 10 s of silence
    assert rate.tps(10) == pytest.approx(0)
    assert rate.tps(60) == pytest.approx(200 / 30)


async def test_runtime_info_has_every_figure_mqadmin_cluster_list_reads(broker, remoting_client):
    addr = broker.listening["broker"]
    await remoting_client.invoke(addr, create_topic("RT"))
    for i in range(3):
        assert (await remoting_client.invoke(addr, send("RT", b"x%d" % i, i % 2))).code == ResponseCode.SUCCESS
    pulled = await remoting_client.invoke(addr, RemotingCommand.request(RequestCode.PULL_MESSAGE, {
        "consumerGroup": "g", "topic": "RT", "queueId": "0", "queueOffset": "0", "maxMsgNums": "32", "sysFlag": "4",
        "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0"}))
    assert pulled.code == ResponseCode.SUCCESS
    resp = await remoting_client.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO))
    table = json.loads(resp.body_bytes())["table"]
    for key in ("putTps", "getTransferedTps"):  # "10 s, 1 min, 10 min" rates
        assert len([float(x) for x in table[key].split(" ")]) == 3
    assert float(table["putTps"].split()[0]) > 0 and table["msgPutTotalTodayNow"] == "3"
    assert table["msgGetTotalTodayNow"] == "2"  # queue 0 held messages 0 and 2
    for key in ("sendThreadPoolQueueSize", "pullThreadPoolQueueSize", "sendThreadPoolQueueHeadWaitTimeMills",
                "pullThreadPoolQueueHeadWaitTimeMills", "pageCacheLockTimeMills", "earliestMessageTimeStamp"):
        assert int(table[key]) >= 0
    assert 0 < float(table["commitLogDiskRatio"]) < 1


async def test_topic_consumed_by_lists_subscribed_groups_and_groups_with_offsets(broker, remoting_client):
    addr = broker.listening["broker"]
    await remoting_client.invoke(addr, create_topic("CB"))
    assert (await remoting_client.invoke(addr, heartbeat("10.0.0.1@1", "live", "CB"))).code == ResponseCode.SUCCESS
    await remoting_client.invoke(addr, commit("committed", "CB", 0, 0))
    resp = await remoting_client.invoke(addr, RemotingCommand.request(RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": "CB"}))
    assert resp.code == ResponseCode.SUCCESS
    assert json.loads(resp.body_bytes()) == {"groupList": ["committed", "live"]}
    other = await remoting_client.invoke(addr, RemotingCommand.request(RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": "none"}))
    assert json.loads(other.body_bytes()) == {"groupList": []}


async def test_reset_offset_tells_the_running_consumers_of_the_group(broker):
    from pyrmq.remoting.client import RemotingClient

    addr = broker.listening["broker"]
    told: list[RemotingCommand] = []

    async def on_reset(conn, request):
        told.append(request)

    async with RemotingClient(request_handlers={RequestCode.RESET_CONSUMER_CLIENT_OFFSET: on_reset}) as consumer:
        await consumer.invoke(addr, create_topic("RS"))
        for i in range(4):
            await consumer.invoke(addr, send("RS", b"m", i % 2))
        await consumer.invoke(addr, heartbeat("10.0.0.1@1", "gr", "RS"))
        for q in (0, 1):
            await consumer.invoke(addr, commit("gr", "RS", q, 2))
        invoke = RemotingCommand.request(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
                                         {"topic": "RS", "group": "gr", "timestamp": "0", "isForce": "true"})
        resp = await consumer.invoke(addr, invoke)
        assert resp.code == ResponseCode.SUCCESS
        with trio.fail_after(5):
            while not told:
                await trio.sleep(0.01)
        push = told[0]
        assert push.ext_fields["topic"] == "RS" and push.ext_fields["group"] == "gr"
        table = {key["queueId"]: value for key, value in fastjson.loads(push.body_bytes())["offsetTable"].items()}
        assert table == {0: 0, 1: 0}
        assert push.body_bytes() == resp.body_bytes()

        # without force an offset only moves back: resetting to the end keeps the committed offsets
        told.clear()
        await consumer.invoke(addr, commit("gr", "RS", 0, 1))
        invoke = RemotingCommand.request(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
                                         {"topic": "RS", "group": "gr", "timestamp": "-1", "isForce": "false"})
        resp = await consumer.invoke(addr, invoke)
        table = {key["queueId"]: value for key, value in fastjson.loads(resp.body_bytes())["offsetTable"].items()}
        assert table == {0: 1, 1: 0}


def send_reply(body: bytes, properties: dict[str, str]) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.SEND_REPLY_MESSAGE_V2, {
        "a": "replier", "b": "DefaultCluster_REPLY_TOPIC", "c": "TBW102", "d": "4", "e": "0", "f": "0",
        "g": str(int(time.time() * 1000)), "h": "0", "i": encode_properties(properties), "j": "0", "k": "false",
    }, body)


def producer_heartbeat(client_id: str, group: str) -> RemotingCommand:
    body = {"clientID": client_id, "producerDataSet": [{"groupName": group}], "consumerDataSet": []}
    return RemotingCommand.request(RequestCode.HEART_BEAT, {}, json.dumps(body).encode())


async def test_a_reply_is_pushed_to_the_requesting_producer_and_stored(broker, remoting_client):
    from pyrmq.remoting.client import RemotingClient

    addr = broker.listening["broker"]
    pushed: list[RemotingCommand] = []

    async def on_push(conn, request):
        pushed.append(request)
        return request.make_response(ResponseCode.SUCCESS)

    props = {"UNIQ_KEY": "U" * 32, "CORRELATION_ID": "c-1", "REPLY_TO_CLIENT": "10.0.0.9@req", "MSG_TYPE": "reply"}
    async with RemotingClient(request_handlers={RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT: on_push}) as requester:
        assert (await requester.invoke(addr, producer_heartbeat("10.0.0.9@req", "requesters"))).code == 0
        # the replier here is the requester's own connection, as when both live in one Java client instance
        resp = await requester.invoke(addr, send_reply(b"the answer", props))
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        assert int(resp.ext_fields["queueOffset"]) == 0 and resp.ext_fields["msgId"] != "0"  # stored as well
        assert len(pushed) == 1 and pushed[0].body_bytes() == b"the answer"
        fields = pushed[0].ext_fields
        assert fields["topic"] == "DefaultCluster_REPLY_TOPIC" and fields["producerGroup"] == "replier"
        assert "CORRELATION_ID\x01c-1\x02" in fields["properties"]
        assert "PUSH_REPLY_TIME" in fields["properties"] and fields["storeHost"] == addr

    # the requester is gone: the replier hears so
    resp = await remoting_client.invoke(addr, send_reply(b"late", props))
    assert resp.code == ResponseCode.SYSTEM_ERROR
    assert resp.remark == "push reply message fail, channel of <10.0.0.9@req> not found."
    no_target = await remoting_client.invoke(addr, send_reply(b"x", {"UNIQ_KEY": "V" * 32}))
    assert no_target.code == ResponseCode.SYSTEM_ERROR and "REPLY_TO_CLIENT" in no_target.remark


async def test_broker_and_name_server_configs_read_as_java_properties(broker, remoting_client):
    from pyrmq.kernel.javaprops import parse_java_properties

    resp = await remoting_client.invoke(broker.listening["broker"], RemotingCommand.request(RequestCode.GET_BROKER_CONFIG))
    assert resp.code == ResponseCode.SUCCESS
    config = parse_java_properties(resp.body_bytes().decode().splitlines())
    assert config["brokerName"] == "broker-a" and config["autoCreateTopicEnable"] == "true"
    assert config["listenPort"] == broker.listening["broker"].rsplit(":", 1)[1]
    assert json.loads(resp.ext_fields["version"])["counter"] == 0
    resp = await remoting_client.invoke(broker.listening["namesrv"], RemotingCommand.request(RequestCode.GET_NAMESRV_CONFIG))
    config = parse_java_properties(resp.body_bytes().decode().splitlines())
    assert resp.code == ResponseCode.SUCCESS and config["brokerChannelExpiredTime"] == "120000"
    assert config["listenPort"] == broker.listening["namesrv"].rsplit(":", 1)[1]  # the real one, not 0


async def test_producer_connections_list_the_live_producers_of_a_group(broker, remoting_client):
    addr = broker.listening["broker"]
    list_request = RemotingCommand.request(RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "requesters"})
    missing = await remoting_client.invoke(addr, list_request)
    assert missing.code == ResponseCode.SYSTEM_ERROR and missing.remark == "the producer group[requesters] not exist"
    await remoting_client.invoke(addr, producer_heartbeat("10.0.0.9@p", "requesters"))
    listing = await remoting_client.invoke(addr, RemotingCommand.request(
        RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "requesters"}))
    [connection] = json.loads(listing.body_bytes())["connectionSet"]
    assert connection["clientId"] == "10.0.0.9@p" and connection["clientAddr"].startswith("127.0.0.1:")


async def test_consumer_running_info_and_consume_directly_are_passed_to_the_named_consumer(broker, remoting_client):
    from pyrmq.remoting.client import RemotingClient

    addr = broker.listening["broker"]
    asked: list[RemotingCommand] = []

    async def on_call(conn, request):
        asked.append(request)
        return request.make_response(ResponseCode.SUCCESS, body=b'{"answer":' + str(request.code).encode() + b"}")

    handlers = {RequestCode.GET_CONSUMER_RUNNING_INFO: on_call, RequestCode.CONSUME_MESSAGE_DIRECTLY: on_call}
    async with RemotingClient(request_handlers=handlers) as consumer:
        await consumer.invoke(addr, create_topic("CD"))
        sent = await consumer.invoke(addr, send("CD", b"direct", 0))
        await consumer.invoke(addr, heartbeat("10.0.0.1@c", "gd", "CD"))
        info = await remoting_client.invoke(addr, RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO, {
            "consumerGroup": "gd", "clientId": "10.0.0.1@c", "jstackEnable": "false"}))
        assert info.code == ResponseCode.SUCCESS and info.body_bytes() == b'{"answer":307}'
        assert asked[0].ext_fields["jstackEnable"] == "false"
        direct = await remoting_client.invoke(addr, RemotingCommand.request(RequestCode.CONSUME_MESSAGE_DIRECTLY, {
            "consumerGroup": "gd", "clientId": "10.0.0.1@c", "msgId": sent.ext_fields["msgId"]}))
        assert direct.code == ResponseCode.SUCCESS and direct.body_bytes() == b'{"answer":309}'
        handed = asked[1]
        assert handed.ext_fields["brokerName"] == "broker-a" and b"direct" in handed.body_bytes()  # the stored record
    gone = await remoting_client.invoke(addr, RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO, {
        "consumerGroup": "gd", "clientId": "10.0.0.1@c"}))
    assert gone.code == ResponseCode.SYSTEM_ERROR and gone.remark == "The Consumer <gd> <10.0.0.1@c> not online"
