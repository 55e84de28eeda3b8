"""The worked example of docs/architecture.md runs as written: one feature file adds a put interceptor, a request
code, a setting and a metric, and each is seen from outside (TCP, GET_BROKER_CONFIG, /metrics)."""

from __future__ import annotations

import re
import sys
import time
import types
from pathlib import Path

import pytest

from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.store.format import BatchEntry, encode_batch_body, encode_properties

DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"


def example_plugin() -> types.ModuleType:
    [code] = [c for c in re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S) if "RequireKeys" in c]
    module = types.ModuleType("my_audit")
    sys.modules["my_audit"] = module
    try:
        exec(compile(code, str(DOC), "exec"), module.__dict__)
    finally:
        del sys.modules["my_audit"]
    return module


def send(topic, body, props, code=RequestCode.SEND_MESSAGE):
    fields = {
        "producerGroup": "pg", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": 4, "queueId": 0,
        "sysFlag": 0, "bornTimestamp": int(time.time() * 1000), "flag": 0, "properties": encode_properties(props),
        "reconsumeTimes": 0, "unitMode": False,
    }
    return RemotingCommand.request(code, fields, body)


async def scrape(port: int) -> str:
    import trio

    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        data = b""
        with trio.fail_after(10):
            while chunk := await stream.receive_some(65536):
                data += chunk
    return data.decode()


@pytest.mark.hook("pyrmq_register_put_interceptors", "pyrmq_configure")
async def test_the_documented_interceptor_refuses_audit_messages_without_keys(start_role, remoting_client):
    from pyrmq.plugins.builtin.metrics import ENDPOINTS

    plugin = example_plugin()
    kernel = await start_role("dev", {"broker.metricsExporterType": "PROM", "broker.metricsPromExporterPort": 0},
                              extra_plugins=[plugin])
    addr = kernel.listening["broker"]
    assert "require-keys" in [i.name for i in kernel.put_chain.interceptors]
    refused = await remoting_client.invoke(addr, send("AuditLog", b"who did it", {}))
    assert refused.code == ResponseCode.MESSAGE_ILLEGAL
    assert refused.remark == "topic AuditLog needs KEYS (sent by 127.0.0.1)"
    batch = encode_batch_body([BatchEntry(0, b"a", b"")])
    assert (await remoting_client.invoke(addr, send("AuditLog", batch, {}, RequestCode.SEND_BATCH_MESSAGE))).code == ResponseCode.MESSAGE_ILLEGAL
    assert (await remoting_client.invoke(addr, send("AuditLog", b"x", {"KEYS": "order-1"}))).code == ResponseCode.SUCCESS
    assert (await remoting_client.invoke(addr, send("Orders", b"x", {}))).code == ResponseCode.SUCCESS
    # the request code, the setting and the metric of the same file
    stats = await remoting_client.invoke(addr, RemotingCommand.request(plugin.AUDIT_STATS, {}))
    assert (stats.code, stats.remark) == (ResponseCode.SUCCESS, "refused 2")
    config = await remoting_client.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_CONFIG, {}))
    assert "auditTopicPrefix=Audit\n" in config.body_bytes().decode()
    page = await scrape(kernel.state.get(ENDPOINTS)["broker"].port)
    assert "audit_refused_messages_total 2.0" in page


async def test_the_documented_setting_moves_the_prefix(start_role, remoting_client):
    plugin = example_plugin()
    kernel = await start_role("broker", {"broker.auditTopicPrefix": "Ledger"}, extra_plugins=[plugin])
    addr = kernel.listening["broker"]
    assert (await remoting_client.invoke(addr, send("LedgerX", b"x", {}))).code == ResponseCode.MESSAGE_ILLEGAL
    assert (await remoting_client.invoke(addr, send("AuditLog", b"x", {}))).code == ResponseCode.SUCCESS
