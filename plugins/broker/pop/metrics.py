"""POP's series of ``/metrics`` (RocketMQ 5.5.0's names where 5.x has one), computed when scraped.

* ``rocketmq_pop_revive_in_message_total{consumer_group, topic, revive_message_type, put_status}``: checkpoint (CK)
  and ack (ACK) records written to the revive topic;
* ``rocketmq_pop_revive_out_message_total{revive_message_type}``: checkpoints that reached their due time (CK) and
  messages acked (ACK) (5.x: records its revive pass read back);
* ``rocketmq_pop_revive_retry_messages_total{consumer_group, topic, put_status}``: messages copied to a retry topic;
* ``rocketmq_pop_revive_lag{queue_id}`` / ``rocketmq_pop_revive_latency{queue_id}``: checkpoints due and not revived
  yet, and how late the oldest is (ms);
* ``rocketmq_pop_checkpoint_buffer_size``: open checkpoints held in memory;
* ``rocketmq_consumer_inflight_messages{topic, consumer_group, is_retry, is_system}``: messages popped and neither
  acked nor revived (FIFO batches included);
* ``pyrmq_pop_polling_requests``: POP and NOTIFICATION requests waiting (long polling).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from pyrmq.plugins.broker.metrics import broker_labels
from pyrmq.plugins.broker.pop.journal import now_ms

if TYPE_CHECKING:  # pragma: no cover - types only
    from pyrmq.plugins.broker.pop.plugin import PopService

SYSTEM_PREFIXES = ("rmq_sys_", "RMQ_SYS_", "CID_RMQ_SYS_")


class PopCollector:
    def __init__(self, pop: PopService) -> None:
        self.pop = pop

    def describe(self) -> list[Metric]:
        return []  # computed at scrape time

    def collect(self) -> Iterator[Metric]:
        pop = self.pop
        base, common = broker_labels(pop.ctx.settings)
        written = CounterMetricFamily(
            "rocketmq_pop_revive_in_message", "Checkpoint and ack records written to the revive topic.",
            labels=base + ["consumer_group", "topic", "revive_message_type", "put_status"])
        for (group, topic, kind, status), n in sorted(pop.journal.written.items()):
            written.add_metric(common + [group, topic, kind, status], n)
        out = CounterMetricFamily(
            "rocketmq_pop_revive_out_message", "Checkpoints that reached their due time (CK) and messages acked (ACK).",
            labels=base + ["revive_message_type"])
        out.add_metric(common + ["CK"], pop.revive.revived_checkpoints)
        out.add_metric(common + ["ACK"], pop.acked)
        retried = CounterMetricFamily(
            "rocketmq_pop_revive_retry_messages", "Messages copied to a retry topic by the revive.",
            labels=base + ["consumer_group", "topic", "put_status"])
        for (group, topic, status), n in sorted(pop.revive.retried.items()):
            retried.add_metric(common + [group, topic, status], n)
        yield from (written, out, retried)

        now = now_ms()
        lag: dict[int, int] = {}
        latency: dict[int, int] = {}
        for ck in list(pop.ledger.open.values()):
            if ck.due <= now:
                lag[ck.revive_qid] = lag.get(ck.revive_qid, 0) + 1
                latency[ck.revive_qid] = max(latency.get(ck.revive_qid, 0), now - ck.due)
        lag_metric = GaugeMetricFamily("rocketmq_pop_revive_lag", "Checkpoints due and not revived yet.",
                                       labels=base + ["queue_id"])
        latency_metric = GaugeMetricFamily("rocketmq_pop_revive_latency",
                                           "How late the oldest due checkpoint is (ms).", labels=base + ["queue_id"])
        for qid in pop.revive_queues() if pop.is_master() else ():
            lag_metric.add_metric(common + [str(qid)], lag.get(qid, 0))
            latency_metric.add_metric(common + [str(qid)], latency.get(qid, 0))
        buffered = GaugeMetricFamily("rocketmq_pop_checkpoint_buffer_size", "Open checkpoints held in memory.",
                                     labels=base)
        buffered.add_metric(common, len(pop.ledger.open))
        yield from (lag_metric, latency_metric, buffered)

        inflight = GaugeMetricFamily(
            "rocketmq_consumer_inflight_messages", "Messages popped and neither acked nor revived.",
            labels=base + ["topic", "consumer_group", "is_retry", "is_system"])
        for (topic, group), n in sorted(pop.inflight_by_group().items()):
            system = topic.startswith(SYSTEM_PREFIXES) or group.startswith(SYSTEM_PREFIXES)
            inflight.add_metric(common + [topic, group, str(topic.startswith("%RETRY%")).lower(), str(system).lower()], n)
        polling = GaugeMetricFamily("pyrmq_pop_polling_requests", "POP and NOTIFICATION requests waiting.", labels=base)
        polling.add_metric(common, pop.polling.total)
        yield from (inflight, polling)
