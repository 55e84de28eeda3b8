"""SQL92 property filtering (spec 7.11): a tokenizer and recursive-descent parser compiling a subscription's
expression to a plain-Python matcher over the message properties.

``compile_sql92(text)`` is shared by the broker (the filter plugin in :mod:`.message_filter`, registered for
expression type ``SQL92`` through ``pyrmq_make_message_filter``) and the client library (which checks an expression
before anything is sent). A syntax error raises :class:`Sql92SyntaxError` naming the line and column.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from .jvalues import EvaluationError
from .lexer import Sql92SyntaxError
from .parser import parse

__all__ = ["Sql92Expression", "Sql92SyntaxError", "compile_sql92"]


@attrs.frozen
class Sql92Expression:
    """A compiled selector. ``evaluate`` gives Java's three-valued answer (True / False / None, or ``error`` when
    Java would throw); ``matches`` is what the broker uses: True only for a TRUE answer."""

    text: str
    _ev: object = attrs.field(repr=False)
    #: the parsed tree printed back (blanks, case and redundant parentheses gone), like Java's ``toString``
    canonical: str = attrs.field(default="", repr=False)
    #: the property names the expression reads (the broker extracts only these from a stored message)
    names: frozenset[str] = attrs.field(default=frozenset(), repr=False)
    #: byte strings of which a stored message's property text must contain one to match (``name``-SOH-``value``
    #: segments of the expression's equality / IN tests), None when there is no such test to rely on
    required: tuple[bytes, ...] | None = attrs.field(default=None, repr=False)

    def evaluate(self, properties: Mapping[str, str]) -> bool | None | str:
        try:
            return self._ev(properties)  # type: ignore[operator]
        except EvaluationError:
            return "error"

    def matches(self, properties: Mapping[str, str]) -> bool:
        try:
            return self._ev(properties) is True  # type: ignore[operator]
        except EvaluationError:
            return False


def compile_sql92(text: str) -> Sql92Expression:
    """Parse ``text``; raises :class:`Sql92SyntaxError` (a ``FilterExpressionError``) when it does not parse."""
    if not isinstance(text, str) or not text.strip():
        raise Sql92SyntaxError("the expression is empty", text if isinstance(text, str) else "", 0)
    node, names = parse(text)
    return Sql92Expression(text, node.ev, node.text, names, node.required)
