"""Orderly consumption support: LOCK_BATCH_MQ (41) / UNLOCK_BATCH_MQ (42) (spec 4.4, 7.7).

Per consumer group, a message queue is locked by one client id. A lock is granted when the queue is unlocked, its
lock expired (60 s without renewal, RocketMQ's rocketmq.broker.rebalance.lockMaxLiveTime), or already held by the
same client; every grant refreshes it. Unlock drops the entries held by that client.
"""

from __future__ import annotations

import json
from typing import Any

import trio

from pyrmq.kernel.hookspecs import hookimpl
from pyrmq.kernel.types import Processor
from pyrmq.kernel.kernel import Kernel
from pyrmq.plugins.broker.core import ROLE, register_feature
from pyrmq.remoting import fastjson
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.validation import body_problem

LOCK_MAX_LIVE_TIME = 60.0

QueueKey = tuple[str, str, int]  # topic, brokerName, queueId


def _queue_key(mq: dict[str, Any]) -> QueueKey:
    return (str(mq["topic"]), str(mq["brokerName"]), int(mq["queueId"]))


def _queue_json(key: QueueKey) -> dict[str, Any]:
    return {"brokerName": key[1], "queueId": key[2], "topic": key[0]}


class RebalanceLockManager:
    def __init__(self, max_live_time: float = LOCK_MAX_LIVE_TIME) -> None:
        self.max_live_time = max_live_time
        self.table: dict[str, dict[QueueKey, tuple[str, float]]] = {}

    def try_lock(self, group: str, queues: list[QueueKey], client_id: str, now: float) -> list[QueueKey]:
        locks = self.table.setdefault(group, {})
        granted = []
        for key in queues:
            holder = locks.get(key)
            if holder is None or holder[0] == client_id or now - holder[1] > self.max_live_time:
                locks[key] = (client_id, now)
                granted.append(key)
        return granted

    def unlock(self, group: str, queues: list[QueueKey], client_id: str) -> None:
        locks = self.table.get(group, {})
        for key in queues:
            holder = locks.get(key)
            if holder is not None and holder[0] == client_id:
                del locks[key]


def _parse(request: RemotingCommand) -> tuple[str, str, list[QueueKey]]:
    data = fastjson.loads(request.body_bytes())
    return str(data["consumerGroup"]), str(data["clientId"]), [_queue_key(mq) for mq in data.get("mqSet") or []]


class LockProcessor:
    """LOCK_BATCH_MQ / UNLOCK_BATCH_MQ over the broker's lock table; registered as a plugin."""

    def __init__(self, manager: RebalanceLockManager) -> None:
        self.manager = manager

    @hookimpl(trylast=True)
    def pyrmq_register_processors(self, role: str) -> dict[int, Processor] | None:
        return {RequestCode.LOCK_BATCH_MQ: self.lock, RequestCode.UNLOCK_BATCH_MQ: self.unlock} if role == ROLE else None

    async def lock(self, connection: Any, request: RemotingCommand) -> RemotingCommand:
        try:
            group, client_id, queues = _parse(request)
        except (ValueError, KeyError, TypeError) as exc:
            return request.make_response(ResponseCode.SYSTEM_ERROR, f"bad LockBatchRequestBody: {body_problem(exc)}")
        granted = self.manager.try_lock(group, queues, client_id, trio.current_time())
        body = json.dumps({"lockOKMQSet": [_queue_json(k) for k in granted]}).encode()
        return request.make_response(ResponseCode.SUCCESS, body=body)

    async def unlock(self, connection: Any, request: RemotingCommand) -> RemotingCommand:
        try:
            group, client_id, queues = _parse(request)
        except (ValueError, KeyError, TypeError) as exc:
            return request.make_response(ResponseCode.SYSTEM_ERROR, f"bad UnlockBatchRequestBody: {body_problem(exc)}")
        self.manager.unlock(group, queues, client_id)
        return request.make_response(ResponseCode.SUCCESS)


@hookimpl(trylast=True)
def pyrmq_configure(kernel: Kernel) -> None:
    register_feature(kernel, "broker.locks", lambda ctx: LockProcessor(RebalanceLockManager()))
