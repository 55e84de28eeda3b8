"""The message-key hash index (spec 6.4): ``index/<yyyyMMddHHmmssSSS>`` files of a 40-byte header, a slot table
and chained 20-byte entries, keyed ``topic#KEY`` (each space-separated KEYS entry) and ``topic#UNIQ_KEY``.

Like Java, the header lives in memory and is written into the file when the file is flushed or closed; a reader
only trusts entries up to the header's ``indexCount``.
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
import time
from collections.abc import Iterable, Sequence
from itertools import repeat

from .config import StoreConfig
from .dispatch import DispatchBatch, DispatchRequest
from .format import (
    INDEX_ENTRY,
    INDEX_HEADER,
    INDEX_SLOT,
    KEY_SEPARATOR,
    TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
    index_key_hash,
    unsigned_hash,
)
from .mapped_file import MADV_DONTNEED, _address, _madvise, allocate_file

log = logging.getLogger(__name__)

HEADER_SIZE = INDEX_HEADER.size
ENTRY_SIZE = INDEX_ENTRY.size
INVALID_INDEX = 0
_MASK = 0xFFFFFFFF
_TAIL = 4
_P_TAIL = pow(31, _TAIL, 1 << 32)
#: most index entries packed by one ``Struct`` (:meth:`IndexService.put_many`)
MAX_RUN = 512
#: ``Struct`` of n entries by n (a handful of sizes recur: the bulk size, a batch's keys; cleared at 64)
_ENTRY_RUNS: dict[int, struct.Struct] = {}


def time_millis_to_file_name(ms: int) -> str:
    """``UtilAll.timeMillisToHumanString``: local time ``yyyyMMddHHmmssSSS``."""
    t = time.localtime(ms / 1000)
    return time.strftime("%Y%m%d%H%M%S", t) + f"{ms % 1000:03d}"


class KeyHasher:
    """``abs(("topic#" + key).hashCode())`` (Java ``IndexFile.indexKeyHashMethod``; ``Integer.MIN_VALUE`` gives 0) in
    one multiply-add per key in the usual case: keys of one producer differ in their last characters only (a
    UNIQ_KEY's last 4 hex digits are a counter, the 28 before them the producer, its process and the millisecond;
    business keys are usually a fixed prefix and a number), so the hash of ``topic#`` and all but the last 4
    characters is remembered per topic, and the hash of the last 4 characters is remembered too (65,536 hex chunks,
    10,000 decimal ones). Other keys (4 characters or less, non-ASCII) are hashed whole (``String.hashCode`` over
    UTF-16 code units). Both caches are bounded and cleared when full.

    The unsigned 32-bit value is :meth:`unsigned`; :meth:`positive` maps it as Java does. The index's batch loop
    (:meth:`IndexDispatcher._queue_keys`) inlines the cached case over :meth:`prefixes` and :attr:`chunks`."""

    def __init__(self, max_cached: int = 65536) -> None:
        self._prefixes: dict[str, dict[str, int]] = {}
        self._size = 0
        self._max = max_cached
        #: prefixes remembered at most: a UNIQ_KEY's changes every millisecond, and only the current one is reused
        #: (a bigger cache would only hold megabytes of stale ones)
        self._max_prefixes = min(max_cached, 4096)
        #: unsigned hash of each 4-character ASCII tail seen (cleared at ``2 * max_cached``)
        self.chunks: dict[str, int] = {}

    def prefixes(self, topic: str) -> dict[str, int]:
        """The remembered ``hash(topic + "#" + key[:-4])`` of ``topic`` by ``key[:-4]`` (a live dict: cleared in
        place when the cache is full)."""
        by_topic = self._prefixes.get(topic)
        if by_topic is None:
            by_topic = self._prefixes[topic] = {}
        return by_topic

    def unsigned(self, topic: str, key: str) -> int:
        """``("topic#" + key).hashCode()`` as an unsigned 32-bit value, remembering what the next keys reuse."""
        if len(key) > _TAIL and key.isascii():
            by_topic = self._prefixes.get(topic) or self.prefixes(topic)
            head = key[:-_TAIL]
            h = by_topic.get(head)
            if h is None:
                if self._size >= self._max_prefixes:
                    for cached in self._prefixes.values():
                        cached.clear()
                    self._size = 0
                self._size += 1
                h = by_topic[head] = unsigned_hash(f"{topic}#{head}")
            tail = key[-_TAIL:]
            c = self.chunks.get(tail)
            if c is None:
                if len(self.chunks) >= 2 * self._max:
                    self.chunks.clear()
                c = self.chunks[tail] = unsigned_hash(tail)
            return (h * _P_TAIL + c) & _MASK
        return unsigned_hash(f"{topic}#{key}")

    @staticmethod
    def positive(h: int) -> int:
        """Java's ``abs`` of the signed value, 0 for ``Integer.MIN_VALUE``."""
        if h & 0x80000000:
            return 0 if h == 0x80000000 else 0x100000000 - h
        return h

    def __call__(self, topic: str, key: str) -> int:
        return self.positive(self.unsigned(topic, key))

    def hash_keys(self, topic: str, keys: list[str]) -> list[int]:
        """The index hashes of ``keys`` of ``topic``, in order (the cached case inlined)."""
        by_topic = self.prefixes(topic)
        chunks = self.chunks
        out: list[int] = []
        append = out.append
        for key in keys:
            if len(key) > _TAIL and key.isascii():
                h = by_topic.get(key[:-_TAIL])
                c = chunks.get(key[-_TAIL:])
                h = self.unsigned(topic, key) if h is None or c is None else (h * _P_TAIL + c) & _MASK
            else:
                h = unsigned_hash(f"{topic}#{key}")
            append((0 if h == 0x80000000 else 0x100000000 - h) if h & 0x80000000 else h)
        return out


class IndexFile:
    # the header fields (spec 6.4), read from the file in __init__
    begin_timestamp: int
    end_timestamp: int
    begin_phy_offset: int
    end_phy_offset: int
    hash_slot_count: int
    index_count: int

    def __init__(self, path: str, hash_slot_num: int, index_num: int, *, create: bool, preallocate: bool = False) -> None:
        self.path = path
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.file_size = HEADER_SIZE + hash_slot_num * 4 + index_num * ENTRY_SIZE
        existed = os.path.exists(path)
        self.fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o644)
        try:
            if os.fstat(self.fd).st_size != self.file_size:
                if not create:
                    raise ValueError(f"{path}: size {os.fstat(self.fd).st_size} != expected {self.file_size}")
                allocate_file(self.fd, self.file_size, preallocate)
            self.mm = mmap.mmap(self.fd, self.file_size)
        except BaseException:
            os.close(self.fd)
            if not existed:  # no half-allocated file left behind (a full disk)
                os.unlink(path)
            raise
        (
            self.begin_timestamp, self.end_timestamp, self.begin_phy_offset, self.end_phy_offset,
            self.hash_slot_count, self.index_count,
        ) = INDEX_HEADER.unpack_from(self.mm, 0)
        if self.index_count <= 0:
            self.index_count = 1  # entry 0 is never used
        self._entries_at = HEADER_SIZE + hash_slot_num * 4
        self._address = _address(self.mm) if _madvise is not None else 0
        #: entry pages below this file position were dropped from the resident set (:meth:`flush`)
        self._released_to = self._entries_at - self._entries_at % 4096
        self._dirty = False
        self.closed = False

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    @property
    def is_full(self) -> bool:
        return self.index_count >= self.index_num

    def put_key(self, key_hash: int, phy_offset: int, store_timestamp: int) -> bool:
        """``IndexFile.putKey`` with an already computed non-negative key hash; False when the file is full."""
        count = self.index_count
        if count >= self.index_num:
            return False
        mm = self.mm
        slot_pos = HEADER_SIZE + (key_hash % self.hash_slot_num) * 4
        slot_value = INDEX_SLOT.unpack_from(mm, slot_pos)[0]
        if slot_value >= count:
            slot_value = self._live_head(slot_value, count)
        if slot_value <= INVALID_INDEX:
            slot_value = INVALID_INDEX
        begin = self.begin_timestamp
        if count <= 1:
            diff = 0
        else:
            diff = (store_timestamp - begin) // 1000
            diff = 0 if diff < 0 else min(diff, 0x7FFFFFFF)
        INDEX_ENTRY.pack_into(mm, self._entries_at + count * ENTRY_SIZE, key_hash, phy_offset, diff, slot_value)
        INDEX_SLOT.pack_into(mm, slot_pos, count)
        if count <= 1:
            self.begin_phy_offset = phy_offset
            self.begin_timestamp = store_timestamp
        if slot_value == INVALID_INDEX:
            self.hash_slot_count += 1
        self.index_count = count + 1
        self.end_phy_offset = phy_offset
        self.end_timestamp = store_timestamp
        self._dirty = True
        return True

    def _live_head(self, slot_value: int, count: int) -> int:
        """A slot pointing past ``indexCount`` was written after the last header flush of a crashed run: follow the
        chain back to the newest entry the header covers (Java drops the whole chain here)."""
        while slot_value >= count:
            if slot_value >= self.index_num:
                return INVALID_INDEX
            prev = INDEX_ENTRY.unpack_from(self.mm, self._entries_at + slot_value * ENTRY_SIZE)[3]
            if prev >= slot_value or prev < 0:
                return INVALID_INDEX
            slot_value = prev
        return slot_value

    def select_phy_offsets(self, key_hash: int, max_num: int, begin: int, end: int) -> list[int]:
        out: list[int] = []
        mm = self.mm
        count = self.index_count
        slot_value = INDEX_SLOT.unpack_from(mm, HEADER_SIZE + (key_hash % self.hash_slot_num) * 4)[0]
        if slot_value >= count:
            slot_value = self._live_head(slot_value, count)
        if slot_value <= INVALID_INDEX or count <= 1:
            return out
        nxt = slot_value
        seen = 0
        while len(out) < max_num and seen <= count:
            seen += 1
            h, phy, diff, prev = INDEX_ENTRY.unpack_from(mm, self._entries_at + nxt * ENTRY_SIZE)
            if diff < 0:
                break
            t = self.begin_timestamp + diff * 1000
            if h == key_hash and begin <= t <= end:
                out.append(phy)
            if prev <= INVALID_INDEX or prev > count or prev == nxt or t < begin:
                break
            nxt = prev
        return out

    def is_time_matched(self, begin: int, end: int) -> bool:
        return not (end < self.begin_timestamp or begin > self.end_timestamp) or self.index_count <= 1

    def write_header(self) -> None:
        INDEX_HEADER.pack_into(
            self.mm, 0, self.begin_timestamp, self.end_timestamp, self.begin_phy_offset, self.end_phy_offset,
            self.hash_slot_count, self.index_count,
        )

    def flush(self, resident_tail: int | None = None) -> None:
        """Blocking: write the header and make the file durable. With ``resident_tail``, the entry pages more than
        that many bytes behind the newest durable entry then leave the process's resident set (they stay in the
        page cache; a query faults them back in): the entries are written in order and read by queries only, so
        the resident part of an index file is its slot table and its tail, however many entries it holds."""
        if self.closed or not self._dirty:
            return
        self._dirty = False
        count = self.index_count
        self.write_header()
        try:
            os.fdatasync(self.fd)
        except OSError:
            if not self.closed:
                raise
            return
        if resident_tail is not None and _madvise is not None:
            end = self._entries_at + count * ENTRY_SIZE - resident_tail
            end -= end % 4096
            if end > self._released_to:
                try:
                    hold = memoryview(self.mm)  # holds the mapping while the advice runs (a concurrent close)
                except ValueError:
                    return
                try:
                    _madvise(self._address + self._released_to, end - self._released_to, MADV_DONTNEED)
                finally:
                    hold.release()
                self._released_to = end

    def close(self) -> None:
        if self.closed:
            return
        self.write_header()
        self.closed = True
        try:
            self.mm.close()
        except BufferError:
            pass
        os.close(self.fd)

    def destroy(self) -> None:
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


class IndexService:
    def __init__(self, config: StoreConfig) -> None:
        self.config = config
        self.directory = config.index_dir
        self.files: list[IndexFile] = []
        self.hasher = KeyHasher()

    def load(self) -> None:
        if not os.path.isdir(self.directory):
            return
        for name in sorted(os.listdir(self.directory)):
            if not (len(name) == 17 and name.isdigit()):
                continue
            path = os.path.join(self.directory, name)
            try:
                f = IndexFile(path, self.config.max_hash_slot_num, self.config.max_index_num, create=False)
            except ValueError as exc:
                log.warning("index file ignored and removed: %s", exc)
                os.unlink(path)
                continue
            self.files.append(f)

    def truncate(self, max_phy_offset: int) -> None:
        """Destroy index files that point beyond the (recovered) commit log; recovery re-indexes those records."""
        while self.files and self.files[-1].end_phy_offset >= max_phy_offset and self.files[-1].index_count > 1:
            f = self.files.pop()
            log.warning("index file %s points beyond the commit log end %d: rebuilding it", f.name, max_phy_offset)
            f.destroy()

    @property
    def end_phy_offset(self) -> int:
        """Records at or after this offset are not indexed yet (-1: nothing is)."""
        for f in reversed(self.files):
            if f.index_count > 1:
                return f.end_phy_offset
        return -1

    @property
    def last_update_timestamp(self) -> int:
        return self.files[-1].end_timestamp if self.files else 0

    def _writable_file(self, now_ms: int) -> IndexFile:
        last = self.files[-1] if self.files else None
        if last is not None and not last.is_full:
            return last
        os.makedirs(self.directory, exist_ok=True)
        ms = now_ms
        while True:
            path = os.path.join(self.directory, time_millis_to_file_name(ms))
            if not os.path.exists(path):
                break
            ms += 1
        f = IndexFile(path, self.config.max_hash_slot_num, self.config.max_index_num, create=True,
                      preallocate=self.config.preallocate_store_files)
        if last is not None:
            f.begin_phy_offset, f.begin_timestamp = last.end_phy_offset, last.end_timestamp
            f.end_phy_offset, f.end_timestamp = last.end_phy_offset, last.end_timestamp
        self.files.append(f)
        return f

    def put(self, topic: str, key: str, phy_offset: int, store_timestamp: int) -> None:
        self.put_many([(self.hasher(topic, key), phy_offset, store_timestamp)])

    def put_many(self, items: list[tuple[int, int, int]]) -> None:
        """Index ``(key hash, phy_offset, store_timestamp)`` entries (hashes from :class:`KeyHasher`), in order:
        :meth:`IndexFile.put_key` inlined, the entries of a run (contiguous in the file) packed by one ``Struct``;
        the slots are still written per entry (a later entry of the run reads an earlier one's slot: remembering
        them in a dict to write each once measured slower, 5,000,000 slots rarely repeat within a run)."""
        i = 0
        n = len(items)
        slot_unpack = INDEX_SLOT.unpack_from
        slot_pack = INDEX_SLOT.pack_into
        while i < n:
            f = self._writable_file(items[i][2])
            mm = f.mm
            slots = f.hash_slot_num
            count = start = f.index_count
            chunk = items[i : i + min(f.index_num - count, MAX_RUN)]
            begin = f.begin_timestamp
            slot_count = f.hash_slot_count
            last_ts = diff = -1
            fields: list[int] = []
            extend = fields.extend
            for h, phy, ts in chunk:
                slot_pos = HEADER_SIZE + (h % slots) * 4
                slot_value = slot_unpack(mm, slot_pos)[0]
                if slot_value >= count:
                    slot_value = f._live_head(slot_value, count)
                if slot_value <= 0:
                    slot_value = 0
                    slot_count += 1
                slot_pack(mm, slot_pos, count)
                if count <= 1:
                    diff = 0
                    begin = f.begin_timestamp = ts
                    f.begin_phy_offset = phy
                    last_ts = -1
                elif ts != last_ts:  # a batch shares one store timestamp
                    last_ts = ts
                    diff = (ts - begin) // 1000
                    diff = 0 if diff < 0 else (diff if diff < 0x7FFFFFFF else 0x7FFFFFFF)
                extend((h, phy, diff, slot_value))
                count += 1
            k = count - start
            run = _ENTRY_RUNS.get(k)
            if run is None:
                if len(_ENTRY_RUNS) >= 64:
                    _ENTRY_RUNS.clear()
                run = _ENTRY_RUNS[k] = struct.Struct(">" + "iqii" * k)
            run.pack_into(mm, f._entries_at + start * ENTRY_SIZE, *fields)
            f.index_count = count
            f.hash_slot_count = slot_count
            last = chunk[-1]
            f.end_phy_offset = last[1]
            f.end_timestamp = last[2]
            f._dirty = True
            i += len(chunk)

    def query(self, topic: str, key: str, max_num: int, begin: int, end: int) -> list[int]:
        """Commit-log offsets of candidates for ``topic#key`` stored in ``[begin, end]`` ms, newest first."""
        h = self.hasher(topic, key)
        out: list[int] = []
        for f in reversed(self.files):
            if f.closed:
                continue
            if f.is_time_matched(begin, end):
                out.extend(f.select_phy_offsets(h, max_num - len(out), begin, end))
            if f.begin_timestamp < begin or len(out) >= max_num:
                break
        return out

    def delete_expired(self, min_phy_offset: int) -> int:
        """Delete index files (never the last) whose entries all point below ``min_phy_offset``."""
        count = 0
        while len(self.files) > 1 and self.files[0].end_phy_offset < min_phy_offset:
            self.files.pop(0).destroy()
            count += 1
        return count

    def flush(self, resident_tail: int | None = None) -> None:
        for f in list(self.files[-2:]):
            f.flush(resident_tail)

    def close(self) -> None:
        for f in self.files:
            f.close()


class IndexDispatcher:
    """Builds the index: a :class:`~pyrmq.store.dispatch.Dispatcher` with order 10.

    Keys are hashed as records come and queued as ``(hash, offset, store time)`` entries, written in bulk (every
    256 entries, and before any query, flush or close), which keeps the per-message cost of the append path low;
    :meth:`drain` makes the index current.
    """

    name = "index"
    order = 10
    BULK = 256

    def __init__(self, service: IndexService) -> None:
        self.service = service
        self.hasher = service.hasher
        self._pending: list[tuple[int, int, int]] = []
        #: offset of the newest record queued or indexed
        self._last_offset = -1

    def dispatch(self, request: DispatchRequest) -> None:
        if (request.sys_flag & TRANSACTION_TYPE_MASK) == TRANSACTION_ROLLBACK_TYPE:
            return
        self._queue_keys(
            request.topic, ((request.commit_log_offset, request.keys, request.uniq_key, request.store_timestamp),)
        )

    def dispatch_batch(self, requests: Sequence[DispatchRequest]) -> None:
        """Queue the index entries of the records of one batch append (one topic)."""
        first = requests[0]
        if (first.sys_flag & TRANSACTION_TYPE_MASK) == TRANSACTION_ROLLBACK_TYPE:
            return
        self._queue_keys(first.topic, [(r.commit_log_offset, r.keys, r.uniq_key, r.store_timestamp) for r in requests])

    def dispatch_columns(self, batch: DispatchBatch) -> None:
        """:meth:`dispatch_batch` for a batch put's records as columns (one store timestamp)."""
        if (batch.sys_flag & TRANSACTION_TYPE_MASK) == TRANSACTION_ROLLBACK_TYPE:
            return
        self._queue_keys(batch.topic, zip(batch.offsets, batch.keys, batch.uniq_keys, repeat(batch.store_timestamp)))

    def _queue_keys(self, topic: str, rows: Iterable[tuple[int, str | None, str | None, int]]) -> None:
        """Queue the entries of ``rows`` (commit-log offset, KEYS, UNIQ_KEY, store timestamp; ascending offsets): for
        each record the UNIQ_KEY, then each non-empty KEYS entry (Java's order), keyed ``topic#key``, the usual key
        hash (see :class:`KeyHasher`) inlined."""
        hasher = self.hasher
        by_topic = hasher.prefixes(topic)
        chunks = hasher.chunks
        last = self._last_offset
        pending = self._pending
        append = pending.append
        todo: list[str] | tuple[str]
        for offset, keys, uniq_key, ts in rows:
            if offset <= last:
                continue  # already indexed (recovery replay)
            last = offset
            if keys:
                todo = keys.split(KEY_SEPARATOR)
                if uniq_key:
                    todo.insert(0, uniq_key)  # Java's order: the UNIQ_KEY first
            elif uniq_key:
                todo = (uniq_key,)
            else:
                continue
            for key in todo:
                if len(key) > _TAIL and key.isascii():
                    h = by_topic.get(key[:-_TAIL])
                    c = chunks.get(key[-_TAIL:])
                    h = hasher.unsigned(topic, key) if h is None or c is None else (h * _P_TAIL + c) & _MASK
                elif key:
                    h = hasher.unsigned(topic, key)
                else:
                    continue
                append(((0 if h == 0x80000000 else 0x100000000 - h) if h & 0x80000000 else h, offset, ts))
        self._last_offset = last
        if len(pending) >= self.BULK:
            self.drain()

    def drain(self) -> None:
        if self._pending:
            pending, self._pending = self._pending, []
            self.service.put_many(pending)

    def has_dispatched(self, topic: str, queue_id: int, queue_offset: int, commit_log_offset: int, sys_flag: int) -> bool:
        return commit_log_offset <= self._last_offset

    def sync_with_service(self) -> None:
        """After recovery changed the index files: restart from what they hold."""
        self._pending = []
        self._last_offset = self.service.end_phy_offset
