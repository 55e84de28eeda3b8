"""The pipelined pull of a queue range, against an in-process broker whose per-pull cap cuts answers short.

Records of uneven sizes against a small byte cap make answers stop short of the speculative next offsets: the
reader must still hand out every offset of the range once, in order. No Spark here.
"""

from __future__ import annotations

import random

import trio

from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.headers import CreateTopicRequestHeader, SendMessageRequestHeader
from pyrmq.client import BlockingPullConsumer, MessageQueue
from pyrmq.spark_plugin.records import Columns
from pyrmq.store.format import encode_properties


async def _fill(client, addr: str, topic: str, n: int) -> list[bytes]:
    header = CreateTopicRequestHeader(topic=topic, default_topic="TBW102", read_queue_nums=1, write_queue_nums=1, perm=6, topic_filter_type="SINGLE_TAG")
    assert (await client.invoke(addr, RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, header.to_ext_fields()))).code == 0
    rng = random.Random(7)
    bodies = []
    for i in range(n):
        body = bytes([i % 251]) * rng.randrange(10, 3000)
        props = encode_properties({"TAGS": "even" if i % 2 == 0 else "odd"})
        h = SendMessageRequestHeader(
            producer_group="p", topic=topic, default_topic="TBW102", default_topic_queue_nums=1, queue_id=0,
            sys_flag=0, born_timestamp=0, flag=0, properties=props,
        )
        resp = await client.invoke(addr, RemotingCommand.request(RequestCode.SEND_MESSAGE, h.to_ext_fields(), body))
        assert resp.code == ResponseCode.SUCCESS
        bodies.append(body)
    return bodies


def _read(namesrv: str, topic: str, start: int, end: int, subscription: str = "*") -> list[tuple[int, bytes]]:
    out = []
    with BlockingPullConsumer(namesrv, "pipeline-test") as consumer:
        for batch in consumer.pull_range(MessageQueue(topic, "broker-a", 0), start, end, expression=subscription, window=4):
            cols = Columns(topic, "broker-a", 0)
            cols.add_all(batch.body, batch.start, batch.end)
            out.extend((h[5], b) for h, b in zip(cols.headers, cols.bodies))
    return out


async def test_pipelined_pull_hands_out_every_offset_once_in_order(start_role, remoting_client) -> None:
    kernel = await start_role(
        "dev", {"broker.maxTransferCountOnMessageInMemory": 40, "broker.maxTransferBytesOnMessageInMemory": 20_000}
    )
    addr = kernel.listening["broker"]
    namesrv = kernel.listening["namesrv"]
    bodies = await _fill(remoting_client, addr, "PIPE", 400)

    got = await trio.to_thread.run_sync(_read, namesrv, "PIPE", 0, 400)
    assert [o for o, _ in got] == list(range(400))
    assert [b for _, b in got] == bodies

    middle = await trio.to_thread.run_sync(_read, namesrv, "PIPE", 123, 321)
    assert [o for o, _ in middle] == list(range(123, 321))

    # a filtered read: the broker answers with the entries it scanned; only matching offsets come back
    odd = await trio.to_thread.run_sync(_read, namesrv, "PIPE", 0, 400, "odd")
    assert [o for o, _ in odd] == list(range(1, 400, 2))
