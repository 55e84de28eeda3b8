"""Prometheus metrics at ``/metrics``: RocketMQ 5.x's names, labels and settings, served by a small HTTP responder on
trio.

Switched on per role with RocketMQ 5.x's settings: ``metricsExporterType = "PROM"`` and ``metricsPromExporterPort``
(default 5557; 0 = any free port) on ``metricsPromExporterHost`` (default: the role's ``listenHost``). Roles of one
bundle that name the same host and port share one endpoint.

Nothing is counted for Prometheus on the send and pull paths: the broker's counters (``plugins/broker/stats.py``) are
read by a ``prometheus_client`` custom collector when ``/metrics`` is scraped, so switching the exporter on costs
those paths nothing (bench/metrics_bench.py). Gauges (lag, connections, storage, pending halves, the timing wheel)
are computed at scrape time too. The one thing measured per request is ``rocketmq_rpc_latency``: when (and only when)
the exporter is on, the role's remoting servers get a ``request_timer`` at start (:meth:`RpcLatency.recorder`), which
the connection calls after each processor with one ``monotonic_ns`` pair; with the exporter off it is None.
Every broker series carries ``cluster``, ``node_type = "broker"`` and ``node_id`` (the broker name), as in 5.x.
"""

from __future__ import annotations

from bisect import bisect_left
import logging
import os
import time
from typing import Any, Iterator

import trio
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from pyrmq.kernel.hookspecs import hookimpl
from pyrmq.kernel.kernel import StateKey
from pyrmq.plugins.broker.stats import MESSAGE_SIZE_BUCKETS
from pyrmq.plugins.builtin.remoting_server import SERVERS
from pyrmq.remoting.codes import RPC_ONEWAY

log = logging.getLogger("pyrmq.metrics")

REQUEST_DEADLINE = 10.0  # seconds a scraper gets to send its request line and headers
MAX_REQUEST_BYTES = 16 * 1024


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
    """The broker's series, read from its context (and the transaction and timer plugins, when in the bundle) when
    scraped."""

    def __init__(self, ctx: Any, transactions: Any = None, timer: Any = None) -> None:
        self.ctx = ctx
        self.transactions = transactions
        self.timer = timer

    def describe(self) -> list[Metric]:
        return []  # computed at scrape time; no registration-time collection

    def collect(self) -> Iterator[Metric]:
        ctx = self.ctx
        s = ctx.settings
        base = ["cluster", "node_type", "node_id"]
        common = [s.brokerClusterName, "broker", s.brokerName]
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
        yield from self._transactions(base, common)
        yield from self._timer(base, common)

    def _transactions(self, base: list[str], common: list[str]) -> Iterator[Metric]:
        service = self.transactions
        if service is None:
            return
        commits = CounterMetricFamily(
            "rocketmq_commit_messages", "Transactions committed, by topic.", labels=base + ["topic"])
        for topic, n in list(service.commits_by_topic.items()):
            commits.add_metric(common + [topic], n)
        rollbacks = CounterMetricFamily(
            "rocketmq_rollback_messages", "Transactions rolled back, by topic.", labels=base + ["topic"])
        for topic, n in list(service.rollbacks_by_topic.items()):
            rollbacks.add_metric(common + [topic], n)
        service.ingest()  # halves sent since the last check pass or END_TRANSACTION (synchronous, a no-op before load)
        pending: dict[str, int] = {}
        for half in list(service.pending.values()):
            pending[half.topic] = pending.get(half.topic, 0) + 1
        # a topic that had transactions stays at 0 once they are resolved (5.x keeps its count too)
        for topic in (*service.commits_by_topic, *service.rollbacks_by_topic):
            pending.setdefault(topic, 0)
        half = GaugeMetricFamily(
            "rocketmq_half_messages", "Half messages whose transaction is not resolved yet, by topic.",
            labels=base + ["topic"])
        for topic, n in sorted(pending.items()):
            half.add_metric(common + [topic], n)
        yield from (commits, rollbacks, half)

    def _timer(self, base: list[str], common: list[str]) -> Iterator[Metric]:
        service = self.timer
        if service is None:
            return
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
            mode = "push" if info.consume_type == "CONSUME_PASSIVELY" else "pull"
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


class NamesrvCollector:
    """The name server's own series: live brokers per cluster (a pyrmq addition; 5.x's name server exports only
    RPC latency)."""

    def __init__(self, namesrv: Any) -> None:
        self.namesrv = namesrv

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        routes = self.namesrv.routes
        brokers = GaugeMetricFamily(
            "rocketmq_namesrv_brokers", "Broker groups registered with the name server.", labels=["node_type", "cluster"]
        )
        for cluster, names in sorted(routes.clusters.items()):
            brokers.add_metric(["namesrv", cluster], len(names))
        topics = GaugeMetricFamily("rocketmq_namesrv_topics", "Topics with routes on the name server.", labels=["node_type"])
        topics.add_metric(["namesrv"], len(routes.topic_queues))
        yield from (brokers, topics)


#: RocketMQ 5.x's rocketmq_rpc_latency buckets (milliseconds)
RPC_LATENCY_BUCKETS_MS = (1, 3, 5, 7, 10, 100, 1000, 2000, 3000)
_RPC_BOUNDS_NS = tuple(ms * 1_000_000 for ms in RPC_LATENCY_BUCKETS_MS)


def _code_name(enum_type: Any, code: int) -> str:
    """5.x's label value for a request or response code: the constant's name in lower case, else the number."""
    try:
        return enum_type(code).name.lower()
    except ValueError:
        return str(code)


class RpcLatency:
    """``rocketmq_rpc_latency`` of one endpoint: per (role labels, request code, response code) a row of bucket counts
    (5.x's bounds, then +Inf) and the sum in nanoseconds, added to by :meth:`recorder`'s function and read as a
    histogram in milliseconds when scraped.

    Plain integer rows instead of prometheus_client's Histogram (which takes a lock per observation). A role's rows
    for its processors' successful answers are made at start, so timing a request allocates nothing."""

    def __init__(self) -> None:
        self.cells: dict[tuple[tuple[str, str, str], str, str], list[int]] = {}

    def cell(self, common: tuple[str, str, str], request_code: int, response_code: int | None) -> list[int]:
        from pyrmq.remoting.codes import RequestCode, ResponseCode

        answer = "oneway" if response_code is None else _code_name(ResponseCode, response_code)
        key = (common, _code_name(RequestCode, request_code), answer)
        found = self.cells.get(key)
        if found is None:
            found = self.cells[key] = [0] * (len(RPC_LATENCY_BUCKETS_MS) + 2)
        return found

    def recorder(self, common: tuple[str, str, str], codes: Any = ()) -> Any:
        """The remoting server's ``request_timer`` for a role labelled ``common`` whose processors answer ``codes``:
        ``record(request, response, elapsed_ns)``, called by the connection after each processor.

        A successful answer (nearly all) costs one dict lookup of a row made here, a comparison (under 1 ms: the
        first bucket, else a bisect) and two integer additions. Oneway requests count under ``oneway``; a request
        whose processor answers later (a long-polling pull) is not timed here: its time is the wait."""
        success = {int(code): self.cell(common, code, 0) for code in codes}
        cell = self.cell
        first = _RPC_BOUNDS_NS[0]

        def other(request: Any, response: Any) -> list[int] | None:
            if response is not None:
                if response.code == 0:  # a code without a processor made at start (a plugin's, added later)
                    row = success[request.code] = cell(common, request.code, 0)
                    return row
                return cell(common, request.code, response.code)
            return cell(common, request.code, None) if request.flag & RPC_ONEWAY else None  # else: answered later

        def record(request: Any, response: Any, elapsed: int) -> None:
            try:
                if response.code:
                    raise KeyError
                row = success[request.code]
            except (AttributeError, KeyError):  # no response (oneway, later) or not a success: a row by code
                row = other(request, response)
                if row is None:
                    return
            row[0 if elapsed <= first else bisect_left(_RPC_BOUNDS_NS, elapsed)] += 1
            row[-1] += elapsed

        return record

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(
            "rocketmq_rpc_latency", "Time to process a request (milliseconds).",
            labels=["cluster", "node_type", "node_id", "protocol_type", "request_code", "response_code"],
        )
        bounds = [str(float(b)) for b in RPC_LATENCY_BUCKETS_MS] + ["+Inf"]
        for (common, request, response), cell in list(self.cells.items()):
            cumulative, buckets = 0, []
            for bound, n in zip(bounds, cell):
                cumulative += n
                buckets.append((bound, cumulative))
            if cumulative:  # rows made at start for codes never requested are left out
                family.add_metric([*common, "remoting", request, response], buckets, cell[-1] / 1e6)
        yield family


class MetricsEndpoint:
    """One ``/metrics`` listener and the registry it serves."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.registry = CollectorRegistry(auto_describe=False)
        self.rpc_latency = RpcLatency()
        self.registry.register(self.rpc_latency)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)

    def page(self) -> bytes:
        return generate_latest(self.registry)

    async def run(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(self.port, host=self.host)
        self.port = listeners[0].socket.getsockname()[1]
        log.info("Prometheus metrics on http://%s:%d/metrics", self.host, self.port)
        task_status.started(self.port)
        await trio.serve_listeners(self._handle, listeners)

    async def _handle(self, stream: trio.SocketStream) -> None:
        async with stream:
            data = b""
            with trio.move_on_after(REQUEST_DEADLINE):
                while b"\r\n\r\n" not in data and len(data) < MAX_REQUEST_BYTES:
                    chunk = await stream.receive_some(4096)
                    if not chunk:
                        break
                    data += chunk
            line = data.split(b"\r\n", 1)[0].decode("latin-1").split()
            if len(line) < 2:
                status, body, kind = "400 Bad Request", b"bad request line\n", "text/plain"
            elif line[0] not in ("GET", "HEAD"):
                status, body, kind = "405 Method Not Allowed", b"GET /metrics only\n", "text/plain"
            elif line[1].split("?", 1)[0] not in ("/metrics", "/"):
                status, body, kind = "404 Not Found", b"metrics are at /metrics\n", "text/plain"
            else:
                try:
                    status, body, kind = "200 OK", self.page(), CONTENT_TYPE_LATEST
                except Exception as exc:  # noqa: BLE001 - a failing collector must not stop the role
                    log.exception("collecting metrics failed")
                    status, body, kind = "500 Internal Server Error", f"collecting metrics failed: {exc!r}\n".encode(), "text/plain"
            head = (
                f"HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            ).encode("latin-1")
            try:
                await stream.send_all(head + (b"" if line[:1] == ["HEAD"] else body))
            except trio.BrokenResourceError:
                pass


ENDPOINTS = StateKey[dict]("metrics.endpoints")


def _exporter(settings: Any) -> tuple[str, int] | None:
    if settings is None or settings.metricsExporterType != "PROM":
        return None
    return settings.metricsPromExporterHost or settings.listenHost, settings.metricsPromExporterPort


@hookimpl(trylast=True)
def pyrmq_configure(kernel: Any) -> None:
    endpoints: dict[str, MetricsEndpoint] = {}  # role -> endpoint (roles naming one address share it)
    by_address: dict[tuple[str, int], MetricsEndpoint] = {}
    for role, settings in (("namesrv", kernel.bundle.namesrv), ("broker", kernel.bundle.broker)):
        address = _exporter(settings)
        if address is None:
            continue
        shared = by_address.get(address) if address[1] != 0 else None
        endpoints[role] = shared or MetricsEndpoint(*address)
        by_address[address] = endpoints[role]
    if endpoints:
        kernel.state.put(ENDPOINTS, endpoints)


@hookimpl
async def pyrmq_serve(kernel: Any, nursery: trio.Nursery) -> None:
    from pyrmq.plugins.broker.core import BROKER
    from pyrmq.plugins.namesrv.plugin import NAMESRV

    endpoints = kernel.state.find(ENDPOINTS)
    if not endpoints:
        return
    from pyrmq.plugins.broker.timer import TIMER
    from pyrmq.plugins.broker.transaction import TRANSACTIONS

    for role, endpoint in endpoints.items():
        owner = kernel.state.find(BROKER) if role == "broker" else kernel.state.find(NAMESRV)
        if owner is None:
            continue
        if role == "broker":
            timer = kernel.state.find(TIMER)
            if timer is not None:
                timer.track_topics()  # rocketmq_timing_messages by topic
            endpoint.registry.register(BrokerCollector(owner, kernel.state.find(TRANSACTIONS), timer))
            common = (owner.settings.brokerClusterName, "broker", owner.settings.brokerName)
        else:
            endpoint.registry.register(NamesrvCollector(owner))
            common = ("", "namesrv", "")
        # timing is chosen here, once: the role's remoting listeners call the recorder directly after each request
        record = endpoint.rpc_latency.recorder(common, kernel.processors.get(role, {}))
        for listener, server in (kernel.state.find(SERVERS) or {}).items():
            if listener == role or listener.startswith(role + "-"):  # broker-vip: the broker's fast port
                server.request_timer = record
    for endpoint in {id(e): e for e in endpoints.values()}.values():
        await nursery.start(endpoint.run)
