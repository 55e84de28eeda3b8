"""``pyrmq dev --ha``: a local etcd, a name server and a 3-replica failover group as processes, to watch a failover
by killing one. Prints every process's address and pid, then each change of master as etcd reports it; Ctrl-C (or
SIGTERM) stops them all by pid.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from pathlib import Path

import trio

from pyrmq.kernel.bundles import packaged_bundle_path
from pyrmq.plugins.broker.failover.etcd import EtcdClient, EtcdError
from pyrmq.plugins.broker.failover.local_etcd import LocalEtcd

BROKER_NAME = "broker-a"
CLUSTER = "DefaultCluster"


class _Process:
    def __init__(self, name: str, args: list[str], log: Path) -> None:
        self.name = name
        self.log_path = log
        with open(log, "ab") as f:
            self.proc = subprocess.Popen([sys.executable, "-m", "pyrmq", "--log-level", "INFO", *args],
                                         stdout=subprocess.PIPE, stderr=f, start_new_session=True)
        self.address = ""

    def wait_ready(self, timeout: float = 60) -> None:
        """Until the role prints its ready line (killed at the deadline, which ends the read)."""
        timer = threading.Timer(timeout, self.proc.kill)
        timer.start()
        try:
            assert self.proc.stdout is not None
            while True:
                line = self.proc.stdout.readline().decode()
                if not line:
                    raise RuntimeError(f"{self.name} did not start; see {self.log_path}")
                if line.startswith("pyrmq ") and " on " in line:
                    self.address = line.split(" on ", 1)[1].split(" ")[0].rstrip(",")
                    return
        finally:
            timer.cancel()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def run_ha_dev(store_dir: str, namesrv_port: int, base_port: int, replicas: int = 3, ttl: int = 3) -> int:
    root = Path(store_dir).absolute()
    root.mkdir(parents=True, exist_ok=True)
    etcd = LocalEtcd(root / "etcd", fast=False, log_path=root / "etcd.log")
    processes: list[_Process] = []
    stopping = threading.Event()

    def on_term(signum: int, frame: object) -> None:
        stopping.set()
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        etcd.start()
        print(f"etcd      {etcd.endpoint:<22} pid {etcd.pid}   data {etcd.data_dir}", flush=True)
        bundle = root / "failover.toml"
        text = packaged_bundle_path("failover").read_text().replace('"127.0.0.1:2379"', f'"{etcd.endpoint}"')
        bundle.write_text(text.replace("leaseTtl = 3", f"leaseTtl = {ttl}"))
        namesrv = _Process("namesrv", ["namesrv", "--listen", f"127.0.0.1:{namesrv_port}"], root / "namesrv.log")
        processes.append(namesrv)
        namesrv.wait_ready()
        print(f"namesrv   {namesrv.address:<22} pid {namesrv.proc.pid}", flush=True)
        for rid in range(1, replicas + 1):
            port = base_port + 10 * (rid - 1)
            replica = _Process(f"replica {rid}", [
                "broker", "-c", str(bundle), "--namesrv", namesrv.address, "--listen", f"127.0.0.1:{port}",
                "--store-dir", str(root / f"replica-{rid}"), "--set", f"brokerId={rid}",
                "--set", f"brokerName={BROKER_NAME}"], root / f"replica-{rid}.log")
            processes.append(replica)
            replica.wait_ready()
            print(f"replica {rid} {replica.address:<22} pid {replica.proc.pid}   log {replica.log_path}", flush=True)
        print(f"kill -9 the master's pid to watch a failover; logs and stores under {root}; Ctrl-C stops all", flush=True)
        trio.run(_watch, etcd.endpoint, {p.address: p for p in processes[1:]})
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        for process in reversed(processes):
            process.stop()
        etcd.stop()
        print("stopped", flush=True)
    return 0


async def _watch(endpoint: str, replicas: dict[str, _Process]) -> None:
    """Print the master each time it changes (etcd's ``master`` key), and replicas that exited."""
    key = f"/pyrmq/v1/{CLUSTER}/{BROKER_NAME}/master"
    shown = None
    exited: set[str] = set()
    async with EtcdClient([endpoint]) as etcd:
        while True:
            try:
                kv = await etcd.get(key)
            except EtcdError:
                kv = None
            record = kv.json() if kv else None
            now = (record["replicaId"], record["epoch"]) if record else None
            if now != shown:
                shown = now
                if record:
                    pid = replicas[record["addr"]].proc.pid if record["addr"] in replicas else "?"
                    print(f"master: replica {record['replicaId']} (epoch {record['epoch']}) at {record['addr']} pid {pid}",
                          flush=True)
                else:
                    print("master: none (waiting for the lease to expire and an election)", flush=True)
            for addr, process in replicas.items():
                if addr not in exited and process.proc.poll() is not None:
                    exited.add(addr)
                    print(f"{process.name} at {addr} exited ({process.proc.returncode})", flush=True)
            await trio.sleep(0.2)

