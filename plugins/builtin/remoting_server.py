"""Puts each role of the bundle on the network: one RocketMQ remoting listener per role.

The name server listens on ``[namesrv] listenHost:listenPort`` and, like RocketMQ's, never answers a request code it
does not know; the broker listens on ``[broker] listenHost:listenPort``. Each listener calls its role's processor
table (collected once at start into ``kernel.processors[role]``) directly, and reports connections to the
``pyrmq_connection_opened`` / ``pyrmq_connection_closed`` hooks.
"""

from __future__ import annotations

from typing import Any

import trio

from pyrmq.kernel.hookspecs import hookimpl
from pyrmq.kernel.kernel import StateKey
from pyrmq.remoting.server import RemotingServer

SERVERS = StateKey[dict]("remoting.servers")


def _listen_address(kernel: Any, role: str) -> tuple[str, int]:
    settings = kernel.bundle.namesrv if role == "namesrv" else kernel.bundle.broker
    return settings.listenHost, settings.listenPort


@hookimpl(trylast=True)
def pyrmq_configure(kernel: Any) -> None:
    servers: dict[str, RemotingServer] = {}
    for role in kernel.bundle.roles:
        host, port = _listen_address(kernel, role)
        servers[role] = RemotingServer(
            {},
            host=host,
            port=port,
            on_open=lambda conn, role=role: kernel.hooks.connection_opened(kernel, role, conn),
            on_close=lambda conn, role=role: kernel.hooks.connection_closed(kernel, role, conn),
            respond_unknown_code=role != "namesrv",
            name=role,
        )
    kernel.state.put(SERVERS, servers)


@hookimpl(trylast=True)
async def pyrmq_serve(kernel: Any, nursery: trio.Nursery) -> None:
    for role, server in kernel.state.get(SERVERS).items():
        server.processors = kernel.processors.get(role, {})
        await nursery.start(server.run)
        kernel.mark_listening(role, server.address)
