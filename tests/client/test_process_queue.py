"""The process queues' commit offsets: the smallest offset still held, one past the last pulled once empty, for the
per-message queue (orderly) and the batch queue (concurrent) alike."""

from __future__ import annotations

import pytest

from pyrmq.client.message import MessageExt
from pyrmq.client.process_queue import BatchProcessQueue, ProcessQueue


def batch(first: int, n: int) -> list[MessageExt]:
    return [MessageExt("T", b"x" * 10, b"", 0, offset, 0) for offset in range(first, first + n)]


@pytest.mark.parametrize("cls", [ProcessQueue, BatchProcessQueue])
def test_commit_offset_is_the_smallest_held(cls):
    pq = cls()
    a, b = batch(0, 4), batch(4, 4)
    pq.put(a, 4)
    pq.put(b, 10)  # offsets 8 and 9 filtered out by the broker
    assert (pq.count, pq.size, pq.span, pq.committable()) == (8, 80, 9, 0)
    assert pq.remove(b) == 0  # the later batch done first: the commit waits for the first
    assert pq.remove([a[0], a[2]]) == 1  # part of a batch: offset 1 is still held
    assert (pq.count, pq.size, pq.held_offsets()) == (2, 20, [1, 3])
    assert pq.remove([a[1]]) == 3
    assert pq.remove([a[3]]) == 10  # empty: past the filtered-out offsets too
    assert pq.count == 0 and pq.size == 0
    assert pq.remove([]) == -1  # nothing held and nothing removed: no commit to make


def test_batch_queue_overlapping_pull_holds_each_offset_once_in_order():
    pq = BatchProcessQueue()
    first = batch(0, 4)
    pq.put(first, 4)
    pq.remove(first[:2])
    again = batch(1, 5)  # a pull from an earlier offset: 2 and 3 are held already, 1 was consumed
    pq.put(again, 6)
    assert pq.held_offsets() == [1, 2, 3, 4, 5]
    assert pq.count == 5 and pq.size == 50
    assert pq.committable() == 1
    assert pq.remove([again[0]]) == 2
    assert pq.remove(again[3:]) == 2
    assert pq.remove(first) == 6
