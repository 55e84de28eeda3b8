"""Allocation strategies (plugins/client/allocate.py) against the formulas of spec 7.10, and their loading through the
kernel's ``pyrmq_register_allocate_strategies`` hook by the client."""

from __future__ import annotations

import hashlib
import itertools

import pytest

from pyrmq.client import PushConsumer
from pyrmq.client import plugins as client_plugins
from pyrmq.client.errors import ClientError
from pyrmq.client.message import MessageQueue
from pyrmq.kernel.hookspecs import hookimpl
from pyrmq.plugins.client.allocate import (
    AllocateByConfig,
    AllocateByMachineRoom,
    AllocateConsistentHash,
    allocate_averagely,
    allocate_averagely_by_circle,
)


def queues(n: int, brokers=("broker-a",), topic="T") -> list[MessageQueue]:
    per = -(-n // len(brokers))
    out = [MessageQueue(topic, b, q) for b in brokers for q in range(per)]
    return out[:n]


def cids(c: int) -> list[str]:
    return [f"10.0.0.{i}@{i}" for i in range(c)]


def spec_average(n: int, c: int, i: int) -> list[int]:
    """Spec 7.10 "Averagely", literally."""
    mod = n % c
    size = 1 if n <= c else (n // c + 1 if mod > 0 and i < mod else n // c)
    start = i * size if (mod > 0 and i < mod) else i * size + mod
    rng = min(size, n - start)
    return [(start + k) % n for k in range(rng)] if rng > 0 else []


@pytest.mark.parametrize("n,c", [(8, 1), (8, 2), (8, 3), (7, 3), (3, 5), (16, 6), (1, 1), (10, 4), (0, 2)])
def test_averagely_matches_the_spec_and_covers_every_queue_once(n, c):
    mqs = queues(n, ("broker-b", "broker-a"))  # unsorted input: strategies sort like Java's rebalance
    ordered = sorted(mqs)
    got = {cid: allocate_averagely("g", cid, list(reversed(mqs)), list(reversed(cids(c)))) for cid in cids(c)}
    for i, cid in enumerate(sorted(cids(c))):
        assert got[cid] == [ordered[j] for j in spec_average(n, c, i)]
    assigned = list(itertools.chain.from_iterable(got.values()))
    if n >= c:
        assert sorted(assigned) == ordered
        assert max(map(len, got.values())) - min(map(len, got.values())) <= 1


@pytest.mark.parametrize("n,c", [(8, 3), (5, 2), (2, 4), (12, 5)])
def test_averagely_by_circle_deals_queues_like_cards(n, c):
    mqs = sorted(queues(n))
    for i, cid in enumerate(sorted(cids(c))):
        assert allocate_averagely_by_circle("g", cid, mqs, cids(c)) == [mqs[j] for j in range(i, n) if j % c == i]


def test_unknown_client_gets_nothing():
    for strategy in (allocate_averagely, allocate_averagely_by_circle, AllocateConsistentHash(),
                     AllocateByMachineRoom(["hz"])):
        assert strategy("g", "stranger@1", queues(8), cids(2)) == []


def md5_4(key: str) -> int:
    return int.from_bytes(hashlib.md5(key.encode()).digest()[:4], "big")


def test_consistent_hash_matches_a_ring_built_from_the_spec():
    mqs = queues(16, ("broker-a", "broker-b"))
    members = cids(3)
    ring = sorted((md5_4(f"{cid}-{k}"), cid) for cid in sorted(members) for k in range(10))

    def owner(mq: MessageQueue) -> str:
        h = md5_4(f"MessageQueue [topic={mq.topic}, brokerName={mq.broker_name}, queueId={mq.queue_id}]")
        for point, cid in ring:
            if point >= h:
                return cid
        return ring[0][1]

    strategy = AllocateConsistentHash()
    seen = []
    for cid in members:
        mine = strategy("g", cid, mqs, members)
        assert mine == [mq for mq in sorted(mqs) if owner(mq) == cid]
        seen += mine
    assert sorted(seen) == sorted(mqs)


def test_consistent_hash_moves_few_queues_when_a_member_leaves():
    mqs = queues(64, ("broker-a", "broker-b"))
    strategy = AllocateConsistentHash(virtual_nodes=10)
    before = {cid: set(strategy("g", cid, mqs, cids(4))) for cid in cids(4)}
    after = {cid: set(strategy("g", cid, mqs, cids(3))) for cid in cids(3)}
    for cid in cids(3):  # a survivor keeps what it had, and only gains
        assert before[cid] <= after[cid]


def test_by_config_returns_the_configured_queues():
    fixed = [MessageQueue("T", "broker-a", 3), MessageQueue("T", "broker-b", 0)]
    assert AllocateByConfig(fixed)("g", "x@1", queues(8), ["x@1"]) == fixed
    assert AllocateByConfig()("g", "x@1", queues(8), ["x@1"]) == []


@pytest.mark.parametrize("c", [1, 2, 3, 4])
def test_by_machine_room_splits_blocks_and_leftovers_per_spec(c):
    mqs = sorted(queues(10, ("hz@broker-a", "sh@broker-b", "broker-c")))
    strategy = AllocateByMachineRoom(["hz", "sh"])
    premq = [mq for mq in mqs if mq.broker_name.split("@")[0] in ("hz", "sh") and "@" in mq.broker_name]
    mod, rem = len(premq) // c, len(premq) % c
    got = []
    for i, cid in enumerate(sorted(cids(c))):
        mine = strategy("g", cid, mqs, cids(c))
        expected = premq[i * mod:i * mod + mod] + ([premq[i + mod * c]] if rem > i else [])
        assert mine == expected
        got += mine
    assert sorted(got) == sorted(premq)  # every room queue once, none of broker-c


def test_the_client_loads_strategies_through_the_allocate_hook():
    table = client_plugins.allocate_strategies()
    assert {"AVG", "AVG_BY_CIRCLE", "CONSISTENT_HASH", "CONFIG", "MACHINE_ROOM"} <= set(table)
    assert client_plugins.resolve_strategy("avg") is allocate_averagely
    room = client_plugins.resolve_strategy("MACHINE_ROOM", {"rooms": ["hz"]})
    assert room.rooms == frozenset({"hz"})
    with pytest.raises(ClientError, match="no allocation strategy named 'NOPE'"):
        client_plugins.resolve_strategy("NOPE")


class Reverse:
    @hookimpl
    def pyrmq_register_allocate_strategies(self):
        return {"EVERYTHING": lambda group, cid, mq_all, cid_all: list(mq_all), "AVG": lambda *a: ["mine first"]}


@pytest.mark.hook("pyrmq_register_allocate_strategies")
def test_a_plugin_can_add_a_strategy_through_pyrmq_register_allocate_strategies():
    table = client_plugins.allocate_strategies(plugins=[Reverse()])
    assert table["EVERYTHING"]("g", "a", [1, 2], ["a"]) == [1, 2]
    assert table["AVG"]() == ["mine first"]  # the built-in is trylast: a user plugin answers first


def test_each_consumer_loads_its_own_strategies():
    mine = PushConsumer("127.0.0.1:9876", "g1", allocate_strategy="EVERYTHING", plugins=[Reverse()])
    assert mine.allocate("g1", "a", [1, 2], ["a", "b"]) == [1, 2]
    # nothing leaked into the process: a consumer without the plugin neither sees its strategy nor its AVG
    with pytest.raises(ClientError, match="no allocation strategy named 'EVERYTHING'"):
        PushConsumer("127.0.0.1:9876", "g2", allocate_strategy="EVERYTHING")
    assert PushConsumer("127.0.0.1:9876", "g3").allocate is allocate_averagely
