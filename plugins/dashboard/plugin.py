"""The dashboard as a plugin: ``pyrmq dashboard`` (``pyrmq_add_commands``) and, in the dev bundle, a service beside
the name server and broker (``pyrmq_serve``; ``pyrmq dev`` turns it on, ``--no-dashboard`` off, ``--dashboard-port``
moves it: this plugin's options of the dev command, ``pyrmq_add_options`` / ``pyrmq_apply_options``).

Settings (``[plugins."pyrmq.plugins.dashboard.plugin"]``, :class:`DashboardSettings`): ``enabled`` (false unless
``pyrmq dev`` sets it), ``host`` (127.0.0.1), ``port`` (8082, rocketmq-dashboard's; 0 = any free port), ``users`` (a
user file: login required), ``interval`` (seconds between TPS samples, 5), ``access_key`` / ``secret_key`` (ACL),
``allowed_hosts``, ``trusted_proxies``, ``insecure_no_login``, ``certfile`` / ``keyfile`` (docs/dashboard.md,
*Security*: off loopback the dashboard refuses to start without ``users`` unless ``insecure_no_login``).
"""

from __future__ import annotations

import argparse
import getpass
import logging
import os
import socket
import sys
from collections.abc import Sequence
from typing import Any

import attrs
import trio

from pyrmq.kernel.errors import ConfigError
from pyrmq.kernel.hookspecs import hookimpl
from pyrmq.kernel.settings import port as tcp_port, setting
from pyrmq.kernel.kernel import Kernel
from pyrmq.plugins.builtin.hosts import address_list_problem, host_list_problem, is_loopback

log = logging.getLogger("pyrmq.dashboard")
NAME = "pyrmq.plugins.dashboard.plugin"
DEFAULT_PORT = 8082


def bind(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    return sock


class DashboardRefused(Exception):
    """The dashboard will not start as asked (off loopback without a user file); the message says what to do."""


def exposure_check(host: str, users: str | None, insecure_no_login: bool) -> None:
    from pyrmq.plugins.dashboard.security import exposure_problem

    problem = exposure_problem(host, users, insecure_no_login)
    if problem:
        raise DashboardRefused(problem)


def insecure_warning(address: str) -> str:
    return (f"WARNING: the dashboard on {address} has NO LOGIN (--insecure-no-login): anyone who can reach it can "
            "delete topics, reset offsets and send messages. Give it --users FILE, or listen on 127.0.0.1.")


async def serve_dashboard(namesrv: str, sock: socket.socket, *, users: str | None = None, interval: float = 5.0,
                          credentials: tuple[str, str] | None = None, allowed_hosts: str | Sequence[str] = (),
                          trusted_proxies: str | Sequence[str] = (), insecure_no_login: bool = False,
                          certfile: str | None = None, keyfile: str | None = None,
                          task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve the pages on ``sock`` (already listening) until cancelled; ``task_status.started(url)``.

    ``credentials`` (access key, secret key) sign every request the dashboard sends (brokers with ACL on).
    ``allowed_hosts``: more names the Host header may carry; ``trusted_proxies``: addresses whose X-Forwarded-*
    headers are believed; ``certfile`` / ``keyfile``: serve HTTPS. Off loopback without ``users``,
    :class:`DashboardRefused` unless ``insecure_no_login``."""
    from hypercorn.config import Config
    from hypercorn.trio import serve

    from pyrmq.plugins.dashboard.app import build_app
    from pyrmq.plugins.dashboard.auth import Sessions, legacy_users, load_users
    from pyrmq.plugins.dashboard.backend import Backend
    from pyrmq.plugins.dashboard.security import Security

    host, port = sock.getsockname()[:2]
    try:
        exposure_check(host, users, insecure_no_login)
    except DashboardRefused:
        sock.close()
        raise
    tls = bool(certfile)
    url = f"{'https' if tls else 'http'}://{f'[{host}]' if ':' in host else host}:{port}/"
    exposed = None if users or is_loopback(host) else url
    security = Security.make(host, port, allowed_hosts=allowed_hosts, trusted_proxies=trusted_proxies, tls=tls,
                             exposed=exposed)
    user_table = load_users(users) if users else None
    for name in legacy_users(user_table or {}):
        log.warning("dashboard: user %r has a PBKDF2 line in %s; it still logs in, but make it again with "
                    "`pyrmq dashboard hash-password --user %s` (scrypt)", name, users, name)
    if exposed:
        log.warning("%s", insecure_warning(url))
    sessions = Sessions(user_table)
    backend = Backend(namesrv, interval=interval, credentials=credentials)
    config = Config()
    config.bind = [f"fd://{sock.detach()}"]
    config.accesslog = None
    config.errorlog = logging.getLogger("pyrmq.dashboard.http")
    config.graceful_timeout = 1.0
    if tls:
        config.certfile, config.keyfile = certfile, keyfile or None
    # the clients open their nurseries in this task, so they are entered and left here (never in a request)
    async with backend.admin, backend.producer, trio.open_nursery() as nursery:
        nursery.start_soon(backend.sample_forever)
        await nursery.start(serve, build_app(backend, sessions, security), config)
        task_status.started(url)


@attrs.frozen
class DashboardSettings:
    """``[plugins."pyrmq.plugins.dashboard.plugin"]``: the dashboard served beside a bundle's name server."""

    enabled: bool = setting(False, help="serve it (pyrmq dev sets this unless --no-dashboard)")
    host: str = setting("127.0.0.1", help="listen address")
    port: int = setting(DEFAULT_PORT, check=tcp_port, help="listen port (0 = any free port)")
    users: str = setting("", help="a user file (name:hash lines): login required")
    interval: float = setting(5.0, help="seconds between TPS samples")
    access_key: str = setting("", help="ACL access key the dashboard signs with (default $ROCKETMQ_ACCESS_KEY)")
    secret_key: str = setting("", help="ACL secret key (default $ROCKETMQ_SECRET_KEY)")
    allowed_hosts: str = setting("", check=host_list_problem, help=(
        "more names the Host header may carry, comma-separated (always: the listen address, localhost, 127.0.0.1, "
        "::1); '*' = any (no DNS-rebinding check)"))
    trusted_proxies: str = setting("", check=address_list_problem, help=(
        "addresses of reverse proxies whose X-Forwarded-Host/-Proto/-For are believed, comma-separated"))
    insecure_no_login: bool = setting(False, help="serve off loopback without a user file (anyone reaching it may "
                                                  "change the cluster)")
    certfile: str = setting("", help="serve HTTPS with this certificate (PEM)")
    keyfile: str = setting("", help="the certificate's private key (PEM; default: in certfile)")

    def __attrs_post_init__(self) -> None:
        # checked with the other settings, before anything starts (pyrmq dev turns enabled on)
        if self.keyfile and not self.certfile:
            raise ConfigError(f'[plugins."{NAME}"]: a keyfile without a certfile', key="keyfile")
        if self.enabled:
            try:
                exposure_check(self.host, self.users or None, self.insecure_no_login)
            except DashboardRefused as exc:
                raise ConfigError(f'[plugins."{NAME}"]: {exc}', key="host") from None


@hookimpl
def pyrmq_register_settings() -> dict[str, type]:
    return {f"plugins.{NAME}": DashboardSettings}


def _served(kernel: Any) -> DashboardSettings | None:
    settings = kernel.settings(DashboardSettings)
    return settings if settings.enabled and "namesrv" in kernel.bundle.roles else None


@hookimpl
def pyrmq_configure(kernel: Kernel) -> None:
    if _served(kernel) is not None:
        kernel.expect_listening("dashboard")  # the CLI's ready line names it


@hookimpl
async def pyrmq_serve(kernel: Kernel, nursery: trio.Nursery) -> None:
    settings = _served(kernel)
    if settings is None:
        return
    # bound now, so a port in use fails the start; served once the name server listens (its serve may come later)
    host, port = settings.host, settings.port
    try:
        sock = bind(host, port)
    except OSError as exc:  # another dashboard (or anything) has the port: the ready line names the one we got
        log.warning("dashboard: cannot listen on %s:%d (%s); using a free port", host, port, exc)
        sock = bind(host, 0)
    # ACL: the plugin's access_key / secret_key settings, else the console tools' variables
    access_key = settings.access_key or os.environ.get("ROCKETMQ_ACCESS_KEY")
    secret_key = settings.secret_key or os.environ.get("ROCKETMQ_SECRET_KEY")
    credentials = (str(access_key), str(secret_key)) if access_key and secret_key else None

    async def run() -> None:
        namesrv = await kernel.wait_listening("namesrv")
        url = await nursery.start(lambda task_status: serve_dashboard(
            namesrv, sock, users=settings.users or None, interval=settings.interval, credentials=credentials,
            allowed_hosts=settings.allowed_hosts, trusted_proxies=settings.trusted_proxies,
            insecure_no_login=settings.insecure_no_login, certfile=settings.certfile or None,
            keyfile=settings.keyfile or None, task_status=task_status))
        kernel.mark_listening("dashboard", url)

    nursery.start_soon(run)


@hookimpl
def pyrmq_add_options(command: str, parser: argparse.ArgumentParser) -> None:
    if command == "dev":
        parser.add_argument("--dashboard-port", type=int, metavar="PORT",
                            help=f"web dashboard port (default {DEFAULT_PORT}; 0 = any free port)")
        parser.add_argument("--no-dashboard", action="store_true", help="do not serve the web dashboard")


@hookimpl
def pyrmq_apply_options(command: str, args: argparse.Namespace, bundle: Any) -> Any:
    # pyrmq dev serves the dashboard of a bundle that has this plugin (docs/dashboard.md), unless --no-dashboard
    if command != "dev" or NAME not in bundle.plugins or getattr(args, "no_dashboard", False):
        return None
    values: dict[str, Any] = {"enabled": True}
    if getattr(args, "dashboard_port", None) is not None:
        values["port"] = args.dashboard_port
    return bundle.with_plugin_settings(NAME, values)


def cmd_dashboard(args: argparse.Namespace) -> int:
    if args.action == "hash-password":
        from pyrmq.plugins.dashboard.auth import hash_password

        password = getpass.getpass("password: ") if sys.stdin.isatty() else sys.stdin.readline().rstrip("\n")
        if not password:
            print("pyrmq dashboard: empty password", file=sys.stderr)
            return 2
        print(f"{args.user}:{hash_password(password)}")
        return 0
    try:
        exposure_check(args.host, args.users, args.insecure_no_login)
    except DashboardRefused as exc:
        print(f"pyrmq dashboard: {exc}", file=sys.stderr)
        return 2
    if args.users:
        from pyrmq.plugins.dashboard.auth import UserFileError, load_users

        try:
            load_users(args.users)  # PBKDF2 lines: serve_dashboard's warning names them
        except (OSError, UserFileError) as exc:
            print(f"pyrmq dashboard: {exc}", file=sys.stderr)
            return 2
    for problem in (host_list_problem(args.allowed_host), address_list_problem(args.trusted_proxy)):
        if problem:
            print(f"pyrmq dashboard: expected {problem}", file=sys.stderr)
            return 2
    if bool(args.keyfile) and not args.certfile:
        print("pyrmq dashboard: --keyfile needs --certfile", file=sys.stderr)
        return 2
    from pyrmq.client.console import credentials

    signed_with = credentials(args)
    try:
        sock = bind(args.host, args.port)
    except OSError as exc:
        print(f"pyrmq dashboard: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 2

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            url = await nursery.start(lambda task_status: serve_dashboard(
                args.namesrv, sock, users=args.users, interval=args.interval, credentials=signed_with,
                allowed_hosts=args.allowed_host, trusted_proxies=args.trusted_proxy,
                insecure_no_login=args.insecure_no_login, certfile=args.certfile, keyfile=args.keyfile,
                task_status=task_status))
            print(f"pyrmq dashboard: {url} (name server {args.namesrv}; Ctrl-C stops)", flush=True)

    try:
        trio.run(main)
    except KeyboardInterrupt:
        return 130
    return 0


@hookimpl
def pyrmq_add_commands(subparsers: argparse._SubParsersAction, kernel_cli: Any) -> None:
    p = subparsers.add_parser("dashboard", help="web dashboard of a cluster (pages on http://127.0.0.1:8082/)")
    p.add_argument("action", nargs="?", choices=["serve", "hash-password"], default="serve",
                   help="serve (default), or hash-password: print a user-file line for --users (password from stdin)")
    p.add_argument("--namesrv", default="127.0.0.1:9876", metavar="ADDR[;ADDR]", help="name server addresses")
    p.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"listen port (default {DEFAULT_PORT}; 0 = any free port)")
    p.add_argument("--users", metavar="FILE", help="user file (name:hash lines): login required")
    p.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                   help="another name the Host header may carry (a proxy's public name; repeat for more; '*' = any). "
                        "Always answered: the listen address, localhost, 127.0.0.1, ::1")
    p.add_argument("--trusted-proxy", action="append", default=[], metavar="ADDR",
                   help="a reverse proxy's address whose X-Forwarded-Host/-Proto/-For are believed (repeatable)")
    p.add_argument("--insecure-no-login", action="store_true",
                   help="serve off loopback WITHOUT a user file: anyone who can reach it can change the cluster")
    p.add_argument("--certfile", metavar="PEM", help="serve HTTPS with this certificate")
    p.add_argument("--keyfile", metavar="PEM", help="the certificate's private key (default: in --certfile)")
    p.add_argument("--user", default="admin", help="hash-password: the user name of the line (default admin)")
    p.add_argument("--interval", type=float, default=5.0, help="seconds between TPS samples (default 5)")
    p.add_argument("--access-key", metavar="KEY", default=os.environ.get("ROCKETMQ_ACCESS_KEY") or None,
                   help="ACL access key: sign every request (default: $ROCKETMQ_ACCESS_KEY)")
    p.add_argument("--secret-key", metavar="SECRET", default=os.environ.get("ROCKETMQ_SECRET_KEY") or None,
                   help="ACL secret key (default: $ROCKETMQ_SECRET_KEY; prefer the variable)")
    p.set_defaults(func=cmd_dashboard)
