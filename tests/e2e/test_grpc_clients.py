"""The official RocketMQ 5.x clients, unchanged, against pyrmq and against Apache RocketMQ 5.5.0 (broker + gRPC
proxy from Maven Central, local mode, JDK 17): the same scenarios, the same observable answers.

``make test`` runs the Java client against pyrmq (the Python client's own tests against pyrmq are
tests/plugins/grpc/test_official_*.py). ``make grpc-peers`` (PYRMQ_GRPC_55=1) runs every scenario with both clients
against both systems: 5.5.0 boots in 30-60 s and its check-backs and long polls are slow, several minutes in all.

Clients: ``rocketmq-python-client`` 5.1.2 from PyPI (its own venv, plaintext) and ``rocketmq-client-java`` 5.2.0
from Maven Central (tests/e2e/java/grpc5src/Client5.java, TLS: its default; pyrmq gets a certificate made with
openssl, 5.5.0's proxy uses its test certificate). Both print the same JSON lines. Scenarios: every message type
produced and consumed (SimpleConsumer and PushConsumer), redelivery after a failed consumption, FIFO order per
message group, transactions with check-back, delay, ACL on and off, two brokers behind one name server, 4.x <-> 5.x
interchange. Where 5.5.0 and pyrmq answer differently on purpose (docs/decisions.md), the last tests assert each
side's answer.

Simple consumers wait 2 s after startup before their first receive on 5.5.0 (``settle_s``): the official clients do
not wait for their settings answer and 5.5.0 fails a receive that overtakes them (pyrmq serves it: see the last
tests).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import pytest
import trio

from pyrmq.client import Admin, Message, MessageQueue, Producer, PullConsumer, PullStatus

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "java"))
sys.path.insert(0, str(HERE.parent / "plugins" / "grpc"))
import javapeers  # noqa: E402
import official_client  # noqa: E402
from javaproxy import RocketMQ55  # noqa: E402

pytestmark = pytest.mark.slow

#: with 5.5.0 beside pyrmq, and the Python client too (make grpc-peers)
FULL = os.environ.get("PYRMQ_GRPC_55") == "1"
TARGETS = ["pyrmq", "rocketmq-5.5.0"] if FULL else ["pyrmq"]
CLIENTS = ("python", "java") if FULL else ("java",)
SETTLE = 2
ACL_YML = ("accounts:\n"
           "  - accessKey: grpcUser\n    secretKey: grpcSecret1\n    admin: true\n")


# -- the two systems -------------------------------------------------------------------------------------------


class Target:
    """One system under test: its gRPC endpoint, name server, and how topics and groups are made."""

    def __init__(self, name: str, grpc: str, namesrv: str, credentials: tuple[str, str] | None = None) -> None:
        self.name, self.grpc, self.namesrv, self.credentials = name, grpc, namesrv, credentials

    async def admin(self) -> Admin:
        return Admin(self.namesrv, credentials=self.credentials)

    async def wait_brokers(self, n: int = 1) -> None:
        async with Admin(self.namesrv, credentials=self.credentials) as admin:
            with trio.fail_after(60):
                while len((await admin.cluster_info()).brokers) < n:
                    await trio.sleep(0.1)

    async def topic(self, topic: str, queues: int = 2, message_type: str | None = None) -> None:
        async with Admin(self.namesrv, credentials=self.credentials) as admin:
            await admin.create_topic(topic, queues, message_type=message_type)

    async def group(self, group: str, **config) -> None:
        async with Admin(self.namesrv, credentials=self.credentials) as admin:
            await admin.put_group({"groupName": group, **config})


@pytest.fixture(scope="module")
def certificate(tmp_path_factory) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.fail("the Java client speaks TLS: the test makes pyrmq's certificate with openssl (apt-get install openssl)")
    d = tmp_path_factory.mktemp("tls")
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                   check=True, capture_output=True)
    return cert, key


def _start_55(home: Path, **kw) -> RocketMQ55:
    try:
        return RocketMQ55(home, **kw).start()
    except javapeers.JavaPeerError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="module")
def rmq55(tmp_path_factory):
    """Apache RocketMQ 5.5.0: name server + proxy with its broker (local mode), checks every 2 s."""
    rmq = _start_55(tmp_path_factory.mktemp("rmq55"), broker_conf={"transactionCheckInterval": 2000})
    yield rmq
    rmq.stop()


@pytest.fixture(params=TARGETS)
async def target(request, start_role, certificate):
    if request.param == "pyrmq":
        kernel = await start_role("dev", {"broker.grpcTlsCertPath": str(certificate[0]),
                                          "broker.grpcTlsKeyPath": str(certificate[1]),
                                          "broker.transactionCheckInterval": 500,
                                          "broker.transactionTimeOut": 1000})
        t = Target("pyrmq", await kernel.wait_listening("grpc"), await kernel.wait_listening("namesrv"))
    else:
        rmq = request.getfixturevalue("rmq55")
        t = Target("rocketmq-5.5.0", rmq.grpc, rmq.namesrv_addr)
    await t.wait_brokers()
    return t


# -- the clients --------------------------------------------------------------------------------------------------


def _java_args(spec: dict) -> list[str]:
    out = []
    for key, value in spec.items():
        if key == "keys":
            out.append(f"key={value[0]}")
        elif key == "groups":
            out.append(f"groups={','.join(value)}")
        elif key == "properties":
            out += [f"prop={k}:{v}" for k, v in value.items()]
        elif isinstance(value, bool):
            out.append(f"{key}={'true' if value else 'false'}")
        else:
            out.append(f"{key}={value}")
    return out


def _run_java(action: str, endpoint: str, spec: dict, timeout: float, workdir: Path) -> list[dict]:
    try:
        classes = javapeers.compile_sources(HERE / "java" / "grpc5src", "grpc5")
        argv = javapeers.java_command("grpc5", "Client5", action, endpoint, *_java_args(spec),
                                      extra_classpath=[classes], heap="256m", props={"user.home": str(workdir)})
    except javapeers.JavaPeerError as exc:
        pytest.fail(str(exc))
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGQUIT)  # the JVM prints every thread's stack to stdout: where it waits
        try:
            stdout, stderr = proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()  # everything it wrote, the stacks included
        raise AssertionError(f"Client5 {action} {spec} did not end within {timeout} s; its output, ending with its "
                             f"threads' stacks:\n{stdout[-20000:]}\n{stderr[-3000:]}") from None
    assert proc.returncode == 0, f"Client5 {action} {spec} failed ({proc.returncode}):\n{stdout[-3000:]}\n{stderr[-3000:]}"
    lines = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    if any("close_stuck" in line for line in lines):
        # the client's close() did not return (its channel's termination); what it observed is complete before
        stacks = workdir / f"close-stuck-{action}-{proc.pid}.txt"
        stacks.write_text(stderr)
        warnings.warn(f"Client5 {action}: the Java client's close() did not return; its threads: {stacks}")
    return lines


async def run(client: str, action: str, target: Target, timeout: float = 180, **spec) -> list[dict]:
    """``action`` produce / simple / push with the official ``client``; its JSON lines. A simple consumer waits
    ``SETTLE`` s after startup on 5.5.0, which fails a receive that overtakes the client's settings (pyrmq serves it:
    the receive-before-settings test)."""
    if action == "simple" and target.name != "pyrmq":
        spec.setdefault("settle_s", SETTLE)
    if client == "java":
        spec.setdefault("tls", True)
        # the client's logs (user.home/logs): one directory per test process, not shared with another suite's
        workdir = Path(tempfile.gettempdir()) / f"pyrmq-client5-{target.name}-{os.getpid()}"
        workdir.mkdir(exist_ok=True)
        return await trio.to_thread.run_sync(functools.partial(_run_java, action, target.grpc, spec, timeout, workdir))
    script = "produce.py" if action == "produce" else "consume.py"
    if action != "produce":
        spec["kind"] = action
    try:
        return await trio.to_thread.run_sync(functools.partial(
            official_client.run_script, script, target.grpc, json.dumps(spec), timeout=timeout))
    except official_client.ClientVenvError as exc:
        pytest.fail(f"the official client's venv could not be built: {exc}")


def sent_ids(lines: list[dict]) -> list[str]:
    errors = [line for line in lines if "error" in line]
    assert not errors, errors
    return [line["message_id"] for line in lines if "sent" in line]


def received(lines: list[dict]) -> list[dict]:
    errors = [line for line in lines if "error" in line]
    assert not errors, errors
    return [line for line in lines if "received" in line]


async def pulled(target: Target, topic: str, queues: int, brokers=("broker-a",)) -> list:
    got = []
    async with PullConsumer(target.namesrv, "readback", credentials=target.credentials) as consumer:
        for broker in brokers:
            for qid in range(queues):
                result = await consumer.pull(MessageQueue(topic, broker, qid), "*", 0, 64)
                if result.status is PullStatus.FOUND:
                    got += result.messages
    return got


# -- scenarios: the same answers from both systems ----------------------------------------------------------------


@pytest.mark.parametrize("client", CLIENTS)
async def test_normal_messages_reach_a_simple_consumer_with_tag_keys_and_properties(target, client):
    topic, group = f"N_{client}", f"GN_{client}"
    await target.topic(topic, 2)
    await target.group(group)
    ids = sent_ids(await run(client, "produce", target, topic=topic, count=3, tag="TagA", keys=["k1"],
                             properties={"color": "red"}))
    got = received(await run(client, "simple", target, topic=topic, group=group, count=3, tag="TagA"))
    assert sorted(m["received"] for m in got) == sorted(ids)
    assert {(m["tag"], tuple(m["keys"]), json.dumps(m["properties"]), m["attempt"], m["topic"]) for m in got} == {
        ("TagA", ("k1",), json.dumps({"color": "red"}), 1, topic)}
    assert sorted(m["body"] for m in got) == ["body-0", "body-1", "body-2"]


@pytest.mark.parametrize("client", CLIENTS)
async def test_a_push_consumer_gets_a_failed_message_again_with_its_attempt_counted(target, client):
    topic, group = f"P_{client}", f"GP_{client}"
    await target.topic(topic, 2)
    await target.group(group)
    ids = sent_ids(await run(client, "produce", target, topic=topic, count=2))
    got = received(await run(client, "push", target, topic=topic, group=group, count=2, fail=1, deadline_s=60))
    by_id: dict[str, list[int]] = {}
    for m in got:
        by_id.setdefault(m["received"], []).append(m["attempt"])
    assert by_id == {i: [1, 2] for i in ids}


@pytest.mark.parametrize("client", CLIENTS)
async def test_fifo_messages_are_consumed_in_order_per_message_group(target, client):
    topic, group = f"F_{client}", f"GF_{client}"
    await target.topic(topic, 4, message_type="FIFO")
    await target.group(group, consumeMessageOrderly=True)
    lines = await run(client, "produce", target, topic=topic, kind="fifo", count=9, groups=["a", "b", "c"])
    sent_ids(lines)
    sent = {g: [s["message_id"] for s in lines if s.get("group") == g] for g in "abc"}
    assert all(len(ids) == 3 for ids in sent.values()), sent
    # the first delivery of each message fails once: FIFO groups retry in place, later messages of the group wait
    got = received(await run(client, "push", target, topic=topic, group=group, count=9, fail=1, deadline_s=90))
    for g in ("a", "b", "c"):
        order = [m["received"] for m in got if m["group"] == g]
        assert order == [i for i in sent[g] for _ in range(2)], (g, order)


@pytest.mark.parametrize("client", CLIENTS)
async def test_delayed_messages_come_at_their_delivery_time(target, client):
    topic, group = f"D_{client}", f"GD_{client}"
    await target.topic(topic, 2, message_type="DELAY")
    await target.group(group)
    began = int(time.time() * 1000)
    ids = sent_ids(await run(client, "produce", target, topic=topic, kind="delay", count=2, delay_s=5))
    got = received(await run(client, "simple", target, topic=topic, group=group, count=2, deadline_s=60))
    assert sorted(m["received"] for m in got) == sorted(ids)
    for m in got:
        # the delivery time asked (the Python client sends whole seconds), and none handed out before it
        # (5.x's timer works in 1 s slots)
        assert m["deliver_at"] >= began + 4000, m
        assert m["at"] >= m["deliver_at"] - 1000, m


@pytest.mark.parametrize("client", CLIENTS)
async def test_transactions_commit_roll_back_and_are_checked_back(target, client):
    topic, group = f"T_{client}", f"GT_{client}"
    await target.topic(topic, 2, message_type="TRANSACTION")
    await target.group(group)
    # message 0 committed, 1 rolled back, 2 left open: the broker checks it back, the client's checker commits it
    lines = await run(client, "produce", target, topic=topic, kind="transaction", count=3,
                      resolution="commit,rollback,none", check="commit", wait_check_s=60, checks=1)
    ids = sent_ids(lines)
    assert [c["checked"] for c in lines if "checked" in c] == [ids[2]]
    got = received(await run(client, "simple", target, topic=topic, group=group, count=2, deadline_s=60))
    assert sorted((m["received"], m["body"]) for m in got) == sorted([(ids[0], "body-0"), (ids[2], "body-2")])



async def test_4x_and_5x_clients_read_each_others_messages(target):
    topic, group = "X45", "GX45"
    await target.topic(topic, 2)
    await target.group(group)
    # 4.x -> 5.x: pyrmq's remoting producer, the official Python client consuming
    async with Producer(target.namesrv, "x45_producer", credentials=target.credentials) as producer:
        results = [await producer.send(Message(topic, f"from-4x-{i}".encode(), tags="Tag4", keys="k4",
                                               properties={"p": "v"})) for i in range(3)]
    got = received(await run("python", "simple", target, topic=topic, group=group, count=3))
    assert sorted(m["body"] for m in got) == ["from-4x-0", "from-4x-1", "from-4x-2"]
    assert sorted(m["received"] for m in got) == sorted(r.msg_id for r in results)
    assert {(m["tag"], tuple(m["keys"]), m["properties"].get("p")) for m in got} == {("Tag4", ("k4",), "v")}
    # 5.x -> 4.x: the official Java client producing, pyrmq's pull consumer reading
    ids = sent_ids(await run("java", "produce", target, topic=topic, count=2, tag="Tag5", body="from-5x"))
    five = [m for m in await pulled(target, topic, 2) if m.body.startswith(b"from-5x")]
    assert sorted(m.properties["UNIQ_KEY"] for m in five) == sorted(ids)
    assert {m.properties["TAGS"] for m in five} == {"Tag5"}


# -- ACL, two brokers --------------------------------------------------------------------------------------------


@pytest.fixture(params=TARGETS)
async def acl_target(request, start_role, tmp_path, monkeypatch, tmp_path_factory, certificate):
    if request.param == "pyrmq":
        home = tmp_path / "rocketmq"
        (home / "conf").mkdir(parents=True)
        (home / "conf" / "plain_acl.yml").write_text(ACL_YML)
        monkeypatch.setenv("ROCKETMQ_HOME", str(home))
        kernel = await start_role("dev", {"broker.aclEnable": True, "broker.grpcTlsCertPath": str(certificate[0]),
                                          "broker.grpcTlsKeyPath": str(certificate[1])})
        t = Target("pyrmq", await kernel.wait_listening("grpc"), await kernel.wait_listening("namesrv"),
                   ("grpcUser", "grpcSecret1"))
        yield t
    else:
        rmq = _start_55(tmp_path_factory.mktemp("rmq55acl"), acl=ACL_YML)
        try:
            yield Target("rocketmq-5.5.0", rmq.grpc, rmq.namesrv_addr, ("grpcUser", "grpcSecret1"))
        finally:
            await trio.to_thread.run_sync(rmq.stop)


@pytest.mark.parametrize("client", CLIENTS)
async def test_acl_lets_the_right_signature_in_and_keeps_a_wrong_one_out(acl_target, client):
    t = acl_target
    await t.wait_brokers()
    topic, group = f"Acl_{client}", f"GAcl_{client}"
    await t.topic(topic, 2)
    await t.group(group)
    auth = {"ak": "grpcUser", "sk": "grpcSecret1"}
    ids = sent_ids(await run(client, "produce", t, topic=topic, count=2, **auth))
    got = received(await run(client, "simple", t, topic=topic, group=group, count=2, **auth))
    assert sorted(m["received"] for m in got) == sorted(ids)
    # a wrong secret, and no credentials at all: QueryRoute answers UNAUTHORIZED, the producer cannot start
    for spec in ({"ak": "grpcUser", "sk": "not-the-secret"}, {}):
        (refused,) = await run(client, "produce", t, topic=topic, count=1, timeout=5, **spec)
        if client == "python":
            assert refused["error"] == f"failed to fetch topic:{topic} route."
        else:
            assert "40100" in refused["error"] + refused["cause"], refused
    assert sorted(m.properties["UNIQ_KEY"] for m in await pulled(t, topic, 2)) == sorted(ids)


@pytest.fixture(params=TARGETS)
async def two_brokers(request, start_role, tmp_path_factory, certificate):
    if request.param == "pyrmq":
        namesrv_kernel = await start_role("namesrv")
        namesrv = await namesrv_kernel.wait_listening("namesrv")
        endpoints = []
        for name in ("broker-a", "broker-b"):
            kernel = await start_role("broker", {"broker.brokerName": name, "broker.namesrvAddr": namesrv,
                                                 "broker.grpcTlsCertPath": str(certificate[0]),
                                                 "broker.grpcTlsKeyPath": str(certificate[1])})
            endpoints.append(await kernel.wait_listening("grpc"))
        yield Target("pyrmq", endpoints[0], namesrv)
    else:
        # 5.5.0's local mode serves one broker per proxy (and every proxy on one gRPC port): cluster mode here
        rmq = _start_55(tmp_path_factory.mktemp("rmq55two"), brokers=("broker-a", "broker-b"), mode="cluster",
                        broker_heap="384m", proxy_heap="384m")
        try:
            yield Target("rocketmq-5.5.0", rmq.grpc, rmq.namesrv_addr)
        finally:
            await trio.to_thread.run_sync(rmq.stop)


@pytest.mark.parametrize("client", CLIENTS)
async def test_two_brokers_behind_one_name_server_are_produced_to_and_consumed_from(two_brokers, client):
    t = two_brokers
    await t.wait_brokers(2)
    topic = f"Two_{client}"
    await t.topic(topic, 2)
    await t.group(f"GTwo_{client}")
    await t.group(f"GTwoPush_{client}")
    ids = sent_ids(await run(client, "produce", t, topic=topic, count=8))
    stored = await pulled(t, topic, 2, brokers=("broker-a", "broker-b"))
    assert sorted(m.properties["UNIQ_KEY"] for m in stored) == sorted(ids)
    by_broker = {name: [m for m in await pulled(t, topic, 2, brokers=(name,))] for name in ("broker-a", "broker-b")}
    assert all(by_broker.values()), {k: len(v) for k, v in by_broker.items()}  # both brokers got messages
    # the Python client's SimpleConsumer, the Java client's PushConsumer (both consumers are covered for one broker)
    if client == "python":
        got = received(await run(client, "simple", t, topic=topic, group=f"GTwo_{client}", count=8))
    else:
        got = received(await run(client, "push", t, topic=topic, group=f"GTwoPush_{client}", count=8, deadline_s=60))
    assert sorted({m["received"] for m in got}) == sorted(ids)


# -- where the answers differ on purpose (docs/decisions.md) -------------------------------------------------------


async def test_a_receive_before_the_clients_settings_is_served_by_pyrmq_and_fails_on_5_5_0(target, nursery):
    """The official clients send their first ReceiveMessage without waiting for the settings answer; whether it
    overtakes them is a race (grpc-design §3.4), so the raw client makes it certain: a receive from a client id that
    never sent settings."""
    from rawclient import RawClient
    from pyrmq.plugins.grpc.schema import pb

    topic, group = "Race", "GRace"
    await target.topic(topic, 1)
    await target.group(group)
    (sent,) = sent_ids(await run("python", "produce", target, topic=topic, count=1))
    request = pb.ReceiveMessageRequest(batch_size=16)
    request.group.name = group
    request.message_queue.topic.name = topic
    request.message_queue.id = -1
    request.message_queue.broker.name = "broker-a"
    request.filter_expression.type = pb.FilterType.TAG
    request.filter_expression.expression = "*"
    request.invisible_duration.seconds = 15
    request.long_polling_timeout.seconds = 5
    client = await RawClient.connect(nursery, target.grpc)
    try:
        answer = await client.call("ReceiveMessage", request, timeout="10S", wait=30,
                                   metadata={"x-mq-client-id": "never-sent-settings@1", "x-mq-client-version": "5.1.2"})
    finally:
        await client.aclose()
    parts = [pb.ReceiveMessageResponse.FromString(m) for m in answer.messages]
    if target.name == "pyrmq":
        assert parts[0].status.code == pb.Code.OK
        assert [p.message.system_properties.message_id for p in parts if p.HasField("message")] == [sent]
    else:  # INTERNAL_SERVER_ERROR with a NullPointerException's text
        assert parts[0].status.code == pb.Code.INTERNAL_SERVER_ERROR, parts
        assert "NullPointerException" in parts[0].status.message, parts


async def test_garbage_receipt_handles_are_invalid_on_pyrmq_and_an_internal_error_on_5_5_0(target, nursery):
    from rawclient import RawClient
    from pyrmq.plugins.grpc.schema import pb

    await target.topic("Garbage", 1)
    await target.group("GGarbage")
    client = await RawClient.connect(nursery, target.grpc)
    try:
        request = pb.AckMessageRequest()
        request.group.name, request.topic.name = "GGarbage", "Garbage"
        request.entries.add(message_id="m", receipt_handle="garbage")
        answer = (await client.call("AckMessage", request)).parse(pb.AckMessageResponse)
    finally:
        await client.aclose()
    if target.name == "pyrmq":
        assert answer.status.code == pb.Code.INVALID_RECEIPT_HANDLE and "1 fields" in answer.status.message
    else:
        assert answer.status.code == pb.Code.INTERNAL_SERVER_ERROR
        assert "IllegalArgumentException" in answer.entries[0].status.message
