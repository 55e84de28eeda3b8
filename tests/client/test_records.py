"""Records, ids, validation, batch splitting, selectors and the latency fault tolerance, without a broker."""

from __future__ import annotations

import re

import pytest

from pyrmq.client import InvalidMessageError, Message, MessageQueue, Producer
from pyrmq.client.fault import FaultStrategy
from pyrmq.client.ids import UniqIdGenerator
from pyrmq.client.message import decode_messages, encode_properties, parse_properties
from pyrmq.client.producer import validate_message
from pyrmq.client.route import PublishInfo, TopicRoute
from pyrmq.client.selectors import java_hash_code, select_by_hash
from pyrmq.store.format import COMPRESSED_FLAG, decode_batch_body, encode_record


def test_properties_round_trip_like_java():
    text = encode_properties({"KEYS": "a b", "TAGS": "t", "none": None, "x": "1"})
    assert text == "KEYS\x01a b\x02TAGS\x01t\x02x\x011"
    assert parse_properties(text + "\x02bad\x02\x01v\x02k\x01") == {"KEYS": "a b", "TAGS": "t", "x": "1"}


def test_uniq_key_layout():
    gen = UniqIdGenerator("10.1.2.3")
    a, b = gen.next(), gen.next()
    assert re.fullmatch(r"[0-9A-F]{32}", a) and a != b
    assert a.startswith("0A010203")  # client IP first (spec 5.10)
    assert a[:20] == b[:20]  # ip + pid + per-process hash are fixed
    assert (int(b[-4:], 16) - int(a[-4:], 16)) % 65536 == 1  # the counter


def test_uniq_keys_of_a_batch_count_on_and_wrap():
    gen = UniqIdGenerator("10.1.2.3")
    gen._counter = 0xFFFF - 3  # four ids before the 16-bit counter wraps
    before = gen.next()
    many = gen.next_many(10)
    after = gen.next()
    assert all(re.fullmatch(r"[0-9A-F]{32}", k) and k.startswith("0A010203") for k in many)
    counters = [int(k[-4:], 16) for k in [before, *many, after]]
    assert counters == [0xFFFD, 0xFFFE, 0xFFFF, 0, 1, 2, 3, 4, 5, 6, 7, 8]
    assert gen.next_many(0) == [] and len(set(gen.next_many(300))) == 300


def test_decode_messages_inflates_compressed_bodies_and_reads_every_field():
    import zlib

    body = b"z" * 10000
    raw = encode_record(
        queue_id=3, flag=7, queue_offset=42, commit_log_offset=1000, sys_flag=COMPRESSED_FLAG, born_timestamp=5,
        born_host=("10.0.0.1", 1234), store_timestamp=6, store_host=("127.0.0.1", 10911), reconsume_times=2,
        prepared_transaction_offset=0, body=zlib.compress(body), topic=b"T", properties=encode_properties(
            {"TAGS": "A", "KEYS": "k1 k2", "UNIQ_KEY": "U1"}).encode(),
    )
    (m,) = decode_messages(raw + b"", "broker-a")
    assert m.body == body and m.topic == "T" and m.queue_id == 3 and m.queue_offset == 42 and m.flag == 7
    assert m.tags == "A" and m.keys == ("k1", "k2") and m.msg_id == "U1" and m.reconsume_times == 2
    assert m.born_host == ("10.0.0.1", 1234) and m.store_host == ("127.0.0.1", 10911)
    assert m.offset_msg_id == "7F00000100002A9F00000000000003E8"
    assert m.message_queue == MessageQueue("T", "broker-a", 3)


def test_decode_messages_reads_each_records_topic_when_topics_change_within_a_body():
    # a query's answer mixes topics; one topic may be another's prefix, or as long with another first byte
    topics = [b"T", b"T", b"Topic", b"T", b"Uopic", b"Uopic", b"", b"T" * 127, b"T"]
    raw = b"".join(
        encode_record(
            queue_id=0, flag=0, queue_offset=i, commit_log_offset=100 * i, sys_flag=0x30 if i == 3 else 0,
            born_timestamp=1, born_host=("::1", 1) if i == 3 else ("10.0.0.1", 1), store_timestamp=2,
            store_host=("::1", 2) if i == 3 else ("127.0.0.1", 2), reconsume_times=0, prepared_transaction_offset=0,
            body=b"b%d" % i, topic=topic, properties=b"",
        )
        for i, topic in enumerate(topics)
    )
    msgs = decode_messages(raw, "broker-a")
    assert [(m.topic, m.queue_offset, m.body) for m in msgs] == [
        (t.decode(), i, b"b%d" % i) for i, t in enumerate(topics)]
    assert msgs[3].store_host == ("::1", 2)


@pytest.mark.parametrize(
    "message,match",
    [
        (Message("bad topic!", b"x"), "characters outside"),
        (Message("", b"x"), "blank"),
        (Message("T" * 128, b"x"), "longer than 127"),
        (Message("SCHEDULE_TOPIC_XXXX", b"x"), "system topic"),
        (Message("T", b""), "body is empty"),
        (Message("T", b"x", properties={"TAGS": "no"}), "reserved"),
        (Message("T", b"x", keys=["a b"]), "contains a space"),
        (Message("T", b"x", delay_time_level=-1), "delay_time_level"),
    ],
)
def test_validation_says_what_is_wrong(message, match):
    with pytest.raises(InvalidMessageError, match=match):
        validate_message(message)


def test_oversized_body_is_refused():
    with pytest.raises(InvalidMessageError, match="over the maximum of 4194304"):
        validate_message(Message("T", b"x" * (4 * 1024 * 1024 + 1)))


def test_batches_split_to_respect_4_mib():
    producer = Producer("127.0.0.1:1", "g")
    msgs = [Message("T", b"x" * (1024 * 1024), keys=f"k{i}") for i in range(9)]
    chunks = producer.split_batch(msgs)
    assert [len(c) for c in chunks] == [3, 3, 3]
    assert [m for c in chunks for m in c] == msgs
    for chunk in chunks:
        prepared = producer._prepare_batch(chunk)
        assert len(prepared.body) <= 4 * 1024 * 1024
        entries = decode_batch_body(prepared.body)
        assert [e.body for e in entries] == [m.body for m in chunk]
        assert prepared.uniq_key.count(",") == len(chunk) - 1
    small = producer.split_batch([Message("T", b"y" * 100) for _ in range(1000)])
    assert len(small) == 1
    with pytest.raises(InvalidMessageError, match="delayed"):
        producer._prepare_batch([Message("T", b"x", delay_time_level=2)])
    with pytest.raises(InvalidMessageError, match="one topic"):
        producer._prepare_batch([Message("A", b"x"), Message("B", b"x")])


def test_compression_from_4_kib():
    producer = Producer("127.0.0.1:1", "g")
    assert producer._prepare(Message("T", b"a" * 4095)).sys_flag == 0
    big = producer._prepare(Message("T", b"a" * 4096))
    assert big.sys_flag & COMPRESSED_FLAG and len(big.body) < 4096


def test_hash_selector_matches_java_hash_codes():
    assert java_hash_code("hello") == 99162322  # "hello".hashCode() in Java
    assert java_hash_code("Aa") == java_hash_code("BB") == 2112
    assert java_hash_code(17) == 17 and java_hash_code(-5) == -5  # Integer.hashCode
    assert java_hash_code(1 << 40) == 256  # Long.hashCode: (int) (v ^ (v >>> 32))
    mqs = [MessageQueue("T", "broker-a", i) for i in range(8)]
    assert select_by_hash(mqs, Message("T", b"x"), "Aa") == mqs[2112 % 8]
    assert select_by_hash(mqs, Message("T", b"x"), -13) == mqs[13 % 8]


def _publish_info(brokers=("broker-a", "broker-b"), queues=4) -> PublishInfo:
    return PublishInfo(TopicRoute.from_json("T", {
        "queueDatas": [{"brokerName": b, "readQueueNums": queues, "writeQueueNums": queues, "perm": 6} for b in brokers],
        "brokerDatas": [{"brokerName": b, "cluster": "c", "brokerAddrs": {"0": f"127.0.0.1:{i}"}} for i, b in enumerate(brokers)],
    }))


def test_fault_tolerance_backs_slow_and_failed_brokers_off_per_the_java_table():
    now = [0.0]
    strategy = FaultStrategy(clock=lambda: now[0])
    assert strategy.not_available_duration(549) == 0
    assert strategy.not_available_duration(550) == 30000
    assert strategy.not_available_duration(1000) == 60000
    assert strategy.not_available_duration(2000) == 120000
    assert strategy.not_available_duration(3000) == 180000
    assert strategy.not_available_duration(15000) == 600000
    info = _publish_info()
    strategy.update("broker-b", 600, isolation=False)  # slow: 30 s off
    picks = {strategy.select(info, None).broker_name for _ in range(20)}
    assert picks == {"broker-a"}
    now[0] = 30001
    assert {strategy.select(info, None).broker_name for _ in range(20)} == {"broker-a", "broker-b"}
    strategy.update("broker-a", 5, isolation=True)  # failed: isolated for 600 s
    now[0] += 599_000
    assert {strategy.select(info, None).broker_name for _ in range(20)} == {"broker-b"}
    strategy.update("broker-b", 5, isolation=True)  # everything down: the least bad one is still tried
    assert strategy.select(info, None).broker_name in {"broker-a", "broker-b"}


def test_round_robin_and_retry_on_another_broker():
    info = _publish_info()
    strategy = FaultStrategy(enabled=False)
    seen = [strategy.select(info, None) for _ in range(8)]
    assert sorted(seen) == sorted(info.queues)
    for _ in range(10):
        assert strategy.select(info, "broker-a").broker_name == "broker-b"


def test_tbw102_route_is_used_under_the_new_topic_with_at_most_4_queues():
    template = TopicRoute.from_json("TBW102", {
        "queueDatas": [{"brokerName": "broker-a", "readQueueNums": 8, "writeQueueNums": 8, "perm": 7}],
        "brokerDatas": [{"brokerName": "broker-a", "cluster": "c", "brokerAddrs": {0: "127.0.0.1:1"}}],
    })
    route = template.as_topic("NewTopic", 4)
    assert [mq.queue_id for mq in route.publish_queues()] == [0, 1, 2, 3]
    assert {mq.topic for mq in route.publish_queues()} == {"NewTopic"}


def test_message_accepts_text_bodies_and_key_lists():
    m = Message("T", "héllo", keys=["a", "b"], tags="t")
    assert m.body == "héllo".encode() and m.keys == ("a", "b")
    assert m.system_properties() == {"KEYS": "a b", "TAGS": "t"}
    assert Message("T", b"x", keys="k1 k2").keys == ("k1", "k2")
