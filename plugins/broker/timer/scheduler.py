"""The send side of the timer: the scheduler (put interceptor) that parks a message due later under the timer topic.

A message with ``TIMER_DELIVER_MS`` (absolute epoch ms) or ``TIMER_DELAY_SEC`` (seconds from now) due later than now
is re-addressed to :data:`~.records.TIMER_TOPIC` queue 0 with ``REAL_TOPIC`` / ``REAL_QID`` and ``TIMER_DELIVER_MS``
set. Its consume-queue tags code is its delivery time: the scheduler declares its parking topic and
:meth:`TimerScheduling.tags_code`, and the store derives the unit from the stored properties wherever it dispatches
the record (at the append, at recovery, on a replica, after a truncation).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import attrs
import trio

from pyrmq.kernel.types import ORDER_SCHEDULE, PutContext, PutKind, Rejection
from pyrmq.plugins.broker.timer import records
from pyrmq.plugins.broker.timer.records import (
    PROPERTY_PARKED_OFFSET,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
    TIMER_TOPIC,
)
from pyrmq.remoting.codes import ResponseCode
from pyrmq.remoting.validation import JavaNumberError, java_long
from pyrmq.store.format import TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE, TRANSACTION_TYPE_MASK, MessageRecord

DAY_MS = 86_400_000
#: transaction types that are never scheduled (a prepared or rolled-back message is not delivered at all)
_NOT_DELIVERED = (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE)


class TimerScheduling:
    """Mixed into :class:`~.service.TimerService`: the ``TIMER_DELIVER_MS`` / ``TIMER_DELAY_SEC`` scheduler."""

    name = "timer"
    order = ORDER_SCHEDULE + 10
    trigger_properties = frozenset({PROPERTY_TIMER_DELIVER_MS, PROPERTY_TIMER_DELAY_SEC})
    #: where parked messages wait (the store's tags-code resolver derives this topic's units with :meth:`tags_code`)
    parking_topic = TIMER_TOPIC

    clock: Callable[[], int]
    max_delay_ms: int
    _wake: trio.Event

    def summary(self) -> str:
        """One line for ``pyrmq plugins --codes`` (the scheduler hook's listing)."""
        return (f"{PROPERTY_TIMER_DELIVER_MS} / {PROPERTY_TIMER_DELAY_SEC}: up to {self.max_delay_ms / DAY_MS:g} days "
                f"ahead, parked under {TIMER_TOPIC}")

    @staticmethod
    def tags_code(properties: Mapping[str, str], store_timestamp: int) -> int | None:
        """A parked record's consume-queue tags code: its ``TIMER_DELIVER_MS``."""
        return records.tags_code(properties, store_timestamp)

    def intercept(self, record: MessageRecord, context: PutContext) -> MessageRecord | Rejection:
        """The put interceptor: park a message due later (refuse a bad value, or a timed message in a batch).

        A message another scheduler has claimed (``DELAY``: the delay levels run first) is left alone."""
        props = record.properties
        if PROPERTY_TIMER_DELIVER_MS not in props and PROPERTY_TIMER_DELAY_SEC not in props:
            return record
        if context.scheduled_by is not None or record.sys_flag & TRANSACTION_TYPE_MASK in _NOT_DELIVERED:
            return record
        context.scheduled_by = self.name
        try:
            parked = self.redirect(record)
        except ValueError as exc:
            return Rejection(ResponseCode.MESSAGE_ILLEGAL, str(exc))
        if parked is None:
            return record
        if context.kind is PutKind.BATCH:
            return Rejection(ResponseCode.MESSAGE_ILLEGAL, "batch message does not support timer delivery (TIMER_DELIVER_MS / TIMER_DELAY_SEC)")
        return parked

    def redirect(self, record: MessageRecord) -> MessageRecord | None:
        """Park a message due later than now under rmq_sys_wheel_timer; None stores it as it is (due now).

        Raises ValueError for a value that is not an integer or lies too far out (the send answers MESSAGE_ILLEGAL).
        The record's tags code is the delivery time; a store with the broker's tags-code resolver derives the same
        from the stored properties (:meth:`tags_code`), as it does at every later dispatch."""
        props = record.properties
        now = self.clock()
        if PROPERTY_TIMER_DELIVER_MS in props:
            key = PROPERTY_TIMER_DELIVER_MS
            try:
                deliver = java_long(props[key])  # Long.parseLong, as 5.x reads it: no blanks, no '_'
            except JavaNumberError as exc:
                raise ValueError(
                    f"property {key} must be an absolute time in epoch milliseconds, got {props[key]!r}, which {exc.reason}"
                ) from None
        else:
            key = PROPERTY_TIMER_DELAY_SEC
            try:
                delay = java_long(props[key])
            except JavaNumberError as exc:
                raise ValueError(
                    f"property {key} must be an integer number of seconds, got {props[key]!r}, which {exc.reason}"
                ) from None
            deliver = now + delay * 1000
        if deliver - now > self.max_delay_ms:
            raise ValueError(
                f"property {key} asks for delivery {(deliver - now) / DAY_MS:.1f} days from now; "
                f"the timer accepts at most {self.max_delay_ms / DAY_MS:g} days"
            )
        if deliver <= now:
            return None
        properties = dict(props)
        properties.pop(PROPERTY_TIMER_DELAY_SEC, None)
        properties.pop(PROPERTY_PARKED_OFFSET, None)  # a re-sent copy parks afresh: it is no copy of anything here
        properties[PROPERTY_TIMER_DELIVER_MS] = str(deliver)
        properties[PROPERTY_REAL_TOPIC] = record.topic
        properties[PROPERTY_REAL_QUEUE_ID] = str(record.queue_id)
        self._wake.set()  # the service runs after this send's synchronous append
        return attrs.evolve(
            record, topic=TIMER_TOPIC, queue_id=0, properties=properties, properties_bytes=None, tags_code=deliver
        )
