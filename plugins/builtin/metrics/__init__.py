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

import logging
from typing import Any

import attrs
import trio

from pyrmq.kernel.hookspecs import hookimpl
from pyrmq.kernel.kernel import Kernel, StateKey
from pyrmq.kernel.settings import one_of, port as tcp_port, setting
from pyrmq.plugins.builtin.hosts import host_list_problem
from pyrmq.plugins.builtin.metrics.endpoint import MetricsEndpoint
from pyrmq.plugins.builtin.metrics.latency import _RPC_BOUNDS_NS, RPC_LATENCY_BUCKETS_MS, RpcLatency
from pyrmq.plugins.builtin.remoting_server import SERVERS

__all__ = ["ENDPOINTS", "MetricsEndpoint", "MetricsSettings", "RpcLatency", "RPC_LATENCY_BUCKETS_MS", "_RPC_BOUNDS_NS"]

log = logging.getLogger("pyrmq.metrics")

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
