"""A group of broker replicas under automatic failover on etcd (configs/failover.toml), each a real `pyrmq broker`
process on its own port and store, for the tests in tests/e2e that kill, pause and restart them.

Get one through the ``failover_group`` fixture (tests/e2e/conftest.py), which passes the test's ``spawn``,
``broker_port`` and ``tmp_path``::

    group = failover_group(etcd.endpoint, namesrv, 3, "transactionTimeOut=4000", name="broker-x")
    group.start_all()
    master = await group.ready(client, "MyTopic")   # client: an EtcdClient

and import the helpers a test module needs beside it with ``from .failover_group import until, commit_log``
(pytest's importlib mode imports tests/e2e's modules as the package ``tests.e2e``).

Ports: each replica listens on P, its VIP channel on P - 2 and, while master, its HA port on P + 1; ``broker_port``
picks P with all three free and none of them picked for another replica. A port free when it was picked may be bound
by another process before the replica binds it (any outgoing connection on the machine takes an ephemeral port from
the same range): the broker then exits with EADDRINUSE before its ready line, and :meth:`FailoverGroup.start` starts it
again on a freshly picked port (``addr(rid)`` follows; etcd's master record carries the address it really listens on).
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import trio

from pyrmq.kernel.bundles import packaged_bundle_path
from pyrmq.plugins.broker.failover.etcd import EtcdClient, EtcdError
from pyrmq.remoting.client import RemotingClient
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.errors import RemotingError

#: the lease TTL of the groups (s): a dead master's lease expires within it and the next master is elected
TTL = 2
CLUSTER = "DefaultCluster"
#: the broker settings every replica gets (before the test's own)
REPLICA_SETTINGS = ("flushDiskType=SYNC_FLUSH", "mappedFileSizeCommitLog=4194304", "haSendHeartbeatInterval=500")
ADDRESS_IN_USE = "[Errno 98] Address already in use"


async def until(predicate: Callable[[], Awaitable[Any]], what: str, timeout: float = 30.0,
                interval: float = 0.1) -> Any:
    """Await ``predicate()`` every ``interval`` s until it returns something true, and return that; fail naming
    ``what`` after ``timeout`` s."""
    with trio.move_on_after(timeout):
        while True:
            value = await predicate()
            if value:
                return value
            await trio.sleep(interval)
    raise AssertionError(f"{what}: not within {timeout} s")


async def equals(value: Awaitable[Any], want: Any) -> bool:
    """``await value == want`` as a predicate for :func:`until`: ``until(lambda: equals(f(), x), ...)``."""
    return await value == want


def commit_log(store: Path) -> bytes:
    """A replica's commit log as written (trailing zero bytes of the last file are not data)."""
    directory = store / "commitlog"
    files = sorted(directory.iterdir()) if directory.exists() else []
    return b"".join(f.read_bytes() for f in files).rstrip(b"\0")


async def create_topic(addr: str, topic: str, queues: int = 4) -> bool:
    """UPDATE_AND_CREATE_TOPIC on ``addr`` (read/write ``queues``, perm 6); False when it is not answered SUCCESS
    or the broker cannot be reached."""
    try:
        async with RemotingClient() as rc:
            response = await rc.invoke(addr, RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
                "topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(queues), "writeQueueNums": str(queues),
                "perm": "6", "topicFilterType": "SINGLE_TAG"}), timeout=5)
    except (RemotingError, OSError, trio.TooSlowError):
        return False
    return response.code == ResponseCode.SUCCESS


async def route_master(namesrv: str, topic: str, group: str) -> str | None:
    """The master address the name server's route of ``topic`` gives for broker group ``group`` (None without one)."""
    async with RemotingClient() as rc:
        response = await rc.invoke(namesrv, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}))
    if response.code != ResponseCode.SUCCESS:
        return None
    for data in json.loads(response.body_bytes()).get("brokerDatas", []):
        if data["brokerName"] == group:
            return data["brokerAddrs"].get("0")
    return None


async def has_topic(addr: str, topic: str) -> bool:
    """Whether ``topic`` is in the topic table of the broker at ``addr`` (False when it does not answer)."""
    try:
        async with RemotingClient() as rc:
            topics = await rc.invoke(addr, RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG, {}), timeout=2)
    except (RemotingError, OSError, trio.TooSlowError):
        return False
    return topic in json.loads(topics.body_bytes())["topicConfigTable"]


class FailoverGroup:
    """The replicas 1..``size`` of broker group ``name``: `pyrmq broker -c <failover bundle>` processes started with
    ``spawn`` (one log per replica start under ``tmp_path``, killed at the test's teardown), stores in
    ``tmp_path/<name>/replica-<rid>``. ``sets`` are further broker settings (``key=value``) of every replica;
    ``plugin`` is appended to the bundle (lines of the failover plugin's table; with it, ``uncleanElection`` is left
    to that text)."""

    def __init__(self, spawn: Callable[..., Any], broker_port: Callable[..., int], tmp_path: Path, etcd_endpoint: str,
                 namesrv: str, size: int, *sets: str, name: str = "broker-f", plugin: str = "", ttl: int = TTL) -> None:
        self.spawn = spawn
        self.broker_port = broker_port
        self.name = name
        self.namesrv = namesrv
        self.prefix = f"/pyrmq/v1/{CLUSTER}/{name}/"
        self.root = tmp_path / name
        self.root.mkdir(parents=True, exist_ok=True)
        self.bundle = tmp_path / f"failover-{name}.toml"
        text = packaged_bundle_path("failover").read_text().replace('"127.0.0.1:2379"', f'"{etcd_endpoint}"')
        text = text.replace("leaseTtl = 3", f"leaseTtl = {ttl}")
        if plugin:
            text = text.replace("uncleanElection = false\n", "")
        self.bundle.write_text(text + "slaveSyncInterval = 500\nslaveSyncFirstDelay = 200\n" + plugin)
        self.sets = sets
        self.ports: dict[int, int] = {}
        for rid in range(1, size + 1):
            self.ports[rid] = broker_port(*self._picked())
        self.roles: dict[int, Any] = {}

    def _picked(self) -> list[int]:
        """The ports of the replicas' listeners: each one's own, VIP (- 2) and HA (+ 1)."""
        return [p for port in self.ports.values() for p in (port - 2, port, port + 1)]

    def store(self, rid: int) -> Path:
        return self.root / f"replica-{rid}"

    def addr(self, rid: int) -> str:
        return f"127.0.0.1:{self.ports[rid]}"

    def start(self, rid: int, attempts: int = 5) -> Any:
        """Start replica ``rid`` on its port, until its ready line. The port was free when it was picked; another
        process may have bound it (or its VIP neighbour) since, and the broker then exits with EADDRINUSE before it
        serves or registers: that start is made again on a freshly picked port (``addr(rid)`` follows)."""
        settings = [*REPLICA_SETTINGS, f"brokerName={self.name}", f"brokerId={rid}", *self.sets]
        for attempt in range(attempts):
            try:
                self.roles[rid] = self.spawn(
                    "broker", "-c", str(self.bundle), "--namesrv", self.namesrv, "--listen", self.addr(rid),
                    "--store-dir", str(self.store(rid)), *[x for kv in settings for x in ("--set", kv)],
                    name=f"{self.name}-replica-{rid}")
                return self.roles[rid]
            except AssertionError as exc:  # the role exited before its ready line; the message ends with its log
                if ADDRESS_IN_USE not in str(exc) or attempt == attempts - 1:
                    raise
                taken = self.ports[rid]
                self.ports[rid] = self.broker_port(*self._picked())  # the taken one is among the picked
                print(f"{self.name} replica {rid}: port {taken} taken by another process, "
                      f"starting on {self.ports[rid]}")
        raise AssertionError("unreachable")

    def start_all(self) -> None:
        """Every replica at once (each start waits for its ready line in its own thread)."""
        with ThreadPoolExecutor(len(self.ports)) as pool:
            list(pool.map(self.start, self.ports))

    def kill(self, rid: int) -> None:
        """SIGKILL replica ``rid`` and reap it."""
        self.roles[rid].stop(signal.SIGKILL)

    def signal(self, rid: int, sig: int) -> None:
        """Send ``sig`` (SIGSTOP, SIGCONT, ...) to replica ``rid``."""
        os.kill(self.roles[rid].proc.pid, sig)

    def running(self, rid: int) -> bool:
        role = self.roles.get(rid)
        return role is not None and role.proc is not None and role.proc.poll() is None

    # -- what etcd says ---------------------------------------------------------------------------------------------
    async def master(self, client: EtcdClient) -> dict[str, Any] | None:
        """The group's ``master`` record (replicaId, addr, haAddr, epoch); None while there is none or etcd does
        not answer (a leader change, a restart)."""
        try:
            kv = await client.get(self.prefix + "master")
        except EtcdError:
            return None
        return kv.json() if kv else None

    async def new_master(self, client: EtcdClient, old_epoch: int) -> dict[str, Any] | None:
        """The ``master`` record once it is of an epoch after ``old_epoch``; None before."""
        master = await self.master(client)
        return master if master is not None and master["epoch"] > old_epoch else None

    async def syncset(self, client: EtcdClient) -> set[int]:
        """The replica ids of the in-sync set (empty while there is none or etcd does not answer)."""
        try:
            kv = await client.get(self.prefix + "syncset")
        except EtcdError:
            return set()
        return set(kv.json()["members"]) if kv else set()

    async def full(self, client: EtcdClient) -> bool:
        """Whether every replica is in the in-sync set."""
        return await self.syncset(client) == set(self.ports)

    async def ready(self, client: EtcdClient, topic: str, queues: int = 4) -> dict[str, Any]:
        """A master elected, ``topic`` created on it and synchronised to every replica, every replica in the in-sync
        set; the master's record."""
        master = await until(lambda: self.master(client), f"a master of {self.name} elected", 20)
        await until(lambda: create_topic(master["addr"], topic, queues), f"{topic} created on the master")
        for rid in self.ports:
            await until(lambda rid=rid: has_topic(self.addr(rid), topic), f"{topic} on replica {rid}")
        await until(lambda: self.full(client), "every replica in the in-sync set", 30)
        return master

    # -- what the stores hold ---------------------------------------------------------------------------------------
    async def caught_up(self, master_id: int, rids: Iterable[int]) -> None:
        """Until each replica of ``rids`` holds as much commit log as the master; then assert each is a prefix."""
        rids = list(rids)
        want = commit_log(self.store(master_id))
        for rid in rids:
            await until(lambda rid=rid: _true(len(commit_log(self.store(rid))) >= len(want)),
                        f"replica {rid} caught up with master {master_id}", 30)
        master_log = commit_log(self.store(master_id))
        for rid in rids:
            log = commit_log(self.store(rid))
            assert master_log.startswith(log), f"replica {rid}'s commit log is not a prefix of master {master_id}'s"

    async def holds_all(self, master_id: int) -> bool:
        """Whether every replica's commit log is at least as long as the master's and starts with it."""
        want = commit_log(self.store(master_id))
        return all(commit_log(self.store(rid))[: len(want)] == want for rid in self.ports)


async def _true(value: object) -> bool:
    return bool(value)
