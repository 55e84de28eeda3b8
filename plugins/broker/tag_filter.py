"""Tag filtering (spec 5.6): the built-in answer of the filter hook for expression type ``TAG``.

The broker matches the consume-queue entry's tag hash against the subscription's hash codes; hash collisions are
resolved by the client's re-check of the tag itself, as in RocketMQ.
"""

from __future__ import annotations

from typing import Any

from pyrmq.kernel.hookspecs import hookimpl
from pyrmq.kernel.kernel import Kernel
from pyrmq.store.dispatch import TagsCodeFilter
from pyrmq.remoting.message import java_string_hash

SUB_ALL = "*"


def compile_tag_expression(expression: str | None) -> TagsCodeFilter:
    """``*`` / empty -> every message; ``TagA || TagB`` -> messages whose tag hash is one of theirs."""
    text = (expression or "").strip()
    if not text or text == SUB_ALL:
        return TagsCodeFilter(None)
    tags = [t.strip() for t in text.split("||") if t.strip()]
    if not tags:
        return TagsCodeFilter(None)
    return TagsCodeFilter(frozenset(java_string_hash(t) for t in tags))


@hookimpl(trylast=True)
def pyrmq_make_message_filter(kernel: Kernel, expression_type: str, expression: str) -> TagsCodeFilter | None:
    if (expression_type or "TAG").upper() != "TAG":
        return None
    return compile_tag_expression(expression)
