"""The message-key hash index (spec 6.4): ``index/<yyyyMMddHHmmssSSS>`` files of a 40-byte header, a slot table
and chained 20-byte entries, keyed ``topic#KEY`` (each space-separated KEYS entry) and ``topic#UNIQ_KEY``.

Like Java, the header lives in memory and is written into the file when the file is flushed or closed; a reader
only trusts entries up to the header's ``indexCount``.
"""

from __future__ import annotations

import logging
import mmap
import os
import time
from operator import mul

from .config import StoreConfig
from .dispatch import DispatchRequest
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
from .mapped_file import allocate_file

log = logging.getLogger(__name__)

HEADER_SIZE = INDEX_HEADER.size
ENTRY_SIZE = INDEX_ENTRY.size
INVALID_INDEX = 0
_POW31 = [pow(31, k, 1 << 32) for k in range(64)]
_SUFFIX = 12
_CHUNK = 4
_P4 = pow(31, 4, 1 << 32)
_P8 = pow(31, 8, 1 << 32)
_P12 = pow(31, _SUFFIX, 1 << 32)
_CHUNK_POWERS = tuple(pow(31, _CHUNK - 1 - k, 1 << 32) for k in range(_CHUNK))


def time_millis_to_file_name(ms: int) -> str:
    """``UtilAll.timeMillisToHumanString``: local time ``yyyyMMddHHmmssSSS``."""
    t = time.localtime(ms / 1000)
    return time.strftime("%Y%m%d%H%M%S", t) + f"{ms % 1000:03d}"


class KeyHasher:
    """``abs(("topic#" + key).hashCode())`` with the hash of the key's prefix cached: UNIQ_KEYs of one producer share
    their first 20 hex digits, so only the last 12 characters are hashed per message, as three 4-character chunks
    whose hashes are remembered too (a hex chunk has 65,536 values; a dict lookup is cheaper than 4 multiplies)."""

    def __init__(self, max_cached: int = 65536) -> None:
        self._cache: dict[str, dict[str, int]] = {}
        self._size = 0
        self._max = max_cached
        self._chunks: dict[str, int] = {}

    def __call__(self, topic: str, key: str) -> int:
        if len(key) > _SUFFIX and key.isascii():
            by_topic = self._cache.get(topic)
            prefix = key[:-_SUFFIX]
            h = by_topic.get(prefix) if by_topic is not None else None
            if h is None:
                h = self._remember(topic, prefix)
            chunks = self._chunks
            a = chunks.get(key[-12:-8])
            b = chunks.get(key[-8:-4])
            c = chunks.get(key[-4:])
            if a is None or b is None or c is None:
                a, b, c = self._chunk(key[-12:-8]), self._chunk(key[-8:-4]), self._chunk(key[-4:])
            h = (h * _P12 + a * _P8 + b * _P4 + c) & 0xFFFFFFFF
        else:
            h = self._cache.get(topic, {}).get("")
            if h is None:
                h = self._remember(topic, "")
            n = len(key) if key.isascii() else len(key.encode("utf-16-le")) // 2
            h = (h * pow(31, n, 1 << 32) + unsigned_hash(key)) & 0xFFFFFFFF
        if h & 0x80000000:  # abs() of the signed value; Integer.MIN_VALUE hashes to 0
            h = (1 << 32) - h
            return 0 if h == 0x80000000 else h
        return h

    def hash_keys(self, items: list[tuple[str, str, int, int]]) -> list[int]:
        """The hashes of ``(topic, key, ...)`` items, in order: :meth:`__call__` with the loop inside (the index
        hashes its pending keys in bulk; the common case, a cached prefix and chunks, stays in this frame)."""
        cache = self._cache
        chunks = self._chunks
        out: list[int] = []
        append = out.append
        for item in items:
            topic = item[0]
            key = item[1]
            if len(key) > _SUFFIX and key.isascii():
                by_topic = cache.get(topic)
                h = by_topic.get(key[:-_SUFFIX]) if by_topic is not None else None
                a = chunks.get(key[-12:-8])
                b = chunks.get(key[-8:-4])
                c = chunks.get(key[-4:])
                if h is not None and a is not None and b is not None and c is not None:
                    h = (h * _P12 + a * _P8 + b * _P4 + c) & 0xFFFFFFFF
                    if h & 0x80000000:
                        h = (1 << 32) - h
                        if h == 0x80000000:
                            h = 0
                    append(h)
                    continue
            append(self(topic, key))
        return out

    def _chunk(self, chunk: str) -> int:
        """The Java hash of a 4-character ASCII chunk, remembered."""
        h = self._chunks.get(chunk)
        if h is None:
            if len(self._chunks) >= 2 * self._max:
                self._chunks.clear()
            h = self._chunks[chunk] = sum(map(mul, chunk.encode(), _CHUNK_POWERS))
        return h

    def _remember(self, topic: str, prefix: str) -> int:
        if self._size >= self._max:
            self._cache.clear()
            self._size = 0
        self._size += 1
        h = self._cache.setdefault(topic, {})[prefix] = unsigned_hash(topic + "#" + prefix)
        return h

class IndexFile:
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

    def flush(self) -> None:
        """Blocking: write the header and make the file durable."""
        if self.closed or not self._dirty:
            return
        self._dirty = False
        self.write_header()
        try:
            os.fdatasync(self.fd)
        except OSError:
            if not self.closed:
                raise

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
        h = self.hasher(topic, key)
        f = self._writable_file(store_timestamp)
        if not f.put_key(h, phy_offset, store_timestamp):
            f = self._writable_file(store_timestamp)
            f.put_key(h, phy_offset, store_timestamp)

    def put_many(self, items: list[tuple[str, str, int, int]]) -> None:
        """Index ``(topic, key, phy_offset, store_timestamp)`` tuples: :meth:`IndexFile.put_key` inlined."""
        hasher = self.hasher
        i = 0
        n = len(items)
        while i < n:
            f = self._writable_file(items[i][3])
            mm = f.mm
            slots = f.hash_slot_num
            entries_at = f._entries_at
            count = f.index_count
            room = f.index_num - count
            chunk = items[i : i + room]
            begin = f.begin_timestamp
            slot_count = f.hash_slot_count
            slot_unpack = INDEX_SLOT.unpack_from
            slot_pack = INDEX_SLOT.pack_into
            entry_pack = INDEX_ENTRY.pack_into
            for (_topic, _key, phy, ts), h in zip(chunk, hasher.hash_keys(chunk)):
                slot_pos = HEADER_SIZE + (h % slots) * 4
                slot_value = slot_unpack(mm, slot_pos)[0]
                if slot_value >= count:
                    slot_value = f._live_head(slot_value, count)
                if slot_value <= 0:
                    slot_value = 0
                    slot_count += 1
                if count <= 1:
                    diff = 0
                    begin = f.begin_timestamp = ts
                    f.begin_phy_offset = phy
                else:
                    diff = (ts - begin) // 1000
                    diff = 0 if diff < 0 else (diff if diff < 0x7FFFFFFF else 0x7FFFFFFF)
                entry_pack(mm, entries_at + count * ENTRY_SIZE, h, phy, diff, slot_value)
                slot_pack(mm, slot_pos, count)
                count += 1
            f.index_count = count
            f.hash_slot_count = slot_count
            last = chunk[-1]
            f.end_phy_offset = last[2]
            f.end_timestamp = last[3]
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

    def flush(self) -> None:
        for f in list(self.files[-2:]):
            f.flush()

    def close(self) -> None:
        for f in self.files:
            f.close()


class IndexDispatcher:
    """Builds the index: a :class:`~pyrmq.store.dispatch.Dispatcher` with order 10.

    Keys are queued and written in bulk (every 256 records, and before any query, flush or close), which keeps
    the per-message cost of the append path low; :meth:`drain` makes the index current.
    """

    name = "index"
    order = 10
    BULK = 256

    def __init__(self, service: IndexService) -> None:
        self.service = service
        self._pending: list[tuple] = []
        #: offset of the newest record queued or indexed
        self._last_offset = -1

    def dispatch(self, request: DispatchRequest) -> None:
        if (request.sys_flag & TRANSACTION_TYPE_MASK) == TRANSACTION_ROLLBACK_TYPE:
            return
        offset = request.commit_log_offset
        if offset <= self._last_offset:
            return  # already indexed (recovery replay)
        self._last_offset = offset
        pending = self._pending
        uniq_key = request.uniq_key
        keys = request.keys
        if uniq_key:
            pending.append((request.topic, uniq_key, offset, request.store_timestamp))
        if keys:
            for key in keys.split(KEY_SEPARATOR):
                if key:
                    pending.append((request.topic, key, offset, request.store_timestamp))
        if len(pending) >= self.BULK:
            self.drain()

    def dispatch_batch(self, requests: list[DispatchRequest]) -> None:
        """:meth:`dispatch` for the records of one batch append, in one call."""
        if (requests[0].sys_flag & TRANSACTION_TYPE_MASK) == TRANSACTION_ROLLBACK_TYPE:
            return
        last = self._last_offset
        pending = self._pending
        append = pending.append
        for request in requests:
            offset = request.commit_log_offset
            if offset <= last:
                continue  # already indexed (recovery replay)
            last = offset
            uniq_key = request.uniq_key
            keys = request.keys
            if uniq_key:
                append((request.topic, uniq_key, offset, request.store_timestamp))
            if keys:
                for key in keys.split(KEY_SEPARATOR):
                    if key:
                        append((request.topic, key, offset, request.store_timestamp))
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
