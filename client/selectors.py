"""Queue selectors for ordered sends: all messages with one sharding key go to one queue (Java
``MessageQueueSelector``, ``SelectMessageQueueByHash``, ``SelectMessageQueueByRandom``).

A selector is any callable ``selector(queues, message, arg) -> MessageQueue``; ``queues`` are the topic's writable
queues in the route's order (brokers by name, then queue id), the same list a Java producer sees.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

from pyrmq.client.message import Message, MessageQueue
from pyrmq.remoting.message import java_string_hash

__all__ = ["MessageQueueSelector", "java_hash_code", "select_by_hash", "select_by_random"]

MessageQueueSelector = Callable[[Sequence[MessageQueue], Message, Any], MessageQueue]


def java_hash_code(value: Any) -> int:
    """Java's ``hashCode()`` of a sharding key, so Python and Java producers pick the same queue for one key."""
    if isinstance(value, bool):
        return 1231 if value else 1237
    if isinstance(value, int):
        if -(1 << 31) <= value < (1 << 31):
            return value  # Integer.hashCode
        v = value & 0xFFFFFFFFFFFFFFFF
        h = (v ^ (v >> 32)) & 0xFFFFFFFF  # Long.hashCode
        return h - (1 << 32) if h & 0x80000000 else h
    return java_string_hash(str(value))


def select_by_hash(queues: Sequence[MessageQueue], message: Message, arg: Any) -> MessageQueue:
    """``abs(arg.hashCode() % n)`` like Java's SelectMessageQueueByHash."""
    return queues[abs(java_hash_code(arg)) % len(queues)]


def select_by_random(queues: Sequence[MessageQueue], message: Message, arg: Any) -> MessageQueue:
    return queues[random.randrange(len(queues))]
