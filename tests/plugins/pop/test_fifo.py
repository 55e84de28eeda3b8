"""FIFO pops (5.5.0's ConsumerOrderInfoManager rules, per queue): a queue's next messages only once its batch is acked
or visible again, attempts counted, the batch's own attemptId never blocked; a FIFO group declared by its
subscription-group config (consumeMessageOrderly); several consumers and the order they see."""

from __future__ import annotations

import trio

from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting import fastjson

TOPIC = "FifoT"
GROUP = "GFIFO"


async def wait_for(predicate, what: str, timeout: float = 20.0) -> None:
    with trio.move_on_after(timeout):
        while not predicate():
            await trio.sleep(0.02)
        return
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


async def test_a_fifo_queue_is_blocked_until_its_batch_is_acked_or_visible_again(pop_broker):
    await pop_broker.topic(TOPIC, 1)
    await pop_broker.send(TOPIC, [f"f{i}" for i in range(4)])
    c = pop_broker.consumer(GROUP, TOPIC)

    a1 = await c.pop(2, invisible=1500, order=True, attempt_id="a1")
    assert a1.keys == ["f0", "f1"]
    assert (a1.ext["reviveQid"], a1.ext["orderCountInfo"]) == ("999", "0 0 0")
    assert a1.messages[0].handle.is_order
    # blocked for another attempt, and its backlog is not counted
    blocked = await c.pop(2, invisible=1500, order=True, attempt_id="a2")
    assert blocked.code == ResponseCode.POLLING_TIMEOUT and blocked.ext["restNum"] == "0"
    # the batch's own attemptId (a client retrying a lost answer) gets the same batch, not counted again
    again = await c.pop(2, invisible=1500, order=True, attempt_id="a1")
    assert again.keys == ["f0", "f1"] and again.ext["orderCountInfo"] == "0 0 0"

    # visible again after its invisible time: the same messages, one more attempt each
    back = await c.pop(2, invisible=60_000, order=True, attempt_id="a3", poll=15_000)
    assert back.keys == ["f0", "f1"] and int(back.ext["popTime"]) >= int(a1.ext["popTime"]) + 1500
    assert back.ext["orderCountInfo"] == "0 qo0%0 1;0 qo0%1 1;0 0 1"
    assert [m.reconsume_times for m in back.messages] == [1, 1]

    # acked in part: still blocked; acked in full: the next batch, and a waiting pop is woken
    assert (await c.ack(back.messages[0])).code == ResponseCode.SUCCESS
    assert (await c.pop(2, invisible=60_000, order=True, attempt_id="a4")).code == ResponseCode.POLLING_TIMEOUT
    committed = pop_broker.ctx.offsets.query(GROUP, TOPIC, 0)
    assert committed == 1  # the first unacked offset of the batch
    result = {}

    async def wait() -> None:
        result["next"] = await c.pop(2, invisible=60_000, order=True, attempt_id="a5", poll=20_000)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait)
        await wait_for(lambda: pop_broker.pop_service.polling.total == 1, "the FIFO pop parked")
        assert (await c.ack(back.messages[1])).code == ResponseCode.SUCCESS
    assert result["next"].keys == ["f2", "f3"] and result["next"].ext["orderCountInfo"] == "0 0 0"
    assert pop_broker.ctx.offsets.query(GROUP, TOPIC, 0) == 2

    # an ack below the committed offset (f0 again): nothing to do, SUCCESS as 5.x
    assert (await c.ack(back.messages[0])).code == ResponseCode.SUCCESS
    assert pop_broker.ctx.offsets.query(GROUP, TOPIC, 0) == 2


async def test_an_ack_of_an_offset_outside_the_fifo_batch_is_message_illegal(pop_broker):
    await pop_broker.topic(TOPIC, 1)
    await pop_broker.send(TOPIC, [f"f{i}" for i in range(4)])
    c = pop_broker.consumer(GROUP, TOPIC)
    batch = await c.pop(2, invisible=60_000, order=True)
    response = await c.ack(batch.messages[0], offset=3)
    assert response.code == ResponseCode.MESSAGE_ILLEGAL
    assert response.remark.startswith(f"offset is illegal, key:{TOPIC}@{GROUP}@0, old:0, commit:3, next:-1, /127.0.0.1:")


async def test_a_group_declared_fifo_is_popped_in_order_by_several_consumers(pop_broker):
    await pop_broker.topic(TOPIC, 2)
    await pop_broker.group(GROUP, consumeMessageOrderly=True)
    response = await pop_broker.request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, {})
    assert fastjson.loads(response.body_bytes())["subscriptionGroupTable"][GROUP]["consumeMessageOrderly"] is True
    per_queue = {0: [f"q0-{i}" for i in range(12)], 1: [f"q1-{i}" for i in range(12)]}
    for queue_id, keys in per_queue.items():
        await pop_broker.send(TOPIC, keys, queue_id=queue_id)
    acked: dict[int, list[str]] = {0: [], 1: []}
    failures = {"given-up": 0}

    async def consumer(n: int) -> None:
        c = pop_broker.consumer(GROUP, TOPIC)
        while sum(map(len, acked.values())) < 24:
            answer = await c.pop(3, invisible=1000, poll=500)  # no order flag: the group is FIFO
            for i, m in enumerate(answer.messages):
                assert m.handle.is_order
                if n == 0 and i == 1 and failures["given-up"] < 2:
                    failures["given-up"] += 1  # this consumer drops a batch half way: it comes back, in order
                    break
                assert (await c.ack(m)).code == ResponseCode.SUCCESS
                acked[m.message.queue_id].append(m.key)

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            for n in range(3):
                nursery.start_soon(consumer, n)
    # each queue's messages acked in order, each once
    assert acked == per_queue
