"""`pyrmq store dump` on a store written by a running broker."""

from __future__ import annotations

import subprocess
import sys

from pyrmq.remoting.codes import RequestCode
from pyrmq.remoting.command import RemotingCommand


def dump(*args):
    return subprocess.run([sys.executable, "-m", "pyrmq", "store", "dump", *map(str, args)], capture_output=True, text=True, timeout=60)


async def test_dump_and_verify_a_broker_store(start_role, remoting_client, tmp_path):
    store = tmp_path / "s"
    kernel = await start_role("dev", {"broker.storePathRootDir": str(store)})
    addr = kernel.listening["broker"]
    await remoting_client.invoke(addr, RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
        "topic": "Dumped", "defaultTopic": "TBW102", "readQueueNums": "1", "writeQueueNums": "1", "perm": "6", "topicFilterType": "SINGLE_TAG"}))
    fields = {"a": "pg", "b": "Dumped", "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "0", "h": "0", "i": "KEYS\x01dump-key"}
    for _ in range(3):
        assert (await remoting_client.invoke(addr, RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, fields, b"payload"))).code == 0
    kernel.request_stop()
    import trio

    await trio.sleep(0.3)
    out = await trio.to_thread.run_sync(lambda: dump(store, "--verify"))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Dumped" in out.stdout and "00000000000000000000" in out.stdout

    not_a_store = await trio.to_thread.run_sync(lambda: dump(tmp_path))
    assert not_a_store.returncode == 2 and "not a store directory" in not_a_store.stdout
