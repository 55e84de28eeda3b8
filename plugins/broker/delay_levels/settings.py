"""The delay levels' broker.conf keys (RocketMQ 4.9.8's names and defaults) and the level table's syntax."""

from __future__ import annotations

import re

import attrs

from pyrmq.kernel.settings import at_least, setting

_DELAY_TOKEN = re.compile(r"^(\d+)([smhd])$")


def parse_delay_levels(text: str) -> tuple[int, ...]:
    """``"1s 5s 10s ... 2h"`` -> delays in milliseconds, level i (1-based) at index i-1 (spec 7.6)."""
    unit_ms = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
    out = []
    for token in text.split():
        m = _DELAY_TOKEN.match(token)
        if not m:
            raise ValueError(f"bad delay level token {token!r} (expected <int><s|m|h|d>, e.g. 5s)")
        out.append(int(m.group(1)) * unit_ms[m.group(2)])
    if not out:
        raise ValueError("no delay levels")
    return tuple(out)


def _delay_levels(v: str) -> str | None:
    try:
        parse_delay_levels(v)
    except ValueError as exc:
        return f"space-separated <int><s|m|h|d> tokens ({exc})"
    return None


@attrs.frozen
class DelayLevelSettings:
    """The delay levels' broker.conf keys (RocketMQ 4.9.8's names and defaults)."""

    messageDelayLevel: str = setting("1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h", check=_delay_levels,
                                     help="the delay of each level, 1 upwards")
    flushDelayOffsetInterval: int = setting(10_000, check=at_least(1), help="ms between saves of delayOffset.json")

    @property
    def delay_levels_ms(self) -> tuple[int, ...]:
        return parse_delay_levels(self.messageDelayLevel)
