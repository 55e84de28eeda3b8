"""Subscription filters: ``MessageSelector.by_sql(...)`` / ``by_tag(...)`` (Java ``MessageSelector``, spec 7.11).

An SQL92 expression is parsed here with the broker's own parser before anything is sent, so a typo fails at
``subscribe`` with the line and column instead of as a refused pull. The broker evaluates the expression over the
message properties (user properties, plus ``TAGS``, ``KEYS`` ...) and needs ``enablePropertyFilter=true``.
"""

from __future__ import annotations

import attrs

from pyrmq.client.errors import InvalidSubscriptionError

__all__ = ["EXPRESSION_TYPES", "MessageSelector", "check_expression"]

SQL92 = "SQL92"
TAG = "TAG"
EXPRESSION_TYPES = (TAG, SQL92)


def check_expression(expression_type: str, expression: str) -> None:
    """Raise :class:`InvalidSubscriptionError` when an SQL92 expression does not parse (TAG needs no check)."""
    if expression_type != SQL92:
        return
    from pyrmq.plugins.sql92 import Sql92SyntaxError, compile_sql92

    try:
        compile_sql92(expression)
    except Sql92SyntaxError as exc:
        raise InvalidSubscriptionError(str(exc), line=exc.line, column=exc.column) from None


@attrs.frozen
class MessageSelector:
    """What to receive of a topic: ``by_tag("A || B")`` or ``by_sql("region = 'eu' AND amount > 100")``."""

    expression_type: str
    expression: str

    @classmethod
    def by_sql(cls, sql: str) -> MessageSelector:
        check_expression(SQL92, sql)
        return cls(SQL92, sql)

    @classmethod
    def by_tag(cls, tag: str | None = "*") -> MessageSelector:
        return cls(TAG, (tag or "*").strip() or "*")
