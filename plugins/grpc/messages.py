"""apache.rocketmq.v2 ``Message`` <-> the broker's records: the checks of RocketMQ 5.x's proxy on a send (its order,
its codes, our texts), the properties a 4.x client reads, the message type a topic accepts, and the way back for
messages the broker hands to a gRPC client (check-backs now, deliveries with POP consumption).

Property mapping (5.x ``GrpcConverter`` / ``SendMessageActivity``): tag -> ``TAGS``; keys -> ``KEYS`` (space
joined); message_id -> ``UNIQ_KEY``; message_group -> ``__SHARDINGKEY``; delivery_timestamp -> ``TIMER_DELIVER_MS``;
TRANSACTION -> ``TRAN_MSG=true`` + ``PGROUP=<topic>`` (+ ``CHECK_IMMUNITY_TIME_IN_SECONDS``); trace_context ->
``TRACE_CONTEXT``; the client's address -> ``__BORNHOST``. A ``GZIP`` body is stored inflated (a 4.x consumer
inflates 4.x's zlib bodies, not gzip).
"""

from __future__ import annotations

import gzip
import hashlib
import socket
import time
import zlib
from collections.abc import Mapping
from typing import Any

import attrs

from pyrmq.plugins.broker.topics import MESSAGE_TYPE_MIXED, message_type_of
from pyrmq.plugins.grpc.schema import pb
from pyrmq.remoting.message import COMPRESSED_FLAG, TRANSACTION_PREPARED_TYPE, StoredMessage
from pyrmq.remoting.vocabulary import SYSTEM_PROPERTIES, MessageProperty

Code = pb.Code
P = MessageProperty

SHARDING_KEY = MessageProperty.SHARDING_KEY
BORN_HOST = "__BORNHOST"
TRACE_CONTEXT = "TRACE_CONTEXT"
TIMER_DELAY_MS = "TIMER_DELAY_MS"
#: what 5.x's ``MessageConst.STRING_HASH_SET`` adds to 4.x's list: also refused as user property keys
SYSTEM_PROPERTIES_5X = SYSTEM_PROPERTIES | frozenset({
    P.TIMER_DELIVER_MS, P.TIMER_DELAY_SEC, TIMER_DELAY_MS, SHARDING_KEY, BORN_HOST, TRACE_CONTEXT,
    "__transactionId__", "TIMER_OUT_MS", "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS", "TIMER_ROLL_TIMES", "TIMER_DEL_UNIQKEY",
    "INNER_NUM", "INNER_MULTI_DISPATCH", "INNER_MULTI_QUEUE_OFFSET", "DLQ_ORIGIN_TOPIC", "DLQ_ORIGIN_MESSAGE_ID",
    "POP_CK", "POP_CK_OFFSET", "1ST_POP_TIME", "SHARDING_KEY", "_SYS_MSG_PRIORITY_", "__LITE_TOPIC",
})
#: what a delivered message shows as system properties rather than user properties
_NOT_USER = SYSTEM_PROPERTIES_5X | {P.CLUSTER}

_MESSAGE_TYPE = {"NORMAL": pb.MessageType.NORMAL, "FIFO": pb.MessageType.FIFO, "DELAY": pb.MessageType.DELAY,
                 "TRANSACTION": pb.MessageType.TRANSACTION}
#: what a queue of a topic of each type accepts (QueryRoute's accept_message_types)
ACCEPTED_TYPES = {
    **{name: [value] for name, value in _MESSAGE_TYPE.items()},
    MESSAGE_TYPE_MIXED: [pb.MessageType.NORMAL, pb.MessageType.FIFO, pb.MessageType.DELAY, pb.MessageType.TRANSACTION],
}


class Refused(Exception):
    """A message (or request) refused: the ``Status`` code and text the client gets."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@attrs.frozen
class Limits:
    max_body: int
    max_user_properties: int
    max_properties_size: int
    max_delay_ms: int
    max_group_size: int
    max_recovery_s: int
    check_empty_body: bool


def _iso_control(text: str) -> bool:
    return any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in text)


def _ms(timestamp: Any) -> int:
    return int(timestamp.seconds) * 1000 + int(timestamp.nanos) // 1_000_000


def _set_ms(timestamp: Any, ms: int) -> None:
    timestamp.seconds, millis = divmod(ms, 1000)
    timestamp.nanos = millis * 1_000_000


@attrs.define
class Outgoing:
    """One checked message, ready to become a record: body, properties, sys flag, born time, its 5.x type."""

    body: bytes
    properties: dict[str, str]
    sys_flag: int
    born_timestamp: int
    message_type: str
    message_id: str
    group: str | None


def message_type_from_properties(props: Mapping[str, str]) -> str:
    """The type 5.x derives from what a message carries (``TopicMessageType.parseFromMessageProperty``)."""
    if props.get(P.TRANSACTION_PREPARED, "").lower() == "true":
        return "TRANSACTION"
    if P.DELAY_TIME_LEVEL in props or P.TIMER_DELIVER_MS in props or P.TIMER_DELAY_SEC in props or TIMER_DELAY_MS in props:
        return "DELAY"
    if SHARDING_KEY in props:
        return "FIFO"
    return "NORMAL"


def convert(message: Any, topic: str, peer: str, limits: Limits, now_ms: int | None = None) -> Outgoing:
    """A ``pb.Message`` checked as 5.x's proxy checks it (first failure raises :class:`Refused`) and turned into the
    properties of a record."""
    sp = message.system_properties
    body = message.body
    if sp.body_encoding == pb.Encoding.GZIP and body:
        try:
            body = gzip.decompress(body)
        except (OSError, EOFError, zlib.error):
            raise Refused(Code.MESSAGE_CORRUPTED, "the message body says GZIP but does not inflate") from None
    if limits.check_empty_body and not body:
        raise Refused(Code.MESSAGE_BODY_EMPTY, "message body cannot be empty")
    if len(body) > limits.max_body:
        raise Refused(Code.MESSAGE_BODY_TOO_LARGE, f"message body cannot exceed the max {limits.max_body}")
    user = message.user_properties
    if len(user) > limits.max_user_properties:
        raise Refused(Code.MESSAGE_PROPERTIES_TOO_LARGE,
                      f"too many user properties: {len(user)}, the max is {limits.max_user_properties}")
    size = 0
    properties: dict[str, str] = {}
    for key, value in user.items():
        if key in SYSTEM_PROPERTIES_5X:
            raise Refused(Code.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property is used by system: {key}")
        if not key or _iso_control(key) or _iso_control(value):
            raise Refused(Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
                          f"user property {key!r} has an empty key or a control character in its key or value")
        size += len(key.encode()) + len(value.encode())
        properties[key] = value
    if sp.HasField("tag"):
        tag = sp.tag
        if not tag.strip() or "|" in tag or _iso_control(tag):
            raise Refused(Code.ILLEGAL_MESSAGE_TAG, f"tag {tag!r} is blank or holds '|' or a control character")
        properties[P.TAGS] = tag
        size += len(tag.encode())
    keys = list(sp.keys)
    for key in keys:
        if not key.strip() or _iso_control(key):
            raise Refused(Code.ILLEGAL_MESSAGE_KEY, f"message key {key!r} is blank or holds a control character")
    if keys:
        properties[P.KEYS] = " ".join(keys)
        size += sum(len(k.encode()) for k in keys)
    if size > limits.max_properties_size:
        raise Refused(Code.MESSAGE_PROPERTIES_TOO_LARGE,
                      f"user properties, tag and keys take {size} bytes, the max is {limits.max_properties_size}")
    message_id = sp.message_id
    if not message_id.strip():
        raise Refused(Code.ILLEGAL_MESSAGE_ID, "message id cannot be empty")
    properties[P.UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = message_id
    sys_flag = 0
    now = int(time.time() * 1000) if now_ms is None else now_ms
    if sp.message_type == pb.MessageType.TRANSACTION:
        if sp.HasField("orphaned_transaction_recovery_duration"):
            recovery = sp.orphaned_transaction_recovery_duration.seconds
            if recovery > limits.max_recovery_s:
                raise Refused(Code.BAD_REQUEST, f"orphaned_transaction_recovery_duration is {recovery} s, "
                                                f"the max is {limits.max_recovery_s} s")
            if recovery > 0:
                properties[P.CHECK_IMMUNITY_TIME_IN_SECONDS] = str(recovery)
        properties[P.TRANSACTION_PREPARED] = "true"
        properties[P.PRODUCER_GROUP] = message.topic.name
        sys_flag |= TRANSACTION_PREPARED_TYPE
    if sp.HasField("delivery_timestamp"):
        deliver = _ms(sp.delivery_timestamp)
        if deliver - now > limits.max_delay_ms:
            raise Refused(Code.ILLEGAL_DELIVERY_TIME,
                          f"the max delay time of message is too large, max is {limits.max_delay_ms}")
        if deliver > now:
            properties[P.TIMER_DELIVER_MS] = str(deliver)
    group = sp.message_group if sp.HasField("message_group") else None
    if group is not None:
        if len(group.encode()) >= limits.max_group_size:
            raise Refused(Code.ILLEGAL_MESSAGE_GROUP, f"message group exceed the max size {limits.max_group_size}")
        if not group.strip() or _iso_control(group):
            raise Refused(Code.ILLEGAL_MESSAGE_GROUP, f"message group {group!r} is blank or holds a control character")
        properties[SHARDING_KEY] = group
    if sp.HasField("trace_context") and sp.trace_context:
        properties[TRACE_CONTEXT] = sp.trace_context
    properties[BORN_HOST] = peer
    born = _ms(sp.born_timestamp) if sp.HasField("born_timestamp") else now
    return Outgoing(body, properties, sys_flag, born or now, message_type_from_properties(properties), message_id,
                    group)


def type_conflict(topic_type: str, message_type: str) -> str | None:
    """Why a message of ``message_type`` may not go to a topic of ``topic_type``, or None."""
    if topic_type == MESSAGE_TYPE_MIXED or topic_type == message_type:
        return None
    return (f"the topic accepts {topic_type} messages (its message.type attribute), "
            f"but this message is {message_type}")


def topic_type(config: Any) -> str:
    return message_type_of(config)


# -- stored record -> pb.Message ---------------------------------------------------------------------------------


def _host_text(host: tuple[str, int]) -> str:
    return f"{host[0]}:{host[1]}"


def to_pb(msg: StoredMessage, *, topic: str | None = None) -> Any:
    """A stored record as the ``Message`` a 5.x client reads (5.x ``GrpcConverter.buildMessage``)."""
    props = msg.properties
    out = pb.Message()
    out.topic.name = topic or msg.topic
    sp = out.system_properties
    for key, value in props.items():
        if key not in _NOT_USER:
            out.user_properties[key] = value
    tag = props.get(P.TAGS)
    if tag:
        sp.tag = tag
    keys = props.get(P.KEYS)
    if keys:
        sp.keys.extend(k for k in keys.split(" ") if k)
    sp.message_id = props.get(P.UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or msg.msg_id
    body = msg.body
    if msg.sys_flag & COMPRESSED_FLAG:
        try:
            body = msg.uncompressed_body()
        except zlib.error:
            pass
    sp.body_digest.type = pb.DigestType.MD5
    sp.body_digest.checksum = hashlib.md5(body).hexdigest().upper()
    sp.body_encoding = pb.Encoding.IDENTITY
    sp.message_type = _MESSAGE_TYPE.get(message_type_from_properties(props), pb.MessageType.NORMAL)
    _set_ms(sp.born_timestamp, msg.born_timestamp)
    sp.born_host = props.get(BORN_HOST) or msg.born_host[0]
    _set_ms(sp.store_timestamp, msg.store_timestamp)
    sp.store_host = _host_text(msg.store_host)
    deliver = props.get(P.TIMER_DELIVER_MS)
    if deliver and deliver.isdigit():
        _set_ms(sp.delivery_timestamp, int(deliver))
    group = props.get(SHARDING_KEY)
    if group:
        sp.message_group = group
    trace = props.get(TRACE_CONTEXT)
    if trace:
        sp.trace_context = trace
    sp.queue_id = msg.queue_id
    sp.queue_offset = msg.queue_offset
    sp.delivery_attempt = msg.reconsume_times + 1
    out.body = body
    return out


def guava_consistent_hash(value: int, buckets: int) -> int:
    """Guava's ``Hashing.consistentHash(long, int)``: the queue 5.x's proxy gives a message group."""
    state = value & 0xFFFFFFFFFFFFFFFF
    candidate = 0
    while True:
        state = (2862933555777941757 * state + 1) & 0xFFFFFFFFFFFFFFFF
        as_int = (state >> 33) & 0xFFFFFFFF
        if as_int >= 1 << 31:
            as_int -= 1 << 32
        double = (as_int + 1) / float(1 << 31)
        nxt = int((candidate + 1) / double) if double > 0 else -1
        if 0 <= nxt < buckets:
            candidate = nxt
        else:
            return candidate


def host_of(peer: str) -> str:
    """``host`` of ``host:port`` (IPv6 brackets removed)."""
    host = peer.rpartition(":")[0] or peer
    return host.strip("[]")


def is_ipv6(host: str) -> bool:
    try:
        socket.inet_pton(socket.AF_INET6, host)
    except OSError:
        return False
    return True
