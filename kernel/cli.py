"""The ``pyrmq`` command line: roles (namesrv, broker, dev), ``plugins``, and commands added by plugins.

Roles are plugin bundles (configs/*.toml). Plugins add sub-commands through ``pyrmq_add_commands``; the plugins
that provide commands are themselves a bundle, ``configs/cli.toml``, plus third-party entry points.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

import attrs

from pyrmq import __version__
from pyrmq.kernel.bundles import Bundle, load_bundle
from pyrmq.kernel.errors import PyrmqError

log = logging.getLogger("pyrmq.cli")


def _address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host or "127.0.0.1", int(port)


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key.strip(), value.strip()


def _role_overrides(args: argparse.Namespace) -> dict[str, Any]:
    overrides: dict[str, Any] = dict(getattr(args, "set", None) or [])
    if getattr(args, "namesrv", None):
        overrides["broker.namesrvAddr"] = args.namesrv
    if getattr(args, "store_dir", None):
        overrides["broker.storePathRootDir"] = os.path.abspath(args.store_dir)
    return overrides


def _apply_listen(bundle: Bundle, role: str, listen: tuple[str, int] | None, overrides: dict[str, Any]) -> None:
    if listen is not None:
        overrides[f"{role}.listenHost"], overrides[f"{role}.listenPort"] = listen[0], listen[1]


def _configure_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)-5s %(name)s: %(message)s",
        stream=sys.stderr,
    )


async def _announce(kernel: Any, seconds: float) -> None:
    where = ", ".join(f"{role} on {addr}" for role, addr in kernel.listening.items()) or "no listeners"
    print(f"pyrmq {kernel.bundle.name}: {where} (started in {seconds * 1000:.0f} ms; Ctrl-C stops)", flush=True)


def _serve_bundle(bundle: Bundle, args: argparse.Namespace, *, on_ready: Any = None, wait_for: Sequence[str] = ()) -> int:
    from pyrmq.kernel.service import build_kernel, run

    kernel = build_kernel(bundle, entry_points=False if args.no_entry_points else None)

    async def ready(k: Any, seconds: float) -> None:
        import trio

        with trio.fail_after(30):  # services that listen once the roles do (the dashboard), named in the ready line
            for role in wait_for:
                await k.wait_listening(role)
        await _announce(k, seconds)
        if on_ready is not None:
            await on_ready(k)

    run(kernel, on_ready=ready)
    return 0


def cmd_namesrv(args: argparse.Namespace) -> int:
    bundle = load_bundle(args.config or "namesrv")
    overrides = _role_overrides(args)
    _apply_listen(bundle, "namesrv", args.listen, overrides)
    return _serve_bundle(bundle.with_overrides(overrides), args)


def cmd_broker(args: argparse.Namespace) -> int:
    bundle = load_bundle(args.config)
    overrides = _role_overrides(args)
    _apply_listen(bundle, "broker", args.listen, overrides)
    return _serve_bundle(bundle.with_overrides(overrides), args)


def cmd_dev(args: argparse.Namespace) -> int:
    if args.ha:
        from pyrmq.plugins.broker.failover.dev import run_ha_dev  # etcd + name server + 3 failover replicas

        return run_ha_dev(args.store_dir or ".pyrmq-ha", args.namesrv_port or 9876, args.port or 10911)
    bundle = load_bundle(args.config or "dev")
    overrides = _role_overrides(args)
    overrides.setdefault("broker.storePathRootDir", os.path.abspath(args.store_dir or ".pyrmq"))
    if args.namesrv_port is not None:
        overrides["namesrv.listenPort"] = args.namesrv_port
    if args.port is not None:
        overrides["broker.listenPort"] = args.port
    bundle = bundle.with_overrides(overrides)
    dashboard = "pyrmq.plugins.dashboard.plugin"
    wait_for = []
    if dashboard in bundle.plugins and not args.no_dashboard:
        wait_for.append("dashboard")  # the web dashboard, on by default (docs/dashboard.md)
        settings = {**bundle.plugin_settings.get(dashboard, {}), "enabled": True}
        if args.dashboard_port is not None:
            settings["port"] = args.dashboard_port
        bundle = attrs.evolve(bundle, plugin_settings={**bundle.plugin_settings, dashboard: settings})
    on_ready = None
    if getattr(args, "demo", False):
        from pyrmq.client import demo  # the client library shows messages flowing once the roles are up

        on_ready = demo.run_demo
    return _serve_bundle(bundle, args, on_ready=on_ready, wait_for=wait_for)


def cmd_plugins(args: argparse.Namespace) -> int:
    from pyrmq.kernel.hooks import impl_order, is_async_spec
    from pyrmq.kernel.manager import describe, load_plugins

    bundle = load_bundle(args.config or "dev")
    pm = load_plugins(bundle, entry_points_enabled=False if args.no_entry_points else None)
    print(f"bundle {bundle.name} ({bundle.file}): roles {', '.join(bundle.roles) or '-'}")
    print("plugins:")
    for name, hooks in describe(pm):
        print(f"  {name}")
        for hook in hooks:
            print(f"      {hook}")
    print("hooks (call order):")
    for name in sorted(n for n in dir(pm.hook) if n.startswith("pyrmq_")):
        colour = "async" if is_async_spec(pm, name) else "sync"
        impls = [impl.plugin_name for impl in impl_order(pm, name)]
        print(f"  {name} [{colour}]: {', '.join(impls) if impls else '-'}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pyrmq", description="pyrmq: RocketMQ 4.x in Python (name server, broker, tools)")
    parser.add_argument("--version", action="version", version=f"pyrmq {__version__}")
    parser.add_argument("--log-level", default=os.environ.get("PYRMQ_LOG_LEVEL", "WARNING"), help="DEBUG, INFO, WARNING (default), ERROR")
    parser.add_argument(
        "--no-entry-points", action="store_true", help="do not load third-party plugins from the pyrmq.plugins entry points"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("namesrv", help="run a name server (like RocketMQ's mqnamesrv)")
    p.add_argument("-c", "--config", help="bundle TOML (default: the packaged namesrv bundle)")
    p.add_argument("--listen", type=_address, metavar="HOST:PORT", help="listen address (default 127.0.0.1:9876)")
    p.add_argument("--set", type=_key_value, action="append", metavar="KEY=VALUE", help="override a setting (repeatable)")
    p.set_defaults(func=cmd_namesrv)

    p = sub.add_parser("broker", help="run a broker (like RocketMQ's mqbroker)")
    p.add_argument("-c", "--config", required=True, help="bundle TOML (e.g. configs/broker.toml) or a RocketMQ broker.conf")
    p.add_argument("--namesrv", metavar="ADDR[;ADDR]", help="name server addresses (namesrvAddr)")
    p.add_argument("--listen", type=_address, metavar="HOST:PORT", help="listen address (default 127.0.0.1:10911)")
    p.add_argument("--store-dir", metavar="DIR", help="store root directory (storePathRootDir)")
    p.add_argument("--set", type=_key_value, action="append", metavar="KEY=VALUE", help="override a broker.conf key (repeatable)")
    p.set_defaults(func=cmd_broker)

    p = sub.add_parser("dev", help="embedded name server (9876) + broker (10911) in one process, store under ./.pyrmq")
    p.add_argument("-c", "--config", help="bundle TOML (default: the packaged dev bundle)")
    p.add_argument("--store-dir", metavar="DIR", help="store root directory (default ./.pyrmq)")
    p.add_argument("--namesrv-port", type=int, help="name server port (default 9876)")
    p.add_argument("--port", type=int, help="broker port (default 10911)")
    p.add_argument("--demo", action="store_true", help="once up, send and receive a few messages with the client library")
    p.add_argument("--dashboard-port", type=int, metavar="PORT", help="web dashboard port (default 8082; 0 = any free port)")
    p.add_argument("--no-dashboard", action="store_true", help="do not serve the web dashboard")
    p.add_argument("--ha", action="store_true", help="instead: a local etcd, a name server and a 3-replica failover "
                   "group as processes (brokers on --port, +10, +20; store under ./.pyrmq-ha); kill the master to watch")
    p.add_argument("--set", type=_key_value, action="append", metavar="KEY=VALUE", help="override a setting (repeatable)")
    p.set_defaults(func=cmd_dev)

    p = sub.add_parser("plugins", help="list the plugins and hooks a bundle loads")
    p.add_argument("-c", "--config", help="bundle TOML or packaged bundle name (default: dev)")
    p.set_defaults(func=cmd_plugins)

    _add_plugin_commands(sub)
    return parser


def _add_plugin_commands(sub: argparse._SubParsersAction) -> None:
    """Sub-commands contributed by the ``cli`` bundle's plugins and third-party entry points."""
    from pyrmq.kernel.manager import load_plugins

    try:
        pm = load_plugins(load_bundle("cli"))
    except PyrmqError as exc:
        print(f"pyrmq: plugin commands unavailable: {exc}", file=sys.stderr)
        return
    from pyrmq.kernel.hooks import HookRelay

    HookRelay(pm).add_commands(sub, sys.modules[__name__])


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _configure_logging(args.log_level)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except PyrmqError as exc:
        print(f"pyrmq: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
