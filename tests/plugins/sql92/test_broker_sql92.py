"""SQL92 filtering in the broker over the wire: the enablePropertyFilter switch, CHECK_CLIENT_CONFIG, pulls carrying
their subscription, filter data registered by heartbeats (versioned, persisted), retry topics (spec 7.11)."""

from __future__ import annotations

import fcntl
import json
import os
import time

import pytest
import trio

from pyrmq.remoting import fastjson
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.store.format import decode_messages, encode_properties

GROUP = "sqlg"
ON = {"broker.enablePropertyFilter": True}


def send(topic, body, props, queue_id=0):
    properties = {"UNIQ_KEY": f"U{time.monotonic_ns():030d}"[:32], "WAIT": "true", **props}
    return RemotingCommand.request(RequestCode.SEND_MESSAGE, {
        "producerGroup": "pg", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": 1,
        "queueId": queue_id, "sysFlag": 0, "bornTimestamp": int(time.time() * 1000), "flag": 0,
        "properties": encode_properties(properties), "reconsumeTimes": 0, "unitMode": False,
    }, body)


def pull(topic, *, sql=None, sub_version=0, offset=0, group=GROUP, expression_type="SQL92", suspend_ms=0):
    flag = (4 if sql is not None else 0) | (2 if suspend_ms else 0)
    fields = {
        "consumerGroup": group, "topic": topic, "queueId": "0", "queueOffset": str(offset), "maxMsgNums": "32",
        "sysFlag": str(flag), "commitOffset": "0", "suspendTimeoutMillis": str(suspend_ms),
        "subVersion": str(sub_version),
    }
    if sql is not None:
        fields.update(subscription=sql, expressionType=expression_type)
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, fields)


def subscription(topic, sql, version, expression_type="SQL92"):
    return {"topic": topic, "subString": sql, "expressionType": expression_type, "tagsSet": [], "codeSet": [],
            "subVersion": version, "classFilterMode": False}


def heartbeat(*subs, group=GROUP):
    body = {"clientID": "10.0.0.9@sql", "producerDataSet": [], "consumerDataSet": [{
        "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "unitMode": False, "subscriptionDataSet": list(subs)}]}
    return RemotingCommand.request(RequestCode.HEART_BEAT, {}, json.dumps(body).encode())


def check_client_config(sql, expression_type="SQL92"):
    body = {"clientId": "c@1", "group": GROUP, "subscriptionData": subscription("T", sql, 1, expression_type)}
    return RemotingCommand.request(RequestCode.CHECK_CLIENT_CONFIG, {}, json.dumps(body).encode())


def store_released(lock_path) -> bool:
    """True once the stopped broker closed its store (it holds an flock on the store's lock file until then)."""
    fd = os.open(lock_path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


def create_topic(topic):
    return RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
        "topic": topic, "defaultTopic": "TBW102", "readQueueNums": "1", "writeQueueNums": "1", "perm": "6",
        "topicFilterType": "SINGLE_TAG",
    })


MIXED = [
    (b"eu-150", {"region": "eu", "amount": "150"}),
    (b"eu-900", {"region": "eu", "amount": "900"}),
    (b"us-200", {"region": "us", "amount": "200"}),
    (b"eu-none", {"region": "eu"}),
    (b"eu-text", {"region": "eu", "amount": "lots"}),
    (b"bare", {}),
    (b"eu-120.5", {"region": "eu", "amount": "120.5"}),
]


async def stored(client, addr, topic, messages=MIXED, *, create=True):
    if create:
        assert (await client.invoke(addr, create_topic(topic))).code == ResponseCode.SUCCESS
    for body, props in messages:
        assert (await client.invoke(addr, send(topic, body, props))).code == ResponseCode.SUCCESS


def bodies(response):
    assert response.code == ResponseCode.SUCCESS, (response.code, response.remark)
    return [m.body for m in decode_messages(response.body_bytes())]


async def test_property_filter_off_refuses_sql92_clearly(start_role, remoting_client):
    addr = (await start_role("dev")).listening["broker"]
    await stored(remoting_client, addr, "TOff")
    refused = await remoting_client.invoke(addr, pull("TOff", sql="region = 'eu'"))
    assert refused.code == ResponseCode.SYSTEM_ERROR
    assert refused.remark == "The broker does not support consumer to filter message by SQL92"
    checked = await remoting_client.invoke(addr, check_client_config("region = 'eu'"))
    assert (checked.code, checked.remark) == (ResponseCode.SYSTEM_ERROR, refused.remark)
    assert (await remoting_client.invoke(addr, check_client_config("TagA", "TAG"))).code == ResponseCode.SUCCESS
    # heartbeat-registered SQL92 subscriptions are refused at pull time too
    assert (await remoting_client.invoke(addr, heartbeat(subscription("TOff", "region = 'eu'", 5)))).code == 0
    by_heartbeat = await remoting_client.invoke(addr, pull("TOff", sub_version=5))
    assert (by_heartbeat.code, by_heartbeat.remark) == (ResponseCode.SYSTEM_ERROR, refused.remark)


async def test_check_client_config_gives_the_parse_error(start_role, remoting_client):
    addr = (await start_role("dev", ON)).listening["broker"]
    good = await remoting_client.invoke(addr, check_client_config("region = 'eu' AND amount BETWEEN 100 AND 500"))
    assert good.code == ResponseCode.SUCCESS
    bad = await remoting_client.invoke(addr, check_client_config("region = 'eu' AND amount >"))
    assert bad.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
    assert "line 1, column 27" in bad.remark and "amount >" in bad.remark


async def test_pull_with_its_subscription_gets_only_matching_messages(start_role, remoting_client):
    addr = (await start_role("dev", ON)).listening["broker"]
    await stored(remoting_client, addr, "TSql")
    # the literal's type picks the parser: "lots" fails the integer conversion, "120.5" too, a missing amount is null
    got = await remoting_client.invoke(addr, pull("TSql", sql="region = 'eu' AND amount BETWEEN 100 AND 500"))
    assert bodies(got) == [b"eu-150"]
    assert got.ext_fields["nextBeginOffset"] == str(len(MIXED))
    doubles = await remoting_client.invoke(addr, pull("TSql", sql="amount > 100.0"))
    assert bodies(doubles) == [b"eu-150", b"eu-900", b"us-200", b"eu-120.5"]
    absent = await remoting_client.invoke(addr, pull("TSql", sql="amount IS NULL OR region <> 'eu'"))
    assert bodies(absent) == [b"us-200", b"eu-none", b"bare"]
    none = await remoting_client.invoke(addr, pull("TSql", sql="region = 'asia'"))
    assert none.code == ResponseCode.PULL_RETRY_IMMEDIATELY and none.ext_fields["nextBeginOffset"] == str(len(MIXED))
    # Java would deliver everything here; we refuse a subscription we cannot honour (docs/decisions.md)
    bad = await remoting_client.invoke(addr, pull("TSql", sql="region = 'eu' AND"))
    assert bad.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED and "column 18" in bad.remark


async def test_heartbeat_filter_data_is_versioned_by_sub_version(start_role, remoting_client):
    addr = (await start_role("dev", ON)).listening["broker"]
    await stored(remoting_client, addr, "THb")
    assert (await remoting_client.invoke(addr, heartbeat(subscription("THb", "region = 'us'", 100)))).code == 0
    assert bodies(await remoting_client.invoke(addr, pull("THb", sub_version=100))) == [b"us-200"]
    newer = await remoting_client.invoke(addr, pull("THb", sub_version=200))
    assert newer.code == ResponseCode.SUBSCRIPTION_NOT_LATEST
    # a changed expression with a newer version replaces the filter; an older version does not
    assert (await remoting_client.invoke(addr, heartbeat(subscription("THb", "amount >= 900", 200)))).code == 0
    assert bodies(await remoting_client.invoke(addr, pull("THb", sub_version=200))) == [b"eu-900"]
    assert (await remoting_client.invoke(addr, heartbeat(subscription("THb", "region = 'us'", 150)))).code == 0
    assert bodies(await remoting_client.invoke(addr, pull("THb", sub_version=150))) == [b"eu-900"]


async def test_filter_data_missing_or_stale_gets_27_and_28(start_role, remoting_client):
    kernel = await start_role("dev", ON)
    addr = kernel.listening["broker"]
    await stored(remoting_client, addr, "TFd")
    # as in Java, a heartbeat with an expression that does not compile succeeds, and its pulls are refused
    assert (await remoting_client.invoke(addr, heartbeat(subscription("TFd", "region =", 7)))).code == 0
    missing = await remoting_client.invoke(addr, pull("TFd", sub_version=7))
    assert missing.code == ResponseCode.FILTER_DATA_NOT_EXIST and "expression may be wrong" in missing.remark
    from pyrmq.plugins.broker.core import BROKER

    ctx = kernel.state.get(BROKER)
    assert (await remoting_client.invoke(addr, heartbeat(subscription("TFd", "region = 'eu'", 8)))).code == 0
    ctx.consumers.groups[GROUP].subscriptions["TFd"].sub_version = 9  # the group's subscription ahead of its filter data
    stale = await remoting_client.invoke(addr, pull("TFd", sub_version=9))
    assert stale.code == ResponseCode.FILTER_DATA_NOT_LATEST


async def test_filter_data_is_persisted_in_consumer_filter_json(start_role, remoting_client, tmp_path):
    store_dir = tmp_path / "persist"
    kernel = await start_role("dev", {**ON, "broker.storePathRootDir": str(store_dir)})
    addr = kernel.listening["broker"]
    await stored(remoting_client, addr, "TP")
    assert (await remoting_client.invoke(addr, heartbeat(subscription("TP", "region = 'us'", 42)))).code == 0
    kernel.request_stop()
    with trio.fail_after(20):
        while not store_released(store_dir / "lock"):
            await trio.sleep(0.05)
    path = store_dir / "config" / "consumerFilter.json"
    saved = fastjson.loads(path.read_text())
    data = saved["filterDataByTopic"]["TP"]["groupFilterData"][GROUP]
    assert (data["expression"], data["expressionType"], data["clientVersion"]) == ("region = 'us'", "SQL92", 42)

    again = await start_role("dev", {**ON, "broker.storePathRootDir": str(store_dir)})
    addr2 = again.listening["broker"]
    # the reloaded data serves the group as soon as its consumer is back (its heartbeat revives it)
    assert (await remoting_client.invoke(addr2, heartbeat(subscription("TP", "region = 'us'", 42)))).code == 0
    assert bodies(await remoting_client.invoke(addr2, pull("TP", sub_version=42))) == [b"us-200"]


@pytest.mark.parametrize("support_retry", [False, True])
async def test_retry_topics_are_sql_filtered_only_with_filter_support_retry(start_role, remoting_client, support_retry):
    addr = (await start_role("dev", {**ON, "broker.filterSupportRetry": support_retry})).listening["broker"]
    retry = f"%RETRY%{GROUP}"
    await stored(remoting_client, addr, "TR", [])
    hb = heartbeat(subscription("TR", "region = 'eu'", 3), subscription(retry, "*", 3, "TAG"))
    assert (await remoting_client.invoke(addr, hb)).code == 0
    await stored(remoting_client, addr, retry, [(b, {**p, "RETRY_TOPIC": "TR"}) for b, p in MIXED[:3]])
    got = bodies(await remoting_client.invoke(addr, pull(retry, sub_version=3)))
    assert got == ([b"eu-150", b"eu-900"] if support_retry else [b"eu-150", b"eu-900", b"us-200"])


async def test_a_parked_pull_wakes_only_for_a_matching_message(start_role, remoting_client):
    addr = (await start_role("dev", ON)).listening["broker"]
    await stored(remoting_client, addr, "TLp", [])
    answer = {}

    async def parked():
        answer["pull"] = await remoting_client.invoke(addr, pull("TLp", sql="region = 'eu'", suspend_ms=15000), timeout=30)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(parked)
        await trio.sleep(0.3)
        assert (await remoting_client.invoke(addr, send("TLp", b"us", {"region": "us"}))).code == 0
        await trio.sleep(0.5)
        assert "pull" not in answer  # the arriving message does not match: the pull stays parked
        assert (await remoting_client.invoke(addr, send("TLp", b"eu", {"region": "eu"}))).code == 0
        with trio.fail_after(10):
            while "pull" not in answer:
                await trio.sleep(0.02)
    assert bodies(answer["pull"]) == [b"eu"]


async def test_registered_group_filters_messages_arriving_after_its_heartbeat(start_role, remoting_client):
    """Messages stored after the group's filter data was registered are answered from what dispatch evaluated (a pull
    with or without the subscription in its header gets the same messages as one evaluated on the commit log); a
    changed expression applies to later pulls."""
    addr = (await start_role("dev", ON)).listening["broker"]
    assert (await remoting_client.invoke(addr, create_topic("TDs"))).code == ResponseCode.SUCCESS
    assert (await remoting_client.invoke(addr, heartbeat(subscription("TDs", "region = 'eu' AND amount >= 150", 1)))).code == 0
    await stored(remoting_client, addr, "TDs", MIXED[:4])
    assert bodies(await remoting_client.invoke(addr, pull("TDs", sub_version=1))) == [b"eu-150", b"eu-900"]
    in_header = await remoting_client.invoke(addr, pull("TDs", sql="region = 'eu' AND amount >= 150", sub_version=1))
    assert bodies(in_header) == [b"eu-150", b"eu-900"]
    other_group = pull("TDs", sql="region = 'eu' AND amount >= 150", group="sqlg_other")  # evaluated on the commit log
    assert bodies(await remoting_client.invoke(addr, other_group)) == [b"eu-150", b"eu-900"]
    assert (await remoting_client.invoke(addr, heartbeat(subscription("TDs", "amount < 300", 2)))).code == 0
    await stored(remoting_client, addr, "TDs", [(b"us-100", {"region": "us", "amount": "100"}), *MIXED[4:]], create=False)
    got = bodies(await remoting_client.invoke(addr, pull("TDs", sub_version=2)))
    assert got == [b"eu-150", b"us-200", b"us-100"]


async def test_a_parked_pull_gets_the_groups_new_expression(start_role, remoting_client):
    """A pull parked under the old expression is answered with the expression of the group's next heartbeat."""
    addr = (await start_role("dev", ON)).listening["broker"]
    await stored(remoting_client, addr, "TNx", [])
    assert (await remoting_client.invoke(addr, heartbeat(subscription("TNx", "region = 'eu'", 1)))).code == 0
    answer = {}

    async def parked():
        answer["pull"] = await remoting_client.invoke(addr, pull("TNx", sub_version=1, suspend_ms=15000), timeout=30)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(parked)
        await trio.sleep(0.3)
        assert (await remoting_client.invoke(addr, heartbeat(subscription("TNx", "region = 'us'", 2)))).code == 0
        assert (await remoting_client.invoke(addr, send("TNx", b"eu", {"region": "eu"}))).code == 0
        assert (await remoting_client.invoke(addr, send("TNx", b"us", {"region": "us"}))).code == 0
        with trio.fail_after(10):
            while "pull" not in answer:
                await trio.sleep(0.02)
    assert bodies(answer["pull"]) == [b"us"]


async def test_a_registered_groups_parked_pull_wakes_only_for_a_matching_message(start_role, remoting_client):
    """The wake-up of a parked pull of a registered group reads the answer dispatch kept for the arriving message."""
    addr = (await start_role("dev", ON)).listening["broker"]
    await stored(remoting_client, addr, "TWk", [])
    assert (await remoting_client.invoke(addr, heartbeat(subscription("TWk", "region = 'eu'", 1)))).code == 0
    await stored(remoting_client, addr, "TWk", [(b"first", {"region": "eu"})], create=False)
    assert bodies(await remoting_client.invoke(addr, pull("TWk", sub_version=1))) == [b"first"]
    answer = {}

    async def parked():
        answer["pull"] = await remoting_client.invoke(addr, pull("TWk", sub_version=1, offset=1, suspend_ms=15000),
                                                      timeout=30)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(parked)
        await trio.sleep(0.3)
        assert (await remoting_client.invoke(addr, send("TWk", b"us", {"region": "us"}))).code == 0
        await trio.sleep(0.5)
        assert "pull" not in answer  # the arriving message does not match: the pull stays parked
        assert (await remoting_client.invoke(addr, send("TWk", b"eu", {"region": "eu"}))).code == 0
        with trio.fail_after(5):  # woken by the message, well before the 15 s suspend ends
            while "pull" not in answer:
                await trio.sleep(0.02)
    assert bodies(answer["pull"]) == [b"eu"]
