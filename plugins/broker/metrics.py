"""The broker core's Prometheus series (RocketMQ 5.x's names and labels), served by the metrics plugin
(plugins/builtin/metrics/) when ``metricsExporterType = PROM``.

Nothing is counted for Prometheus on the send and pull paths: :class:`BrokerCollector` reads the broker's counters
(plugins/broker/stats.py), offsets, client tables and store when ``/metrics`` is scraped. Feature plugins add their
own collectors through the same hook (``pyrmq_register_metric_collectors``: transactions, the timer) and label them
with :func:`broker_labels`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from pyrmq.plugins.broker.clients import CONSUME_MODES
from pyrmq.plugins.broker.stats import MESSAGE_SIZE_BUCKETS

#: the labels every broker series carries (5.x): cluster, node type, node id (the broker name)
BROKER_LABELS = ["cluster", "node_type", "node_id"]


def broker_labels(settings: Any) -> tuple[list[str], list[str]]:
    """(label names, label values) every broker series starts with, for a broker with core settings ``settings``."""
    return list(BROKER_LABELS), [settings.brokerClusterName, "broker", settings.brokerName]


def _store_disk_bytes(root: str) -> int:
    """Bytes the store's files occupy on disk (allocated blocks: memory-mapped files are sparse until written)."""
    total = 0
    stack = [root]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    total += entry.stat(follow_symlinks=False).st_blocks * 512
            except OSError:
                continue
    return total


class BrokerCollector:
    """The broker core's series (traffic by topic and group, lag, connections, topics and groups, storage), read from
    its context when scraped."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx

    def describe(self) -> list[Metric]:
        return []  # computed at scrape time; no registration-time collection

    def collect(self) -> Iterator[Metric]:
        ctx = self.ctx
        base, common = broker_labels(ctx.settings)
        stats = ctx.stats

        msgs_in = CounterMetricFamily("rocketmq_messages_in", "Messages stored, by topic.", labels=base + ["topic"])
        bytes_in = CounterMetricFamily("rocketmq_throughput_in", "Bytes stored, by topic.", labels=base + ["topic"])
        size = HistogramMetricFamily("rocketmq_message_size", "Size of stored messages (bytes).", labels=base + ["topic"])
        dlq = CounterMetricFamily(
            "rocketmq_send_to_dlq_messages", "Messages moved to a dead-letter queue.", labels=base + ["consumer_group"]
        )
        for topic, c in list(stats.topics.items()):
            msgs_in.add_metric(common + [topic], c.nums)
            bytes_in.add_metric(common + [topic], c.size)
            cumulative, buckets = 0, []
            for bound, n in zip(MESSAGE_SIZE_BUCKETS, c.buckets):
                cumulative += n
                buckets.append((str(float(bound)), cumulative))
            buckets.append(("+Inf", c.nums))
            size.add_metric(common + [topic], buckets, c.size)
            if c.dlq_group is not None:
                dlq.add_metric(common + [c.dlq_group], c.nums)
        yield from (msgs_in, bytes_in, size, dlq)

        out_labels = base + ["topic", "consumer_group", "is_retry"]
        msgs_out = CounterMetricFamily("rocketmq_messages_out", "Messages handed to consumers.", labels=out_labels)
        bytes_out = CounterMetricFamily("rocketmq_throughput_out", "Bytes handed to consumers.", labels=out_labels)
        for (topic, group), c in list(stats.groups.items()):
            labels = common + [topic, group, str(topic.startswith("%RETRY%")).lower()]
            msgs_out.add_metric(labels, c.nums)
            bytes_out.add_metric(labels, c.size)
        yield from (msgs_out, bytes_out)

        yield from self._lag(base, common)
        yield from self._connections(base, common)
        yield from self._storage(base, common)

    def _lag(self, base: list[str], common: list[str]) -> Iterator[Metric]:
        ctx = self.ctx
        labels = base + ["topic", "consumer_group", "is_retry"]
        lag = GaugeMetricFamily("rocketmq_consumer_lag_messages", "Messages stored but not yet consumed.", labels=labels)
        latency = GaugeMetricFamily(
            "rocketmq_consumer_lag_latency", "Age of the oldest unconsumed message (ms).", labels=labels
        )
        store = ctx.store
        now_ms = int(time.time() * 1000)
        for key, offsets in list(ctx.offsets.table.items()):
            topic, _, group = key.partition("@")
            behind, oldest = 0, 0
            for qid, offset in offsets.items():
                max_offset = store.get_max_offset_in_queue(topic, qid)
                consumed = max(offset, store.get_min_offset_in_queue(topic, qid))
                if max_offset > consumed:
                    behind += max_offset - consumed
                    stored = store.get_message_store_timestamp(topic, qid, consumed)
                    if stored > 0:
                        oldest = max(oldest, now_ms - stored)
            values = common + [topic, group, str(topic.startswith("%RETRY%")).lower()]
            lag.add_metric(values, behind)
            latency.add_metric(values, oldest)
        yield from (lag, latency)

    def _connections(self, base: list[str], common: list[str]) -> Iterator[Metric]:
        ctx = self.ctx
        producers: dict[tuple[str, str], int] = {}
        for channels in list(ctx.producers.groups.values()):
            for c in channels.values():
                key = (str(c.language), str(c.version))
                producers[key] = producers.get(key, 0) + 1
        p = GaugeMetricFamily("rocketmq_producer_connections", "Producer connections.", labels=base + ["language", "version"])
        for key, n in sorted(producers.items()):
            p.add_metric(common + list(key), n)
        consumers: dict[tuple[str, str, str, str], int] = {}
        for group, info in list(ctx.consumers.groups.items()):
            mode = CONSUME_MODES.get(info.consume_type, "pull")
            for c in info.channels.values():
                key = (group, str(c.language), str(c.version), mode)
                consumers[key] = consumers.get(key, 0) + 1
        c_metric = GaugeMetricFamily(
            "rocketmq_consumer_connections", "Consumer connections.",
            labels=base + ["consumer_group", "language", "version", "consume_mode"],
        )
        for key, n in sorted(consumers.items()):
            c_metric.add_metric(common + list(key), n)
        yield from (p, c_metric)
        topics = GaugeMetricFamily("rocketmq_topic_number", "Topics on the broker.", labels=base)
        topics.add_metric(common, len(ctx.topics.table))
        groups = GaugeMetricFamily("rocketmq_consumer_group_number", "Subscription groups on the broker.", labels=base)
        groups.add_metric(common, len(ctx.groups.table))
        yield from (topics, groups)

    def _storage(self, base: list[str], common: list[str]) -> Iterator[Metric]:
        store = self.ctx.store
        size = GaugeMetricFamily("rocketmq_storage_size", "Disk space used by the store (bytes).", labels=base)
        size.add_metric(common, _store_disk_bytes(str(self.ctx.settings.store_root)))
        flush = GaugeMetricFamily(
            "rocketmq_storage_flush_behind_bytes", "Commit-log bytes appended but not yet flushed.", labels=base
        )
        flush.add_metric(common, max(store.max_phy_offset - store.commit_log.queue.flushed_offset, 0))
        # the consume queue and index are written in the same call as the commit log (no reput thread, docs/store.md)
        dispatch = GaugeMetricFamily(
            "rocketmq_storage_dispatch_behind_bytes", "Commit-log bytes not yet dispatched to consume queues.", labels=base
        )
        dispatch.add_metric(common, 0)
        yield from (size, flush, dispatch)
