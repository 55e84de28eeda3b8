"""The read side of :class:`~pyrmq.store.message_store.MessageStore`: pulls through the consume queues, records by
commit-log offset and by key, queue offsets and store times.

Reads never block on writes: they see every record whose ``put_message`` has returned (dispatch is synchronous).

The store's **read bound** (:meth:`StoreReads.set_read_bound`, :meth:`StoreReads.advance_read_bound`; None, the
default, = no bound) is the commit-log offset up to which clients may read: automatic failover keeps it at the
confirm offset, what every in-sync replica holds, so no consumer sees a message a failover could remove. Pulls
(:meth:`StoreReads.get_message`) and a client's key query or read by offset (``visible_only=True``) stop at it;
the broker's own reads (delay levels, timer, transactions) do not. When it changes the store calls the ``visible``
method of the dispatchers that have one (the broker's long-polling wake-up runs the pulls parked in front of it).
With no bound set this costs one ``is None`` test per read and nothing on the append path.
"""

from __future__ import annotations

import functools
import logging
import os
from bisect import bisect_right
from collections.abc import Callable, Iterable
from itertools import accumulate
from operator import add

from .commitlog import CommitLog
from .config import StoreConfig
from .consume_queue import BLANK_SIZE, MAX_RUN, ConsumeQueue, ConsumeQueueStore
from .dispatch import Dispatchers, MessageFilter
from .errors import NotVisibleError
from .format import PROPERTY_KEYS, PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, StoredMessage, decode_message
from .index_file import IndexDispatcher, IndexService
from .mapped_file import MappedFile
from .results import GetMessageResult, GetMessageStatus, QueryMessageResult

log = logging.getLogger("pyrmq.store")

#: Java caps QUERY_MESSAGE at ``maxMsgsNumBatch`` = 64
MAX_QUERY_NUM = 64


@functools.cache
def _memory_bytes() -> int:
    """Physical memory (Java's StoreUtil.TOTAL_PHYSICAL_MEMORY_SIZE)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 * 1024**3


class _CallableFilter:
    """Adapts ``f(tags_code, record) -> bool`` to the two-step :class:`MessageFilter`."""

    def __init__(self, f: Callable[[int, memoryview], bool]) -> None:
        self.f = f
        self._tags = 0

    def is_matched_by_consume_queue(self, tags_code: int) -> bool:
        self._tags = tags_code
        return True

    def is_matched_by_commit_log(self, record: memoryview) -> bool:
        return bool(self.f(self._tags, record))


def _readable(units: Iterable[tuple[int, int, int]], top: int) -> list[tuple[int, int, int]] | None:
    """The leading ``units`` whose record ends at or before commit-log offset ``top``; None when the first one is
    already beyond it (the queue has nothing readable yet)."""
    kept: list[tuple[int, int, int]] = []
    for unit in units:
        if unit[0] + unit[1] > top and unit[1] != BLANK_SIZE:
            return kept or None
        kept.append(unit)
    return kept


class StoreReads:
    """Mixed into :class:`~pyrmq.store.message_store.MessageStore`, which sets these attributes."""

    config: StoreConfig
    commit_log: CommitLog
    consume_queues: ConsumeQueueStore
    index: IndexService
    index_dispatcher: IndexDispatcher
    dispatchers: Dispatchers
    #: the commit-log offset up to which clients may read (see the module's docstring); None = everything
    _read_bound: int | None = None

    # -- the read bound ----------------------------------------------------------------------------------------
    @property
    def read_bound(self) -> int | None:
        """The commit-log offset up to which clients may read (a record must end at or before it); None: no bound."""
        return self._read_bound

    def set_read_bound(self, offset: int | None) -> None:
        """Set the read bound, lower or higher (None: no bound, every record readable); the dispatchers' ``visible``
        methods are told when it changed. A replica sets it when it starts (0: nothing is confirmed yet) and when
        its role changes; :meth:`truncate_replica` lowers it to the new end of the log."""
        if offset != self._read_bound:
            self._read_bound = offset
            self._tell_visible(offset)

    def advance_read_bound(self, offset: int) -> None:
        """Move a set read bound forward to ``offset`` (never back; nothing when there is no bound): the confirm
        offset advanced. The dispatchers' ``visible`` methods are told."""
        bound = self._read_bound
        if bound is not None and offset > bound:
            self._read_bound = offset
            self._tell_visible(offset)

    def _tell_visible(self, bound: int | None) -> None:
        for call in self.dispatchers.visible_calls:
            try:
                call(bound)
            except Exception:
                log.exception("store dispatcher %r failed on a read-bound change to %s", call, bound)

    def _visible(self, end: int) -> bool:
        """Whether a record ending at commit-log offset ``end`` is within the read bound."""
        bound = self._read_bound
        return bound is None or end <= bound

    def get_message(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_msg_nums: int,
        message_filter: MessageFilter | Callable[[int, memoryview], bool] | None = None,
        *,
        coalesce: bool = False,
        transfer_caps: tuple[int, int] | None = None,
    ) -> GetMessageResult:
        """Messages of a topic-queue from queue ``offset`` (Java ``DefaultMessageStore.getMessage``, spec 2.3, 7.5).

        At most ``max_msg_nums`` and 32 messages / 256 KiB (at least one message); ``message_filter`` sees the CQ
        tags code first and the record only when the tags code matched. A filter with
        ``is_matched_by_consume_queue_at(tags_code, queue_offset)`` is asked that instead of
        ``is_matched_by_consume_queue`` (Java passes the unit's consume-queue ext for its bloom-filter bitmap).

        With a :attr:`read_bound`, a unit whose record ends beyond it is not there yet: the read stops before it (as
        at the end of the queue: OFFSET_OVERFLOW_ONE at its offset when it is the first one), so a consumer asks
        again, or its long poll is parked, until the bound passes it.

        ``coalesce`` (a pull answer, whose body is the records back to back): without a filter (or with one
        matching everything) the usual read is :meth:`_get_span`, whose ``buffers`` hold one view per run of records
        adjacent in the commit log, ``message_count`` the records, ``queue_offsets`` nothing; what it leaves (a blank
        unit, the read bound, a segment's end) is read record by record, as without ``coalesce``.

        ``transfer_caps``: (messages, bytes) instead of the configured maxTransferCount/BytesOnMessageInMemory."""
        cfg = self.config
        cq = self.consume_queues.get(topic, queue_id)
        if cq is None:
            return GetMessageResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0, 0, 0)
        min_offset = cq.min_offset
        max_offset = cq.max_offset
        if max_offset == 0:
            return GetMessageResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0, min_offset, max_offset)
        if offset < min_offset:
            return GetMessageResult(GetMessageStatus.OFFSET_TOO_SMALL, min_offset, min_offset, max_offset)
        if offset == max_offset:
            return GetMessageResult(GetMessageStatus.OFFSET_OVERFLOW_ONE, offset, min_offset, max_offset)
        if offset > max_offset:
            return GetMessageResult(GetMessageStatus.OFFSET_OVERFLOW_BADLY, max_offset, min_offset, max_offset)
        if message_filter is not None and getattr(message_filter, "matches_everything", False):
            message_filter = None
        if transfer_caps is None:
            max_count = min(max_msg_nums, cfg.max_transfer_count_on_message_in_memory)
            max_bytes = cfg.max_transfer_bytes_on_message_in_memory
        else:
            max_count, max_bytes = min(max_msg_nums, transfer_caps[0]), transfer_caps[1]
        if coalesce and message_filter is None:
            found = self._get_span(cq, offset, min_offset, max_offset, max_count, max_bytes)
            if found is not None:
                return found
        max_units = max(cfg.max_filter_message_count, max_msg_nums * 20) // 20
        units: Iterable[tuple[int, int, int]] | None = cq.units_from(offset, max_units)
        if units is None:
            return GetMessageResult(GetMessageStatus.OFFSET_FOUND_NULL, cq.roll_next_file(offset), min_offset, max_offset)
        if message_filter is not None and not hasattr(message_filter, "is_matched_by_consume_queue"):
            message_filter = _CallableFilter(message_filter)
        # a filter keeping per-unit answers (the broker's SQL92 results computed at dispatch) takes the unit's offset
        cq_check_at = getattr(message_filter, "is_matched_by_consume_queue_at", None)
        buffers: list[memoryview] = []
        queue_offsets: list[int] = []
        total = 0
        scanned = 0
        status = GetMessageStatus.NO_MATCHED_MESSAGE
        skip_below = -1
        files = self.commit_log.queue
        mf = None
        mf_start = mf_end = 0
        last_phy = -1
        bound = self._read_bound
        if bound is not None:
            units = _readable(units, bound)
            if units is None:
                return GetMessageResult(GetMessageStatus.OFFSET_OVERFLOW_ONE, offset, min_offset, max_offset)
        for phy, size, tags_code in units:
            if buffers and (len(buffers) >= max_count or total + size > max_bytes):
                break
            scanned += 1
            last_phy = phy
            if size == BLANK_SIZE or phy < skip_below:
                continue
            if cq_check_at is not None:
                if not cq_check_at(tags_code, offset + scanned - 1):
                    continue
            elif message_filter is not None and not message_filter.is_matched_by_consume_queue(tags_code):
                continue
            if not (mf_start <= phy and phy + size <= mf_end):
                mf = files.find(phy)
                if mf is None or mf.closed:
                    if not buffers:
                        status = GetMessageStatus.MESSAGE_WAS_REMOVING
                    skip_below = phy - phy % files.file_size + files.file_size
                    continue
                mf_start = mf.file_from_offset
                mf_end = mf_start + mf.wrote_position
                if phy + size > mf_end:
                    continue
            pos = phy - mf_start
            view = mf.view[pos : pos + size]  # type: ignore[union-attr]  # set: [mf_start, mf_end) is empty until it is
            # a plain callable was wrapped in a _CallableFilter above
            if message_filter is not None and not message_filter.is_matched_by_commit_log(view):  # type: ignore[union-attr]
                continue
            buffers.append(view)
            queue_offsets.append(offset + scanned - 1)
            total += size
        if buffers:
            status = GetMessageStatus.FOUND
        # DefaultMessageStore: more than accessMessageInMemoryMaxRatio of memory behind -> suggest a slave
        behind = self.commit_log.max_offset - last_phy if last_phy >= 0 else 0
        return GetMessageResult(
            status, offset + scanned, min_offset, max_offset, buffers, queue_offsets, total,
            suggest_pulling_from_slave=behind > _memory_bytes() * cfg.access_message_in_memory_max_ratio / 100,
        )

    def _get_span(
        self, cq: ConsumeQueue, offset: int, min_offset: int, max_offset: int, max_count: int, max_bytes: int
    ) -> GetMessageResult | None:
        """:meth:`get_message` of the usual pull in a few C-level calls, or None to leave it to the loop: the units
        read with one unpack, none blank, all readable, all in one commit-log file; the records one view when they
        lie back to back (a batch's), else a view each."""
        n = min(max_count, max_offset - offset, MAX_RUN)
        if n <= 0:
            return None
        fields = cq.unit_fields(offset, n)
        if not fields:
            return None
        sizes = fields[1::3]
        if BLANK_SIZE in sizes:
            return None
        phys = fields[0::3]
        total = sum(sizes)
        if total > max_bytes:
            sums = list(accumulate(sizes))
            k = max(bisect_right(sums, max_bytes), 1)  # at least one message, as the loop takes
            phys, sizes, total = phys[:k], sizes[:k], sums[k - 1]
        first = phys[0]
        end = phys[-1] + sizes[-1]
        bound = self._read_bound
        if bound is not None and end > bound:
            return None
        mf = self.commit_log.queue.find(first)
        if mf is None or mf.closed:
            return None
        base = mf.file_from_offset
        if end > base + mf.wrote_position:
            return None
        view = mf.view
        ends = list(map(add, phys, sizes))
        if list(phys[1:]) == ends[:-1]:
            buffers = [view[first - base : end - base]]
        else:
            buffers = [view[p - base : e - base] for p, e in zip(phys, ends)]
        count = len(phys)
        behind = self.commit_log.max_offset - phys[-1]
        return GetMessageResult(
            GetMessageStatus.FOUND, offset + count, min_offset, max_offset, buffers, [], total,
            suggest_pulling_from_slave=behind > _memory_bytes() * self.config.access_message_in_memory_max_ratio / 100,
            count=count,
        )

    def look_message_bytes_by_offset(
        self, phy_offset: int, size: int | None = None, *, visible_only: bool = False
    ) -> memoryview | None:
        """The raw record at commit-log ``phy_offset`` (zero-copy), None if there is none. ``visible_only`` (a
        client's read, VIEW_MESSAGE_BY_ID): a record ending beyond the :attr:`read_bound` raises
        :class:`~pyrmq.store.errors.NotVisibleError` (it is there, but not readable yet)."""
        if size is not None and size <= 0:
            return None
        view = self.commit_log.get_record(phy_offset, size)
        if view is None or (size is not None and self.commit_log.record_size_at(phy_offset) != size):
            return None
        if visible_only and not self._visible(phy_offset + len(view)):
            raise NotVisibleError(phy_offset, self._read_bound or 0)
        return view

    select_one_message_by_offset = look_message_bytes_by_offset

    def look_message_by_offset(self, phy_offset: int, size: int | None = None) -> StoredMessage | None:
        """The decoded record at commit-log ``phy_offset`` (what VIEW_MESSAGE_BY_ID needs)."""
        view = self.look_message_bytes_by_offset(phy_offset, size)
        if view is None:
            return None
        return decode_message(view)[0]

    def query_message(
        self, topic: str, key: str, max_num: int, begin: int, end: int, *, visible_only: bool = False
    ) -> QueryMessageResult:
        """Records of ``topic`` whose KEYS contain ``key`` or whose UNIQ_KEY is ``key``, stored in [begin, end] ms
        (QUERY_MESSAGE). Index candidates are checked against the record, so hash collisions are filtered out.
        ``visible_only`` (a client's query): records ending beyond the :attr:`read_bound` are left out (5.x does
        not index a record before the confirm offset passes it); the broker's own lookups see every record."""
        max_num = min(max_num, MAX_QUERY_NUM)
        self.index_dispatcher.drain()
        result = QueryMessageResult(
            index_last_update_timestamp=self.index.last_update_timestamp,
            index_last_update_phyoffset=self.index.end_phy_offset,
        )
        if max_num <= 0:
            return result
        seen = set()
        for phy in self.index.query(topic, key, max_num * 2, begin, end):
            if phy in seen:
                continue  # a key that is both a KEYS entry and the UNIQ_KEY is indexed twice
            seen.add(phy)
            view = self.commit_log.get_record(phy)
            if view is None or visible_only and not self._visible(phy + len(view)):
                continue
            msg = decode_message(view)[0]
            if msg.topic != topic:
                continue
            props = msg.properties
            keys = (props.get(PROPERTY_KEYS) or "").split(" ")
            if key != props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) and key not in keys:
                continue
            result.buffers.append(view)
            if len(result.buffers) >= max_num:
                break
        return result

    # -- offsets and times -------------------------------------------------------------------------------------
    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.consume_queues.get(topic, queue_id)
        return cq.max_offset if cq is not None else 0

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.consume_queues.get(topic, queue_id)
        return cq.min_offset if cq is not None else 0

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        """SEARCH_OFFSET_BY_TIMESTAMP (spec 7.13); 0 for an unknown queue."""
        cq = self.consume_queues.get(topic, queue_id)
        if cq is None:
            return 0
        return cq.get_offset_by_time(timestamp, self.commit_log.store_timestamp_at)

    def get_message_store_timestamp(self, topic: str, queue_id: int, offset: int) -> int:
        cq = self.consume_queues.get(topic, queue_id)
        unit = cq.get_unit(offset) if cq is not None else None
        if unit is None or unit[1] == BLANK_SIZE:
            return -1
        return self.commit_log.store_timestamp_at(unit[0])

    def get_earliest_message_time(self, topic: str, queue_id: int) -> int:
        """Store time at the queue's min offset, -1 if none (GET_EARLIEST_MSG_STORETIME)."""
        cq = self.consume_queues.get(topic, queue_id)
        if cq is None:
            return -1
        return self.get_message_store_timestamp(topic, queue_id, cq.min_offset)

    def get_latest_message_time(self, topic: str, queue_id: int) -> int:
        cq = self.consume_queues.get(topic, queue_id)
        if cq is None or cq.max_offset == 0:
            return -1
        return self.get_message_store_timestamp(topic, queue_id, cq.max_offset - 1)

    def get_earliest_store_time(self) -> int:
        """Store time of the oldest record in the commit log, -1 if empty."""
        first = self.commit_log.queue.first
        if first is None:
            return -1
        return self.commit_log.store_timestamp_at(first.file_from_offset)

    def get_latest_store_time(self) -> int:
        """Store time of the newest record, -1 if empty."""
        cur = self.commit_log._current
        return cur.store_timestamp if cur is not None and cur.store_timestamp else -1

    @property
    def max_phy_offset(self) -> int:
        return self.commit_log.max_offset

    @property
    def min_phy_offset(self) -> int:
        return self.commit_log.min_offset

    @property
    def flushed_phy_offset(self) -> int:
        return self.commit_log.queue.flushed_offset

    def topic_queues(self) -> list[tuple[str, int]]:
        return sorted(self.consume_queues.table)

