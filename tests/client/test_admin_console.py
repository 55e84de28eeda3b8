"""`pyrmq admin` group / producer / broker commands and `--json`, as subprocesses against `pyrmq dev` in-process with
a live producer and push consumer."""

from __future__ import annotations

import json
import subprocess
import sys

import trio

from pyrmq.client import Message, Producer, PushConsumer

PYRMQ = [sys.executable, "-m", "pyrmq"]


async def run(*args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
    with trio.fail_after(timeout):
        result = await trio.run_process([*PYRMQ, *args], capture_stdout=True, capture_stderr=True, check=False)
    if check:
        assert result.returncode == 0, f"{args}: {result.returncode}\n{result.stdout.decode()}\n{result.stderr.decode()}"
    return result


async def run_json(*args: str) -> object:
    return json.loads((await run(*args, "--json")).stdout)


async def test_group_producer_and_broker_commands_with_json(dev, name):
    topic, group, producer_group = name("T"), name("G"), name("P")
    ns = ("--namesrv", dev.namesrv)
    await dev.create_topic(topic, 2)
    got: list[bytes] = []
    consumer = PushConsumer(dev.namesrv, group, listener=lambda m: got.append(m.body), consume_from="first")
    consumer.subscribe(topic, "TagA || TagB")
    async with consumer, Producer(dev.namesrv, producer_group) as producer:
        for i in range(3):
            await producer.send(Message(topic, f"m{i}", tags="TagA"))
        await producer.instance.send_heartbeat()
        with trio.fail_after(20):
            while len(got) < 3:
                await trio.sleep(0.05)

        groups = await run_json("admin", "group", "list", *ns)
        mine = [g for g in groups if g["group"] == group]
        assert len(mine) == 1 and mine[0]["brokers"] == ["broker-a"] and mine[0]["consumeEnable"] is True
        table = (await run("admin", "group", "list", *ns)).stdout.decode()
        assert table.split()[:2] == ["GROUP", "BROKERS"] and group in table

        conns = await run_json("admin", "group", "connections", "-g", group, *ns)
        assert [(c["clientId"], c["language"]) for c in conns["connections"]] == [(consumer.instance.client_id, "PYTHON")]
        assert conns["subscriptions"][topic]["subString"] == "TagA || TagB"
        assert conns["consumeType"] == "CONSUME_PASSIVELY" and conns["messageModel"] == "CLUSTERING"
        missing = await run("admin", "group", "connections", "-g", name("Nobody"), *ns, check=False)
        assert missing.returncode != 0 and "not online" in missing.stderr.decode()

        producers = await run_json("admin", "producer", "connections", "-g", producer_group, *ns)
        assert [p["clientId"] for p in producers] == [producer.instance.client_id]

        (status,) = await run_json("admin", "broker", "status", *ns)
        assert status["brokerName"] == "broker-a" and status["brokerAddr"] == dev.broker
        assert int(status["msgPutTotalTodayNow"]) >= 3 and int(status["msgGetTotalTodayNow"]) >= 3
        text = (await run("admin", "broker", "status", "-b", dev.broker, *ns)).stdout.decode()
        assert "msgPutTotalTodayNow" in text and "broker-a" in text

        progress = await run_json("admin", "group", "progress", "-g", group, "-t", topic, *ns)
        assert sum(p["brokerOffset"] for p in progress) == 3
        queues = await run_json("admin", "topic", "status", "-t", topic, *ns)
        assert sorted(q["queueId"] for q in queues) == [0, 1] and sum(q["maxOffset"] for q in queues) == 3

    config = ("admin", "broker", "config")
    assert await run_json(*config, "get", "-b", dev.broker, "-k", "defaultQueryMaxNum", *ns) == {"defaultQueryMaxNum": "32"}
    changed = await run_json(*config, "set", "-b", dev.broker, "defaultQueryMaxNum=5", *ns)
    assert changed == {"brokers": ["broker-a"], "updated": {"defaultQueryMaxNum": "5"}}
    rows = [line.split() for line in (await run(*config, "get", "-b", dev.broker, *ns)).stdout.decode().splitlines()]
    assert ["defaultQueryMaxNum", "5"] in rows
    refused = await run(*config, "set", "-b", dev.broker, "listenPort=1", *ns, check=False)
    assert refused.returncode != 0 and "listenPort cannot be changed while the broker runs" in refused.stderr.decode()
    bad = await run(*config, "set", "-b", dev.broker, "defaultQueryMaxNum", *ns, check=False)
    assert bad.returncode != 0 and "is not KEY=VALUE" in bad.stderr.decode()
