"""POP consumption on the wire (RocketMQ 5.x): what a broker and a client share.

* the request and response headers of POP_MESSAGE (200050), ACK_MESSAGE (200051), PEEK_MESSAGE (200052),
  CHANGE_MESSAGE_INVISIBLETIME (200053), NOTIFICATION (200054), POLLING_INFO (200055); BATCH_ACK_MESSAGE (200151)
  has no header, its body is :func:`encode_batch_ack_body`;
* the receipt handle (5.x ``ExtraInfoUtil``'s *extraInfo*, the ``POP_CK`` property): eight fields separated by
  spaces, ``ckQueueOffset popTime invisibleTime reviveQid retryFlag brokerName queueId queueOffset``, and the gRPC
  proxy's form with a ninth, the message's commit-log offset (:class:`ReceiptHandle`);
* the offset-info strings of a POP answer (``startOffsetInfo``, ``msgOffsetInfo``, ``orderCountInfo``): entries
  ``"<retryFlag> <queueId> <value>"`` joined by ``;``, from which a client builds each message's handle;
* the names of a group's POP retry topics (``%RETRY%<group>_<topic>``, v2 ``%RETRY%<group>+<topic>``) and the
  properties the broker sets on popped and revived messages.

Everything here follows apache/rocketmq 5.5.0 (``ExtraInfoUtil``, ``KeyBuilder``, ``BatchAck``,
``BatchAckMessageRequestBody``, the ``*RequestHeader`` classes). A malformed handle or body raises
:class:`PopWireError` naming the field, so a broker answers with a remark instead of a traceback.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Mapping, Sequence

import attrs

from .headers import HeaderBase, header
from .validation import JavaNumberError, java_int, java_long

__all__ = [
    "KEY_SEPARATOR", "POP_ORDER_REVIVE_QUEUE", "RETRY_FLAG_NORMAL", "RETRY_FLAG_V1", "RETRY_FLAG_V2",
    "INIT_MODE_MIN", "INIT_MODE_MAX", "PROPERTY_POP_CK", "PROPERTY_FIRST_POP_TIME", "PROPERTY_ORIGIN_GROUP",
    "PROPERTY_POP_CK_OFFSET", "MAX_POP_NUMS", "PopWireError", "ReceiptHandle", "BatchAck",
    "pop_retry_topic", "pop_retry_topic_v1", "pop_retry_topic_v2", "is_pop_retry_topic_v2", "retry_flag",
    "real_topic", "build_extra_info", "start_offset_entry", "msg_offset_entry", "order_count_entry",
    "order_count_offset_entry", "join_info", "parse_start_offset_info", "parse_msg_offset_info",
    "parse_order_count_info", "encode_bitset", "decode_bitset", "encode_batch_ack_body", "decode_batch_ack_body",
    "batch_acks", "receipt_handle", "PopMessageRequestHeader", "PopMessageResponseHeader", "AckMessageRequestHeader",
    "ChangeInvisibleTimeRequestHeader", "ChangeInvisibleTimeResponseHeader", "PeekMessageRequestHeader",
    "NotificationRequestHeader", "NotificationResponseHeader", "PollingInfoRequestHeader", "PollingInfoResponseHeader",
]

#: separator inside a handle and inside an info entry (``MessageConst.KEY_SEPARATOR``)
KEY_SEPARATOR = " "
#: the revive queue id a FIFO pop answers with (``KeyBuilder.POP_ORDER_REVIVE_QUEUE``): acks of such handles go to
#: the group's order bookkeeping, not to a checkpoint
POP_ORDER_REVIVE_QUEUE = 999
#: retry flags of a handle and of info entries: the message's real topic is the normal one, or a v1 / v2 retry topic
RETRY_FLAG_NORMAL = "0"
RETRY_FLAG_V1 = "1"
RETRY_FLAG_V2 = "2"
#: ``ConsumeInitMode``: where a group without an offset starts popping a queue
INIT_MODE_MIN = 0
INIT_MODE_MAX = 1
#: a POP request asks for at most this many messages (PopMessageProcessor)
MAX_POP_NUMS = 32

PROPERTY_POP_CK = "POP_CK"
PROPERTY_FIRST_POP_TIME = "1ST_POP_TIME"
PROPERTY_ORIGIN_GROUP = "ORIGIN_GROUP"
PROPERTY_POP_CK_OFFSET = "POP_CK_OFFSET"

_RETRY_PREFIX = "%RETRY%"
_HANDLE_FIELDS = ("ckQueueOffset", "popTime", "invisibleTime", "reviveQid", "retryFlag", "brokerName", "queueId",
                  "queueOffset", "commitLogOffset")


class PopWireError(ValueError):
    """A receipt handle, info string or batch-ack body that does not parse; ``field`` names what is wrong."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


# -- retry topics ------------------------------------------------------------------------------------------------

def pop_retry_topic_v1(topic: str, group: str) -> str:
    """``%RETRY%<group>_<topic>``: the POP retry topic 5.x uses by default (``enableRetryTopicV2=false``)."""
    return f"{_RETRY_PREFIX}{group}_{topic}"


def pop_retry_topic_v2(topic: str, group: str) -> str:
    """``%RETRY%<group>+<topic>`` (``enableRetryTopicV2=true``)."""
    return f"{_RETRY_PREFIX}{group}+{topic}"


def pop_retry_topic(topic: str, group: str, v2: bool = False) -> str:
    return pop_retry_topic_v2(topic, group) if v2 else pop_retry_topic_v1(topic, group)


def is_pop_retry_topic_v2(topic: str) -> bool:
    return topic.startswith(_RETRY_PREFIX) and "+" in topic


def retry_flag(topic: str) -> str:
    """The retry flag of a message read from ``topic``: "2" v2 retry topic, "1" any other ``%RETRY%`` topic, else "0"."""
    if topic.startswith(_RETRY_PREFIX):
        return RETRY_FLAG_V2 if "+" in topic else RETRY_FLAG_V1
    return RETRY_FLAG_NORMAL


def real_topic(topic: str, group: str, flag: str) -> str:
    """The topic an ack of a message popped from ``topic`` by ``group`` names (``ExtraInfoUtil.getRealTopic``)."""
    if flag == RETRY_FLAG_NORMAL:
        return topic
    if flag == RETRY_FLAG_V1:
        return pop_retry_topic_v1(topic, group)
    if flag == RETRY_FLAG_V2:
        return pop_retry_topic_v2(topic, group)
    raise PopWireError("retry", f"retry flag {flag!r} is not 0 (normal topic), 1 (retry topic) or 2 (retry topic v2)")


# -- receipt handle ----------------------------------------------------------------------------------------------

#: the handle's fields ``ExtraInfoUtil`` reads with ``Integer.valueOf`` (the others: ``Long.valueOf``)
_HANDLE_INT_FIELDS = (3, 6)


def _number(text: str, index: int, handle: str) -> int:
    try:
        return java_int(text) if index in _HANDLE_INT_FIELDS else java_long(text)
    except JavaNumberError as exc:
        raise PopWireError(
            "extraInfo", f"receipt handle {handle!r}: field {index + 1} ({_HANDLE_FIELDS[index]}) {exc.reason}: "
                         f"{text!r:.40}") from None


@attrs.frozen
class ReceiptHandle:
    """A popped message's handle (extraInfo): where its checkpoint is, when it was popped, for how long it is
    invisible, and the message's queue and offset in its real topic (the retry topic for a ``retry_flag`` of 1/2).

    ``commit_log_offset`` is the gRPC proxy's ninth field (-1 when absent)."""

    ck_queue_offset: int
    pop_time: int
    invisible_time: int
    revive_qid: int
    retry_flag: str
    broker_name: str
    queue_id: int
    queue_offset: int
    commit_log_offset: int = -1

    @property
    def is_order(self) -> bool:
        """A FIFO pop's handle (``ExtraInfoUtil.isOrder``)."""
        return self.revive_qid == POP_ORDER_REVIVE_QUEUE

    @property
    def next_visible_time(self) -> int:
        return self.pop_time + self.invisible_time

    def real_topic(self, topic: str, group: str) -> str:
        return real_topic(topic, group, self.retry_flag)

    def encode(self) -> str:
        """The handle as text: eight fields, nine when it carries a commit-log offset."""
        fields = [self.ck_queue_offset, self.pop_time, self.invisible_time, self.revive_qid, self.retry_flag,
                  self.broker_name, self.queue_id, self.queue_offset]
        if self.commit_log_offset >= 0:
            fields.append(self.commit_log_offset)
        return KEY_SEPARATOR.join(map(str, fields))

    def __str__(self) -> str:
        return self.encode()

    @classmethod
    def parse(cls, text: str | None) -> ReceiptHandle:
        """Read a handle of 8 or 9 fields (5.x's ``ReceiptHandle.decode`` takes both). PopWireError names the
        field that is missing or not a number."""
        if not text:
            raise PopWireError("extraInfo", "receipt handle is empty: expected 8 fields 'ckQueueOffset popTime "
                                            "invisibleTime reviveQid retryFlag brokerName queueId queueOffset'")
        parts = text.split(KEY_SEPARATOR)
        if len(parts) not in (8, 9):
            raise PopWireError(
                "extraInfo", f"receipt handle {text!r:.120} has {len(parts)} fields: expected 8 'ckQueueOffset popTime "
                             "invisibleTime reviveQid retryFlag brokerName queueId queueOffset' (9 with commitLogOffset)")
        numbers = [_number(parts[i], i, text) for i in (0, 1, 2, 3, 6, 7)]
        flag = parts[4]
        if flag not in (RETRY_FLAG_NORMAL, RETRY_FLAG_V1, RETRY_FLAG_V2):
            raise PopWireError("extraInfo", f"receipt handle {text!r:.120}: field 5 (retryFlag) is {flag!r}, not 0, 1 or 2")
        commit_log_offset = _number(parts[8], 8, text) if len(parts) == 9 else -1
        return cls(numbers[0], numbers[1], numbers[2], numbers[3], flag, parts[5], numbers[4], numbers[5],
                   commit_log_offset)


def build_extra_info(ck_queue_offset: int, pop_time: int, invisible_time: int, revive_qid: int, topic: str,
                     broker_name: str, queue_id: int, queue_offset: int) -> str:
    """``ExtraInfoUtil.buildExtraInfo``: the handle of the message at ``queue_offset`` of ``topic``'s queue (``topic``
    is the topic it was read from: its retry flag is derived from the name)."""
    return (f"{ck_queue_offset} {pop_time} {invisible_time} {revive_qid} {retry_flag(topic)} {broker_name} "
            f"{queue_id} {queue_offset}")


def receipt_handle(*, topic: str, queue_id: int, queue_offset: int, pop_ck: str | None,
                   start_offsets: Mapping[str, int], pop_time: int, invisible_time: int, revive_qid: int,
                   broker_name: str) -> ReceiptHandle:
    """The handle of one message of a POP answer, as 5.x's client builds it (``MQClientAPIImpl.processPopResponse``):
    a revived message carries it (``POP_CK``); any other gets it from the answer's ``startOffsetInfo`` (parsed with
    :func:`parse_start_offset_info`) and header (popTime, invisibleTime, reviveQid). ``topic`` and ``queue_id`` are
    the stored record's. PopWireError when the answer does not name the message's queue."""
    if pop_ck:
        return ReceiptHandle.parse(pop_ck)
    key = f"{retry_flag(topic)}@{queue_id}"
    try:
        start = start_offsets[key]
    except KeyError:
        raise PopWireError("startOffsetInfo", f"startOffsetInfo has no entry {key} for the message at {topic} queue "
                                              f"{queue_id} offset {queue_offset}") from None
    return ReceiptHandle(start, pop_time, invisible_time, revive_qid, retry_flag(topic), broker_name, queue_id,
                         queue_offset)


# -- offset info strings of a POP answer -------------------------------------------------------------------------

def start_offset_entry(topic: str, queue_id: int, start_offset: int) -> str:
    return f"{retry_flag(topic)} {queue_id} {start_offset}"


def msg_offset_entry(topic: str, queue_id: int, offsets: Iterable[int]) -> str:
    return f"{retry_flag(topic)} {queue_id} {','.join(map(str, offsets))}"


def order_count_entry(topic: str, queue_id: int, count: int) -> str:
    """The queue-level consumed count (the older clients' form, 'the least count of the batch')."""
    return f"{retry_flag(topic)} {queue_id} {count}"


def order_count_offset_entry(topic: str, queue_id: int, queue_offset: int, count: int) -> str:
    """One message's consumed count: key ``qo<queueId>%<offset>``."""
    return f"{retry_flag(topic)} qo{queue_id}%{queue_offset} {count}"


def join_info(entries: Iterable[str]) -> str:
    return ";".join(entries)


def _entries(text: str | None, field: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    for one in (text or "").split(";") if text else ():
        split = one.split(KEY_SEPARATOR)
        if len(split) != 3:
            raise PopWireError(field, f"{field} entry {one!r:.80} is not '<retryFlag> <queueId> <value>'")
        key = f"{split[0]}@{split[1]}"
        if key in seen:
            raise PopWireError(field, f"{field}: {key} appears twice")
        seen.add(key)
        out.append((key, split[2]))
    return out


def _int_value(value: str, field: str) -> int:
    try:
        return java_long(value)  # ExtraInfoUtil: Long.valueOf / Integer.valueOf, Java's number rules
    except JavaNumberError as exc:
        raise PopWireError(field, f"{field}: {value!r:.40} {exc.reason}") from None


def parse_start_offset_info(text: str | None) -> dict[str, int]:
    """``{"<retryFlag>@<queueId>": checkpoint start offset}`` (``ExtraInfoUtil.parseStartOffsetInfo``)."""
    return {key: _int_value(value, "startOffsetInfo") for key, value in _entries(text, "startOffsetInfo")}


def parse_msg_offset_info(text: str | None) -> dict[str, list[int]]:
    """``{"<retryFlag>@<queueId>": [message offsets in answer order]}`` (``parseMsgOffsetInfo``)."""
    return {key: [_int_value(v, "msgOffsetInfo") for v in value.split(",")]
            for key, value in _entries(text, "msgOffsetInfo")}


def parse_order_count_info(text: str | None) -> dict[str, int]:
    """``{"<retryFlag>@<queueId>" or "<retryFlag>@qo<queueId>%<offset>": consumed count}``: a FIFO message's
    reconsume count is its ``qo`` entry, else its queue's entry (``parseOrderCountInfo``)."""
    return {key: _int_value(value, "orderCountInfo") for key, value in _entries(text, "orderCountInfo")}


# -- batch ack -----------------------------------------------------------------------------------------------------

def encode_bitset(indexes: Iterable[int]) -> str:
    """``java.util.BitSet.toByteArray`` of the set indexes, base64 (what fastjson writes for a ``byte[]``): bit i of
    byte k is index 8k + i; no trailing zero bytes."""
    value = 0
    for i in indexes:
        if i < 0:
            raise ValueError(f"a bit set index cannot be negative: {i}")
        value |= 1 << i
    raw = value.to_bytes((value.bit_length() + 7) // 8, "little")
    return base64.b64encode(raw).decode("ascii")


def decode_bitset(text: str) -> list[int]:
    """The set indexes of a base64 ``BitSet.toByteArray``, ascending."""
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise PopWireError("b", f"bit set {text!r:.40} is not base64") from None
    value = int.from_bytes(raw, "little")
    out = []
    i = 0
    while value:
        if value & 1:
            out.append(i)
        value >>= 1
        i += 1
    return out


@attrs.frozen
class BatchAck:
    """One entry of a BATCH_ACK_MESSAGE body: the acked messages of one checkpoint (one queue, one pop), as offsets.

    ``topic`` is the topic the consumer popped (never the retry topic); ``retry`` the handles' retry flag."""

    consumer_group: str
    topic: str
    retry: str
    start_offset: int
    queue_id: int
    revive_queue_id: int
    pop_time: int
    invisible_time: int
    offsets: tuple[int, ...]

    def to_json(self) -> dict[str, object]:
        return {"b": encode_bitset(o - self.start_offset for o in self.offsets), "c": self.consumer_group,
                "it": self.invisible_time, "pt": self.pop_time, "q": self.queue_id, "r": self.retry,
                "rq": self.revive_queue_id, "so": self.start_offset, "t": self.topic}


#: BatchAck's JSON names: the short one first, then 5.x's ``alternateNames``
_BATCH_FIELDS = {"consumer_group": ("c", "consumerGroup"), "topic": ("t", "topic"), "retry": ("r", "retry"),
                 "start_offset": ("so", "startOffset"), "queue_id": ("q", "queueId"),
                 "revive_queue_id": ("rq", "reviveQueueId"), "pop_time": ("pt", "popTime"),
                 "invisible_time": ("it", "invisibleTime"), "bit_set": ("b", "bitSet")}


def _batch_value(entry: Mapping[str, object], name: str, index: int) -> object:
    for key in _BATCH_FIELDS[name]:
        if key in entry and entry[key] is not None:
            return entry[key]
    short, long = _BATCH_FIELDS[name]
    raise PopWireError(short, f"acks[{index}] has no {short!r} ({long})")


def _batch_int(entry: Mapping[str, object], name: str, index: int) -> int:
    value = _batch_value(entry, name, index)
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise PopWireError(_BATCH_FIELDS[name][0], f"acks[{index}].{_BATCH_FIELDS[name][0]} is not a number: {value!r:.40}")
    try:
        return java_long(value)  # fastjson reads a number given as text with Java's parser
    except JavaNumberError as exc:
        raise PopWireError(_BATCH_FIELDS[name][0], f"acks[{index}].{_BATCH_FIELDS[name][0]} {exc.reason}: {value!r:.40}") from None


def encode_batch_ack_body(acks: Sequence[BatchAck], broker_name: str) -> bytes:
    """The JSON body of BATCH_ACK_MESSAGE (``BatchAckMessageRequestBody``), short names as the 5.x client sends."""
    return json.dumps({"acks": [a.to_json() for a in acks], "brokerName": broker_name},
                      separators=(",", ":"), sort_keys=True).encode()


def decode_batch_ack_body(body: bytes) -> tuple[list[BatchAck], str | None]:
    """The acks of a BATCH_ACK_MESSAGE body and its brokerName. Raises PopWireError naming the field."""
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise PopWireError("body", f"batch ack body is not JSON: {exc}") from None
    if not isinstance(document, dict):
        raise PopWireError("body", "batch ack body is not a JSON object with 'acks'")
    entries = document.get("acks")
    if entries is None:
        return [], None
    if not isinstance(entries, list):
        raise PopWireError("acks", "'acks' is not a list")
    out = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise PopWireError("acks", f"acks[{index}] is not an object")
        bits = _batch_value(entry, "bit_set", index)
        if not isinstance(bits, str):
            raise PopWireError("b", f"acks[{index}].b is not a base64 string")
        start = _batch_int(entry, "start_offset", index)
        retry = str(_batch_value(entry, "retry", index))
        if retry not in (RETRY_FLAG_NORMAL, RETRY_FLAG_V1, RETRY_FLAG_V2):
            raise PopWireError("r", f"acks[{index}].r is {retry!r}, not 0, 1 or 2")
        out.append(BatchAck(
            consumer_group=str(_batch_value(entry, "consumer_group", index)),
            topic=str(_batch_value(entry, "topic", index)), retry=retry, start_offset=start,
            queue_id=_batch_int(entry, "queue_id", index), revive_queue_id=_batch_int(entry, "revive_queue_id", index),
            pop_time=_batch_int(entry, "pop_time", index), invisible_time=_batch_int(entry, "invisible_time", index),
            offsets=tuple(start + i for i in decode_bitset(bits)),
        ))
    name = document.get("brokerName")
    return out, None if name is None else str(name)


def batch_acks(topic: str, group: str, handles: Iterable[ReceiptHandle]) -> list[BatchAck]:
    """Group handles of messages popped from ``topic`` by ``group`` into batch-ack entries, one per checkpoint
    (``retry@queueId@ckQueueOffset@popTime``), as ``MQClientAPIImpl.batchAckMessageAsync`` does."""
    groups: dict[tuple[str, int, int, int], list[ReceiptHandle]] = {}
    for h in handles:
        groups.setdefault((h.retry_flag, h.queue_id, h.ck_queue_offset, h.pop_time), []).append(h)
    return [
        BatchAck(group, topic, flag, start, queue_id, hs[0].revive_qid, pop_time, hs[0].invisible_time,
                 tuple(sorted(h.queue_offset for h in hs)))
        for (flag, queue_id, start, pop_time), hs in groups.items()
    ]


# -- headers -------------------------------------------------------------------------------------------------------

@header
class PopMessageRequestHeader(HeaderBase):
    """POP_MESSAGE (200050). ``queue_id`` -1 = every readable queue; ``poll_time`` ms of long polling (<= 0: do not
    wait); ``born_time`` the client's send time (0: now); ``init_mode`` 0 MIN / 1 MAX; ``order`` a FIFO pop."""

    consumer_group: str
    topic: str
    queue_id: int
    max_msg_nums: int
    invisible_time: int
    poll_time: int
    born_time: int
    init_mode: int
    exp_type: str | None = None
    exp: str | None = None
    order: bool = False
    attempt_id: str | None = None


@header
class PopMessageResponseHeader(HeaderBase):
    pop_time: int
    invisible_time: int
    revive_qid: int
    rest_num: int
    start_offset_info: str | None = None
    msg_offset_info: str | None = None
    order_count_info: str | None = None


@header
class AckMessageRequestHeader(HeaderBase):
    """ACK_MESSAGE (200051): ``topic`` is the message's real topic (its retry topic for a handle with retry flag 1
    or 2), ``offset`` its queue offset there, ``extra_info`` its receipt handle."""

    consumer_group: str
    topic: str
    queue_id: int
    extra_info: str
    offset: int
    lite_topic: str | None = None


@header
class ChangeInvisibleTimeRequestHeader(HeaderBase):
    """CHANGE_MESSAGE_INVISIBLETIME (200053): the ack's fields and the new ``invisible_time`` (ms from now);
    ``suspend`` keeps the reconsume count when the message comes back (5.5)."""

    consumer_group: str
    topic: str
    queue_id: int
    extra_info: str
    offset: int
    invisible_time: int
    lite_topic: str | None = None
    suspend: bool = False


@header
class ChangeInvisibleTimeResponseHeader(HeaderBase):
    pop_time: int
    invisible_time: int
    revive_qid: int


@header
class PeekMessageRequestHeader(HeaderBase):
    consumer_group: str
    topic: str
    queue_id: int
    max_msg_nums: int


@header
class NotificationRequestHeader(HeaderBase):
    consumer_group: str
    topic: str
    queue_id: int
    poll_time: int
    born_time: int
    order: bool = False
    attempt_id: str | None = None
    exp_type: str | None = None
    exp: str | None = None


@header
class NotificationResponseHeader(HeaderBase):
    has_msg: bool
    polling_full: bool = False


@header
class PollingInfoRequestHeader(HeaderBase):
    consumer_group: str
    topic: str
    queue_id: int


@header
class PollingInfoResponseHeader(HeaderBase):
    polling_num: int
