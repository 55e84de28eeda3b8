"""What cannot be revived: a retry copy the store refuses is tried again later and later (5.5.0's checkpoint re-put:
10 s, 20 s, 30 s, ... 2 h, never dropped), its checkpoint written again with ``rp`` + 1 so that a restart keeps the
pace; a group whose retry topic the store could never take (a name over 127 bytes) is refused at the pop, before a
message is handed out that could never come back."""

from __future__ import annotations

import json
import logging

import trio

from pyrmq.plugins.broker.pop.names import CK_TAG
from pyrmq.remoting.codes import ResponseCode
from pyrmq.remoting.message import decode_message

TOPIC = "ReviveT"
GROUP = "GREVIVE"


async def wait_for(predicate, what: str, timeout: float = 30.0) -> None:
    with trio.move_on_after(timeout):
        while not predicate():
            await trio.sleep(0.02)
        return
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def checkpoints(broker, revive_qid: int) -> list[dict]:
    """The ``ck`` records of a revive queue, oldest first."""
    store = broker.ctx.store
    cq = store.consume_queues.get(broker.pop_service.revive_topic, revive_qid)
    out = []
    for offset in range(cq.min_offset, cq.max_offset):
        unit = cq.get_unit(offset)
        msg = decode_message(store.look_message_bytes_by_offset(unit[0], unit[1]))[0]
        if msg.properties.get("TAGS") == CK_TAG:
            out.append(json.loads(msg.body))
    return out


async def test_a_refused_revive_is_tried_again_later_each_time_and_comes_back_once_possible(start_pop_broker, caplog):
    b = await start_pop_broker({"broker.reviveQueueNum": 1})
    revive = b.pop_service.revive
    revive.reput_intervals_s = (1, 2, 4)  # 5.5.0's 10 s, 20 s, 30 s, ... shortened for the test
    await b.topic(TOPIC, 1)
    c = b.consumer(GROUP, TOPIC)
    await b.send(TOPIC, ["stuck"])
    popped = (await c.pop(1, invisible=500)).messages[0]
    b.ctx.store.set_read_only("test: the disk refuses writes")
    caplog.set_level(logging.WARNING, logger="pyrmq.pop")
    await wait_for(lambda: revive.put_back_count >= 3, "three refused revives")
    (ck,) = b.pop_service.ledger.open.values()
    # each try waits longer than the one before: due + 1 s, + 2 s, + 4 s (not once a second forever)
    assert ck.re_put == 3 and ck.due >= popped.handle.pop_time + 500 + (1 + 2 + 4) * 1000
    warnings = [r.getMessage() for r in caplog.records if "not done" in r.getMessage()]
    assert len(warnings) == 3 and "SERVICE_NOT_AVAILABLE" in warnings[0] and "try 4 in 4 s" in warnings[-1]

    b.ctx.store.set_read_only(None)
    back = await c.pop(1, invisible=60_000, poll=30_000)
    assert back.keys == ["stuck"] and back.messages[0].message.reconsume_times == 1
    assert revive.put_back_count == 3


async def test_a_re_put_checkpoint_keeps_its_pace_across_a_restart(start_pop_broker, tmp_path):
    settings = {"broker.storePathRootDir": str(tmp_path / "reput-store"), "broker.reviveQueueNum": 1}
    a = await start_pop_broker(settings)
    a.pop_service.revive.reput_intervals_s = (3600,)
    await a.topic(TOPIC, 1)
    c = a.consumer(GROUP, TOPIC)
    # a message whose properties fill the store's limit but for a few bytes: its retry copy (which adds
    # 1ST_POP_TIME and ORIGIN_GROUP) is refused PROPERTIES_SIZE_EXCEEDED, while the checkpoints are written
    (probe,) = await a.send(TOPIC, ["probe"])
    base = stored_properties_length(a, probe)
    await a.send(TOPIC, ["later"], properties={"pad": "x" * (32767 - 10 - base - len("pad\x01\x02"))})
    popped = (await c.pop(2, invisible=200)).messages
    assert [m.key for m in popped] == ["probe", "later"]
    assert (await c.ack(popped[0])).code == ResponseCode.SUCCESS
    await wait_for(lambda: a.pop_service.revive.put_back_count >= 1, "a refused revive")
    cks = checkpoints(a, 0)
    assert cks[-1]["rp"] == "1" and cks[-1]["it"] >= 200 + 3600 * 1000
    a.kernel.request_stop()
    await wait_for(lambda: a.kernel.nursery is None, "the broker stopped")

    b = await start_pop_broker(settings)
    b.pop_service.ensure_ready()
    (ck,) = b.pop_service.ledger.open.values()
    assert ck.re_put == 1 and ck.invisible_time >= 3600 * 1000  # not revived again at once after the restart


def stored_properties_length(broker, offset: int) -> int:
    store = broker.ctx.store
    unit = store.consume_queues.get(TOPIC, 0).get_unit(offset)
    msg = decode_message(store.look_message_bytes_by_offset(unit[0], unit[1]))[0]
    return len(msg.properties_bytes)


async def test_a_group_whose_retry_topic_would_be_over_127_bytes_is_refused_at_the_pop(pop_broker):
    b = pop_broker
    topic, group = "T" * 60, "G" * 60  # %RETRY% + 60 + _ + 60 = 128 bytes
    await b.topic(topic, 1)
    await b.send(topic, ["m0"])
    refused = await b.consumer(group, topic).pop(1, invisible=60_000)
    assert refused.code == ResponseCode.INVALID_PARAMETER and refused.messages == []
    assert f"%RETRY%{group}_{topic} of consumer group {group}" in refused.response.remark
    assert "128 bytes, longer than 127" in refused.response.remark
    assert not b.pop_service.ledger.open  # nothing handed out
    shorter = await b.consumer(group[:59], topic).pop(1, invisible=60_000)
    assert shorter.keys == ["m0"]
    # a FIFO group never uses its retry topic: its pops are served
    await b.group(group, consumeMessageOrderly=True)
    assert (await b.consumer(group, topic).pop(1, invisible=60_000)).keys == ["m0"]
