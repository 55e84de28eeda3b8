"""POP consumption against `pyrmq dev` in-process on real sockets, with raw requests carrying RocketMQ 5.5.0's headers
(the answers read as the 5.x Java client reads them: tests/plugins/pop/popclient.py).

What a consumer observes: pop, ack, batch ack, a changed invisible time; an unacked message back after its invisible
time from the group's retry topic with its attempts counted; eight consumers sharing one queue; long polling woken by
an arrival; PEEK, NOTIFICATION, POLLING_INFO; filters; a POP group and a pull group of one topic side by side, and the
POP group's progress in GET_CONSUME_STATS.
"""

from __future__ import annotations

import functools
import time

import trio

from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.message import decode_messages
from pyrmq.remoting.pop import PROPERTY_FIRST_POP_TIME, PROPERTY_ORIGIN_GROUP, PROPERTY_POP_CK, ReceiptHandle
from pyrmq.remoting import fastjson

TOPIC = "PopT"
GROUP = "GPOP"


async def wait_for(predicate, what: str, timeout: float = 20.0) -> None:
    with trio.move_on_after(timeout):
        while True:
            value = predicate()
            if hasattr(value, "__await__"):
                value = await value
            if value:
                return
            await trio.sleep(0.02)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


async def consume_stats(broker, group: str, topic: str) -> dict[int, dict]:
    response = await broker.request(RequestCode.GET_CONSUME_STATS, {"consumerGroup": group, "topic": topic})
    assert response.code == ResponseCode.SUCCESS, response.remark
    table = fastjson.loads(response.body_bytes())["offsetTable"]
    return {int(key["queueId"]): value for key, value in table.items() if key["topic"] == topic}


async def test_pop_then_ack_answers_as_5_5_0(pop_broker):
    await pop_broker.topic(TOPIC, 1)
    await pop_broker.send(TOPIC, ["k0", "k1", "k2", "k3"])
    c = pop_broker.consumer(GROUP, TOPIC)

    first = await c.pop(3, invisible=10_000)
    assert (first.code, first.response.remark) == (ResponseCode.SUCCESS, "FOUND")
    ext = first.ext
    assert (ext["invisibleTime"], ext["reviveQid"], ext["restNum"]) == ("10000", "0", "1")
    assert (ext["startOffsetInfo"], ext["msgOffsetInfo"]) == ("0 0 0", "0 0 0,1,2")
    assert "orderCountInfo" not in ext
    assert first.keys == ["k0", "k1", "k2"]
    # the messages go out as stored: their handles come from the info strings, 5.x's format
    assert all(PROPERTY_POP_CK not in m.message.properties for m in first.messages)
    assert first.messages[2].handle.encode() == f"0 {ext['popTime']} 10000 0 0 broker-a 0 2"

    ack = await c.ack(first.messages[0])
    assert (ack.code, ack.remark, dict(ack.ext_fields)) == (ResponseCode.SUCCESS, None, {})
    batch = await c.batch_ack([first.messages[1]])
    assert (batch.code, batch.remark) == (ResponseCode.SUCCESS, None)

    second = await c.pop(3, invisible=10_000)
    assert second.keys == ["k3"] and second.ext["reviveQid"] == "1" and second.ext["restNum"] == "0"
    empty = await c.pop(3, invisible=10_000)
    assert (empty.code, empty.response.remark) == (ResponseCode.POLLING_TIMEOUT, "NO_MESSAGE_IN_QUEUE")
    assert (empty.ext["startOffsetInfo"], empty.ext["msgOffsetInfo"], empty.ext["reviveQid"]) == ("", "", "2")

    # popped up to 4, two of them in flight (k2 and k3): what the admin tools show for the queue
    stats = await consume_stats(pop_broker, GROUP, TOPIC)
    assert stats[0]["brokerOffset"] == 4 and stats[0]["consumerOffset"] == 4 and stats[0]["inflight"] == 2
    await c.ack(first.messages[2])
    await c.ack(second.messages[0])
    assert (await consume_stats(pop_broker, GROUP, TOPIC))[0]["inflight"] == 0


async def test_an_unacked_message_comes_back_after_its_invisible_time_from_the_retry_topic(pop_broker):
    await pop_broker.topic(TOPIC, 1)
    await pop_broker.send(TOPIC, ["k0", "k1"])
    c = pop_broker.consumer(GROUP, TOPIC)
    first = await c.pop(2, invisible=1000)
    assert first.keys == ["k0", "k1"]
    await c.ack(first.messages[1])
    popped_at = int(first.ext["popTime"])

    # invisible: another pop gets nothing
    assert (await c.pop(2, invisible=1000)).code == ResponseCode.POLLING_TIMEOUT
    again = await c.pop(2, invisible=1000, poll=15_000)
    assert again.code == ResponseCode.SUCCESS and again.keys == ["k0"]
    assert int(again.ext["popTime"]) >= popped_at + 1000  # never before its invisible time ended
    back = again.messages[0]
    props = back.message.properties
    assert back.message.topic == TOPIC  # handed out under the topic popped
    assert back.message.reconsume_times == 1
    assert props[PROPERTY_ORIGIN_GROUP] == GROUP and props[PROPERTY_FIRST_POP_TIME] == str(popped_at)
    assert props["UNIQ_KEY"] == first.messages[0].message.properties["UNIQ_KEY"]  # the same message id
    handle = ReceiptHandle.parse(props[PROPERTY_POP_CK])
    assert handle.retry_flag == "1" and back.real_topic == "%RETRY%GPOP_PopT"
    assert again.ext["startOffsetInfo"] == "1 0 0"
    assert pop_broker.ctx.topics.get("%RETRY%GPOP_PopT") is not None

    # not acked again: a third delivery, attempts counted on
    third = await c.pop(2, invisible=1000, poll=15_000)
    assert third.keys == ["k0"] and third.messages[0].message.reconsume_times == 2
    assert third.messages[0].message.properties[PROPERTY_FIRST_POP_TIME] == str(popped_at)
    ack = await c.ack(third.messages[0])
    assert ack.code == ResponseCode.SUCCESS
    # acked: never again, the acked k1 neither
    assert (await c.pop(2, invisible=1000, poll=2500)).code == ResponseCode.POLLING_TIMEOUT


async def test_change_invisible_time_moves_the_return_and_suspend_keeps_the_count(pop_broker):
    await pop_broker.topic(TOPIC, 1)
    await pop_broker.send(TOPIC, ["k0", "k1"])
    c = pop_broker.consumer(GROUP, TOPIC)
    first = await c.pop(2, invisible=60_000)
    response, changed = await c.change(first.messages[0], 300)
    assert (response.code, response.remark) == (ResponseCode.SUCCESS, "not set any response code")
    assert response.ext_fields["invisibleTime"] == "300" and response.ext_fields["reviveQid"] == "0"
    assert int(response.ext_fields["popTime"]) >= int(first.ext["popTime"])
    # the old handle no longer holds it; the new one does
    assert changed.handle.ck_queue_offset == 0 and changed.handle.pop_time == int(response.ext_fields["popTime"])
    _, suspended = await c.change(first.messages[1], 300, suspend=True)

    back = await c.pop(2, invisible=60_000, poll=15_000)
    if len(back.messages) < 2:
        back.messages += (await c.pop(2, invisible=60_000, poll=15_000)).messages
    counts = {m.key: m.message.reconsume_times for m in back.messages}
    assert counts == {"k0": 1, "k1": 0}  # suspend: back without an attempt counted (the proxy's nack)
    for m in back.messages:
        assert (await c.ack(m)).code == ResponseCode.SUCCESS
    # an ack with the handle the change replaced: SUCCESS, and nothing more comes
    assert (await c.ack(changed)).code == ResponseCode.SUCCESS
    assert (await c.pop(2, poll=1000)).code == ResponseCode.POLLING_TIMEOUT


async def test_eight_consumers_share_one_queue_and_no_message_is_given_twice(pop_broker):
    await pop_broker.topic(TOPIC, 1)
    total = 200
    got: dict[int, list[str]] = {i: [] for i in range(8)}
    done = trio.Event()

    async def consumer(i: int) -> None:
        c = pop_broker.consumer(GROUP, TOPIC)
        while not done.is_set():
            answer = await c.pop(4, invisible=60_000, poll=2000)
            got[i] += answer.keys
            for m in answer.messages:
                assert (await c.ack(m)).code == ResponseCode.SUCCESS
            if sum(map(len, got.values())) >= total:
                done.set()

    async with trio.open_nursery() as nursery:
        for i in range(8):
            nursery.start_soon(consumer, i)
        # all eight wait for messages first: each arrival wakes the one that waited longest
        await wait_for(lambda: pop_broker.pop_service.polling.total == 8, "eight pops waiting")
        await pop_broker.send(TOPIC, [f"m{n}" for n in range(total)])
        with trio.fail_after(60):
            await done.wait()
    everything = [k for keys in got.values() for k in keys]
    assert sorted(everything) == sorted(f"m{n}" for n in range(total))  # each exactly once
    assert all(got[i] for i in range(8)), {i: len(v) for i, v in got.items()}


async def test_a_waiting_pop_is_woken_by_an_arrival_and_times_out_without_one(pop_broker):
    await pop_broker.topic(TOPIC, 2)
    c = pop_broker.consumer(GROUP, TOPIC)
    result = {}

    async def waiting_pop() -> None:
        result["answer"] = await c.pop(8, invisible=10_000, poll=20_000, queue_id=1)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiting_pop)
        await wait_for(lambda: pop_broker.pop_service.polling.total == 1, "the pop parked")
        info = await c.polling_info(queue_id=1)
        assert (info.code, info.ext_fields["pollingNum"]) == (ResponseCode.SUCCESS, "1")
        assert (await c.polling_info(queue_id=-1)).ext_fields["pollingNum"] == "0"
        await pop_broker.send(TOPIC, ["other"], queue_id=0)  # another queue: not for this pop
        await pop_broker.send(TOPIC, ["w0"], queue_id=1)
    assert result["answer"].code == ResponseCode.SUCCESS and result["answer"].keys == ["w0"]

    started = time.monotonic()
    timed_out = await c.pop(8, invisible=10_000, poll=400, queue_id=1)
    assert (timed_out.code, timed_out.response.remark) == (ResponseCode.POLLING_TIMEOUT, "NO_MESSAGE_IN_QUEUE")
    assert time.monotonic() - started >= 0.4


async def test_polling_full_when_no_more_may_wait(start_pop_broker):
    broker = await start_pop_broker({"broker.popPollingSize": 1})
    await broker.topic(TOPIC, 1)
    c = broker.consumer(GROUP, TOPIC)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(functools.partial(c.pop, 1, invisible=10_000, poll=20_000))
        await wait_for(lambda: broker.pop_service.polling.total == 1, "one pop parked")
        full = await c.pop(1, invisible=10_000, poll=20_000)
        assert (full.code, full.response.remark) == (ResponseCode.POLLING_FULL, "NO_MESSAGE_IN_QUEUE")
        await broker.send(TOPIC, ["go"])


async def test_peek_shows_what_the_next_pop_gets_and_moves_nothing(pop_broker):
    await pop_broker.topic(TOPIC, 1)
    c = pop_broker.consumer(GROUP, TOPIC)
    await pop_broker.send(TOPIC, ["k0", "k1", "k2"])
    await c.pop(1, invisible=60_000)  # k0 popped
    peek = await c.peek(4)
    assert (peek.code, peek.remark) == (ResponseCode.SUCCESS, "FOUND")
    assert [m.properties["KEYS"] for m in decode_messages(peek.body_bytes())] == ["k1", "k2"]
    assert (await c.pop(4, invisible=60_000)).keys == ["k1", "k2"]  # the peek took nothing
    empty = await c.peek(4)
    assert (empty.code, empty.remark, empty.ext_fields["restNum"]) == (ResponseCode.PULL_NOT_FOUND, "NO_MESSAGE_IN_QUEUE", "0")


async def test_notification_says_whether_a_pop_would_find_something(pop_broker):
    await pop_broker.topic(TOPIC, 1)
    c = pop_broker.consumer(GROUP, TOPIC)
    empty = await c.notification(poll=300)
    assert empty.code == ResponseCode.SUCCESS and empty.ext_fields["hasMsg"] == "false"
    result = {}

    async def wait() -> None:
        result["n"] = await c.notification(poll=20_000)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait)
        await wait_for(lambda: pop_broker.pop_service.polling.total == 1, "the notification parked")
        assert (await c.polling_info()).ext_fields["pollingNum"] == "0"  # POLLING_INFO counts pops only
        await pop_broker.send(TOPIC, ["k0"])
    assert result["n"].ext_fields == {"hasMsg": "true", "pollingFull": "false"}
    assert (await c.notification()).ext_fields["hasMsg"] == "true"
    await c.pop(1, invisible=60_000)
    assert (await c.notification()).ext_fields["hasMsg"] == "false"  # popped: nothing for a pop now


async def test_tag_and_sql92_filters(pop_broker):
    await pop_broker.topic(TOPIC, 1)
    for i in range(6):
        await pop_broker.send(TOPIC, [f"k{i}"], tags="A" if i % 2 == 0 else "B", properties={"a": str(i)})
    tags = pop_broker.consumer("GTAG", TOPIC)
    answer = await tags.pop(32, invisible=60_000, exp_type="TAG", exp="A")
    assert answer.keys == ["k0", "k2", "k4"]
    assert (await tags.pop(32, invisible=60_000, exp_type="TAG", exp="A")).code == ResponseCode.POLLING_TIMEOUT
    sql = pop_broker.consumer("GSQL", TOPIC)
    answer = await sql.pop(32, invisible=60_000, exp_type="SQL92", exp="a > 3")
    assert answer.keys == ["k4", "k5"]
    # the filtered-out messages moved the offset, the checkpoint covers the matching ones only
    assert answer.ext["msgOffsetInfo"] == "0 0 4,5" and answer.ext["startOffsetInfo"] == "0 0 0"
    bad = await sql.pop(32, invisible=60_000, exp_type="SQL92", exp="a >")
    assert (bad.code, bad.response.remark) == (ResponseCode.SUBSCRIPTION_PARSE_FAILED, "parse the consumer's subscription failed")
    # a waiting pop is woken only by a message its filter takes
    result = {}

    async def wait() -> None:
        result["a"] = await tags.pop(32, invisible=60_000, exp_type="TAG", exp="A", poll=20_000)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait)
        await wait_for(lambda: pop_broker.pop_service.polling.total == 1, "the pop parked")
        await pop_broker.send(TOPIC, ["b-late"], tags="B")
        await pop_broker.send(TOPIC, ["a-late"], tags="A")
    assert result["a"].keys == ["a-late"]


async def test_a_pop_group_and_a_pull_group_of_one_topic_side_by_side(pop_broker):
    await pop_broker.topic(TOPIC, 2)
    keys = [f"k{i}" for i in range(10)]
    await pop_broker.send(TOPIC, keys[:5], queue_id=0)
    await pop_broker.send(TOPIC, keys[5:], queue_id=1)
    c = pop_broker.consumer(GROUP, TOPIC)
    popped = []
    while len(popped) < 10:
        answer = await c.pop(3, invisible=60_000, poll=2000)
        popped += answer.messages
    assert sorted(m.key for m in popped) == keys
    pulled = []
    for queue_id in (0, 1):
        response = await pop_broker.request(RequestCode.PULL_MESSAGE, {
            "consumerGroup": "GPULL", "topic": TOPIC, "queueId": queue_id, "queueOffset": 0, "maxMsgNums": 32,
            "sysFlag": 4, "commitOffset": 0, "suspendTimeoutMillis": 0, "subscription": "*", "subVersion": 0})
        pulled += [m.properties["KEYS"] for m in decode_messages(response.body_bytes())]
    assert sorted(pulled) == keys  # the pull group reads everything, whatever the POP group did
    for m in popped[:4]:
        await c.ack(m)
    stats = await consume_stats(pop_broker, GROUP, TOPIC)
    assert {q: (s["brokerOffset"], s["consumerOffset"]) for q, s in stats.items()} == {0: (5, 5), 1: (5, 5)}
    assert sum(s["inflight"] for s in stats.values()) == 6
    assert all("inflight" not in s for s in (await consume_stats(pop_broker, "GPULL", TOPIC)).values())


async def test_batch_ack_of_messages_from_several_queues(pop_broker):
    await pop_broker.topic(TOPIC, 2)
    await pop_broker.send(TOPIC, ["a0", "a1"], queue_id=0)
    await pop_broker.send(TOPIC, ["b0"], queue_id=1)
    c = pop_broker.consumer(GROUP, TOPIC)
    answer = await c.pop(8, invisible=1000)
    assert sorted(answer.keys) == ["a0", "a1", "b0"]
    response = await c.batch_ack(answer.messages)
    assert (response.code, response.remark) == (ResponseCode.SUCCESS, None)
    assert pop_broker.pop_service.ledger.open == {}
    assert (await c.pop(8, invisible=1000, poll=2500)).code == ResponseCode.POLLING_TIMEOUT  # none comes back


async def test_a_waiting_pop_reads_what_the_read_bound_lets_through_when_it_moves(pop_broker):
    # the store's read bound (automatic failover's confirm offset; here moved by the test, as the replicator does)
    await pop_broker.topic(TOPIC, 1)
    store = pop_broker.ctx.store
    store.set_read_bound(store.commit_log.max_offset)  # nothing sent from here on is confirmed yet
    await pop_broker.send(TOPIC, ["b0"])
    c = pop_broker.consumer(GROUP, TOPIC)
    assert (await c.pop(4, invisible=60_000)).code == ResponseCode.POLLING_TIMEOUT  # there, not readable yet
    result = {}

    async def wait() -> None:
        result["answer"] = await c.pop(4, invisible=60_000, poll=20_000)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait)
        await wait_for(lambda: pop_broker.pop_service.polling.total == 1, "the pop parked")
        store.advance_read_bound(store.commit_log.max_offset)
    assert result["answer"].keys == ["b0"]
    store.set_read_bound(None)


async def test_with_sync_flush_answers_go_out_once_the_records_are_on_disk(start_pop_broker):
    broker = await start_pop_broker({"broker.flushDiskType": "SYNC_FLUSH"})
    await broker.topic(TOPIC, 1)
    await broker.send(TOPIC, ["k0", "k1", "k2"])
    c = broker.consumer(GROUP, TOPIC)
    popped = await c.pop(3, invisible=60_000)
    assert popped.keys == ["k0", "k1", "k2"]
    store = broker.ctx.store
    assert store.commit_log.queue.flushed_offset >= broker.pop_service.last_end  # the checkpoint is on disk
    assert (await consume_stats(broker, GROUP, TOPIC))[0]["consumerOffset"] == 3  # committed once durable
    for m in popped.messages[:2]:
        assert (await c.ack(m)).code == ResponseCode.SUCCESS
    response, _ = await c.change(popped.messages[2], 100)
    assert response.code == ResponseCode.SUCCESS
    assert store.commit_log.queue.flushed_offset >= broker.pop_service.last_end
    back = await c.pop(3, invisible=60_000, poll=10_000)
    assert back.keys == ["k2"] and back.messages[0].message.reconsume_times == 1
