"""What a producer refuses before sending, with a message that says why (Java ``Validators.checkMessage``; spec
5.3, 6.2, 7.9): topic names, system topics, empty or oversized bodies, reserved or malformed properties and keys.
"""

from __future__ import annotations

from pyrmq.client.config import check_name
from pyrmq.client.errors import InvalidMessageError
from pyrmq.client.message import SYSTEM_PROPERTIES, Message
from pyrmq.remoting.validation import NOT_ALLOWED_SEND_TOPICS, not_allowed_send_problem

__all__ = ["validate_message", "validate_topic", "MAX_MESSAGE_SIZE", "MAX_PROPERTIES_SIZE", "NOT_ALLOWED_SEND_TOPICS"]

MAX_MESSAGE_SIZE = 4 * 1024 * 1024
MAX_PROPERTIES_SIZE = 32767
_VALID_TOPICS: set[str] = set()


def validate_topic(topic: str) -> None:
    """A topic a producer may send to: a valid name, not a system topic (InvalidMessageError saying why)."""
    if topic in _VALID_TOPICS:
        return
    check_name("topic", topic)
    problem = not_allowed_send_problem(topic)  # RocketMQ's set (TopicValidator), the one the broker refuses
    if problem:
        raise InvalidMessageError(f"{problem} (a system topic)")
    if len(_VALID_TOPICS) < 10_000:
        _VALID_TOPICS.add(topic)


def validate_message(msg: Message, max_message_size: int = MAX_MESSAGE_SIZE) -> None:
    """Java's ``Validators.checkMessage`` plus the property rules: raises InvalidMessageError saying why."""
    if not isinstance(msg, Message):
        raise InvalidMessageError(f"expected a Message, got {type(msg).__name__}")
    if msg.topic not in _VALID_TOPICS:
        validate_topic(msg.topic)
    if not msg.body:
        raise InvalidMessageError(f"the message body is empty (topic {msg.topic!r})")
    if len(msg.body) > max_message_size:
        raise InvalidMessageError(
            f"the message body is {len(msg.body)} bytes, over the maximum of {max_message_size} bytes (topic {msg.topic!r})"
        )
    if msg.delay_time_level < 0:
        raise InvalidMessageError(f"delay_time_level must be >= 0, got {msg.delay_time_level}")
    if not msg.properties and not msg.keys and msg.tags is None:
        return
    for key, value in msg.properties.items():
        if key in SYSTEM_PROPERTIES:
            raise InvalidMessageError(f"the property name {key!r} is reserved by the system; choose another")
        if not key or any(c in key for c in "\u0001\u0002") or any(c in str(value) for c in "\u0001\u0002"):
            raise InvalidMessageError(f"property {key!r} is empty or contains the separators \\u0001/\\u0002")
    for key in msg.keys:
        if not key or any(c in key for c in " \u0001\u0002"):
            raise InvalidMessageError(f"message key {key!r} is empty or contains a space or a separator")
    if msg.tags is not None and any(c in msg.tags for c in "\u0001\u0002"):
        raise InvalidMessageError("tags contain the separators \\u0001/\\u0002")
