"""Bad POP requests get RocketMQ 5.5.0's response code and a remark naming what is wrong, never a Python traceback."""

from __future__ import annotations

import json
import time

import pytest

from pyrmq.remoting.codes import RequestCode, ResponseCode

TOPIC = "PopT"
GROUP = "GPOP"


def pop_fields(**changes):
    fields = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": -1, "maxMsgNums": 4, "invisibleTime": 10_000,
              "pollTime": 0, "bornTime": int(time.time() * 1000), "initMode": 0}
    fields.update(changes)
    return {k: v for k, v in fields.items() if v is not None}


@pytest.fixture
async def broker(pop_broker):
    await pop_broker.topic(TOPIC, 1)
    await pop_broker.send(TOPIC, ["k0", "k1", "k2", "k3"])
    return pop_broker


@pytest.mark.parametrize("changes, code, remark", [
    ({"consumerGroup": None}, ResponseCode.SYSTEM_ERROR, "the custom field <consumerGroup> is null"),
    ({"invisibleTime": "soon"}, ResponseCode.SYSTEM_ERROR, "the custom field <invisibleTime> is not a number: 'soon'"),
    ({"maxMsgNums": 33}, ResponseCode.INVALID_PARAMETER, "the broker[127.0.0.1] pop message's num is greater than 32"),
    ({"bornTime": int(time.time() * 1000) - 5000}, ResponseCode.POLLING_TIMEOUT,
     "the broker[127.0.0.1] pop message is timeout too much"),
    ({"topic": "Nope"}, ResponseCode.TOPIC_NOT_EXIST, "topic[Nope] not exist, apply first please!"),
    ({"queueId": 5}, ResponseCode.INVALID_PARAMETER,
     "queueId[5] is illegal, topic:[PopT] topicConfig.readQueueNums:[1] consumer:[/127.0.0.1:"),
    ({"expType": "SQL92", "exp": "a >"}, ResponseCode.SUBSCRIPTION_PARSE_FAILED, "parse the consumer's subscription failed"),
    ({"expType": "XPATH", "exp": "//a"}, ResponseCode.SUBSCRIPTION_PARSE_FAILED, "parse the consumer's subscription failed"),
    ({"invisibleTime": -1}, ResponseCode.INVALID_PARAMETER, "invisibleTime -1 is negative"),
])
async def test_bad_pop_requests(broker, changes, code, remark):
    response = await broker.request(RequestCode.POP_MESSAGE, pop_fields(**changes))
    assert (response.code, response.remark[: len(remark)]) == (code, remark)
    # 5.x's error answers still carry the response header, its numbers at 0
    assert {k: response.ext_fields.get(k) for k in ("popTime", "reviveQid", "restNum")} == {
        "popTime": "0", "reviveQid": "0", "restNum": "0"}


async def test_a_group_that_may_not_consume(broker):
    await broker.group("GOFF", consumeEnable=False)
    response = await broker.request(RequestCode.POP_MESSAGE, pop_fields(consumerGroup="GOFF"))
    assert (response.code, response.remark) == (ResponseCode.NO_PERMISSION, "subscription group no permission, GOFF")


async def test_bad_acks(broker):
    c = broker.consumer(GROUP, TOPIC)
    popped = (await c.pop(2, invisible=60_000)).messages[0]
    cases = [
        (dict(extra_info="garbage"), ResponseCode.SYSTEM_ERROR, "receipt handle 'garbage' has 1 fields: expected 8"),
        (dict(extra_info="0 x 60000 0 0 broker-a 0 0"), ResponseCode.SYSTEM_ERROR,
         "receipt handle '0 x 60000 0 0 broker-a 0 0': field 2 (popTime) is not a number: 'x'"),
        (dict(extra_info="0 1 60000 0 7 broker-a 0 0"), ResponseCode.SYSTEM_ERROR,
         "receipt handle '0 1 60000 0 7 broker-a 0 0': field 5 (retryFlag) is '7', not 0, 1 or 2"),
        (dict(offset=999), ResponseCode.NO_MESSAGE, "offset is illegal, key:PopT@0, commit:999, store:0~4"),
        (dict(queue_id=3), ResponseCode.MESSAGE_ILLEGAL,
         "queueId[3] is illegal, topic:[PopT] topicConfig.readQueueNums:[1] consumer:[/127.0.0.1:"),
        (dict(topic="Nope"), ResponseCode.TOPIC_NOT_EXIST, "topic[Nope] not exist, apply first please!"),
    ]
    for changes, code, remark in cases:
        response = await c.ack(popped, **changes)
        assert (response.code, (response.remark or "")[: len(remark)]) == (code, remark), changes
    missing = await broker.request(RequestCode.ACK_MESSAGE, {"consumerGroup": GROUP, "topic": TOPIC, "queueId": 0,
                                                             "offset": 0})
    assert (missing.code, missing.remark) == (ResponseCode.SYSTEM_ERROR, "the custom field <extraInfo> is null")
    # none of that acked anything
    assert popped.handle.queue_offset in broker.pop_service.ledger.open[
        (TOPIC, GROUP, 0, popped.handle.ck_queue_offset, popped.handle.pop_time)].unacked()


async def test_bad_batch_acks(broker):
    no_body = await broker.request(RequestCode.BATCH_ACK_MESSAGE, {})
    assert (no_body.code, no_body.remark) == (ResponseCode.NO_MESSAGE, None)
    empty = await broker.request(RequestCode.BATCH_ACK_MESSAGE, {}, b'{"acks":[],"brokerName":"broker-a"}')
    assert (empty.code, empty.remark) == (ResponseCode.NO_MESSAGE, None)
    cases = [
        (b"nonsense", "bad BATCH_ACK_MESSAGE body: batch ack body is not JSON"),
        (b'{"acks":[{"c":"G","t":"T","r":"0","q":0,"rq":0,"pt":1,"it":1,"b":"AQ=="}]}',
         "bad BATCH_ACK_MESSAGE body: acks[0] has no 'so' (startOffset)"),
        (b'{"acks":[{"c":"G","t":"T","r":"0","so":0,"q":0,"rq":0,"pt":1,"it":1,"b":"!!"}]}',
         "bad BATCH_ACK_MESSAGE body: bit set '!!' is not base64"),
        (b'{"acks":[{"c":"G","t":"T","r":"5","so":0,"q":0,"rq":0,"pt":1,"it":1,"b":"AQ=="}]}',
         "bad BATCH_ACK_MESSAGE body: acks[0].r is '5', not 0, 1 or 2"),
    ]
    for body, remark in cases:
        response = await broker.request(RequestCode.BATCH_ACK_MESSAGE, {}, body)
        assert (response.code, response.remark[: len(remark)]) == (ResponseCode.SYSTEM_ERROR, remark)
    # 5.x's long names are read too; offsets outside the queue are skipped
    body = {"acks": [{"consumerGroup": GROUP, "topic": TOPIC, "retry": "0", "startOffset": 0, "queueId": 0,
                      "reviveQueueId": 0, "popTime": 1, "invisibleTime": 1, "bitSet": "AAAB"}]}
    response = await broker.request(RequestCode.BATCH_ACK_MESSAGE, {}, json.dumps(body).encode())
    assert response.code == ResponseCode.SUCCESS


async def test_bad_changes_of_invisible_time(broker):
    c = broker.consumer(GROUP, TOPIC)
    popped = (await c.pop(2, invisible=60_000)).messages[0]
    fields = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": 0, "extraInfo": popped.handle.encode(), "offset": 4,
              "invisibleTime": 1000}
    beyond = await broker.request(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, fields)
    assert (beyond.code, beyond.remark) == (ResponseCode.NO_MESSAGE, "not set any response code")  # offset >= max
    no_time = await broker.request(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, {**fields, "offset": 0, "invisibleTime": None})
    assert (no_time.code, no_time.remark) == (ResponseCode.SYSTEM_ERROR, "the custom field <invisibleTime> is null")
    bad = await broker.request(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, {**fields, "offset": 0, "extraInfo": "1 2 3"})
    assert bad.code == ResponseCode.SYSTEM_ERROR and bad.remark.startswith("receipt handle '1 2 3' has 3 fields")


async def test_peek_notification_and_polling_info_checks(broker):
    bad = await broker.request(RequestCode.PEEK_MESSAGE, {"consumerGroup": GROUP, "topic": "Nope", "queueId": 0,
                                                          "maxMsgNums": 1})
    assert bad.code == ResponseCode.TOPIC_NOT_EXIST
    missing = await broker.request(RequestCode.NOTIFICATION, {"consumerGroup": GROUP, "topic": TOPIC, "queueId": 0,
                                                              "bornTime": 0})
    assert (missing.code, missing.remark) == (ResponseCode.SYSTEM_ERROR, "the custom field <pollTime> is null")
    assert missing.ext_fields["hasMsg"] == "false"
    info = await broker.request(RequestCode.POLLING_INFO, {"consumerGroup": GROUP, "topic": TOPIC, "queueId": 9})
    assert info.code == ResponseCode.INVALID_PARAMETER and info.remark.startswith("queueId[9] is illegal")
