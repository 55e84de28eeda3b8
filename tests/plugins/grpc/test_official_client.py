"""The official RocketMQ 5.x Python client (``rocketmq-python-client`` 5.1.2 from PyPI, in its own venv) against
`pyrmq dev` in-process: every message type it produces is read back by a 4.x client (pyrmq's), transactions commit,
roll back and are checked back on the Telemetry stream, ACL signatures are checked, and two brokers behind one name
server are both reached through either endpoint."""

from __future__ import annotations

import functools
import json
import time

import pytest
import trio

import official_client
from pyrmq.client import MessageQueue, PullConsumer, PullStatus

pytestmark = pytest.mark.slow


async def produce(endpoint: str, **spec) -> list[dict]:
    try:
        return await trio.to_thread.run_sync(functools.partial(
            official_client.run_script, "produce.py", endpoint, json.dumps(spec), timeout=120))
    except official_client.ClientVenvError as exc:
        pytest.fail(f"the official client's venv could not be built: {exc}")


async def pulled(namesrv: str, topic: str, queues: int, broker: str = "broker-a") -> list:
    got = []
    async with PullConsumer(namesrv, "readback") as consumer:
        for qid in range(queues):
            result = await consumer.pull(MessageQueue(topic, broker, qid), "*", 0, 64)
            if result.status is PullStatus.FOUND:
                got += result.messages
    return got


async def test_normal_fifo_and_delay_messages_from_the_official_client_reach_a_4x_consumer(grpc_dev, until):
    dev = await grpc_dev()
    await dev.create_topic("PyNormal", 4)
    await dev.create_topic("PyFifo", 4, message_type="FIFO")
    await dev.create_topic("PyDelay", 2, message_type="DELAY")
    sent = await produce(dev.grpc, topic="PyNormal", count=4, tag="TagA", keys=["key-1"], properties={"color": "red"})
    assert [s.get("error") for s in sent] == [None] * 4
    got = await pulled(dev.namesrv, "PyNormal", 4)
    assert sorted(m.properties["UNIQ_KEY"] for m in got) == sorted(s["message_id"] for s in sent)
    assert {(m.properties["TAGS"], m.properties["KEYS"], m.properties["color"]) for m in got} == {("TagA", "key-1", "red")}
    assert len({m.queue_id for m in got}) == 4  # round robin over the queues

    fifo = await produce(dev.grpc, topic="PyFifo", kind="fifo", count=5, group="order-7")
    assert [s.get("error") for s in fifo] == [None] * 5
    ordered = await pulled(dev.namesrv, "PyFifo", 4)
    assert len({m.queue_id for m in ordered}) == 1
    assert [m.properties["UNIQ_KEY"] for m in ordered] == [s["message_id"] for s in fifo]

    began = int(time.time() * 1000)
    delayed = await produce(dev.grpc, topic="PyDelay", kind="delay", count=2, delay_s=2)
    assert [s.get("error") for s in delayed] == [None] * 2

    async def arrived():
        return len(await pulled(dev.namesrv, "PyDelay", 2)) == 2

    await until(arrived, "the delayed messages delivered to PyDelay", timeout=60)
    for m in await pulled(dev.namesrv, "PyDelay", 2):
        assert int(m.properties["TIMER_DELIVER_MS"]) >= began + 1000  # parked by the timer until then


async def test_the_client_refuses_a_type_its_route_does_not_accept(grpc_dev):
    dev = await grpc_dev()
    await dev.create_topic("PyOnlyFifo", 2, message_type="FIFO")
    (answer,) = await produce(dev.grpc, topic="PyOnlyFifo", kind="normal", count=1)
    assert "queue access type:FIFO" in answer["error"]
    assert await pulled(dev.namesrv, "PyOnlyFifo", 2) == []


async def test_transactions_commit_roll_back_and_are_checked_back_on_telemetry(grpc_dev, until):
    # a half is checked back 3 s after it was sent: the committed and rolled-back ones are ended long before, even on
    # a busy machine, so only the orphan is checked
    dev = await grpc_dev(transactionCheckInterval=500, transactionTimeOut=3000)
    await dev.create_topic("PyTx", 2, message_type="TRANSACTION")
    committed = await produce(dev.grpc, topic="PyTx", kind="transaction", count=2, resolution="commit", body="c")
    rolled = await produce(dev.grpc, topic="PyTx", kind="transaction", count=1, resolution="rollback", body="r")
    assert [s.get("error") for s in committed + rolled] == [None] * 3
    # an orphan: the client never ends it; the broker's check reaches its Telemetry stream, its checker commits
    orphan = await produce(dev.grpc, topic="PyTx", kind="transaction", count=1, resolution="none", body="o",
                           check="commit", wait_check_s=30, checks=1)
    checked = [line for line in orphan if "checked" in line]
    assert [c["checked"] for c in checked] == [orphan[0]["message_id"]] and checked[0]["topic"] == "PyTx"

    async def visible():
        bodies = sorted(m.body for m in await pulled(dev.namesrv, "PyTx", 2))
        return bodies if len(bodies) >= 3 else None

    bodies = await until(visible, "the committed and the checked-back transactions visible", timeout=30)
    assert bodies == [b"c-0", b"c-1", b"o-0"]  # the rolled-back one never shows


async def test_acl_checks_the_signature_of_each_call(grpc_dev, tmp_path, monkeypatch):
    from pyrmq.client import Admin

    home = tmp_path / "rocketmq"
    (home / "conf").mkdir(parents=True)
    (home / "conf" / "plain_acl.yml").write_text(
        "accounts:\n"
        "  - accessKey: grpcUser\n    secretKey: grpcSecret1\n    defaultTopicPerm: DENY\n"
        "    topicPerms: [PyAcl=PUB|SUB]\n"
        "  - accessKey: adminUser\n    secretKey: adminSecret1\n    admin: true\n")
    monkeypatch.setenv("ROCKETMQ_HOME", str(home))
    dev = await grpc_dev(aclEnable=True)
    admin_key = ("adminUser", "adminSecret1")
    async with Admin(dev.namesrv, credentials=admin_key) as admin:
        with trio.fail_after(10):
            while not (await admin.cluster_info()).brokers:
                await trio.sleep(0.05)
        await admin.create_topic("PyAcl", 2)
        await admin.create_topic("PyAclDenied", 2)
    ok = await produce(dev.grpc, topic="PyAcl", count=1, ak="grpcUser", sk="grpcSecret1")
    assert ok[0].get("error") is None
    wrong = await produce(dev.grpc, topic="PyAcl", count=1, ak="grpcUser", sk="not-the-secret", timeout=5)
    assert wrong[0]["error"] == "failed to fetch topic:PyAcl route."  # QueryRoute answered UNAUTHORIZED
    denied = await produce(dev.grpc, topic="PyAclDenied", count=1, ak="grpcUser", sk="grpcSecret1", timeout=5)
    assert denied[0]["error"] == "failed to fetch topic:PyAclDenied route."  # FORBIDDEN
    async with PullConsumer(dev.namesrv, "readback", credentials=admin_key) as consumer:
        got = []
        for qid in range(2):
            result = await consumer.pull(MessageQueue("PyAcl", "broker-a", qid), "*", 0, 64)
            if result.status is PullStatus.FOUND:
                got += result.messages
    assert [m.properties["UNIQ_KEY"] for m in got] == [ok[0]["message_id"]]


async def test_two_brokers_behind_one_name_server_are_reached_through_either_endpoint(start_role, tmp_path):
    from pyrmq.client import Admin

    namesrv_kernel = await start_role("namesrv")
    namesrv = await namesrv_kernel.wait_listening("namesrv")
    brokers, remoting = {}, {}
    for name in ("broker-a", "broker-b"):
        kernel = await start_role("broker", {"broker.brokerName": name, "broker.namesrvAddr": namesrv,
                                             "broker.grpcServerPort": 0})
        brokers[name] = await kernel.wait_listening("grpc")
        remoting[name] = await kernel.wait_listening("broker")
    async with Admin(namesrv) as admin:
        with trio.fail_after(20):
            while len((await admin.cluster_info()).brokers) < 2:
                await trio.sleep(0.05)
        assert sorted(await admin.create_topic("PyTwo", 2)) == ["broker-a", "broker-b"]
    for entry in ("broker-a", "broker-b"):
        sent = await produce(brokers[entry], topic="PyTwo", count=8, body=f"via-{entry}")
        assert [s.get("error") for s in sent] == [None] * 8
    a = await pulled(namesrv, "PyTwo", 2, "broker-a")
    b = await pulled(namesrv, "PyTwo", 2, "broker-b")
    # whichever endpoint the client was given, its sends went to the queues of both brokers
    for entry in ("broker-a", "broker-b"):
        assert any(m.body.startswith(f"via-{entry}".encode()) for m in a), entry
        assert any(m.body.startswith(f"via-{entry}".encode()) for m in b), entry
    assert len(a) + len(b) == 16
    # a FIFO topic only broker-b holds, sent to through broker-a's endpoint: the route says FIFO and leads to b
    async with Admin(namesrv) as admin:
        await admin.create_topic("PyOnlyB", 2, broker_addr=remoting["broker-b"], message_type="FIFO")
    fifo = await produce(brokers["broker-a"], topic="PyOnlyB", kind="fifo", count=3, group="g")
    assert [s.get("error") for s in fifo] == [None] * 3
    assert [m.properties["UNIQ_KEY"] for m in await pulled(namesrv, "PyOnlyB", 2, "broker-b")] == [
        s["message_id"] for s in fifo]


async def test_tls_and_plaintext_share_the_port_in_permissive_mode(grpc_dev, tmp_path, raw):
    import shutil
    import ssl as ssl_module

    from pyrmq.plugins.grpc.schema import pb
    from rawclient import RawClient

    if shutil.which("openssl") is None:
        pytest.fail("the TLS test makes its certificate with the openssl command (Debian: apt-get install openssl)")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    made = await trio.run_process(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                                   "-out", str(cert), "-days", "1", "-subj", "/CN=localhost",
                                   "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"], capture_stdout=True,
                                  capture_stderr=True, check=False)
    assert made.returncode == 0, made.stderr
    dev = await grpc_dev(grpcTlsCertPath=str(cert), grpcTlsKeyPath=str(key))
    await dev.create_topic("PyTls", 2)
    try:
        secure = await trio.to_thread.run_sync(functools.partial(
            official_client.run_script, "produce.py", dev.grpc, json.dumps({"topic": "PyTls", "count": 2, "tls": True}),
            env={"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(cert)}, timeout=120))
    except official_client.ClientVenvError as exc:
        pytest.fail(f"the official client's venv could not be built: {exc}")
    assert [s.get("error") for s in secure] == [None, None]
    plain = await produce(dev.grpc, topic="PyTls", count=1)
    assert plain[0].get("error") is None
    got = await pulled(dev.namesrv, "PyTls", 2)
    assert sorted(m.properties["UNIQ_KEY"] for m in got) == sorted(s["message_id"] for s in secure + plain)
    # what the TLS side negotiated: ALPN h2 over TLS 1.2+
    context = ssl_module.create_default_context(cafile=str(cert))
    context.set_alpn_protocols(["h2"])
    host, _, port = dev.grpc.rpartition(":")
    tls_stream = trio.SSLStream(await trio.open_tcp_stream(host, int(port)), context, server_hostname="127.0.0.1")
    await tls_stream.do_handshake()
    assert tls_stream.selected_alpn_protocol() == "h2"
    client = RawClient(tls_stream)
    client.h2.initiate_connection()
    await client.flush()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client._read)
        answer = await client.call("QueryRoute", pb.QueryRouteRequest(topic=pb.Resource(name="PyTls")))
        assert answer.parse(pb.QueryRouteResponse).status.code == pb.Code.OK
        await tls_stream.aclose()
