"""RocketMQ's message record on the wire (spec 5.1-5.10): what a pull, query or view answers, what a batch send
carries, and the properties string, host and message-id encodings they use.

The stored message record is also the wire format of pulled, queried and viewed messages, so this module is the one
codec for the client (decoding pull bodies), the broker (decoding batch sends) and the store (which writes and reads
the same bytes in its commit log and re-exports these names from :mod:`pyrmq.store.format`). Everything is
big-endian (Java ``ByteBuffer``). Decoders of untrusted bytes raise :class:`CorruptRecordError`.
"""

from __future__ import annotations

import functools
import socket
import struct
import zlib
from collections.abc import Iterable, Mapping
from operator import mul

import attrs

from .errors import CorruptRecordError
from .vocabulary import MessageProperty, MessageSysFlag

# ---------------------------------------------------------------------------------------------------------------
# Stored message record (spec 5.1), IPv4 born and store hosts:
#
#   0        4        8        12       16       20                28               36       40
#   +--------+--------+--------+--------+--------+-----------------+----------------+--------+
#   |TOTALSIZ| MAGIC  |BODYCRC |QUEUEID |  FLAG  |   QUEUEOFFSET   | PHYSICALOFFSET |SYSFLAG |
#   +--------+--------+--------+--------+--------+-----------------+----------------+--------+
#   40                48       52       56                64       68       72       76
#   +-----------------+--------+--------+-----------------+--------+--------+--------+--------+
#   |  BORNTIMESTAMP  |BORN IP |BORNPORT| STORETIMESTAMP  |STORE IP|STOREPRT|RECONSUM|
#   +-----------------+--------+--------+-----------------+--------+--------+--------+
#   76                84       88            88+b  89+b        89+b+t 91+b+t
#   +-----------------+--------+-- ... --+-----+-- ... --+-----+-- ... --+
#   | PREPARED TX OFF |BODYLEN |  BODY   |TLEN1|  TOPIC  |PLEN2|  PROPS  |
#   +-----------------+--------+-- ... --+-----+-- ... --+-----+-- ... --+
#
# IPv6 hosts (sysFlag 0x10 born / 0x20 store) widen the address from 4 to 16 bytes and shift what follows.
# ---------------------------------------------------------------------------------------------------------------

MESSAGE_MAGIC_CODE = 0xDAA320A7
MESSAGE_MAGIC_CODE_V2 = 0xDAA320AB  # 5.x only; never written (spec 5.1)

# MessageSysFlag bits as plain ints (spec 5.4): records are packed and unpacked per message, where IntFlag
# arithmetic would cost more than the rest of the work
COMPRESSED_FLAG = int(MessageSysFlag.COMPRESSED)
MULTI_TAGS_FLAG = int(MessageSysFlag.MULTI_TAGS)
TRANSACTION_NOT_TYPE = int(MessageSysFlag.TRANSACTION_NOT_TYPE)
TRANSACTION_PREPARED_TYPE = int(MessageSysFlag.TRANSACTION_PREPARED_TYPE)
TRANSACTION_COMMIT_TYPE = int(MessageSysFlag.TRANSACTION_COMMIT_TYPE)
TRANSACTION_ROLLBACK_TYPE = int(MessageSysFlag.TRANSACTION_ROLLBACK_TYPE)
TRANSACTION_TYPE_MASK = int(MessageSysFlag.TRANSACTION_TYPE_MASK)
BORNHOST_V6_FLAG = int(MessageSysFlag.BORNHOST_V6)
STOREHOSTADDRESS_V6_FLAG = int(MessageSysFlag.STOREHOSTADDRESS_V6)

MAX_TOPIC_LENGTH = 127
MAX_PROPERTIES_LENGTH = 32767

NAME_VALUE_SEPARATOR = "\u0001"
PROPERTY_SEPARATOR = "\u0002"

# the property names the codec itself reads (every name: pyrmq.remoting.vocabulary.MessageProperty)
PROPERTY_KEYS = MessageProperty.KEYS
PROPERTY_TAGS = MessageProperty.TAGS
PROPERTY_WAIT_STORE_MSG_OK = MessageProperty.WAIT_STORE_MSG_OK
PROPERTY_DELAY_TIME_LEVEL = MessageProperty.DELAY_TIME_LEVEL
PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX = MessageProperty.UNIQ_CLIENT_MESSAGE_ID_KEYIDX
KEY_SEPARATOR = " "


def _header_struct(born_v6: bool, store_v6: bool) -> struct.Struct:
    born = "16s" if born_v6 else "4s"
    store = "16s" if store_v6 else "4s"
    #          size magic crc qid flag qoff phys sysflag bornts bornip bornport storets storeip storeport
    #          reconsume prepared bodylen
    return struct.Struct(f">iIiiiqqiq{born}iq{store}iiqi")


#: header structs indexed by ``(sys_flag >> 4) & 3``: bit 0 = born host IPv6, bit 1 = store host IPv6
HEADER_STRUCTS = (
    _header_struct(False, False),
    _header_struct(True, False),
    _header_struct(False, True),
    _header_struct(True, True),
)
HEADER = HEADER_STRUCTS[0]
assert HEADER.size == 88, HEADER.size
assert HEADER_STRUCTS[3].size == 88 + 24

#: fixed overhead of an IPv4/IPv4 record without body, topic and properties (spec 5.1: 91 bytes)
RECORD_FIXED_SIZE = HEADER.size + 1 + 2
assert RECORD_FIXED_SIZE == 91

#: the first fields, identical for every host variant
PREFIX = struct.Struct(">iIiiiqqi")  # size magic crc qid flag qoff phys sysflag
assert PREFIX.size == 40

#: TOTALSIZE and MAGICCODE, the first two fields of every record
SIZE_AND_MAGIC = struct.Struct(">iI")

INT = struct.Struct(">i")
LONG = struct.Struct(">q")
SHORT = struct.Struct(">h")
UBYTE = struct.Struct(">B")


def store_timestamp_pos(sys_flag: int) -> int:
    """Position of STORETIMESTAMP inside a record."""
    return 68 if sys_flag & BORNHOST_V6_FLAG else 56


def record_length(body_len: int, topic_len: int, props_len: int, sys_flag: int = 0) -> int:
    """``CommitLog.calMsgLength``."""
    extra = (12 if sys_flag & BORNHOST_V6_FLAG else 0) + (12 if sys_flag & STOREHOSTADDRESS_V6_FLAG else 0)
    return RECORD_FIXED_SIZE + extra + body_len + topic_len + props_len


def body_crc(body: bytes | memoryview) -> int:
    """BODYCRC: CRC32 of the stored body, masked to a non-negative int (``UtilAll.crc32``)."""
    return zlib.crc32(body) & 0x7FFFFFFF


# ---------------------------------------------------------------------------------------------------------------
# Batch send body entry (spec 5.8): int TOTALSIZE, int MAGIC(0), int BODYCRC(0), int FLAG, int BODYLEN + body,
# short PROPERTIESLENGTH + properties
# ---------------------------------------------------------------------------------------------------------------
BATCH_ENTRY_HEAD = struct.Struct(">iiiii")
assert BATCH_ENTRY_HEAD.size == 20


# ---------------------------------------------------------------------------------------------------------------
# Properties (spec 5.3) and the Java String.hashCode (spec 5.6)
# ---------------------------------------------------------------------------------------------------------------


def encode_properties(properties: Mapping[str, str | None]) -> str:
    """``MessageDecoder.messageProperties2String``: no trailing separator, ``None`` values skipped."""
    return PROPERTY_SEPARATOR.join([f"{k}{NAME_VALUE_SEPARATOR}{v}" for k, v in properties.items() if v is not None])


def decode_properties(data: str | bytes | memoryview) -> dict[str, str]:
    """``MessageDecoder.string2messageProperties``, the one properties decoder (the store's dispatch, the broker's
    send paths, the client's messages): an item counts only with a non-empty name (up to its first name-value
    separator) and a non-empty value, so ``TAGS\\x01`` is no item at all; a later duplicate wins (``HashMap.put``).
    :func:`find_property` is the same rule for one name, :func:`decode_properties_each` for many strings."""
    if type(data) is bytes:
        data = data.decode("utf-8", "replace")
    elif not isinstance(data, str):
        data = bytes(data).decode("utf-8", "replace")
    result: dict[str, str] = {}
    if not data:
        return result
    for item in data.split(PROPERTY_SEPARATOR):
        name, _, value = item.partition(NAME_VALUE_SEPARATOR)
        if name and value:
            result[name] = value
    return result


def decode_properties_each(items: Iterable[str | bytes | memoryview]) -> list[dict[str, str]]:
    """``[decode_properties(x) for x in items]`` in one call, for a batch's entries: the same rule with the loop
    inlined (a call per entry costs about as much as decoding three properties). Held identical to
    :func:`decode_properties` by tests/remoting/test_message_properties.py."""
    out: list[dict[str, str]] = []
    append = out.append
    separator = PROPERTY_SEPARATOR
    name_value = NAME_VALUE_SEPARATOR
    for data in items:
        try:
            text = data.decode("utf-8", "replace")  # type: ignore[union-attr]
        except AttributeError:  # text already, or a view
            text = data if isinstance(data, str) else bytes(data).decode("utf-8", "replace")
        result: dict[str, str] = {}
        for item in text.split(separator):
            name, _, value = item.partition(name_value)
            if name and value:
                result[name] = value
        append(result)
    return out


def find_property(props: bytes, name: bytes) -> str | None:
    """``decode_properties(props).get(...)`` of one property without decoding the rest: ``name`` is the property
    name in bytes followed by the name-value separator (``b"TAGS\\x01"``). The last item of that name with a
    non-empty value wins, as in :func:`decode_properties` (an empty one is no item: ``TAGS\\x01A\\x02TAGS\\x01`` has
    ``TAGS`` = ``A``); None when there is none."""
    end = len(props)
    i = props.rfind(name)
    while i >= 0:
        if i == 0 or props[i - 1] == 2:  # the start of an item (else the name ends a longer one, or is in a value)
            start = i + len(name)
            stop = props.find(b"\x02", start)
            if stop < 0:
                stop = end
            if stop > start:
                return props[start:stop].decode("utf-8", "replace")
        i = props.rfind(name, 0, i)
    return None


_POWERS_31 = [pow(31, k, 1 << 32) for k in range(257)]
#: ``_TERMS[k][c] = c * 31**k mod 2**32``: the hash of up to 64 one-byte code units is one ``sum`` of table
#: look-ups over the units reversed, in C (no multiply, no new int object per character)
_TERMS = [[c * p & 0xFFFFFFFF for c in range(256)] for p in _POWERS_31[:64]]
_TERM = list.__getitem__


def _unsigned_hash(s: str) -> int:
    """``String.hashCode`` as an unsigned 32-bit value: sum(c_i * 31^(n-1-i)) over UTF-16 code units."""
    try:
        units = s.encode("latin-1")  # one code unit per char, in C
    except UnicodeEncodeError:
        wide = memoryview(s.encode("utf-16-le" if _LITTLE else "utf-16-be")).cast("H")
        h = 0
        for start in range(0, len(wide), 256):  # h * 31^len(part) + hash(part), part by part
            part: memoryview | bytes = wide[start : start + 256]
            h = (h * _POWERS_31[len(part)] + sum(map(mul, part[::-1], _POWERS_31))) & 0xFFFFFFFF
        return h
    if len(units) <= 64:
        return sum(map(_TERM, _TERMS, units[::-1])) & 0xFFFFFFFF
    h = 0
    for start in range(0, len(units), 64):
        part = units[start : start + 64]
        h = (h * _POWERS_31[len(part)] + sum(map(_TERM, _TERMS, part[::-1]))) & 0xFFFFFFFF
    return h


_LITTLE = struct.pack("=H", 1) == b"\x01\x00"


def java_string_hash(s: str) -> int:
    """Java ``String.hashCode()`` (UTF-16 code units, int32 wrap-around), as a signed int."""
    h = _unsigned_hash(s)
    return h - (1 << 32) if h & 0x80000000 else h


def tags_hash_code(tags: str | None) -> int:
    """CQ tags code of a TAGS property (spec 5.6); absent/empty tags give 0."""
    return java_string_hash(tags) if tags else 0


def combine_hash(prefix_hash: int, suffix: str) -> int:
    """Unsigned hash of ``prefix + suffix`` from the unsigned hash of ``prefix`` (used to cache ``topic#``)."""
    n = len(suffix) if suffix.isascii() else len(suffix.encode("utf-16-le")) // 2
    return (prefix_hash * pow(31, n, 1 << 32) + _unsigned_hash(suffix)) & 0xFFFFFFFF


def unsigned_hash(s: str) -> int:
    return _unsigned_hash(s)


# ---------------------------------------------------------------------------------------------------------------
# Hosts and message ids (spec 5.9)
# ---------------------------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def pack_host(host: tuple[str, int]) -> tuple[bytes, int, bool]:
    """``(ip, port)`` -> (4 or 16 address bytes, port, is_ipv6)."""
    ip, port = host[0], host[1]
    if ":" in ip:
        return socket.inet_pton(socket.AF_INET6, ip), port, True
    return socket.inet_aton(ip), port, False


def unpack_ip(addr: bytes) -> str:
    return socket.inet_ntop(socket.AF_INET6 if len(addr) == 16 else socket.AF_INET, addr)


def encode_message_id(ip: str | bytes, port: int, offset: int) -> str:
    """Offset message id: store-host address + int port + long commit-log offset, uppercase hex (32 or 56 chars)."""
    addr = ip if isinstance(ip, bytes) else pack_host((ip, port))[0]
    return (addr + struct.pack(">iq", port, offset)).hex().upper()


def decode_message_id(msg_id: str) -> tuple[str, int, int]:
    """``(ip, port, commit-log offset)`` of an offset message id; 32 chars = IPv4, else IPv6."""
    raw = bytes.fromhex(msg_id)
    n = 4 if len(msg_id) == 32 else 16
    if len(raw) != n + 12:
        raise ValueError(f"not a message id: {msg_id!r}")
    port, offset = struct.unpack_from(">iq", raw, n)
    return unpack_ip(raw[:n]), port, offset


# ---------------------------------------------------------------------------------------------------------------
# Records
# ---------------------------------------------------------------------------------------------------------------


def _host(value: tuple[str, int] | list[str | int]) -> tuple[str, int]:
    return (str(value[0]), int(value[1]))


def _properties(value: Mapping[str, str] | str | bytes | None) -> dict[str, str]:
    if value is None:
        return {}
    if isinstance(value, (str, bytes, memoryview)):
        return decode_properties(value)
    return value if isinstance(value, dict) else dict(value)


@attrs.frozen
class MessageRecord:
    """A message to append (Java ``MessageExtBrokerInner``).

    ``properties_bytes`` (UTF-8 properties string as received in the send header) is stored verbatim when given;
    otherwise ``properties`` is encoded. ``tags_code`` defaults to the hash of the TAGS property; the broker passes
    its own for MULTI_TAGS topics or the delivery time of ``SCHEDULE_TOPIC_XXXX`` (spec 5.6).
    """

    topic: str
    queue_id: int
    body: bytes
    flag: int = 0
    properties: dict[str, str] = attrs.field(factory=dict, converter=_properties)
    properties_bytes: bytes | None = None
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: tuple[str, int] = attrs.field(default=("127.0.0.1", 0), converter=_host)
    store_host: tuple[str, int] = attrs.field(default=("127.0.0.1", 10911), converter=_host)
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    tags_code: int | None = None

    def __attrs_post_init__(self) -> None:
        if not self.properties and self.properties_bytes:
            object.__setattr__(self, "properties", decode_properties(self.properties_bytes))

    def encoded_properties(self) -> bytes:
        if self.properties_bytes is not None:
            return self.properties_bytes
        return encode_properties(self.properties).encode("utf-8")

    @property
    def keys(self) -> str | None:
        return self.properties.get(PROPERTY_KEYS)

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)

    @property
    def wait_store_msg_ok(self) -> bool:
        return self.properties.get(PROPERTY_WAIT_STORE_MSG_OK) != "false"


@attrs.frozen
class StoredMessage:
    """A decoded stored record (spec 5.1), with every field; ``msg_id`` is the offset message id (5.9)."""

    total_size: int
    magic_code: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    commit_log_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: tuple[str, int]
    store_timestamp: int
    store_host: tuple[str, int]
    reconsume_times: int
    prepared_transaction_offset: int
    body: bytes
    topic: str
    properties_bytes: bytes
    topic_bytes: bytes = attrs.field(default=b"", repr=False)

    @property
    def properties(self) -> dict[str, str]:
        return decode_properties(self.properties_bytes)

    @property
    def msg_id(self) -> str:
        return encode_message_id(self.store_host[0], self.store_host[1], self.commit_log_offset)

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> str | None:
        return self.properties.get(PROPERTY_KEYS)

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)

    def uncompressed_body(self) -> bytes:
        """The body, inflated when COMPRESSED with zlib (type bits 0 or 3, spec 5.5)."""
        if self.sys_flag & COMPRESSED_FLAG and ((self.sys_flag & 0x700) >> 8) in (0, 3):
            return zlib.decompress(self.body)
        return self.body

    def crc_ok(self) -> bool:
        return body_crc(self.body) == self.body_crc

    def to_record(
        self,
        topic: str,
        queue_id: int,
        properties: dict[str, str],
        *,
        reconsume_times: int | None = None,
        prepared_transaction_offset: int | None = None,
        tags_code: int | None = None,
    ) -> MessageRecord:
        """This message re-addressed to ``topic``/``queue_id`` with ``properties``: what delay and timer delivery and
        retries write (spec 7.6). Body, flag, sys flag, born time/host and store host are kept; the append gives it
        a new store time and offsets."""
        return MessageRecord(
            topic=topic,
            queue_id=queue_id,
            body=self.body,
            flag=self.flag,
            properties=properties,
            sys_flag=self.sys_flag,
            born_timestamp=self.born_timestamp,
            born_host=self.born_host,
            store_host=self.store_host,
            reconsume_times=self.reconsume_times if reconsume_times is None else reconsume_times,
            prepared_transaction_offset=(
                self.prepared_transaction_offset if prepared_transaction_offset is None else prepared_transaction_offset
            ),
            tags_code=tags_code,
        )

    def encode(self) -> bytes:
        """The exact record bytes (re-encoding a decoded record gives back the same bytes)."""
        topic = self.topic_bytes or self.topic.encode("utf-8")
        return encode_record(
            queue_id=self.queue_id,
            flag=self.flag,
            queue_offset=self.queue_offset,
            commit_log_offset=self.commit_log_offset,
            sys_flag=self.sys_flag,
            born_timestamp=self.born_timestamp,
            born_host=self.born_host,
            store_timestamp=self.store_timestamp,
            store_host=self.store_host,
            reconsume_times=self.reconsume_times,
            prepared_transaction_offset=self.prepared_transaction_offset,
            body=self.body,
            topic=topic,
            properties=self.properties_bytes,
            body_crc_value=self.body_crc,
            magic_code=self.magic_code,
        )


def encode_record(
    *,
    queue_id: int,
    flag: int,
    queue_offset: int,
    commit_log_offset: int,
    sys_flag: int,
    born_timestamp: int,
    born_host: tuple[str, int],
    store_timestamp: int,
    store_host: tuple[str, int],
    reconsume_times: int,
    prepared_transaction_offset: int,
    body: bytes,
    topic: bytes,
    properties: bytes,
    body_crc_value: int | None = None,
    magic_code: int = MESSAGE_MAGIC_CODE,
) -> bytes:
    """Encode one record (the slow, allocating path used by tests and tools; the commit log packs in place)."""
    born_ip, born_port, born_v6 = pack_host(born_host)
    store_ip, store_port, store_v6 = pack_host(store_host)
    if born_v6:
        sys_flag |= BORNHOST_V6_FLAG
    if store_v6:
        sys_flag |= STOREHOSTADDRESS_V6_FLAG
    if len(topic) > MAX_TOPIC_LENGTH:
        raise ValueError(f"topic longer than {MAX_TOPIC_LENGTH} bytes")
    if len(properties) > MAX_PROPERTIES_LENGTH:
        raise ValueError(f"properties longer than {MAX_PROPERTIES_LENGTH} bytes")
    size = record_length(len(body), len(topic), len(properties), sys_flag)
    head = HEADER_STRUCTS[(sys_flag >> 4) & 3].pack(
        size,
        magic_code,
        body_crc(body) if body_crc_value is None else body_crc_value,
        queue_id,
        flag,
        queue_offset,
        commit_log_offset,
        sys_flag,
        born_timestamp,
        born_ip,
        born_port,
        store_timestamp,
        store_ip,
        store_port,
        reconsume_times,
        prepared_transaction_offset,
        len(body),
    )
    return b"".join((head, body, bytes((len(topic),)), topic, SHORT.pack(len(properties)), properties))


def decode_message(
    buf: bytes | bytearray | memoryview, pos: int = 0, *, file: str | None = None, check_crc: bool = False
) -> tuple[StoredMessage, int]:
    """Decode the record at ``pos``; return it and the position after it. Raises :class:`CorruptRecordError`."""
    view = memoryview(buf)
    n = len(view)
    try:
        size, magic = SIZE_AND_MAGIC.unpack_from(view, pos)
        if magic != MESSAGE_MAGIC_CODE:
            raise CorruptRecordError(file, pos, f"bad magic code 0x{magic:08X}")
        if size < RECORD_FIXED_SIZE or pos + size > n:
            raise CorruptRecordError(file, pos, f"bad total size {size} ({n - pos} bytes available)")
        sys_flag = INT.unpack_from(view, pos + 36)[0]
        st = HEADER_STRUCTS[(sys_flag >> 4) & 3]
        (
            size, magic, crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts, born_ip, born_port,
            store_ts, store_ip, store_port, reconsume, prepared, body_len,
        ) = st.unpack_from(view, pos)
        p = pos + st.size
        end = pos + size
        if body_len < 0 or p + body_len + 3 > end:
            raise CorruptRecordError(file, pos, f"bad body length {body_len}")
        body = bytes(view[p : p + body_len])
        p += body_len
        topic_len = view[p]
        p += 1
        topic_bytes = bytes(view[p : p + topic_len])
        p += topic_len
        if p + 2 > end:
            raise CorruptRecordError(file, pos, "record too short for its topic")
        props_len = SHORT.unpack_from(view, p)[0]
        p += 2
        if props_len < 0 or p + props_len != end:
            raise CorruptRecordError(file, pos, f"total size {size} does not match the field lengths")
        props = bytes(view[p : p + props_len])
    except struct.error as exc:
        raise CorruptRecordError(file, pos, f"short record: {exc}") from None
    if check_crc and body_crc(body) != crc:
        raise CorruptRecordError(file, pos, f"body CRC mismatch (stored {crc}, computed {body_crc(body)})")
    msg = StoredMessage(
        total_size=size,
        magic_code=magic,
        body_crc=crc,
        queue_id=queue_id,
        flag=flag,
        queue_offset=queue_offset,
        commit_log_offset=phys,
        sys_flag=sys_flag,
        born_timestamp=born_ts,
        born_host=(unpack_ip(born_ip), born_port),
        store_timestamp=store_ts,
        store_host=(unpack_ip(store_ip), store_port),
        reconsume_times=reconsume,
        prepared_transaction_offset=prepared,
        body=body,
        topic=topic_bytes.decode("utf-8", "replace"),
        properties_bytes=props,
        topic_bytes=topic_bytes,
    )
    return msg, end


def decode_messages(buf: bytes | bytearray | memoryview, *, check_crc: bool = False) -> list[StoredMessage]:
    """Decode back-to-back records (a pull / query body) until the buffer is exhausted."""
    out = []
    pos = 0
    n = len(buf)
    while pos < n:
        msg, pos = decode_message(buf, pos, check_crc=check_crc)
        out.append(msg)
    return out


# ---------------------------------------------------------------------------------------------------------------
# Batch body (spec 5.8)
# ---------------------------------------------------------------------------------------------------------------


@attrs.frozen
class BatchEntry:
    flag: int
    body: bytes
    properties_bytes: bytes


def encode_batch_body(entries: list[BatchEntry]) -> bytes:
    parts = []
    for e in entries:
        size = BATCH_ENTRY_HEAD.size + len(e.body) + 2 + len(e.properties_bytes)
        parts.append(BATCH_ENTRY_HEAD.pack(size, 0, 0, e.flag, len(e.body)))
        parts.append(e.body)
        parts.append(SHORT.pack(len(e.properties_bytes)))
        parts.append(e.properties_bytes)
    return b"".join(parts)


def decode_batch_body(body: bytes | memoryview) -> list[BatchEntry]:
    """Split a SEND_BATCH_MESSAGE body into its entries (:func:`split_batch_body`, the bodies copied)."""
    return [BatchEntry(flag, bytes(data), props) for flag, data, props in split_batch_body(body)]


def split_batch_body(body: bytes | memoryview) -> list[tuple[int, memoryview, bytes]]:
    """Split a SEND_BATCH_MESSAGE body into ``(flag, body, properties bytes)`` entries, each body a view of
    ``body`` (the broker's bulk batch path copies it only into the commit log). Raises
    :class:`CorruptRecordError` for an entry whose fields do not add up to its size or run past the end."""
    data = body if type(body) is bytes else bytes(body)
    view = memoryview(data)
    end = len(data)
    out: list[tuple[int, memoryview, bytes]] = []
    append = out.append
    head = BATCH_ENTRY_HEAD.unpack_from
    head_size = BATCH_ENTRY_HEAD.size
    short = SHORT.unpack_from
    pos = 0
    while pos < end:
        try:
            size, _magic, _crc, flag, body_len = head(view, pos)
            p = pos + head_size
            entry_body = view[p : p + body_len]
            p += body_len
            props_len = short(view, p)[0]
            p += 2
            props = data[p : p + props_len]
            p += props_len
        except struct.error:
            raise CorruptRecordError(
                None, pos, f"short batch entry: its fields run past the end of the body ({end - pos} bytes left)"
            ) from None
        if size != p - pos or len(entry_body) != body_len or len(props) != props_len:
            raise CorruptRecordError(None, pos, f"batch entry size {size} does not match its fields")
        append((flag, entry_body, props))
        pos = p
    return out
