"""Recursive-descent parser of the SQL92 selector (spec 7.11; 4.9's ``SelectorParser.jj``), building the compiled
nodes of :mod:`.nodes` directly.

Precedence, lowest first: OR < AND < (``=``, ``<>``, ``IS [NOT] NULL``) < (``< <= > >=``, ``[NOT] BETWEEN``,
``[NOT] IN``) < unary (``+ - NOT``), so ``NOT a = 'x'`` is ``(NOT a) = 'x'``. The parse-time checks are Java's:
string/boolean/NULL literals cannot be ``<``-family operands, NULL cannot be an ``=`` operand, BETWEEN's literal
bounds must be non-null and ordered, IN needs a property on the left, decimal literals must fit a long and float
literals lie between Double.MIN_VALUE and Double.MAX_VALUE (so ``0.0`` is an error, as in 4.9).

Unlike 4.9's parser, text left over after a complete expression is an error (JavaCC's grammar has no EOF token, so
Java ignores ``a = 1 b = 2`` after ``a = 1``): see docs/decisions.md.
"""

from __future__ import annotations

from . import nodes
from .jvalues import INT_MAX, INT_MIN, LONG_MAX, EvaluationError, JLong, java_compare
from .lexer import Sql92SyntaxError, Token, tokenize
from .nodes import Node

DOUBLE_MAX = 1.7976931348623157e308
DOUBLE_MIN = 5e-324  # Double.MIN_VALUE
_STRING_TESTS = ("CONTAINS", "STARTSWITH", "ENDSWITH")


def parse(text: str) -> tuple[Node, frozenset[str]]:
    """Parse and compile ``text``: the root node (its ``ev(properties)`` is True when a message matches) and the
    property names the expression reads."""
    parser = _Parser(text)
    node = parser.parse()
    return node, frozenset(parser.names)


def _string_value(token: Token) -> str:
    return token.text[1:-1].replace("''", "'")


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = tokenize(text)
        self.i = 0
        self.names: set[str] = set()

    # -- token helpers ---------------------------------------------------------------------------------------------

    @property
    def tok(self) -> Token:
        return self.tokens[self.i]

    def peek(self, k: int = 1) -> Token:
        return self.tokens[min(self.i + k, len(self.tokens) - 1)]

    def take(self) -> Token:
        t = self.tokens[self.i]
        self.i += 1
        return t

    def expect(self, kind: str, what: str) -> Token:
        if self.tok.kind != kind:
            self.fail(f"expected {what}, found {self.tok.describe()}")
        return self.take()

    def fail(self, message: str, at: Token | None = None) -> None:
        raise Sql92SyntaxError(message, self.text, (at or self.tok).pos)

    def _is_string_test(self) -> bool:
        t = self.tok
        if t.kind == "NOT":
            t = self.peek()
            nxt = self.peek(2)
        else:
            nxt = self.peek()
        return t.kind == "id" and t.text.upper() in _STRING_TESTS and nxt.kind == "string"

    # -- grammar -----------------------------------------------------------------------------------------------

    def parse(self) -> Node:
        start = self.tok
        node = self.boolean(self.or_expr(), start)
        if self.tok.kind != "eof":
            self.fail(f"unexpected {self.tok.describe()} after a complete expression")
        return node

    def boolean(self, node: Node, at: Token) -> Node:
        """Java's ``asBooleanExpression``: a bare property becomes a boolean cast, other values are errors."""
        if node.boolean:
            return node
        if node.prop is not None:
            return nodes.bool_cast(node)
        self.fail(f"expression will not result in a boolean value: {node.text}", at)
        raise AssertionError  # unreachable

    def or_expr(self) -> Node:
        start = self.tok
        left = self.and_expr()
        while self.tok.kind == "OR":
            self.take()
            at = self.tok
            right = self.and_expr()
            left = nodes.or_(self.boolean(left, start), self.boolean(right, at))
        return left

    def and_expr(self) -> Node:
        start = self.tok
        left = self.equality_expr()
        while self.tok.kind == "AND":
            self.take()
            at = self.tok
            right = self.equality_expr()
            left = nodes.and_(self.boolean(left, start), self.boolean(right, at))
        return left

    def equality_expr(self) -> Node:
        left = self.comparison_expr()
        while True:
            t = self.tok
            if t.kind in ("=", "<>"):
                self.take()
                right = self.comparison_expr()
                self.check_equal_operands(left, right, t)
                left = nodes.equal(left, right)
                if t.kind == "<>":
                    left = nodes.not_(left)
            elif t.kind == "IS" and self.peek().kind == "NULL":
                self.i += 2
                left = nodes.is_null(left)
            elif t.kind == "IS" and self.peek().kind == "NOT":
                self.i += 2
                self.expect("NULL", "NULL after IS NOT")
                left = nodes.not_(nodes.is_null(left))
            elif t.kind == "IS":
                self.take()
                self.fail(f"expected NULL or NOT NULL after IS, found {self.tok.describe()}")
            else:
                return left

    def comparison_expr(self) -> Node:
        left = self.unary_expr()
        while True:
            t = self.tok
            if t.kind in nodes.ORDER_OPS:
                self.take()
                right = self.unary_expr()
                self.check_order_operand(left, t)
                self.check_order_operand(right, t)
                left = nodes.compare(t.kind, left, right)
            elif t.kind == "BETWEEN" or (t.kind == "NOT" and self.peek().kind == "BETWEEN"):
                negated = self.take().kind == "NOT"
                if negated:
                    self.take()
                low = self.unary_expr()
                self.expect("AND", "AND between the bounds of BETWEEN")
                high = self.unary_expr()
                left = self.between(left, low, high, negated, t)
            elif t.kind == "IN" or (t.kind == "NOT" and self.peek().kind == "IN"):
                negated = self.take().kind == "NOT"
                if negated:
                    self.take()
                values = self.string_list()
                if left.prop is None:
                    self.fail(f"expected a property for IN, got: {left.text}", t)
                left = nodes.in_(left, values, negated)
            elif self._is_string_test():
                negated = self.tok.kind == "NOT"
                if negated:
                    self.take()
                kind = self.take().text.upper()
                left = nodes.string_test(kind, left, _string_value(self.take()), negated)
            else:
                return left

    def string_list(self) -> list[str]:
        self.expect("(", "'(' after IN")
        values = [_string_value(self.expect("string", "a string literal in the IN list"))]
        while self.tok.kind == ",":
            self.take()
            values.append(_string_value(self.expect("string", "a string literal in the IN list")))
        self.expect(")", "',' or ')' in the IN list")
        return values

    def unary_expr(self) -> Node:
        t = self.tok
        if t.kind == "+":
            self.take()
            return self.unary_expr()
        if t.kind == "-":
            self.take()
            return nodes.negate(self.unary_expr())
        if t.kind == "NOT":
            self.take()
            at = self.tok
            return nodes.not_(self.boolean(self.unary_expr(), at))
        return self.primary_expr()

    def primary_expr(self) -> Node:
        t = self.take()
        kind = t.kind
        if kind == "string":
            return nodes.literal(_string_value(t))
        if kind == "decimal":
            return nodes.literal(self.decimal(t))
        if kind == "float":
            return nodes.literal(self.float_(t))
        if kind in ("TRUE", "FALSE"):
            return nodes.literal(kind == "TRUE", boolean=True)
        if kind == "NULL":
            return nodes.literal(None, boolean=True)
        if kind == "id":
            self.names.add(t.text)
            return nodes.prop(t.text)
        if kind == "(":
            node = self.or_expr()
            self.expect(")", "')'")
            return node
        self.i -= 1
        self.fail(f"expected a literal, a property or '(', found {t.describe()}")
        raise AssertionError  # unreachable

    # -- literals and Java's parse-time checks -------------------------------------------------------------------

    def decimal(self, t: Token) -> int:
        digits = t.text.rstrip("lL")
        v = int(digits)
        if v > LONG_MAX:
            self.fail(f"decimal literal {t.text} does not fit a long", t)
        return v if INT_MIN <= v <= INT_MAX else JLong(v)

    def float_(self, t: Token) -> float:
        v = float(t.text)
        if v > DOUBLE_MAX:
            self.fail(f"{t.text} is greater than {DOUBLE_MAX!r}", t)
        if v < DOUBLE_MIN:
            self.fail(f"{t.text} is less than {DOUBLE_MIN!r} (Double.MIN_VALUE)", t)
        return v

    def check_order_operand(self, node: Node, op: Token) -> None:
        if node.constant and type(node.folded[0]) not in (int, JLong, float):  # type: ignore[index]
            self.fail(f"value {node.text} cannot be compared with {op.text}", op)
        if node.boolean and not node.constant:
            self.fail(f"value {node.text} cannot be compared with {op.text}", op)

    def check_equal_operands(self, left: Node, right: Node, op: Token) -> None:
        for node in (left, right):
            if node.constant and node.folded[0] is None:  # type: ignore[index]
                self.fail(f"{node.text} cannot be compared with {op.text} (use IS NULL)", op)
        if left.constant and right.constant and left.boolean and not right.boolean:
            self.fail(f"{left.text} cannot be compared with {right.text}", op)

    def between(self, value: Node, low: Node, high: Node, negated: bool, op: Token) -> Node:
        if not negated and low.constant and high.constant:
            lv, hv = low.folded[0], high.folded[0]  # type: ignore[index]
            if lv is None or hv is None:
                self.fail("illegal values of between, values can not be null", op)
            try:
                ordered = java_compare(hv, lv) >= 0
            except EvaluationError as exc:
                self.fail(f"illegal values of between: {exc}", op)
            if not ordered:
                self.fail(f"illegal values of between, left value ({low.text}) must be less than or equal to right "
                          f"value ({high.text})", op)
        for node in (value, low, high):
            self.check_order_operand(node, op)
        return nodes.between(value, low, high, negated)
