"""Pop offsets: where the next pop of a queue starts reading, per group.

A non-FIFO POP group's consumer offset is "popped up to" (5.x): the next pop starts after the last batch handed
out, and the committed consumer offset (what GET_CONSUME_STATS, ``pyrmq admin`` and the dashboard show; lag =
never-popped messages) follows it once the batch's checkpoint is durable. A FIFO group's committed offset is the
start of its unacked batch. The committed offset is also how an admin reaches POP: an offset that changed under us
(INVOKE_BROKER_TO_RESET_OFFSET) is adopted at the next pop, as 5.x's ``resetPopOffset``.

A queue without an offset starts at its min offset (``initMode`` MIN, or any ``%RETRY%`` topic), else at the last
message (``maxOffset - 1``; 0 when ``initPopOffsetByCheckMsgInMem`` and the queue's first message is still in
memory), and that start is committed at once (5.x's ``getInitOffset`` with ``init``).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from pyrmq.plugins.broker.pop.records import QueueKey
from pyrmq.plugins.broker.pop.settings import PopSettings
from pyrmq.remoting.pop import INIT_MODE_MIN

if TYPE_CHECKING:  # pragma: no cover - types only
    from pyrmq.plugins.broker.core import BrokerContext

RETRY_PREFIX = "%RETRY%"


@functools.cache
def _memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return 8 * 1024**3


class PopOffsets:
    """The next pop offset of every queue popped (in memory), and the committed offsets it writes."""

    def __init__(self, ctx: BrokerContext, settings: PopSettings, on_reset: Callable[[QueueKey], None]) -> None:
        self.ctx = ctx
        self.settings = settings
        self.on_reset = on_reset
        self.next: dict[QueueKey, int] = {}
        #: what this broker last committed per queue: a different committed offset was set by someone else
        self.committed: dict[QueueKey, int] = {}

    def get(self, key: QueueKey, init_mode: int) -> int:
        topic, group, queue_id = key
        offsets = self.ctx.offsets
        table = offsets.query(group, topic, queue_id)
        mine = self.committed.get(key)
        if mine is not None and table != mine and table >= 0:
            # reset by an admin: the next pop starts there (a FIFO queue's batch is forgotten)
            self.committed[key] = self.next[key] = table
            self.on_reset(key)
            return table
        found = self.next.get(key)
        if found is not None:
            return found
        if table >= 0:
            offset = table
        else:
            offset = self.init_offset(key, init_mode)
            self.commit(key, offset)
        self.next[key] = offset
        self.committed.setdefault(key, table if table >= 0 else offset)
        return offset

    def init_offset(self, key: QueueKey, init_mode: int) -> int:
        topic, _, queue_id = key
        store = self.ctx.store
        if init_mode == INIT_MODE_MIN or topic.startswith(RETRY_PREFIX):
            return store.get_min_offset_in_queue(topic, queue_id)
        if self.settings.initPopOffsetByCheckMsgInMem and store.get_min_offset_in_queue(topic, queue_id) <= 0:
            cq = store.consume_queues.get(topic, queue_id)
            unit = cq.get_unit(0) if cq is not None else None
            ratio = store.config.access_message_in_memory_max_ratio / 100
            if unit is not None and store.commit_log.max_offset - unit[0] <= _memory_bytes() * ratio:
                return 0
        return max(store.get_max_offset_in_queue(topic, queue_id) - 1, 0)

    def advance(self, key: QueueKey, offset: int) -> None:
        """The next pop of the queue starts at ``offset`` (in memory; :meth:`commit` once it is durable)."""
        if offset > self.next.get(key, -1):
            self.next[key] = offset

    def set(self, key: QueueKey, offset: int, *, commit: bool = True) -> None:
        """Start the next pop at ``offset`` and commit it (FIFO: the batch start or the next unacked offset);
        ``commit=False``: the caller commits once the record saying so is durable."""
        self.next[key] = offset
        if commit:
            self.commit(key, offset)

    def commit(self, key: QueueKey, offset: int) -> None:
        topic, group, queue_id = key
        self.committed[key] = offset
        self.ctx.offsets.commit(group, topic, queue_id, offset)

    def commit_forward(self, key: QueueKey, offset: int) -> None:
        """Commit ``offset`` unless a higher one is committed (batches become durable out of order)."""
        if offset > self.committed.get(key, -1):
            self.commit(key, offset)

    def restore(self, key: QueueKey, offset: int) -> None:
        """Recovery: the queue's pop offset read back from the log (only ever raises what the table says)."""
        topic, group, queue_id = key
        table = self.ctx.offsets.query(group, topic, queue_id)
        if offset > table:
            self.commit(key, offset)
            table = offset
        self.next[key] = table
        self.committed[key] = table

    def reset(self) -> None:
        self.next.clear()
        self.committed.clear()
