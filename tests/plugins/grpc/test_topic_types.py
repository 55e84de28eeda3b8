"""RocketMQ 5.x topic message types: the ``message.type`` attribute set by UPDATE_AND_CREATE_TOPIC's ``attributes``
field (as ``mqadmin updateTopic -a +message.type=FIFO`` sends it) and by ``pyrmq admin topic create --type``, kept in
topics.json, listed by GET_ALL_TOPIC_CONFIG."""

from __future__ import annotations

import json
import subprocess
import sys

import trio

from pyrmq.client import Admin
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand


def create(topic: str, attributes: str | None) -> RemotingCommand:
    ext = {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": "2", "writeQueueNums": "2", "perm": "6",
           "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"}
    if attributes is not None:
        ext["attributes"] = attributes
    return RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, ext)


async def test_the_attributes_field_sets_checks_and_removes_the_message_type(grpc_dev, remoting_client):
    dev = await grpc_dev()
    topics = dev.endpoint.ctx.topics
    answer = await remoting_client.invoke(dev.broker, create("Typed", "+message.type=FIFO"))
    assert answer.code == ResponseCode.SUCCESS
    assert topics.get("Typed").attributes == {"message.type": "FIFO"}
    # an update without attributes keeps them; another value replaces; "-" removes (NORMAL again)
    assert (await remoting_client.invoke(dev.broker, create("Typed", None))).code == ResponseCode.SUCCESS
    assert topics.get("Typed").attributes == {"message.type": "FIFO"}
    assert (await remoting_client.invoke(dev.broker, create("Typed", "+message.type=MIXED"))).code == ResponseCode.SUCCESS
    assert topics.get("Typed").attributes == {"message.type": "MIXED"}
    assert (await remoting_client.invoke(dev.broker, create("Typed", "-message.type"))).code == ResponseCode.SUCCESS
    assert topics.get("Typed").attributes == {}
    for bad, words in (("+message.type=LIFO", "LIFO"), ("+queue.type=x", "queue.type"), ("message.type=FIFO", "+")):
        refused = await remoting_client.invoke(dev.broker, create("Typed", bad))
        assert refused.code == ResponseCode.SYSTEM_ERROR and words in refused.remark, (bad, refused.remark)
    assert (await remoting_client.invoke(dev.broker, create("Typed", "+message.type=DELAY"))).code == ResponseCode.SUCCESS
    listed = await remoting_client.invoke(dev.broker, RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG, {}))
    assert json.loads(listed.body_bytes())["topicConfigTable"]["Typed"]["attributes"] == {"message.type": "DELAY"}
    saved = json.loads((dev.endpoint.ctx.settings.store_root / "config" / "topics.json").read_text())
    assert saved["topicConfigTable"]["Typed"]["attributes"] == {"message.type": "DELAY"}
    async with Admin(dev.namesrv) as admin:
        assert await admin.topic_attributes("Typed") == {"message.type": "DELAY"}


async def test_pyrmq_admin_topic_create_type(grpc_dev):
    dev = await grpc_dev()
    out = await trio.to_thread.run_sync(lambda: subprocess.run(
        [sys.executable, "-m", "pyrmq", "admin", "topic", "create", "-n", dev.namesrv, "--topic", "CliTx", "-q", "2",
         "--type", "transaction"], capture_output=True, text=True, timeout=60))
    assert out.returncode == 0, out.stderr
    assert dev.endpoint.ctx.topics.get("CliTx").attributes == {"message.type": "TRANSACTION"}
