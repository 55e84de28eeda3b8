"""The send side of the delay levels: the scheduler (put interceptor) that parks a ``DELAY`` message.

A message whose ``DELAY`` property is a level > 0 (clamped to the number of levels, 18 by default) is stored under
``SCHEDULE_TOPIC_XXXX`` queue ``level - 1`` with ``REAL_TOPIC`` / ``REAL_QID`` added (spec 7.6). Its consume-queue
tags code is the delivery time, RocketMQ's way: store time + the level's delay. The scheduler declares its parking
topic and :meth:`DelayScheduling.tags_code`, and the store derives the unit from the stored record wherever it
dispatches it (at the append, at recovery, on a replica, after a truncation: CommitLog.checkMessageAndReturnSize).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import attrs
import trio

from pyrmq.kernel.types import ORDER_SCHEDULE, PutContext, PutKind, Rejection
from pyrmq.remoting.codes import ResponseCode
from pyrmq.remoting.validation import JavaNumberError, java_int
from pyrmq.remoting.vocabulary import SCHEDULE_TOPIC, MessageProperty
from pyrmq.store.format import TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE, TRANSACTION_TYPE_MASK, MessageRecord

PROPERTY_DELAY = MessageProperty.DELAY_TIME_LEVEL
PROPERTY_REAL_TOPIC = MessageProperty.REAL_TOPIC
PROPERTY_REAL_QUEUE_ID = MessageProperty.REAL_QUEUE_ID
#: pyrmq's: on a delivered copy, the commit-log offset of the parked record it was made from (how a replica follows
#: its master's progress from the replicated store: docs/delay.md)
PROPERTY_PARKED_OFFSET = MessageProperty.DELAY_PARKED_OFFSET

#: transaction types that are never delayed (a prepared or rolled-back message is not delivered at all)
_NOT_DELIVERED = (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE)


class DelayScheduling:
    """Mixed into :class:`~.service.DelayLevelService`: the ``DELAY`` scheduler."""

    name = "delay-levels"
    order = ORDER_SCHEDULE
    trigger_properties = frozenset({PROPERTY_DELAY})
    #: where parked messages wait (the store's tags-code resolver derives this topic's units with :meth:`tags_code`)
    parking_topic = SCHEDULE_TOPIC

    levels_ms: tuple[int, ...]
    clock: Callable[[], int]
    _wake: dict[int, trio.Event]

    @property
    def max_level(self) -> int:
        return len(self.levels_ms)

    def summary(self) -> str:
        """One line for ``pyrmq plugins --codes`` (the scheduler hook's listing)."""
        return f"{PROPERTY_DELAY}: {len(self.levels_ms)} levels, parked under {SCHEDULE_TOPIC}"

    def delay_of(self, level: int) -> int:
        return self.levels_ms[min(level, self.max_level) - 1]

    def tags_code(self, properties: Mapping[str, str], store_timestamp: int) -> int | None:
        """A parked record's consume-queue tags code: store time + the delay of its ``DELAY`` level (clamped)."""
        try:
            level = java_int(properties.get(PROPERTY_DELAY) or "0")
        except ValueError:
            return None
        return store_timestamp + self.delay_of(level) if level > 0 else None

    def intercept(self, record: MessageRecord, context: PutContext) -> MessageRecord | Rejection:
        """The put interceptor: a message with ``DELAY`` is parked (or refused, for a bad value or in a batch).

        The first scheduler whose property a message carries decides when it is delivered: a ``DELAY`` message is
        this one's even at level 0 (the timer then leaves it alone)."""
        if PROPERTY_DELAY not in record.properties or record.sys_flag & TRANSACTION_TYPE_MASK in _NOT_DELIVERED:
            return record
        if context.scheduled_by is not None:
            return record
        context.scheduled_by = self.name
        if context.kind is PutKind.BATCH:
            if record.properties[PROPERTY_DELAY] not in ("", "0"):
                return Rejection(ResponseCode.MESSAGE_ILLEGAL, "batch message does not support delay level")
            return record
        try:
            return self.redirect(record) or record
        except ValueError as exc:  # RocketMQ 4.9.7: its store's Integer.parseInt throws, the send answers SYSTEM_ERROR
            return Rejection(ResponseCode.SYSTEM_ERROR, str(exc))

    def redirect(self, record: MessageRecord) -> MessageRecord | None:
        """Park a message with ``DELAY`` > 0 under SCHEDULE_TOPIC_XXXX (spec 7.6 store path); None leaves it alone.

        Raises ValueError for a DELAY that is not a Java int (the send answers SYSTEM_ERROR, as RocketMQ's). The record's tags
        code is now + the delay; a store with the broker's tags-code resolver derives it from the store time
        instead (:meth:`tags_code`), as it does at every later dispatch."""
        text = record.properties.get(PROPERTY_DELAY, "")
        try:
            level = java_int(text)  # Integer.parseInt, as Java's Message.getDelayTimeLevel: no blanks, no '_'
        except JavaNumberError as exc:
            raise ValueError(
                f"the property <DELAY> {exc.reason}: {text!r} (expected a delay level, 1..{self.max_level})"
            ) from None
        if level <= 0:
            return None
        level = min(level, self.max_level)
        properties = dict(record.properties)
        properties.pop(PROPERTY_PARKED_OFFSET, None)  # a copy sent back (a retry) parks afresh
        properties[PROPERTY_REAL_TOPIC] = record.topic
        properties[PROPERTY_REAL_QUEUE_ID] = str(record.queue_id)
        event = self._wake.get(level)
        if event is not None:
            event.set()  # the level task runs after this send's synchronous append
        return attrs.evolve(
            record,
            topic=SCHEDULE_TOPIC,
            queue_id=level - 1,
            properties=properties,
            properties_bytes=None,
            tags_code=self.clock() + self.levels_ms[level - 1],
        )
