"""Transactions across crashes, with real processes and SIGKILL.

* A producer process killed after sending halves: a second producer process of the same group answers the
  check-backs, and every half ends committed or rolled back as that checker says.
* A broker (`pyrmq dev` subprocess) killed with pending halves and restarted: every half is checked and resolved
  exactly once, nothing committed twice, none lost; killed again after that, a restart checks nothing again.

``TXN_CRASH_HALVES`` sets the number of pending halves of the broker test (default 200; the issue's 1,000 runs by hand:
``TXN_CRASH_HALVES=1000 .venv/bin/python -m pytest tests/plugins/test_transaction_crash.py``).
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import textwrap

import trio

from pyrmq.client import Admin, ClientConfig, ConsumeFrom, LocalTransactionState, Message, PushConsumer, TransactionProducer
from pyrmq.client.message import MessageExt
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.store.format import decode_messages

HALVES = int(os.environ.get("TXN_CRASH_HALVES", "200"))

PRODUCER = textwrap.dedent('''
    import sys, trio
    from pyrmq.client import ClientConfig, LocalTransactionState, Message, TransactionProducer

    namesrv, mode, count = sys.argv[1], sys.argv[2], int(sys.argv[3])

    def check_local(msg):
        # the checker: even numbers committed, odd ones rolled back
        n = int(msg.keys[0].split("-")[1])
        print("check", msg.keys[0], flush=True)
        return LocalTransactionState.COMMIT if n % 2 == 0 else LocalTransactionState.ROLLBACK

    async def main():
        config = ClientConfig(namesrv_addr=namesrv, heartbeat_broker_interval=1.0)
        async with TransactionProducer(config=config, group="crash_pg",
                                       check_local=check_local if mode == "checker" else None) as producer:
            if mode == "sender":
                for i in range(count):
                    await producer.send_in_transaction(Message("Crash", f"m-{i}", keys=f"m-{i}"),
                                                       lambda m, a: LocalTransactionState.UNKNOWN)
            print("ready", flush=True)
            await trio.sleep_forever()

    trio.run(main)
''')


async def start_producer(namesrv: str, mode: str, count: int = 0) -> trio.Process:
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-c", PRODUCER, namesrv, mode, str(count)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return proc


async def read_until(proc: trio.Process, word: bytes, out: bytearray, timeout: float = 30.0) -> None:
    with trio.fail_after(timeout):
        while word not in out:
            chunk = await proc.stdout.receive_some(65536)
            assert chunk, f"the producer exited: {out.decode(errors='replace')}"
            out.extend(chunk)


async def drain(proc: trio.Process, out: bytearray) -> None:
    while chunk := await proc.stdout.receive_some(65536):
        out.extend(chunk)


def kill(proc) -> None:
    if (proc.poll() if hasattr(proc, "poll") else proc.returncode) is None:
        proc.send_signal(signal.SIGKILL)


async def test_a_killed_producer_s_halves_are_resolved_by_another_producer_process_of_the_group(start_role, nursery):
    kernel = await start_role("dev", {"broker.transactionCheckInterval": 500, "broker.transactionTimeOut": 500})
    namesrv = kernel.listening["namesrv"]
    async with Admin(namesrv) as admin:
        with trio.fail_after(10):
            while not (await admin.cluster_info()).brokers:
                await trio.sleep(0.02)
    received: list[MessageExt] = []

    async def on_message(msg):
        received.append(msg)

    consumer = PushConsumer(namesrv, "crash_consumer", subscribe={"Crash": "*"}, listener=on_message,
                            consume_from=ConsumeFrom.FIRST_OFFSET)
    async with consumer:
        sender = await start_producer(namesrv, "sender", 20)
        out = bytearray()
        try:
            await read_until(sender, b"ready", out)
        finally:
            kill(sender)
        await sender.wait()
        assert sender.returncode == -signal.SIGKILL
        checker = await start_producer(namesrv, "checker")
        checked = bytearray()
        try:
            await read_until(checker, b"ready", checked)
            nursery.start_soon(drain, checker, checked)
            with trio.fail_after(20):
                while len(received) < 10:
                    await trio.sleep(0.05)
            async with Admin(namesrv) as admin:
                with trio.fail_after(20):
                    while await admin.pending_transactions("Crash"):
                        await trio.sleep(0.1)
            await trio.sleep(1.2)  # two more check passes: nothing else comes
        finally:
            kill(checker)
        assert sorted(m.keys[0] for m in received) == sorted(f"m-{i}" for i in range(0, 20, 2))
        checks = collections.Counter(line.split()[1] for line in checked.decode().splitlines() if line.startswith("check "))
        assert set(checks) == {f"m-{i}" for i in range(20)}


# -- broker SIGKILL ----------------------------------------------------------------------------------------------


def start_broker(store_dir, namesrv_port, port, log_path, interval_ms):
    cmd = [sys.executable, "-m", "pyrmq", "--no-entry-points", "--log-level", "INFO", "dev", "--dashboard-port", "0", "--store-dir", str(store_dir),
           "--namesrv-port", str(namesrv_port), "--port", str(port),
           "--set", f"broker.transactionCheckInterval={interval_ms}", "--set", "broker.transactionTimeOut=3000"]
    log = open(log_path, "ab")
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONUNBUFFERED="1"))


async def wait_serving(client, addr, proc):
    """Until the broker answers and its name server routes TBW102 to it (a first send to a new topic needs both)."""
    namesrv = f"127.0.0.1:{proc.args[proc.args.index('--namesrv-port') + 1]}"
    with trio.fail_after(30):
        while True:
            assert proc.poll() is None, "the broker exited"
            try:
                r = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": "TBW102", "queueId": "0"}), timeout=1)
                if r.code == ResponseCode.SUCCESS:
                    async with Admin(namesrv) as admin:
                        if (await admin.topic_route("TBW102")).broker_datas:
                            return
            except Exception:  # noqa: BLE001 - not listening or not registered yet
                pass
            await trio.sleep(0.1)


async def read_topic(client, addr, topic, queues=4):
    out = []
    for queue_id in range(queues):
        offset = 0
        while True:
            request = RemotingCommand.request(RequestCode.PULL_MESSAGE, {
                "consumerGroup": "reader", "topic": topic, "queueId": str(queue_id), "queueOffset": str(offset),
                "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0",
                "subscription": "*", "subVersion": "0"})
            r = await client.invoke(addr, request)
            if r.code != ResponseCode.SUCCESS:
                break
            out.extend(decode_messages(r.body_bytes()))
            offset = int(r.ext_fields["nextBeginOffset"])
    return out


async def test_a_broker_killed_with_pending_halves_checks_and_resolves_each_exactly_once(tmp_path, remoting_client,
                                                                                         free_port, broker_port):
    store_dir, log_path = tmp_path / "store", tmp_path / "broker.log"
    namesrv_port = free_port()
    port = broker_port(namesrv_port)
    addr, namesrv = f"127.0.0.1:{port}", f"127.0.0.1:{namesrv_port}"
    checks: collections.Counter[str] = collections.Counter()
    answering = False

    def check_local(msg):
        if not answering:
            return LocalTransactionState.UNKNOWN
        checks[msg.keys[0]] += 1
        n = int(msg.keys[0].split("-")[1])
        return LocalTransactionState.COMMIT if n % 3 else LocalTransactionState.ROLLBACK

    # no check pass before the kill (60 s interval): every half is pending when the broker dies
    proc = start_broker(store_dir, namesrv_port, port, log_path, 60_000)
    config = ClientConfig(namesrv_addr=namesrv, heartbeat_broker_interval=0.5)
    try:
        await wait_serving(remoting_client, addr, proc)
        async with TransactionProducer(config=config, group="kill_pg", check_local=check_local, retry_times=0) as producer:
            # 20 committed at once (never checked), HALVES left pending
            for i in range(20):
                await producer.send_in_transaction(Message("Killed", f"c-{i}", keys=f"c-{i}"), lambda m, a: LocalTransactionState.COMMIT)
            for i in range(HALVES):
                await producer.send_in_transaction(Message("Killed", f"h-{i}", keys=f"h-{i}"), lambda m, a: LocalTransactionState.UNKNOWN)
            async with Admin(namesrv) as admin:
                assert len(await admin.pending_transactions("Killed")) == HALVES
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
            remoting_client.close_connection(addr)

            answering = True
            proc = start_broker(store_dir, namesrv_port, port, log_path, 1000)
            await wait_serving(remoting_client, addr, proc)
            with trio.fail_after(60):
                while sum(checks.values()) < HALVES:
                    await trio.sleep(0.1)
            async with Admin(namesrv) as admin:
                with trio.fail_after(30):
                    while await admin.pending_transactions("Killed"):
                        await trio.sleep(0.2)
            await trio.sleep(2.5)  # two more passes: no half is checked again; positions saved
            stored = await read_topic(remoting_client, addr, "Killed")
            keys = collections.Counter(m.properties["KEYS"] for m in stored)
            committed = {f"c-{i}" for i in range(20)} | {f"h-{i}" for i in range(HALVES) if i % 3}
            assert set(keys) == committed and set(keys.values()) == {1}  # none lost, nothing twice
            assert set(checks) == {f"h-{i}" for i in range(HALVES)} and set(checks.values()) == {1}

            # killed again once everything is resolved: the restart checks nothing and writes nothing (#2117)
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
            remoting_client.close_connection(addr)
            proc = start_broker(store_dir, namesrv_port, port, log_path, 1000)
            await wait_serving(remoting_client, addr, proc)
            await trio.sleep(3)
            assert sum(checks.values()) == HALVES
            assert len(await read_topic(remoting_client, addr, "Killed")) == len(stored)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(30)
