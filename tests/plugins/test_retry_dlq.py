"""Retry and dead-letter (spec 7.6): CONSUMER_SEND_MSG_BACK, the client fallback, and the DLQ tools.

The 1 + 16 deliveries run the real send-back processor, topic and group managers and delay-level service over a
real store on the autojump clock; the wire tests run `pyrmq dev` in-process on real sockets in real time.
"""

from __future__ import annotations

import time

import attrs
import pytest
import trio

from pyrmq.client.dlq import list_dlq, resend_dlq
from pyrmq.plugins.broker.delay_levels import DelayLevelSettings
from pyrmq.plugins.broker.settings import BrokerSettings
from pyrmq.kernel.types import PutChain
from pyrmq.plugins.broker.groups import SubscriptionGroupManager
from pyrmq.plugins.broker.topics import TopicConfigManager
from pyrmq.plugins.broker.delay_levels import DelayLevelService
from pyrmq.plugins.broker.retry_dlq import DeadLetterInterceptor, SendBackProcessor
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.store import GetMessageStatus, MessageRecord, MessageStore, StoreConfig, decode_messages
from pyrmq.store.format import encode_properties

BASE_MS = 1_700_000_000_000
SHORT_LEVELS = " ".join(f"{i}s" for i in range(1, 19))  # level i = i seconds: intervals grow by one second


def virtual_clock() -> int:
    return BASE_MS + round(trio.current_time() * 1000)


def send_back(offset, group="g", delay_level=0, max_times=None, version=409):
    fields = {"offset": str(offset), "group": group, "delayLevel": str(delay_level), "originMsgId": "X",
              "originTopic": "T"}
    if max_times is not None:
        fields["maxReconsumeTimes"] = str(max_times)
    request = RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, fields)
    request.version = version
    return request


class Broker:
    """The real pieces the send-back processor works with, over one store on the virtual clock."""

    def __init__(self, root, **overrides) -> None:
        self.settings = BrokerSettings(**overrides)
        levels = DelayLevelSettings(messageDelayLevel=SHORT_LEVELS).delay_levels_ms
        config = StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=1 << 20,
                             mapped_file_size_consume_queue=20 * 1024, warm_mapped_file_enable=False)
        self.store = MessageStore(config, clock=virtual_clock)
        self.store.load()
        self.topics = TopicConfigManager(self.settings)
        self.groups = SubscriptionGroupManager(self.settings)
        self.delay = DelayLevelService(self.store, levels, str(root / "config"))
        chain = PutChain([DeadLetterInterceptor(self.topics, self.groups), self.delay])
        self.processor = SendBackProcessor(store=self.store, topics=self.topics, groups=self.groups,
                                           settings=self.settings, put_chain=chain)

    def read(self, topic, queue_id=0, offset=0):
        r = self.store.get_message("g", topic, queue_id, offset, 32)
        return decode_messages(r.body()) if r.status is GetMessageStatus.FOUND else []

    def close(self):
        self.delay.close()
        self.store.close()


@pytest.fixture
async def broker(nursery, tmp_path):
    b = Broker(tmp_path / "store")
    await nursery.start(b.delay.run)
    yield b
    b.close()


async def test_failing_every_time_is_delivered_1_plus_16_times_then_dead_lettered(broker, autojump_clock):
    original = MessageRecord("T", 0, b"payload", flag=3, born_timestamp=BASE_MS - 1, born_host=("10.1.1.1", 999),
                             properties={"TAGS": "tagA", "KEYS": "order-1", "UNIQ_KEY": "AC11000100002A9F0000000000000001",
                                         "color": "blue"})
    put = broker.store.put_message(original)
    origin_msg_id = broker.store.look_message_by_offset(put.append.wrote_offset).msg_id
    deliveries = [broker.read("T")[0]]
    seen = 0
    with trio.fail_after(3600):  # virtual time (autojump): the 16 retries are due within 3 + 4 + ... + 18 = 168 s
        while True:
            # the consumer fails every message at once and sends it back (delayLevel 0: the broker decides)
            code, remark = broker.processor.handle(send_back(deliveries[-1].commit_log_offset, max_times=16))
            assert (code, remark) == (ResponseCode.SUCCESS, None)
            if len(broker.read("%DLQ%g")):
                break
            while len(broker.read("%RETRY%g", 0, seen)) == 0:
                await trio.sleep(0.25)
            deliveries.append(broker.read("%RETRY%g", 0, seen)[0])
            seen += 1
    assert len(deliveries) == 1 + 16
    intervals = [b.store_timestamp - a.store_timestamp for a, b in zip(deliveries, deliveries[1:])]
    # reconsume count n comes back after level 3 + n (here 3 + n seconds), never earlier
    for n, interval in enumerate(intervals):
        assert 1000 * (3 + n) <= interval < 1000 * (3 + n) + 300, (n, interval)
    for n, retry in enumerate(deliveries[1:]):
        assert retry.topic == "%RETRY%g" and retry.reconsume_times == n + 1
        assert retry.properties["RETRY_TOPIC"] == "T"
        assert retry.properties["ORIGIN_MESSAGE_ID"] == origin_msg_id
        assert "DELAY" not in retry.properties
    [dead] = broker.read("%DLQ%g")
    assert dead.body == b"payload" and dead.flag == 3 and dead.reconsume_times == 17
    assert dead.born_timestamp == BASE_MS - 1 and dead.born_host == ("10.1.1.1", 999)
    props = dead.properties
    assert (props["TAGS"], props["KEYS"], props["UNIQ_KEY"], props["color"]) == (
        "tagA", "order-1", "AC11000100002A9F0000000000000001", "blue")
    assert props["RETRY_TOPIC"] == "T" and props["ORIGIN_MESSAGE_ID"] == origin_msg_id and "DELAY" not in props
    assert broker.topics.get("%DLQ%g").read_queue_nums == 1 and broker.topics.get("%DLQ%g").perm == 6
    assert broker.topics.get("%RETRY%g").perm == 6
    # no further delivery
    await trio.sleep(60)
    assert len(broker.read("%RETRY%g")) == 16 and len(broker.read("%DLQ%g")) == 1


async def test_send_back_rules(tmp_path, nursery, autojump_clock):
    b = Broker(tmp_path / "a", autoCreateSubscriptionGroup=False)
    await nursery.start(b.delay.run)
    offset = b.store.put_message(MessageRecord("T", 0, b"x", properties={"ORIGIN_MESSAGE_ID": "FIRST"})).append.wrote_offset
    code, remark = b.processor.handle(send_back(offset, group="nobody"))
    assert code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST and "nobody" in remark
    b.groups.update(attrs.evolve(b.groups.find_or_create("CID_RMQ_SYS_x"), group_name="g0", retry_queue_nums=0))
    assert b.processor.handle(send_back(offset, group="g0")) == (ResponseCode.SUCCESS, None)
    assert b.topics.get("%RETRY%g0") is None  # dropped
    b.groups.update(attrs.evolve(b.groups.find_or_create("CID_RMQ_SYS_x"), group_name="g", retry_max_times=2))
    code, remark = b.processor.handle(send_back(offset + 999_999))
    assert code == ResponseCode.SYSTEM_ERROR and "look message by offset failed" in remark
    code, remark = b.processor.handle(RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, {"group": "g"}))
    assert code == ResponseCode.SYSTEM_ERROR and "offset" in remark
    # explicit level 1 (1 s), the origin message id kept
    assert b.processor.handle(send_back(offset, delay_level=1))[0] == ResponseCode.SUCCESS
    await trio.sleep(1.01)
    [r] = b.read("%RETRY%g")
    assert r.properties["ORIGIN_MESSAGE_ID"] == "FIRST" and r.reconsume_times == 1
    # delayLevel -1: straight to the DLQ
    assert b.processor.handle(send_back(offset, delay_level=-1))[0] == ResponseCode.SUCCESS
    assert len(b.read("%DLQ%g")) == 1
    # the header's max counts only from request version 121 (V3_4_9) on; else the group's (2)
    again = b.store.put_message(MessageRecord("T", 0, b"y", reconsume_times=2)).append.wrote_offset
    assert b.processor.handle(send_back(again, max_times=5))[0] == ResponseCode.SUCCESS
    assert len(b.read("%DLQ%g")) == 1
    assert b.processor.handle(send_back(again, max_times=5, version=100))[0] == ResponseCode.SUCCESS
    assert len(b.read("%DLQ%g")) == 2
    b.close()
    c = Broker(tmp_path / "c", brokerPermission=4)
    code, remark = c.processor.handle(send_back(0))
    assert code == ResponseCode.NO_PERMISSION and "forbidden" in remark
    c.close()


# -- over the wire ------------------------------------------------------------------------------------------------


def _send(topic, body, props, *, queue_id=0, reconsume=None, max_reconsume=None):
    fields = {"a": "pg", "b": topic, "c": "TBW102", "d": 4, "e": queue_id, "f": 0, "g": int(time.time() * 1000),
              "h": 0, "i": encode_properties(props), "k": False}
    if reconsume is not None:
        fields["j"] = reconsume
    if max_reconsume is not None:
        fields["l"] = max_reconsume
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, fields, body)


def _pull(topic, queue_id=0, offset=0):
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, {
        "consumerGroup": "g", "topic": topic, "queueId": str(queue_id), "queueOffset": str(offset), "maxMsgNums": "32",
        "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0",
    })


async def _pull_until(client, addr, topic, count, offset=0):
    got = []
    with trio.fail_after(10):
        while len(got) < count:
            r = await client.invoke(addr, _pull(topic, 0, offset))
            if r.code == ResponseCode.SUCCESS:
                batch = decode_messages(r.body_bytes())
                got.extend(batch)
                offset = int(r.ext_fields["nextBeginOffset"])
            else:
                await trio.sleep(0.05)
    return got


async def test_send_back_fallback_and_dlq_tools_over_the_wire(start_role, remoting_client):
    kernel = await start_role("dev", {"broker.messageDelayLevel": "1s 1s 1s"})
    addr, namesrv = kernel.listening["broker"], kernel.listening["namesrv"]
    assert (await remoting_client.invoke(addr, _send("TW", b"first", {"KEYS": "k1", "UNIQ_KEY": "U1"}))).code == 0
    [m] = await _pull_until(remoting_client, addr, "TW", 1)
    # CONSUMER_SEND_MSG_BACK (36): back after level 3 (1 s here) in %RETRY%gw with RETRY_TOPIC
    r = await remoting_client.invoke(addr, send_back(m.commit_log_offset, group="gw"))
    assert (r.code, r.remark) == (ResponseCode.SUCCESS, None)
    [retry] = await _pull_until(remoting_client, addr, "%RETRY%gw", 1)
    assert retry.properties["RETRY_TOPIC"] == "TW" and retry.reconsume_times == 1
    assert retry.store_timestamp - m.store_timestamp >= 1000
    # the client fallback: a plain send to %RETRY%gw; at the maximum it lands in %DLQ%gw queue 0, undelayed
    props = {"KEYS": "k2", "UNIQ_KEY": "U2", "RETRY_TOPIC": "TW", "ORIGIN_MESSAGE_ID": "O2", "DELAY": "5",
             "RECONSUME_TIME": "16", "MAX_RECONSUME_TIMES": "16", "note": "kept"}
    r = await remoting_client.invoke(addr, _send("%RETRY%gw", b"second", props, reconsume=16, max_reconsume=16))
    assert r.code == ResponseCode.SUCCESS
    [dead] = await _pull_until(remoting_client, addr, "%DLQ%gw", 1)
    assert dead.body == b"second" and dead.queue_id == 0 and dead.properties["note"] == "kept"
    # below the maximum it is a normal (delayed) retry
    r = await remoting_client.invoke(addr, _send("%RETRY%gw", b"third", dict(props, DELAY="1"), reconsume=3, max_reconsume=16))
    assert r.code == ResponseCode.SUCCESS
    later = await _pull_until(remoting_client, addr, "%RETRY%gw", 1, offset=1)
    assert later[0].body == b"third"
    # a header maximum from a client older than V3_4_9 (121) is ignored: the group's 16 applies, so no DLQ
    old_client = _send("%RETRY%gw", b"fourth", dict(props, DELAY="1"), reconsume=3, max_reconsume=2)
    old_client.version = 100
    assert (await remoting_client.invoke(addr, old_client)).code == ResponseCode.SUCCESS
    assert (await _pull_until(remoting_client, addr, "%RETRY%gw", 1, offset=2))[0].body == b"fourth"
    # the DLQ tools, through the name server (the broker registers %DLQ%gw with it shortly)
    with trio.fail_after(10):
        while not (letters := await list_dlq(namesrv, "gw")):
            await trio.sleep(0.1)
    [letter] = letters
    assert (letter.body, letter.original_topic, letter.uniq_key, letter.origin_msg_id) == (b"second", "TW", "U2", "O2")
    assert letter.as_dict()["body"] == "second"
    assert await list_dlq(namesrv, "nothing-dead") == []
    assert await resend_dlq(namesrv, "gw", ["not-there"]) == 0
    assert await resend_dlq(namesrv, "gw", [letter.msg_id]) == 1
    resent = None
    with trio.fail_after(10):
        while resent is None:  # on any queue of TW (its route has 4)
            for q in range(4):
                r = await remoting_client.invoke(addr, _pull("TW", q, 1 if q == 0 else 0))
                if r.code == ResponseCode.SUCCESS:
                    [resent] = decode_messages(r.body_bytes())
    assert resent.body == b"second" and resent.reconsume_times == 0
    assert (resent.properties["KEYS"], resent.properties["UNIQ_KEY"], resent.properties["note"]) == ("k2", "U2", "kept")
    assert not {"RETRY_TOPIC", "DELAY", "RECONSUME_TIME", "MAX_RECONSUME_TIMES"} & set(resent.properties)
