from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyrmq.remoting import headers as H
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.errors import HeaderError

from .conftest import load_captures

CAPTURES = {name: RemotingCommand.decode(frame) for name, frame, _ in load_captures("alions-")}

V1 = {
    "producerGroup": "pg", "topic": "T", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4", "queueId": "-1",
    "sysFlag": "0", "bornTimestamp": "1700000000000", "flag": "0", "properties": "TAGS\x01a\x02",
    "reconsumeTimes": "0", "unitMode": "false", "maxReconsumeTimes": "16", "bname": "broker-a",
}


def test_send_v2_capture_from_ali_ons():
    h = H.SendMessageRequestHeader.from_ext_fields(CAPTURES["alions-fake-code310-0"].ext_fields)
    assert (h.producer_group, h.topic, h.default_topic) == ("PID-g1", "TopicTest", "TBW102")
    assert (h.default_topic_queue_nums, h.queue_id, h.sys_flag, h.flag) == (4, 3, 0, 0)
    assert h.born_timestamp == 1795266214710 and h.reconsume_times == 0
    assert h.unit_mode is False and h.batch is False and h.max_reconsume_times is None
    assert h.properties == "TAGS\x01TagA\x02KEYS\x01k1\x02"


def test_send_v1_and_v2_spellings_are_the_same_header():
    v1 = H.SendMessageRequestHeader.from_ext_fields(V1)
    v2 = H.SendMessageRequestHeader.from_ext_fields(v1.to_ext_fields_v2())
    assert v1 == v2
    assert v1.to_ext_fields() == {**V1, "batch": "false"}  # Java writes its primitive booleans too
    assert v1.to_ext_fields_v2()["a"] == "pg" and v1.to_ext_fields_v2()["n"] == "broker-a"
    assert v1.queue_id == -1 and v1.max_reconsume_times == 16 and v1.bname == "broker-a"


def test_raw_json_scalars_are_accepted():
    ext = {"a": "pg", "b": "T", "c": "TBW102", "d": 4, "e": 1, "f": 0, "g": 1700000000000, "h": 0,
           "k": True, "m": "TRUE"}
    h = H.SendMessageRequestHeader.from_ext_fields(ext)
    assert h.default_topic_queue_nums == 4 and h.unit_mode is True and h.batch is True


def test_unknown_keys_ignored_and_output_is_text():
    h = H.PullMessageRequestHeader.from_ext_fields(
        {**CAPTURES["alions-fake-code11-0"].ext_fields, "bname": "b", "AccessKey": "x", "Signature": "y"})
    assert (h.queue_id, h.max_msg_nums, h.sys_flag, h.suspend_timeout_millis) == (0, 32, 6, 15000)
    assert h.subscription == "TagA" and h.sub_version == 1795266215969 and h.bname == "b"
    out = h.to_ext_fields()
    assert all(type(v) is str for v in out.values())
    assert "AccessKey" not in out and "expressionType" not in out


def test_missing_required_field():
    with pytest.raises(HeaderError, match="queueId") as info:
        H.QueryConsumerOffsetRequestHeader.from_ext_fields({"topic": "T", "consumerGroup": "g"})
    assert info.value.field == "queueId"


def test_bad_number():
    with pytest.raises(HeaderError, match="not a number"):
        H.QueryConsumerOffsetRequestHeader.from_ext_fields({"topic": "T", "consumerGroup": "g", "queueId": "x"})


def test_boolean_rule_is_javas():
    for text, expected in (("true", True), ("TRUE", True), ("True", True), ("false", False), ("1", False),
                           ("yes", False)):
        assert H.GetRouteInfoRequestHeader.from_ext_fields(
            {"topic": "T", "acceptStandardJsonOnly": text}).accept_standard_json_only is expected
    assert H.GetRouteInfoRequestHeader.from_ext_fields({"topic": "T"}).accept_standard_json_only is False


def test_irregular_wire_names():
    h = H.UnregisterClientRequestHeader.from_ext_fields(CAPTURES["alions-fake-code35-0"].ext_fields)
    assert h.client_id == "192.0.2.2@18930" and h.producer_group == "PID-g1" and h.consumer_group is None
    assert h.to_ext_fields() == {"clientID": "192.0.2.2@18930", "producerGroup": "PID-g1"}
    assert H.RegisterBrokerRequestHeader.WIRE_NAMES["body_crc32"] == "bodyCrc32"


def test_pull_response_header_carries_all_four_fields():
    h = H.PullMessageResponseHeader(suggest_which_broker_id=0, next_begin_offset=1, min_offset=0, max_offset=1)
    assert h.to_ext_fields() == {"suggestWhichBrokerId": "0", "nextBeginOffset": "1", "minOffset": "0",
                                 "maxOffset": "1"}


@pytest.mark.parametrize("cls", [getattr(H, n) for n in H.__all__ if n.endswith("Header")])
def test_every_header_roundtrips(cls):
    import attrs

    values = {}
    for f in attrs.fields(cls):
        kind = H._field_kind(f)
        values[f.name] = {"str": "v\u00e9", "int": -42, "Int": -7, "bool": True}[kind]
    h = cls(**values)
    assert cls.from_ext_fields(h.to_ext_fields()) == h
    if hasattr(cls, "to_ext_fields_v2"):
        assert cls.from_ext_fields(h.to_ext_fields_v2()) == h


@given(st.integers(-(2**63), 2**63 - 1), st.integers(-(2**31), 2**31 - 1))
def test_offsets_roundtrip(offset, queue_id):
    h = H.UpdateConsumerOffsetRequestHeader("g", "T", queue_id, offset)
    assert H.UpdateConsumerOffsetRequestHeader.from_ext_fields(h.to_ext_fields()) == h
