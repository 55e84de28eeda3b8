"""`pyrmq dev` in-process on real sockets for the POP tests, with raw requests to create topics and groups and to
send messages (RocketMQ's SEND_MESSAGE, UPDATE_AND_CREATE_TOPIC, UPDATE_AND_CREATE_SUBSCRIPTIONGROUP)."""

from __future__ import annotations

from typing import Any

import pytest

from pyrmq.plugins.broker.core import BROKER
from pyrmq.remoting.command import RemotingCommand

from . import popclient
from .popclient import PopClient


class PopBroker:
    """One running broker (``kernel``) and a remoting client to it."""

    def __init__(self, kernel: Any, client: Any) -> None:
        self.kernel = kernel
        self.client = client
        self.addr = kernel.listening["broker"]
        self.namesrv = kernel.listening.get("namesrv", "")
        self.ctx = kernel.state.get(BROKER)
        self.pop_service: Any = kernel.plugin("pop")

    async def request(self, code: int, ext: dict[str, Any], body: bytes = b"") -> RemotingCommand:
        return await popclient.request(self.client, self.addr, code, ext, body)

    async def topic(self, topic: str, queues: int = 1) -> None:
        await popclient.create_topic(self.client, self.addr, topic, queues)

    async def group(self, group: str, **config: Any) -> None:
        await popclient.create_group(self.client, self.addr, group, **config)

    async def send(self, topic: str, keys: list[str], *, queue_id: int = 0, tags: str | None = None,
                   properties: dict[str, str] | None = None) -> list[int]:
        return await popclient.send(self.client, self.addr, topic, keys, queue_id=queue_id, tags=tags,
                                    properties=properties)

    def consumer(self, group: str, topic: str) -> PopClient:
        return PopClient(self.client, self.addr, group, topic, self.ctx.settings.brokerName)


@pytest.fixture
def start_pop_broker(start_role, remoting_client):
    """``broker = await start_pop_broker({"broker.reviveQueueNum": 2})``: `pyrmq dev` in-process."""

    async def start(overrides: dict[str, Any] | None = None, bundle: str = "dev") -> PopBroker:
        return PopBroker(await start_role(bundle, overrides), remoting_client)

    return start


@pytest.fixture
async def pop_broker(start_pop_broker) -> PopBroker:
    return await start_pop_broker()
