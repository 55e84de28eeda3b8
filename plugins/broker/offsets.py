"""Consumer offsets (RocketMQ's ConsumerOffsetManager, spec 3.5, 6.6, 7.13).

``topic@group -> {queueId: offset}``, the offset being the next logical offset to consume. Kept in memory, written
to ``config/consumerOffset.json`` every ``flushConsumerOffsetInterval`` (5 s) when changed, and at shutdown.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

TOPIC_GROUP_SEPARATOR = "@"


class ConsumerOffsetManager:
    def __init__(self, *, persist: Callable[[dict[str, Any]], None] = lambda doc: None) -> None:
        self.persist_document = persist
        self.table: dict[str, dict[int, int]] = {}
        self.dirty = False
        #: ``listener(group, topic, offsets)`` after an admin reset (:meth:`reset`): a feature keeping its own read
        #: positions (POP's pop offsets) follows it at once
        self.reset_listeners: list[Callable[[str, str, dict[int, int]], None]] = []

    def load(self, document: dict[str, Any] | None) -> None:
        for key, per_queue in ((document or {}).get("offsetTable") or {}).items():
            self.table[str(key)] = {int(q): int(o) for q, o in per_queue.items()}

    def document(self) -> dict[str, Any]:
        return {"offsetTable": {key: dict(sorted(q.items())) for key, q in sorted(self.table.items())}}

    def persist(self) -> None:
        self.persist_document(self.document())
        self.dirty = False

    def persist_if_dirty(self) -> None:
        if self.dirty:
            self.persist()

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """UPDATE_CONSUMER_OFFSET stores unconditionally (spec 7.13)."""
        self.table.setdefault(f"{topic}{TOPIC_GROUP_SEPARATOR}{group}", {})[queue_id] = offset
        self.dirty = True

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when none."""
        return self.table.get(f"{topic}{TOPIC_GROUP_SEPARATOR}{group}", {}).get(queue_id, -1)

    def offsets_of(self, group: str, topic: str) -> dict[int, int]:
        return dict(self.table.get(f"{topic}{TOPIC_GROUP_SEPARATOR}{group}", {}))

    def groups_of_topic(self, topic: str) -> list[str]:
        prefix = topic + TOPIC_GROUP_SEPARATOR
        return sorted(key[len(prefix) :] for key in self.table if key.startswith(prefix))

    def delete_topic(self, topic: str) -> None:
        prefix = topic + TOPIC_GROUP_SEPARATOR
        for key in [k for k in self.table if k.startswith(prefix)]:
            del self.table[key]
            self.dirty = True

    def clamp(self, max_offset: Callable[[str, int], int]) -> int:
        """Lower every committed offset beyond its queue's end (``max_offset(topic, queue_id)``) to that end: a
        failover replica whose commit log was truncated to the elected master's history. Returns how many moved."""
        moved = 0
        for key, per_queue in self.table.items():
            topic = key.partition(TOPIC_GROUP_SEPARATOR)[0]  # topic names never hold '@' (TopicValidator)
            for queue_id, offset in per_queue.items():
                end = max_offset(topic, queue_id)
                if offset > end:
                    per_queue[queue_id] = end
                    moved += 1
        if moved:
            self.dirty = True
        return moved

    def reset(self, group: str, topic: str, offsets: dict[int, int]) -> None:
        self.table[f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"] = dict(offsets)
        self.dirty = True
        for listener in self.reset_listeners:
            listener(group, topic, dict(offsets))
