"""Java values and comparisons for the SQL92 evaluator (4.9's ``ComparisonExpression.__compare``).

Runtime values: ``str`` (String), ``bool`` (Boolean), ``int`` (Integer), :class:`JLong` (Long), ``float`` (Double),
``None`` (null). Message properties are always strings; an operand of another type comes from a literal, and the
literal's type picks how the property is parsed: ``a > 1`` parses ``a`` as an Integer (``"1.5"`` fails), ``a > 1.0``
as a Double. Parsing follows Java (``Integer.valueOf``, ``Double.valueOf``), not Python: no underscores, no
surrounding blanks for integers, ``NaN`` / ``Infinity`` spelled as Java spells them.
"""

from __future__ import annotations

import math
import re

INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1
LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1


class JLong(int):
    """A Java Long (an Integer is a plain ``int``)."""

    __slots__ = ()

    def __neg__(self) -> JLong:
        return JLong(-int(self))


class EvaluationError(Exception):
    """Java would throw while evaluating (a failed number conversion, an illegal comparison): not matched."""


# Java's FloatingDecimal.readJavaFormatString after String.trim(): ASCII digits only, optional f/d suffix, hex form
_JAVA_DOUBLE = re.compile(
    r"[+-]?(?:NaN|Infinity"
    r"|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?"
    r"|0[xX](?:[0-9a-fA-F]+\.?|[0-9a-fA-F]*\.[0-9a-fA-F]+)[pP][+-]?[0-9]+[fFdD]?)"
)
_JAVA_INT = re.compile(r"[+-]?\d+")  # Character.digit accepts every Unicode decimal digit, as does int()
_TRIM = "".join(chr(c) for c in range(0x21))


def parse_int(s: str) -> int:
    """``Integer.valueOf(s)``."""
    if len(s) < 10 and s.isdecimal():  # unsigned and short enough to fit: the common case, without the regex
        return int(s)
    if _JAVA_INT.fullmatch(s) is None:
        raise EvaluationError(f"For input string: {s!r}")
    v = int(s)
    if not INT_MIN <= v <= INT_MAX:
        raise EvaluationError(f"For input string: {s!r} (out of Integer range)")
    return v


def parse_long(s: str) -> JLong:
    """``Long.valueOf(s)``."""
    if _JAVA_INT.fullmatch(s) is None:
        raise EvaluationError(f"For input string: {s!r}")
    v = int(s)
    if not LONG_MIN <= v <= LONG_MAX:
        raise EvaluationError(f"For input string: {s!r} (out of Long range)")
    return JLong(v)


def parse_double(s: str) -> float:
    """``Double.valueOf(s)``."""
    t = s.strip(_TRIM)
    if _JAVA_DOUBLE.fullmatch(t) is None:
        raise EvaluationError(f"For input string: {s!r}")
    if t[-1] in "fFdD":  # the type suffix (hex digits never end the text: a p-exponent follows them)
        t = t[:-1]
    body = t.lstrip("+-")
    if body.startswith(("0x", "0X")):
        v = float.fromhex(t)
    elif body == "NaN":
        v = math.nan
    elif body == "Infinity":
        v = -math.inf if t[0] == "-" else math.inf
    else:
        v = float(t)
    return v


def parse_boolean(s: str) -> bool:
    """``Boolean.valueOf(s)``: true only for "true" in any case."""
    return s.lower() == "true"


def double_cmp(a: float, b: float) -> int:
    """``Double.compare``: NaN equals itself and is above everything; -0.0 is below 0.0."""
    if a < b:
        return -1
    if a > b:
        return 1
    if a == b:
        if a == 0.0:
            sa, sb = math.copysign(1.0, a), math.copysign(1.0, b)
            return (sa > sb) - (sa < sb)
        return 0
    an, bn = a != a, b != b
    return (an > bn) - (an < bn)


def _cmp(a: object, b: object) -> int:
    return (a > b) - (a < b)  # type: ignore[operator]


def java_compare(lv: object, rv: object) -> int:
    """``__compare(lv, rv, convertStringExpressions=true)`` for non-null operands; may raise EvaluationError."""
    lc, rc = type(lv), type(rv)
    if lc is rc:
        if lc is float:
            return double_cmp(lv, rv)  # type: ignore[arg-type]
        return _cmp(lv, rv)
    if lc is bool:
        if rc is str:  # Java casts the Boolean to String here: ClassCastException
            raise EvaluationError(f"cannot compare Boolean {lv} with String {rv!r}")
        return -1
    if lc is int or lc is JLong:
        if rc is int or rc is JLong:
            return _cmp(int(lv), int(rv))  # type: ignore[call-overload]
        if rc is float:
            return double_cmp(float(lv), rv)  # type: ignore[arg-type]
        if rc is str:
            return _cmp(int(lv), int(parse_int(rv) if lc is int else parse_long(rv)))  # type: ignore[arg-type,call-overload]
        return -1
    if lc is float:
        if rc is int or rc is JLong:
            return double_cmp(lv, float(rv))  # type: ignore[arg-type]
        if rc is str:
            return double_cmp(lv, parse_double(rv))  # type: ignore[arg-type]
        return -1
    if lc is str:
        if rc is bool:
            return _cmp(parse_boolean(lv), rv)  # type: ignore[arg-type]
        if rc is int:
            return _cmp(parse_int(lv), rv)  # type: ignore[arg-type]
        if rc is JLong:
            return _cmp(parse_long(lv), int(rv))  # type: ignore[arg-type]
        if rc is float:
            return double_cmp(parse_double(lv), rv)  # type: ignore[arg-type]
        return -1
    return -1


def java_str(value: object) -> str:
    """A value as Java's ``toString`` would print it (for error messages)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, float):
        return repr(value)
    return str(int(value))  # type: ignore[call-overload]
