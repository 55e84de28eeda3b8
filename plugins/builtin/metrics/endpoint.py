"""One ``/metrics`` listener: a small HTTP/1.1 responder on trio serving a prometheus_client registry, answering only
requests whose Host header names it."""

from __future__ import annotations

import logging
from typing import Any

import trio
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from pyrmq.plugins.builtin.hosts import HostRule
from pyrmq.plugins.builtin.metrics.latency import RpcLatency

log = logging.getLogger("pyrmq.metrics")

REQUEST_DEADLINE = 10.0  # seconds a scraper gets to send its request line and headers
MAX_REQUEST_BYTES = 16 * 1024


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
