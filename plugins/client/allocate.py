"""Queue allocation strategies of the client's rebalance, as a plugin of ``pyrmq_register_allocate_strategies``
(spec 7.10; Java ``AllocateMessageQueueAveragely``, ``...AveragelyByCircle``, ``...ConsistentHash``,
``...ByConfig``, ``...ByMachineRoom``).

A strategy is called ``strategy(consumer_group, current_cid, mq_all, cid_all)`` and returns the queues
``current_cid`` consumes. Queues are anything with ``topic``, ``broker_name`` and ``queue_id`` (the client's
``MessageQueue``). Like the Java client we sort both lists first and give nothing to a client id that is not in
``cid_all``, so every member of a group computes the same split.

``CONFIG`` and ``MACHINE_ROOM`` need settings; the registered objects carry none (CONFIG gives nothing, MACHINE_ROOM
knows no room) and a consumer configures its own copy with ``with_options(...)``:
``PushConsumer(..., allocate_strategy="MACHINE_ROOM", allocate_options={"rooms": ["hz"]})``.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Iterable, Sequence
from typing import Any

from pyrmq.kernel.hookspecs import hookimpl

__all__ = [
    "allocate_averagely",
    "allocate_averagely_by_circle",
    "AllocateConsistentHash",
    "AllocateByConfig",
    "AllocateByMachineRoom",
    "STRATEGIES",
]


def _mq_key(mq: Any) -> tuple[str, str, int]:
    return (mq.topic, mq.broker_name, mq.queue_id)


def _prepare(current_cid: str, mq_all: Sequence[Any], cid_all: Sequence[str]) -> tuple[list[Any], list[str], int]:
    """Sorted queues and client ids, and the index of ``current_cid`` (-1 when it is not a member)."""
    mqs = sorted(mq_all, key=_mq_key)
    cids = sorted(set(cid_all))
    try:
        index = cids.index(current_cid)
    except ValueError:
        index = -1
    return mqs, cids, index


def allocate_averagely(consumer_group: str, current_cid: str, mq_all: Sequence[Any], cid_all: Sequence[str]) -> list[Any]:
    """Contiguous ranges; the first ``n % c`` clients get one more queue (spec 7.10, "Averagely")."""
    mqs, cids, i = _prepare(current_cid, mq_all, cid_all)
    if i < 0 or not mqs:
        return []
    n, c = len(mqs), len(cids)
    mod = n % c
    if n <= c:
        size = 1
    elif mod > 0 and i < mod:
        size = n // c + 1
    else:
        size = n // c
    start = i * size if mod > 0 and i < mod else i * size + mod
    count = min(size, n - start)
    return [mqs[(start + k) % n] for k in range(max(count, 0))]


def allocate_averagely_by_circle(
    consumer_group: str, current_cid: str, mq_all: Sequence[Any], cid_all: Sequence[str]
) -> list[Any]:
    """Deal the queues like cards: client i takes queues i, i+c, i+2c ... (spec 7.10, "AveragelyByCircle")."""
    mqs, cids, i = _prepare(current_cid, mq_all, cid_all)
    if i < 0:
        return []
    return [mqs[j] for j in range(i, len(mqs)) if j % len(cids) == i]


def _md5_hash(key: str) -> int:
    """First 4 bytes of the MD5 digest, big-endian, unsigned (Java's ConsistentHashRouter.MD5Hash)."""
    return int.from_bytes(hashlib.md5(key.encode("utf-8")).digest()[:4], "big")


def _queue_key(mq: Any) -> str:
    return f"MessageQueue [topic={mq.topic}, brokerName={mq.broker_name}, queueId={mq.queue_id}]"


class AllocateConsistentHash:
    """A hash ring with ``virtual_nodes`` points per client keyed ``"<cid>-<k>"``; a queue goes to the first
    point clockwise from the hash of its Java ``toString()`` (spec 7.10, "ConsistentHash")."""

    name = "CONSISTENT_HASH"

    def __init__(self, virtual_nodes: int = 10) -> None:
        if virtual_nodes < 0:
            raise ValueError("virtual_nodes must be >= 0")
        self.virtual_nodes = virtual_nodes

    def with_options(self, *, virtual_nodes: int = 10) -> AllocateConsistentHash:
        return AllocateConsistentHash(virtual_nodes)

    def __call__(self, consumer_group: str, current_cid: str, mq_all: Sequence[Any], cid_all: Sequence[str]) -> list[Any]:
        mqs, cids, i = _prepare(current_cid, mq_all, cid_all)
        if i < 0:
            return []
        ring: dict[int, str] = {}
        for cid in cids:  # later points overwrite earlier ones on a collision, as Java's TreeMap.put does
            for k in range(self.virtual_nodes):
                ring[_md5_hash(f"{cid}-{k}")] = cid
        if not ring:
            return []
        points = sorted(ring)
        out = []
        for mq in mqs:
            at = bisect.bisect_left(points, _md5_hash(_queue_key(mq)))
            owner = ring[points[at % len(points)]]
            if owner == current_cid:
                out.append(mq)
        return out


class AllocateByConfig:
    """A fixed list of queues, whoever asks (spec 7.10, "ByConfig")."""

    name = "CONFIG"

    def __init__(self, queues: Iterable[Any] = ()) -> None:
        self.queues = list(queues)

    def with_options(self, *, queues: Iterable[Any] = ()) -> AllocateByConfig:
        return AllocateByConfig(queues)

    def __call__(self, consumer_group: str, current_cid: str, mq_all: Sequence[Any], cid_all: Sequence[str]) -> list[Any]:
        return list(self.queues)


class AllocateByMachineRoom:
    """Only queues of brokers named ``<room>@<name>`` whose room is configured, split in blocks of
    ``q // c`` with the ``q % c`` left-overs dealt one each (spec 7.10, "ByMachineRoom")."""

    name = "MACHINE_ROOM"

    def __init__(self, rooms: Iterable[str] = ()) -> None:
        self.rooms = frozenset(rooms)

    def with_options(self, *, rooms: Iterable[str] = ()) -> AllocateByMachineRoom:
        return AllocateByMachineRoom(rooms)

    def __call__(self, consumer_group: str, current_cid: str, mq_all: Sequence[Any], cid_all: Sequence[str]) -> list[Any]:
        mqs, cids, i = _prepare(current_cid, mq_all, cid_all)
        if i < 0:
            return []
        premq = []
        for mq in mqs:
            parts = mq.broker_name.split("@")
            if len(parts) == 2 and parts[0] in self.rooms:
                premq.append(mq)
        c = len(cids)
        mod, rem = len(premq) // c, len(premq) % c
        out = premq[i * mod:i * mod + mod]
        if rem > i:
            out.append(premq[i + mod * c])
        return out


#: what this plugin registers (name -> strategy)
STRATEGIES: dict[str, Any] = {
    "AVG": allocate_averagely,
    "AVG_BY_CIRCLE": allocate_averagely_by_circle,
    "CONSISTENT_HASH": AllocateConsistentHash(),
    "CONFIG": AllocateByConfig(),
    "MACHINE_ROOM": AllocateByMachineRoom(),
}


@hookimpl(trylast=True)
def pyrmq_register_allocate_strategies() -> dict[str, Any]:
    return dict(STRATEGIES)
