"""The gRPC endpoint for RocketMQ 5.x clients (issue 27): ``apache.rocketmq.v2.MessagingService`` served by the
broker itself on ``grpcServerPort`` (RocketMQ's proxy setting and default, 8081), so the official 5.x clients
(Python, Java, Go, Node, C#, Rust) work unchanged with no proxy process.

One module a job:

- ``schema``: the v2.1.2 message classes, built at import from our own table (no generated code);
- ``transport``: gRPC over HTTP/2 with ``h2`` on trio (framing, trailers, deadlines, flow control, GOAWAY);
- ``service``: the RPCs (QueryRoute, Heartbeat, QueryAssignment, SendMessage, EndTransaction, Telemetry,
  NotifyClientTermination; UNIMPLEMENTED as 5.5.0 for the others), sessions, ACL;
- ``consume``: ReceiveMessage, AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue on the POP
  room (``kernel.plugin("pop")``), and the auto-renewed handles of push consumers;
- ``messages``: a 5.x message <-> the broker's records (5.x's checks and codes, topic message types);
- ``routes``: topic routes and how brokers learn each other's gRPC endpoints (the name servers' KV config);
- ``settings``: :class:`GrpcSettings` (broker.conf keys, the proxy's names).

This module is the plugin bundles list (configs/broker.toml): its ``pyrmq_configure`` registers a
:class:`GrpcEndpoint` as plugin ``"grpc"``, whose methods are the hook implementations. docs/grpc.md.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import trio

from pyrmq.kernel.hookspecs import hookimpl
from pyrmq.kernel.types import TransactionState
from pyrmq.plugins.grpc.settings import GrpcSettings

if TYPE_CHECKING:  # pragma: no cover
    from pyrmq.kernel.kernel import Kernel
    from pyrmq.plugins.broker.core import BrokerContext
    from pyrmq.remoting.message import StoredMessage

__all__ = ["GrpcEndpoint", "GrpcSettings"]

log = logging.getLogger("pyrmq.grpc")

#: the name the endpoint listens under (``kernel.listening``, the ``pyrmq dev`` ready line)
LISTENER = "grpc"


class GrpcEndpoint:
    """The broker's gRPC server, its service and the route publisher; registered as plugin ``"grpc"``."""

    def __init__(self, kernel: Kernel, ctx: BrokerContext) -> None:
        from pyrmq.plugins.builtin.remoting_server import BrokerListenSettings
        from pyrmq.plugins.grpc.routes import Routes
        from pyrmq.plugins.grpc.service import MessagingService
        from pyrmq.plugins.grpc.transport import GrpcServer

        self.kernel = kernel
        self.ctx = ctx
        settings = kernel.settings(GrpcSettings)
        self.routes = Routes(ctx)
        self.service = MessagingService(kernel, ctx, self.routes)
        self.server = GrpcServer(
            self.service.handlers(), host=kernel.settings(BrokerListenSettings).listenHost, port=settings.grpcServerPort,
            max_message_size=settings.grpcMaxInboundMessageSize, idle_timeout=settings.grpcClientIdleTimeMills / 1000,
            ssl_context=tls_context(settings), tls_mode=settings.grpcTlsMode,
        )

    @hookimpl
    async def pyrmq_serve(self, nursery: trio.Nursery) -> None:
        await nursery.start(self.server.run)
        host, _, port = self.server.address.rpartition(":")
        # the endpoint clients are given: the broker's advertised address (brokerIP1) with the port bound
        self.routes.own_endpoint = f"{self.ctx.settings.brokerIP1}:{port}"
        await nursery.start(self.service.expire_sessions)
        self.service.consumption.nursery = nursery
        await nursery.start(self.service.consumption.renew)
        await nursery.start(self.routes.publish)
        nursery.start_soon(self._announce, f"{host}:{port}")

    async def _announce(self, address: str) -> None:
        # after the broker's own listener: ready lines keep naming the roles first ("broker on ..., grpc on ...")
        await self.kernel.wait_listening("broker")
        self.kernel.mark_listening(LISTENER, address)
        log.info("gRPC endpoint (RocketMQ 5.x clients) on %s", address)

    @hookimpl
    async def pyrmq_check_transaction(self, message: StoredMessage, check_times: int) -> TransactionState | None:
        # a half sent by a 5.x producer (producer group = its topic) is checked on that producer's Telemetry
        # stream; otherwise the next implementation (the transaction plugin's: 4.x producers) answers
        if await self.service.check_transaction(message):
            return TransactionState.UNKNOWN
        return None

    @hookimpl
    async def pyrmq_unconfigure(self) -> None:
        if self.routes.own_endpoint and self.ctx.started:
            await self.routes.withdraw()

    @hookimpl
    def pyrmq_register_metric_collectors(self, role: str) -> list[Any] | None:
        return [_Collector(self)] if role == "broker" else None


class _Collector:
    """``rocketmq_grpc_*`` series: calls, messages sent, refusals, clients with a Telemetry stream."""

    def __init__(self, endpoint: GrpcEndpoint) -> None:
        self.endpoint = endpoint

    def collect(self) -> Any:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        from pyrmq.plugins.broker.metrics import broker_labels

        names, values = broker_labels(self.endpoint.ctx.settings)
        service, server = self.endpoint.service, self.endpoint.server
        for name, doc, value in (
            ("rocketmq_grpc_calls", "gRPC calls received.", server.calls),
            ("rocketmq_grpc_messages_sent", "Messages stored from gRPC SendMessage.", service.sent),
            ("rocketmq_grpc_refused", "gRPC requests answered with a refusal status.", service.refused),
        ):
            family = CounterMetricFamily(name, doc, labels=names)
            family.add_metric(values, value)
            yield family
        clients = GaugeMetricFamily("rocketmq_grpc_clients", "5.x clients with settings known.", labels=names)
        clients.add_metric(values, len(service.sessions))
        yield clients


def tls_context(settings: GrpcSettings) -> Any:
    """The server's TLS context (ALPN h2, TLS >= 1.2) from grpcTlsCertPath / grpcTlsKeyPath; None without them.
    A certificate that does not load stops the start with the key and the reason."""
    if not settings.grpcTlsCertPath or settings.grpcTlsMode == "disabled":
        return None
    import os
    import ssl

    from pyrmq.kernel.errors import ConfigError

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(os.path.expanduser(settings.grpcTlsCertPath),
                                os.path.expanduser(settings.grpcTlsKeyPath) or None)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"cannot load the gRPC TLS certificate / key: {exc}", key="grpcTlsCertPath") from None
    context.set_alpn_protocols(["h2"])
    return context


@hookimpl
def pyrmq_register_settings() -> dict[str, type]:
    return {"broker": GrpcSettings}


@hookimpl
def pyrmq_configure(kernel: Kernel) -> None:
    from pyrmq.plugins.broker.core import register_feature

    if register_feature(kernel, "grpc", lambda ctx: GrpcEndpoint(kernel, ctx)) is not None:
        kernel.expect_listening(LISTENER)
