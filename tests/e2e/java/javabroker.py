"""The Apache RocketMQ Java name server and broker (4.9.7 from Maven Central; 5.5.0 with ``kind="server5"``) as
subprocesses on 127.0.0.1.

    with JavaRocketMQ(tmp_path / "java", store_dir=tmp_path / "store") as rmq:
        rmq.namesrv_addr, rmq.broker_addr           # "127.0.0.1:<port>"
        rmq.stop_broker()                           # SIGTERM: the shutdown hook flushes and removes ``abort``

Everything the Java side writes stays under ``home``: ``ROCKETMQ_HOME`` / ``rocketmq.home.dir`` (its
``conf/logback_*.xml``, written here) and ``user.home`` (logs). The store (commit log, consume queues, index,
``config/*.json``, checkpoint, abort) goes to ``store_dir``. The broker listens on ``listenPort`` and also opens
``listenPort - 2`` (the VIP channel) and ``listenPort + 1`` (HA); the port is chosen so all three are free.
Processes are stopped by pid. Shared by tests/e2e (the store-format oracle, POP's reference) and bench/peers.py;
imports nothing of pyrmq. 5.5.0 runs with the same JDK 17 flags and broker.conf keys; it logs through the logback
configuration inside its broker jar, to ``user.home``/logs/rocketmqlogs (``home`` here), and needs no extra key for
POP (its timer wheel is on by default).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from javapeers import java_command

NAMESRV_MAIN = "org.apache.rocketmq.namesrv.NamesrvStartup"
BROKER_MAIN = "org.apache.rocketmq.broker.BrokerStartup"

_LOGBACK = """<configuration>
  <appender name="FILE" class="ch.qos.logback.core.FileAppender">
    <file>${{user.home}}/logs/{name}.log</file>
    <encoder><pattern>%d{{HH:mm:ss.SSS}} %-5level %logger{{20}} - %msg%n</pattern></encoder>
  </appender>
  <root level="{level}"><appender-ref ref="FILE"/></root>
</configuration>
"""


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_broker_port(attempts: int = 200) -> int:
    """A listenPort whose VIP (-2) and HA (+1) neighbours are free too."""
    for _ in range(attempts):
        port = free_port()
        if port > 1026 and all(_bindable(p) for p in (port - 2, port, port + 1)):
            return port
    raise RuntimeError("no free port with free neighbours (-2, +1) on 127.0.0.1")


def wait_port(addr: str, timeout: float) -> None:
    host, port = addr.rsplit(":", 1)
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


class JavaProcess:
    """One Java role; ``start`` waits for its ``boot success`` line (printed on stdout)."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], out: Path) -> None:
        self.name, self.argv, self.env, self.out = name, argv, env, out
        self.proc: subprocess.Popen | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float) -> None:
        with open(self.out, "ab") as out:
            self.proc = subprocess.Popen(self.argv, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.out.read_text(errors="replace")
            if "boot success" in text:
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        code = self.proc.poll()
        self.kill()
        raise RuntimeError(f"Java {self.name} did not start (exit {code}); {self.out}:\n"
                           f"{self.out.read_text(errors='replace')[-3000:]}")

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM (the JVM's shutdown hook shuts the role down cleanly), SIGKILL after ``timeout``."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise RuntimeError(f"Java {self.name} ignored SIGTERM for {timeout} s; killed") from None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


class JavaRocketMQ:
    """A Java name server and one master broker writing ``store_dir``; a context manager stopping both."""

    def __init__(self, home: Path, store_dir: Path, *, broker_conf: dict[str, object] | None = None,
                 broker_heap: str = "512m", namesrv_heap: str = "128m", log_level: str = "WARN",
                 kind: str = "server") -> None:
        #: which classpath of tests/e2e/java runs: "server" (4.9.7) or "server5" (5.5.0)
        self.kind = kind
        self.home = Path(home)
        self.store_dir = Path(store_dir)
        self.extra_conf = dict(broker_conf or {})
        self.broker_heap, self.namesrv_heap, self.log_level = broker_heap, namesrv_heap, log_level
        self.namesrv_port = 0
        self.broker_port = 0
        self.namesrv: JavaProcess | None = None
        self.broker: JavaProcess | None = None

    @property
    def namesrv_addr(self) -> str:
        return f"127.0.0.1:{self.namesrv_port}"

    @property
    def broker_addr(self) -> str:
        return f"127.0.0.1:{self.broker_port}"

    def _prepare(self) -> tuple[dict[str, str], dict[str, str]]:
        (self.home / "conf").mkdir(parents=True, exist_ok=True)
        (self.home / "logs").mkdir(parents=True, exist_ok=True)
        for name in ("namesrv", "broker", "tools"):
            (self.home / "conf" / f"logback_{name}.xml").write_text(_LOGBACK.format(name=name, level=self.log_level))
        env = dict(os.environ, ROCKETMQ_HOME=str(self.home))
        props = {"rocketmq.home.dir": str(self.home), "user.home": str(self.home)}
        return env, props

    def broker_conf(self) -> dict[str, object]:
        conf: dict[str, object] = {
            "brokerClusterName": "DefaultCluster",
            "brokerName": "broker-a",
            "brokerId": 0,
            "brokerRole": "ASYNC_MASTER",
            "flushDiskType": "ASYNC_FLUSH",
            "namesrvAddr": self.namesrv_addr,
            "listenPort": self.broker_port,
            "brokerIP1": "127.0.0.1",
            "brokerIP2": "127.0.0.1",
            "storePathRootDir": str(self.store_dir),
            "storePathCommitLog": str(self.store_dir / "commitlog"),
            "autoCreateTopicEnable": "true",
        }
        conf.update(self.extra_conf)
        return conf

    def start(self, timeout: float = 90) -> JavaRocketMQ:
        env, props = self._prepare()
        if self.namesrv is None:
            self.namesrv_port = free_port()
            (self.home / "namesrv.conf").write_text(f"listenPort={self.namesrv_port}\n")
            self.namesrv = JavaProcess(
                "namesrv",
                java_command(self.kind, NAMESRV_MAIN, "-c", str(self.home / "namesrv.conf"), heap=self.namesrv_heap,
                             props=props),
                env, self.home / "namesrv.out",
            )
            self.namesrv.start(timeout)
        self.start_broker(timeout)
        return self

    def start_broker(self, timeout: float = 90) -> None:
        env, props = self._prepare()
        self.broker_port = free_broker_port()
        self.store_dir.mkdir(parents=True, exist_ok=True)
        conf = self.home / "broker.conf"
        conf.write_text("".join(f"{k}={v}\n" for k, v in self.broker_conf().items()))
        self.broker = JavaProcess(
            "broker", java_command(self.kind, BROKER_MAIN, "-c", str(conf), heap=self.broker_heap, props=props),
            env, self.home / "broker.out",
        )
        self.broker.start(timeout)
        wait_port(self.broker_addr, timeout)

    def stop_broker(self, timeout: float = 60) -> int:
        return self.broker.stop(timeout) if self.broker else 0

    def stop(self) -> None:
        for role in (self.broker, self.namesrv):
            if role is not None:
                try:
                    role.stop()
                except RuntimeError:
                    pass

    def __enter__(self) -> JavaRocketMQ:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
