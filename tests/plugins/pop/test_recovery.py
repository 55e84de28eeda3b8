"""POP's delivery state read back from the store: after a restart and after a kill -9 (a `pyrmq dev` subprocess),
every unacked message comes back once its invisible time is over, no acked message ever again, never-popped messages
are popped as usual, and a FIFO queue stays blocked until its batch is visible again. Recovery reads each revive
queue from its first live record (the ``rof`` record), which compaction keeps near the end."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import trio

from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand

from . import popclient
from .popclient import PopClient

TOPIC = "PopT"
GROUP = "GPOP"
FIFO_TOPIC = "FifoT"
FIFO_GROUP = "GFIFO"


async def wait_for(predicate, what: str, timeout: float = 30.0) -> None:
    with trio.move_on_after(timeout):
        while not predicate():
            await trio.sleep(0.02)
        return
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


async def drain(c: PopClient, *, invisible: int = 60_000, quiet_ms: int = 1500, **kw) -> list:
    """Pop (and ack) until a long poll of ``quiet_ms`` finds nothing more."""
    out = []
    while True:
        answer = await c.pop(16, invisible=invisible, poll=quiet_ms, **kw)
        if answer.code != ResponseCode.SUCCESS:
            assert answer.code == ResponseCode.POLLING_TIMEOUT, (answer.code, answer.response.remark)
            return out
        for m in answer.messages:
            assert (await c.ack(m)).code == ResponseCode.SUCCESS
        out += answer.messages


async def test_the_state_survives_a_restart_and_recovery_starts_at_the_first_live_record(start_pop_broker, tmp_path):
    settings = {"broker.storePathRootDir": str(tmp_path / "pop-store"), "broker.reviveQueueNum": 2}
    a = await start_pop_broker(settings)
    await a.topic(TOPIC, 1)
    c = a.consumer(GROUP, TOPIC)
    await a.send(TOPIC, ["long"])
    long_popped = (await c.pop(1, invisible=4000)).messages[0]  # in flight through the restart
    a.pop_service.revive.compact_records = 10
    for i in range(30):  # popped and acked: records pile up behind the one in flight
        await a.send(TOPIC, [f"k{i}"])
        for m in (await c.pop(4, invisible=60_000)).messages:
            await c.ack(m)
    await a.send(TOPIC, ["never-popped"])
    key = (TOPIC, GROUP, 0, long_popped.handle.ck_queue_offset, long_popped.handle.pop_time)
    first_ro = a.pop_service.ledger.open[key].ro
    a.pop_service.revive.housekeeping()  # what the revive service does every second
    assert a.pop_service.ledger.open[key].ro > first_ro  # compaction wrote it again at its queue's end
    a.kernel.request_stop()
    await wait_for(lambda: a.kernel.nursery is None, "the broker stopped")

    b = await start_pop_broker(settings)
    c = b.consumer(GROUP, TOPIC)
    got = await drain(c, quiet_ms=6000)
    assert sorted(m.key for m in got) == ["long", "never-popped"]  # no acked k<i> again
    back = next(m for m in got if m.key == "long")
    assert back.message.reconsume_times == 1 and int(back.message.properties["1ST_POP_TIME"]) == long_popped.handle.pop_time
    recovery = b.pop_service.recovery
    assert recovery.starts[0] > 0 or recovery.starts[1] > 0  # read from the first live record, not the start
    assert recovery.records < 60


# -- kill -9 -----------------------------------------------------------------------------------------------------------


def start_dev(store_dir, namesrv_port, port, log_path):
    cmd = [sys.executable, "-m", "pyrmq", "--no-entry-points", "--log-level", "INFO", "dev", "--dashboard-port", "0",
           "--store-dir", str(store_dir), "--namesrv-port", str(namesrv_port), "--port", str(port)]
    log = open(log_path, "ab")
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONUNBUFFERED="1"))


async def wait_serving(client, addr, proc) -> None:
    with trio.fail_after(60):
        while True:
            assert proc.poll() is None, "the broker exited"
            try:
                response = await client.invoke(addr, RemotingCommand.request(
                    RequestCode.GET_MAX_OFFSET, {"topic": "TBW102", "queueId": "0"}), timeout=1)
                if response.code == ResponseCode.SUCCESS:
                    return
            except Exception:  # noqa: BLE001 - not listening yet
                pass
            await trio.sleep(0.1)


def stop(proc) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)


async def test_after_a_kill_9_every_unacked_message_comes_back_and_no_acked_one(tmp_path, remoting_client, free_port,
                                                                                 broker_port):
    store_dir, log_path = tmp_path / "store", tmp_path / "broker.log"
    namesrv_port = free_port()
    port = broker_port(namesrv_port)
    addr = f"127.0.0.1:{port}"
    proc = start_dev(store_dir, namesrv_port, port, log_path)
    try:
        await wait_serving(remoting_client, addr, proc)
        await popclient.create_topic(remoting_client, addr, TOPIC, 4)
        await popclient.create_topic(remoting_client, addr, FIFO_TOPIC, 1)
        await popclient.create_group(remoting_client, addr, FIFO_GROUP, consumeMessageOrderly=True)
        keys = {q: [f"q{q}-{i}" for i in range(100)] for q in range(4)}
        for q, ks in keys.items():
            await popclient.send(remoting_client, addr, TOPIC, ks, queue_id=q)
        await popclient.send(remoting_client, addr, FIFO_TOPIC, [f"f{i}" for i in range(6)])
        c = PopClient(remoting_client, addr, GROUP, TOPIC)
        popped = []
        while len(popped) < 300:  # 300 of 400 popped; 100 never popped
            popped += (await c.pop(min(16, 300 - len(popped)), invisible=5000)).messages
        acked = {m.key for m in popped[::2]}
        for m in popped[::2]:
            assert (await c.ack(m)).code == ResponseCode.SUCCESS
        changed = popped[1]
        response, _ = await c.change(changed, 8000)  # comes back later than the others
        assert response.code == ResponseCode.SUCCESS
        unacked = {m.key for m in popped[1::2]}
        never = {k for ks in keys.values() for k in ks} - acked - unacked
        fifo = PopClient(remoting_client, addr, FIFO_GROUP, FIFO_TOPIC)
        batch = await fifo.pop(3, invisible=5000)
        assert batch.keys == ["f0", "f1", "f2"]
        assert (await fifo.ack(batch.messages[0])).code == ResponseCode.SUCCESS
        killed_at = int(time.time() * 1000)
        proc.send_signal(signal.SIGKILL)  # at once: the last records are in the page cache only
        proc.wait(30)
        remoting_client.close_connection(addr)

        proc = start_dev(store_dir, namesrv_port, port, log_path)
        await wait_serving(remoting_client, addr, proc)
        # the FIFO queue is still blocked by its batch (f1, f2 unacked) until its invisible time ends
        early = await fifo.pop(2, invisible=60_000)
        if early.code == ResponseCode.SUCCESS:  # the restart took longer than the invisible time
            assert early.keys == ["f1", "f2"]
        else:
            assert early.code == ResponseCode.POLLING_TIMEOUT
            early = await fifo.pop(2, invisible=60_000, poll=15_000)
            assert early.keys == ["f1", "f2"]
        assert [m.reconsume_times for m in early.messages] == [1, 1]

        got = await drain(c, quiet_ms=10_000)
        keys_back = [m.key for m in got]
        assert len(keys_back) == len(set(keys_back))  # nothing twice
        assert set(keys_back) == unacked | never and not set(keys_back) & acked
        revived = [m for m in got if m.key in unacked]
        assert all(m.message.reconsume_times == 1 for m in revived)
        assert all(int(m.message.properties["1ST_POP_TIME"]) <= killed_at for m in revived)
        changed_back = next(m for m in got if m.key == changed.key)
        assert int(changed_back.handle.pop_time) >= changed.handle.pop_time + 8000  # its changed invisible time held
    finally:
        stop(proc)
