"""The co-located fast path: read a queue range straight from a broker's store files, read-only (spec 6.2, 6.3).

``consumequeue/<topic>/<queueId>/<20-digit byte offset>`` holds 20-byte units ``(commitLogOffset, size, tagsCode)``;
queue offset ``o`` is at byte ``o * 20``. ``commitlog/<20-digit offset>`` segments hold the records. Both are mapped
``ACCESS_READ`` while the broker keeps writing them (a shared mapping sees its writes); the range to read comes
from the broker (max offset), so every unit in it is already written. Nothing is locked and nothing is written:
the broker's own ``MessageStore`` cannot be opened a second time (it takes the store's lock and recovers).
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator

from pyrmq.store.format import CQ_UNIT, java_string_hash

from .records import Columns, RecordError

UNIT = CQ_UNIT.size
BLANK_SIZE = 0x7FFFFFFF
_MAX_RUN = 4 * 1024 * 1024  # bytes copied out of the mmap at once


class StoreReadError(RuntimeError):
    """The store directory is missing a file or does not hold what the range needs."""


def _segments(directory: str) -> list[tuple[int, str]]:
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted((int(n), os.path.join(directory, n)) for n in names if len(n) == 20 and n.isdigit())


class _Segments:
    """Read-only maps of a directory of fixed-size segment files, opened lazily, found by absolute offset."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.files = _segments(directory)
        self.maps: dict[int, tuple[mmap.mmap, memoryview, int]] = {}

    def find(self, offset: int) -> tuple[int, memoryview, int] | None:
        """(segment start, view, segment size) of the segment holding ``offset``."""
        for attempt in range(2):
            for start, path in reversed(self.files):
                if start <= offset:
                    m = self.maps.get(start)
                    if m is None:
                        try:
                            with open(path, "rb") as f:
                                size = os.fstat(f.fileno()).st_size
                                if size == 0:
                                    return None
                                mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                        except FileNotFoundError:
                            break  # deleted by retention meanwhile: list again
                        m = self.maps[start] = (mm, memoryview(mm), size)
                    if offset < start + m[2]:
                        return start, m[1], m[2]
                    break
            if attempt == 0:
                self.files = _segments(self.directory)  # a segment created after we listed
        return None

    def close(self) -> None:
        for mm, view, _ in self.maps.values():
            view.release()
            mm.close()
        self.maps.clear()


class StoreReader:
    """Reads ``[start, end)`` of one topic queue from a store root directory."""

    def __init__(self, store_root: str, topic: str, queue_id: int) -> None:
        self.root = store_root
        commit_dir = os.path.join(store_root, "commitlog")
        cq_dir = os.path.join(store_root, "consumequeue", topic, str(queue_id))
        if not os.path.isdir(commit_dir):
            raise StoreReadError(f"option 'storePath': {store_root!r} is not a broker store (no commitlog/ directory)")
        self.topic = topic
        self.queue_id = queue_id
        self.commit_log = _Segments(commit_dir)
        self.queue = _Segments(cq_dir)

    def close(self) -> None:
        self.commit_log.close()
        self.queue.close()

    def units(self, start: int, end: int) -> Iterator[tuple[int, int, int, int]]:
        """``(queue offset, commit-log offset, size, tags code)`` for each unit in ``[start, end)``."""
        q = start
        while q < end:
            found = self.queue.find(q * UNIT)
            if found is None:
                raise StoreReadError(
                    f"option 'storePath': {self.root!r} has no consume-queue unit for {self.topic} queue {self.queue_id} "
                    f"offset {q} (is this the store of the broker that serves the queue?)"
                )
            seg_start, view, size = found
            pos = q * UNIT - seg_start
            stop = min(size, (end - q) * UNIT + pos)
            for phy, rec_size, tags_code in CQ_UNIT.iter_unpack(view[pos:stop]):
                if rec_size <= 0:
                    raise StoreReadError(f"{self.topic} queue {self.queue_id}: unit {q} is not written yet in {self.root!r}")
                yield q, phy, rec_size, tags_code
                q += 1

    def read_into(self, cols: Columns, start: int, end: int, tags: frozenset[str] | None, batch_size: int) -> Iterator[Columns]:
        """Decode ``[start, end)`` into ``cols``; yield it whenever it holds ``batch_size`` rows (then a fresh one).

        ``tags`` skips units by their tags code here; the exact tag check is the Arrow filter in ``to_arrow``.
        Units whose records follow each other in the commit log (a producer's batch lands as one run) are copied
        out of the mmap as one chunk and decoded like a pull body."""
        tag_codes = None if tags is None else {java_string_hash(t) for t in tags}
        run_q = run_start = run_end = -1
        run_n = 0
        for q, phy, size, tags_code in self.units(start, end):
            if size == BLANK_SIZE:
                continue  # filler before a queue's first real unit
            if tag_codes is not None and tags_code not in tag_codes:
                continue
            if run_n and phy == run_end and run_q + run_n == q and run_end + size - run_start <= _MAX_RUN:
                run_end += size
                run_n += 1
                continue
            if run_n:
                self._decode_run(cols, run_q, run_n, run_start, run_end)
                if len(cols) >= batch_size:
                    yield cols
                    cols = Columns(cols.topic, cols.broker_name, cols.queue_id)
            run_q, run_start, run_end, run_n = q, phy, phy + size, 1
        if run_n:
            self._decode_run(cols, run_q, run_n, run_start, run_end)
        if len(cols):
            yield cols

    def _decode_run(self, cols: Columns, first_q: int, count: int, start: int, end: int) -> None:
        found = self.commit_log.find(start)
        if found is None or end > found[0] + found[2]:
            raise StoreReadError(
                f"{self.topic} queue {self.queue_id} offset {first_q}: commit-log offset {start} is not in {self.root!r} "
                "(deleted by retention, or not this broker's store)"
            )
        seg_start, view, _ = found
        chunk = bytes(view[start - seg_start : end - seg_start])
        before = len(cols)
        try:
            cols.add_all(chunk, first_q, first_q + count)
        except RecordError as exc:
            raise StoreReadError(f"{self.topic} queue {self.queue_id} offset {first_q}: {exc} in {self.root!r}") from None
        if len(cols) - before != count:
            raise StoreReadError(
                f"option 'storePath': the records for {self.topic} queue {self.queue_id} offsets {first_q}..{first_q + count - 1} "
                f"are not in {self.root!r} where its consume queue points: is this the store of the broker that serves the queue?"
            )
