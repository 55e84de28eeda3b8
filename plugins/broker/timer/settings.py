"""The timer's settings: broker.conf keys with RocketMQ 5.x's names, and the plugin table's older key."""

from __future__ import annotations

import attrs

from pyrmq.kernel.settings import at_least, setting

DAY_S = 86_400
#: pyrmq's default limit of a delivery time from now (RocketMQ 5.x's timerMaxDelaySec defaults to 3 days)
MAX_DELAY_DAYS = 400


def _non_negative(v: float) -> str | None:
    return None if v >= 0 else "a number of days >= 0 (0: timerMaxDelaySec decides)"


@attrs.frozen
class TimerSettings:
    """The timer's broker.conf keys (RocketMQ 5.x's names; pyrmq's defaults)."""

    timerMaxDelaySec: int = setting(MAX_DELAY_DAYS * DAY_S, check=at_least(1),
                                    help="the farthest a delivery time may lie from now, s (5.x: 3 days)")
    timerFlushIntervalMs: int = setting(1000, check=at_least(1), help="ms between saves of the timer's progress")


@attrs.frozen
class TimerPluginSettings:
    """``[plugins."pyrmq.plugins.broker.timer"]``: the key the timer had before it read broker.conf names."""

    max_delay_days: float = setting(0.0, check=_non_negative,
                                    help="the same limit in days; when set (> 0) it wins over timerMaxDelaySec")

    def max_delay_s(self, settings: TimerSettings) -> float:
        """The limit in force: ``max_delay_days`` when set, else ``timerMaxDelaySec``."""
        return self.max_delay_days * DAY_S if self.max_delay_days > 0 else float(settings.timerMaxDelaySec)
