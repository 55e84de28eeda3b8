"""Consume queues: per topic-queue arrays of 20-byte units pointing into the commit log (spec 6.3).

``consumequeue/<topic>/<queueId>/<20-digit byte offset>``; the logical (queue) offset of a unit is its byte
offset / 20. Units are ``(long commitLogOffset, int size, long tagsCode)``; a filler ``(0, Integer.MAX_VALUE, 0)``
pads a queue whose first file starts past offset 0.
"""

from __future__ import annotations

import logging
import os
import shutil
import struct
from itertools import chain
from collections.abc import Callable, Iterator, Sequence

from .config import CQ_STORE_UNIT_SIZE, StoreConfig
from .dispatch import DispatchBatch, DispatchRequest
from .format import (
    CQ_BLANK_UNIT,
    CQ_UNIT,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
)
from .mapped_file import MappedFile
from .mapped_file_queue import MappedFileQueue

log = logging.getLogger(__name__)

UNIT = CQ_STORE_UNIT_SIZE
_pack_into = CQ_UNIT.pack_into
_unpack_from = CQ_UNIT.unpack_from
BLANK_SIZE = 0x7FFFFFFF
#: the struct of ``n`` consecutive units, by ``n`` (a batch writes its units with one pack)
_RUNS: dict[int, struct.Struct] = {}
_chain = chain.from_iterable
MAX_RUN = 1024


class ConsumeQueue:
    def __init__(self, topic: str, queue_id: int, directory: str, file_size: int, *, preallocate: bool = False) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.directory = directory
        self.file_size = file_size
        self.queue = MappedFileQueue(directory, file_size, preallocate=preallocate)
        #: end (offset + size) of the last commit-log record this queue points to
        self.max_physic_offset = -1
        #: byte offset of the first valid unit
        self.min_logic_offset = 0
        self._current: MappedFile | None = None

    # -- lifecycle ---------------------------------------------------------------------------------------------
    def load(self) -> None:
        self.queue.load()
        self._current = self.queue.last

    def recover(self) -> None:
        """Find the end of the valid units (Java: offset >= 0 and size > 0) in the last three files."""
        files = self.queue.files
        if not files:
            return
        start = max(0, len(files) - 3)
        end_offset = files[start].file_from_offset
        max_phy = -1
        for mf in files[start:]:
            mm = mf.mm
            pos = 0
            full = True
            while pos < mf.file_size:
                offset, size, _tags = _unpack_from(mm, pos)
                if offset < 0 or size <= 0:
                    full = False
                    break
                if size != BLANK_SIZE:
                    max_phy = offset + size
                pos += UNIT
            end_offset = mf.file_from_offset + pos
            if not full:
                break
        self.queue.truncate(end_offset)
        self._current = self.queue.last
        self.max_physic_offset = max_phy
        if self.min_logic_offset < self.queue.min_offset:
            self.min_logic_offset = self.queue.min_offset
        if not self.queue.files:
            self.min_logic_offset = 0

    def close(self) -> None:
        self.queue.close()
        self._current = None

    def destroy(self) -> None:
        self.queue.destroy()
        self._current = None
        self.max_physic_offset = -1
        self.min_logic_offset = 0

    def flush(self, resident_tail: int | None = None) -> None:
        """Blocking: make the units durable; with ``resident_tail``, then drop the flushed pages but the last
        ``resident_tail`` bytes from the resident set (:meth:`MappedFileQueue.release_flushed`)."""
        self.queue.flush()
        if resident_tail is not None:
            self.queue.release_flushed(resident_tail)

    # -- offsets -----------------------------------------------------------------------------------------------
    @property
    def min_offset(self) -> int:
        return self.min_logic_offset // UNIT

    @property
    def max_offset(self) -> int:
        cur = self._current
        if cur is None:
            return 0
        return (cur.file_from_offset + cur.wrote_position) // UNIT

    # -- write -------------------------------------------------------------------------------------------------
    def put_unit(self, offset: int, size: int, tags_code: int, cq_offset: int) -> None:
        """Write the unit for queue offset ``cq_offset`` (Java ``putMessagePositionInfo``)."""
        if offset + size <= self.max_physic_offset:
            return  # already there (re-dispatch during recovery)
        mf = self._current
        expected = cq_offset * UNIT
        if mf is None or mf.wrote_position >= self.file_size or mf.file_from_offset + mf.wrote_position != expected:
            mf = self._position_for(expected)
            if mf is None:
                return
        _pack_into(mf.mm, mf.wrote_position, offset, size, tags_code)
        mf.wrote_position += UNIT
        self.max_physic_offset = offset + size

    def put_units(self, requests: Sequence[DispatchRequest]) -> None:
        """The units of one batch append (consecutive queue offsets, ascending commit-log offsets): one pack when
        they follow the queue's end in its current file, :meth:`put_unit` each otherwise."""
        n = len(requests)
        first = requests[0]
        mf = self._current
        if (
            n <= MAX_RUN
            and first.commit_log_offset + first.msg_size > self.max_physic_offset
            and mf is not None
            and mf.file_from_offset + mf.wrote_position == first.queue_offset * UNIT
            and mf.wrote_position + n * UNIT <= self.file_size
        ):
            run = _RUNS.get(n)
            if run is None:
                run = _RUNS[n] = struct.Struct(">" + "qiq" * n)
            fields: list[int] = []
            extend = fields.extend
            for r in requests:
                extend((r.commit_log_offset, r.msg_size, r.tags_code))
            run.pack_into(mf.mm, mf.wrote_position, *fields)
            mf.wrote_position += n * UNIT
            last = requests[-1]
            self.max_physic_offset = last.commit_log_offset + last.msg_size
            return
        put = self.put_unit
        for r in requests:
            put(r.commit_log_offset, r.msg_size, r.tags_code, r.queue_offset)

    def put_columns(self, queue_offset: int, offsets: Sequence[int], sizes: Sequence[int], tags_codes: Sequence[int]) -> None:
        """:meth:`put_units` for a batch given as columns (:class:`~pyrmq.store.dispatch.DispatchBatch`): the units
        of queue offsets ``queue_offset``, ``queue_offset + 1`` ... in one pack when they follow the queue's end in
        its current file, :meth:`put_unit` each otherwise."""
        n = len(offsets)
        mf = self._current
        if (
            n <= MAX_RUN
            and offsets[0] + sizes[0] > self.max_physic_offset
            and mf is not None
            and mf.file_from_offset + mf.wrote_position == queue_offset * UNIT
            and mf.wrote_position + n * UNIT <= self.file_size
        ):
            run = _RUNS.get(n)
            if run is None:
                run = _RUNS[n] = struct.Struct(">" + "qiq" * n)
            run.pack_into(mf.mm, mf.wrote_position, *_chain(zip(offsets, sizes, tags_codes)))
            mf.wrote_position += n * UNIT
            self.max_physic_offset = offsets[-1] + sizes[-1]
            return
        put = self.put_unit
        for i, (offset, size, tags_code) in enumerate(zip(offsets, sizes, tags_codes)):
            put(offset, size, tags_code, queue_offset + i)

    def _position_for(self, expected: int) -> MappedFile | None:
        """Slow path: first file, roll-over, duplicate or gap."""
        mf = self._current
        if mf is None:
            # first file of the queue: it starts at the file holding ``expected``; blank units fill the gap
            mf = self.queue.create_file(expected - expected % self.file_size)
            self.min_logic_offset = expected
            self._fill_blank(mf, expected)
            self._current = mf
            return mf
        current = mf.file_from_offset + mf.wrote_position
        if expected < current:
            return None  # duplicate
        if expected > current:
            log.warning(
                "consume queue %s/%d: expected offset %d, writing %d blank units first",
                self.topic, self.queue_id, expected // UNIT, (expected - current) // UNIT,
            )
        while True:
            if mf.wrote_position >= self.file_size:
                mf = self.queue.create_file(mf.file_from_offset + self.file_size)
                self._current = mf
            current = mf.file_from_offset + mf.wrote_position
            if current >= expected:
                return mf
            self._fill_blank(mf, min(expected, mf.file_from_offset + self.file_size))

    @staticmethod
    def _fill_blank(mf: MappedFile, until: int) -> None:
        pos = mf.wrote_position
        end = until - mf.file_from_offset
        while pos < end:
            mf.mm[pos : pos + UNIT] = CQ_BLANK_UNIT
            pos += UNIT
        mf.wrote_position = pos

    # -- read --------------------------------------------------------------------------------------------------
    def get_unit(self, index: int) -> tuple[int, int, int] | None:
        offset = index * UNIT
        if index < self.min_offset:
            return None
        mf = self.queue.find(offset)
        if mf is None:
            return None
        pos = offset - mf.file_from_offset
        if pos + UNIT > mf.wrote_position:
            return None
        return _unpack_from(mf.mm, pos)

    def units_from(self, index: int, max_units: int) -> Iterator[tuple[int, int, int]] | None:
        """Up to ``max_units`` units starting at ``index``, all from the file holding it (None if no file)."""
        offset = index * UNIT
        mf = self.queue.find(offset)
        if mf is None:
            return None
        pos = offset - mf.file_from_offset
        end = min(mf.wrote_position, pos + max_units * UNIT)
        if pos >= end:
            return iter(())
        return CQ_UNIT.iter_unpack(mf.view[pos:end])

    def unit_fields(self, index: int, n: int) -> tuple[int, ...] | None:
        """The fields of up to ``n`` (<= MAX_RUN) units from ``index``, all from the file holding it, flat (phy,
        size, tags code, phy, ...): one unpack. None if no file; empty when the file has no unit there."""
        offset = index * UNIT
        mf = self.queue.find(offset)
        if mf is None:
            return None
        pos = offset - mf.file_from_offset
        k = min(n, (mf.wrote_position - pos) // UNIT)
        if k <= 0:
            return ()
        run = _RUNS.get(k)
        if run is None:
            run = _RUNS[k] = struct.Struct(">" + "qiq" * k)
        return run.unpack_from(mf.mm, pos)

    def roll_next_file(self, index: int) -> int:
        """Queue offset of the first unit of the file after the one holding ``index``."""
        per_file = self.file_size // UNIT
        return index + per_file - index % per_file

    def get_offset_by_time(self, timestamp: int, time_of: Callable[[int], int]) -> int:
        """Queue offset whose record's store time is closest to ``timestamp`` (spec 7.13)."""
        lo, hi = self.min_offset, self.max_offset - 1
        # skip units whose record is gone (deleted segments give -1)
        while lo <= hi:
            unit = self.get_unit(lo)
            if unit is not None and unit[1] != BLANK_SIZE and time_of(unit[0]) >= 0:
                break
            lo += 1
        if lo > hi:
            return 0 if self.max_offset == 0 else self.min_offset
        first, last = lo, hi

        def ts(i: int) -> int:
            unit = self.get_unit(i)
            return time_of(unit[0]) if unit is not None else -1

        while lo <= hi:  # lower bound: first entry with time >= timestamp
            mid = (lo + hi) // 2
            if ts(mid) < timestamp:
                lo = mid + 1
            else:
                hi = mid - 1
        if lo > last:
            return last  # every record is earlier
        if lo == first:
            return first  # every record is later (or the first is an exact hit)
        t_right = ts(lo)
        if t_right == timestamp:
            return lo
        t_left = ts(lo - 1)
        return lo if timestamp - t_left > t_right - timestamp else lo - 1

    # -- recovery / retention ----------------------------------------------------------------------------------
    def truncate_dirty(self, phy_offset: int) -> int:
        """Drop units pointing at or beyond commit-log offset ``phy_offset``; returns how many were dropped."""
        lo, hi = self.min_offset, self.max_offset
        # units are ordered by commit-log offset (blank fillers only precede real ones): binary search
        while lo < hi:
            mid = (lo + hi) // 2
            unit = self.get_unit(mid)
            if unit is not None and unit[1] != BLANK_SIZE and unit[0] + unit[1] > phy_offset:
                hi = mid
            else:
                lo = mid + 1
        dropped = self.max_offset - lo
        if dropped > 0:
            self.queue.truncate(lo * UNIT)
            self._current = self.queue.last
            if not self.queue.files:
                self.min_logic_offset = 0
            # recompute the end of the last remaining real unit
            self.max_physic_offset = -1
            i = lo - 1
            while i >= self.min_offset:
                unit = self.get_unit(i)
                if unit is None:
                    break
                if unit[1] != BLANK_SIZE:
                    self.max_physic_offset = unit[0] + unit[1]
                    break
                i -= 1
        return dropped

    def delete_expired_files(self, min_phy_offset: int) -> int:
        """Delete leading files whose units all point below ``min_phy_offset`` (never the last file)."""
        count = 0
        files = self.queue.files
        while count < len(files) - 1:
            mf = files[count]
            last_offset, last_size, _ = _unpack_from(mf.mm, mf.file_size - UNIT)
            if last_size == BLANK_SIZE or last_offset + last_size > min_phy_offset:
                break
            count += 1
        if count:
            self.queue.remove_first(count)
        self.correct_min_offset(min_phy_offset)
        return count

    def correct_min_offset(self, min_phy_offset: int) -> None:
        """Move ``min_offset`` to the first unit whose record is still in the commit log."""
        first = self.queue.first
        if first is None:
            return
        start = max(self.min_logic_offset, first.file_from_offset)
        pos = start - first.file_from_offset
        while pos < first.wrote_position:
            offset, size, _ = _unpack_from(first.mm, pos)
            if size != BLANK_SIZE and offset >= min_phy_offset:
                break
            pos += UNIT
        self.min_logic_offset = first.file_from_offset + pos


class ConsumeQueueStore:
    """All consume queues of a store."""

    def __init__(self, config: StoreConfig) -> None:
        self.config = config
        self.directory = config.consume_queue_dir
        self.table: dict[tuple[str, int], ConsumeQueue] = {}

    def load(self) -> None:
        if not os.path.isdir(self.directory):
            return
        for topic in sorted(os.listdir(self.directory)):
            tdir = os.path.join(self.directory, topic)
            if not os.path.isdir(tdir):
                continue
            for qid in sorted(os.listdir(tdir)):
                if not qid.lstrip("-").isdigit():
                    continue
                cq = ConsumeQueue(topic, int(qid), os.path.join(tdir, qid), self.config.mapped_file_size_consume_queue,
                                  preallocate=self.config.preallocate_store_files)
                cq.load()
                self.table[(topic, int(qid))] = cq

    def recover(self) -> None:
        for cq in self.table.values():
            cq.recover()

    def get(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.table.get((topic, queue_id))

    def find_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = self.table.get((topic, queue_id))
        if cq is None:
            cq = ConsumeQueue(
                topic, queue_id, os.path.join(self.directory, topic, str(queue_id)),
                self.config.mapped_file_size_consume_queue, preallocate=self.config.preallocate_store_files,
            )
            self.table[(topic, queue_id)] = cq
        return cq

    def max_physic_offset(self) -> int:
        return max((cq.max_physic_offset for cq in self.table.values()), default=-1)

    def flush(self, resident_tail: int | None = None) -> None:
        for cq in list(self.table.values()):
            cq.flush(resident_tail)

    def close(self) -> None:
        for cq in self.table.values():
            cq.close()

    def destroy_queue(self, topic: str, queue_id: int) -> None:
        cq = self.table.pop((topic, queue_id), None)
        if cq is not None:
            cq.destroy()
        tdir = os.path.join(self.directory, topic)
        if os.path.isdir(tdir) and not os.listdir(tdir):
            shutil.rmtree(tdir, ignore_errors=True)


#: transaction types whose records stay in the commit log only: prepared and rolled-back records get no consume-queue
#: unit, so no consumer sees them (spec 6.3); plain and committed records get one
NO_QUEUE_UNIT = frozenset({TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE})


class ConsumeQueueDispatcher:
    """Builds the consume queues: a :class:`~pyrmq.store.dispatch.Dispatcher` with order 0, and the one place that
    decides which records get a consume-queue unit (:data:`NO_QUEUE_UNIT`)."""

    name = "consume_queue"
    order = 0

    def __init__(self, queues: ConsumeQueueStore) -> None:
        self.queues = queues
        self._table = queues.table

    def dispatch(self, request: DispatchRequest) -> None:
        if request.sys_flag & TRANSACTION_TYPE_MASK in NO_QUEUE_UNIT:
            return
        cq = self._table.get((request.topic, request.queue_id)) or self.queues.find_or_create(
            request.topic, request.queue_id
        )
        cq.put_unit(request.commit_log_offset, request.msg_size, request.tags_code, request.queue_offset)

    def dispatch_batch(self, requests: list[DispatchRequest]) -> None:
        """The records of one batch append: one queue, so one lookup, then its units (:meth:`ConsumeQueue.put_units`)."""
        first = requests[0]
        if first.sys_flag & TRANSACTION_TYPE_MASK in NO_QUEUE_UNIT:
            return
        cq = self._table.get((first.topic, first.queue_id)) or self.queues.find_or_create(first.topic, first.queue_id)
        cq.put_units(requests)

    def dispatch_columns(self, batch: DispatchBatch) -> None:
        """A batch put's records as columns: one queue lookup, then :meth:`ConsumeQueue.put_columns`."""
        if batch.sys_flag & TRANSACTION_TYPE_MASK in NO_QUEUE_UNIT:
            return
        cq = self._table.get((batch.topic, batch.queue_id)) or self.queues.find_or_create(batch.topic, batch.queue_id)
        cq.put_columns(batch.queue_offset, batch.offsets, batch.sizes, batch.tags_codes)

    def has_dispatched(self, topic: str, queue_id: int, queue_offset: int, commit_log_offset: int, sys_flag: int) -> bool:
        if sys_flag & TRANSACTION_TYPE_MASK in NO_QUEUE_UNIT:
            return True
        cq = self._table.get((topic, queue_id))
        return cq is not None and queue_offset < cq.max_offset
