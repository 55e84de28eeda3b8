"""Tag filtering (spec 5.6): the built-in answer of the filter hook for expression type ``TAG``.

The broker matches the consume-queue entry's tag hash against the subscription's hash codes; hash collisions are
resolved by the client's re-check of the tag itself, as in RocketMQ.
"""

from __future__ import annotations

from typing import Any

from pyrmq.kernel.errors import FilterExpressionError
from pyrmq.kernel.hookspecs import hookimpl
from pyrmq.kernel.kernel import Kernel
from pyrmq.store.dispatch import TagsCodeFilter
from pyrmq.remoting.message import java_string_hash

SUB_ALL = "*"


def compile_tag_expression(expression: str | None) -> TagsCodeFilter:
    """Java's ``FilterAPI.buildSubscriptionData``: ``*`` / empty -> every message; ``TagA || TagB`` -> messages whose
    tag hash is one of theirs (each tag trimmed, blank ones skipped). An expression that is nothing but separators
    (``||``: Java's ``split`` leaves no part) is FilterExpressionError ("subString split error", a pull answers
    SUBSCRIPTION_PARSE_FAILED); one whose parts are all blank (`` || ``) names no tag and matches no message."""
    if not expression or expression == SUB_ALL:
        return TagsCodeFilter(None)
    parts = expression.split("||")
    while parts and not parts[-1]:  # Java's String.split drops the trailing empty strings
        parts.pop()
    if not parts:
        raise FilterExpressionError(f"subString split error: {expression!r} names no tag")
    tags = [t.strip() for t in parts]
    return TagsCodeFilter(frozenset(java_string_hash(t) for t in tags if t))


@hookimpl(trylast=True)
def pyrmq_make_message_filter(kernel: Kernel, expression_type: str, expression: str) -> TagsCodeFilter | None:
    if (expression_type or "TAG").upper() != "TAG":
        return None
    return compile_tag_expression(expression)
