"""A local single-node etcd in a subprocess, for tests and ``pyrmq dev --ha``: loopback ports chosen free (never the
well-known 2379/2380), its own data directory, stopped by pid.

``etcd`` comes from the Debian package ``etcd-server`` (3.4); :class:`LocalEtcd` says so when it is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

MISSING = "etcd not found on PATH: install it with `apt-get install etcd-server` (Debian/Ubuntu)"


def _free_port() -> int:
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port: int = s.getsockname()[1]
        if port not in (2379, 2380):
            return port


class PortTaken(RuntimeError):
    """The port picked for a local etcd was taken by another process before etcd bound it."""


class LocalEtcd:
    """``with LocalEtcd(tmp_path / "etcd") as etcd: etcd.endpoint`` -> ``127.0.0.1:<port>``.

    ``fast``: no fsync and short raft ticks (tests); the data is still on disk, only not synced.
    """

    def __init__(self, data_dir: Path | str, *, fast: bool = True, log_path: Path | str | None = None,
                 client_port: int = 0, peer_port: int = 0, name: str = "pyrmq", initial_cluster: str = "") -> None:
        self.data_dir = Path(data_dir)
        self.name = name
        self.initial_cluster = initial_cluster
        self.fast = fast
        self.log_path = Path(log_path) if log_path else self.data_dir.with_suffix(".log")
        #: ports picked here (not given) may be taken by someone else before etcd binds them: start() picks again
        self._own_ports = not (client_port or peer_port)
        self.client_port = client_port or _free_port()
        self.peer_port = peer_port or _free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def command(self) -> list[str]:
        binary = shutil.which("etcd")
        if binary is None:
            raise FileNotFoundError(MISSING)
        client = f"http://127.0.0.1:{self.client_port}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        cmd = [
            binary, "--name", self.name, "--data-dir", str(self.data_dir),
            "--listen-client-urls", client, "--advertise-client-urls", client,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", self.initial_cluster or f"{self.name}={peer}", "--log-level", "warn",
        ]
        if self.fast:
            # short raft ticks for one member (its own leader at once); a cluster keeps etcd's defaults, or a busy
            # 2-core machine makes its leader change under the tests' feet
            cmd += ["--unsafe-no-fsync"]
            if not self.initial_cluster:
                cmd += ["--heartbeat-interval", "20", "--election-timeout", "200"]
        return cmd

    def start(self, timeout: float = 20, *, wait: bool = True) -> LocalEtcd:
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        fresh = self._own_ports and not self.data_dir.exists()  # a first start may pick other ports; a restart not
        for attempt in range(3 if wait and fresh else 1):
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(self.command(), stdout=log, stderr=log, start_new_session=True)
            if not wait:
                return self
            try:
                self.wait_ready(timeout)
                return self
            except PortTaken:
                self.kill()
                if attempt == 2:
                    raise
                shutil.rmtree(self.data_dir, ignore_errors=True)  # it may hold a member with the old peer URL
                self.client_port, self.peer_port = _free_port(), _free_port()
        return self

    def wait_ready(self, timeout: float = 20) -> None:
        """Until etcd answers a range over its gateway (a node that serves reads has a leader) and the member
        answering is this one (its peer URL is ours: another etcd may have taken the port picked for it)."""
        deadline = time.monotonic() + timeout
        base = f"http://{self.endpoint}/v3"
        ready = urllib.request.Request(f"{base}/kv/range", data=json.dumps({"key": "AA=="}).encode(), method="POST")
        members = urllib.request.Request(f"{base}/cluster/member/list", data=b"{}", method="POST")
        peer = f"http://127.0.0.1:{self.peer_port}"
        while True:
            if self.proc is not None and self.proc.poll() is not None:
                tail = self.log_path.read_text(errors="replace")[-2000:] if self.log_path.exists() else ""
                error = PortTaken if "address already in use" in tail[-600:] else RuntimeError
                raise error(f"etcd exited with {self.proc.returncode}; {self.log_path}:\n{tail}")
            try:
                with urllib.request.urlopen(ready, timeout=1) as answer:
                    if answer.status == 200:
                        with urllib.request.urlopen(members, timeout=1) as listed:
                            urls = [u for m in json.load(listed).get("members", []) for u in m.get("peerURLs", [])]
                        if peer in urls:
                            return
                        raise PortTaken(f"another etcd (peers {urls}) answers on {self.endpoint}, picked for {peer}")
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"etcd on {self.endpoint} not ready within {timeout} s; see {self.log_path}")
            time.sleep(0.05)

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def stop(self, timeout: float = 10) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def __enter__(self) -> LocalEtcd:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill()


class LocalEtcdCluster:
    """Three (``size``) etcd members on loopback, one data directory each; ``endpoints`` lists their client
    addresses. A member stopped and started again rejoins with its data."""

    def __init__(self, root: Path | str, size: int = 3, *, fast: bool = True) -> None:
        root = Path(root)
        ports = [(_free_port(), _free_port()) for _ in range(size)]
        initial = ",".join(f"m{i}=http://127.0.0.1:{peer}" for i, (_, peer) in enumerate(ports, 1))
        self.members = [
            LocalEtcd(root / f"m{i}", fast=fast, log_path=root / f"m{i}.log", client_port=client, peer_port=peer,
                      name=f"m{i}", initial_cluster=initial)
            for i, (client, peer) in enumerate(ports, 1)
        ]

    @property
    def endpoints(self) -> list[str]:
        return [m.endpoint for m in self.members]

    def start(self, timeout: float = 30) -> LocalEtcdCluster:
        for member in self.members:  # all at once: a member waits for the others' votes
            member.start(wait=False)
        for member in self.members:
            member.wait_ready(timeout)
        return self

    def kill(self) -> None:
        for member in self.members:
            member.kill()
