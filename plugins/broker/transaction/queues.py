"""The half and op queues and what they say is pending (RocketMQ 4.9.8's TransactionalMessageServiceImpl reading
``RMQ_SYS_TRANS_HALF_TOPIC`` and ``RMQ_SYS_TRANS_OP_HALF_TOPIC``).

A transaction is one *origin*: the commit-log offset of its original half. Every check copy carries it in
``preparedTransactionOffset``, so the latest half of an origin (original or copy) is what is pending, and an op
record naming the queue offset of that latest half resolves the origin. The pending set lives in memory, rebuilt
from the queues from the saved positions (recovery.py) whenever this broker becomes master.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

import attrs

from pyrmq.plugins.broker.transaction.names import (
    CHECK_IMMUNITY,
    CHECK_TIMES,
    HALF_TOPIC,
    OP_TAG,
    OP_TOPIC,
    PGROUP,
    REAL_TOPIC,
    TAGS,
)
from pyrmq.remoting.validation import java_int, java_long
from pyrmq.store.consume_queue import BLANK_SIZE
from pyrmq.store.format import StoredMessage, decode_message

if TYPE_CHECKING:  # pragma: no cover - types only
    from pyrmq.store.message_store import MessageStore

log = logging.getLogger("pyrmq.broker.transaction")

_READ_BATCH = 32


def origin_of(msg: StoredMessage, props: dict[str, str]) -> int:
    """The transaction a half belongs to: its own commit-log offset, or for a check copy (it has
    TRANSACTION_CHECK_TIMES) the original's, kept in preparedTransactionOffset."""
    return msg.prepared_transaction_offset if CHECK_TIMES in props else msg.commit_log_offset


@attrs.define(slots=True)
class Half:
    """The latest half (original or check copy) of a pending transaction."""

    origin: int  #: commit-log offset of the original half: the transaction's identity
    queue_offset: int
    phy: int
    size: int
    born: int
    stored: int
    checks: int
    group: str
    immunity_ms: int | None
    topic: str = ""  #: the transaction's real topic (rocketmq_half_messages' ``topic`` label)


def read_queue(store: MessageStore, topic: str, offset: int, end: int) -> Iterator[tuple[int, memoryview]]:
    """(queue offset, record) of ``topic`` queue 0 from ``offset`` up to queue offset ``end``, as stored.

    Not through ``get_message``: with automatic failover a consumer's read stops at the confirm offset (what every
    in-sync replica holds), but the transaction service must see its own check copies and op records at once, or it
    would take a copy's op record for its older half's and check the copy again."""
    cq = store.consume_queues.get(topic, 0)
    if cq is None:
        return
    get_data = store.commit_log.get_data
    offset = max(offset, cq.min_offset)
    end = min(end, cq.max_offset)
    while offset < end:
        units = cq.units_from(offset, min(_READ_BATCH, end - offset))
        if units is None:  # the file holding ``offset`` is gone (retention): go on with the next one
            offset = cq.roll_next_file(offset)
            continue
        read = 0
        for phy, size, _tags_code in units:
            read += 1
            if size == BLANK_SIZE:
                continue
            view = get_data(phy, size)  # what a pull hands out: the unit's bytes (a damaged one fails to decode)
            if view is not None:
                yield offset + read - 1, view
        if not read:
            return
        offset += read


class HalfOpQueues:
    """The pending transactions of this broker as its half and op queues say, read forward from two positions."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store
        #: origin -> its latest half, for every transaction not resolved yet
        self.pending: dict[int, Half] = {}
        #: queue offset of a pending latest half -> its origin
        self._origin_of: dict[int, int] = {}
        #: half queue offsets with an op record, read before their half was
        self._op_ahead: set[int] = set()
        #: (op queue offset, half queue offset) of op records whose half may still be at or above the half position
        self._op_log: list[tuple[int, int]] = []
        #: how far each queue has been read
        self.half_read = self.op_read = 0
        self.loaded = False

    def start(self, half_offset: int, op_offset: int) -> None:
        """Forget everything and read from these queue offsets on (the saved positions) with :meth:`ingest`."""
        self.reset()
        self.half_read, self.op_read = half_offset, op_offset
        self.loaded = True

    def reset(self) -> None:
        """Forget the pending set (this broker stopped being master: its next term reads its store again)."""
        self.pending.clear()
        self._origin_of.clear()
        self._op_ahead.clear()
        self._op_log.clear()
        self.half_read = self.op_read = 0
        self.loaded = False

    def ingest(self, budget: int | None = None) -> bool:
        """Take in every half and op record appended since the last call (synchronous, no await); with ``budget``,
        at most that many records of each queue. Returns whether both queues are read to their end."""
        if not self.loaded:
            return True
        store = self.store
        caught_up = True
        end = store.get_max_offset_in_queue(HALF_TOPIC, 0)
        if self.half_read < end:
            if budget is not None and end - self.half_read > budget:
                end, caught_up = self.half_read + budget, False
            for queue_offset, view in read_queue(store, HALF_TOPIC, self.half_read, end):
                self._take_half(queue_offset, view)
            self.half_read = end
            if self._op_ahead:
                self._op_ahead = {q for q in self._op_ahead if q >= self.half_read}
        end = store.get_max_offset_in_queue(OP_TOPIC, 0)
        if self.op_read < end:
            if budget is not None and end - self.op_read > budget:
                end, caught_up = self.op_read + budget, False
            for queue_offset, view in read_queue(store, OP_TOPIC, self.op_read, end):
                self._take_op(queue_offset, view)
            self.op_read = end
        return caught_up

    def _take_half(self, queue_offset: int, view: memoryview) -> None:
        try:
            msg = decode_message(view)[0]
        except Exception as exc:  # noqa: BLE001 - a damaged record is skipped, not fatal
            log.warning("half message at queue offset %d does not decode: %s", queue_offset, exc)
            return
        props = msg.properties
        origin = origin_of(msg, props)
        if queue_offset in self._op_ahead:
            self._op_ahead.discard(queue_offset)
            self.forget(origin)
            return
        try:
            checks = java_int(props.get(CHECK_TIMES) or "0")  # Java's getInt: what does not parse counts 0
        except ValueError:
            checks = 0
        immunity = props.get(CHECK_IMMUNITY)
        try:
            immunity_ms = java_long(immunity) * 1000 if immunity else None  # Java's getLong: else the timeout
        except ValueError:
            immunity_ms = None
        self.forget(origin)
        self.pending[origin] = Half(
            origin, queue_offset, msg.commit_log_offset, msg.total_size, msg.born_timestamp, msg.store_timestamp,
            checks, props.get(PGROUP, ""), immunity_ms, props.get(REAL_TOPIC, ""),
        )
        self._origin_of[queue_offset] = origin

    def _take_op(self, op_offset: int, view: memoryview) -> None:
        try:
            msg = decode_message(view)[0]
            text = msg.body.decode("ascii")
        except Exception as exc:  # noqa: BLE001
            log.warning("op record at queue offset %d does not decode: %s", op_offset, exc)
            return
        if msg.properties.get(TAGS) != OP_TAG:
            return
        # 5.x packs several half offsets into one op body
        for part in text.split(","):
            try:
                half_offset = int(part)
            except ValueError:
                continue
            self._op_log.append((op_offset, half_offset))
            origin = self._origin_of.get(half_offset)
            if origin is not None:
                self.forget(origin)
            elif half_offset >= self.half_read:
                self._op_ahead.add(half_offset)

    def forget(self, origin: int) -> None:
        """The transaction ``origin`` is resolved (its op record is written or read)."""
        half = self.pending.pop(origin, None)
        if half is not None:
            self._origin_of.pop(half.queue_offset, None)

    def positions(self) -> tuple[int, int]:
        """Where a later reading may start: the oldest half still pending and the oldest op record it needs."""
        half_pos = min((h.queue_offset for h in self.pending.values()), default=self.half_read)
        self._op_log = [(o, h) for (o, h) in self._op_log if h >= half_pos]
        op_pos = min((o for o, _ in self._op_log), default=self.op_read)
        return half_pos, op_pos
