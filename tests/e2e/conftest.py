"""End-to-end fixtures: pyrmq roles as real subprocesses, and the real RocketMQ JS client ali-ons from npm.

ali-ons is installed once into a cache directory (``$PYRMQ_CACHE_DIR``, default ``~/.cache/pyrmq``) and reused.
"""

from __future__ import annotations

import json
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
            if self.proc is not None:
                self.log.close()
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
        role = Role(list(args), tmp_path / f"{name}-{len(roles)}.log")
        roles.append(role)  # before it starts: a start that failed is stopped too, and a second try logs apart
        return role.start()

    yield start
    for role in roles:
        role.kill()


@pytest.fixture
def failover_group(spawn, broker_port, tmp_path):
    """``failover_group(etcd_endpoint, namesrv, size, *settings, name="broker-f", plugin="")``: a
    :class:`~tests.e2e.failover_group.FailoverGroup` of ``size`` replicas under automatic failover on etcd, not
    started yet (``start_all()``); its replicas are killed at teardown. The helpers beside it (``until``,
    ``commit_log``, ...) are imported with ``from .failover_group import ...``."""
    from .failover_group import FailoverGroup

    def make(etcd_endpoint: str, namesrv: str, size: int, *settings: str, name: str = "broker-f",
             plugin: str = "") -> FailoverGroup:
        return FailoverGroup(spawn, broker_port, tmp_path, etcd_endpoint, namesrv, size, *settings, name=name,
                             plugin=plugin)

    return make


# -- the official Apache RocketMQ Java client (tests/e2e/java) ----------------------------------------------------

sys.path.insert(0, str(Path(__file__).parent / "java"))
import javapeers  # noqa: E402  (tests/e2e/java, imports nothing of pyrmq)

DRIVER_SRC = Path(__file__).parent / "java" / "driver"
LOGBACK = """<configuration>
  <appender name="FILE" class="ch.qos.logback.core.FileAppender">
    <file>{log}</file>
    <encoder><pattern>%d{{HH:mm:ss.SSS}} %-5level %logger{{36}} - %msg%n</pattern></encoder>
  </appender>
  <root level="WARN"><appender-ref ref="FILE"/></root>
</configuration>
"""


class JavaDriver:
    """tests/e2e/java/driver/Driver.java in one JVM: ``call(op, **args)`` sends one JSON command and returns its
    answer, failing the test when it does not come within ``timeout`` seconds or says ``ok: false``."""

    def __init__(self, namesrv: str, workdir: Path, props: dict[str, str] | None = None) -> None:
        import queue
        import threading

        try:
            classes = javapeers.compile_sources(DRIVER_SRC)
            home = workdir / "rocketmq-home"
            (home / "conf").mkdir(parents=True, exist_ok=True)
            (home / "conf" / "logback_tools.xml").write_text(LOGBACK.format(log=workdir / "tools.log"))
            self.client_log = workdir / "logs" / "rocketmq_client.log"
            argv = javapeers.java_command("client", "Driver", namesrv, extra_classpath=[classes], heap="256m", props={
                "user.home": str(workdir),
                "rocketmq.home.dir": str(home),
                "logback.configurationFile": str(home / "conf" / "logback_tools.xml"),
                "rocketmq.client.logRoot": str(workdir / "logs"),
                "rocketmq.client.logLevel": "INFO",
                "rocketmq.client.localOffsetStoreDir": str(workdir / "offsets"),
                "rocketmq.client.rebalance.waitInterval": "1000",
                **(props or {}),
            })
        except javapeers.JavaPeerError as exc:
            pytest.fail(str(exc))
        self.stderr_path = workdir / "driver.stderr"
        self._stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
                                     text=True, cwd=workdir)
        self._answers: queue.Queue = queue.Queue()
        self._next_id = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.startswith("{"):
                self._answers.put(json.loads(line))
        self._answers.put(None)

    def call(self, op: str, *, timeout: float = 30, check: bool = True, **args) -> dict:
        import queue

        self._next_id += 1
        request_id = self._next_id
        self.proc.stdin.write(json.dumps({"op": op, "id": request_id, **args}) + "\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + timeout
        while True:
            try:
                answer = self._answers.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"the Java driver did not answer {op} {args} within {timeout} s; "
                                     f"see {self.stderr_path} and {self.client_log}") from None
            if answer is None:
                raise AssertionError(f"the Java driver exited ({self.proc.wait()}) during {op}:\n"
                                     f"{self.stderr_path.read_text()[-3000:]}")
            if answer.get("id") == request_id:
                break
        if check and not answer.get("ok"):
            raise AssertionError(f"Java driver {op} {args} failed: {answer.get('error')} (cause: {answer.get('cause')})")
        return answer

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                self.call("exit", timeout=20, check=False)
                self.proc.wait(20)
        except (AssertionError, subprocess.TimeoutExpired, BrokenPipeError, OSError):
            pass
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(10)
            self._stderr.close()


@pytest.fixture(scope="module")
def java_cluster(tmp_path_factory, request, broker_port):
    """A `pyrmq namesrv` + `pyrmq broker` pair (broker on a port whose VIP and HA neighbours are free too; delay levels
    from the module's ``BROKER_SETTINGS``) and the Java driver connected to them, shared by one test module."""
    workdir = tmp_path_factory.mktemp("java")
    roles: list[Role] = []
    driver = None
    try:
        namesrv = Role(["namesrv", "--listen", "127.0.0.1:0"], workdir / "namesrv.log").start()
        roles.append(namesrv)
        port = broker_port()
        settings = [x for k, v in getattr(request.module, "BROKER_SETTINGS", {}).items() for x in ("--set", f"{k}={v}")]
        broker = Role(["broker", "-c", "broker", "--namesrv", namesrv.listening["namesrv"], "--listen", f"127.0.0.1:{port}",
                       "--store-dir", str(workdir / "store"), *settings], workdir / "broker.log").start()
        roles.append(broker)
        driver = JavaDriver(namesrv.listening["namesrv"], workdir)
        driver.namesrv, driver.broker_addr = namesrv.listening["namesrv"], broker.listening["broker"]
        yield {"namesrv": namesrv.listening["namesrv"], "broker": broker.listening["broker"], "driver": driver,
               "workdir": workdir, "broker_role": broker}
    finally:
        if driver is not None:
            driver.close()
        for role in reversed(roles):
            role.kill()


@pytest.fixture
def java_driver():
    """``java_driver(namesrv, workdir, props={...})``: a further Java driver JVM (e.g. with other client system
    properties), closed after the test."""
    drivers: list[JavaDriver] = []

    def start(namesrv: str, workdir: Path, props: dict[str, str] | None = None) -> JavaDriver:
        drivers.append(JavaDriver(namesrv, workdir, props))
        return drivers[-1]

    yield start
    for driver in drivers:
        driver.close()
