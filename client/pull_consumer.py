"""The pull consumer (Java ``DefaultMQPullConsumer``): you choose the queues and the offsets.

    async with PullConsumer("127.0.0.1:9876", group="audit") as consumer:
        for mq in await consumer.fetch_queues("Orders"):
            offset = await consumer.committed_offset(mq)            # -1 when the group has none
            result = await consumer.pull(mq, "*", max(offset, 0), max_nums=32)
            ...
            await consumer.commit_offset(mq, result.next_begin_offset)

``pull`` answers at once; ``pull(..., block=True)`` is a long poll the broker holds until a message arrives or
``suspend_ms`` passes; ``pull_range`` keeps a window of pulls in flight over a range of offsets and hands out the
raw bodies (bulk readers such as the Spark data source). Offsets are yours: keep them elsewhere, or ``update_offset`` (committed every 5 s and at
shutdown) / ``commit_offset`` (now) to the broker (clustering) or a local file (broadcasting).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Iterable

import trio

from pyrmq.client import api, pipelined_pull
from pyrmq.client.config import ClientConfig
from pyrmq.client.consumer import ConsumeFrom, ConsumerCore, MessageModel, Subscription, selector_parts
from pyrmq.client.message_selector import MessageSelector
from pyrmq.client.errors import TopicNotFoundError
from pyrmq.client.instance import ClientInstance
from pyrmq.client.message import MessageQueue, PullResult
from pyrmq.client.offset_store import LocalOffsetStore, OffsetStore, RemoteOffsetStore
from pyrmq.client.pipelined_pull import PULL_WINDOW, RawPullBatch
from pyrmq.remoting.vocabulary import PullSysFlag

__all__ = ["PullConsumer"]

log = logging.getLogger("pyrmq.client.consumer")


class PullConsumer(ConsumerCore):
    consume_type = "CONSUME_ACTIVELY"

    def __init__(
        self,
        namesrv: str | Iterable[str] | None = None,
        group: str = "pyrmq_pull_consumer",
        *,
        config: ClientConfig | None = None,
        instance: ClientInstance | None = None,
        message_model: MessageModel | str = MessageModel.CLUSTERING,
        offset_store_dir: str | os.PathLike[str] | None = None,
        topics: Iterable[str] = (),
        credentials: tuple[str, str] | None = None,
    ) -> None:
        super().__init__(namesrv, group, config=config, instance=instance, message_model=message_model,
                         consume_from=ConsumeFrom.LAST_OFFSET, credentials=credentials)
        for topic in topics:
            self.subscriptions[topic] = Subscription.build(topic)
        self.offset_store: OffsetStore = (
            RemoteOffsetStore(self.instance, self.group) if self.clustering
            else LocalOffsetStore(self.instance, self.group, offset_store_dir)
        )

    async def _on_start(self, nursery: trio.Nursery) -> None:
        await self._register()
        await self.instance.send_heartbeat()
        nursery.start_soon(self._persist_loop)

    async def _on_shutdown(self) -> None:
        try:
            await self.offset_store.persist()
        finally:
            await self._unregister()

    async def _persist_loop(self) -> None:
        while True:
            await trio.sleep(self.instance.config.persist_consumer_offset_interval)
            try:
                await self.offset_store.persist()
            except Exception:  # noqa: BLE001
                log.exception("%s: committing offsets failed", self.group)

    # -- queues ----------------------------------------------------------------------------------------------

    async def fetch_queues(self, topic: str) -> list[MessageQueue]:
        """The readable queues of ``topic`` (Java fetchSubscribeMessageQueues); the topic's route is kept fresh."""
        self._check_started()
        if topic not in self.subscriptions:
            self.subscriptions[topic] = Subscription.build(topic)
            self.instance.heartbeat_soon()
        route = await self.instance.update_route(topic)
        if route is None:
            raise TopicNotFoundError(topic)
        queues = route.subscribe_queues()
        self.topic_queues[topic] = queues
        return queues

    async def _addr(self, mq: MessageQueue) -> str:
        return self.instance.pull_addr(mq) or await self.instance.broker_addr_for(mq, master_only=False)

    async def pull(
        self,
        mq: MessageQueue,
        expression: str | MessageSelector = "*",
        offset: int = 0,
        max_nums: int = 32,
        *,
        expression_type: str = "TAG",
        sql: str | None = None,
        block: bool = False,
        suspend_ms: int = 20000,
        timeout: float | None = None,
    ) -> PullResult:
        """PULL_MESSAGE from ``offset`` with a filter: a tag expression (re-checked client side), ``sql=`` or a
        MessageSelector (evaluated by the broker, which needs ``enablePropertyFilter``)."""
        self._check_started()
        expression, expression_type = selector_parts(expression, expression_type, sql)
        sub = Subscription.build(mq.topic, expression, expression_type)
        sys_flag = int(PullSysFlag.SUBSCRIPTION | (PullSysFlag.SUSPEND if block else 0))
        if timeout is None:
            timeout = suspend_ms / 1000 + 10 if block else self.instance.config.api_timeout + 7
        return await api.pull(
            self.instance, await self._addr(mq), mq, self.group, offset, max_nums=max_nums, sys_flag=sys_flag,
            suspend_ms=suspend_ms if block else 0, sub_version=sub.version, subscription=sub.expression,
            expression_type=sub.expression_type, timeout=timeout, tags=sub.tags or None,
        )

    async def pull_range(
        self,
        mq: MessageQueue,
        start: int,
        end: int,
        deliver: Callable[[RawPullBatch], Awaitable[bool]],
        *,
        expression: str = "*",
        expression_type: str = "TAG",
        window: int = PULL_WINDOW,
        timeout: float | None = None,
    ) -> None:
        """Queue offsets ``[start, end)`` of ``mq`` with ``window`` pulls in flight, undecoded: ``await
        deliver(batch)`` for each answer in offset order (stop early by returning False). For bulk readers that
        decode record bodies themselves (:mod:`pyrmq.client.pipelined_pull`); nothing is committed."""
        self._check_started()
        await pipelined_pull.pull_range(
            self.instance, await self._addr(mq), mq, start, end, deliver, group=self.group, subscription=expression,
            expression_type=expression_type, window=window,
            timeout=self.instance.config.api_timeout + 7 if timeout is None else timeout,
        )

    # -- offsets ---------------------------------------------------------------------------------------------

    async def committed_offset(self, mq: MessageQueue) -> int:
        """The offset the group committed for ``mq`` (broker or local file); -1 when none."""
        self._check_started()
        return await self.offset_store.read_store(mq)

    def update_offset(self, mq: MessageQueue, offset: int) -> None:
        """Remember ``offset`` (the next one to consume); committed within 5 s and at shutdown."""
        self.offset_store.update(mq, offset, increase_only=False)

    async def commit_offset(self, mq: MessageQueue, offset: int) -> None:
        """Commit ``offset`` now."""
        self._check_started()
        self.offset_store.update(mq, offset, increase_only=False)
        await self.offset_store.persist_one(mq)

    async def min_offset(self, mq: MessageQueue) -> int:
        return await api.min_offset(self.instance, await self._addr(mq), mq)

    async def max_offset(self, mq: MessageQueue) -> int:
        return await api.max_offset(self.instance, await self._addr(mq), mq)

    async def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        return await api.search_offset(self.instance, await self._addr(mq), mq, timestamp_ms)
