"""Expression nodes of the SQL92 selector, each compiled to a plain closure over the message properties.

``node.ev(props)`` returns True / False / None (SQL's unknown) for a boolean node, or a Java value for an operand
(see :mod:`.jvalues`); it raises :class:`EvaluationError` where Java throws (the message then does not match).
The semantics are 4.9's ``filter/.../expression/*.java``: three-valued AND/OR/NOT; ``=`` with only the left side
null is null, with only the right side null is FALSE; ``< <= > >=`` with a null side are null. Common shapes
(a property against a literal, IN, IS NULL) get dedicated closures; everything else goes through the generic ones.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Any

from .jvalues import EvaluationError, JLong, double_cmp, java_compare, java_str, parse_boolean, parse_double, parse_int, parse_long

Props = Mapping[str, str]
Eval = Callable[[Props], Any]


class Node:
    """``constant``: a literal (Java ``ConstantExpression``); ``boolean``: yields a Boolean (``BooleanExpression``);
    ``prop``: a bare property name. ``folded`` holds the value of a literal or a negated literal, else is absent."""

    __slots__ = ("ev", "text", "constant", "boolean", "prop", "folded", "value")

    def __init__(self, ev: Eval, text: str, *, constant: bool = False, boolean: bool = False, prop: str | None = None,
                 folded: tuple[Any] | None = None) -> None:
        self.ev = ev
        self.text = text
        self.constant = constant
        self.boolean = boolean
        self.prop = prop
        self.folded = folded

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


def and_(a: Node, b: Node) -> Node:
    left, right = a.ev, b.ev

    def ev(p: Props) -> bool | None:
        lv = left(p)
        if lv is False:
            return False
        rv = right(p)
        if rv is False:
            return False
        if lv is None or rv is None:
            return None
        return True

    return Node(ev, f"({a.text} && {b.text})", boolean=True)


def or_(a: Node, b: Node) -> Node:
    left, right = a.ev, b.ev

    def ev(p: Props) -> bool | None:
        lv = left(p)
        if lv is True:
            return True
        rv = right(p)
        if rv is True:
            return True
        if lv is None or rv is None:
            return None
        return False

    return Node(ev, f"({a.text} || {b.text})", boolean=True)


# -- equality ------------------------------------------------------------------------------------------------------

_PARSERS: dict[type, Callable[[str], Any]] = {str: str, int: parse_int, JLong: parse_long, float: parse_double,
                                              bool: parse_boolean}


def equal(a: Node, b: Node) -> Node:
    text = f"({a.text} == {b.text})"
    if a.prop is not None and b.folded is not None and b.folded[0] is not None:
        name, c = a.prop, b.folded[0]
        if type(c) is str:
            def ev_str(p: Props) -> bool | None:
                v = p.get(name)
                return None if v is None else v == c

            return Node(ev_str, text, boolean=True)
        convert = _PARSERS[type(c)]  # c is never NaN or 0.0 (literals below Double.MIN_VALUE do not parse)

        def ev_num(p: Props) -> bool | None:
            v = p.get(name)
            return None if v is None else convert(v) == c

        return Node(ev_num, text, boolean=True)
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
            convert = parse_int if type(c) is int else parse_long

            def ev_int(p: Props) -> bool | None:
                v = p.get(name)
                return None if v is None else test(convert(v), c)

            return Node(ev_int, text, boolean=True)
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


# -- IN and the 5.x string tests -----------------------------------------------------------------------------------


def in_(a: Node, values: list[str], negated: bool) -> Node:
    name = a.prop
    members = frozenset(values)

    def ev(p: Props) -> bool | None:
        v = p.get(name)
        return None if v is None else (v in members) is not negated

    listing = ", ".join(java_str(v) for v in values)
    return Node(ev, f"{a.text} {'NOT IN' if negated else 'IN'} ( {listing} )", boolean=True)


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
