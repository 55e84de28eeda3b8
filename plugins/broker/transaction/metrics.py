"""The transaction series of ``/metrics`` (RocketMQ 5.x's names), computed when scraped."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from pyrmq.plugins.broker.metrics import broker_labels
from pyrmq.plugins.broker.transaction.bridge import TransactionBridge
from pyrmq.plugins.broker.transaction.queues import HalfOpQueues

if TYPE_CHECKING:  # pragma: no cover - types only
    from pyrmq.plugins.broker.core import BrokerContext


class TransactionCollector:
    """rocketmq_commit_messages, rocketmq_rollback_messages and rocketmq_half_messages (5.x's names). Half messages
    are counted on the master (a slave keeps no pending set)."""

    def __init__(self, ctx: BrokerContext, queues: HalfOpQueues, bridge: TransactionBridge) -> None:
        self.ctx = ctx
        self.queues = queues
        self.bridge = bridge

    def describe(self) -> list[Metric]:
        return []  # computed at scrape time

    def collect(self) -> Iterator[Metric]:
        base, common = broker_labels(self.ctx.settings)
        bridge = self.bridge
        commits = CounterMetricFamily(
            "rocketmq_commit_messages", "Transactions committed, by topic.", labels=base + ["topic"])
        for topic, n in list(bridge.commits_by_topic.items()):
            commits.add_metric(common + [topic], n)
        rollbacks = CounterMetricFamily(
            "rocketmq_rollback_messages", "Transactions rolled back, by topic.", labels=base + ["topic"])
        for topic, n in list(bridge.rollbacks_by_topic.items()):
            rollbacks.add_metric(common + [topic], n)
        self.queues.ingest()  # halves sent since the last check pass or END_TRANSACTION (synchronous, a no-op before load)
        pending: dict[str, int] = {}
        for half in list(self.queues.pending.values()):
            pending[half.topic] = pending.get(half.topic, 0) + 1
        # a topic that had transactions stays at 0 once they are resolved (5.x keeps its count too)
        for topic in (*bridge.commits_by_topic, *bridge.rollbacks_by_topic):
            pending.setdefault(topic, 0)
        halves = GaugeMetricFamily(
            "rocketmq_half_messages", "Half messages whose transaction is not resolved yet, by topic.",
            labels=base + ["topic"])
        for topic, n in sorted(pending.items()):
            halves.add_metric(common + [topic], n)
        yield from (commits, rollbacks, halves)
