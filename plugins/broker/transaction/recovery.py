"""Where the check service starts reading when this broker becomes master (a start, a restart after a crash, or a
replica of a failover group elected), and what it saves as it goes.

* **Positions.** The half and op queues are read from the offsets of group ``CID_RMQ_SYS_TRANS`` (consumerOffset.json,
  which a slave's metadata sync copies from its master). The op records themselves say what is resolved, so
  positions older than the truth only cost a longer read; positions beyond the truth would skip pending halves. So a
  position is saved only once every replica that may be elected holds the records it was computed from (the store's
  ``read_bound``, the confirm offset of automatic failover; at once without one), and positions beyond this store's
  queues (a history this store does not hold) are not used: both queues are then read from their start.
* **A commit cut from its op record.** A commit's two appends are one synchronous step, so a kill -9 between them
  (or a replica whose replication stopped between them) leaves the commit as the last record of the commit log. When
  the broker becomes master it notes the last record of its log at that moment; once the pending set is read, if that
  record is the commit of a half still pending, the missing op record is written instead of checking the half back
  (RocketMQ 4.x would check it back and commit it a second time).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from pyrmq.plugins.broker.transaction.bridge import TransactionBridge, TransactionError
from pyrmq.plugins.broker.transaction.names import HALF_TOPIC, OP_TOPIC, REAL_TOPIC, SYS_GROUP, UNIQ_KEY
from pyrmq.plugins.broker.transaction.queues import HalfOpQueues, origin_of
from pyrmq.store.format import TRANSACTION_COMMIT_TYPE, TRANSACTION_TYPE_MASK, StoredMessage

if TYPE_CHECKING:  # pragma: no cover - types only
    from pyrmq.plugins.broker.core import BrokerContext
    from pyrmq.store.message_store import MessageStore

log = logging.getLogger("pyrmq.broker.transaction")


def last_record(store: MessageStore, end: int) -> tuple[int, int] | None:
    """(offset, size) of the commit-log record ending at ``end``, found through the consume queue pointing to it;
    None when no consume queue's last unit ends there (then that record is no commit: every commit has a unit)."""
    for cq in list(store.consume_queues.table.values()):
        if cq.max_physic_offset == end:
            unit = cq.get_unit(cq.max_offset - 1)
            if unit is not None and unit[0] + unit[1] == end:
                return unit[0], unit[1]
    return None


class TransactionRecovery:
    """Loads the pending set of a new term as master, and saves the read positions as the check service goes."""

    def __init__(self, ctx: BrokerContext, queues: HalfOpQueues, bridge: TransactionBridge) -> None:
        self.ctx = ctx
        self.store = ctx.store
        self.queues = queues
        self.bridge = bridge
        #: the last record of the commit log when this broker became master (offset, size)
        self.term_last: tuple[int, int] | None = None
        #: positions computed, not saved yet: (commit-log end they were computed at, half, op), oldest first
        self._waiting: list[tuple[int, int, int]] = []
        self._latest = self._saved = (-1, -1)
        #: whether the pending set of this term is read (and a cut commit closed): False from start() to finish()
        self.finished = True

    def became_master(self) -> None:
        """Note the last record of the log as it is now (synchronous: called as the role changes, before any
        request can append)."""
        self.term_last = last_record(self.store, self.store.commit_log.max_offset)

    def reset(self) -> None:
        self._waiting.clear()
        self._latest = self._saved = (-1, -1)
        self.finished = True

    def positions(self) -> tuple[int, int]:
        """The saved (half, op) positions, checked against this store's queues."""
        store, offsets = self.store, self.ctx.offsets
        half, op = offsets.query(SYS_GROUP, HALF_TOPIC, 0), offsets.query(SYS_GROUP, OP_TOPIC, 0)
        half_min, op_min = store.get_min_offset_in_queue(HALF_TOPIC, 0), store.get_min_offset_in_queue(OP_TOPIC, 0)
        half_max, op_max = store.get_max_offset_in_queue(HALF_TOPIC, 0), store.get_max_offset_in_queue(OP_TOPIC, 0)
        if half > half_max or op > op_max:
            log.warning("transactions: saved positions (half %d, op %d) are beyond this store's queues (half %d, op "
                        "%d): reading both from their start", half, op, half_max, op_max)
            half, op = half_min, op_min
        return max(half, half_min, 0), max(op, op_min, 0)

    def start(self) -> None:
        """Start reading the pending set again from the saved positions (the queues' :meth:`HalfOpQueues.ingest`
        reads it, at once or in steps); :meth:`finish` once they are read to their end."""
        half, op = self.positions()
        self.reset()
        self._latest = self._saved = (half, op)
        self.queues.start(half, op)
        self.finished = False

    def finish(self) -> None:
        """The pending set is read: close a commit cut from its op record, before anything is checked."""
        if self.finished:
            return
        self.finished = True
        if self.queues.pending:
            self._close_cut_commit()
            log.info("transactions: %d pending half messages from half offset %d, op offset %d",
                     len(self.queues.pending), *self._saved)

    def _close_cut_commit(self) -> None:
        where, self.term_last = self.term_last, None
        if where is None:
            return
        try:
            last: StoredMessage | None = self.store.look_message_by_offset(*where)
        except Exception:  # noqa: BLE001 - a damaged tail decodes as garbage: then nothing was committed there
            log.warning("transactions: the last record of the commit log does not decode", exc_info=True)
            return
        if last is None or last.sys_flag & TRANSACTION_TYPE_MASK != TRANSACTION_COMMIT_TYPE:
            return
        named = self.store.look_message_by_offset(last.prepared_transaction_offset)
        if named is None or named.topic != HALF_TOPIC or named.properties.get(REAL_TOPIC) != last.topic \
                or named.properties.get(UNIQ_KEY) != last.properties.get(UNIQ_KEY):
            return  # not the commit of that half
        half = self.queues.pending.get(origin_of(named, named.properties))
        if half is None:
            return
        log.warning("transactions: the commit at %d of half %d is the last record of the log: its op record was not "
                    "written (a kill, or a replication cut, between them); writing it now (the half is not checked "
                    "back)", last.commit_log_offset, half.origin)
        try:
            self.bridge.close(half, "op record")
        except TransactionError as exc:
            log.warning("transactions: %s", exc.remark)

    def save(self) -> None:
        """Move CID_RMQ_SYS_TRANS's offsets to the oldest half still pending and the oldest op record it needs, once
        the records they were computed from are confirmed (the store's read bound)."""
        half, op = self.queues.positions()
        if (half, op) != self._latest:
            self._latest = (half, op)
            self._waiting.append((self.store.commit_log.max_offset, half, op))
        bound = self.store.read_bound  # the confirm offset (a property since the store's read-bound events)
        ready = None
        while self._waiting and (bound is None or self._waiting[0][0] <= bound):
            ready = self._waiting.pop(0)
        if ready is not None and ready[1:] != self._saved:
            self._saved = ready[1:]
            self.ctx.offsets.commit(SYS_GROUP, HALF_TOPIC, 0, ready[1])
            self.ctx.offsets.commit(SYS_GROUP, OP_TOPIC, 0, ready[2])
