"""The SQL92 selector's tokens (spec 7.11; 4.9's ``SelectorParser.jj``).

Keywords and identifiers are case-insensitive; digits are ASCII; comments are ``-- ...`` to the end of the line and
``/* ... */``. The longest match wins, as in the JavaCC token manager: ``5.`` is a float, ``05`` is ``0`` then ``5``,
``notx`` is an identifier. ``CONTAINS`` / ``STARTSWITH`` / ``ENDSWITH`` (RocketMQ 5.1.3) are not keywords here: the
parser recognises them by position, so a property named ``contains`` still works as it does in 4.x.
"""

from __future__ import annotations

import re

import attrs

from pyrmq.kernel.errors import FilterExpressionError

KEYWORDS = frozenset({"NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS"})

_TOKEN = re.compile(
    r"""
      (?P<space>[ \t\n\r\f]+)
    | (?P<comment>--[^\n\r]*|/\*.*?\*/)
    | (?P<float>(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+)
    | (?P<decimal>0|[1-9][0-9]*[lL]?)
    | (?P<string>'(?:''|[^'])*')
    | (?P<id>[a-zA-Z_$][a-zA-Z0-9_$]*)
    | (?P<op><>|<=|>=|[=<>(),+-])
    """,
    re.VERBOSE | re.DOTALL,
)


class Sql92SyntaxError(FilterExpressionError):
    """An SQL92 expression that does not parse; ``position`` is the 0-based offset of the offending text."""

    def __init__(self, message: str, text: str, position: int) -> None:
        line = text.count("\n", 0, position) + 1
        column = position - (text.rfind("\n", 0, position) + 1) + 1
        super().__init__(f"Invalid SQL92 expression at line {line}, column {column}: {message} (in {text!r})")
        self.reason = message
        self.text = text
        self.position = position
        self.line = line
        self.column = column


@attrs.frozen
class Token:
    kind: str  # a keyword (upper case), "float", "decimal", "string", "id", an operator, or "eof"
    text: str
    pos: int

    def describe(self) -> str:
        return "the end of the expression" if self.kind == "eof" else repr(self.text)


def tokenize(text: str) -> list[Token]:
    tokens: list[Token] = []
    pos = 0
    end = len(text)
    match = _TOKEN.match
    while pos < end:
        m = match(text, pos)
        if m is None:
            if text.startswith("'", pos):
                raise Sql92SyntaxError("string literal is not closed", text, pos)
            if text.startswith("/*", pos):
                raise Sql92SyntaxError("comment is not closed", text, pos)
            raise Sql92SyntaxError(f"unexpected character {text[pos]!r}", text, pos)
        kind = m.lastgroup
        value = m.group()
        if kind == "id" and value.upper() in KEYWORDS:
            tokens.append(Token(value.upper(), value, pos))
        elif kind == "op":
            tokens.append(Token(value, value, pos))
        elif kind not in ("space", "comment"):
            tokens.append(Token(kind, value, pos))
        pos = m.end()
    tokens.append(Token("eof", "", end))
    return tokens
