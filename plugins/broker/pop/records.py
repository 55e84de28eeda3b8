"""The records POP keeps in the revive topic, and their JSON bodies.

``ck`` (:class:`CheckPoint`), ``ack`` and ``bAck`` use 5.5.0's ``PopCheckPoint``, ``AckMsg`` and ``BatchAckMsg``
field names (short JSON names, alphabetical, as fastjson2 writes them), so a Java tool reading the revive topic
understands them. pyrmq differences: a checkpoint's ``bm`` carries the bits acked before it was written (a
checkpoint re-written by compaction; 5.x always writes 0), and a checkpoint with ``n`` 0 (5.x's "mock" checkpoint)
holds only the next pop offset of a queue, and ``rg`` the queue's reset generation (an admin reset of a POP group's
offset writes a checkpoint of the next generation). ``ord`` holds a FIFO queue's order state (5.x's ``OrderInfo`` names plus
``t``, ``c``, ``q`` and ``co``, the committed offset) and ``rof`` the first live offset of a revive queue.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

import attrs

#: (topic, group, queue id): a queue as one group pops it
QueueKey = tuple[str, str, int]
#: a checkpoint's identity: its queue, start offset and pop time (5.x's key less the broker name)
CheckPointKey = tuple[str, str, int, int, int]


@functools.lru_cache(maxsize=4096)
def _js(text: str) -> str:
    """A JSON string literal (names repeat: cached)."""
    return json.dumps(text, ensure_ascii=False)


@attrs.define(eq=False, slots=True)
class CheckPoint:
    """The messages one pop took from one queue (or a changed invisible time of one message): which offsets, when,
    for how long they are invisible, and which were acked since (``acked``: bit i = the i-th message)."""

    topic: str  #: the topic read: the normal topic or the group's retry topic
    group: str
    queue_id: int
    start_offset: int  #: where the pop started reading (the first message may lie further: filters)
    pop_time: int
    invisible_time: int
    diffs: list[int]  #: offset - start_offset of each message
    broker_name: str
    revive_qid: int = 0
    suspend: bool = False
    acked: int = 0
    #: queue offset of this checkpoint's newest record in its revive queue (-1: not written yet)
    ro: int = -1
    re_put: int = 0
    #: the queue's reset generation when written (an admin reset writes a checkpoint of the next one): the queue's
    #: pop offset is the highest next offset of its newest generation
    gen: int = 0
    #: every message acked or revived: nothing left to do
    closed: bool = False
    #: its ``next_offset`` is the highest of its queue: kept live (re-written by compaction) so that recovery finds
    #: the queue's pop offset in the log even once it is closed
    holder: bool = False

    @property
    def num(self) -> int:
        return len(self.diffs)

    @property
    def due(self) -> int:
        """When its unacked messages become visible again (5.x ``reviveTime``)."""
        return self.pop_time + self.invisible_time

    @property
    def key(self) -> CheckPointKey:
        return (self.topic, self.group, self.queue_id, self.start_offset, self.pop_time)

    @property
    def queue_key(self) -> QueueKey:
        return (self.topic, self.group, self.queue_id)

    @property
    def next_offset(self) -> int:
        """The pop offset after this pop (a mock checkpoint: its start offset)."""
        return self.start_offset + (self.diffs[-1] + 1 if self.diffs else 0)

    @property
    def all_acked(self) -> bool:
        return self.acked == (1 << len(self.diffs)) - 1

    def offsets(self) -> list[int]:
        so = self.start_offset
        return [so + d for d in self.diffs]

    def unacked(self) -> list[int]:
        so, acked = self.start_offset, self.acked
        return [so + d for i, d in enumerate(self.diffs) if not acked >> i & 1]

    def ack(self, offset: int) -> bool:
        """Mark the message at ``offset`` acked; True when it was in flight."""
        diff = offset - self.start_offset
        try:
            i = self.diffs.index(diff)
        except ValueError:
            return False
        bit = 1 << i
        if self.acked & bit:
            return False
        self.acked |= bit
        return True

    def to_json(self) -> bytes:
        """5.5.0's PopCheckPoint JSON (``bm``: the bits acked so far)."""
        rp = f',"rp":"{self.re_put}"' if self.re_put else ""
        rg = f',"rg":{self.gen}' if self.gen else ""
        return (f'{{"bm":{self.acked},"bn":{_js(self.broker_name)},"c":{_js(self.group)},"d":[{",".join(map(str, self.diffs))}],'
                f'"it":{self.invisible_time},"n":{len(self.diffs)},"pt":{self.pop_time},"q":{self.queue_id},'
                f'"reviveTime":{self.pop_time + self.invisible_time}{rg},"ro":0{rp},"so":{self.start_offset},'
                f'"sp":{"true" if self.suspend else "false"},"t":{_js(self.topic)}}}').encode()

    @classmethod
    def from_json(cls, doc: Mapping[str, Any], revive_qid: int, ro: int) -> CheckPoint:
        so = int(doc["so"])
        diffs = [int(d) for d in doc.get("d") or ()]
        n = int(doc.get("n") or 0)
        if not diffs and n:
            diffs = list(range(n))  # 5.x's older contiguous form
        return cls(
            topic=str(doc["t"]), group=str(doc["c"]), queue_id=int(doc["q"]), start_offset=so,
            pop_time=int(doc["pt"]), invisible_time=int(doc["it"]), diffs=diffs, broker_name=str(doc.get("bn") or ""),
            revive_qid=revive_qid, suspend=bool(doc.get("sp")), acked=int(doc.get("bm") or 0), ro=ro,
            re_put=int(doc.get("rp") or 0), gen=int(doc.get("rg") or 0),
        )


def ack_json(topic: str, group: str, queue_id: int, start_offset: int, pop_time: int, broker_name: str,
             ack_offset: int) -> bytes:
    """5.5.0's AckMsg JSON."""
    return (f'{{"ao":{ack_offset},"bn":{_js(broker_name)},"c":{_js(group)},"pt":{pop_time},"q":{queue_id},'
            f'"so":{start_offset},"t":{_js(topic)}}}').encode()


def batch_ack_json(topic: str, group: str, queue_id: int, start_offset: int, pop_time: int, broker_name: str,
                   offsets: list[int]) -> bytes:
    """5.5.0's BatchAckMsg JSON (``ao`` -1, ``aol`` the acked offsets)."""
    return (f'{{"ao":-1,"aol":[{",".join(map(str, offsets))}],"bn":{_js(broker_name)},"c":{_js(group)},'
            f'"pt":{pop_time},"q":{queue_id},"so":{start_offset},"t":{_js(topic)}}}').encode()


def acked_offsets(doc: Mapping[str, Any]) -> list[int]:
    """The offsets an ``ack`` or ``bAck`` body acks (long names accepted, as 5.x reads them)."""
    many = doc.get("aol", doc.get("ackOffsetList"))
    if many:
        return [int(o) for o in many]
    one = doc.get("ao", doc.get("ackOffset"))
    return [int(one)] if one is not None and int(one) >= 0 else []


def ack_key(doc: Mapping[str, Any]) -> CheckPointKey:
    """The checkpoint an ack record names (long names accepted)."""
    def get(short: str, long: str) -> Any:
        value = doc.get(short)
        return doc[long] if value is None else value

    return (str(get("t", "topic")), str(get("c", "consumerGroup")), int(get("q", "queueId")),
            int(get("so", "startOffset")), int(get("pt", "popTime")))


def revive_offset_json(offset: int) -> bytes:
    return f'{{"r":{offset}}}'.encode()
