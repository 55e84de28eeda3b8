"""Custom headers (a command's ``extFields``) as attrs classes (spec 1.6 and 3).

Every class has ``from_ext_fields(ext)`` and ``to_ext_fields()``:

* in: any JSON scalar is accepted and coerced (numbers by Java's rules, :mod:`pyrmq.remoting.validation`: an
  ``Int`` field as ``Integer.parseInt``, an ``int`` field as ``Long.parseLong``, so no blanks, no ``_``, in range;
  ``"true"`` case-insensitively / JSON ``true`` -> True, anything else -> False, as Java's
  ``Boolean.parseBoolean``); unknown keys (``bname``, ``AccessKey`` ...) are ignored; a missing required field or a
  number Java refuses raises ``HeaderError`` naming the field (a processor letting it escape answers SYSTEM_ERROR
  with its text, like Java's ``RemotingCommandException``);
* out: every non-None field as text (booleans ``"true"``/``"false"``), the form every client accepts.

The converters are generated once per class (attrs-style code generation): the send path decodes a header per
message and a generic field loop costs several microseconds. Headers are mutable ``attrs.define`` classes for the
same reason (frozen attrs classes initialise more slowly).

``SendMessageRequestHeader`` reads both the V1 long names and the V2 short names ``a``..``n`` (spec 3.1) whatever
the request code, since clients disagree on which code uses which spelling.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Self, TypeAlias, TypeVar, cast, dataclass_transform, overload

import attrs

from .errors import HeaderError
from .validation import INT_MAX, INT_MIN, LONG_MAX, LONG_MIN, JavaNumberError, java_number

__all__ = [
    "header",
    "HeaderBase",
    "Int",
    "wire",
    "SendMessageRequestHeader",
    "SendMessageResponseHeader",
    "PullMessageRequestHeader",
    "PullMessageResponseHeader",
    "QueryConsumerOffsetRequestHeader",
    "QueryConsumerOffsetResponseHeader",
    "UpdateConsumerOffsetRequestHeader",
    "GetMaxOffsetRequestHeader",
    "GetMaxOffsetResponseHeader",
    "GetMinOffsetRequestHeader",
    "GetMinOffsetResponseHeader",
    "GetEarliestMsgStoretimeRequestHeader",
    "GetEarliestMsgStoretimeResponseHeader",
    "SearchOffsetRequestHeader",
    "SearchOffsetResponseHeader",
    "GetConsumerListByGroupRequestHeader",
    "NotifyConsumerIdsChangedRequestHeader",
    "UnregisterClientRequestHeader",
    "QueryMessageRequestHeader",
    "QueryMessageResponseHeader",
    "ViewMessageRequestHeader",
    "EndTransactionRequestHeader",
    "CheckTransactionStateRequestHeader",
    "ConsumerSendMsgBackRequestHeader",
    "CreateTopicRequestHeader",
    "RegisterBrokerRequestHeader",
    "RegisterBrokerResponseHeader",
    "UnRegisterBrokerRequestHeader",
    "GetRouteInfoRequestHeader",
    "WipeWritePermOfBrokerRequestHeader",
    "WipeWritePermOfBrokerResponseHeader",
    "AddWritePermOfBrokerRequestHeader",
    "AddWritePermOfBrokerResponseHeader",
    "QueryDataVersionRequestHeader",
    "QueryDataVersionResponseHeader",
    "GetKVConfigRequestHeader",
    "GetKVConfigResponseHeader",
    "PutKVConfigRequestHeader",
    "DeleteKVConfigRequestHeader",
    "ResetOffsetRequestHeader",
    "GetConsumerRunningInfoRequestHeader",
    "ConsumeMessageDirectlyResultRequestHeader",
]

T = TypeVar("T")

#: the type of a header field Java declares ``Integer`` / ``int``: read with ``Integer.parseInt``'s rules and range
#: (a plain ``int`` field is a Java ``Long`` / ``long``: ``Long.parseLong``'s). An alias, so values are plain ints.
Int: TypeAlias = int


class HeaderBase:
    """Base of every header class: what :func:`header` generates, declared for type checkers (no runtime cost: the
    generated functions are set on each class itself; no ``__dict__`` is added to the slotted instances)."""

    __slots__ = ()

    if TYPE_CHECKING:
        __attrs_attrs__: ClassVar[tuple[attrs.Attribute[object], ...]]  # set by attrs.define
        #: attribute name -> extFields key
        WIRE_NAMES: ClassVar[dict[str, str]]

        @classmethod
        def from_ext_fields(cls, ext: Mapping[str, object]) -> Self:
            """Decode a command's extFields (either spelling for a class with V2 names)."""
            ...

        def to_ext_fields(self) -> dict[str, str]:
            """Every non-None field as text, under its V1 key."""
            ...


H = TypeVar("H", bound=HeaderBase)


@overload
def wire(name: str) -> Any: ...  # type: ignore[explicit-any]  # a required field: a placeholder, as attrs.field()
@overload
def wire(name: str, default: T) -> T: ...
def wire(name: str, default: object = attrs.NOTHING) -> object:
    """An attrs field whose extFields key is ``name`` instead of the camelCase of the attribute. Type checkers see
    a default only when it is passed by keyword (``wire("clientId", default=None)``), as for ``attrs.field``."""
    return attrs.field(default=default, metadata={"wire": name})


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


# ---- converters called by the generated code -------------------------------------------------------------------

def _text(v: object) -> str:
    if type(v) is str:
        return v
    if v is True:
        return "true"
    if v is False:
        return "false"
    return str(v)


def _int(v: object, key: str) -> int:
    """An ``Int`` field's value (``Integer.parseInt``), or HeaderError naming the field and what was expected."""
    try:
        return java_number(v, INT_MIN, INT_MAX, "int")
    except JavaNumberError as exc:
        raise HeaderError(key, f"the custom field <{key}> {exc.reason}: {v!r:.40}") from None


def _long(v: object, key: str) -> int:
    """An ``int`` field's value (``Long.parseLong``), or HeaderError naming the field and what was expected."""
    try:
        return java_number(v, LONG_MIN, LONG_MAX, "long")
    except JavaNumberError as exc:
        raise HeaderError(key, f"the custom field <{key}> {exc.reason}: {v!r:.40}") from None


def _bool(v: object) -> bool:
    if v is True or v is False:
        return v
    return str(v).lower() == "true"


def _missing(key: str) -> HeaderError:
    return HeaderError(key, f"the custom field <{key}> is null")


_KIND = re.compile(r"^\s*(str|int|Int|bool)\s*(\|\s*None)?\s*$")


def _field_kind(f: attrs.Attribute[object]) -> str:
    t: object = f.type
    if isinstance(t, type):
        t = t.__name__
    m = _KIND.match(str(t))
    if not m:
        raise TypeError(f"header field {f.name}: unsupported type {t!r} (str, Int, int, bool, optionally | None)")
    return m.group(1)


_FromExt = Callable[[type[H], Mapping[str, object]], H]
_ToExt = Callable[[H], dict[str, str]]


def _compile(cls: type[H], names: dict[str, str]) -> tuple[_FromExt[H], _ToExt[H]]:
    """Generate ``from(cls, ext)`` and ``to(self)`` for the wire names ``names`` (attribute -> key)."""
    fields = attrs.fields(cls)
    ns: dict[str, object] = {"_text": _text, "_int": _int, "_long": _long, "_bool": _bool, "_missing": _missing}
    src_from = ["def from_ext(cls, ext):", "    get = ext.get"]
    src_to = ["def to_ext(self):", "    d = {}"]
    args = []
    for f in fields:
        key = names[f.name]
        kind = _field_kind(f)
        var = f"v_{f.name}"
        args.append(var)
        src_from.append(f"    v = get({key!r})")
        if f.default is attrs.NOTHING:
            src_from.append(f"    if v is None: raise _missing({key!r})")
            missing = None
        else:
            ns[f"d_{f.name}"] = f.default
            missing = f"d_{f.name}"
        if kind == "str":
            conv = "v if type(v) is str else _text(v)"
        elif kind == "Int":  # the usual text (no sign, nine digits at most) inline, the rest by Java's rules
            conv = f"int(v) if type(v) is str and v.isdecimal() and len(v) < 10 else _int(v, {key!r})"
        elif kind == "int":
            conv = f"int(v) if type(v) is str and v.isdecimal() and len(v) < 19 else _long(v, {key!r})"
        else:
            conv = "_bool(v)"
        if missing is None:
            src_from.append(f"    {var} = {conv}")
        else:
            src_from.append(f"    {var} = {missing} if v is None else ({conv})")
        src_to.append(f"    v = self.{f.name}")
        if kind == "str":
            out = "v"
        elif kind in ("int", "Int"):
            out = "str(v)"
        else:
            out = "'true' if v else 'false'"
        src_to.append(f"    if v is not None: d[{key!r}] = {out}")
    src_from.append(f"    return cls({', '.join(args)})")
    src_to.append("    return d")
    exec("\n".join(src_from) + "\n\n" + "\n".join(src_to), ns)  # noqa: S102 - generated from field names only
    return cast("_FromExt[H]", ns["from_ext"]), cast("_ToExt[H]", ns["to_ext"])


@overload
def header(cls: type[H], /) -> type[H]: ...
@overload
def header(cls: None = None, /, *, v2: Mapping[str, str] | None = None) -> Callable[[type[H]], type[H]]: ...
@dataclass_transform(field_specifiers=(attrs.field, wire))
def header(
    cls: type[H] | None = None, /, *, v2: Mapping[str, str] | None = None
) -> type[H] | Callable[[type[H]], type[H]]:
    """Class decorator for a :class:`HeaderBase` subclass: ``attrs.define`` plus generated ``from_ext_fields`` /
    ``to_ext_fields``.

    ``v2`` maps attribute names to the short V2 keys; such a class also gets ``to_ext_fields_v2`` and its
    ``from_ext_fields`` accepts either spelling.
    """

    def wrap(c: type[H]) -> type[H]:
        c = attrs.define(c)
        names = {f.name: f.metadata.get("wire", _camel(f.name)) for f in attrs.fields(c)}
        from_v1, to_v1 = _compile(c, names)
        setattr(c, "to_ext_fields", to_v1)
        setattr(c, "WIRE_NAMES", names)
        if v2 is None:
            setattr(c, "from_ext_fields", classmethod(from_v1))
            return c
        names2 = {name: v2.get(name, key) for name, key in names.items()}
        from_v2, to_v2 = _compile(c, names2)
        setattr(c, "to_ext_fields_v2", to_v2)
        setattr(c, "WIRE_NAMES_V2", names2)
        # the first two V2 keys (e.g. "a", "b"): either present only in the V2 spelling
        probe, probe2 = (names2[name] for name in list(v2)[:2])

        def from_ext_fields(klass: type[H], ext: Mapping[str, object]) -> H:
            return from_v2(klass, ext) if probe in ext or probe2 in ext else from_v1(klass, ext)

        setattr(c, "from_ext_fields", classmethod(from_ext_fields))
        return c

    return wrap if cls is None else wrap(cls)


# ---- 3.1 / 3.2 send ---------------------------------------------------------------------------------------------

_SEND_V2 = {
    "producer_group": "a", "topic": "b", "default_topic": "c", "default_topic_queue_nums": "d", "queue_id": "e",
    "sys_flag": "f", "born_timestamp": "g", "flag": "h", "properties": "i", "reconsume_times": "j",
    "unit_mode": "k", "max_reconsume_times": "l", "batch": "m", "bname": "n",
}


@header(v2=_SEND_V2)
class SendMessageRequestHeader(HeaderBase):
    """Codes 10/324 (V1 names) and 310/320/325 (V2 names a..n); either spelling is read on any code.

    The producer group and the template topic and queue count may be missing, as RocketMQ's decoders only log it:
    the template matters only when the topic is auto-created (the send path refuses there, naming the field)."""

    topic: str
    queue_id: Int
    sys_flag: Int
    born_timestamp: int
    flag: Int
    producer_group: str | None = None
    default_topic: str | None = None
    default_topic_queue_nums: Int | None = None
    properties: str | None = None
    reconsume_times: Int | None = None
    unit_mode: bool = False
    max_reconsume_times: Int | None = None
    batch: bool = False
    bname: str | None = None

    if TYPE_CHECKING:
        #: attribute name -> V2 extFields key (``a``..``n``)
        WIRE_NAMES_V2: ClassVar[dict[str, str]]

        def to_ext_fields_v2(self) -> dict[str, str]:
            """Every non-None field as text, under its V2 key."""
            ...


@header
class SendMessageResponseHeader(HeaderBase):
    msg_id: str
    queue_id: Int
    queue_offset: int
    transaction_id: str | None = None


# ---- 3.3 / 3.4 pull ---------------------------------------------------------------------------------------------

@header
class PullMessageRequestHeader(HeaderBase):
    consumer_group: str
    topic: str
    queue_id: Int
    queue_offset: int
    max_msg_nums: Int
    sys_flag: Int
    commit_offset: int
    suspend_timeout_millis: int
    sub_version: int
    subscription: str | None = None
    expression_type: str | None = None
    bname: str | None = None


@header
class PullMessageResponseHeader(HeaderBase):
    """All four fields are required by Java's decoder on every accepted pull code (spec 3.4)."""

    suggest_which_broker_id: int
    next_begin_offset: int
    min_offset: int
    max_offset: int


# ---- 3.5 offsets, queries -----------------------------------------------------------------------------------------

@header
class QueryConsumerOffsetRequestHeader(HeaderBase):
    consumer_group: str
    topic: str
    queue_id: Int


@header
class QueryConsumerOffsetResponseHeader(HeaderBase):
    offset: int


@header
class UpdateConsumerOffsetRequestHeader(HeaderBase):
    consumer_group: str
    topic: str
    queue_id: Int
    commit_offset: int


@header
class GetMaxOffsetRequestHeader(HeaderBase):
    topic: str
    queue_id: Int


@header
class GetMaxOffsetResponseHeader(HeaderBase):
    offset: int


@header
class GetMinOffsetRequestHeader(HeaderBase):
    topic: str
    queue_id: Int


@header
class GetMinOffsetResponseHeader(HeaderBase):
    offset: int


@header
class GetEarliestMsgStoretimeRequestHeader(HeaderBase):
    topic: str
    queue_id: Int


@header
class GetEarliestMsgStoretimeResponseHeader(HeaderBase):
    timestamp: int


@header
class SearchOffsetRequestHeader(HeaderBase):
    topic: str
    queue_id: Int
    timestamp: int


@header
class SearchOffsetResponseHeader(HeaderBase):
    offset: int


@header
class GetConsumerListByGroupRequestHeader(HeaderBase):
    consumer_group: str


@header
class NotifyConsumerIdsChangedRequestHeader(HeaderBase):
    consumer_group: str


@header
class UnregisterClientRequestHeader(HeaderBase):
    client_id: str = wire("clientID")
    producer_group: str | None = None
    consumer_group: str | None = None


@header
class QueryMessageRequestHeader(HeaderBase):
    topic: str
    key: str
    max_num: Int
    begin_timestamp: int
    end_timestamp: int


@header
class QueryMessageResponseHeader(HeaderBase):
    index_last_update_timestamp: int
    index_last_update_phyoffset: int


@header
class ViewMessageRequestHeader(HeaderBase):
    offset: int


# ---- 3.6 - 3.9 transactions, retries, topics ------------------------------------------------------------------

@header
class EndTransactionRequestHeader(HeaderBase):
    producer_group: str
    tran_state_table_offset: int
    commit_log_offset: int
    commit_or_rollback: Int  # 0 unknown, 8 commit, 12 rollback
    msg_id: str
    from_transaction_check: bool = False
    transaction_id: str | None = None


@header
class CheckTransactionStateRequestHeader(HeaderBase):
    tran_state_table_offset: int
    commit_log_offset: int
    msg_id: str | None = None
    transaction_id: str | None = None
    offset_msg_id: str | None = None


@header
class ConsumerSendMsgBackRequestHeader(HeaderBase):
    offset: int
    group: str
    delay_level: Int
    origin_msg_id: str | None = None
    origin_topic: str | None = None
    unit_mode: bool = False
    max_reconsume_times: Int | None = None
    bname: str | None = None


@header
class CreateTopicRequestHeader(HeaderBase):
    topic: str
    default_topic: str
    read_queue_nums: Int
    write_queue_nums: Int
    perm: Int
    topic_filter_type: str
    topic_sys_flag: Int | None = None
    order: bool = False
    attributes: str | None = None  # 5.x: "+message.type=FIFO" (AttributeParser), mqadmin updateTopic -a


# ---- 3.10 name server -------------------------------------------------------------------------------------------

@header
class RegisterBrokerRequestHeader(HeaderBase):
    broker_name: str
    broker_addr: str
    cluster_name: str
    ha_server_addr: str
    broker_id: int
    compressed: bool = False
    body_crc32: Int = 0


@header
class RegisterBrokerResponseHeader(HeaderBase):
    ha_server_addr: str | None = None
    master_addr: str | None = None


@header
class UnRegisterBrokerRequestHeader(HeaderBase):
    broker_name: str
    broker_addr: str
    cluster_name: str
    broker_id: int


@header
class GetRouteInfoRequestHeader(HeaderBase):
    topic: str
    accept_standard_json_only: bool = False


@header
class WipeWritePermOfBrokerRequestHeader(HeaderBase):
    broker_name: str


@header
class WipeWritePermOfBrokerResponseHeader(HeaderBase):
    wipe_topic_count: Int


@header
class AddWritePermOfBrokerRequestHeader(HeaderBase):
    broker_name: str


@header
class AddWritePermOfBrokerResponseHeader(HeaderBase):
    add_topic_count: Int


@header
class QueryDataVersionRequestHeader(HeaderBase):
    broker_name: str
    broker_addr: str
    cluster_name: str
    broker_id: int


@header
class QueryDataVersionResponseHeader(HeaderBase):
    changed: bool


@header
class GetKVConfigRequestHeader(HeaderBase):
    namespace: str
    key: str


@header
class GetKVConfigResponseHeader(HeaderBase):
    value: str | None = None


@header
class PutKVConfigRequestHeader(HeaderBase):
    namespace: str
    key: str
    value: str


@header
class DeleteKVConfigRequestHeader(HeaderBase):
    namespace: str
    key: str


# ---- broker -> client (spec 2.1, client-side receivers) -------------------------------------------------------

@header
class ResetOffsetRequestHeader(HeaderBase):
    topic: str
    group: str
    timestamp: int
    is_force: bool = False


@header
class GetConsumerRunningInfoRequestHeader(HeaderBase):
    consumer_group: str
    client_id: str = wire("clientId")
    jstack_enable: bool = False


@header
class ConsumeMessageDirectlyResultRequestHeader(HeaderBase):
    consumer_group: str
    client_id: str | None = wire("clientId", default=None)
    msg_id: str | None = None
    broker_name: str | None = None
