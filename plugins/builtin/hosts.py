"""Which ``Host`` headers an HTTP endpoint of pyrmq answers (the dashboard, ``/metrics``): the check that closes DNS
rebinding.

A page on ``http://evil.example:8082/`` whose name the attacker re-points at 127.0.0.1 is same-origin with itself, so
the browser lets its script read whatever 127.0.0.1:8082 answers; the only trace is the ``Host: evil.example:8082``
header. An endpoint therefore answers only the names it is known by: the address it is bound to, ``localhost``,
``127.0.0.1``, ``::1`` and the names its operator lists. Bound to a wildcard address (``0.0.0.0``, ``::``) it also
answers any IP address literal and the machine's host name: an address cannot be re-pointed, only a name can.

A library module used by the dashboard plugin and the metrics plugin (no hooks).
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Iterable

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
WILDCARDS = ("", "0.0.0.0", "::")
_NAME = re.compile(r"[a-z0-9_]([a-z0-9_.-]*[a-z0-9_])?")


def host_name(value: str) -> str | None:
    """The host of a ``Host`` header value (``name[:port]``, ``[v6][:port]``): lower case, without the port, the
    brackets or one trailing dot; IP addresses in their usual text form. None when it is not a host."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        host, rest = value[1:end], value[end + 1:]
        if end < 0 or (rest and not re.fullmatch(r":\d*", rest)):
            return None
        try:
            return str(ipaddress.IPv6Address(host))
        except ValueError:
            return None
    host, sep, port = value.partition(":")
    if sep and not port.isdigit() and port != "":
        return None  # a second colon (a bare IPv6 address) or letters after the colon
    return normal(host)


def normal(host: str) -> str | None:
    """A name or address as compared: lower case, no trailing dot, IPv6 without brackets; None when not a host."""
    host = host.strip().lower()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if host.endswith("."):
        host = host[:-1]
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    return host if _NAME.fullmatch(host) else None


def is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def is_loopback(address: str) -> bool:
    """``address`` (a bind address) reaches only this machine: a loopback IP or ``localhost``."""
    address = address.strip().lower().strip("[]")
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def split_list(value: str | Iterable[str]) -> list[str]:
    """``"a.example, b.example"`` (a setting) or a list of such (repeated options) as a list of entries."""
    items = [value] if isinstance(value, str) else list(value)
    return [part.strip() for item in items for part in item.split(",") if part.strip()]


def host_list_problem(value: str | Iterable[str]) -> str | None:
    """A settings check: None when ``value`` is host names or addresses (comma-separated; ``*`` = any), else what
    was expected."""
    bad = [entry for entry in split_list(value) if entry != "*" and normal(entry) is None]
    return f"host names or addresses, comma-separated ('*' = any), not {', '.join(map(repr, bad))}" if bad else None


def address_list_problem(value: str | Iterable[str]) -> str | None:
    """A settings check: None when ``value`` is IP addresses (comma-separated), else what was expected."""
    for entry in split_list(value):
        if not is_ip(entry.strip("[]")):
            return f"IP addresses, comma-separated, not {entry!r}"
    return None


class HostRule:
    """The ``Host`` names an endpoint bound to ``bound`` answers: see the module's text. ``allowed`` adds names
    (``"*"``: any host, which gives up the rebinding check)."""

    def __init__(self, bound: str, allowed: str | Iterable[str] = ()) -> None:
        self.any_host = False
        names = {name for name in (normal(n) for n in LOOPBACK_NAMES) if name}
        self.wildcard = bound.strip().strip("[]") in WILDCARDS
        if self.wildcard:
            names.add(normal(socket.gethostname()) or "localhost")
        elif normal(bound):
            names.add(normal(bound))  # type: ignore[arg-type]
        for entry in split_list(allowed):
            if entry == "*":
                self.any_host = True
            elif normal(entry) is None:
                raise ValueError(f"{entry!r} is not a host name or address")
            else:
                names.add(normal(entry))  # type: ignore[arg-type]
        self.names = frozenset(names)

    def problem(self, header: str | None) -> tuple[int, str] | None:
        """None when a request with this ``Host`` header value (None: no header) is answered, else the HTTP status
        (400 missing or malformed, 421 a host this endpoint is not known by) and a reason in words."""
        if header is None or not header.strip():
            return 400, "the request has no Host header"
        host = host_name(header)
        if host is None:
            return 400, f"malformed Host header {header!r}"
        if self.any_host or host in self.names or (self.wildcard and is_ip(host)):
            return None
        return 421, (f"this server does not answer for host {host!r} (it answers for {', '.join(sorted(self.names))}"
                     + (" and any IP address" if self.wildcard else "") + ")")
