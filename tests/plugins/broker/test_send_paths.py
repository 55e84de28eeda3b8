"""What a client sees of the broker's send fast paths where they once answered otherwise than the general path:
each over a real TCP connection to `pyrmq dev` in-process (see test_send_differential.py for the generated
comparison of the paths)."""

from __future__ import annotations

import pytest
import trio

from pyrmq.client import ConsumeFrom, PushConsumer
from pyrmq.client.message import MessageExt
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.headers import SendMessageRequestHeader
from pyrmq.store.format import BatchEntry, decode_messages, encode_batch_body


def create_topic(topic: str, queues: int = 1) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
        "topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(queues), "writeQueueNums": str(queues),
        "perm": "6", "topicFilterType": "SINGLE_TAG",
    })


def send_header(topic: str, properties: str, *, v2: bool = True, **fields: str) -> dict[str, str]:
    values = {
        "producer_group": "pg", "topic": topic, "default_topic": "TBW102", "default_topic_queue_nums": "4",
        "queue_id": "0", "sys_flag": "0", "born_timestamp": "1700000000000", "flag": "0", "properties": properties,
        **fields,
    }
    names = SendMessageRequestHeader.WIRE_NAMES_V2 if v2 else SendMessageRequestHeader.WIRE_NAMES
    return {names[k]: v for k, v in values.items()}


def pull(topic: str, subscription: str) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, {
        "consumerGroup": "g", "topic": topic, "queueId": "0", "queueOffset": "0", "maxMsgNums": "32",
        "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": subscription,
        "subVersion": "0", "expressionType": "TAG",
    })


@pytest.fixture
async def dev(start_role):
    return await start_role("dev")


async def test_a_batch_entry_with_an_empty_duplicate_tags_item_is_consumed_by_its_tag(dev, remoting_client):
    """``TAGS\\x01A\\x02TAGS\\x01`` is TAGS=A (RocketMQ's decoder drops the empty item): the bulk batch path
    once stored tags code 0 for it, so a consumer of tag A never got the message."""
    addr = dev.listening["broker"]
    assert (await remoting_client.invoke(addr, create_topic("TB"))).code == ResponseCode.SUCCESS
    entries = [BatchEntry(0, b"first", b"TAGS\x01A\x02TAGS\x01"), BatchEntry(0, b"second", b"TAGS\x01A\x02TAGS\x01B")]
    request = RemotingCommand.request(
        RequestCode.SEND_BATCH_MESSAGE, send_header("TB", "WAIT\x01true", batch="true"), encode_batch_body(entries)
    )
    sent = await remoting_client.invoke(addr, request)
    assert sent.code == ResponseCode.SUCCESS and len(sent.ext_fields["msgId"].split(",")) == 2
    for subscription, expected in (("A", [(b"first", "A")]), ("B", [(b"second", "B")]),
                                   ("A || B", [(b"first", "A"), (b"second", "B")])):
        pulled = await remoting_client.invoke(addr, pull("TB", subscription))
        assert pulled.code == ResponseCode.SUCCESS, (subscription, pulled.remark)
        assert [(m.body, m.tags) for m in decode_messages(pulled.body_bytes())] == expected


async def test_a_v2_send_with_a_max_reconsume_times_that_is_no_number_is_refused_as_a_v1_send(dev, remoting_client):
    """The one-pass single send once stored a V2 send whose maxReconsumeTimes (``l``) is not a number, which the
    general path (and RocketMQ's header decoder) refuses: now both answer SYSTEM_ERROR naming the field."""
    addr = dev.listening["broker"]
    assert (await remoting_client.invoke(addr, create_topic("TR"))).code == ResponseCode.SUCCESS
    answers = []
    for v2, code in ((True, RequestCode.SEND_MESSAGE_V2), (False, RequestCode.SEND_MESSAGE)):
        header = send_header("TR", "TAGS\x01A", v2=v2, max_reconsume_times="three")
        answers.append(await remoting_client.invoke(addr, RemotingCommand.request(code, header, b"body")))
    v2_answer, v1_answer = answers
    assert v2_answer.code == v1_answer.code == ResponseCode.SYSTEM_ERROR
    assert "<l>" in v2_answer.remark and "'three'" in v2_answer.remark
    assert "<maxReconsumeTimes>" in v1_answer.remark
    nothing = await remoting_client.invoke(addr, pull("TR", "*"))
    assert nothing.code == ResponseCode.PULL_NOT_FOUND  # neither was stored


async def test_the_push_consumer_keeps_a_message_whose_later_tags_item_matches(dev, remoting_client):
    """A message stored with ``TAGS\x01A\x02TAGS\x01B`` (a batch entry's properties are stored as sent) has
    TAGS=B (a later duplicate wins): the broker hands it to a consumer of tag B, whose own tag re-check once read
    the first item and dropped it."""
    addr = dev.listening["broker"]
    assert (await remoting_client.invoke(addr, create_topic("TC"))).code == ResponseCode.SUCCESS
    entries = [BatchEntry(0, b"first", b"TAGS\x01A\x02TAGS\x01B"), BatchEntry(0, b"second", b"TAGS\x01B")]
    request = RemotingCommand.request(
        RequestCode.SEND_BATCH_MESSAGE, send_header("TC", "", batch="true"), encode_batch_body(entries)
    )
    assert (await remoting_client.invoke(addr, request)).code == ResponseCode.SUCCESS
    received: list[tuple[bytes, str | None]] = []
    got_second = trio.Event()

    async def on_message(message: MessageExt) -> None:
        received.append((message.body, message.tags))
        if message.body == b"second":
            got_second.set()

    consumer = PushConsumer(dev.listening["namesrv"], "gTC", subscribe={"TC": "B"}, listener=on_message,
                            orderly=True, consume_from=ConsumeFrom.FIRST_OFFSET)
    async with consumer:
        with trio.fail_after(30):
            await got_second.wait()
    assert received == [(b"first", "B"), (b"second", "B")]  # in queue order: the first was not skipped
