"""The broker-side rebalance of the Java 5.x push consumer (clientRebalance false): QUERY_ASSIGNMENT (400),
SET_MESSAGE_REQUEST_MODE (401, mqadmin setConsumeMode) and GET_ALL_MESSAGE_REQUEST_MODE (402), answered as 5.5.0's
QueryAssignmentProcessor does, the modes kept in messageRequestMode.json across a restart and copied by a slave from
its master; GET_SUBSCRIPTIONGROUP_CONFIG (352); a heartbeat's CONSUME_POP kept."""

from __future__ import annotations

import json

import trio

from pyrmq.remoting import fastjson
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand

from .test_pop_failover import fast_sync_bundle, wait_for

TOPIC = "AssignT"
GROUP = "GASSIGN"


def heartbeat(client_id: str, group: str = GROUP, topic: str = TOPIC, consume_type: str = "CONSUME_PASSIVELY") -> RemotingCommand:
    body = {"clientID": client_id, "producerDataSet": [], "consumerDataSet": [{
        "groupName": group, "consumeType": consume_type, "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "unitMode": False,
        "subscriptionDataSet": [{"topic": topic, "subString": "*", "tagsSet": [], "codeSet": [], "subVersion": 1}]}]}
    return RemotingCommand.request(RequestCode.HEART_BEAT, {}, json.dumps(body).encode())


def set_mode(topic: str, group: str, mode: str, share: int = 0) -> RemotingCommand:
    body = {"topic": topic, "consumerGroup": group, "mode": mode, "popShareQueueNum": share}
    return RemotingCommand.request(RequestCode.SET_MESSAGE_REQUEST_MODE, {}, json.dumps(body).encode())


def query(client_id: str, topic: str = TOPIC, group: str = GROUP, strategy: str = "AVG",
          model: str = "CLUSTERING") -> RemotingCommand:
    body = {"topic": topic, "consumerGroup": group, "clientId": client_id, "strategyName": strategy,
            "messageModel": model}
    return RemotingCommand.request(RequestCode.QUERY_ASSIGNMENT, {}, json.dumps(body).encode())


async def consumers(nursery, addr: str, *client_ids: str, **kw) -> None:
    """One connection per consumer (a broker knows a consumer by its channel), each registered by a heartbeat."""
    from pyrmq.remoting.client import RemotingClient

    for cid in client_ids:
        client = RemotingClient()
        await nursery.start(client.run)
        assert (await client.invoke(addr, heartbeat(cid, **kw))).code == ResponseCode.SUCCESS


async def assigned(client, addr: str, client_id: str, **kw) -> set[tuple[str, int, str]] | None:
    """(broker, queue id, mode) of each assignment; None when the answer carries none (the client keeps its own)."""
    response = await client.invoke(addr, query(client_id, **kw))
    assert response.code == ResponseCode.SUCCESS, response.remark
    body = fastjson.loads(response.body_bytes())
    if "messageQueueAssignments" not in body:
        return None
    return {(a["messageQueue"]["brokerName"], a["messageQueue"]["queueId"], a["mode"])
            for a in body["messageQueueAssignments"]}


async def test_pop_mode_gives_each_consumer_every_queue_as_queue_minus_one(pop_broker, remoting_client, nursery):
    b = pop_broker
    await b.topic(TOPIC, 4)
    await b.group(GROUP)
    await consumers(nursery, b.addr, "c1", "c2", "c3")
    name = b.ctx.settings.brokerName

    # no mode set: defaultMessageRequestMode PULL, the queues split as the client's AVG strategy would
    split = [await assigned(remoting_client, b.addr, cid) for cid in ("c1", "c2", "c3")]
    assert split == [{(name, 0, "PULL"), (name, 1, "PULL")}, {(name, 2, "PULL")}, {(name, 3, "PULL")}]

    answer = await remoting_client.invoke(b.addr, set_mode(TOPIC, GROUP, "POP", 0))
    assert (answer.code, answer.remark) == (ResponseCode.SUCCESS, None)
    for cid in ("c1", "c2", "c3"):  # popShareQueueNum 0: every consumer pops every queue (one pop, queue id -1)
        assert await assigned(remoting_client, b.addr, cid) == {(name, -1, "POP")}

    # popShareQueueNum 1 with 3 consumers: its own share and the next consumer's
    assert (await remoting_client.invoke(b.addr, set_mode(TOPIC, GROUP, "POP", 1))).code == ResponseCode.SUCCESS
    assert await assigned(remoting_client, b.addr, "c1") == {(name, q, "POP") for q in (0, 1, 2)}
    assert await assigned(remoting_client, b.addr, "c3") == {(name, q, "POP") for q in (3, 0, 1)}
    assert await assigned(remoting_client, b.addr, "c1", strategy="AVG_BY_CIRCLE") == {
        (name, q, "POP") for q in (0, 3, 1)}

    # what 5.5.0 answers without assignments ({}: the client keeps what it has): an unknown topic, a group nobody
    # consumes by heartbeat, an unknown strategy; a retry topic is always pulled
    assert await assigned(remoting_client, b.addr, "c1", topic="NoSuchTopic") is None
    assert await assigned(remoting_client, b.addr, "c1", group="NobodyHere") is None
    assert await assigned(remoting_client, b.addr, "c1", strategy="CONSISTENT_HASH") is None
    retry = f"%RETRY%{GROUP}"
    await b.topic(retry, 1)
    assert await assigned(remoting_client, b.addr, "c1", topic=retry) == {(name, 0, "PULL")}
    # broadcasting: every queue, whatever the mode
    assert await assigned(remoting_client, b.addr, "c2", model="BROADCASTING") == {(name, q, "POP") for q in range(4)}


async def test_set_message_request_mode_refusals_as_5_5_0(pop_broker, remoting_client):
    b = pop_broker
    await b.topic(TOPIC, 1)
    await b.group(GROUP)
    cases = [
        (set_mode(f"%RETRY%{GROUP}", GROUP, "POP"), ResponseCode.NO_PERMISSION, "retry topic is not allowed to set mode"),
        (set_mode("NoSuchTopic", GROUP, "POP"), ResponseCode.TOPIC_NOT_EXIST, "topic[NoSuchTopic] not exist"),
        (set_mode(TOPIC, "NoSuchGroup", "POP"), ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
         "subscription group does not exist"),
    ]
    for request, code, remark in cases:
        answer = await remoting_client.invoke(b.addr, request)
        assert (answer.code, answer.remark) == (code, remark)
    bad = await remoting_client.invoke(b.addr, set_mode(TOPIC, GROUP, "PUSH"))
    assert bad.code == ResponseCode.SYSTEM_ERROR and "mode 'PUSH'" in bad.remark
    no_topic = RemotingCommand.request(RequestCode.SET_MESSAGE_REQUEST_MODE, {}, b'{"consumerGroup":"G"}')
    answer = await remoting_client.invoke(b.addr, no_topic)
    assert answer.code == ResponseCode.SYSTEM_ERROR and "topic is missing" in answer.remark
    nothing = await remoting_client.invoke(b.addr, RemotingCommand.request(RequestCode.GET_ALL_MESSAGE_REQUEST_MODE, {}))
    assert fastjson.loads(nothing.body_bytes()) == {"messageRequestModeMap": {}}


async def test_request_modes_survive_a_restart_in_message_request_mode_json(start_pop_broker, remoting_client, tmp_path,
                                                                            nursery):
    store = tmp_path / "modes-store"
    a = await start_pop_broker({"broker.storePathRootDir": str(store)})
    await a.topic(TOPIC, 2)
    await a.group(GROUP)
    assert (await remoting_client.invoke(a.addr, set_mode(TOPIC, GROUP, "POP", 0))).code == ResponseCode.SUCCESS
    written = json.loads((store / "config" / "messageRequestMode.json").read_text())
    assert written == {"messageRequestModeMap": {TOPIC: {GROUP: {
        "consumerGroup": GROUP, "mode": "POP", "popShareQueueNum": 0, "topic": TOPIC}}}}
    a.kernel.request_stop()
    await wait_for(lambda: a.kernel.nursery is None, "the broker stopped")

    b = await start_pop_broker({"broker.storePathRootDir": str(store)})
    await consumers(nursery, b.addr, "c1")
    assert await assigned(remoting_client, b.addr, "c1") == {(b.ctx.settings.brokerName, -1, "POP")}
    everything = await remoting_client.invoke(b.addr, RemotingCommand.request(RequestCode.GET_ALL_MESSAGE_REQUEST_MODE, {}))
    assert fastjson.loads(everything.body_bytes()) == written


async def test_broker_wide_default_pop_mode(start_pop_broker, remoting_client, nursery):
    b = await start_pop_broker({"broker.defaultMessageRequestMode": "POP"})
    await b.topic(TOPIC, 2)
    await consumers(nursery, b.addr, "c1", "c2")
    assert await assigned(remoting_client, b.addr, "c2") == {(b.ctx.settings.brokerName, -1, "POP")}


async def test_a_slave_copies_its_masters_request_modes(start_role, remoting_client, tmp_path):
    namesrv = (await start_role("namesrv")).listening["namesrv"]
    common = {"broker.namesrvAddr": namesrv, "broker.brokerName": "modes-ha", "broker.haSendHeartbeatInterval": 200}
    a = await start_role("broker", {**common, "broker.brokerRole": "ASYNC_MASTER"})
    b = await start_role(fast_sync_bundle(tmp_path), {**common, "broker.brokerRole": "SLAVE", "broker.brokerId": 1})
    a_addr, b_addr = a.listening["broker"], b.listening["broker"]
    from . import popclient

    await popclient.create_topic(remoting_client, a_addr, TOPIC, 1)
    await popclient.create_group(remoting_client, a_addr, GROUP)
    assert (await remoting_client.invoke(a_addr, set_mode(TOPIC, GROUP, "POP", 2))).code == ResponseCode.SUCCESS
    modes = b.plugin("pop").assignments.modes

    with trio.move_on_after(20):
        while modes.get(TOPIC, GROUP) is None:
            await trio.sleep(0.05)
    mode = modes.get(TOPIC, GROUP)
    assert mode is not None and (mode.mode, mode.pop_share_queue_num) == ("POP", 2), "the slave never synced the mode"
    store_b = b.plugin("pop").ctx.settings.store_root
    assert TOPIC in json.loads((store_b / "config" / "messageRequestMode.json").read_text())["messageRequestModeMap"]


async def test_get_subscriptiongroup_config_and_consume_pop_heartbeats(pop_broker, remoting_client, nursery):
    b = pop_broker
    await b.group(GROUP, consumeMessageOrderly=True, retryMaxTimes=3)
    one = await remoting_client.invoke(b.addr, RemotingCommand.request(RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG,
                                                                         {"group": GROUP}))
    assert one.code == ResponseCode.SUCCESS
    config = json.loads(one.body_bytes())
    assert (config["groupName"], config["consumeMessageOrderly"], config["retryMaxTimes"]) == (GROUP, True, 3)
    unknown = await remoting_client.invoke(b.addr, RemotingCommand.request(RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG,
                                                                             {"group": "NoSuchGroup"}))
    assert (unknown.code, unknown.remark) == (ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, "No group in this broker")
    assert "NoSuchGroup" not in b.ctx.groups.table  # not created by asking
    missing = await remoting_client.invoke(b.addr, RemotingCommand.request(RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG, {}))
    assert (missing.code, missing.remark) == (ResponseCode.SYSTEM_ERROR, "the custom field <group> is null")

    # a 5.x SimpleConsumer's heartbeat says CONSUME_POP: the consumer list keeps it (mqadmin consumerConnection)
    await b.topic(TOPIC, 1)
    await consumers(nursery, b.addr, "pop-1", consume_type="CONSUME_POP")
    await consumers(nursery, b.addr, "pop-2", group="GORDINAL", consume_type=2)
    listed = await remoting_client.invoke(b.addr, RemotingCommand.request(RequestCode.GET_CONSUMER_CONNECTION_LIST,
                                                                            {"consumerGroup": GROUP}))
    assert fastjson.loads(listed.body_bytes())["consumeType"] == "CONSUME_POP"
    assert b.ctx.consumers.groups["GORDINAL"].consume_type == "CONSUME_POP"
