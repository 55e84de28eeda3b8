"""POP's wire pieces (remoting/pop.py) against what RocketMQ 5.5.0 sends and accepts: receipt handles, info strings,
the batch-ack body a 5.5.0 client sent (pop-design notes, captured), retry-topic names."""

from __future__ import annotations

import json

import pytest

from pyrmq.remoting.pop import (
    BatchAck,
    PopMessageRequestHeader,
    PopWireError,
    ReceiptHandle,
    batch_acks,
    build_extra_info,
    decode_batch_ack_body,
    decode_bitset,
    encode_batch_ack_body,
    encode_bitset,
    is_pop_retry_topic_v2,
    parse_msg_offset_info,
    parse_order_count_info,
    parse_start_offset_info,
    pop_retry_topic,
    real_topic,
    receipt_handle,
    retry_flag,
)


def test_a_receipt_handle_reads_and_writes_5x_extra_info():
    text = "0 1795791958848 10000 0 0 broker-a 0 2"
    handle = ReceiptHandle.parse(text)
    assert handle == ReceiptHandle(0, 1795791958848, 10000, 0, "0", "broker-a", 0, 2)
    assert handle.encode() == text and handle.next_visible_time == 1795791968848 and not handle.is_order
    proxy = ReceiptHandle.parse(text + " 4096")  # the gRPC proxy's handle: + the commit-log offset
    assert proxy.commit_log_offset == 4096 and proxy.encode() == text + " 4096"
    assert ReceiptHandle.parse("0 1 3000 999 0 broker-a 0 0").is_order
    assert build_extra_info(3, 5, 10, 1, "%RETRY%G_T", "b", 0, 7) == "3 5 10 1 1 b 0 7"


@pytest.mark.parametrize("text, message", [
    ("", "receipt handle is empty"),
    ("1 2 3", "receipt handle '1 2 3' has 3 fields: expected 8"),
    ("a 1 1 1 0 b 0 0", "field 1 (ckQueueOffset) is not a number: 'a'"),
    ("0 1 1 1 0 b 0 0 z", "field 9 (commitLogOffset) is not a number: 'z'"),
    ("0 1 1 1 3 b 0 0", "field 5 (retryFlag) is '3', not 0, 1 or 2"),
    # Java's Long.valueOf / Integer.valueOf, not Python's int(): no underscores, no blanks, within range
    ("1_0 1 1 1 0 b 0 0", "field 1 (ckQueueOffset) is not a number: '1_0'"),
    ("0 1 1 1 0 b 0 ０_", "field 8 (queueOffset) is not a number"),
    ("0 1 1 2147483648 0 b 0 0", "field 4 (reviveQid) is out of range of a Java int: '2147483648'"),
    ("0 1 1 1 0 b 0 9223372036854775808", "field 8 (queueOffset) is out of range of a Java long"),
])
def test_a_bad_receipt_handle_names_the_field(text, message):
    with pytest.raises(PopWireError) as failure:
        ReceiptHandle.parse(text)
    assert message in str(failure.value) and failure.value.field == "extraInfo"


def test_retry_topics_and_flags():
    assert pop_retry_topic("T", "G") == "%RETRY%G_T" and pop_retry_topic("T", "G", v2=True) == "%RETRY%G+T"
    assert [retry_flag(t) for t in ("T", "%RETRY%G_T", "%RETRY%G+T", "%RETRY%G")] == ["0", "1", "2", "1"]
    assert is_pop_retry_topic_v2("%RETRY%G+T") and not is_pop_retry_topic_v2("%RETRY%G_T")
    assert [real_topic("T", "G", f) for f in "012"] == ["T", "%RETRY%G_T", "%RETRY%G+T"]


def test_info_strings_as_a_5_5_0_answer_carries_them():
    assert parse_start_offset_info("1 0 0;0 0 0") == {"1@0": 0, "0@0": 0}
    assert parse_msg_offset_info("0 0 0,1,2;1 0 5") == {"0@0": [0, 1, 2], "1@0": [5]}
    assert parse_order_count_info("0 qo0%0 1;0 qo0%1 1;0 0 1") == {"0@qo0%0": 1, "0@qo0%1": 1, "0@0": 1}
    assert parse_start_offset_info("") == {} and parse_start_offset_info(None) == {}
    with pytest.raises(PopWireError, match="'1_0' is not a number"):
        parse_start_offset_info("0 0 1_0")
    with pytest.raises(PopWireError, match="appears twice"):
        parse_start_offset_info("0 0 1;0 0 2")
    with pytest.raises(PopWireError, match="not '<retryFlag> <queueId> <value>'"):
        parse_msg_offset_info("0 0")
    handle = receipt_handle(topic="T", queue_id=0, queue_offset=2, pop_ck=None, start_offsets={"0@0": 0},
                            pop_time=5, invisible_time=10, revive_qid=3, broker_name="b")
    assert handle.encode() == "0 5 10 3 0 b 0 2"
    with pytest.raises(PopWireError, match="no entry 0@1"):
        receipt_handle(topic="T", queue_id=1, queue_offset=2, pop_ck=None, start_offsets={"0@0": 0}, pop_time=5,
                       invisible_time=10, revive_qid=3, broker_name="b")


def test_bit_sets_as_java_writes_them():
    # java.util.BitSet.toByteArray: little-endian, no trailing zero bytes; fastjson writes byte[] as base64
    assert encode_bitset([0]) == "AQ==" and encode_bitset([0, 8]) == "AQE=" and encode_bitset([]) == ""
    assert decode_bitset("AQ==") == [0] and decode_bitset("AQE=") == [0, 8] and decode_bitset("gA==") == [7]


def test_the_batch_ack_body_a_5_5_0_client_sent():
    body = (b'{"acks":[{"b":"AQ==","c":"GPOP","it":10000,"pt":1795791961506,"q":0,"r":"0","rq":4,"so":3,"t":"PopT"}],'
            b'"brokerName":"broker-a"}')
    acks, broker_name = decode_batch_ack_body(body)
    assert broker_name == "broker-a"
    assert acks == [BatchAck("GPOP", "PopT", "0", 3, 0, 4, 1795791961506, 10000, (3,))]
    assert json.loads(encode_batch_ack_body(acks, "broker-a")) == json.loads(body)


def test_batch_acks_group_handles_by_checkpoint():
    handles = [ReceiptHandle.parse(t) for t in ("3 100 10000 4 0 b 0 3", "3 100 10000 4 0 b 0 5", "0 100 10000 4 1 b 0 9")]
    acks = batch_acks("PopT", "G", handles)
    assert sorted((a.retry, a.start_offset, a.offsets) for a in acks) == [("0", 3, (3, 5)), ("1", 0, (9,))]
    assert decode_bitset(acks[0].to_json()["b"]) == [0, 2]


def test_a_pop_header_round_trip():
    header = PopMessageRequestHeader("G", "T", -1, 32, 60_000, 15_000, 1, 0, order=True, attempt_id="a")
    fields = header.to_ext_fields()
    assert fields["order"] == "true" and fields["queueId"] == "-1" and "exp" not in fields
    assert PopMessageRequestHeader.from_ext_fields(fields) == header
