"""The names the timer owns in stored records, and reading them from a parked record without decoding its body.

A parked record lives under :data:`TIMER_TOPIC` queue 0 with ``TIMER_DELIVER_MS`` (its delivery time, epoch ms),
``REAL_TOPIC`` and ``REAL_QID``. A copy the timer appends (the delivered copy in the real topic, or a refreshed
parked copy under the timer topic) carries :data:`PROPERTY_PARKED_OFFSET`: the commit-log offset of the parked
record it was made from. That is how a replica tells, from its replicated store alone, which parked records its
master has delivered (docs/delay.md, "Timer messages and failover").
"""

from __future__ import annotations

import struct
from typing import Any

from pyrmq.remoting.message import HEADER_STRUCTS, INT
from pyrmq.remoting.vocabulary import MessageProperty
from pyrmq.store.format import find_property

TIMER_TOPIC = "rmq_sys_wheel_timer"
PROPERTY_TIMER_DELIVER_MS = MessageProperty.TIMER_DELIVER_MS
PROPERTY_TIMER_DELAY_SEC = MessageProperty.TIMER_DELAY_SEC
PROPERTY_REAL_TOPIC = MessageProperty.REAL_TOPIC
PROPERTY_REAL_QUEUE_ID = MessageProperty.REAL_QUEUE_ID
#: pyrmq's (RocketMQ 5.x's copies carry TIMER_* times, no offset): the commit-log offset of the parked record a
#: delivered or refreshed copy was made from
PROPERTY_PARKED_OFFSET = "TIMER_PARKED_OFFSET"

# a property's name and separator, as they appear in a record's encoded properties
_DELIVER_MS_KEY = PROPERTY_TIMER_DELIVER_MS.encode() + b"\x01"
_REAL_TOPIC_KEY = PROPERTY_REAL_TOPIC.encode() + b"\x01"


def stored_properties(store: Any, phy: int, size: int) -> bytes | None:
    """The encoded properties of the record at commit-log offset ``phy`` (``size`` bytes), None when it is gone:
    only the header's lengths are read, not the body."""
    view = store.commit_log.get_data(phy, size)
    if view is None:
        return None
    try:
        p = HEADER_STRUCTS[(INT.unpack_from(view, 36)[0] >> 4) & 3].size
        p += INT.unpack_from(view, p - 4)[0]  # the body
        p += 1 + view[p]  # the topic
        length = struct.unpack_from(">h", view, p)[0]
        return bytes(view[p + 2 : p + 2 + length])
    except (struct.error, IndexError):
        return None


def deliver_ms_of(props: bytes) -> int | None:
    """``TIMER_DELIVER_MS`` of encoded properties; None when absent or not an integer."""
    text = find_property(props, _DELIVER_MS_KEY)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def real_topic_of(props: bytes) -> str:
    """``REAL_TOPIC`` of encoded properties ("" when absent)."""
    return find_property(props, _REAL_TOPIC_KEY) or ""


def tags_code(properties: Any, store_timestamp: int) -> int | None:
    """The consume-queue tags code of a parked record: its delivery time (``TIMER_DELIVER_MS``), whichever way the
    store dispatches it (the scheduler's ``tags_code``, through the store's tags-code resolver)."""
    text = properties.get(PROPERTY_TIMER_DELIVER_MS)
    try:
        return int(text) if text else None
    except ValueError:
        return None
