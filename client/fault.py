"""Latency fault tolerance: back a slow or failing broker off for a while (Java ``MQFaultStrategy`` and
``LatencyFaultToleranceImpl``, RocketMQ 4.9.8).

Every send attempt reports its latency per broker name. The latency picks a back-off from two parallel tables
(Java's defaults): latency >= 550 ms backs the broker off for 30 s, >= 1 s for 60 s, >= 2 s for 120 s, >= 3 s for
180 s, >= 15 s for 600 s; below 550 ms nothing. A failed attempt (connect refused, timeout, closed) counts as a
30 s latency, i.e. 600 s of isolation. Queue selection skips brokers in back-off; when all are, it takes the least
bad one.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import attrs

from pyrmq.client.message import MessageQueue
from pyrmq.client.route import PublishInfo

__all__ = ["LatencyFaultTolerance", "FaultStrategy", "LATENCY_MAX_MS", "NOT_AVAILABLE_MS"]

LATENCY_MAX_MS = (50, 100, 550, 1000, 2000, 3000, 15000)
NOT_AVAILABLE_MS = (0, 0, 30000, 60000, 120000, 180000, 600000)
ISOLATION_LATENCY_MS = 30000


@attrs.define
class FaultItem:
    broker_name: str
    current_latency: float
    start_timestamp: float  # when the broker becomes available again (ms on the clock)

    def available(self, now: float) -> bool:
        return now >= self.start_timestamp


class LatencyFaultTolerance:
    def __init__(self, clock: Callable[[], float] | None = None) -> None:
        self.items: dict[str, FaultItem] = {}
        self._clock = clock or (lambda: time.monotonic() * 1000)
        self._which_worst = 0

    def update(self, broker_name: str, latency_ms: float, not_available_ms: float) -> None:
        until = self._clock() + not_available_ms
        item = self.items.get(broker_name)
        if item is None:
            self.items[broker_name] = FaultItem(broker_name, latency_ms, until)
        else:
            item.current_latency = latency_ms
            item.start_timestamp = until

    def is_available(self, broker_name: str) -> bool:
        item = self.items.get(broker_name)
        return item is None or item.available(self._clock())

    def remove(self, broker_name: str) -> None:
        self.items.pop(broker_name, None)

    def pick_one_at_least(self) -> str | None:
        """A broker in back-off that is the least bad: available first, then lowest latency, then soonest back."""
        if not self.items:
            return None
        now = self._clock()
        ranked = sorted(self.items.values(), key=lambda i: (not i.available(now), i.current_latency, i.start_timestamp))
        half = max(1, len(ranked) // 2)
        self._which_worst += 1
        return ranked[self._which_worst % half].broker_name


class FaultStrategy:
    """Queue selection with latency fault tolerance (on by default here; Java's ``sendLatencyFaultEnable``)."""

    def __init__(
        self,
        enabled: bool = True,
        latency_max: tuple[float, ...] = LATENCY_MAX_MS,
        not_available: tuple[float, ...] = NOT_AVAILABLE_MS,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if len(latency_max) != len(not_available):
            raise ValueError("latency_max and not_available must have the same length")
        self.enabled = enabled
        self.latency_max = latency_max
        self.not_available = not_available
        self.tolerance = LatencyFaultTolerance(clock)
        #: latencies below this never back a broker off
        self._fast = min((lim for lim, dur in zip(latency_max, not_available) if dur > 0), default=float("inf"))

    def not_available_duration(self, latency_ms: float) -> float:
        for limit, duration in zip(reversed(self.latency_max), reversed(self.not_available)):
            if latency_ms >= limit:
                return duration
        return 0

    def update(self, broker_name: str, latency_ms: float, isolation: bool) -> None:
        """Report one send attempt's latency (``isolation`` = it failed)."""
        if not self.enabled:
            return
        if not isolation and latency_ms < self._fast and broker_name not in self.tolerance.items:
            return  # a quick answer from a broker never backed off: nothing to record (the common case)
        latency = ISOLATION_LATENCY_MS if isolation else latency_ms
        self.tolerance.update(broker_name, latency_ms, self.not_available_duration(latency))

    def select(self, info: PublishInfo, last_broker: str | None) -> MessageQueue:
        if not self.enabled:
            return info.select(last_broker)
        queues = info.queues
        n = len(queues)
        index = info.next_index()
        available = self.tolerance.is_available
        fallback = None
        for i in range(n):
            mq = queues[(index + i) % n]
            if available(mq.broker_name):
                if last_broker is None or mq.broker_name != last_broker:
                    return mq
                if fallback is None:
                    fallback = mq  # a retry prefers another broker, but an available one beats a backed-off one
        if fallback is not None:
            return fallback
        # every broker is backed off: take the least bad one (Java's pickOneAtLeast)
        broker = self.tolerance.pick_one_at_least()
        nums = info.write_queue_nums(broker) if broker else 0
        if broker and nums > 0:
            return MessageQueue(info.route.topic, broker, index % nums)
        if broker:
            self.tolerance.remove(broker)
        return info.select(last_broker)
