"""The broker's SQL92 filter: the ``pyrmq_make_message_filter`` answer for expression type ``SQL92`` (spec 7.11).

The compiled filter is called directly by the store's read path (no pluggy per message): the consume-queue check
passes everything (the bloom-filter bitmap of ``enableCalcFilterBitMap`` is not kept, see docs/decisions.md), the
commit-log check reads the record's properties and evaluates the expression; a message matches only on TRUE, and
an evaluation Java would abort (a failed number conversion) does not match.
"""

from __future__ import annotations

import logging
import struct
from typing import Any

from pyrmq.kernel.hookspecs import hookimpl
from pyrmq.remoting.message import BORNHOST_V6_FLAG, NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR, STOREHOSTADDRESS_V6_FLAG

from . import Sql92Expression, compile_sql92
from .jvalues import EvaluationError

log = logging.getLogger("pyrmq.broker.filter")

EXPRESSION_TYPE = "SQL92"
_SYSFLAG_POS = 36  # after size, magic, crc, queueId, flag, queueOffset, physicalOffset (spec 5.1)
_BODYLEN_END = 88  # the IPv4/IPv4 header ends with BODYLEN
_INT = struct.Struct(">i")
_SHORT = struct.Struct(">h")


def record_properties(record: memoryview) -> dict[str, str]:
    """A stored record's properties (``MessageDecoder.decodeProperties``: malformed segments are skipped, a later
    duplicate wins). Decoding them all is cheaper in Python than looking up only the names an expression reads."""
    sys_flag = _INT.unpack_from(record, _SYSFLAG_POS)[0]
    pos = _BODYLEN_END + (12 if sys_flag & BORNHOST_V6_FLAG else 0) + (12 if sys_flag & STOREHOSTADDRESS_V6_FLAG else 0)
    pos += _INT.unpack_from(record, pos - 4)[0]
    pos += 1 + record[pos]
    start = pos + 2
    text = str(record[start : start + _SHORT.unpack_from(record, pos)[0]], "utf-8", "replace")
    result: dict[str, str] = {}
    for item in text.split(PROPERTY_SEPARATOR):
        key, _, value = item.partition(NAME_VALUE_SEPARATOR)
        if key and value:
            result[key] = value
    return result


class Sql92MessageFilter:
    """A compiled SQL92 subscription as the store's two-step ``MessageFilter``."""

    __slots__ = ("expression", "_ev")

    def __init__(self, expression: Sql92Expression) -> None:
        self.expression = expression
        self._ev = expression._ev

    def is_matched_by_consume_queue(self, tags_code: int) -> bool:
        return True

    def is_matched_by_commit_log(self, record: memoryview) -> bool:
        try:
            return self._ev(record_properties(record)) is True  # type: ignore[operator]
        except EvaluationError:
            return False

    def is_matched_by_properties(self, properties: dict[str, str]) -> bool:
        """The same check on a decoded property map (a parked pull woken by an arriving message)."""
        try:
            return self._ev(properties) is True  # type: ignore[operator]
        except EvaluationError:
            return False

    def __repr__(self) -> str:
        return f"Sql92MessageFilter({self.expression.text!r})"


@hookimpl(trylast=True)
def pyrmq_make_message_filter(kernel: Any, expression_type: str, expression: str) -> Sql92MessageFilter | None:
    if (expression_type or "").upper() != EXPRESSION_TYPE:
        return None
    return Sql92MessageFilter(compile_sql92(expression))


@hookimpl(trylast=True)
def pyrmq_configure(kernel: Any) -> None:
    settings = getattr(kernel.bundle, "broker", None) if "broker" in kernel.bundle.roles else None
    if settings is None:
        return
    for key in ("enableCalcFilterBitMap", "enableConsumeQueueExt"):
        if getattr(settings, key, False):
            log.warning("%s=true is ignored: pyrmq keeps no bloom-filter bitmaps in a consume-queue ext file; SQL92 "
                        "filters read each candidate message's properties (docs/decisions.md)", key)
