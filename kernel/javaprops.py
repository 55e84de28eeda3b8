"""Java ``.properties`` text: RocketMQ's ``broker.conf`` read as settings, and GET_BROKER_CONFIG / GET_NAMESRV_CONFIG
answered in it (what mqadmin getBrokerConfig prints)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any


def parse_java_properties(lines: Iterable[str]) -> dict[str, str]:
    """Read Java ``.properties`` text (``key=value``, ``key: value`` or ``key value``; ``#``/``!`` comments)."""
    out: dict[str, str] = {}
    pending = ""
    for raw in lines:
        line = raw.rstrip("\r\n")
        stripped = line.lstrip()
        if not pending and (not stripped or stripped[0] in "#!"):
            continue
        if stripped.endswith("\\") and not stripped.endswith("\\\\"):
            pending += stripped[:-1]
            continue
        logical = pending + stripped
        pending = ""
        m = re.match(r"([^=:\s]+)\s*[=:\s]\s*(.*)$", logical)
        if m:
            out[m.group(1)] = m.group(2).strip()
        else:
            out[logical.strip()] = ""
    return out


def format_java_properties(values: Mapping[str, Any], **overrides: Any) -> str:
    """Settings (with ``overrides``, e.g. the real port of ``listenPort = 0``) as Java ``.properties`` text
    (``key=value`` lines, booleans as ``true``/``false``): the body of GET_BROKER_CONFIG / GET_NAMESRV_CONFIG."""
    out = []
    for key, value in sorted({**values, **overrides}.items()):
        text = ("true" if value else "false") if isinstance(value, bool) else str(value)
        out.append(f"{key}={text}\n")
    return "".join(out)
