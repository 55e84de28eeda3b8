"""The broker's SQL92 filter: the ``pyrmq_make_message_filter`` answer for expression type ``SQL92`` (spec 7.11).

The compiled filter is called directly by the store's read path (no pluggy per message): the consume-queue check
passes everything, the commit-log check reads the properties the expression names from the record and evaluates
the expression; a message matches only on TRUE, and an evaluation Java would abort (a failed number conversion)
does not match. A group whose filter is registered by heartbeat gets its answers evaluated once at dispatch
(``plugins/broker/consumer_filter.py``), so its pulls use this check only for messages stored before that.
"""

from __future__ import annotations

import logging
import struct
from typing import Any

import attrs

from pyrmq.kernel.hookspecs import hookimpl
from pyrmq.kernel.settings import at_least, between, setting
from pyrmq.kernel.kernel import Kernel
from pyrmq.remoting.message import BORNHOST_V6_FLAG, NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR, STOREHOSTADDRESS_V6_FLAG

from . import Sql92Expression, compile_sql92
from .jvalues import EvaluationError

log = logging.getLogger("pyrmq.broker.filter")

EXPRESSION_TYPE = "SQL92"
_SYSFLAG_POS = 36  # after size, magic, crc, queueId, flag, queueOffset, physicalOffset (spec 5.1)
_BODYLEN_END = 88  # the IPv4/IPv4 header ends with BODYLEN
_INT = struct.Struct(">i")
_SHORT = struct.Struct(">h")


def _properties_bytes(record: memoryview) -> memoryview:
    """The PROPERTIES field of a stored record (spec 5.1)."""
    sys_flag = _INT.unpack_from(record, _SYSFLAG_POS)[0]
    pos = _BODYLEN_END + (12 if sys_flag & BORNHOST_V6_FLAG else 0) + (12 if sys_flag & STOREHOSTADDRESS_V6_FLAG else 0)
    pos += _INT.unpack_from(record, pos - 4)[0]
    pos += 1 + record[pos]
    start = pos + 2
    return record[start : start + _SHORT.unpack_from(record, pos)[0]]


def record_properties(record: memoryview) -> dict[str, str]:
    """A stored record's properties (``MessageDecoder.decodeProperties``: malformed segments are skipped, a later
    duplicate wins)."""
    text = str(_properties_bytes(record), "utf-8", "replace")
    result: dict[str, str] = {}
    for item in text.split(PROPERTY_SEPARATOR):
        key, _, value = item.partition(NAME_VALUE_SEPARATOR)
        if key and value:
            result[key] = value
    return result


class PropertyReader:
    """Reads only the named properties of a stored record, straight from its bytes: the last ``name\\x01value``
    segment of each name, as :func:`record_properties` would keep it (about half the cost of decoding the whole
    map for an expression naming two of eight properties). A last segment with an empty value (which the decoder
    skips, so that an earlier one would count) sends the record through :func:`record_properties`."""

    __slots__ = ("_keys",)

    def __init__(self, names: frozenset[str]) -> None:
        sep, nv = PROPERTY_SEPARATOR.encode(), NAME_VALUE_SEPARATOR.encode()
        self._keys = tuple((name, sep + name.encode() + nv, name.encode() + nv) for name in sorted(names))

    def __call__(self, record: memoryview) -> dict[str, str]:
        return self.read(_properties_bytes(record).tobytes(), record)

    def read(self, data: bytes, record: memoryview) -> dict[str, str]:
        """From the record's property bytes ``data``."""
        props: dict[str, str] = {}
        for name, inner, first in self._keys:
            i = data.rfind(inner)
            if i >= 0:
                i += len(inner)
            elif data.startswith(first):
                i = len(first)
            else:
                continue
            j = data.find(b"\x02", i)
            value = data[i:j] if j >= 0 else data[i:]
            if not value:
                return record_properties(record)
            props[name] = value.decode("utf-8", "replace")
        return props


class Sql92MessageFilter:
    """A compiled SQL92 subscription as the store's two-step ``MessageFilter``."""

    __slots__ = ("expression", "_ev", "_read", "_required")

    def __init__(self, expression: Sql92Expression) -> None:
        self.expression = expression
        self._ev = expression._ev
        self._read = PropertyReader(expression.names).read
        self._required = expression.required or ()

    def is_matched_by_consume_queue(self, tags_code: int) -> bool:
        return True

    def is_matched_by_commit_log(self, record: memoryview) -> bool:
        data = _properties_bytes(record).tobytes()
        if self._required:
            # an expression that needs region = 'eu' cannot match a record without the bytes region SOH eu
            for segment in self._required:
                if segment in data:
                    break
            else:
                return False
        try:
            return self._ev(self._read(data, record)) is True  # type: ignore[operator]
        except EvaluationError:
            return False

    def is_matched_by_properties(self, properties: dict[str, str]) -> bool:
        """The same check on a decoded property map (dispatch; a parked pull woken by an arriving message)."""
        try:
            return self._ev(properties) is True  # type: ignore[operator]
        except EvaluationError:
            return False

    def __repr__(self) -> str:
        return f"Sql92MessageFilter({self.expression.text!r})"


@hookimpl(trylast=True)
def pyrmq_make_message_filter(kernel: Kernel, expression_type: str, expression: str) -> Sql92MessageFilter | None:
    if (expression_type or "").upper() != EXPRESSION_TYPE:
        return None
    return Sql92MessageFilter(compile_sql92(expression))


@attrs.frozen
class BloomFilterSettings:
    """RocketMQ's bloom-filter path (consume-queue ext bitmaps): accepted for broker.conf compatibility, ignored with a
    warning (docs/decisions.md)."""

    enableCalcFilterBitMap: bool = setting(False, help="ignored (warned): pyrmq keeps no bitmaps")
    enableConsumeQueueExt: bool = setting(False, help="ignored (warned): pyrmq keeps no consume-queue ext file")
    expectConsumerNumUseFilter: int = setting(32, check=at_least(1), help="ignored")
    maxErrorRateOfBloomFilter: int = setting(20, check=between(1, 100), help="ignored")


@hookimpl(trylast=True)
def pyrmq_register_settings() -> dict[str, type]:
    return {"broker": BloomFilterSettings}


@hookimpl(trylast=True)
def pyrmq_configure(kernel: Kernel) -> None:
    settings = kernel.settings.find(BloomFilterSettings)
    if settings is None:
        return
    for key in ("enableCalcFilterBitMap", "enableConsumeQueueExt"):
        if getattr(settings, key, False):
            log.warning("%s=true is ignored: pyrmq keeps no bloom-filter bitmaps in a consume-queue ext file; "
                        "registered SQL92 filters are evaluated at dispatch and their answers kept in memory "
                        "(docs/decisions.md)", key)
