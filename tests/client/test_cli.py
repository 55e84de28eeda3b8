"""`pyrmq produce`, `pyrmq consume`, `pyrmq admin ...` as subprocesses against `pyrmq dev` in-process, and
`pyrmq dev --demo` as a subprocess of its own."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import trio

PYRMQ = [sys.executable, "-m", "pyrmq"]


async def run(*args: str, stdin: bytes = b"", check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
    with trio.fail_after(timeout):
        result = await trio.run_process([*PYRMQ, *args], stdin=stdin, capture_stdout=True, capture_stderr=True, check=False)
    if check:
        assert result.returncode == 0, f"{args}: {result.returncode}\n{result.stdout.decode()}\n{result.stderr.decode()}"
    return result


async def test_produce_then_consume(dev, name):
    topic, group = name("T"), name("G")
    await run("admin", "topic", "create", "-t", topic, "-q", "4", "--namesrv", dev.namesrv)
    out = await run("produce", "--namesrv", dev.namesrv, "--topic", topic, "--count", "20", "--size", "64",
                    "--tag", "TagA", "--keys", "k", "--property", "color=blue", "--print")
    results = [json.loads(line) for line in out.stdout.decode().splitlines()]
    assert len(results) == 20 and {r["status"] for r in results} == {"SEND_OK"} and {r["topic"] for r in results} == {topic}
    assert "sent 20, failed 0" in out.stderr.decode() and "msgs/s" in out.stderr.decode()
    out = await run("produce", "-n", dev.namesrv, "-t", topic, "--batch", "4", stdin=b"line one\nline two\n\nline three\n")
    assert "sent 3, failed 0" in out.stdout.decode()

    out = await run("consume", "--namesrv", dev.namesrv, "--topic", topic, "--group", group, "--from", "first",
                    "--count", "23", "--json")
    messages = [json.loads(line) for line in out.stdout.decode().splitlines()]
    assert len(messages) == 23
    keyed = [m for m in messages if m["tags"] == "TagA"]
    assert len(keyed) == 20 and all(m["properties"]["color"] == "blue" and len(m["body"]) == 64 for m in keyed)
    assert sorted(m["keys"][0] for m in keyed) == sorted(f"k{i}" for i in range(20))
    assert {m["body"] for m in messages} >= {"line one", "line two", "line three"}
    assert set(messages[0]) >= {"topic", "queue_id", "queue_offset", "msg_id", "keys", "tags", "properties", "body",
                                "reconsume_times"}
    # committed: nothing left for the group, so an idle timeout ends it
    out = await run("consume", "-n", dev.namesrv, "-t", topic, "-g", group, "--timeout", "1", "--expr", "TagA")
    assert out.stdout == b"" and "consumed 0 message(s)" in out.stderr.decode()


async def test_admin_commands_print_readable_tables(dev, name):
    topic, group = name("T"), name("G")
    ns = ("--namesrv", dev.namesrv)
    await run("admin", "topic", "create", "-t", topic, "-q", "2", *ns)
    await run("produce", *ns, "-t", topic, "--count", "6", "--keys", "order-")
    await run("consume", *ns, "-t", topic, "-g", group, "--from", "first", "--count", "4")

    listing = (await run("admin", "topic", "list", *ns)).stdout.decode()
    assert listing.splitlines()[0].split() == ["TOPIC", "BROKERS", "WRITE", "QUEUES", "READ", "QUEUES", "KIND"]
    assert any(line.split()[:2] == [topic, "broker-a"] for line in listing.splitlines())
    assert "TBW102" not in listing and "TBW102" in (await run("admin", "topic", "list", "--all", *ns)).stdout.decode()
    route = (await run("admin", "topic", "route", "-t", topic, *ns)).stdout.decode()
    assert "broker-a" in route and f"0={dev.broker}" in route and "RW-" in route
    clusters = (await run("admin", "cluster", "list", *ns)).stdout.decode()
    assert "DefaultCluster" in clusters and dev.broker in clusters
    progress = (await run("admin", "group", "progress", "-g", group, "-t", topic, *ns)).stdout.decode()
    assert "LAG" in progress and "total lag 2" in progress
    found = (await run("admin", "message", "query", "--key", "order-3", "-t", topic, "--body", *ns)).stdout.decode()
    assert "order-3" in found and "message 3 " in found
    msg_id = found.split()[1]
    by_id = (await run("admin", "message", "query", "--id", msg_id, "-t", topic, "--json", *ns)).stdout.decode()
    assert json.loads(by_id)["keys"] == ["order-3"]
    reset = (await run("admin", "offset", "reset", "-g", group, "-t", topic, "--timestamp", "0", *ns)).stdout.decode()
    assert "NEW OFFSET" in reset
    progress = (await run("admin", "group", "progress", "-g", group, "-t", topic, *ns)).stdout.decode()
    assert "total lag 6" in progress
    dlq = (await run("admin", "dlq", "list", "-g", group, *ns)).stdout.decode()
    assert "0 message(s)" in dlq
    await run("admin", "topic", "delete", "-t", topic, *ns)
    missing = await run("admin", "topic", "route", "-t", topic, *ns, check=False)
    assert missing.returncode != 0 and "no route for topic" in missing.stderr.decode()


async def test_an_unreachable_name_server_is_a_clear_error(free_port):
    dead = f"127.0.0.1:{free_port()}"
    for args in (
        ("produce", "--namesrv", dead, "-t", "T", "--count", "1"),
        ("consume", "--namesrv", dead, "-t", "T", "-g", "G", "--timeout", "1"),
        ("admin", "topic", "list", "--namesrv", dead),
    ):
        out = await run(*args, check=False)
        assert out.returncode != 0, args
        err = out.stderr.decode()
        assert f"cannot reach any name server ({dead})" in err, err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1


async def test_dev_demo_shows_messages_flowing_and_stops_on_sigint(tmp_path, free_port, broker_port):
    namesrv_port = free_port()
    broker_port = broker_port(namesrv_port)  # the broker also takes listenPort - 2 (VIP) and + 1 (HA)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = await trio.lowlevel.open_process(
        [*PYRMQ, "dev", "--dashboard-port", "0", "--demo", "--namesrv-port", str(namesrv_port), "--port", str(broker_port),
         "--store-dir", str(tmp_path / "store")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
    )
    output = b""
    try:
        with trio.fail_after(60):
            while b"messages received" not in output:
                chunk = await proc.stdout.receive_some(65536)
                if not chunk:
                    break
                output += chunk
        text = output.decode()
        assert "demo: 10 of 10 messages received" in text, text
        received = [line for line in text.splitlines() if line.startswith("demo: received")]
        sent = [line for line in text.splitlines() if line.startswith("demo: sent")]
        assert len(received) == 10 and len(sent) == 10
        assert "tags=TagA" in text and "keys=demo-key-0" in text and "Hello pyrmq #9" in text
        proc.send_signal(signal.SIGINT)
        with trio.fail_after(30):
            assert await proc.wait() == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
