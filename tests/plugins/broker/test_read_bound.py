"""The store's read bound seen from a client of the broker (what automatic failover keeps at the confirm offset; here
the test moves it itself, as the failover replicator does): pulls, key queries and reads by offset stop at it, and
a long poll parked in front of it is answered as soon as the store says it advanced (its ``visible`` event)."""

from __future__ import annotations

import time

import trio

from pyrmq.plugins.broker.core import BROKER
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.message import decode_message_id
from pyrmq.store.format import decode_messages, encode_properties

GROUP = "g-bound"


def send(topic: str, body: bytes, key: str) -> RemotingCommand:
    fields = {
        "producerGroup": "pg", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": 1, "queueId": 0,
        "sysFlag": 0, "bornTimestamp": int(time.time() * 1000), "flag": 0, "reconsumeTimes": 0, "unitMode": False,
        "properties": encode_properties({"KEYS": key, "UNIQ_KEY": f"U{time.monotonic_ns():030d}"[:32]}),
    }
    return RemotingCommand.request(RequestCode.SEND_MESSAGE, fields, body)


def pull(topic: str, offset: int, *, suspend_ms: int = 0) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, {
        "consumerGroup": GROUP, "topic": topic, "queueId": "0", "queueOffset": str(offset), "maxMsgNums": "32",
        "sysFlag": str(4 | (2 if suspend_ms else 0)), "commitOffset": "0", "suspendTimeoutMillis": str(suspend_ms),
        "subscription": "*", "subVersion": "0",
    })


def query(topic: str, key: str) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.QUERY_MESSAGE, {
        "topic": topic, "key": key, "maxNum": "32", "beginTimestamp": "0", "endTimestamp": str(2**62)})


def view(offset: int) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(offset)})


async def test_reads_stop_at_the_bound_and_a_parked_pull_wakes_when_it_advances(start_role, remoting_client, until):
    kernel = await start_role("broker")
    addr = await kernel.wait_listening("broker")
    store = kernel.state.get(BROKER).store
    await remoting_client.invoke(addr, RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
        "topic": "Bounded", "defaultTopic": "TBW102", "readQueueNums": "1", "writeQueueNums": "1", "perm": "6",
        "topicFilterType": "SINGLE_TAG"}))
    store.set_read_bound(store.commit_log.max_offset)  # nothing sent from here on is confirmed yet
    ends, offsets = [], []
    for i in range(3):
        sent = await remoting_client.invoke(addr, send("Bounded", f"m{i}".encode(), f"k{i}"))
        assert sent.code == ResponseCode.SUCCESS, sent.remark
        offsets.append(decode_message_id(sent.ext_fields["msgId"])[2])
        ends.append(store.commit_log.max_offset)

    hidden = await remoting_client.invoke(addr, pull("Bounded", 0))
    assert (hidden.code, hidden.remark, hidden.ext_fields["nextBeginOffset"]) == (
        ResponseCode.PULL_NOT_FOUND, "OFFSET_OVERFLOW_ONE", "0")
    assert hidden.ext_fields["maxOffset"] == "3"  # the queue still counts every stored message
    assert (await remoting_client.invoke(addr, query("Bounded", "k0"))).code == ResponseCode.QUERY_NOT_FOUND
    unconfirmed = await remoting_client.invoke(addr, view(offsets[0]))
    assert unconfirmed.code == ResponseCode.SYSTEM_ERROR and "not confirmed" in unconfirmed.remark, unconfirmed.remark

    # a long poll parks in front of the bound; the bound advancing past two messages answers it with those two
    answers: list[RemotingCommand] = []

    async def long_poll() -> None:
        answers.append(await remoting_client.invoke(addr, pull("Bounded", 0, suspend_ms=30_000), timeout=40))

    hold = kernel.plugin("broker.pull").hold

    async def parked() -> bool:
        return bool(hold.parked)

    async def answered() -> bool:
        return bool(answers)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(long_poll)
        await until(parked, "the pull parked", timeout=10)
        store.advance_read_bound(ends[1])
        # well before the poll's 30 s deadline, when it would be answered anyway
        await until(answered, "the parked pull answered", timeout=10)
    woken = answers[0]
    assert woken.code == ResponseCode.SUCCESS
    assert [m.body for m in decode_messages(woken.body_bytes())] == [b"m0", b"m1"]
    assert woken.ext_fields["nextBeginOffset"] == "2"
    assert [m.body for m in decode_messages((await remoting_client.invoke(addr, query("Bounded", "k1"))).body_bytes())] == [b"m1"]
    assert (await remoting_client.invoke(addr, query("Bounded", "k2"))).code == ResponseCode.QUERY_NOT_FOUND
    assert decode_messages((await remoting_client.invoke(addr, view(offsets[1]))).body_bytes())[0].body == b"m1"

    store.advance_read_bound(ends[0])  # never back
    assert store.read_bound == ends[1]
    store.set_read_bound(None)  # no bound: everything readable
    rest = await remoting_client.invoke(addr, pull("Bounded", 2))
    assert [m.body for m in decode_messages(rest.body_bytes())] == [b"m2"]
    assert decode_messages((await remoting_client.invoke(addr, view(offsets[2]))).body_bytes())[0].body == b"m2"
