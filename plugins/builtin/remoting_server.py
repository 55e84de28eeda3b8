"""Puts each role of the bundle on the network: one RocketMQ remoting listener per role.

The name server listens on ``[namesrv] listenHost:listenPort`` and, like RocketMQ's, never answers a request code it
does not know; the broker listens on ``[broker] listenHost:listenPort``. Each listener calls its role's processor
table (collected once at start into ``kernel.processors[role]``) directly, and reports connections to the
``pyrmq_connection_opened`` / ``pyrmq_connection_closed`` hooks.

Like RocketMQ's, the broker also listens on its VIP ("fast") port, ``listenPort - 2`` (spec 1.1), with the same
processors except PULL_MESSAGE: Java clients up to 4.5.0 send there by default (``vipChannelEnabled``). With
``listenPort = 0`` (any free port) there is no VIP port; ``fastListenEnable = false`` switches it off.
"""

from __future__ import annotations

from typing import Any

import attrs
import trio

from pyrmq.kernel.hookspecs import hookimpl
from pyrmq.kernel.kernel import Kernel, StateKey
from pyrmq.kernel.settings import port as tcp_port, setting
from pyrmq.remoting.codes import RequestCode
from pyrmq.remoting.server import RemotingServer

SERVERS = StateKey[dict]("remoting.servers")


@attrs.frozen
class NamesrvListenSettings:
    """Where the name server listens (``[namesrv]``)."""

    listenHost: str = setting("127.0.0.1", help="the interface to bind (RocketMQ binds all)")
    listenPort: int = setting(9876, check=tcp_port)


@attrs.frozen
class BrokerListenSettings:
    """Where the broker listens (``[broker]``, RocketMQ's broker.conf names)."""

    listenHost: str = setting("127.0.0.1", help="pyrmq: the interface to bind (RocketMQ binds all)")
    listenPort: int = setting(10911, check=tcp_port)
    fastListenEnable: bool = setting(True, help="also listen on the VIP port listenPort - 2 (RocketMQ always does)")


@hookimpl(trylast=True)
def pyrmq_register_settings() -> dict[str, type]:
    return {"namesrv": NamesrvListenSettings, "broker": BrokerListenSettings}


def _listen_address(kernel: Any, role: str) -> tuple[str, int]:
    settings = kernel.settings(NamesrvListenSettings if role == "namesrv" else BrokerListenSettings)
    return settings.listenHost, settings.listenPort


@hookimpl(trylast=True)
def pyrmq_configure(kernel: Kernel) -> None:
    servers: dict[str, RemotingServer] = {}

    def server(role: str, listener: str, host: str, port: int) -> RemotingServer:
        return RemotingServer(
            {},
            host=host,
            port=port,
            on_open=lambda conn: kernel.hooks.connection_opened(kernel, role, conn),
            on_close=lambda conn: kernel.hooks.connection_closed(kernel, role, conn),
            respond_unknown_code=role != "namesrv",
            name=listener,
        )

    for role in kernel.bundle.roles:
        host, port = _listen_address(kernel, role)
        servers[role] = server(role, role, host, port)
        if role == "broker" and kernel.settings(BrokerListenSettings).fastListenEnable and port > 2:
            servers["broker-vip"] = server(role, "broker-vip", host, port - 2)
    kernel.state.put(SERVERS, servers)


@hookimpl(trylast=True)
async def pyrmq_serve(kernel: Kernel, nursery: trio.Nursery) -> None:
    for listener, server in kernel.state.get(SERVERS).items():
        if listener == "broker-vip":
            table = dict(kernel.processors.get("broker", {}))
            table.pop(RequestCode.PULL_MESSAGE, None)  # not served on the VIP port (spec 1.1)
            server.processors = table
        else:
            server.processors = kernel.processors.get(listener, {})
        await nursery.start(server.run)
        kernel.mark_listening(listener, server.address)
