"""What RocketMQ refuses on the wire, in one place: topic names and system topics (``TopicValidator``), and Java's
number rules (``Integer.parseInt`` / ``Long.parseLong``) for header fields and properties.

Every reader uses these: the broker's send (one-pass, general and batch paths), auto-creation and admin codes, the
custom-header classes (:mod:`pyrmq.remoting.headers`), the property readers of the put interceptors, the client's
checks before a send; the gRPC endpoint may too. The remarks are RocketMQ 4.9.7's words where it has them.

Topics (``TopicValidator`` 4.9.7):

* a valid name is not blank, only ``[%|a-zA-Z0-9_-]``, at most 127 characters (:func:`topic_problem`);
* :data:`SYSTEM_TOPICS` and any name starting with ``rmq_sys_`` are system topics (:func:`is_system_topic`; the
  broker adds its cluster name, its broker name and ``<cluster>_REPLY_TOPIC``, as Java's ``addSystemTopic``):
  UPDATE_AND_CREATE_TOPIC and DELETE_TOPIC_IN_BROKER refuse them;
* :data:`NOT_ALLOWED_SEND_TOPICS` take no message from a producer (NO_PERMISSION).

Numbers (``Integer.parseInt`` / ``Long.parseLong``): an optional ``+`` or ``-``, then one or more decimal digits
(Unicode decimal digits count, as Java's ``Character.digit``), nothing else (no blanks, no ``_``, no ``0x``), within
the 32- or 64-bit range. Python's ``int()`` takes blanks and underscores, so it is never used on wire text.
"""

from __future__ import annotations

from collections.abc import Collection

from .vocabulary import (
    AUTO_CREATE_TOPIC_KEY,
    BENCHMARK_TOPIC,
    OFFSET_MOVED_EVENT_TOPIC,
    REPLY_TOPIC_SUFFIX,
    SCHEDULE_TOPIC,
    SELF_TEST_TOPIC,
    SYSTEM_TOPIC_PREFIX,
    TRACE_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
)

__all__ = [
    "TOPIC_MAX_LENGTH",
    "SYSTEM_TOPICS",
    "NOT_ALLOWED_SEND_TOPICS",
    "SYSTEM_TOPIC_PREFIX",
    "topic_problem",
    "is_system_topic",
    "broker_system_topics",
    "system_topic_problem",
    "not_allowed_send_problem",
    "INT_MIN",
    "INT_MAX",
    "LONG_MIN",
    "LONG_MAX",
    "JavaNumberError",
    "java_int",
    "java_long",
    "java_number",
    "body_problem",
]

# ---- topics ---------------------------------------------------------------------------------------------------

TOPIC_MAX_LENGTH = 127

#: ``TopicValidator.SYSTEM_TOPIC_SET`` as 4.9.7 fills it statically (the trace topic under its default name)
SYSTEM_TOPICS: frozenset[str] = frozenset({
    AUTO_CREATE_TOPIC_KEY, SCHEDULE_TOPIC, BENCHMARK_TOPIC, TRANS_HALF_TOPIC, TRACE_TOPIC, TRANS_OP_HALF_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC, SELF_TEST_TOPIC, OFFSET_MOVED_EVENT_TOPIC,
})

#: ``TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET``: a producer's message to one of these is refused (NO_PERMISSION)
NOT_ALLOWED_SEND_TOPICS: frozenset[str] = frozenset({
    SCHEDULE_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC, SELF_TEST_TOPIC,
    OFFSET_MOVED_EVENT_TOPIC,
})

_VALID_CHARS = frozenset("%|-_0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
# Java's Character.isWhitespace: the Unicode separators but the no-break spaces, and the ASCII controls below
_JAVA_SPACE = frozenset("\t\n\u000b\f\r\u001c\u001d\u001e\u001f \u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
                        "\u2008\u2009\u200a\u2028\u2029\u205f\u3000")

BLANK_TOPIC = "The specified topic is blank."


def topic_problem(topic: str | None) -> str | None:
    """Why ``topic`` is not a valid topic name, or None when it is valid: ``TopicValidator.validateTopic``'s checks
    in its order (RocketMQ's broker answers SYSTEM_ERROR; 5.x INVALID_PARAMETER), in the words of RocketMQ's client
    ``Validators.checkTopic``, which name the topic and the limit."""
    if not topic:
        return BLANK_TOPIC
    if not _VALID_CHARS.issuperset(topic):
        if _JAVA_SPACE.issuperset(topic):
            return BLANK_TOPIC
        return f"The specified topic[{topic}] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
    if len(topic) > TOPIC_MAX_LENGTH:
        return f"The specified topic is longer than topic max length {TOPIC_MAX_LENGTH}."
    return None


def is_system_topic(topic: str, broker_topics: Collection[str] = ()) -> bool:
    """``TopicValidator.isSystemTopic``: one of :data:`SYSTEM_TOPICS`, ``broker_topics`` (what a broker adds, see
    :func:`broker_system_topics`) or a name starting with ``rmq_sys_``."""
    return topic in SYSTEM_TOPICS or topic in broker_topics or topic.startswith(SYSTEM_TOPIC_PREFIX)


def broker_system_topics(cluster_name: str, broker_name: str, trace_topic: str | None = None) -> frozenset[str]:
    """The system topics a broker adds for itself at start (Java's ``TopicConfigManager`` ``addSystemTopic`` calls):
    its cluster's and its own name, ``<cluster>_REPLY_TOPIC`` and its trace topic when tracing is on."""
    names = {cluster_name, broker_name, cluster_name + REPLY_TOPIC_SUFFIX}
    if trace_topic:
        names.add(trace_topic)
    return frozenset(names)


def system_topic_problem(topic: str, broker_topics: Collection[str] = ()) -> str | None:
    """RocketMQ's remark for a create or delete request naming a system topic, or None."""
    if is_system_topic(topic, broker_topics):
        return f"The topic[{topic}] is conflict with system topic."
    return None


def not_allowed_send_problem(topic: str) -> str | None:
    """RocketMQ's remark for a producer's message to a topic of :data:`NOT_ALLOWED_SEND_TOPICS`, or None."""
    if topic in NOT_ALLOWED_SEND_TOPICS:
        return f"Sending message to topic[{topic}] is forbidden."
    return None


# ---- numbers ----------------------------------------------------------------------------------------------------

INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1
LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1


class JavaNumberError(ValueError):
    """Text that ``Integer.parseInt`` / ``Long.parseLong`` refuses. ``reason`` completes "the field ...":
    ``is not a number`` or ``is out of range of a Java int`` (``long``); ``str()`` adds the text."""

    def __init__(self, reason: str, text: object) -> None:
        super().__init__(f"{reason}: {text!r:.60}")
        self.reason = reason
        self.text = text


def java_number(text: object, lo: int, hi: int, kind: str) -> int:
    """``text`` parsed by Java's rules into ``lo..hi`` (``kind``: "int" or "long", for the message); an ``int``
    (not a bool) is range-checked as it is. JavaNumberError otherwise."""
    if type(text) is not str:
        if type(text) is int:
            if lo <= text <= hi:
                return text
            raise JavaNumberError(f"is out of range of a Java {kind}", text)
        raise JavaNumberError("is not a number", text)
    digits = text[1:] if text[:1] in ("-", "+") else text
    if not digits.isdecimal():  # '' (also a lone sign), blanks, '_', '.', letters
        raise JavaNumberError("is not a number", text)
    try:
        value = int(text)
    except ValueError:  # more digits than Python converts (sys.get_int_max_str_digits): far out of any range
        raise JavaNumberError(f"is out of range of a Java {kind}", text) from None
    if lo <= value <= hi:
        return value
    raise JavaNumberError(f"is out of range of a Java {kind}", text)


def java_int(text: object) -> int:
    """``Integer.parseInt(text)``: JavaNumberError when Java throws NumberFormatException."""
    if type(text) is str and text.isdecimal() and len(text) < 10:  # the usual case: no sign, nine digits at most
        return int(text)
    return java_number(text, INT_MIN, INT_MAX, "int")


def java_long(text: object) -> int:
    """``Long.parseLong(text)``: JavaNumberError when Java throws NumberFormatException."""
    if type(text) is str and text.isdecimal() and len(text) < 19:  # the usual case: eighteen digits at most
        return int(text)
    return java_number(text, LONG_MIN, LONG_MAX, "long")


def body_problem(exc: BaseException) -> str:
    """What is wrong with a request body, from the exception its decoding raised, in words rather than a Python
    exception's name: a missing member (KeyError) is named, a number that is not one (ValueError) or a member of
    the wrong kind (TypeError) keeps its message."""
    if isinstance(exc, KeyError):
        return f"the member {exc.args[0]!r} is missing" if exc.args else "a member is missing"
    if isinstance(exc, UnicodeDecodeError):
        return f"it is not UTF-8 text (byte {exc.start})"
    text = str(exc)
    if isinstance(exc, TypeError):
        return f"a member has the wrong kind of value ({text})" if text else "a member has the wrong kind of value"
    return text or "it does not decode"
