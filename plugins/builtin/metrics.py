"""Prometheus metrics at ``/metrics``: RocketMQ 5.x's names, labels and settings, served by a small HTTP responder on
trio.

Switched on per role with RocketMQ 5.x's settings: ``metricsExporterType = "PROM"`` and ``metricsPromExporterPort``
(default 5557; 0 = any free port) on ``metricsPromExporterHost`` (default: the role's ``listenHost``). Roles of one
bundle that name the same host and port share one endpoint. It answers only requests whose ``Host`` header names it
(:class:`~pyrmq.plugins.builtin.hosts.HostRule`: the bound address, ``localhost``, ``127.0.0.1``, ``::1``, and the
names in ``metricsPromExporterAllowedHosts``; 421 otherwise, 400 without one), so a DNS-rebinding page cannot read it.

This plugin knows no feature: the series come from every plugin's ``pyrmq_register_metric_collectors`` (the broker
core's traffic, lag, connections and storage in plugins/broker/metrics.py; transactions; the timer; the name server),
``prometheus_client`` custom collectors read when ``/metrics`` is scraped. Nothing is counted for Prometheus on the
send and pull paths, so switching the exporter on costs those paths nothing (bench/metrics_bench.py). The one thing
this plugin measures itself, per request, is ``rocketmq_rpc_latency``: when (and only when)
the exporter is on, the role's remoting servers get a ``request_timer`` at start (:meth:`RpcLatency.recorder`), which
the connection calls after each processor with one ``monotonic_ns`` pair; with the exporter off it is None.
Every broker series carries ``cluster``, ``node_type = "broker"`` and ``node_id`` (the broker name), as in 5.x.
"""

from __future__ import annotations

from bisect import bisect_left
import logging
from typing import Any, Iterator

import attrs
import trio
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from pyrmq.kernel.hookspecs import hookimpl
from pyrmq.kernel.kernel import Kernel, StateKey
from pyrmq.kernel.settings import one_of, port as tcp_port, setting
from pyrmq.plugins.builtin.hosts import HostRule, host_list_problem
from pyrmq.plugins.builtin.remoting_server import SERVERS
from pyrmq.remoting.codes import RPC_ONEWAY

log = logging.getLogger("pyrmq.metrics")

REQUEST_DEADLINE = 10.0  # seconds a scraper gets to send its request line and headers
MAX_REQUEST_BYTES = 16 * 1024


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

    def __init__(self, host: str, port: int, allowed_hosts: str = "") -> None:
        self.host = host
        self.port = port
        self.hosts = HostRule(host, allowed_hosts)
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

    def _host_problem(self, header_lines: list[str]) -> tuple[str, bytes] | None:
        """(status, body) refusing a request whose Host header does not name this endpoint; None when it does."""
        hosts = [value.strip() for name, _, value in (h.partition(":") for h in header_lines)
                 if name.strip().lower() == "host"]
        if len(hosts) > 1:
            return "400 Bad Request", b"more than one Host header\n"
        problem = self.hosts.problem(hosts[0] if hosts else None)
        if problem is None:
            return None
        if problem[0] == 421:
            return "421 Misdirected Request", f"{problem[1]}; see metricsPromExporterAllowedHosts\n".encode("latin-1", "replace")
        return "400 Bad Request", f"{problem[1]}\n".encode("latin-1", "replace")

    async def _handle(self, stream: trio.SocketStream) -> None:
        async with stream:
            data = b""
            with trio.move_on_after(REQUEST_DEADLINE):
                while b"\r\n\r\n" not in data and len(data) < MAX_REQUEST_BYTES:
                    chunk = await stream.receive_some(4096)
                    if not chunk:
                        break
                    data += chunk
            head_lines = data.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
            line = head_lines[0].split()
            refused = self._host_problem(head_lines[1:])
            if len(line) < 2:
                status, body, kind = "400 Bad Request", b"bad request line\n", "text/plain"
            elif refused is not None:
                (status, body), kind = refused, "text/plain"
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


@attrs.frozen
class MetricsSettings:
    """RocketMQ 5.x's exporter settings, for the name server and the broker alike."""

    metricsExporterType: str = setting("DISABLE", check=one_of("DISABLE", "PROM"), help="PROM serves /metrics")
    metricsPromExporterHost: str = setting("", help="default: the role's listenHost")
    metricsPromExporterPort: int = setting(5557, check=tcp_port, help="0 = any free port")
    metricsPromExporterAllowedHosts: str = setting("", check=host_list_problem, help=(
        "pyrmq: more names the scrape's Host header may carry, comma-separated (always: the bound address, "
        "localhost, 127.0.0.1, ::1; bound to 0.0.0.0 or ::, also any IP address and this machine's name); "
        "'*' = any"))


@hookimpl(trylast=True)
def pyrmq_register_settings() -> dict[str, type]:
    return {"namesrv": MetricsSettings, "broker": MetricsSettings}


def _exporter(kernel: Any, role: str) -> tuple[str, int] | None:
    settings = kernel.settings(MetricsSettings, section=role)
    if settings.metricsExporterType != "PROM":
        return None
    host = settings.metricsPromExporterHost or kernel.settings.section(role).get("listenHost", "127.0.0.1")
    return host, settings.metricsPromExporterPort


def _allowed_hosts(kernel: Any, roles: list[str]) -> str:
    return ",".join(kernel.settings(MetricsSettings, section=role).metricsPromExporterAllowedHosts for role in roles)


def _role_labels(kernel: Any, role: str) -> tuple[str, str, str]:
    """5.x's (cluster, node_type, node_id) of a role's rpc latency: the broker's cluster and name (broker.conf keys)."""
    if role == "broker":
        values = kernel.settings.section("broker")
        return str(values.get("brokerClusterName", "")), "broker", str(values.get("brokerName", ""))
    return "", role, ""


@hookimpl(trylast=True)
def pyrmq_configure(kernel: Kernel) -> None:
    endpoints: dict[str, MetricsEndpoint] = {}  # role -> endpoint (roles naming one address share it)
    sharing: dict[tuple[str, int] | int, list[str]] = {}  # address (port 0: each role its own) -> roles
    for n, role in enumerate(kernel.bundle.roles):
        address = _exporter(kernel, role)
        if address is not None:
            sharing.setdefault(address if address[1] != 0 else n, []).append(role)
    for roles in sharing.values():
        address = _exporter(kernel, roles[0])
        assert address is not None
        endpoint = MetricsEndpoint(*address, allowed_hosts=_allowed_hosts(kernel, roles))  # the names of every role
        endpoints.update(dict.fromkeys(roles, endpoint))
    if endpoints:
        kernel.state.put(ENDPOINTS, endpoints)


@hookimpl
async def pyrmq_serve(kernel: Kernel, nursery: trio.Nursery) -> None:
    endpoints = kernel.state.find(ENDPOINTS)
    if not endpoints:
        return
    for role, endpoint in endpoints.items():
        # every plugin's series for the role (the broker core, transactions, the timer, the name server, ...)
        for collector in kernel.hooks.register_metric_collectors(kernel, role):
            endpoint.registry.register(collector)
        # timing is chosen here, once: the role's remoting listeners call the recorder directly after each request
        record = endpoint.rpc_latency.recorder(_role_labels(kernel, role), kernel.processors.get(role, {}))
        for listener, server in (kernel.state.find(SERVERS) or {}).items():
            if listener == role or listener.startswith(role + "-"):  # broker-vip: the broker's fast port
                server.request_timer = record
    for endpoint in {id(e): e for e in endpoints.values()}.values():
        await nursery.start(endpoint.run)
