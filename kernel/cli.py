"""The ``pyrmq`` command line: roles (namesrv, broker, dev), ``plugins``, and commands added by plugins.

Roles are plugin bundles (configs/*.toml). Plugins add sub-commands through ``pyrmq_add_commands``; the plugins
that provide commands are themselves a bundle, ``configs/cli.toml``, plus third-party entry points.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

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


def _serve_bundle(bundle: Bundle, args: argparse.Namespace, *, on_ready: Any = None) -> int:
    from pyrmq.kernel.service import build_kernel, run

    bundle = _cli_hooks().apply_options(args.command, args, bundle)
    kernel = build_kernel(bundle, entry_points=False if args.no_entry_points else None)

    async def ready(k: Any, seconds: float) -> None:
        import trio

        with trio.fail_after(30):  # services that listen once the roles do (the dashboard), named in the ready line
            for name in k.expected_listeners:
                await k.wait_listening(name)
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
    instead = _cli_hooks().run_instead("dev", args)  # pyrmq dev --ha: the failover plugin's processes
    if instead is not None:
        return instead
    bundle = load_bundle(args.config or "dev")
    overrides = _role_overrides(args)
    overrides.setdefault("broker.storePathRootDir", os.path.abspath(args.store_dir or ".pyrmq"))
    if args.namesrv_port is not None:
        overrides["namesrv.listenPort"] = args.namesrv_port
    if args.port is not None:
        overrides["broker.listenPort"] = args.port
    bundle = bundle.with_overrides(overrides)
    on_ready = None
    if getattr(args, "demo", False):
        from pyrmq.client import demo  # the client library shows messages flowing once the roles are up

        on_ready = demo.run_demo
    return _serve_bundle(bundle, args, on_ready=on_ready)


def cmd_plugins(args: argparse.Namespace) -> int:
    from pyrmq.kernel.hooks import impl_order, is_async_spec
    from pyrmq.kernel.manager import describe

    bundle = load_bundle(args.config or "dev")
    with _configured(bundle, args) as kernel:
        print(f"bundle {bundle.name} ({bundle.file}): roles {', '.join(bundle.roles) or '-'}")
        if args.codes:
            return _print_role_tables(kernel)
        if args.settings:
            return _print_settings(kernel)
        # the plugins as a configured role has them: modules, and the feature objects their configure registered
        pm = kernel.pluginmanager
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


@contextlib.contextmanager
def _configured(bundle: Bundle, args: argparse.Namespace) -> Iterator[Any]:
    """The bundle's roles configured and collected, for a listing: plugins loaded, settings checked, every
    ``pyrmq_configure`` run (feature objects registered), processors and the rest collected. The store and the name
    server's files go to a temporary folder; nothing listens, no service runs."""
    import tempfile

    from pyrmq.kernel.service import build_kernel

    with tempfile.TemporaryDirectory(prefix="pyrmq-plugins-") as tmp:
        overrides: dict[str, Any] = {}
        if bundle.broker is not None:
            overrides["broker.storePathRootDir"] = tmp
        if bundle.namesrv is not None:
            overrides["namesrv.kvConfigPath"] = os.path.join(tmp, "kvConfig.json")
        kernel = build_kernel(bundle.with_overrides(overrides), entry_points=False if args.no_entry_points else None)
        kernel.hooks.configure(kernel)
        kernel.collect()
        yield kernel


def _print_settings(kernel: Any) -> int:
    """Every declared key of the bundle: section, plugin, key, type, value (default or set), help."""
    for declared in sorted(kernel.settings.declared, key=lambda d: (d.section, d.plugin, d.cls.__qualname__)):
        values = kernel.settings(declared.cls, section=declared.section)
        print(f"[{declared.section}] {declared.cls.__qualname__} ({declared.plugin})")
        for field in attrs.fields(declared.cls):
            kind = field.type if isinstance(field.type, str) else getattr(field.type, "__name__", field.type)
            value = getattr(values, field.name)
            note = " (set)" if value != field.default else ""
            runtime = ", changeable at run time" if field.metadata.get("runtime") else ""
            help_text = field.metadata.get("help") or ""
            print(f"  {field.name} = {value!r}{note}  [{kind}{runtime}]" + (f"  {help_text}" if help_text else ""))
    return 0


def _print_role_tables(kernel: Any) -> int:
    """``pyrmq plugins --codes``: what the configured roles are made of: which plugin serves each request code, the
    put chain, the delay schedulers, the store dispatchers and the flush policy."""
    from pyrmq.remoting.codes import RequestCode

    bundle = kernel.bundle
    for role in bundle.roles:
        owners = kernel.processor_owners.get(role, {})
        print(f"{role}: {len(owners)} request codes")
        for code in sorted(owners):
            try:
                name = RequestCode(code).name
            except ValueError:
                name = "?"
            print(f"  {code:>6} {name:<40} {owners[code]}")
    if "broker" in bundle.roles:
        print("put chain (order, name):")
        for interceptor in kernel.put_chain.interceptors:
            print(f"  {interceptor.order:>4} {interceptor.name}")
        print("delay schedulers (order, name, what they park):")
        for scheduler in kernel.schedulers:
            print(f"  {scheduler.order:>4} {scheduler.name}: {scheduler.summary()}")
        print("store dispatchers (order, name; the store's own consume queue 0 and index 10 come first):")
        for dispatcher in kernel.store_dispatchers:
            print(f"  {dispatcher.order:>4} {dispatcher.name}")
        policy = kernel.flush_policy
        if policy is not None:
            print(f"flush policy: {type(policy).__module__}.{type(policy).__qualname__}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pyrmq", description="pyrmq: RocketMQ 4.x in Python (name server, broker, tools)")
    parser.add_argument("--version", action="version", version=f"pyrmq {__version__}")
    parser.add_argument("--log-level", default=os.environ.get("PYRMQ_LOG_LEVEL", "WARNING"), help="DEBUG, INFO, WARNING (default), ERROR")
    parser.add_argument(
        "--no-entry-points", action="store_true", help="do not load third-party plugins from the pyrmq.plugins entry points"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    hooks = _cli_hooks()

    p = sub.add_parser("namesrv", help="run a name server (like RocketMQ's mqnamesrv)")
    p.add_argument("-c", "--config", help="bundle TOML (default: the packaged namesrv bundle)")
    p.add_argument("--listen", type=_address, metavar="HOST:PORT", help="listen address (default 127.0.0.1:9876)")
    p.add_argument("--set", type=_key_value, action="append", metavar="KEY=VALUE", help="override a setting (repeatable)")
    p.set_defaults(func=cmd_namesrv)
    hooks.add_options("namesrv", p)

    p = sub.add_parser("broker", help="run a broker (like RocketMQ's mqbroker)")
    p.add_argument("-c", "--config", required=True, help="bundle TOML (e.g. configs/broker.toml) or a RocketMQ broker.conf")
    p.add_argument("--namesrv", metavar="ADDR[;ADDR]", help="name server addresses (namesrvAddr)")
    p.add_argument("--listen", type=_address, metavar="HOST:PORT", help="listen address (default 127.0.0.1:10911)")
    p.add_argument("--store-dir", metavar="DIR", help="store root directory (storePathRootDir)")
    p.add_argument("--set", type=_key_value, action="append", metavar="KEY=VALUE", help="override a broker.conf key (repeatable)")
    p.set_defaults(func=cmd_broker)
    hooks.add_options("broker", p)

    p = sub.add_parser("dev", help="embedded name server (9876) + broker (10911) in one process, store under ./.pyrmq")
    p.add_argument("-c", "--config", help="bundle TOML (default: the packaged dev bundle)")
    p.add_argument("--store-dir", metavar="DIR", help="store root directory (default ./.pyrmq)")
    p.add_argument("--namesrv-port", type=int, help="name server port (default 9876)")
    p.add_argument("--port", type=int, help="broker port (default 10911)")
    p.add_argument("--demo", action="store_true", help="once up, send and receive a few messages with the client library")
    p.add_argument("--set", type=_key_value, action="append", metavar="KEY=VALUE", help="override a setting (repeatable)")
    p.set_defaults(func=cmd_dev)
    hooks.add_options("dev", p)  # the dashboard's --dashboard-port / --no-dashboard, failover's --ha

    p = sub.add_parser("plugins", help="list the plugins, hooks and settings a bundle loads")
    p.add_argument("-c", "--config", help="bundle TOML or packaged bundle name (default: dev)")
    p.add_argument("--settings", action="store_true", help="list every declared setting with its value and help")
    p.add_argument("--codes", action="store_true", help="which plugin serves each request code; the put chain, "
                   "delay schedulers, store dispatchers and flush policy (configures the roles on a temporary store)")
    p.set_defaults(func=cmd_plugins)

    hooks.add_commands(sub, sys.modules[__name__])
    return parser


class CliHooks(Protocol):
    """What the CLI asks of the ``cli`` bundle's plugins (a HookRelay, or _NoHooks when they cannot load)."""

    def add_options(self, command: str, parser: argparse.ArgumentParser) -> None: ...

    def add_commands(self, subparsers: argparse._SubParsersAction[argparse.ArgumentParser], kernel_cli: Any) -> None: ...

    def apply_options(self, command: str, args: argparse.Namespace, bundle: Bundle) -> Bundle: ...

    def run_instead(self, command: str, args: argparse.Namespace) -> int | None: ...


class _NoHooks:
    """The cli bundle's hooks when its plugins cannot be loaded (the error was printed): no options, no commands."""

    def add_options(self, command: str, parser: argparse.ArgumentParser) -> None:
        pass

    def add_commands(self, subparsers: argparse._SubParsersAction[argparse.ArgumentParser], kernel_cli: Any) -> None:
        pass

    def apply_options(self, command: str, args: argparse.Namespace, bundle: Bundle) -> Bundle:
        return bundle

    def run_instead(self, command: str, args: argparse.Namespace) -> int | None:
        return None


_CLI_HOOKS: CliHooks | None = None


def _cli_hooks() -> CliHooks:
    """The hooks of the ``cli`` bundle's plugins and third-party entry points (sub-commands, role-command options),
    loaded once per process."""
    global _CLI_HOOKS
    if _CLI_HOOKS is None:
        from pyrmq.kernel.hooks import HookRelay
        from pyrmq.kernel.manager import load_plugins

        try:
            _CLI_HOOKS = HookRelay(load_plugins(load_bundle("cli")))
        except PyrmqError as exc:
            print(f"pyrmq: plugin commands unavailable: {exc}", file=sys.stderr)
            _CLI_HOOKS = _NoHooks()
    return _CLI_HOOKS


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
