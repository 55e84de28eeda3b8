"""Status enums and results of store calls, named after RocketMQ's ``PutMessageStatus`` /
``GetMessageStatus`` (spec 2.3, 2.4) so the broker maps them to response codes one to one."""

from __future__ import annotations

import enum

import attrs

from .format import encode_message_id


class PutMessageStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPEDFILE_FAILED = "CREATE_MAPEDFILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    OS_PAGECACHE_BUSY = "OS_PAGECACHE_BUSY"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"

    @property
    def is_ok(self) -> bool:
        """True when the message is stored (the three "stored but ..." statuses included, spec 2.4)."""
        return self in _STORED


_STORED = frozenset(
    {
        PutMessageStatus.PUT_OK,
        PutMessageStatus.FLUSH_DISK_TIMEOUT,
        PutMessageStatus.FLUSH_SLAVE_TIMEOUT,
        PutMessageStatus.SLAVE_NOT_AVAILABLE,
    }
)


class GetMessageStatus(enum.Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@attrs.define(slots=True)
class AppendMessageResult:
    """Where an append went. For a batch: first offset / queue offset, total bytes, ``msg_num`` records."""

    wrote_offset: int
    wrote_bytes: int
    queue_offset: int
    store_timestamp: int
    store_ip: bytes
    store_port: int
    msg_num: int = 1
    #: commit-log offsets of every record of a batch (None for a single message)
    offsets: list[int] | None = None

    @property
    def end_offset(self) -> int:
        """Absolute commit-log offset just after the appended bytes (what a sync flush waits for)."""
        return self.wrote_offset + self.wrote_bytes

    @property
    def msg_id(self) -> str:
        """Offset message id (spec 5.9); comma-joined for a batch (spec 5.8)."""
        if self.offsets is None:
            return encode_message_id(self.store_ip, self.store_port, self.wrote_offset)
        # the store host part is the same for every id: hex it once, then each offset as 16 hex digits
        prefix = encode_message_id(self.store_ip, self.store_port, 0)[:-16]
        return ",".join([f"{prefix}{o:016X}" for o in self.offsets])


@attrs.define(slots=True)
class PutMessageResult:
    status: PutMessageStatus
    append: AppendMessageResult | None = None
    #: human-readable reason when the status is not PUT_OK (e.g. "disk full: 93% used >= 90%")
    remark: str = ""

    @property
    def is_ok(self) -> bool:
        return self.status.is_ok


@attrs.define(slots=True)
class GetMessageResult:
    status: GetMessageStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    #: zero-copy views of the stored records, in queue order; ``b"".join(buffers)`` is the pull body
    buffers: list[memoryview] = attrs.field(factory=list)
    queue_offsets: list[int] = attrs.field(factory=list)
    buffer_total_size: int = 0
    suggest_pulling_from_slave: bool = False
    #: the number of records when ``buffers`` holds runs of adjacent records (a coalesced read); -1: one view each
    count: int = -1

    @property
    def message_count(self) -> int:
        return len(self.buffers) if self.count < 0 else self.count

    def body(self) -> bytes:
        return b"".join(self.buffers)

    def release(self) -> None:
        """Drop the views early (lets retention unmap a segment right away)."""
        for b in self.buffers:
            if isinstance(b, memoryview):
                b.release()
        self.buffers = []
        if self.count >= 0:
            self.count = 0


@attrs.define(slots=True)
class QueryMessageResult:
    buffers: list[memoryview] = attrs.field(factory=list)
    index_last_update_timestamp: int = 0
    index_last_update_phyoffset: int = 0

    @property
    def message_count(self) -> int:
        return len(self.buffers)

    def body(self) -> bytes:
        return b"".join(self.buffers)
