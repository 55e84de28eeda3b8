"""A consumer's local buffer for one message queue (Java ``ProcessQueue``; spec 7.5, 7.7).

Pulled messages wait here until consumed. The committable offset is the smallest offset still held (so a slow
message holds the commit back and nothing is lost on a crash), or one past the last message once empty. Flow
control reads ``count``, ``size`` and ``span``. Orderly consumption takes messages one at a time in offset order
and commits only what it has finished.
"""

from __future__ import annotations

import time
from collections import OrderedDict

import trio

from pyrmq.client.message import MessageExt

__all__ = ["ProcessQueue", "BatchProcessQueue", "LOCK_MAX_LIVE_S", "PULL_MAX_IDLE_S"]

#: a broker lock older than this is considered lost (Java rebalance.lockMaxLiveTime on the client: 30 s)
LOCK_MAX_LIVE_S = 30.0
#: a queue not pulled for this long is dropped at the next rebalance (Java pullMaxIdleTime: 120 s)
PULL_MAX_IDLE_S = 120.0


class ProcessQueue:
    __slots__ = (
        "msgs", "size", "max_offset", "dropped", "locked", "last_lock_time", "last_pull_time", "consuming",
        "consume_lock", "has_messages", "next_offset", "orderly_taken", "pull_task_running", "pull_size",
    )

    def __init__(self) -> None:
        #: offset -> message, in offset order (messages arrive in offset order per queue)
        self.msgs: OrderedDict[int, MessageExt] = OrderedDict()
        self.size = 0
        self.max_offset = -1
        self.dropped = False
        self.locked = False
        self.last_lock_time = 0.0
        self.last_pull_time = time.monotonic()
        self.consuming = False
        #: orderly: held while a message of this queue is being consumed (rebalance waits for it before unlocking)
        self.consume_lock = trio.Lock()
        self.has_messages = trio.Event()
        #: the offset the next pull starts from
        self.next_offset = 0
        #: orderly: messages taken for consumption but not committed yet
        self.orderly_taken: OrderedDict[int, MessageExt] = OrderedDict()
        self.pull_task_running = False
        #: how many messages the next pull asks for (0: the consumer's pull_batch_size); grows with the backlog
        self.pull_size = 0

    @property
    def count(self) -> int:
        return len(self.msgs) + len(self.orderly_taken)

    @property
    def span(self) -> int:
        """Offsets between the oldest and newest message held (Java getMaxSpan)."""
        if not self.msgs:
            return 0
        return self.max_offset - next(iter(self.msgs))

    def held_offsets(self) -> list[int]:
        """The offsets held (not taken), in order."""
        return list(self.msgs)

    def put(self, msgs: list[MessageExt], scanned_to: int = -1) -> None:
        """Hold pulled messages. ``scanned_to`` is the pull's next offset: the messages before it that are not
        here were filtered out, so once everything held is consumed the commit may move past them."""
        table = self.msgs
        for m in msgs:
            off = m.queue_offset
            if off not in table:
                table[off] = m
                self.size += len(m.body)
        if msgs:
            self.max_offset = max(self.max_offset, msgs[-1].queue_offset)
            self.has_messages.set()
        if scanned_to > 0:
            self.max_offset = max(self.max_offset, scanned_to - 1)

    def remove(self, msgs: list[MessageExt]) -> int:
        """Forget consumed messages; return the offset now safe to commit (-1 when nothing was held)."""
        table = self.msgs
        if not table and not msgs:
            return -1
        for m in msgs:
            if table.pop(m.queue_offset, None) is not None:
                self.size -= len(m.body)
        if table:
            return next(iter(table))
        return self.max_offset + 1

    def committable(self) -> int:
        if self.msgs:
            return next(iter(self.msgs))
        return self.max_offset + 1 if self.max_offset >= 0 else -1

    # -- orderly ---------------------------------------------------------------------------------------------

    def take(self, n: int = 1) -> list[MessageExt]:
        out = []
        table = self.msgs
        while table and len(out) < n:
            off, m = table.popitem(last=False)
            self.orderly_taken[off] = m
            out.append(m)
        if not table:
            self.has_messages = trio.Event()
        return out

    def commit(self) -> int:
        """Orderly: the taken messages are done; return the offset to commit (one past the last), or -1."""
        if not self.orderly_taken:
            return -1
        last = next(reversed(self.orderly_taken))
        for m in self.orderly_taken.values():
            self.size -= len(m.body)
        self.orderly_taken.clear()
        if not self.msgs:
            return max(last, self.max_offset) + 1
        return last + 1

    def make_consume_again(self, msgs: list[MessageExt]) -> None:
        """Orderly: put taken messages back in front, to be consumed again."""
        for m in msgs:
            self.orderly_taken.pop(m.queue_offset, None)
        merged = OrderedDict((m.queue_offset, m) for m in sorted(msgs, key=lambda x: x.queue_offset))
        merged.update(self.msgs)
        self.msgs = merged
        if self.msgs:
            self.has_messages.set()

    def lock_expired(self) -> bool:
        return time.monotonic() - self.last_lock_time > LOCK_MAX_LIVE_S

    def pull_expired(self) -> bool:
        return time.monotonic() - self.last_pull_time > PULL_MAX_IDLE_S

    def clear(self) -> None:
        self.msgs.clear()
        self.orderly_taken.clear()
        self.size = 0


def _offset(m: MessageExt) -> int:
    return m.queue_offset


class BatchProcessQueue(ProcessQueue):
    """Concurrent consumption: pulled batches are held whole, as they came (in offset order), so a batch consumed
    in full is forgotten with one dict pop instead of one per message. The committable offset is the same as
    :class:`ProcessQueue`'s: the smallest offset still held, or one past the last pulled once empty. A partial
    removal (failed messages kept for a local retry, a loop stopped inside a batch) rebuilds the batches it touches
    message by message; an overlapping pull (from an offset already pulled) merges everything held into one
    batch in offset order."""

    __slots__ = ("batches", "held")

    def __init__(self) -> None:
        super().__init__()
        #: id(messages) -> (messages still held, in offset order; their body bytes), batches in offset order
        self.batches: dict[int, tuple[list[MessageExt], int]] = {}
        self.held = 0

    @property
    def count(self) -> int:
        return self.held

    @property
    def span(self) -> int:
        if not self.batches:
            return 0
        return self.max_offset - next(iter(self.batches.values()))[0][0].queue_offset

    def held_offsets(self) -> list[int]:
        return [m.queue_offset for msgs, _ in self.batches.values() for m in msgs]

    def put(self, msgs: list[MessageExt], scanned_to: int = -1) -> None:
        if msgs:
            last = msgs[-1].queue_offset
            if msgs[0].queue_offset > self.max_offset:  # the usual pull: after everything held
                nbytes = sum([len(m.body) for m in msgs])
                self.batches[id(msgs)] = (msgs, nbytes)
                self.held += len(msgs)
                self.size += nbytes
            else:  # overlapping what was pulled before: hold only the offsets not held now, all as one batch
                held = set(self.held_offsets())
                new = [m for m in msgs if m.queue_offset not in held]
                if new:
                    nbytes = sum([len(m.body) for m in new])
                    merged = sorted([*(m for b, _ in self.batches.values() for m in b), *new], key=_offset)
                    self.batches = {id(merged): (merged, self.size + nbytes)}
                    self.held += len(new)
                    self.size += nbytes
            if last > self.max_offset:
                self.max_offset = last
        if scanned_to > 0 and scanned_to - 1 > self.max_offset:
            self.max_offset = scanned_to - 1

    def remove(self, msgs: list[MessageExt]) -> int:
        """Forget consumed messages (``msgs`` being a batch as put: one pop); return the offset now safe to commit
        (-1 when nothing was held)."""
        batches = self.batches
        if not batches and not msgs:
            return -1
        if msgs:
            entry = batches.pop(id(msgs), None)  # a held list is alive: its id is no other live list's
            if entry is not None:
                self.held -= len(msgs)
                self.size -= entry[1]
            else:
                self._remove_each(msgs)
                batches = self.batches
        if batches:
            return next(iter(batches.values()))[0][0].queue_offset
        return self.max_offset + 1

    def _remove_each(self, msgs: list[MessageExt]) -> None:
        gone = {m.queue_offset for m in msgs}
        kept: dict[int, tuple[list[MessageExt], int]] = {}
        for key, (held, nbytes) in self.batches.items():
            left = [m for m in held if m.queue_offset not in gone]
            if len(left) == len(held):
                kept[key] = (held, nbytes)
                continue
            removed = nbytes - sum([len(m.body) for m in left])
            self.held -= len(held) - len(left)
            self.size -= removed
            if left:
                kept[id(left)] = (left, nbytes - removed)
        self.batches = kept

    def committable(self) -> int:
        if self.batches:
            return next(iter(self.batches.values()))[0][0].queue_offset
        return self.max_offset + 1 if self.max_offset >= 0 else -1

    def clear(self) -> None:
        super().clear()
        self.batches.clear()
        self.held = 0
