"""Expression nodes of the SQL92 selector, each compiled to a plain closure over the message properties.

``node.ev(props)`` returns True / False / None (SQL's unknown) for a boolean node, or a Java value for an operand
(see :mod:`.jvalues`); it raises :class:`EvaluationError` where Java throws (the message then does not match).
The semantics are 4.9's ``filter/.../expression/*.java``: three-valued AND/OR/NOT; ``=`` with only the left side
null is null, with only the right side null is FALSE; ``< <= > >=`` with a null side are null. Common shapes
(a property against a literal, IN, IS NULL) get dedicated closures; everything else goes through the generic ones.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .jvalues import EvaluationError, JLong, double_cmp, java_compare, java_str, parse_boolean, parse_double, parse_int, parse_long

Props = Mapping[str, str]
Eval = Callable[[Props], Any]


class Node:
    """``constant``: a literal (Java ``ConstantExpression``); ``boolean``: yields a Boolean (``BooleanExpression``);
    ``prop``: a bare property name. ``folded`` holds the value of a literal or a negated literal, else is absent.
    ``required``: byte strings of which a message's property text must contain one for the node to be TRUE (each a
    ``name``-SOH-``value`` segment the node tests for), or None when nothing simple is required."""

    __slots__ = ("ev", "text", "constant", "boolean", "prop", "folded", "required")

    def __init__(self, ev: Eval, text: str, *, constant: bool = False, boolean: bool = False, prop: str | None = None,
                 folded: tuple[Any] | None = None, required: tuple[bytes, ...] | None = None) -> None:
        self.ev = ev
        self.text = text
        self.constant = constant
        self.boolean = boolean
        self.prop = prop
        self.folded = folded
        self.required = required

    def __repr__(self) -> str:
        return self.text


def literal(value: Any, *, boolean: bool = False) -> Node:
    return Node(lambda p: value, java_str(value), constant=True, boolean=boolean, folded=(value,))


def prop(name: str) -> Node:
    def ev(p: Props) -> Any:
        return p.get(name)

    return Node(ev, name, prop=name)


def negate(x: Node) -> Node:
    text = f"(- {x.text})"
    if x.folded is not None:
        v = x.folded[0]
        n = -v if type(v) in (int, JLong, float) else None
        return Node(lambda p: n, text, folded=(n,))
    inner = x.ev

    def ev(p: Props) -> Any:
        v = inner(p)
        return -v if type(v) in (int, JLong, float) else None

    return Node(ev, text)


def not_(x: Node) -> Node:
    inner = x.ev

    def ev(p: Props) -> bool | None:
        v = inner(p)
        return None if v is None else not v

    return Node(ev, f"(NOT {x.text})", boolean=True)


def bool_cast(x: Node) -> Node:
    """A bare property used as a condition: null when missing, else FALSE (a property is never a Boolean)."""
    name = x.prop

    def ev(p: Props) -> bool | None:
        v = p.get(name)
        return None if v is None else False

    return Node(ev, x.text, boolean=True)


def _logic(a: Node, b: Node, dominant: bool, op: str) -> Node:
    """AND (FALSE dominates) and OR (TRUE dominates), left side first: the dominant value if either side has it,
    else null if either side is null, else the other value."""
    left, right = a.ev, b.ev

    def ev(p: Props) -> bool | None:
        lv = left(p)
        if lv is dominant:
            return dominant
        rv = right(p)
        if rv is dominant:
            return dominant
        if lv is None or rv is None:
            return None
        return not dominant

    if dominant:  # OR is TRUE only if a side is: one of either side's segments
        required = a.required + b.required if a.required and b.required else None
    else:  # AND is TRUE only if both sides are: the shorter choice of the two
        choices = [r for r in (a.required, b.required) if r]
        required = min(choices, key=len) if choices else None
    return Node(ev, f"({a.text} {op} {b.text})", boolean=True, required=required)


def and_(a: Node, b: Node) -> Node:
    return _logic(a, b, False, "&&")


def or_(a: Node, b: Node) -> Node:
    return _logic(a, b, True, "||")


def _segments(name: str, values: Iterable[str]) -> tuple[bytes, ...] | None:
    """The ``name``-SOH-``value`` bytes a stored message has when property ``name`` is one of ``values``; None when a
    value could also come from undecodable bytes (U+FFFD) or cannot be encoded."""
    if any("\ufffd" in v for v in values):
        return None
    try:
        return tuple(f"{name}\x01{v}".encode() for v in values)
    except UnicodeEncodeError:  # a lone surrogate
        return None


def _property_test(name: str, convert: Callable[[str], Any] | None, test: Callable[[Any, Any], bool], c: Any,
                   text: str, required: tuple[bytes, ...] | None = None) -> Node:
    """A property against a literal: null when the property is missing, else ``test(convert(value), c)`` (the
    literal's type decides ``convert``; a string literal compares the value as it is)."""
    if convert is None:
        def ev(p: Props) -> bool | None:
            v = p.get(name)
            return None if v is None else test(v, c)
    else:
        def ev(p: Props) -> bool | None:
            v = p.get(name)
            return None if v is None else test(convert(v), c)

    return Node(ev, text, boolean=True, required=required)


# -- equality ------------------------------------------------------------------------------------------------------

_PARSERS: dict[type, Callable[[str], Any] | None] = {str: None, int: parse_int, JLong: parse_long, float: parse_double,
                                              bool: parse_boolean}


def equal(a: Node, b: Node) -> Node:
    text = f"({a.text} == {b.text})"
    if a.prop is not None and b.folded is not None and b.folded[0] is not None:
        c = b.folded[0]
        # c is never NaN or 0.0 (literals below Double.MIN_VALUE do not parse)
        required = _segments(a.prop, [c]) if type(c) is str else None
        return _property_test(a.prop, _PARSERS[type(c)], operator.eq, c, text, required)
    left, right = a.ev, b.ev

    def ev(p: Props) -> bool | None:
        lv = left(p)
        rv = right(p)
        if lv is None:
            return True if rv is None else None
        if rv is None:
            return False
        if type(lv) is type(rv) and lv == rv:
            return True
        return java_compare(lv, rv) == 0

    return Node(ev, text, boolean=True)


def is_null(a: Node) -> Node:
    inner = a.ev
    return Node(lambda p: inner(p) is None, f"({a.text} == NULL)", boolean=True)


# -- ordering ------------------------------------------------------------------------------------------------------

ORDER_OPS = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le}


def compare(op: str, a: Node, b: Node) -> Node:
    text = f"({a.text} {op} {b.text})"
    test = ORDER_OPS[op]
    if a.prop is not None and b.folded is not None:
        name, c = a.prop, b.folded[0]
        if c is None:
            return Node(lambda p: None, text, boolean=True)
        if type(c) is int or type(c) is JLong:
            return _property_test(name, parse_int if type(c) is int else parse_long, test, c, text)
        if type(c) is float:
            nan_answer = test(1, 0)  # Double.compareTo puts NaN above everything

            def ev_double(p: Props) -> bool | None:
                v = p.get(name)
                if v is None:
                    return None
                x = parse_double(v)
                return nan_answer if x != x else test(x, c)

            return Node(ev_double, text, boolean=True)
    left, right = a.ev, b.ev

    def ev(p: Props) -> bool | None:
        lv = left(p)
        if lv is None:
            return None
        rv = right(p)
        if rv is None:
            return None
        if type(lv) is str and type(rv) is str:  # two strings: compared as doubles, or Java throws
            return test(double_cmp(parse_double(lv), parse_double(rv)), 0)
        return test(java_compare(lv, rv), 0)

    return Node(ev, text, boolean=True)


def between(value: Node, low: Node, high: Node, negated: bool) -> Node:
    """``value [NOT] BETWEEN low AND high``: Java's ``value >= low AND value <= high`` (``value < low OR value >
    high``). A property between two integer literals of one type reads the property once; the answer is the same
    (the conversion is the same for both comparisons, and a failed one aborts at the first)."""
    lo = low.folded[0] if low.folded is not None else None
    hi = high.folded[0] if high.folded is not None else None
    if value.prop is not None and type(lo) in (int, JLong) and type(hi) is type(lo):
        name, convert = value.prop, parse_int if type(lo) is int else parse_long
        v, lt, ht = value.text, low.text, high.text  # printed as the comparisons it stands for, as Java prints it
        text = f"(({v} < {lt}) || ({v} > {ht}))" if negated else f"(({v} >= {lt}) && ({v} <= {ht}))"

        def ev(p: Props) -> bool | None:
            v = p.get(name)
            if v is None:
                return None
            x = convert(v)
            return (lo <= x <= hi) is not negated

        return Node(ev, text, boolean=True)
    if negated:
        return or_(compare("<", value, low), compare(">", value, high))
    return and_(compare(">=", value, low), compare("<=", value, high))


# -- IN and the 5.x string tests -----------------------------------------------------------------------------------


def in_(a: Node, values: list[str], negated: bool) -> Node:
    name = a.prop
    members = frozenset(values)

    def ev(p: Props) -> bool | None:
        v = p.get(name)
        return None if v is None else (v in members) is not negated

    listing = ", ".join(java_str(v) for v in values)
    required = None if negated else _segments(name, values)  # type: ignore[arg-type]
    return Node(ev, f"{a.text} {'NOT IN' if negated else 'IN'} ( {listing} )", boolean=True, required=required)


_STRING_TESTS = {"CONTAINS": str.__contains__, "STARTSWITH": str.startswith, "ENDSWITH": str.endswith}


def string_test(kind: str, a: Node, search: str, negated: bool) -> Node:
    """RocketMQ 5.1.3's CONTAINS / STARTSWITH / ENDSWITH (and NOT ...): FALSE for null, non-strings, empty search."""
    test = _STRING_TESTS[kind]
    inner = a.ev

    def ev(p: Props) -> bool:
        v = inner(p)
        if not search or type(v) is not str:
            return False
        return test(v, search) is not negated

    return Node(ev, f"({a.text} {'NOT ' if negated else ''}{kind} {java_str(search)})", boolean=True)


__all__ = ["EvaluationError", "Node"]
