"""Rebuilding POP's state from the broker's own store, each time the broker becomes master (at start, or promoted by
automatic failover): what survives a kill -9 and a failover is what the commit log holds.

For each queue of the revive topic, reading starts at the first live offset its newest ``rof`` record names (the
queue's start when it has none) and goes to its end:

* ``ck``: a checkpoint; a later record of the same checkpoint (re-written by compaction) replaces it, its acked bits
  added to those seen;
* ``ack`` / ``bAck``: acks of a checkpoint read before (acks are written to their checkpoint's queue, after it);
* ``ord``: a FIFO queue's order state; the newest write wins (``w``);
* ``rof``: skipped (what the start was chosen by).

Then every checkpoint with an unacked message is open again (revived at its due time, at once when it is past), the
highest next offset of each queue's checkpoints becomes its pop offset unless the committed offset is higher (after an
admin reset, the highest of the reset's generation, whatever the table says), and each FIFO state is restored with its
committed offset. An acked message is never popped again (its checkpoint, and so its
queue's pop offset, are in the log before the ack's answer went out) and every unacked one comes back after its
invisible time (its checkpoint is open again). 5.x keeps the pop offset in consumerOffset.json, flushed every 5 s,
and after a kill -9 pops again what was acked since (docs/decisions.md).

The reading is done in steps (:meth:`Recovery.step`) by the service task, other tasks running in between; a POP
request arriving before it is done finishes it at once (:meth:`Recovery.finish`), so no request sees half a state.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from pyrmq.plugins.broker.pop.fifo import OrderState
from pyrmq.plugins.broker.pop.names import (
    ACK_TAG,
    BATCH_ACK_TAG,
    CK_TAG,
    ORDER_TAG,
    REVIVE_OFFSET_TAGS_CODE,
)
from pyrmq.plugins.broker.pop.records import CheckPoint, CheckPointKey, QueueKey, ack_key, acked_offsets
from pyrmq.remoting.message import decode_message, java_string_hash

if TYPE_CHECKING:  # pragma: no cover - types only
    from pyrmq.plugins.broker.pop.plugin import PopService

log = logging.getLogger("pyrmq.pop")

_CODES = {java_string_hash(tag): tag for tag in (CK_TAG, ACK_TAG, BATCH_ACK_TAG, ORDER_TAG)}


class Recovery:
    """One reading of the revive topic (start, steps, finish)."""

    def __init__(self, pop: PopService) -> None:
        self.pop = pop
        self.finished = True
        self._cursors: dict[int, list[int]] = {}
        self._cks: dict[int, dict[CheckPointKey, CheckPoint]] = {}
        self._orders: dict[QueueKey, tuple[int, OrderState]] = {}
        self.records = 0
        #: per revive queue, where reading started
        self.starts: dict[int, int] = {}

    def start(self) -> None:
        pop = self.pop
        store = pop.ctx.store
        topic = pop.revive_topic
        self._cursors = {}
        self._cks = {}
        self._orders = {}
        self.records = 0
        self.starts = {}
        for qid in pop.revive_queues():
            cq = store.consume_queues.get(topic, qid)
            if cq is None:
                continue
            low, high = cq.min_offset, cq.max_offset
            start = low
            for offset in range(high - 1, low - 1, -1):
                unit = cq.get_unit(offset)
                if unit is not None and unit[2] == REVIVE_OFFSET_TAGS_CODE:
                    body = self._body(unit)
                    if body is not None:
                        try:
                            start = max(low, min(int(json.loads(body)["r"]), offset))
                        except (ValueError, KeyError, TypeError):
                            log.warning("revive queue %d: unreadable rof record at %d; reading from %d", qid, offset, low)
                        break
            self._cursors[qid] = [start, high]
            self.starts[qid] = start
        self.finished = False

    def _body(self, unit: tuple[int, int, int]) -> bytes | None:
        view = self.pop.ctx.store.look_message_bytes_by_offset(unit[0], unit[1])
        if view is None:
            return None
        return decode_message(view)[0].body

    def step(self, budget: int) -> bool:
        """Read up to ``budget`` records; True once every queue is read."""
        store = self.pop.ctx.store
        topic = self.pop.revive_topic
        for qid, cursor in self._cursors.items():
            cq = store.consume_queues.get(topic, qid)
            while cursor[0] < cursor[1] and budget > 0:
                offset = cursor[0]
                cursor[0] += 1
                budget -= 1
                unit = cq.get_unit(offset) if cq is not None else None
                if unit is None:
                    continue
                tag = _CODES.get(unit[2])
                if tag is None:
                    continue
                body = self._body(unit)
                if body is None:
                    continue
                self.records += 1
                try:
                    self._apply(qid, offset, tag, json.loads(body))
                except (ValueError, KeyError, TypeError) as exc:
                    log.warning("revive queue %d: record %s at %d unreadable (%s): skipped", qid, tag, offset, exc)
            if budget <= 0:
                return False
        return True

    def _apply(self, qid: int, offset: int, tag: str, doc: Any) -> None:
        if tag == CK_TAG:
            ck = CheckPoint.from_json(doc, qid, offset)
            cks = self._cks.setdefault(qid, {})
            seen = cks.pop(ck.key, None)
            if seen is not None:
                ck.acked |= seen.acked
            cks[ck.key] = ck  # re-inserted: the dict stays in record order
        elif tag in (ACK_TAG, BATCH_ACK_TAG):
            found = self._cks.get(qid, {}).get(ack_key(doc))
            if found is not None:
                for acked in acked_offsets(doc):
                    found.ack(acked)
        elif tag == ORDER_TAG:
            state = OrderState.from_json(doc, qid, offset)
            written = int(doc.get("w") or 0)
            seen_order = self._orders.get(state.key)
            if seen_order is None or written >= seen_order[0]:
                self._orders[state.key] = (written, state)

    def finish(self) -> None:
        """Read what is left and rebuild the ledger, the FIFO states and the pop offsets."""
        if self.finished:
            return
        while not self.step(1 << 30):
            pass
        pop = self.pop
        ledger = pop.ledger
        for cks in self._cks.values():
            for ck in cks.values():
                ledger.add(ck)
                pop.revive.note_due(ck.due)
        for key, holder in ledger.holders.items():
            pop.offsets.gen[key] = holder.gen
            pop.offsets.restore(key, holder.next_offset, exact=holder.gen > 0)
        for key, (_, state) in self._orders.items():
            pop.book.states[key] = state
            ledger.set_order(state, None)
            pop.offsets.restore(key, state.committed, exact=True)
            pop.revive.watch_order(state)
        for qid, start in self.starts.items():
            pop.revive.written_first[qid] = start
        opened = len(ledger.open)
        log.info("POP state recovered from %s: %d records read, %d checkpoints in flight (%d messages), %d FIFO "
                 "queues", pop.revive_topic, self.records, opened, sum(ledger.inflight.values()), len(self._orders))
        self._cks = {}
        self._orders = {}
        self._cursors = {}
        self.finished = True
