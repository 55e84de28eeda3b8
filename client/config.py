"""Settings shared by producers and consumers (Java ``ClientConfig``; defaults from spec 7.3-7.5)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

import attrs

from pyrmq.client.errors import InvalidMessageError

__all__ = ["ClientConfig", "parse_namesrv", "check_name", "DEFAULT_NAMESRV"]

DEFAULT_NAMESRV = "127.0.0.1:9876"
_NAME = re.compile(r"^[%|a-zA-Z0-9_-]+$")
MAX_NAME_LENGTH = 127


def parse_namesrv(value: str | Iterable[str] | None) -> tuple[str, ...]:
    """``"a:9876;b:9876"``, a list, or None (then ``$NAMESRV_ADDR``, then 127.0.0.1:9876)."""
    if value is None:
        value = os.environ.get("NAMESRV_ADDR") or DEFAULT_NAMESRV
    parts = value.replace(",", ";").split(";") if isinstance(value, str) else list(value)
    out = []
    for part in parts:
        part = part.strip()
        if not part:
            continue
        host, sep, port = part.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise InvalidMessageError(f"name server address {part!r} is not host:port")
        out.append(part)
    if not out:
        raise InvalidMessageError("no name server address given")
    return tuple(out)


def check_name(kind: str, name: str) -> str:
    """Topic and group names: ``^[%|a-zA-Z0-9_-]+$``, at most 127 characters (spec 7.9)."""
    if not name or not name.strip():
        raise InvalidMessageError(f"the {kind} name is blank")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidMessageError(f"the {kind} name {name[:40]!r}... is longer than {MAX_NAME_LENGTH} characters")
    if not _NAME.match(name):
        raise InvalidMessageError(f"the {kind} name {name!r} contains characters outside [%|a-zA-Z0-9_-]")
    return name


def parse_credentials(value: Iterable[str] | None) -> tuple[str, str] | None:
    """``(access_key, secret_key)`` or None; both must be non-empty."""
    if value is None:
        return None
    pair = tuple(value)
    if len(pair) != 2 or not all(isinstance(v, str) and v for v in pair):
        raise ValueError("credentials must be (access_key, secret_key), both non-empty text")
    return pair  # type: ignore[return-value]


@attrs.frozen
class ClientConfig:
    """Where the name servers are and the client timers (seconds)."""

    namesrv_addr: tuple[str, ...] = attrs.field(default=None, converter=parse_namesrv)
    #: the part after ``@`` in the client id; default ``pid#clock#n`` (unique per client object)
    instance_name: str | None = None
    client_ip: str | None = None
    unit_name: str | None = None
    #: route refresh for every topic in use (Java pollNameServerInterval)
    poll_name_server_interval: float = 30.0
    heartbeat_broker_interval: float = 30.0
    persist_consumer_offset_interval: float = 5.0
    #: timeout of admin-style requests (Java mqClientApiTimeout)
    api_timeout: float = 3.0
    connect_timeout: float = 3.0
    #: ACL ``(access_key, secret_key)``: every request is signed (RocketMQ's AclClientRPCHook); never printed
    credentials: tuple[str, str] | None = attrs.field(default=None, converter=parse_credentials, repr=False)
