"""Apache RocketMQ 5.5.0 (Maven Central) with its gRPC proxy, as subprocesses on 127.0.0.1: the reference the 5.x
client conformance tests and bench/peers.py's gRPC rows run against.

    rmq = RocketMQ55(tmp_path / "rmq55").start()        # local mode: the broker runs in the proxy's JVM
    rmq.grpc, rmq.namesrv_addr, rmq.broker_addrs         # "127.0.0.1:<port>", {"broker-a": "127.0.0.1:<port>"}
    rmq.stop()

``mode="cluster"`` runs each broker in its own JVM and the proxy in front of them (5.5.0's local mode serves one
broker: two on one host would need two proxies on one gRPC port). ``acl`` (plain_acl.yml text) turns on 5.5.0's
authentication with the accounts of plain_acl.yml migrated into ACL 2.0 users (``migrateAuthFromV1Enabled``:
``aclEnable`` is a dead key in 5.5.0). Everything the Java side writes stays under ``home`` (ROCKETMQ_HOME,
RMQ_PROXY_HOME, ``user.home`` for the logs, the stores). Processes are stopped by pid. Imports nothing of pyrmq.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from javabroker import JavaProcess, free_broker_port, free_port, wait_port
from javapeers import java_command

NAMESRV_MAIN = "org.apache.rocketmq.namesrv.NamesrvStartup"
BROKER_MAIN = "org.apache.rocketmq.broker.BrokerStartup"
PROXY_MAIN = "org.apache.rocketmq.proxy.ProxyStartup"
KIND = "proxy55"
#: what 5.5.0 needs to authenticate against plain_acl.yml's accounts (grpc-design §2.11)
AUTH = {
    "authenticationEnabled": "true",
    "authenticationProvider": "org.apache.rocketmq.auth.authentication.provider.DefaultAuthenticationProvider",
    "authenticationMetadataProvider":
        "org.apache.rocketmq.auth.authentication.provider.LocalAuthenticationMetadataProvider",
    "initAuthenticationUser": '{"username":"rocketmq","password":"12345678"}',
    "innerClientAuthenticationCredentials": '{"accessKey":"rocketmq","secretKey":"12345678"}',
    "migrateAuthFromV1Enabled": "true",
}


class RocketMQ55:
    def __init__(self, home: Path, *, brokers: tuple[str, ...] = ("broker-a",), mode: str = "local",
                 acl: str | None = None, broker_conf: dict[str, object] | None = None, broker_heap: str = "512m",
                 proxy_heap: str = "512m") -> None:
        if mode == "local" and len(brokers) != 1:
            raise ValueError("local mode runs one broker in the proxy's JVM")
        self.home = Path(home)
        self.brokers = brokers
        self.mode = mode
        self.acl = acl
        self.extra_conf = dict(broker_conf or {})
        self.broker_heap, self.proxy_heap = broker_heap, proxy_heap
        self.namesrv_port = 0
        self.grpc_port = 0
        self.broker_ports: dict[str, int] = {}
        self.processes: list[JavaProcess] = []
        self.proxy: JavaProcess | None = None

    @property
    def namesrv_addr(self) -> str:
        return f"127.0.0.1:{self.namesrv_port}"

    @property
    def grpc(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def broker_addrs(self) -> dict[str, str]:
        return {name: f"127.0.0.1:{port}" for name, port in self.broker_ports.items()}

    @property
    def broker_pids(self) -> list[int]:
        """The JVMs that run a broker (the proxy's in local mode)."""
        if self.mode == "local":
            return [self.proxy.pid] if self.proxy else []
        return [p.pid for p in self.processes if p.name.startswith("broker")]

    def _env(self) -> tuple[dict[str, str], dict[str, str]]:
        env = dict(os.environ, ROCKETMQ_HOME=str(self.home), RMQ_PROXY_HOME=str(self.home))
        props = {"rocketmq.home.dir": str(self.home), "user.home": str(self.home)}
        return env, props

    def _broker_conf(self, name: str, port: int) -> Path:
        store = self.home / f"store-{name}"
        conf: dict[str, object] = {
            "brokerClusterName": "DefaultCluster", "brokerName": name, "brokerId": 0, "brokerRole": "ASYNC_MASTER",
            "flushDiskType": "ASYNC_FLUSH", "namesrvAddr": self.namesrv_addr, "listenPort": port,
            "haListenPort": port + 1, "brokerIP1": "127.0.0.1", "brokerIP2": "127.0.0.1",
            "storePathRootDir": store, "storePathCommitLog": store / "commitlog", "autoCreateTopicEnable": "true",
        }
        if self.acl is not None:
            conf.update(AUTH, authConfigPath=store / "config")
        conf.update(self.extra_conf)
        path = self.home / "conf" / f"{name}.conf"
        path.write_text("".join(f"{k}={v}\n" for k, v in conf.items()))
        return path

    def start(self, timeout: float = 240) -> RocketMQ55:
        (self.home / "conf").mkdir(parents=True, exist_ok=True)
        if self.acl is not None:
            (self.home / "conf" / "plain_acl.yml").write_text(self.acl)
        env, props = self._env()
        self.namesrv_port = free_port()
        (self.home / "namesrv.conf").write_text(f"listenPort={self.namesrv_port}\n")
        namesrv = JavaProcess("namesrv", java_command(KIND, NAMESRV_MAIN, "-c", str(self.home / "namesrv.conf"),
                                                      heap="128m", props=props), env, self.home / "namesrv.out")
        self.processes.append(namesrv)
        namesrv.start(timeout)
        confs = {}
        for name in self.brokers:
            self.broker_ports[name] = free_broker_port()
            confs[name] = self._broker_conf(name, self.broker_ports[name])
        if self.mode == "cluster":
            for name in self.brokers:
                broker = JavaProcess(f"broker-{name}", java_command(KIND, BROKER_MAIN, "-c", str(confs[name]),
                                                                    heap=self.broker_heap, props=props),
                                     env, self.home / f"{name}.out")
                self.processes.append(broker)
                broker.start(timeout)
        self.grpc_port = free_port()
        proxy_conf: dict[str, object] = {
            "rocketMQClusterName": "DefaultCluster", "proxyMode": self.mode, "grpcServerPort": self.grpc_port,
            "remotingListenPort": free_port(), "namesrvAddr": self.namesrv_addr,
        }
        if self.mode == "local":
            proxy_conf["brokerConfigPath"] = str(confs[self.brokers[0]])
        if self.acl is not None:
            proxy_conf.update({k: (v == "true" if v in ("true", "false") else v) for k, v in AUTH.items()})
            proxy_conf["authConfigPath"] = str(self.home / f"store-{self.brokers[0]}" / "config")
        (self.home / "conf" / "rmq-proxy.json").write_text(json.dumps(proxy_conf))
        self.proxy = JavaProcess("proxy", java_command(KIND, PROXY_MAIN, "-pm", self.mode, "-pc",
                                                       str(self.home / "conf" / "rmq-proxy.json"),
                                                       heap=self.proxy_heap, props=props),
                                 env, self.home / "proxy.out", ready="rocketmq-proxy startup successfully")
        self.processes.append(self.proxy)
        self.proxy.start(timeout)
        wait_port(self.grpc, timeout)
        for addr in self.broker_addrs.values():
            wait_port(addr, timeout)
        return self

    def stop(self) -> None:
        for process in reversed(self.processes):
            try:
                process.stop(60)
            except RuntimeError:
                pass

    def __enter__(self) -> RocketMQ55:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
