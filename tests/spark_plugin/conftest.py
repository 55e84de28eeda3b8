"""Spark plugin fixtures: one real broker (``pyrmq dev`` in a subprocess) and one Spark local[2] session per run.

Test data goes in through plain SEND_MESSAGE requests and comes back out through PULL_MESSAGE decoded by the
store's own decoder, so the plugin's reader and sink are checked against code they do not share.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import attrs
import pytest

from pyrmq.remoting.blocking import BlockingRemotingClient
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.headers import CreateTopicRequestHeader, PullMessageRequestHeader, SendMessageRequestHeader
from pyrmq.store.format import StoredMessage, decode_messages, encode_properties

def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@attrs.frozen
class Sent:
    topic: str
    queue_id: int
    queue_offset: int
    msg_id: str
    body: bytes
    tags: str | None
    keys: str | None
    properties: dict[str, str]
    born_timestamp: int


class Broker:
    """A running ``pyrmq dev`` and a blocking remoting client to it."""

    def __init__(self, namesrv: str, addr: str, store_dir: str, proc: subprocess.Popen) -> None:
        self.namesrv = namesrv
        self.addr = addr
        self.store_dir = store_dir
        self.proc = proc
        self.client = BlockingRemotingClient(name="spark-tests")
        self.broker_name = "broker-a"

    def create_topic(self, topic: str, queues: int = 4) -> None:
        header = CreateTopicRequestHeader(
            topic=topic, default_topic="TBW102", read_queue_nums=queues, write_queue_nums=queues, perm=6, topic_filter_type="SINGLE_TAG"
        )
        resp = self.client.invoke(self.addr, RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, header.to_ext_fields()))
        assert resp.code == ResponseCode.SUCCESS, resp
        # the route reaches the name server by the broker's registration; wait until it is served
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            r = self.client.invoke(self.namesrv, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}))
            if r.code == ResponseCode.SUCCESS:
                return
            time.sleep(0.05)
        raise AssertionError(f"no route for {topic}")

    def send(self, topic: str, body: bytes, queue_id: int, *, tags: str | None = None, keys: str | None = None, props: dict[str, str] | None = None) -> Sent:
        properties = dict(props or {})
        if tags:
            properties["TAGS"] = tags
        if keys:
            properties["KEYS"] = keys
        born = int(time.time() * 1000)
        header = SendMessageRequestHeader(
            producer_group="spark-tests", topic=topic, default_topic="TBW102", default_topic_queue_nums=4, queue_id=queue_id,
            sys_flag=0, born_timestamp=born, flag=0, properties=encode_properties(properties),
        )
        resp = self.client.invoke(self.addr, RemotingCommand.request(RequestCode.SEND_MESSAGE, header.to_ext_fields(), body))
        assert resp.code == ResponseCode.SUCCESS, resp
        return Sent(topic, queue_id, int(resp.ext_fields["queueOffset"]), resp.ext_fields["msgId"], body, tags, keys, properties, born)

    def produce(self, topic: str, n: int, *, queues: int = 4, prefix: str = "m", tags: tuple[str, ...] = ("TagA", "TagB")) -> list[Sent]:
        return [
            self.send(topic, f"{prefix}-{i}".encode() * 3, i % queues, tags=tags[i % len(tags)], keys=f"key-{prefix}-{i}", props={"seq": str(i)})
            for i in range(n)
        ]

    def consume(self, topic: str, queues: int = 4) -> list[StoredMessage]:
        """Every message of the topic, pulled and decoded by the store's decoder."""
        out: list[StoredMessage] = []
        for qid in range(queues):
            offset = 0
            while True:
                header = PullMessageRequestHeader(
                    consumer_group="spark-tests-consumer", topic=topic, queue_id=qid, queue_offset=offset, max_msg_nums=32,
                    sys_flag=0x4, commit_offset=0, suspend_timeout_millis=0, sub_version=0, subscription="*", expression_type="TAG",
                )
                resp = self.client.invoke(self.addr, RemotingCommand.request(RequestCode.PULL_MESSAGE, header.to_ext_fields()))
                if resp.code != ResponseCode.SUCCESS:
                    break
                out.extend(decode_messages(resp.body_bytes()))
                offset = int(resp.ext_fields["nextBeginOffset"])
        return out


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory, broker_port) -> Iterator[Broker]:
    store = tmp_path_factory.mktemp("broker-store")
    ns_port = _free_port()
    port = broker_port(ns_port)  # the broker also takes listenPort - 2 (VIP) and + 1 (HA)
    env = dict(os.environ, PYRMQ_DISABLE_PLUGIN_AUTOLOAD="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "pyrmq", "dev", "--dashboard-port", "0", "--namesrv-port", str(ns_port), "--port", str(port),
         "--store-dir", str(store / "store"), "--set", "broker.grpcServerPort=0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True,
    )
    deadline = threading.Timer(60, proc.kill)  # readline() blocks: a silent `pyrmq dev` is killed, ending the read
    deadline.start()
    said = []  # log lines (warnings) may come before the ready line
    try:
        while proc.stdout is not None:
            line = proc.stdout.readline()
            said.append(line)
            if not line or "pyrmq dev:" in line:
                break
    finally:
        deadline.cancel()
    if "pyrmq dev:" not in said[-1]:
        proc.kill()
        raise RuntimeError(f"pyrmq dev did not start: {''.join(said)}{proc.stdout.read() if proc.stdout else ''}")
    b = Broker(f"127.0.0.1:{ns_port}", f"127.0.0.1:{port}", str(store / "store"), proc)
    yield b
    b.client.close()
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    try:  # `make test` installs the extra: its absence is a failure, not a skip
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError as exc:
        pytest.fail(f"the Spark plugin tests need the extra (make test installs it): pip install 'pyrmq[spark]' ({exc})")
    from pyrmq.spark_plugin import spark_session

    session = spark_session(
        "local[2]", "pyrmq-tests",
        {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2", "spark.sql.streaming.pollingDelay": "50ms"},
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def read(spark: Any, broker: Broker) -> Any:
    """``read(topic, **options)``: a batch DataFrame of the pyrmq source."""

    def make(topic: str, **options: str) -> Any:
        reader = spark.read.format("pyrmq").option("namesrv", broker.namesrv).option("topic", topic)
        for k, v in options.items():
            reader = reader.option(k, v)
        return reader.load()

    return make


_counter = iter(range(1_000_000))


@pytest.fixture
def topic(broker: Broker, request: pytest.FixtureRequest) -> str:
    """A fresh topic with 4 queues, named after the test."""
    name = f"{re.sub(r'[^A-Za-z0-9_-]', '_', request.node.name[:40])}_{next(_counter)}"
    broker.create_topic(name, 4)
    return name
