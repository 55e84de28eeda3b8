"""The in-memory ledger of POP's delivery state: open checkpoints by key and by due time, and the *live* records of
each revive queue.

A record of the revive topic is live while recovery still needs it: an open checkpoint (messages in flight); the
checkpoint holding a queue's highest pop offset (its *holder*, even when closed); a FIFO queue's order state. Every
record older than a revive queue's first live record is dead: recovery starts reading there (``rof`` records say
where), and compaction re-writes live records that lie too far back (:mod:`.revive`).

Due times are kept in 100 ms buckets rather than one heap entry per checkpoint, so a checkpoint acked at once costs
nothing more than two dict operations.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator

from pyrmq.plugins.broker.pop.fifo import OrderState
from pyrmq.plugins.broker.pop.records import CheckPoint, CheckPointKey, QueueKey

#: width of a due-time bucket, ms
BUCKET_MS = 100

LiveRecord = CheckPoint | OrderState


class Ledger:
    """Open checkpoints, each queue's holder, in-flight counts and each revive queue's live records."""

    def __init__(self) -> None:
        self.open: dict[CheckPointKey, CheckPoint] = {}
        #: bucket (due // BUCKET_MS) -> its open checkpoints; ``_bucket_heap`` the bucket numbers (lazily pruned)
        self._buckets: dict[int, dict[CheckPointKey, CheckPoint]] = {}
        self._bucket_heap: list[int] = []
        #: per queue: the checkpoint with the highest next offset of the newest reset generation (what recovery reads
        #: the pop offset from)
        self.holders: dict[QueueKey, CheckPoint] = {}
        #: revive queue -> queue offset of a live record -> the record; insertion order is offset order (appends only
        #: grow a queue; compaction moves a record to the end), so the first key is the first live offset
        self.live: dict[int, dict[int, LiveRecord]] = {}
        #: per queue: messages popped and neither acked nor revived yet
        self.inflight: dict[QueueKey, int] = {}

    # -- checkpoints ---------------------------------------------------------------------------------------------

    def add(self, ck: CheckPoint) -> None:
        """A checkpoint just written (``ck.ro`` set) or read back at recovery."""
        if ck.num and not ck.all_acked:
            self.open[ck.key] = ck
            b = ck.due // BUCKET_MS
            bucket = self._buckets.get(b)
            if bucket is None:
                bucket = self._buckets[b] = {}
                heapq.heappush(self._bucket_heap, b)
            bucket[ck.key] = ck
            qk = ck.queue_key
            self.inflight[qk] = self.inflight.get(qk, 0) + len(ck.unacked())
        else:
            ck.closed = True
        holder = self.holders.get(ck.queue_key)
        if holder is None or (ck.gen, ck.next_offset) >= (holder.gen, holder.next_offset):
            if holder is not None and holder is not ck:
                holder.holder = False
                if holder.closed:
                    self._forget(holder)
            self.holders[ck.queue_key] = ck
            ck.holder = True
        if not ck.closed or ck.holder:
            self.live.setdefault(ck.revive_qid, {})[ck.ro] = ck

    def ack(self, key: CheckPointKey, offsets: list[int]) -> tuple[CheckPoint | None, int]:
        """Mark ``offsets`` of checkpoint ``key`` acked: (the checkpoint if open, how many were in flight)."""
        ck = self.open.get(key)
        if ck is None:
            return None, 0
        n = 0
        for offset in offsets:
            if ck.ack(offset):
                n += 1
        if n:
            qk = ck.queue_key
            self.inflight[qk] = self.inflight.get(qk, 0) - n
            if ck.all_acked:
                self.close(ck)
        return ck, n

    def close(self, ck: CheckPoint) -> None:
        """Nothing left to do for ``ck`` (all acked or revived)."""
        if ck.closed:
            return
        ck.closed = True
        if self.open.pop(ck.key, None) is not None:
            bucket = self._buckets.get(ck.due // BUCKET_MS)
            if bucket is not None:
                bucket.pop(ck.key, None)
            left = len(ck.unacked())
            if left:
                qk = ck.queue_key
                self.inflight[qk] = self.inflight.get(qk, 0) - left
        if not ck.holder:
            self._forget(ck)

    def _forget(self, record: LiveRecord) -> None:
        live = self.live.get(record.revive_qid)
        if live is not None and live.get(record.ro) is record:
            del live[record.ro]

    def next_due(self) -> int | None:
        """The earliest due time of an open checkpoint."""
        heap, buckets = self._bucket_heap, self._buckets
        while heap:
            bucket = buckets.get(heap[0])
            if bucket:
                return min(ck.due for ck in bucket.values())
            buckets.pop(heapq.heappop(heap), None)
        return None

    def take_due(self, now: int, limit: int) -> list[CheckPoint]:
        """Up to ``limit`` open checkpoints due at ``now``, earliest buckets first, taken out of the due index: the
        caller revives each (closing it) or puts it back with :meth:`reschedule`."""
        out: list[CheckPoint] = []
        heap, buckets = self._bucket_heap, self._buckets
        while heap and heap[0] * BUCKET_MS <= now and len(out) < limit:
            b = heap[0]
            bucket = buckets.get(b)
            if bucket:
                later: dict[CheckPointKey, CheckPoint] = {}
                for key, ck in bucket.items():
                    if ck.due <= now and len(out) < limit:
                        out.append(ck)
                    else:
                        later[key] = ck
                if later:  # not due yet (the bucket's end lies ahead), or the limit was reached
                    buckets[b] = later
                    break
            heapq.heappop(heap)
            buckets.pop(b, None)
        return out

    def reschedule(self, ck: CheckPoint, due: int) -> None:
        """Try ``ck`` again at ``due`` (a revive that could not write its retry message)."""
        bucket = self._buckets.get(ck.due // BUCKET_MS)
        if bucket is not None:
            bucket.pop(ck.key, None)
        if ck.closed:
            return
        ck.invisible_time = due - ck.pop_time
        b = due // BUCKET_MS
        bucket = self._buckets.get(b)
        if bucket is None:
            bucket = self._buckets[b] = {}
            heapq.heappush(self._bucket_heap, b)
        bucket[ck.key] = ck

    # -- live records --------------------------------------------------------------------------------------------

    def set_order(self, state: OrderState, previous: OrderState | None) -> None:
        """``state`` was just written (``state.ro`` set), replacing ``previous``: only the newest is live."""
        if previous is not None and previous is not state:
            self._forget(previous)
        self.live.setdefault(state.revive_qid, {})[state.ro] = state

    def drop_order(self, state: OrderState) -> None:
        self._forget(state)

    def moved(self, record: LiveRecord, old_ro: int) -> None:
        """``record`` was re-written by compaction at ``record.ro`` (from ``old_ro``)."""
        live = self.live.setdefault(record.revive_qid, {})
        if live.get(old_ro) is record:
            del live[old_ro]
        live[record.ro] = record

    def first_live(self, revive_qid: int) -> tuple[int, LiveRecord] | None:
        live = self.live.get(revive_qid)
        if not live:
            return None
        ro = next(iter(live))
        return ro, live[ro]

    def oldest(self, revive_qid: int, below: int, limit: int) -> Iterator[LiveRecord]:
        """Live records of a revive queue lying before queue offset ``below``, oldest first, at most ``limit``."""
        live = self.live.get(revive_qid)
        if not live:
            return
        for n, (ro, record) in enumerate(list(live.items())):
            if ro >= below or n >= limit:
                return
            yield record

    def reset(self) -> None:
        """Drop everything (the broker is no longer master)."""
        self.open.clear()
        self._buckets.clear()
        self._bucket_heap.clear()
        self.holders.clear()
        self.live.clear()
        self.inflight.clear()
