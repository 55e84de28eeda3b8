"""Fixtures of the client tests: `pyrmq dev` (name server + broker) in-process on real sockets, and helpers."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import attrs
import pytest
import trio

from pyrmq.client import Admin

_names = itertools.count(1)

#: every delay level is one second, so retries come back quickly
FAST_DELAY_LEVELS = " ".join(["1s"] * 18)


@attrs.define
class Dev:
    kernel: Any
    namesrv: str
    broker: str

    async def create_topic(self, topic: str, queues: int = 4, **kwargs: Any) -> None:
        async with Admin(self.namesrv) as admin:
            await admin.create_topic(topic, queues, **kwargs)


async def wait_registered(namesrv: str, brokers: int = 1, timeout: float = 10.0) -> None:
    async with Admin(namesrv) as admin:
        with trio.fail_after(timeout):
            while len((await admin.cluster_info()).brokers) < brokers:
                await trio.sleep(0.02)


@pytest.fixture
async def dev(start_role) -> Dev:
    kernel = await start_role("dev", {"broker.messageDelayLevel": FAST_DELAY_LEVELS})
    namesrv = kernel.listening["namesrv"]
    await wait_registered(namesrv)
    return Dev(kernel, namesrv, kernel.listening["broker"])


@pytest.fixture
def name(request) -> Callable[[str], str]:
    """Unique topic/group names per test: ``name("T")`` -> ``T_test_x_3``."""
    base = "".join(c if c.isalnum() else "_" for c in request.node.name)[:60]

    def make(prefix: str) -> str:
        return f"{prefix}_{base}_{next(_names)}"

    return make


async def wait_until(predicate: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    with trio.move_on_after(timeout):
        while not predicate():
            await trio.sleep(0.02)
        return
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")
