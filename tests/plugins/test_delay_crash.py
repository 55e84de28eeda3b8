"""A broker killed with SIGKILL and restarted with pending delayed and timer messages delivers each exactly once.

A real `pyrmq dev` subprocess on free ports, real time, short custom levels; delayOffset.json and the timer
snapshot are never written before the kill (flush intervals of 10 minutes), so only the per-delivery progress
(delayOffset.progress, the wheel's done log) stands between the restart and duplicates.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import trio

from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.store.format import decode_messages, encode_properties


def start_broker(store_dir, namesrv_port, port, log_path):
    cmd = [sys.executable, "-m", "pyrmq", "--no-entry-points", "--log-level", "INFO", "dev", "--dashboard-port", "0", "--store-dir", str(store_dir),
           "--namesrv-port", str(namesrv_port), "--port", str(port),
           "--set", "broker.messageDelayLevel=1s 6s", "--set", "broker.flushDelayOffsetInterval=600000",
           "--set", "broker.timerFlushIntervalMs=600000"]
    log = open(log_path, "ab")
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONUNBUFFERED="1"))


def send(topic, body, props):
    fields = {"a": "pg", "b": topic, "c": "TBW102", "d": 1, "e": 0, "f": 0, "g": int(time.time() * 1000), "h": 0,
              "i": encode_properties(props), "j": 0, "k": False}
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, fields, body)


def pull(topic, offset):
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, {
        "consumerGroup": "g", "topic": topic, "queueId": "0", "queueOffset": str(offset), "maxMsgNums": "32",
        "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0",
    })


async def wait_serving(client, addr, proc):
    with trio.fail_after(30):
        while True:
            assert proc.poll() is None, "the broker exited"
            try:
                r = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": "TC", "queueId": "0"}), timeout=1)
                if r.code == ResponseCode.SUCCESS:
                    return
            except Exception:
                pass
            await trio.sleep(0.1)


async def read_topic(client, addr, topic="TC"):
    out, offset = [], 0
    while True:
        r = await client.invoke(addr, pull(topic, offset))
        if r.code != ResponseCode.SUCCESS:
            return out
        out.extend(decode_messages(r.body_bytes()))
        offset = int(r.ext_fields["nextBeginOffset"])


async def test_sigkill_and_restart_delivers_each_delayed_and_timer_message_once(tmp_path, remoting_client, free_port,
                                                                                broker_port):
    store_dir, log_path = tmp_path / "store", tmp_path / "broker.log"
    namesrv_port = free_port()
    port = broker_port(namesrv_port)
    addr = f"127.0.0.1:{port}"
    proc = start_broker(store_dir, namesrv_port, port, log_path)
    try:
        await wait_serving(remoting_client, addr, proc)
        expected = set()
        for i in range(5):
            for kind, props in (("d1", {"DELAY": "1"}), ("t1", {"TIMER_DELAY_SEC": "1"}),
                                ("d2", {"DELAY": "2"}), ("t6", {"TIMER_DELAY_SEC": "6"})):
                key = f"{kind}-{i}"
                r = await remoting_client.invoke(addr, send("TC", key.encode(), dict(props, UNIQ_KEY=key)))
                assert r.code == ResponseCode.SUCCESS, r.remark
                expected.add(key)
        with trio.fail_after(15):
            while len(await read_topic(remoting_client, addr)) < 10:
                await trio.sleep(0.1)
        early = {m.properties["UNIQ_KEY"] for m in await read_topic(remoting_client, addr)}
        assert early == {k for k in expected if k[:2] in ("d1", "t1")}
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        remoting_client.close_connection(addr)
        assert not (store_dir / "config" / "delayOffset.json").exists()
        assert not (store_dir / "timerwheel" / "snapshot").exists()

        proc = start_broker(store_dir, namesrv_port, port, log_path)
        await wait_serving(remoting_client, addr, proc)
        with trio.fail_after(20):
            while len(await read_topic(remoting_client, addr)) < 20:
                await trio.sleep(0.2)
        await trio.sleep(1.5)  # anything repeated would have arrived by now
        keys = [m.properties["UNIQ_KEY"] for m in await read_topic(remoting_client, addr)]
        assert sorted(keys) == sorted(expected)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    assert (store_dir / "config" / "delayOffset.json").exists()  # written at the clean shutdown
