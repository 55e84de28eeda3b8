"""The timer's Prometheus series (RocketMQ 5.x's ``rocketmq_timer_*`` and ``rocketmq_timing_messages``), computed when
``/metrics`` is scraped from what the service counts anyway."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from pyrmq.plugins.broker.metrics import broker_labels
from pyrmq.plugins.broker.timer.records import TIMER_TOPIC, real_topic_of, stored_properties
from pyrmq.plugins.broker.timer.wheel import TimingWheel


class TimerGauges:
    """Mixed into :class:`~.service.TimerService`: per-topic counts and how far behind the service is."""

    store: Any
    clock: Callable[[], int]
    wheel: TimingWheel | None
    enqueue_offset: int
    _skip: set[int]
    #: per real topic, once :meth:`track_topics` was called (the metrics exporter): messages in the wheel
    #: (rocketmq_timing_messages{topic}); None = not tracked
    timing_by_topic: dict[str, int] | None
    #: (entries, delivery time in ms of the first) that the last pass could not deliver (put back, retried)
    stalled: tuple[int, int] | None

    def track_topics(self) -> None:
        """Count the wheel's messages per real topic from now on (what the metrics exporter shows): the wheel's
        current entries are read once (here, or at load), then each enqueue reads its record's REAL_TOPIC."""
        if self.timing_by_topic is not None:
            return
        self.timing_by_topic = {}
        if self.wheel is not None:
            self._count_wheel()

    def _count_wheel(self) -> None:
        counts = self.timing_by_topic
        assert counts is not None and self.wheel is not None
        skip = self._skip
        for _, phy, size, _ in self.wheel.entries():
            if skip and phy in skip:
                continue  # delivered before a crash: skipped, never delivered again
            topic = self._real_topic(phy, size)
            counts[topic] = counts.get(topic, 0) + 1

    def _real_topic(self, phy: int, size: int) -> str:
        """The REAL_TOPIC of the parked record at ``phy`` ("" when it is gone)."""
        props = stored_properties(self.store, phy, size)
        return real_topic_of(props) if props is not None else ""

    def _left_wheel(self, topic: str) -> None:
        counts = self.timing_by_topic
        if counts is not None and counts.get(topic, 0) > 0:
            counts[topic] -= 1

    def dequeue_behind(self) -> tuple[int, int]:
        """(messages due but not delivered yet, how late the first of them is in ms): rocketmq_timer_dequeue_lag and
        rocketmq_timer_dequeue_latency. Entries put back after a failed delivery wait in the slot processed next,
        which may lie a second ahead: they are counted from :attr:`stalled` until the clock reaches it."""
        if self.wheel is None:
            return 0, 0
        now_ms = self.clock()
        now_sec = now_ms // 1000
        count, first = self.wheel.due(now_sec)
        oldest = None if first is None else first * 1000
        stalled = self.stalled
        if stalled is not None and self.wheel.cur > now_sec:
            count += stalled[0]
            oldest = stalled[1] if oldest is None else min(oldest, stalled[1])
        return count, max(now_ms - oldest, 0) if count and oldest is not None else 0

    def enqueue_behind(self) -> tuple[int, int]:
        """(parked messages not yet in the wheel, age in ms of the oldest of them): rocketmq_timer_enqueue_lag and
        rocketmq_timer_enqueue_latency."""
        cq = self.store.consume_queues.get(TIMER_TOPIC, 0)
        if cq is None:
            return 0, 0
        offset = max(self.enqueue_offset, cq.min_offset)
        behind = max(cq.max_offset - offset, 0)
        if not behind:
            return 0, 0
        stored = self.store.get_message_store_timestamp(TIMER_TOPIC, 0, offset)
        return behind, max(self.clock() - stored, 0) if stored > 0 else 0


class TimerCollector:
    """The timing wheel's series (5.x's rocketmq_timer_* and rocketmq_timing_messages), read when scraped."""

    def __init__(self, service: Any, settings: Any) -> None:
        self.service = service
        self.settings = settings

    def describe(self) -> list[Metric]:
        return []  # computed at scrape time

    def collect(self) -> Iterator[Metric]:
        base, common = broker_labels(self.settings)
        service = self.service
        topic_labels = base + ["topic"]
        by_topic = service.timing_by_topic or {}
        enqueued = CounterMetricFamily(
            "rocketmq_timer_enqueue", "Messages put into the timing wheel, by topic.", labels=topic_labels)
        for topic, n in sorted(service.enqueued_by_topic.items()):
            enqueued.add_metric(common + [topic], n)
        dequeued = CounterMetricFamily(
            "rocketmq_timer_dequeue", "Timed messages delivered to their topic, by topic.", labels=topic_labels)
        for topic, n in sorted(service.delivered_by_topic.items()):
            dequeued.add_metric(common + [topic], n)
        timing = GaugeMetricFamily(
            "rocketmq_timing_messages", "Messages waiting in the timing wheel, by topic.", labels=topic_labels)
        for topic in sorted(set(by_topic) | set(service.delivered_by_topic)):
            timing.add_metric(common + [topic], by_topic.get(topic, 0))
        yield from (enqueued, dequeued, timing)
        # how far behind the service is: parked but not yet in the wheel, due but not yet delivered (5.x's names)
        enqueue_lag, enqueue_ms = service.enqueue_behind()
        dequeue_lag, dequeue_ms = service.dequeue_behind()
        for name, help_text, value in (
            ("rocketmq_timer_enqueue_lag", "Timed messages parked but not yet in the timing wheel.", enqueue_lag),
            ("rocketmq_timer_enqueue_latency", "Age of the oldest of them (milliseconds).", enqueue_ms),
            ("rocketmq_timer_dequeue_lag", "Timed messages due but not yet delivered.", dequeue_lag),
            ("rocketmq_timer_dequeue_latency", "How late the oldest of them is (milliseconds).", dequeue_ms),
        ):
            gauge = GaugeMetricFamily(name, help_text, labels=base)
            gauge.add_metric(common, value)
            yield gauge
