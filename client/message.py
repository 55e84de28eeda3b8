"""The client's records: ``Message`` (to send), ``MessageExt`` (received), ``MessageQueue``, ``SendResult``,
``PullResult`` (spec 3.2, 5.1-5.5, 5.9), and the fast decoder of pull/query bodies.

Properties (spec 5.3) split in two on a ``Message``: the system ones are attributes (``tags``, ``keys``,
``delay_time_level``, ``wait_store_msg_ok``) and ``properties`` holds the user's own. A received ``MessageExt``
carries every property of the stored record in ``properties``.
"""

from __future__ import annotations

import enum
import json
import socket
import struct
import zlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from pyrmq.remoting.message import (
    COMPRESSED_FLAG,
    HEADER_STRUCTS,
    decode_properties,
    encode_message_id,
    encode_properties,
    find_property,
)
from pyrmq.remoting.vocabulary import SYSTEM_PROPERTIES, MessageProperty

__all__ = [
    "Message",
    "MessageExt",
    "MessageQueue",
    "SendResult",
    "SendStatus",
    "PullResult",
    "PullStatus",
    "decode_messages",
    "encode_properties",
    "parse_properties",
    "raw_tags",
    "SYSTEM_PROPERTIES",
]

P = MessageProperty  # property names (spec 5.3)

#: Java's ``string2messageProperties``: a segment counts only with a non-empty key and value
parse_properties = decode_properties


def _keys(value: str | Iterable[str] | None) -> tuple[str, ...]:
    if value is None or value == ():
        return ()
    if isinstance(value, str):
        return tuple(value.split()) if value.strip() else ()
    return tuple(str(v) for v in value)


def _body(value: bytes | bytearray | memoryview | str) -> bytes:
    if type(value) is bytes:
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    return bytes(value)


@attrs.frozen(order=True, cache_hash=True)
class MessageQueue:
    """One queue of a topic on one broker; sorts like Java's (topic, brokerName, queueId)."""

    topic: str
    broker_name: str
    queue_id: int

    def __str__(self) -> str:
        # Java's MessageQueue.toString: also the consistent-hash key (spec 7.10)
        return f"MessageQueue [topic={self.topic}, brokerName={self.broker_name}, queueId={self.queue_id}]"

    def to_json(self) -> dict[str, Any]:
        return {"brokerName": self.broker_name, "queueId": self.queue_id, "topic": self.topic}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> MessageQueue:
        return cls(str(data["topic"]), str(data["brokerName"]), int(data["queueId"]))


@attrs.define(slots=True)
class Message:
    """A message to send. ``body`` may be given as text (sent UTF-8).

    ``keys`` (one string of space-separated keys, or a list) are indexed by the broker for queries; ``tags`` is what
    consumers filter on; ``delay_time_level`` 1..18 delays delivery (spec 7.6); ``properties`` are your own
    (names used by the system are refused when sending).
    """

    topic: str
    body: bytes = attrs.field(default=b"", converter=_body)
    tags: str | None = None
    keys: tuple[str, ...] = attrs.field(default=(), converter=_keys)
    flag: int = 0
    delay_time_level: int = 0
    wait_store_msg_ok: bool = True
    properties: dict[str, str] = attrs.Factory(dict)

    def put_property(self, key: str, value: Any) -> Message:
        self.properties[key] = str(value)
        return self

    def system_properties(self) -> dict[str, str]:
        """The properties the client adds from the attributes (UNIQ_KEY is added at send time)."""
        props: dict[str, str] = {}
        if self.keys:
            props[P.KEYS] = " ".join(self.keys)
        if self.tags:
            props[P.TAGS] = self.tags
        if self.delay_time_level > 0:
            props[P.DELAY_TIME_LEVEL] = str(self.delay_time_level)
        if not self.wait_store_msg_ok:
            props[P.WAIT_STORE_MSG_OK] = "false"
        return props


class SendStatus(enum.Enum):
    """Java's SendStatus: the three non-OK ones mean "stored, but not flushed/replicated in time" (spec 2.2)."""

    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


@attrs.frozen
class SendResult:
    """What a send returns. ``msg_id`` is the client's UNIQ_KEY (comma-joined for a batch); ``offset_msg_id`` is
    the broker's offset message id (spec 3.2, 5.9)."""

    status: SendStatus
    msg_id: str
    offset_msg_id: str
    message_queue: MessageQueue
    queue_offset: int
    region_id: str = "DefaultRegion"
    trace_on: bool = True
    transaction_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status.value,
            "msg_id": self.msg_id,
            "offset_msg_id": self.offset_msg_id,
            "topic": self.message_queue.topic,
            "broker_name": self.message_queue.broker_name,
            "queue_id": self.message_queue.queue_id,
            "queue_offset": self.queue_offset,
        }


_IP_CACHE: dict[bytes, str] = {}
_TOPIC_CACHE: dict[bytes, str] = {}
#: what decode_messages reads of an IPv4/IPv4 header: TOTALSIZE, QUEUEOFFSET, SYSFLAG, BODYLENGTH
_LEAN_V4 = struct.Struct(">i16xq8xi44xi")
assert _LEAN_V4.size == HEADER_STRUCTS[0].size


def _ip(raw: bytes) -> str:
    ip = _IP_CACHE.get(raw)
    if ip is None:
        ip = socket.inet_ntop(socket.AF_INET6 if len(raw) == 16 else socket.AF_INET, raw)
        if len(_IP_CACHE) < 4096:
            _IP_CACHE[raw] = ip
    return ip


#: the fields a decoded ``MessageExt`` fills on first use, from the record's unpacked header (``_head``) and its
#: pull's ``(broker_name, min_offset, max_offset)`` (``_batch``)
_LAZY_FIELDS = frozenset((
    "queue_id", "commit_log_offset", "flag", "sys_flag", "born_timestamp", "born_host", "store_timestamp",
    "store_host", "reconsume_times", "prepared_transaction_offset", "store_size", "body_crc", "broker_name",
    "min_offset", "max_offset",
))


class MessageExt:
    """A received message: a stored record decoded (spec 5.1), body inflated when it was compressed (5.5).

    ``msg_id`` is the UNIQ_KEY when the producer set one (Java's MessageClientExt), else the offset message id;
    ``topic`` is the original topic for a message redelivered from ``%RETRY%<group>`` (spec 7.6). ``properties``
    are parsed from the record on first use (the consumer's hot path rarely needs them all).

    :func:`decode_messages` sets only what the consumer's hot path reads (topic, body, raw properties, queue
    offset); every other field is filled from the record's header on first access (``__getattr__`` runs
    only while a slot is still empty). All fields read and assign as plain attributes.
    """

    __slots__ = (
        "topic", "body", "raw_properties", "queue_id", "queue_offset", "commit_log_offset", "flag", "sys_flag",
        "born_timestamp", "born_host", "store_timestamp", "store_host", "reconsume_times",
        "prepared_transaction_offset", "store_size", "body_crc", "broker_name", "min_offset", "max_offset",
        "_properties", "_head", "_batch",
    )
    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value (as the attrs class was)

    def __init__(
        self,
        topic: str,
        body: bytes,
        raw_properties: bytes,
        queue_id: int,
        queue_offset: int,
        commit_log_offset: int,
        flag: int = 0,
        sys_flag: int = 0,
        born_timestamp: int = 0,
        born_host: tuple[str, int] = ("", 0),
        store_timestamp: int = 0,
        store_host: tuple[str, int] = ("", 0),
        reconsume_times: int = 0,
        prepared_transaction_offset: int = 0,
        store_size: int = 0,
        body_crc: int = 0,
        broker_name: str = "",
        #: the queue's bounds when it was pulled (Java adds them as MIN_OFFSET / MAX_OFFSET properties)
        min_offset: int = -1,
        max_offset: int = -1,
        properties: dict[str, str] | None = None,
    ) -> None:
        self.topic = topic
        self.body = body
        self.raw_properties = raw_properties
        self.queue_id = queue_id
        self.queue_offset = queue_offset
        self.commit_log_offset = commit_log_offset
        self.flag = flag
        self.sys_flag = sys_flag
        self.born_timestamp = born_timestamp
        self.born_host = born_host
        self.store_timestamp = store_timestamp
        self.store_host = store_host
        self.reconsume_times = reconsume_times
        self.prepared_transaction_offset = prepared_transaction_offset
        self.store_size = store_size
        self.body_crc = body_crc
        self.broker_name = broker_name
        self.min_offset = min_offset
        self.max_offset = max_offset
        self._properties = properties

    def __getattr__(self, name: str) -> Any:
        # only reached for an empty slot: a decoded message's lazy fields, filled all at once from its header
        if name not in _LAZY_FIELDS:
            raise AttributeError(f"'MessageExt' object has no attribute {name!r}")
        head = self._head  # the record's header bytes: unpacked only now, with the layout its sys flag names
        (size, _magic, crc, queue_id, flag, _qoff, phys, sys_flag, born_ts, born_ip, born_port, store_ts, store_ip,
         store_port, reconsume, prepared, _body_len) = HEADER_STRUCTS[(head[39] >> 4) & 3].unpack_from(head)
        self._fill(size, crc, queue_id, flag, phys, sys_flag, born_ts, born_ip, born_port, store_ts, store_ip,
                   store_port, reconsume, prepared)
        return object.__getattribute__(self, name)

    def _fill(self, size: int, crc: int, queue_id: int, flag: int, phys: int, sys_flag: int, born_ts: int,
              born_ip: bytes, born_port: int, store_ts: int, store_ip: bytes, store_port: int, reconsume: int,
              prepared: int) -> None:
        def unset(field: str) -> bool:
            try:
                object.__getattribute__(self, field)
            except AttributeError:
                return True
            return False

        values = {
            "queue_id": queue_id, "commit_log_offset": phys, "flag": flag, "sys_flag": sys_flag,
            "born_timestamp": born_ts, "born_host": (_ip(born_ip), born_port), "store_timestamp": store_ts,
            "store_host": (_ip(store_ip), store_port), "reconsume_times": reconsume,
            "prepared_transaction_offset": prepared, "store_size": size, "body_crc": crc,
        }
        values["broker_name"], values["min_offset"], values["max_offset"] = self._batch
        for field, value in values.items():
            if unset(field):  # a field assigned before the first lazy read keeps its assigned value
                object.__setattr__(self, field, value)

    def _fields(self) -> tuple:
        return (self.topic, self.body, self.raw_properties, self.queue_id, self.queue_offset, self.commit_log_offset,
                self.flag, self.sys_flag, self.born_timestamp, self.born_host, self.store_timestamp, self.store_host,
                self.reconsume_times, self.prepared_transaction_offset, self.store_size, self.body_crc,
                self.broker_name, self.min_offset, self.max_offset, self._properties)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._fields() == other._fields()  # type: ignore[attr-defined]

    @property
    def properties(self) -> dict[str, str]:
        props = self._properties
        if props is None:
            props = self._properties = decode_properties(self.raw_properties)
            if self.min_offset >= 0:
                props.setdefault(P.MIN_OFFSET, str(self.min_offset))
                props.setdefault(P.MAX_OFFSET, str(self.max_offset))
        return props

    @property
    def tags(self) -> str | None:
        return self.properties.get(P.TAGS)

    @property
    def keys(self) -> tuple[str, ...]:
        return _keys(self.properties.get(P.KEYS))

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(P.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)

    @property
    def offset_msg_id(self) -> str:
        return encode_message_id(self.store_host[0], self.store_host[1], self.commit_log_offset)

    @property
    def msg_id(self) -> str:
        return self.properties.get(P.UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or self.offset_msg_id

    @property
    def delay_time_level(self) -> int:
        return int(self.properties.get(P.DELAY_TIME_LEVEL) or 0)

    @property
    def message_queue(self) -> MessageQueue:
        return MessageQueue(self.topic, self.broker_name, self.queue_id)

    def user_properties(self) -> dict[str, str]:
        return {k: v for k, v in self.properties.items() if k not in SYSTEM_PROPERTIES}

    def text(self, errors: str = "replace") -> str:
        return self.body.decode("utf-8", errors)

    def to_json(self) -> dict[str, Any]:
        """The ``pyrmq consume --json`` shape."""
        return {
            "topic": self.topic,
            "queue_id": self.queue_id,
            "queue_offset": self.queue_offset,
            "msg_id": self.msg_id,
            "offset_msg_id": self.offset_msg_id,
            "keys": list(self.keys),
            "tags": self.tags,
            "properties": dict(self.properties),
            "body": self.text(),
            "reconsume_times": self.reconsume_times,
            "born_timestamp": self.born_timestamp,
            "store_timestamp": self.store_timestamp,
        }

    def __repr__(self) -> str:
        return (
            f"<MessageExt {self.topic}/{self.broker_name}/{self.queue_id}@{self.queue_offset} id={self.msg_id}"
            f" tags={self.tags!r} keys={self.keys!r} body={len(self.body)}B reconsume={self.reconsume_times}>"
        )

    def dumps(self) -> str:
        return json.dumps(self.to_json(), ensure_ascii=False)


_TAGS_MARK = b"TAGS\x01"


def raw_tags(raw: bytes) -> str | None:
    """The TAGS property straight from the raw properties bytes (the client-side tag re-check): what
    ``MessageExt.tags`` says, without decoding the other properties (:func:`find_property`)."""
    return find_property(raw, _TAGS_MARK)


def decode_messages(
    buf: bytes | bytearray | memoryview, broker_name: str = "", min_offset: int = -1, max_offset: int = -1,
    cls: type[MessageExt] | None = None,
) -> list[MessageExt]:
    """Decode back-to-back stored records (a PULL / QUERY / VIEW body, spec 5.1-5.2) into ``MessageExt``.

    The consumer's hot path: one ``struct`` unpack of the four fields it needs per record (an IPv6 record's body
    length is read again with its own layout), slices of the received ``bytes`` for header, body, topic and
    properties, and a ``MessageExt`` with only the fields the consumer reads set; the rest (hosts, timestamps ...)
    are filled from the header bytes, unpacked on first access, and the properties parsed on first use. No
    validation beyond what a slice needs (a corrupt record raises ``ValueError``). ``cls``: a subclass of
    ``MessageExt`` to build instead (a POP answer's messages carry their receipt handles).
    """
    if type(buf) is not bytes:
        buf = bytes(buf)
    out: list[MessageExt] = []
    append = out.append
    n = len(buf)
    pos = 0
    unpack_v4 = _LEAN_V4.unpack_from
    head_v4 = HEADER_STRUCTS[0].size
    topics = _TOPIC_CACHE
    new = object.__new__
    ext = MessageExt if cls is None else cls
    batch = (broker_name, min_offset, max_offset)
    startswith = buf.startswith
    last_key: bytes | tuple[()] = ()  # the last record's topic length byte and topic (no prefix at first)
    key_len = 0
    last_topic = ""
    try:
        while pos < n:
            size, queue_offset, sys_flag, body_len = unpack_v4(buf, pos)
            p = pos + head_v4
            if sys_flag & 0x30:  # an IPv6 born or store host: another layout
                st = HEADER_STRUCTS[(sys_flag >> 4) & 3]
                body_len = st.unpack_from(buf, pos)[16]
                p = pos + st.size
            if size <= 0:
                raise ValueError(f"bad record size {size}")
            head = buf[pos:p]  # unpacked whole only if a lazy field is read
            body = buf[p:p + body_len]
            p += body_len
            if not startswith(last_key, p):  # the usual case: the same topic as the record before (one compare)
                key_len = 1 + buf[p]
                raw_topic = buf[p + 1:p + key_len]
                topic = topics.get(raw_topic)
                if topic is None:
                    topic = raw_topic.decode("utf-8", "replace")
                    if len(topics) < 4096:
                        topics[raw_topic] = topic
                last_key, last_topic = buf[p:p + key_len], topic
            p += key_len
            props_len = (buf[p] << 8) | buf[p + 1]
            if sys_flag & COMPRESSED_FLAG and ((sys_flag & 0x700) >> 8) in (0, 3):
                body = zlib.decompress(body)
            m = new(ext)
            m.topic = last_topic
            m.body = body
            m.raw_properties = buf[p + 2:p + 2 + props_len]
            m.queue_offset = queue_offset
            m._head = head
            m._batch = batch
            m._properties = None
            append(m)
            pos += size
    except (IndexError, zlib.error, struct.error, ValueError) as exc:
        raise ValueError(f"corrupt message record at byte {pos}: {exc}") from None
    return out


class PullStatus(enum.Enum):
    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


@attrs.frozen
class PullResult:
    """One pull: status, where to pull next, the queue's bounds, and the messages (already tag re-checked)."""

    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: Sequence[MessageExt] = ()
    #: the broker's suggestWhichBrokerId: pull this queue from that broker id next (0 = master)
    suggest_which_broker_id: int = 0
