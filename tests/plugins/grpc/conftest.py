"""A `pyrmq dev` in-process with its gRPC endpoint on a free port, and the raw gRPC client."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


class Dev:
    def __init__(self, kernel) -> None:
        self.kernel = kernel
        self.namesrv = kernel.listening["namesrv"]
        self.broker = kernel.listening["broker"]
        self.grpc = kernel.listening["grpc"]
        self.endpoint = kernel.plugin("grpc")

    async def create_topic(self, topic: str, queues: int = 4, message_type: str | None = None) -> None:
        from pyrmq.client import Admin

        async with Admin(self.namesrv) as admin:
            await admin.create_topic(topic, queues, message_type=message_type)

    async def put_group(self, group: str, **config) -> None:
        """A subscription group in RocketMQ's JSON names (``consumeMessageOrderly=True``, ``retryMaxTimes=1``)."""
        from pyrmq.client import Admin

        async with Admin(self.namesrv) as admin:
            await admin.put_group({"groupName": group, **config})


@pytest.fixture
async def grpc_dev(start_role):
    """``await grpc_dev(**overrides)``: a dev role (name server + broker + gRPC endpoint) on free ports."""

    async def start(**overrides):
        settings = {"broker.grpcServerPort": 0, **{f"broker.{k}": v for k, v in overrides.items()}}
        kernel = await start_role("dev", settings)
        for name in ("namesrv", "broker", "grpc"):
            await kernel.wait_listening(name)
        return Dev(kernel)

    return start


@pytest.fixture
async def raw(nursery):
    """``client = await raw(address)``: a raw gRPC connection, closed at teardown."""
    from rawclient import RawClient

    clients = []

    async def connect(address: str) -> RawClient:
        clients.append(await RawClient.connect(nursery, address))
        return clients[-1]

    yield connect
    for client in clients:
        await client.aclose()
