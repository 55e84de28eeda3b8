"""Plugin order carries no meaning: every shipped bundle, with its plugin list reversed and shuffled, builds the
same role as in the declared order (same processor table, store dispatchers, put interceptors, state, services).

Roles are started for real (loopback listeners on free ports, a store in a temporary directory); the services
compared are the trio tasks running under the role's nursery once it is ready.
"""

from __future__ import annotations

import argparse
import random
import socket
from typing import Any

import attrs
import pytest
import trio

from pyrmq.kernel.bundles import Bundle, load_bundle, packaged_bundle_path
from pyrmq.kernel.manager import load_plugins
from pyrmq.kernel.service import build_kernel, serve_kernel

BUNDLES = sorted(p.stem for p in packaged_bundle_path("dev").parent.glob("*.toml"))
SEEDS = (1, 2, 3)


def orders(plugins: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """The declared order, reversed, and a few seeded shuffles."""
    out = {"reversed": tuple(reversed(plugins))}
    for seed in SEEDS:
        shuffled = list(plugins)
        random.Random(seed).shuffle(shuffled)
        out[f"shuffled(seed={seed})"] = tuple(shuffled)
    return out


def qualname(obj: Any) -> str:
    target = getattr(obj, "__func__", obj)
    owner = type(obj) if not hasattr(target, "__qualname__") else target
    return f"{owner.__module__}.{owner.__qualname__}"


def task_names(nursery: trio.Nursery) -> list[str]:
    """Names of the tasks under ``nursery``, connections and connection attempts left out (the broker's
    registration, or the failover plugin's etcd client, may or may not be connecting or connected at that moment:
    trio's ``open_tcp_stream`` runs each attempt as a task of its own)."""
    names = []
    for task in nursery.child_tasks:
        if not task.name.startswith(("pyrmq.remoting.connection.", "trio.")):
            names.append(task.name)
        for child in task.child_nurseries:
            names.extend(task_names(child))
    return names


async def snapshot_role(bundle: Bundle, tmp_path) -> dict[str, Any]:
    """What a role is made of once it serves."""
    overrides: dict[str, Any] = {}
    if bundle.namesrv is not None:
        overrides.update({"namesrv.listenPort": 0, "namesrv.kvConfigPath": str(tmp_path / "kv.json")})
    if bundle.broker is not None:
        overrides.update({
            "broker.listenPort": 0, "broker.storePathRootDir": str(tmp_path / "store"),
            "broker.mappedFileSizeCommitLog": 1 << 20, "broker.maxHashSlotNum": 1000, "broker.maxIndexNum": 4000,
        })
    bundle = bundle.with_overrides(overrides)
    failover = "pyrmq.plugins.broker.failover.plugin"
    if failover in bundle.plugins:
        # never the packaged 127.0.0.1:2379: a machine may run a real etcd there (Debian starts etcd-server's)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            nobody = f"127.0.0.1:{s.getsockname()[1]}"
        settings = {**bundle.plugin_settings.get(failover, {}), "etcdEndpoints": nobody}
        bundle = attrs.evolve(bundle, plugin_settings={**bundle.plugin_settings, failover: settings})
    kernel = build_kernel(bundle, entry_points=False)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(serve_kernel, kernel)
            for role in bundle.roles:
                await kernel.wait_listening(role)
            await trio.sleep(0.05)  # services started with start_soon are running
            from pyrmq.plugins.broker.core import BROKER

            broker = kernel.state.find(BROKER)
            snap = {
                "processors": {
                    role: {code: qualname(p) for code, p in sorted(table.items())}
                    for role, table in kernel.processors.items()
                },
                "store dispatchers (collected)": [d.name for d in kernel.store_dispatchers],
                "store dispatchers (store)": [d.name for d in broker.store.dispatchers] if broker else [],
                "put interceptors": [(i.order, i.name, qualname(i)) for i in kernel.put_chain.interceptors],
                "state": sorted((key.name, qualname(value)) for key, value in kernel.state.items()),
                "services": sorted(task_names(kernel.nursery)),
            }
            kernel.request_stop()
    return snap


def snapshot_tools(bundle: Bundle) -> dict[str, Any]:
    """A bundle without roles (cli, client): the commands and strategies its plugins contribute."""
    pm = load_plugins(bundle, entry_points_enabled=False)
    parser = argparse.ArgumentParser()
    subparsers = parser.add_subparsers()
    pm.hook.pyrmq_add_commands(subparsers=subparsers, kernel_cli=None)
    from pyrmq.kernel.hooks import HookRelay

    strategies = HookRelay(pm).register_allocate_strategies()
    return {
        "commands": sorted(subparsers.choices),
        "strategies": {name: qualname(s) for name, s in sorted(strategies.items())},
    }


@pytest.mark.parametrize("bundle_name", BUNDLES)
async def test_plugin_order_changes_nothing(bundle_name, tmp_path):
    declared = load_bundle(bundle_name)
    assert len(declared.plugins) >= 2 or bundle_name == "client"

    async def snap(bundle: Bundle, label: str) -> dict[str, Any]:
        if not bundle.roles:
            return snapshot_tools(bundle)
        directory = tmp_path / label.replace("(", "-").replace(")", "").replace("=", "")
        directory.mkdir()
        return await snapshot_role(bundle, directory)

    expected = await snap(declared, "declared")
    if declared.roles:
        assert expected["processors"] and all(expected["processors"].values())
        assert expected["services"]
    for label, plugins in orders(declared.plugins).items():
        got = await snap(attrs.evolve(declared, plugins=plugins), label)
        assert got == expected, f"bundle {bundle_name}, plugins {label}: {plugins}"


async def test_the_broker_core_last_still_serves_every_request_code(tmp_path):
    """The review's case: core moved to the end of the broker bundle used to lose PULL_MESSAGE and LOCK_BATCH_MQ."""
    from pyrmq.remoting.codes import RequestCode

    declared = load_bundle("broker")
    core = "pyrmq.plugins.broker.core"
    last = tuple(p for p in declared.plugins if p != core) + (core,)
    snap = await snapshot_role(attrs.evolve(declared, plugins=last), tmp_path)
    codes = set(snap["processors"]["broker"])
    assert {RequestCode.PULL_MESSAGE, RequestCode.LOCK_BATCH_MQ, RequestCode.SEND_MESSAGE_V2, RequestCode.END_TRANSACTION} <= codes
    assert [name for _, name, _ in snap["put interceptors"]] == ["transaction", "dead-letter", "delay-levels", "timer"]
