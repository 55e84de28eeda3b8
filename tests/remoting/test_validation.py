"""remoting/validation.py: RocketMQ's topic rules and Java's number rules, and the header classes reading by them."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyrmq.remoting import headers as H
from pyrmq.remoting.errors import HeaderError
from pyrmq.remoting.validation import (
    INT_MAX,
    INT_MIN,
    LONG_MAX,
    LONG_MIN,
    NOT_ALLOWED_SEND_TOPICS,
    SYSTEM_TOPICS,
    JavaNumberError,
    body_problem,
    broker_system_topics,
    is_system_topic,
    java_int,
    java_long,
    not_allowed_send_problem,
    system_topic_problem,
    topic_problem,
)


@pytest.mark.parametrize("text, value", [
    ("0", 0), ("7", 7), ("-1", -1), ("+5", 5), ("-0", 0), ("007", 7), ("2147483647", INT_MAX),
    ("-2147483648", INT_MIN), ("0000000000000000000001", 1), ("\u0661\u0662", 12),  # Arabic-Indic digits, as Java
])
def test_java_int_takes_what_integer_parse_int_takes(text, value):
    assert java_int(text) == value


@pytest.mark.parametrize("text, reason", [
    (" 1", "is not a number"), ("1 ", "is not a number"), ("1_0", "is not a number"), ("", "is not a number"),
    ("-", "is not a number"), ("+", "is not a number"), ("+-1", "is not a number"), ("0x10", "is not a number"),
    ("1.0", "is not a number"), ("1e3", "is not a number"), ("\u00b2", "is not a number"),  # a superscript two
    ("2147483648", "is out of range of a Java int"), ("-2147483649", "is out of range of a Java int"),
    ("9" * 5000, "is out of range of a Java int"), (True, "is not a number"), (None, "is not a number"),
    (1.0, "is not a number"), (2**31, "is out of range of a Java int"),
])
def test_java_int_refuses_what_integer_parse_int_refuses(text, reason):
    with pytest.raises(JavaNumberError) as caught:
        java_int(text)
    assert caught.value.reason == reason


def test_java_long_range():
    assert java_long("9223372036854775807") == LONG_MAX and java_long("-9223372036854775808") == LONG_MIN
    assert java_long("1700000000000") == 1700000000000
    for text in ("9223372036854775808", "-9223372036854775809"):
        with pytest.raises(JavaNumberError, match="out of range of a Java long"):
            java_long(text)


_JAVA_INT = re.compile(r"[+-]?\d+")  # \d: Unicode decimal digits, as Java's Character.digit(c, 10)


@given(st.text(alphabet=st.sampled_from("0123456789+-_ .\t\u0661x"), max_size=12) | st.integers().map(str))
def test_java_int_agrees_with_a_reference_of_javas_rules(text):
    valid = bool(_JAVA_INT.fullmatch(text)) and INT_MIN <= int(text) <= INT_MAX
    try:
        value = java_int(text)
    except JavaNumberError:
        assert not valid
    else:
        assert valid and value == int(text)


@pytest.mark.parametrize("topic, problem", [
    ("", "The specified topic is blank."),
    ("   ", "The specified topic is blank."),
    ("\t", "The specified topic is blank."),
    ("\u00a0", "The specified topic[\u00a0] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"),
    ("a b", "The specified topic[a b] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"),
    ("T\ud800", "The specified topic[T\ud800] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"),
    ("x" * 128, "The specified topic is longer than topic max length 127."),
    ("x" * 127, None), ("%RETRY%g|a-b_C9", None),
])
def test_topic_problem_in_rocketmqs_words(topic, problem):
    assert topic_problem(topic) == problem


def test_system_topics_are_rocketmqs():
    assert SYSTEM_TOPICS == {"TBW102", "SCHEDULE_TOPIC_XXXX", "BenchmarkTest", "RMQ_SYS_TRANS_HALF_TOPIC",
                             "RMQ_SYS_TRACE_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC",
                             "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT"}
    assert NOT_ALLOWED_SEND_TOPICS == {"SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC",
                                       "TRANS_CHECK_MAX_TIME_TOPIC", "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT"}
    assert is_system_topic("rmq_sys_wheel_timer") and is_system_topic("rmq_sys_REVIVE_LOG_c")
    assert not is_system_topic("RMQ_SYS_OTHER") and not is_system_topic("%RETRY%g") and not is_system_topic("Orders")
    mine = broker_system_topics("C1", "b1", "RMQ_SYS_TRACE_TOPIC")
    assert mine == {"C1", "b1", "C1_REPLY_TOPIC", "RMQ_SYS_TRACE_TOPIC"}
    assert is_system_topic("C1_REPLY_TOPIC", mine) and not is_system_topic("C1_REPLY_TOPIC")
    assert system_topic_problem("b1", mine) == "The topic[b1] is conflict with system topic."
    assert system_topic_problem("Orders", mine) is None
    assert not_allowed_send_problem("OFFSET_MOVED_EVENT") == "Sending message to topic[OFFSET_MOVED_EVENT] is forbidden."
    assert not_allowed_send_problem("TBW102") is None


@pytest.mark.parametrize("fields, remark", [
    ({"queueId": " 1"}, "the custom field <queueId> is not a number: ' 1'"),
    ({"queueId": "1_0"}, "the custom field <queueId> is not a number: '1_0'"),
    ({"queueId": "2147483648"}, "the custom field <queueId> is out of range of a Java int: '2147483648'"),
    ({"offset": "0_0"}, "the custom field <offset> is not a number: '0_0'"),
    ({"offset": "9223372036854775808"}, "the custom field <offset> is out of range of a Java long: '9223372036854775808'"),
])
def test_header_numbers_follow_javas_rules_and_name_the_field(fields, remark):
    ext = {"consumerGroup": "g", "topic": "T", "queueId": "1", "offset": "5"} | fields
    with pytest.raises(HeaderError) as caught:
        H.QueryConsumerOffsetRequestHeader.from_ext_fields(ext) if "offset" not in fields else \
            H.ViewMessageRequestHeader.from_ext_fields(ext)
    assert str(caught.value) == remark and caught.value.field == next(iter(fields))


def test_header_numbers_java_takes():
    h = H.PullMessageRequestHeader.from_ext_fields({
        "consumerGroup": "g", "topic": "T", "queueId": "+1", "queueOffset": "9223372036854775807", "maxMsgNums": "-1",
        "sysFlag": "\u0664", "commitOffset": "-0", "suspendTimeoutMillis": "0", "subVersion": "1700000000000"})
    assert (h.queue_id, h.queue_offset, h.max_msg_nums, h.sys_flag, h.commit_offset) == (1, LONG_MAX, -1, 4, 0)


def test_a_v2_send_header_missing_its_producer_group_names_the_v2_key():
    """Either of the first two V2 keys makes the header V2, so a missing one is named as the client spelled it."""
    ext = {"b": "T", "e": "1", "f": "0", "g": "1", "h": "0"}
    h = H.SendMessageRequestHeader.from_ext_fields(ext)
    assert (h.topic, h.producer_group, h.default_topic, h.default_topic_queue_nums) == ("T", None, None, None)
    with pytest.raises(HeaderError, match="<e> is null"):
        H.SendMessageRequestHeader.from_ext_fields({k: v for k, v in ext.items() if k != "e"})


@pytest.mark.parametrize("exc, text", [
    (KeyError("groupName"), "the member 'groupName' is missing"),
    (ValueError("Expecting value: line 1 column 1 (char 0)"), "Expecting value: line 1 column 1 (char 0)"),
    (TypeError("string indices must be integers"), "a member has the wrong kind of value (string indices must be integers)"),
    (ValueError(), "it does not decode"),
])
def test_body_problem_names_no_exception_class(exc, text):
    assert body_problem(exc) == text
