"""FIFO pops: the order state of each queue a FIFO group pops (5.5.0's ``ConsumerOrderInfoManager``, queue level).

Rules (PopMessageProcessor, AckMessageProcessor.ackOrderly, ChangeInvisibleTimeProcessor):

1. A FIFO pop takes no checkpoint and never reads the retry topic. A queue whose last batch still has a message
   unacked and invisible is *blocked*: skipped (its backlog is not counted in restNum) unless the request carries the
   batch's own attemptId (a client retrying a lost answer gets the same batch again).
2. Otherwise the pop reads from the committed offset and the batch replaces the queue's state; the committed offset
   stays at the batch start. Offsets of the previous batch read again count one more attempt each (not for the same
   attemptId): ``orderCountInfo`` carries them (``qo<queueId>%<offset>``) and the queue's least count.
3. An ack sets the message's bit and commits the first unacked offset of the batch (the last + 1 once all are acked);
   an ack of an offset below the committed one does nothing; of a batch popped at another time does nothing; of an
   offset the batch does not hold is MESSAGE_ILLEGAL.
4. A changed invisible time moves that one message's next visible time.

pyrmq keeps the state durable: every change is an ``ord`` record of the revive topic (the state and the committed
offset after it), so it survives a kill -9 and a failover (5.x keeps it in consumerOrderInfo.json, flushed every
10 s and never synchronised to a slave).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

import attrs

from pyrmq.plugins.broker.pop.records import QueueKey, _js


@attrs.define(eq=False, slots=True)
class OrderState:
    """One queue's last FIFO batch (5.x ``OrderInfo``) and the committed offset that goes with it."""

    topic: str
    group: str
    queue_id: int
    pop_time: int
    invisible_time: int
    offsets: list[int]  #: absolute queue offsets of the batch, ascending
    attempt_id: str | None = None
    #: offset -> next visible time (a changed invisible time)
    next_visible: dict[int, int] = attrs.field(factory=dict)
    #: offset -> attempts so far beyond the first (only offsets read again)
    consumed: dict[int, int] = attrs.field(factory=dict)
    last_consume: int = 0
    #: bit i set: the i-th offset is acked
    commit_bits: int = 0
    #: the group's committed offset of the queue after this state (the consumer offset a recovery restores)
    committed: int = 0
    #: where the state's newest record is (revive queue, queue offset); -1 before it is written
    revive_qid: int = 0
    ro: int = -1

    @property
    def key(self) -> QueueKey:
        return (self.topic, self.group, self.queue_id)

    def is_acked(self, i: int) -> bool:
        return bool(self.commit_bits >> i & 1)

    @property
    def all_acked(self) -> bool:
        return self.commit_bits == (1 << len(self.offsets)) - 1

    def visible_at(self, i: int) -> int:
        return self.next_visible.get(self.offsets[i], self.pop_time + self.invisible_time)

    def blocks(self, attempt_id: str | None, now: int) -> bool:
        """``OrderInfo.needBlock``: an unacked message of the batch is still invisible (the batch's own attemptId
        never blocks)."""
        if not self.offsets:
            return False
        if self.attempt_id is not None and self.attempt_id == attempt_id:
            return False
        return any(not self.is_acked(i) and now < self.visible_at(i) for i in range(len(self.offsets)))

    def unblock_time(self, now: int) -> int | None:
        """When the queue stops being blocked (the latest visible time of an unacked message), None if it is not."""
        times = [self.visible_at(i) for i in range(len(self.offsets)) if not self.is_acked(i)]
        latest = max(times, default=None)
        return latest if latest is not None and latest > now else None

    def next_offset(self) -> int:
        """``OrderInfo.getNextOffset``: the first unacked offset, the last + 1 once all are acked."""
        for i, offset in enumerate(self.offsets):
            if not self.is_acked(i):
                return offset
        return self.offsets[-1] + 1

    def inflight(self) -> int:
        return sum(1 for i in range(len(self.offsets)) if not self.is_acked(i))

    def to_json(self) -> bytes:
        first = self.offsets[0] if self.offsets else 0
        o = [first] + [x - first for x in self.offsets[1:]] if self.offsets else []
        ot = ",".join(f'"{k}":{v}' for k, v in sorted(self.next_visible.items()))
        oc = ",".join(f'"{k}":{v}' for k, v in sorted(self.consumed.items()))
        attempt = "null" if self.attempt_id is None else _js(self.attempt_id)
        return (f'{{"a":{attempt},"c":{_js(self.group)},"cm":{self.commit_bits},"co":{self.committed},'
                f'"i":{self.invisible_time},"l":{self.last_consume},"o":[{",".join(map(str, o))}],"oc":{{{oc}}},'
                f'"ot":{{{ot}}},"popTime":{self.pop_time},"q":{self.queue_id},"t":{_js(self.topic)},'
                f'"w":{time.time_ns()}}}').encode()

    @classmethod
    def from_json(cls, doc: Mapping[str, Any], revive_qid: int, ro: int) -> OrderState:
        o = [int(x) for x in doc.get("o") or ()]
        offsets = [o[0]] + [o[0] + d for d in o[1:]] if o else []
        return cls(
            topic=str(doc["t"]), group=str(doc["c"]), queue_id=int(doc["q"]), pop_time=int(doc.get("popTime") or 0),
            invisible_time=int(doc.get("i") or 0), offsets=offsets, attempt_id=doc.get("a"),
            next_visible={int(k): int(v) for k, v in (doc.get("ot") or {}).items()},
            consumed={int(k): int(v) for k, v in (doc.get("oc") or {}).items()},
            last_consume=int(doc.get("l") or 0), commit_bits=int(doc.get("cm") or 0), committed=int(doc.get("co") or 0),
            revive_qid=revive_qid, ro=ro,
        )


def decode_state(body: bytes, revive_qid: int, ro: int) -> OrderState:
    return OrderState.from_json(json.loads(body), revive_qid, ro)


#: commitAndNext's answers besides an offset
NOT_FOUND = -1
OTHER_POP = -2


class OrderBook:
    """The order state of every queue FIFO groups pop (one :class:`OrderState` per topic@group@queueId)."""

    def __init__(self) -> None:
        self.states: dict[QueueKey, OrderState] = {}

    def blocked(self, key: QueueKey, attempt_id: str | None, now: int) -> bool:
        state = self.states.get(key)
        return state is not None and state.blocks(attempt_id, now)

    def update(self, key: QueueKey, attempt_id: str | None, pop_time: int, invisible_time: int, offsets: list[int],
               committed: int, now: int) -> OrderState:
        """A new batch of the queue (``ConsumerOrderInfoManager.update``): the offsets read again count one more
        attempt each, unless the request repeats the previous batch's attemptId."""
        old = self.states.get(key)
        consumed: dict[int, int] = {}
        if old is not None:
            if old.attempt_id is not None and old.attempt_id == attempt_id:
                consumed = dict(old.consumed)
            else:
                previous = set(old.offsets)
                consumed = {o: old.consumed.get(o, 0) + 1 for o in offsets if o in previous}
        state = OrderState(key[0], key[1], key[2], pop_time, invisible_time, list(offsets), attempt_id,
                           consumed=consumed, last_consume=now, committed=committed)
        self.states[key] = state
        return state

    @staticmethod
    def count_info(state: OrderState) -> tuple[list[tuple[int, int]], int]:
        """(offset, attempts) of every counted offset, and the queue's least count (0 when a new message is in the
        batch): what ``orderCountInfo`` says."""
        counted = sorted(state.consumed.items())
        least = min((c for _, c in counted), default=0)
        if len(counted) != len(state.offsets):
            least = 0
        return counted, least

    def commit_and_next(self, key: QueueKey, offset: int, pop_time: int) -> int:
        """``commitAndNext``: mark ``offset`` acked; the offset to commit, ``offset + 1`` without a state,
        NOT_FOUND, or OTHER_POP (the batch was popped at another time: nothing to do)."""
        state = self.states.get(key)
        if state is None:
            return offset + 1
        if not state.offsets:
            return NOT_FOUND
        if pop_time != state.pop_time:
            return OTHER_POP
        try:
            i = state.offsets.index(offset)
        except ValueError:
            return NOT_FOUND
        state.commit_bits |= 1 << i
        return state.next_offset()

    def change_visible(self, key: QueueKey, offset: int, pop_time: int, next_visible: int) -> OrderState | None:
        """``updateNextVisibleTime``; the state when changed (None: no such batch)."""
        state = self.states.get(key)
        if state is None or state.pop_time != pop_time:
            return None
        state.next_visible[offset] = next_visible
        return state

    def clear(self, key: QueueKey) -> OrderState | None:
        return self.states.pop(key, None)
