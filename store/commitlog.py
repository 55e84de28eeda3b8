"""The commit log: every message of every topic, back to back in fixed-size segments (spec 5.1, 6.2).

The append path packs the record header straight into the mapped segment with one precompiled
``Struct.pack_into``, copies the body and the (cached) topic bytes and properties after it, and never awaits:
it is a few microseconds per message. Durability is the flush policy's job (:mod:`pyrmq.store.flush`).
"""

from __future__ import annotations

import logging
import mmap
import struct
import zlib
from collections.abc import Callable, Iterator, Sequence

import attrs

from .config import StoreConfig
from .format import (
    BLANK,
    BLANK_MAGIC_CODE,
    BORNHOST_V6_FLAG,
    END_FILE_MIN_BLANK_LENGTH,
    HEADER_STRUCTS,
    INT,
    LONG,
    MAX_PROPERTIES_LENGTH,
    MAX_TOPIC_LENGTH,
    MESSAGE_MAGIC_CODE,
    PROPERTY_DELAY_TIME_LEVEL,
    RECORD_FIXED_SIZE,
    SHORT,
    STOREHOSTADDRESS_V6_FLAG,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_TYPE_MASK,
    MessageRecord,
    encode_properties,
    pack_host,
    store_timestamp_pos,
)
from .mapped_file import MappedFile
from .mapped_file_queue import MappedFileQueue
from .results import AppendMessageResult, PutMessageResult, PutMessageStatus

log = logging.getLogger(__name__)

_crc32 = zlib.crc32
#: where the header fields a batch's records share start (SYSFLAG; the 36 bytes before are the record's own)
_SHARED_AT = 36
#: ``pack_into(buffer, position, TOTALSIZE, MAGICCODE, BODYCRC, QUEUEID, FLAG, QUEUEOFFSET, PHYSICALOFFSET, shared
#: bytes, BODYLENGTH)``: a batch record's header
_BatchHeaderPack = Callable[[mmap.mmap, int, int, int, int, int, int, int, int, bytes, int], None]
#: ``pack_into`` of a batch record's header (its own fields, the shared bytes, BODYLENGTH) by shared length
_BATCH_HEADERS: dict[int, _BatchHeaderPack] = {}


def _batch_header(shared_len: int) -> _BatchHeaderPack:
    pack = _BATCH_HEADERS[shared_len] = struct.Struct(f">iIiiiqq{shared_len}si").pack_into
    return pack
_SHORT_pack_into = SHORT.pack_into
_INT_pack_into = INT.pack_into


class AppendRejected(Exception):
    """Internal: the record cannot be appended; carries the put status and a reason."""

    def __init__(self, status: PutMessageStatus, remark: str) -> None:
        super().__init__(remark)
        self.status = status
        self.remark = remark

    def result(self) -> PutMessageResult:
        return PutMessageResult(self.status, None, self.remark)


@attrs.frozen
class RecordHeader:
    """The fields recovery and dispatch need, read without copying the body."""

    pos: int  # absolute commit-log offset
    total_size: int
    body_crc: int
    queue_id: int
    queue_offset: int
    sys_flag: int
    store_timestamp: int
    body_pos: int  # absolute
    body_len: int
    topic: str
    properties_bytes: bytes
    prepared_transaction_offset: int


class CommitLog:
    def __init__(self, config: StoreConfig, clock: Callable[[], int]) -> None:
        self.config = config
        self.clock = clock
        self.queue = MappedFileQueue(config.commit_log_dir, config.mapped_file_size_commit_log,
                                     preallocate=config.preallocate_store_files)
        self.file_size = config.mapped_file_size_commit_log
        self.max_message_size = config.max_message_size
        #: next queue offset per (topic, queue id) (Java ``topicQueueTable``)
        self.topic_queue_table: dict[tuple[str, int], int] = {}
        self._topic_cache: dict[str, bytes] = {}
        self._current: MappedFile | None = None

    # -- lifecycle ---------------------------------------------------------------------------------------------
    def load(self) -> None:
        self.queue.load()
        self._current = self.queue.last

    def close(self) -> None:
        self.queue.close()
        self._current = None

    @property
    def min_offset(self) -> int:
        return self.queue.min_offset

    @property
    def max_offset(self) -> int:
        cur = self._current
        if cur is not None:
            return cur.file_from_offset + cur.wrote_position
        return self.queue.max_offset

    # -- append ------------------------------------------------------------------------------------------------
    def _topic_bytes(self, topic: str) -> bytes:
        tb = self._topic_cache.get(topic)
        if tb is None:
            raw = topic.encode("utf-8")
            if not raw or len(raw) > MAX_TOPIC_LENGTH:
                raise AppendRejected(
                    PutMessageStatus.MESSAGE_ILLEGAL, f"topic must be 1..{MAX_TOPIC_LENGTH} bytes, got {len(raw)}"
                )
            tb = bytes((len(raw),)) + raw
            if len(self._topic_cache) > 100_000:
                self._topic_cache.clear()
            self._topic_cache[topic] = tb
        return tb

    def _segment_for(self, size: int) -> MappedFile:
        """The segment that can take ``size`` more bytes, writing a BLANK filler and rolling when needed."""
        mf = self._current
        if mf is not None and size + END_FILE_MIN_BLANK_LENGTH <= mf.file_size - mf.wrote_position:
            return mf
        if size + END_FILE_MIN_BLANK_LENGTH > self.file_size:
            raise AppendRejected(
                PutMessageStatus.MESSAGE_ILLEGAL,
                f"record of {size} bytes does not fit in a commit-log segment of {self.file_size} bytes",
            )
        if mf is not None and mf.wrote_position < mf.file_size:
            # spec 6.2: an 8-byte BLANK header (bytes left, BLANK magic) ends the file; readers stop there
            left = mf.file_size - mf.wrote_position
            BLANK.pack_into(mf.mm, mf.wrote_position, left, BLANK_MAGIC_CODE)
            mf.wrote_position = mf.file_size
        try:
            mf = self.queue.last_file_for_append(self.max_offset)
        except OSError as exc:
            raise AppendRejected(PutMessageStatus.CREATE_MAPEDFILE_FAILED, f"cannot create segment: {exc}") from exc
        self._current = mf
        return mf

    def append(self, rec: MessageRecord) -> tuple[AppendMessageResult, int, bytes]:
        """Append one record. Returns (result, stored sys flag, stored properties bytes).

        Raises :class:`AppendRejected` when the record is refused (nothing is written then)."""
        props = rec.properties_bytes
        if props is None:
            props = encode_properties(rec.properties).encode("utf-8")
        return self.append_one(
            rec.topic, rec.queue_id, rec.body, rec.flag, props, rec.sys_flag, rec.born_timestamp, rec.born_host,
            rec.store_host, rec.reconsume_times, rec.prepared_transaction_offset,
        )

    def append_one(
        self,
        topic: str,
        queue_id: int,
        body: bytes | memoryview,
        flag: int,
        props: bytes,
        sys_flag: int,
        born_timestamp: int,
        born_host: tuple[str, int],
        store_host: tuple[str, int],
        reconsume_times: int = 0,
        prepared_transaction_offset: int = 0,
    ) -> tuple[AppendMessageResult, int, bytes]:
        """:meth:`append` of one message given as its fields (``props``: the stored properties bytes): the broker's
        single-send path, which builds no record object. Returns and raises as :meth:`append`."""
        tb = self._topic_cache.get(topic) or self._topic_bytes(topic)
        body_len = len(body)
        props_len = len(props)
        if body_len > self.max_message_size:
            raise AppendRejected(
                PutMessageStatus.MESSAGE_ILLEGAL,
                f"message body of {body_len} bytes exceeds maxMessageSize {self.max_message_size}",
            )
        if props_len > MAX_PROPERTIES_LENGTH:
            raise AppendRejected(
                PutMessageStatus.PROPERTIES_SIZE_EXCEEDED,
                f"properties of {props_len} bytes exceed {MAX_PROPERTIES_LENGTH}",
            )
        born_ip, born_port, born_v6 = pack_host(born_host)
        store_ip, store_port, store_v6 = pack_host(store_host)
        if born_v6 or store_v6 or sys_flag & 0x30:
            sys_flag = (sys_flag & ~0x30) | (BORNHOST_V6_FLAG if born_v6 else 0) | (
                STOREHOSTADDRESS_V6_FLAG if store_v6 else 0
            )
        st = HEADER_STRUCTS[(sys_flag >> 4) & 3]
        hsize = st.size
        size = hsize + body_len + len(tb) + 2 + props_len
        tran = sys_flag & TRANSACTION_TYPE_MASK
        if tran == TRANSACTION_NOT_TYPE or tran == TRANSACTION_COMMIT_TYPE:
            key = (topic, queue_id)
            queue_offset = self.topic_queue_table.get(key, 0)
        else:
            key = None
            queue_offset = 0  # prepared / rollback records take no queue offset
        mf = self._current
        if mf is None or size + END_FILE_MIN_BLANK_LENGTH > mf.file_size - mf.wrote_position:
            mf = self._segment_for(size)  # roll over (the check is inlined: this runs once per message)
        mm = mf.mm
        pos = mf.wrote_position
        phys = mf.file_from_offset + pos
        now = self.clock()
        # TOTALSIZE is written last: a record a crash interrupted reads as "no record" (size 0), so recovery
        # moves its bytes aside instead of trusting a half-written tail that the body CRC does not cover
        st.pack_into(
            mm, pos, 0, MESSAGE_MAGIC_CODE, _crc32(body) & 0x7FFFFFFF, queue_id, flag, queue_offset, phys,
            sys_flag, born_timestamp, born_ip, born_port, now, store_ip, store_port, reconsume_times,
            prepared_transaction_offset, body_len,
        )
        p = pos + hsize
        mm[p : p + body_len] = body
        p += body_len
        n = len(tb)
        mm[p : p + n] = tb
        p += n
        _SHORT_pack_into(mm, p, props_len)
        p += 2
        mm[p : p + props_len] = props
        _INT_pack_into(mm, pos, size)
        mf.wrote_position = pos + size
        mf.store_timestamp = now
        if key is not None:
            self.topic_queue_table[key] = queue_offset + 1
        return AppendMessageResult(phys, size, queue_offset, now, store_ip, store_port), sys_flag, props

    def append_batch(self, records: Sequence[MessageRecord]) -> tuple[AppendMessageResult, list[int], int]:
        """Append records of one topic-queue with consecutive queue offsets, all in one segment (spec 5.8).

        Returns what :meth:`append_entries` returns."""
        first = records[0]
        topic = first.topic
        queue_id = first.queue_id
        entries = []
        for rec in records:
            if rec.topic != topic or rec.queue_id != queue_id:
                raise AppendRejected(PutMessageStatus.MESSAGE_ILLEGAL, "a batch must target one topic and queue")
            if PROPERTY_DELAY_TIME_LEVEL in rec.properties:
                raise AppendRejected(PutMessageStatus.MESSAGE_ILLEGAL, "batch messages cannot have a delay level")
            props = rec.properties_bytes
            if props is None:
                props = encode_properties(rec.properties).encode("utf-8")
            entries.append((rec.flag, rec.body, props))
        return self.append_entries(
            topic, queue_id, entries, first.sys_flag, first.born_timestamp, first.born_host, first.store_host,
            first.reconsume_times,
        )

    def append_entries(
        self,
        topic: str,
        queue_id: int,
        entries: Sequence[tuple[int, bytes | memoryview, bytes]],
        sys_flag: int,
        born_timestamp: int,
        born_host: tuple[str, int],
        store_host: tuple[str, int],
        reconsume_times: int = 0,
    ) -> tuple[AppendMessageResult, list[int], int]:
        """Append a batch given as ``(flag, body, stored properties bytes)`` entries that share every other header
        field: the batch path of the broker, which never builds a record object per message. One topic-queue,
        consecutive queue offsets, one segment; each header is packed in place in the segment, the bodies are
        copied straight from the request (a memoryview of it does).

        Returns the result (``offsets``: each record's commit-log offset; queue offsets follow ``queue_offset`` one
        by one), each record's size, and the stored sys flag. Raises :class:`AppendRejected` (nothing written) for
        a transactional or oversized batch."""
        tb = self._topic_cache.get(topic) or self._topic_bytes(topic)
        tlen = len(tb)
        born_ip, born_port, born_v6 = pack_host(born_host)
        store_ip, store_port, store_v6 = pack_host(store_host)
        sys_flag = (sys_flag & ~0x30) | (BORNHOST_V6_FLAG if born_v6 else 0) | (
            STOREHOSTADDRESS_V6_FLAG if store_v6 else 0
        )
        if sys_flag & TRANSACTION_TYPE_MASK:
            raise AppendRejected(PutMessageStatus.MESSAGE_ILLEGAL, "batch messages cannot be transactional")
        st = HEADER_STRUCTS[(sys_flag >> 4) & 3]
        hsize = st.size
        fixed = hsize + tlen + 2
        total = 0
        max_props = 0
        for _flag, body, props in entries:
            plen = len(props)
            if plen > max_props:
                max_props = plen
            total += fixed + len(body) + plen
        if max_props > MAX_PROPERTIES_LENGTH:
            raise AppendRejected(
                PutMessageStatus.PROPERTIES_SIZE_EXCEEDED, f"properties of {max_props} bytes exceed {MAX_PROPERTIES_LENGTH}"
            )
        max_size = self.max_message_size
        if total > max_size:
            raise AppendRejected(
                PutMessageStatus.MESSAGE_ILLEGAL, f"batch of {total} bytes exceeds maxMessageSize {max_size}"
            )
        key = (topic, queue_id)
        queue_offset = first_qoff = self.topic_queue_table.get(key, 0)
        mf = self._segment_for(total)
        mm = mf.mm
        pos = first_pos = mf.wrote_position
        base = mf.file_from_offset
        now = self.clock()
        # the header fields every record of the batch shares (SYSFLAG .. PREPAREDTRANSACTIONOFFSET) packed once:
        # each record's header is then one pack of its own fields around those bytes
        shared = st.pack(
            0, MESSAGE_MAGIC_CODE, 0, queue_id, 0, 0, 0, sys_flag, born_timestamp, born_ip, born_port, now, store_ip,
            store_port, reconsume_times, 0, 0,
        )[_SHARED_AT : hsize - 4]
        pack_into = _BATCH_HEADERS.get(len(shared)) or _batch_header(len(shared))
        offsets: list[int] = []
        sizes: list[int] = []
        add_offset = offsets.append
        add_size = sizes.append
        short_pack = SHORT.pack
        tails: dict[int, bytes] = {}  # topic + properties length, by properties length
        crc32 = _crc32
        first_size = 0
        for flag, body, props in entries:
            body_len = len(body)
            plen = len(props)
            size = fixed + body_len + plen
            phys = base + pos
            if pos == first_pos:
                first_size = size
                size_field = 0  # the first record's TOTALSIZE goes last (see below)
            else:
                size_field = size
            pack_into(
                mm, pos, size_field, MESSAGE_MAGIC_CODE, crc32(body) & 0x7FFFFFFF, queue_id, flag, queue_offset, phys,
                shared, body_len,
            )
            p = pos + hsize
            mm[p : p + body_len] = body
            p += body_len
            tail = tails.get(plen)
            if tail is None:
                tail = tails[plen] = tb + short_pack(plen)
            mm[p : pos + size] = tail + props
            add_offset(phys)
            add_size(size)
            pos += size
            queue_offset += 1
        # the first record's TOTALSIZE goes last: a batch a crash interrupted is all-or-nothing for recovery
        _INT_pack_into(mm, first_pos, first_size)
        mf.wrote_position = pos
        mf.store_timestamp = now
        self.topic_queue_table[key] = queue_offset
        result = AppendMessageResult(base + first_pos, total, first_qoff, now, store_ip, store_port, len(offsets), offsets)
        return result, sizes, sys_flag

    # -- reads -------------------------------------------------------------------------------------------------
    def get_data(self, offset: int, size: int) -> memoryview | None:
        """A zero-copy view of ``size`` bytes at absolute ``offset``; None when not (or no longer) stored."""
        mf = self.queue.find(offset)
        if mf is None:
            return None
        pos = offset - mf.file_from_offset
        if pos + size > mf.wrote_position or size <= 0:
            return None
        return mf.view[pos : pos + size]

    def record_size_at(self, offset: int) -> int | None:
        mf = self.queue.find(offset)
        if mf is None:
            return None
        pos = offset - mf.file_from_offset
        if pos + 8 > mf.wrote_position:
            return None
        size: int
        size, magic = BLANK.unpack_from(mf.mm, pos)
        if magic != MESSAGE_MAGIC_CODE or size < RECORD_FIXED_SIZE or pos + size > mf.wrote_position:
            return None
        return size

    def get_record(self, offset: int, size: int | None = None) -> memoryview | None:
        if size is None:
            size = self.record_size_at(offset)
            if size is None:
                return None
        return self.get_data(offset, size)

    def store_timestamp_at(self, offset: int) -> int:
        """STORETIMESTAMP of the record at ``offset``, -1 when it is gone."""
        mf = self.queue.find(offset)
        if mf is None:
            return -1
        pos = offset - mf.file_from_offset
        if pos + 76 > mf.wrote_position:
            return -1
        sys_flag = INT.unpack_from(mf.mm, pos + 36)[0]
        timestamp: int = LONG.unpack_from(mf.mm, pos + store_timestamp_pos(sys_flag))[0]
        return timestamp

    # -- scanning (recovery, dump) -----------------------------------------------------------------------------
    def read_header(self, mf: MappedFile, pos: int, limit: int, check_crc: bool) -> RecordHeader | int | str:
        """Parse the record at ``pos`` of ``mf`` (Java ``checkMessageAndReturnSize``).

        Returns the header, :data:`END_OF_DATA`, :data:`END_OF_FILE` or a reason string.
        """
        return read_record_header(mf.mm, pos, limit, mf.file_from_offset, check_crc)

    def iter_segment(
        self, mf: MappedFile, start: int = 0, check_crc: bool = False
    ) -> Iterator[RecordHeader | int | str]:
        """Yield headers from ``start`` until a BLANK / end of data (yields its code) or a bad record (the reason)."""
        pos = start
        limit = mf.wrote_position
        while True:
            h = read_record_header(mf.mm, pos, limit, mf.file_from_offset, check_crc)
            yield h
            if not isinstance(h, RecordHeader):
                return
            pos += h.total_size


END_OF_DATA = 0
END_OF_FILE = -1


def read_record_header(
    buf: mmap.mmap | bytes | bytearray | memoryview, pos: int, limit: int, base: int, check_crc: bool
) -> RecordHeader | int | str:
    """Read the record at ``pos`` (relative) of ``buf`` whose valid data ends at ``limit``.

    Returns a :class:`RecordHeader`, :data:`END_OF_DATA` (zeroed space / limit reached), :data:`END_OF_FILE`
    (a BLANK filler: the data goes on in the next segment), or a string saying why the bytes are not a record.
    """
    if pos + 8 > limit:
        return END_OF_DATA
    size, magic = BLANK.unpack_from(buf, pos)
    if magic == BLANK_MAGIC_CODE:
        return END_OF_FILE
    if magic != MESSAGE_MAGIC_CODE:
        if size == 0 and magic == 0:
            return 0
        return f"bad magic code 0x{magic:08X}"
    if size < RECORD_FIXED_SIZE or pos + size > limit:
        return f"bad total size {size}"
    try:
        sys_flag = INT.unpack_from(buf, pos + 36)[0]
        st = HEADER_STRUCTS[(sys_flag >> 4) & 3]
        fields = st.unpack_from(buf, pos)
        crc, queue_id, queue_offset, phys = fields[2], fields[3], fields[5], fields[6]
        store_ts = fields[11]
        prepared = fields[15]
        body_len = fields[16]
        p = pos + st.size
        if body_len < 0 or p + body_len + 3 > pos + size:
            return f"bad body length {body_len}"
        body_pos = p
        p += body_len
        topic_len = buf[p]
        p += 1
        topic = bytes(buf[p : p + topic_len])
        p += topic_len
        props_len = SHORT.unpack_from(buf, p)[0]
        p += 2
        if props_len < 0 or p + props_len != pos + size:
            return f"total size {size} does not match the field lengths"
        props = bytes(buf[p : p + props_len])
    except (struct.error, IndexError) as exc:
        return f"short record: {exc}"
    if phys != base + pos:
        return f"physical offset field {phys} != actual offset {base + pos}"
    if check_crc:
        computed = _crc32(memoryview(buf)[body_pos : body_pos + body_len]) & 0x7FFFFFFF
        if computed != crc:
            return f"body CRC mismatch (stored {crc}, computed {computed})"
    try:
        topic_str = topic.decode("utf-8")
    except UnicodeDecodeError:
        return "topic is not UTF-8"
    return RecordHeader(
        base + pos, size, crc, queue_id, queue_offset, sys_flag, store_ts, base + body_pos, body_len, topic_str,
        props, prepared,
    )
