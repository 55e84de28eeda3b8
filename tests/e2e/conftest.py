"""End-to-end fixtures: pyrmq roles as real subprocesses, and the real RocketMQ JS client ali-ons from npm.

ali-ons is installed once into a cache directory (``$PYRMQ_CACHE_DIR``, default ``~/.cache/pyrmq``) and reused.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ALIONS_VERSION = "3.12.0"
JS = Path(__file__).parent / "js"


def cache_dir() -> Path:
    return Path(os.environ.get("PYRMQ_CACHE_DIR", Path.home() / ".cache" / "pyrmq"))


@pytest.fixture(scope="session")
def alions() -> Path:
    """node_modules directory holding ali-ons (installed with npm on first use)."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.fail("node and npm are needed for the ali-ons conformance tests (apt-get install nodejs npm)")
    prefix = cache_dir() / "ali-ons"
    modules = prefix / "node_modules"
    if not (modules / "ali-ons" / "package.json").exists():
        prefix.mkdir(parents=True, exist_ok=True)
        out = subprocess.run(
            ["npm", "install", "--prefix", str(prefix), f"ali-ons@{ALIONS_VERSION}", "--no-audit", "--no-fund"],
            capture_output=True, text=True, timeout=600,
        )
        assert out.returncode == 0, f"npm install ali-ons failed:\n{out.stdout}\n{out.stderr}"
    return modules


def _run_js(alions: Path, script: str, *args: str, timeout: float = 120) -> list[dict]:
    import json

    env = dict(os.environ, NODE_PATH=str(alions))
    out = subprocess.run(["node", str(JS / script), *map(str, args)], capture_output=True, text=True, env=env, timeout=timeout)
    assert out.returncode == 0, f"{script} failed ({out.returncode}):\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


@pytest.fixture(scope="session")
def run_js(alions):
    """``run_js("produce.js", *args)`` -> the JSON lines the script printed (asserts it exited 0)."""
    return lambda script, *args, timeout=120: _run_js(alions, script, *args, timeout=timeout)


class Role:
    """A `pyrmq` role in a subprocess; ``address`` once its ready line was printed."""

    def __init__(self, args: list[str], log: Path) -> None:
        self.args = args
        self.log_path = log
        self.proc: subprocess.Popen | None = None
        self.listening: dict[str, str] = {}

    def start(self, timeout: float = 30) -> Role:
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pyrmq", "--log-level", "INFO", *self.args],
            stdout=subprocess.PIPE, stderr=self.log,
        )
        # readline() blocks: a role that prints nothing is killed at the deadline, which ends the read
        deadline = threading.Timer(timeout, self.proc.kill)
        deadline.start()
        try:
            while True:
                line = self.proc.stdout.readline().decode()
                if not line:
                    if not deadline.is_alive():
                        raise AssertionError(f"{self.args} did not start within {timeout} s; see {self.log_path}")
                    raise AssertionError(f"{self.args} exited ({self.proc.wait()}); see {self.log_path}:\n{self.log_path.read_text()[-3000:]}")
                if line.startswith("pyrmq ") and " on " in line:
                    for part in line.split(":", 1)[1].split("(")[0].split(","):
                        role, _, addr = part.strip().partition(" on ")
                        self.listening[role] = addr.strip()
                    return self
        finally:
            deadline.cancel()

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        finally:
            self.log.close()

    def kill(self) -> None:
        self.stop(signal.SIGKILL)


@pytest.fixture
def spawn(tmp_path):
    roles: list[Role] = []

    def start(*args: str, name: str = "role") -> Role:
        role = Role(list(args), tmp_path / f"{name}-{len(roles)}.log").start()
        roles.append(role)
        return role

    yield start
    for role in roles:
        role.kill()
