"""Fixtures shared by the tests: roles started in-process on real sockets (127.0.0.1, free ports)."""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Callable
from typing import Any

import pytest
import trio

# third-party plugins installed in the developer's venv must not change what the tests observe
os.environ.setdefault("PYRMQ_DISABLE_PLUGIN_AUTOLOAD", "1")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(name="free_port")
def free_port_fixture() -> Callable[[], int]:
    """``free_port()``: a port on 127.0.0.1 nobody listens on right now (tests never import ``tests.conftest``)."""
    return free_port


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_broker_port(*avoid: int, attempts: int = 200) -> int:
    """A broker listenPort P on 127.0.0.1 with its neighbours free too: P - 2 (the VIP channel, RocketMQ's and ours)
    and P + 1 (a master's HA port); none of the three in ``avoid`` (ports picked but not bound yet)."""
    for _ in range(attempts):
        port = free_port()
        taken = (port - 2, port, port + 1)
        if 1026 < port < 65535 and not set(taken) & set(avoid) and all(_bindable(p) for p in taken):
            return port
    raise AssertionError("no free port P on 127.0.0.1 with P - 2 (VIP) and P + 1 (HA) free too")


@pytest.fixture(name="broker_port", scope="session")
def broker_port_fixture() -> Callable[[], int]:
    """``broker_port(*avoid)``: a port for a broker started on a fixed port (a subprocess): P, P - 2 (VIP channel)
    and P + 1 (HA) all free right now and not in ``avoid``. The one port picker for brokers; an in-process role
    uses port 0."""
    return free_broker_port


async def wait_until(predicate: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    """Await ``predicate()`` every 0.2 s until it returns something true, and return that; fail naming ``what`` after
    ``timeout`` seconds."""
    with trio.move_on_after(timeout):
        while True:
            value = await predicate()
            if value:
                return value
            await trio.sleep(0.2)
    raise AssertionError(f"{what}: not within {timeout} s")


@pytest.fixture(name="until", scope="session")
def until_fixture() -> Callable[..., Any]:
    """``await until(async_predicate, "what it waits for", timeout=60)``: poll with a deadline (see wait_until)."""
    return wait_until


@pytest.fixture
def start_role(nursery: trio.Nursery, tmp_path) -> Callable[..., Any]:
    """``kernel = await start_role("namesrv", {"namesrv.listenPort": 0}, extra_plugins=[...])``; stopped at teardown."""
    from pyrmq.kernel.bundles import load_bundle
    from pyrmq.kernel.service import build_kernel, serve_kernel

    kernels = []

    async def start(bundle_name: str, overrides: dict[str, Any] | None = None, *, extra_plugins=()) -> Any:
        bundle = load_bundle(bundle_name)
        defaults: dict[str, Any] = {}
        if bundle.namesrv is not None:
            defaults["namesrv.listenPort"] = 0
            defaults["namesrv.kvConfigPath"] = str(tmp_path / f"kv-{len(kernels)}.json")
        if bundle.broker is not None:
            defaults["broker.listenPort"] = 0
            defaults["broker.storePathRootDir"] = str(tmp_path / f"store-{len(kernels)}")
            defaults["broker.grpcServerPort"] = 0  # the gRPC endpoint (plugins/grpc) on a free port too
            # small files keep tests quick (a 1 GiB segment and a 420 MB index are what production uses)
            defaults["broker.mappedFileSizeCommitLog"] = 16 * 1024 * 1024
            defaults["broker.maxHashSlotNum"] = 50_000
            defaults["broker.maxIndexNum"] = 200_000
        defaults.update(overrides or {})
        kernel = build_kernel(bundle.with_overrides(defaults), extra_plugins=extra_plugins, entry_points=False)
        await nursery.start(serve_kernel, kernel)
        kernels.append(kernel)
        return kernel

    yield start
    for kernel in kernels:
        kernel.request_stop()


@pytest.fixture
async def remoting_client(nursery: trio.Nursery):
    from pyrmq.remoting.client import RemotingClient

    client = RemotingClient()
    await nursery.start(client.run)
    yield client


@pytest.fixture
def etcd(tmp_path):
    """A single-node etcd (Debian ``etcd-server``) on free loopback ports, data in ``tmp_path``, fast raft ticks and
    no fsync; killed by pid at teardown. ``etcd.endpoint`` is ``127.0.0.1:<port>``."""
    from pyrmq.plugins.broker.failover.local_etcd import LocalEtcd

    server = LocalEtcd(tmp_path / "etcd-data", log_path=tmp_path / "etcd.log").start()
    yield server
    server.kill()
    shutil.rmtree(tmp_path / "etcd-data", ignore_errors=True)  # its WAL preallocates 64 MiB a member; the log stays


@pytest.fixture
def etcd_cluster(tmp_path):
    """A 3-member etcd cluster on free loopback ports (``etcd_cluster.endpoints``, ``.members[i]`` each a
    LocalEtcd to kill and start again); killed by pid at teardown."""
    from pyrmq.plugins.broker.failover.local_etcd import LocalEtcdCluster

    cluster = LocalEtcdCluster(tmp_path / "etcd-cluster").start()
    yield cluster
    cluster.kill()
    for member in cluster.members:
        shutil.rmtree(member.data_dir, ignore_errors=True)
