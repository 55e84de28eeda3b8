"""Byte layouts of the store (spec 5 and 6) as ``struct.Struct`` objects.

The stored message record is also the wire format of pulled, queried and viewed messages, so its codec lives in
:mod:`pyrmq.remoting.message` (the client decodes pull bodies without importing the store); this module keeps the
store's own layouts (blank end of segment, consume-queue unit, index file, checkpoint) and re-exports the message
codec under its old names.
"""

from __future__ import annotations

import struct

from pyrmq.remoting.message import (  # noqa: F401 - re-exported: the store's and older callers' names
    BATCH_ENTRY_HEAD,
    BORNHOST_V6_FLAG,
    COMPRESSED_FLAG,
    HEADER,
    HEADER_STRUCTS,
    INT,
    KEY_SEPARATOR,
    LONG,
    MAX_PROPERTIES_LENGTH,
    MAX_TOPIC_LENGTH,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    MULTI_TAGS_FLAG,
    NAME_VALUE_SEPARATOR,
    PREFIX,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    PROPERTY_WAIT_STORE_MSG_OK,
    RECORD_FIXED_SIZE,
    SHORT,
    STOREHOSTADDRESS_V6_FLAG,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
    UBYTE,
    BatchEntry,
    MessageRecord,
    StoredMessage,
    body_crc,
    combine_hash,
    decode_batch_body,
    decode_message,
    decode_message_id,
    decode_messages,
    decode_properties,
    decode_properties_each,
    encode_batch_body,
    encode_message_id,
    encode_properties,
    encode_record,
    find_property,
    java_string_hash,
    pack_host,
    record_length,
    split_batch_body,
    store_timestamp_pos,
    tags_hash_code,
    unpack_ip,
    unsigned_hash,
)

# this module's layouts, then the message codec re-exported under the names the store and older callers use
__all__ = [
    "BLANK_MAGIC_CODE", "BLANK", "END_FILE_MIN_BLANK_LENGTH", "CQ_UNIT", "CQ_BLANK_UNIT", "INDEX_HEADER",
    "INDEX_ENTRY", "INDEX_SLOT", "CHECKPOINT", "CHECKPOINT_FILE_SIZE", "index_key_hash", "find_property",
    "drop_property", "BATCH_ENTRY_HEAD", "BORNHOST_V6_FLAG", "COMPRESSED_FLAG", "HEADER", "HEADER_STRUCTS", "INT",
    "KEY_SEPARATOR", "LONG", "MAX_PROPERTIES_LENGTH", "MAX_TOPIC_LENGTH", "MESSAGE_MAGIC_CODE",
    "MESSAGE_MAGIC_CODE_V2", "MULTI_TAGS_FLAG", "NAME_VALUE_SEPARATOR", "PREFIX", "PROPERTY_DELAY_TIME_LEVEL",
    "PROPERTY_KEYS", "PROPERTY_SEPARATOR", "PROPERTY_TAGS", "PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX",
    "PROPERTY_WAIT_STORE_MSG_OK", "RECORD_FIXED_SIZE", "SHORT", "STOREHOSTADDRESS_V6_FLAG",
    "TRANSACTION_COMMIT_TYPE", "TRANSACTION_NOT_TYPE", "TRANSACTION_PREPARED_TYPE", "TRANSACTION_ROLLBACK_TYPE",
    "TRANSACTION_TYPE_MASK", "UBYTE", "BatchEntry", "MessageRecord", "StoredMessage", "body_crc", "combine_hash",
    "decode_batch_body", "decode_message", "decode_message_id", "decode_messages", "decode_properties",
    "decode_properties_each", "encode_batch_body", "encode_message_id", "encode_properties", "encode_record",
    "java_string_hash", "pack_host", "record_length", "split_batch_body", "store_timestamp_pos", "tags_hash_code",
    "unpack_ip", "unsigned_hash",
]

# End of a commit-log segment (spec 5.1): the bytes left in the segment, BLANK magic
BLANK_MAGIC_CODE = 0xCBD43194
BLANK = struct.Struct(">iI")  # TOTALSIZE (= bytes left in the segment), BLANK magic
assert BLANK.size == 8
END_FILE_MIN_BLANK_LENGTH = BLANK.size

# ---------------------------------------------------------------------------------------------------------------
# Consume-queue unit (spec 6.3): long commitLogOffset, int size, long tagsCode
# ---------------------------------------------------------------------------------------------------------------
CQ_UNIT = struct.Struct(">qiq")
assert CQ_UNIT.size == 20
CQ_BLANK_UNIT = CQ_UNIT.pack(0, 0x7FFFFFFF, 0)

# ---------------------------------------------------------------------------------------------------------------
# Index file (spec 6.4)
#   header (40): long beginTimestamp, long endTimestamp, long beginPhyOffset, long endPhyOffset,
#                int hashSlotCount, int indexCount
#   slots:       int per slot = newest entry number in the bucket (0 = empty)
#   entries(20): int keyHash, long phyOffset, int timeDiffSeconds, int prevIndex
# ---------------------------------------------------------------------------------------------------------------
INDEX_HEADER = struct.Struct(">qqqqii")
assert INDEX_HEADER.size == 40
INDEX_ENTRY = struct.Struct(">iqii")
assert INDEX_ENTRY.size == 20
INDEX_SLOT = INT

# ---------------------------------------------------------------------------------------------------------------
# Checkpoint (spec 6.5): a 4096-byte file; long physicMsgTimestamp, long logicsMsgTimestamp, long indexMsgTimestamp
# ---------------------------------------------------------------------------------------------------------------
CHECKPOINT = struct.Struct(">qqq")
assert CHECKPOINT.size == 24
CHECKPOINT_FILE_SIZE = 4096


def index_key_hash(unsigned_h: int) -> int:
    """``IndexFile.indexKeyHashMethod``: ``abs(hashCode)``, 0 when abs overflows (Integer.MIN_VALUE)."""
    if unsigned_h & 0x80000000:
        h = (1 << 32) - unsigned_h
        return 0 if h == 0x80000000 else h
    return unsigned_h


def drop_property(props: bytes, name: bytes) -> bytes:
    """``props`` without the item(s) of one property (``name`` as for :func:`find_property`: the name and the
    name-value separator, in bytes)."""
    i = props.find(name)
    while i >= 0:
        if i == 0 or props[i - 1] == 2:
            end = props.find(b"\x02", i)
            if end < 0:
                props = props[: max(i - 1, 0)]  # the last item: its leading separator goes with it
            else:
                props = props[:i] + props[end + 1 :]
            i = props.find(name, i)
        else:
            i = props.find(name, i + 1)
    return props

