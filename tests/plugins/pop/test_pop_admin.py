"""POP as operators see it: `pyrmq admin group create/update/delete` declaring a FIFO group without a Java tool,
`pyrmq admin group progress` showing a POP group's lag and in-flight messages, the POP series of /metrics, and
POP's settings under 5.x's broker.conf names."""

from __future__ import annotations

import json
import subprocess
import sys

import trio
from prometheus_client.parser import text_string_to_metric_families

from pyrmq.client import Admin
from pyrmq.plugins.broker.pop import PopSettings
from pyrmq.plugins.builtin.metrics import ENDPOINTS
from pyrmq.remoting.codes import ResponseCode

TOPIC = "PopT"
GROUP = "GPOP"
METRICS_ON = {"broker.metricsExporterType": "PROM", "broker.metricsPromExporterPort": 0}


async def pyrmq(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    with trio.fail_after(60):
        result = await trio.run_process([sys.executable, "-m", "pyrmq", *args], capture_stdout=True,
                                        capture_stderr=True, check=False)
    if check:
        assert result.returncode == 0, f"{args}: {result.stdout.decode()}\n{result.stderr.decode()}"
    return result


async def registered(namesrv: str) -> None:
    async with Admin(namesrv) as admin:
        with trio.fail_after(10):
            while not (await admin.cluster_info()).brokers:
                await trio.sleep(0.02)


async def test_a_fifo_group_declared_with_pyrmq_admin_is_popped_in_order(pop_broker):
    ns = ("--namesrv", pop_broker.namesrv)
    await registered(pop_broker.namesrv)
    out = await pyrmq("admin", "group", "create", "-g", "GFIFO", "--fifo", "--retry-max-times", "3", *ns)
    assert "group GFIFO created on broker-a: fifo=yes, retryMaxTimes=3 (then %DLQ%GFIFO)" in out.stdout.decode()
    config = pop_broker.ctx.groups.table["GFIFO"]
    assert (config.consume_message_orderly, config.retry_max_times, config.retry_queue_nums) == (True, 3, 1)
    again = await pyrmq("admin", "group", "create", "-g", "GFIFO", *ns, check=False)
    assert again.returncode != 0 and "group GFIFO exists on broker-a: use 'pyrmq admin group update'" in again.stderr.decode()
    await pyrmq("admin", "group", "update", "-g", "GFIFO", "--retry-max-times", "5", *ns)
    config = pop_broker.ctx.groups.table["GFIFO"]
    assert (config.consume_message_orderly, config.retry_max_times) == (True, 5)  # only what was given changed
    listing = json.loads((await pyrmq("admin", "group", "list", "--json", *ns)).stdout)
    assert next(g for g in listing if g["group"] == "GFIFO")["consumeMessageOrderly"] is True

    # the group is FIFO for POP consumers, whatever their request says
    await pop_broker.topic(TOPIC, 1)
    await pop_broker.send(TOPIC, ["f0", "f1", "f2"])
    c = pop_broker.consumer("GFIFO", TOPIC)
    first = await c.pop(2, invisible=60_000)
    assert first.keys == ["f0", "f1"] and first.ext["reviveQid"] == "999"
    assert (await c.pop(2, invisible=60_000)).code == ResponseCode.POLLING_TIMEOUT  # blocked by its batch

    progress = json.loads((await pyrmq("admin", "group", "progress", "-g", "GFIFO", "-t", TOPIC, "--json", *ns)).stdout)
    assert [(p["consumerOffset"], p["lag"], p["inflight"]) for p in progress] == [(0, 3, 2)]
    table = (await pyrmq("admin", "group", "progress", "-g", "GFIFO", "-t", TOPIC, *ns)).stdout.decode()
    assert "IN FLIGHT" in table and "2 popped and not acked" in table

    await pyrmq("admin", "group", "delete", "-g", "GFIFO", *ns)
    assert "GFIFO" not in pop_broker.ctx.groups.table
    missing = await pyrmq("admin", "group", "update", "-g", "GFIFO", "--fifo", *ns, check=False)
    assert missing.returncode != 0 and "no broker has group GFIFO" in missing.stderr.decode()


async def http_get(port: int, path: str) -> str:
    with trio.fail_after(10):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
            data = b""
            while chunk := await stream.receive_some(65536):
                data += chunk
    return data.partition(b"\r\n\r\n")[2].decode()


def value(text: str, name: str, **labels: str) -> float:
    found = [s.value for family in text_string_to_metric_families(text) for s in family.samples
             if s.name == name and set(labels.items()) <= set(s.labels.items())]
    assert len(found) == 1, (name, labels, found)
    return found[0]


async def test_pop_series_of_metrics(start_pop_broker):
    broker = await start_pop_broker(METRICS_ON)
    await broker.topic(TOPIC, 1)
    await broker.send(TOPIC, ["k0", "k1", "k2"])
    c = broker.consumer(GROUP, TOPIC)
    popped = await c.pop(3, invisible=60_000)
    await c.ack(popped.messages[0])
    port = broker.kernel.state.get(ENDPOINTS)["broker"].port
    text = await http_get(port, "/metrics")
    assert value(text, "rocketmq_consumer_inflight_messages", topic=TOPIC, consumer_group=GROUP, is_retry="false") == 2
    assert value(text, "rocketmq_pop_revive_in_message_total", consumer_group=GROUP, topic=TOPIC,
                 revive_message_type="CK", put_status="PUT_OK") == 1
    assert value(text, "rocketmq_pop_revive_in_message_total", consumer_group=GROUP, topic=TOPIC,
                 revive_message_type="ACK", put_status="PUT_OK") == 1
    assert value(text, "rocketmq_pop_checkpoint_buffer_size", node_id="broker-a") == 1
    assert value(text, "rocketmq_pop_revive_out_message_total", revive_message_type="ACK") == 1
    assert value(text, "rocketmq_pop_revive_lag", queue_id="0") == 0


async def test_settings_take_5x_broker_conf_names(start_pop_broker):
    broker = await start_pop_broker({"broker.reviveQueueNum": 3, "broker.popFromRetryProbability": 0})
    assert broker.kernel.settings(PopSettings).reviveQueueNum == 3
    assert broker.ctx.topics.get("rmq_sys_REVIVE_LOG_DefaultCluster").read_queue_nums == 3
    await broker.topic(TOPIC, 1)
    await broker.send(TOPIC, [f"k{i}" for i in range(4)])
    c = broker.consumer(GROUP, TOPIC)
    # the revive queue of each pop, round robin over reviveQueueNum (5.x's ckMessageNumber)
    assert [(await c.pop(1, invisible=60_000)).ext["reviveQid"] for _ in range(4)] == ["0", "1", "2", "0"]
