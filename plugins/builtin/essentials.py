"""Essential plugin, loaded by every role: logs the role's life cycle and its connections.

Built-in behaviour is ``trylast`` so a user plugin answers first.
"""

from __future__ import annotations

import logging
from typing import Any

from pyrmq.kernel.hookspecs import hookimpl
from pyrmq.kernel.kernel import Kernel

log = logging.getLogger("pyrmq.role")


@hookimpl(trylast=True)
def pyrmq_configure(kernel: Kernel) -> None:
    log.info("configuring bundle %s (%s): roles %s", kernel.bundle.name, kernel.bundle.file, ", ".join(kernel.bundle.roles))


@hookimpl(trylast=True)
def pyrmq_connection_opened(kernel: Kernel, role: str, connection: Any) -> None:
    log.debug("%s: connection opened: %s", role, getattr(connection, "remote_address", connection))


@hookimpl(trylast=True)
def pyrmq_connection_closed(kernel: Kernel, role: str, connection: Any) -> None:
    log.debug("%s: connection closed: %s", role, getattr(connection, "remote_address", connection))


@hookimpl(trylast=True)
async def pyrmq_unconfigure(kernel: Kernel) -> None:
    log.info("bundle %s stopped", kernel.bundle.name)
