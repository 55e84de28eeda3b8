"""What every dashboard request passes before a page sees it (docs/dashboard.md, *Security*):

1. **Host**: the ``Host`` header must name this dashboard (:class:`~pyrmq.plugins.builtin.hosts.HostRule`: the bound
   address, ``localhost``, ``127.0.0.1``, ``::1``, the names in ``allowed_hosts``): else 421 (400 when missing or
   malformed). This closes DNS rebinding.
2. **Origin**: a request that may change something (any method but GET / HEAD / OPTIONS) must come from the
   dashboard's own pages: ``Sec-Fetch-Site`` ``same-origin`` (or ``none``: typed by the user), else, without that
   header, an ``Origin`` equal to the dashboard's own; a request with neither header is not from a browser and
   goes on to the form token. Else 403. (:func:`cross_origin`, the rule of Go's ``http.CrossOriginProtection``.)
3. **Session**: every browser gets a signed session cookie on its first response (``HttpOnly``,
   ``SameSite=Strict``, ``Secure`` over TLS); each form carries the session's token, checked by the page's handler
   (:mod:`pyrmq.plugins.dashboard.auth`).
4. **Headers** on every response: a Content-Security-Policy with no script at all and ``frame-ancestors 'none'``,
   ``X-Frame-Options: DENY``, ``X-Content-Type-Options: nosniff``, ``Referrer-Policy``, ``Cache-Control: no-store``
   on pages.

``X-Forwarded-Host`` / ``-Proto`` / ``-For`` are read only from the addresses in ``trusted_proxies``.
"""

from __future__ import annotations

import html
import ipaddress
import urllib.parse
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

import attrs

from pyrmq.plugins.builtin.hosts import HostRule, is_loopback, split_list
from pyrmq.plugins.dashboard.auth import COOKIE, SESSION_SECONDS, Session, Sessions

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
CSP = ("default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; "
       "base-uri 'none'")
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
]

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Awaitable[None]]


def exposure_problem(host: str, users: str | None, insecure_no_login: bool) -> str | None:
    """Why the dashboard must not start on ``host`` (None: it may). Off loopback it needs a user file, or the
    operator's explicit ``--insecure-no-login``."""
    if users or insecure_no_login or is_loopback(host):
        return None
    return (f"refusing to serve the dashboard on {host} without a user file: anyone who can reach it could delete "
            "topics, reset offsets and send messages. Give it users (--users FILE, setting users; lines from "
            "`pyrmq dashboard hash-password`), listen on 127.0.0.1, or accept the risk with --insecure-no-login "
            "(setting insecure_no_login = true)")


def cross_origin(method: str, headers: dict[str, str], own_host: str) -> str | None:
    """Why a request is refused as cross-origin (None: it is not). ``headers``: lower-case names; ``own_host``: the
    ``Host`` the request was sent to (or a trusted proxy's ``X-Forwarded-Host``)."""
    if method in SAFE_METHODS:
        return None
    site = headers.get("sec-fetch-site")
    if site:
        if site in ("same-origin", "none"):
            return None
        return f"the browser says this request came from another site (Sec-Fetch-Site: {site})"
    origin = headers.get("origin")
    if origin is None:
        return None  # not sent by a browser (curl, a script): the form token decides
    if origin == "null":
        return "the request came from a page without an origin (Origin: null)"
    netloc = urllib.parse.urlsplit(origin).netloc.lower()
    if netloc != own_host.strip().lower():
        return f"the request came from {origin}, not from this dashboard ({own_host})"
    return None


@attrs.frozen
class Security:
    """How a dashboard checks its requests (from the plugin's settings or the command's options)."""

    hosts: HostRule
    trusted_proxies: frozenset[str] = frozenset()
    cookie: str = COOKIE
    tls: bool = False
    #: the address a dashboard without login is exposed on (--insecure-no-login off loopback), for its banner
    exposed: str | None = None

    @classmethod
    def make(cls, host: str, port: int, *, allowed_hosts: str | Iterable[str] = (),
             trusted_proxies: str | Iterable[str] = (), tls: bool = False, exposed: str | None = None) -> "Security":
        proxies = set()
        for entry in split_list(trusted_proxies):
            proxies.add(str(ipaddress.ip_address(entry.strip("[]"))))
        # one cookie per port: browsers share cookies between the ports of a host (two dashboards, other apps)
        return cls(HostRule(host, allowed_hosts), frozenset(proxies), f"{COOKIE}_{port}", tls, exposed)


@attrs.frozen
class Facts:
    """What the checks found out about a request, at ``scope["dashboard"]``."""

    host: str  # the Host it was sent to (a trusted proxy's X-Forwarded-Host)
    scheme: str  # http or https (a trusted proxy's X-Forwarded-Proto)
    client: str  # the client's address (a trusted proxy's X-Forwarded-For)
    session: Session
    cookie: str | None  # the Set-Cookie value of a session made for this request, else None


def _headers(scope: Scope) -> dict[str, str]:
    found: dict[str, str] = {}
    for name, value in scope.get("headers") or []:
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        found[key] = found[key] + ", " + text if key in found else text
    return found


def _last(value: str) -> str:
    return value.split(",")[-1].strip()


def cookie_header(name: str, value: str, *, secure: bool, max_age: int = SESSION_SECONDS) -> bytes:
    return (f"{name}={value}; Path=/; Max-Age={max_age}; HttpOnly; SameSite=Strict" + ("; Secure" if secure else "")
            ).encode("latin-1")


def refusal_page(status: int, title: str, reason: str, hint: str = "") -> bytes:
    return (f'<!doctype html><html><head><meta charset="utf-8"><title>{status} {html.escape(title)} - pyrmq</title>'
            f'<link rel="stylesheet" href="/static/dashboard.css"></head><body><header><b>pyrmq</b></header><main>'
            f'<h1>{html.escape(title)}</h1><div class="error" id="refused">{html.escape(reason)}</div>'
            + (f"<p>{html.escape(hint)}</p>" if hint else "") + "</main></body></html>").encode()


class SecurityMiddleware:
    """The checks of the module's text, as ASGI middleware in front of the dashboard's routes."""

    def __init__(self, app: ASGIApp, sessions: Sessions, security: Security) -> None:
        self.app = app
        self.sessions = sessions
        self.security = security

    def facts(self, scope: Scope, headers: dict[str, str]) -> tuple[str | None, str, str]:
        """(Host, scheme, client address), from a trusted proxy's X-Forwarded-* headers where it sends them."""
        client = (scope.get("client") or ("", 0))[0]
        host, scheme = headers.get("host"), scope.get("scheme", "http")
        if client in self.security.trusted_proxies:
            if headers.get("x-forwarded-host"):
                host = _last(headers["x-forwarded-host"])
            if headers.get("x-forwarded-proto"):
                scheme = _last(headers["x-forwarded-proto"]).lower()
            if headers.get("x-forwarded-for"):
                client = _last(headers["x-forwarded-for"])
        return host, scheme, client

    async def refuse(self, send: Callable[[Any], Awaitable[None]], status: int, title: str, reason: str,
                     hint: str = "") -> None:
        body = refusal_page(status, title, reason, hint)
        await send({"type": "http.response.start", "status": status, "headers": [
            (b"content-type", b"text/html; charset=utf-8"), (b"content-length", str(len(body)).encode()),
            (b"cache-control", b"no-store"), *HEADERS]})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Any]],
                       send: Callable[[Any], Awaitable[None]]) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        host, scheme, client = self.facts(scope, headers)
        problem = self.security.hosts.problem(host)
        if problem is not None:
            status, reason = problem
            await self.refuse(send, status, "Misdirected request" if status == 421 else "Bad request", reason,
                              "Open the dashboard by an address it answers for; behind a proxy or by another name, "
                              "add that name to allowed_hosts (--allowed-host).")
            return
        assert host is not None
        reason = cross_origin(scope["method"], headers, host)
        if reason is not None:
            await self.refuse(send, 403, "Refused: not sent by the dashboard's own page", reason,
                              "Changes are accepted only from the dashboard's own forms. Open the dashboard and use "
                              "its forms.")
            return
        # the first of the cookie's values that is a session of ours (another app on this host may set the name too)
        session = next(filter(None, map(self.sessions.read, _cookie_values(headers.get("cookie", ""),
                                                                          self.security.cookie))), None)
        made = None
        if session is None:
            session, made = self.sessions.new()
        secure = self.security.tls or scheme == "https"
        scope["dashboard"] = Facts(host, scheme, client, session, made)

        async def send_with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                extra = list(HEADERS)
                names = {name.lower() for name, _ in message.get("headers", [])}
                if b"cache-control" not in names:
                    extra.append((b"cache-control", b"no-store"))
                session_cookie = scope.get("dashboard_cookie", made)  # a log-in or log-out replaces it
                if session_cookie is not None:
                    extra.append((b"set-cookie", cookie_header(self.security.cookie, session_cookie, secure=secure)))
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, send_with_headers)


def _cookie_values(header: str, wanted: str) -> list[str]:
    values = []
    for part in header.split(";"):
        name, sep, value = part.strip().partition("=")
        if sep and name == wanted:
            values.append(value.strip().strip('"'))
    return values
