"""Rebalance: which queues of its topics a push consumer holds (Java ``RebalanceImpl``; spec 4.4, 7.4, 7.7, 7.10).

At start, every 20 s and when a broker says the group changed, for each subscribed topic: the topic's readable
queues and the group's client ids (GET_CONSUMER_LIST_BY_GROUP) go through the allocation strategy; queues no longer
ours are dropped after committing their offset (orderly: after the message in progress and before releasing the
broker lock), new ones start at the committed offset or where ``consume_from`` says. Orderly consumers lock each
new queue on its broker first and renew every lock every 20 s; a refused lock is tried again after 1 s.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Iterable
from typing import TYPE_CHECKING

import trio

from pyrmq.client import api
from pyrmq.client.consumer import ConsumeFrom
from pyrmq.client.errors import BrokerError
from pyrmq.client.message import MessageQueue
from pyrmq.client.process_queue import BatchProcessQueue, ProcessQueue
from pyrmq.remoting.errors import RemotingError
from pyrmq.remoting.vocabulary import RETRY_GROUP_TOPIC_PREFIX

if TYPE_CHECKING:  # pragma: no cover
    from pyrmq.client.push_consumer import PushConsumer

__all__ = ["Rebalancer", "LOCK_RETRY_DELAY"]

log = logging.getLogger("pyrmq.client.consumer")

LOCK_RETRY_DELAY = 1.0


class Rebalancer:
    def __init__(self, consumer: PushConsumer) -> None:
        self.c = consumer
        self._wakeup = trio.Event()
        self._round_done = trio.Event()

    def wake(self) -> None:
        self._wakeup.set()

    async def wait_round(self) -> None:
        """Wait for the end of the next rebalance round."""
        if self._round_done.is_set():
            self._round_done = trio.Event()
        await self._round_done.wait()

    async def run(self) -> None:
        while True:
            with trio.move_on_after(self.c.rebalance_interval):
                await self._wakeup.wait()
            self._wakeup = trio.Event()
            await self.rebalance_all()

    async def rebalance_all(self) -> None:
        retry_later = False
        for topic in list(self.c.subscriptions):
            try:
                retry_later |= await self._rebalance_topic(topic)
            except Exception as exc:  # noqa: BLE001 - try again next round
                log.warning("%s: rebalance of %s failed: %s", self.c.group, topic, exc)
                retry_later = True
        for mq in [mq for mq in self.c.process_queues if mq.topic not in self.c.subscriptions]:
            await self.drop(mq, self.c.process_queues.pop(mq))
        rebalanced, self._round_done = self._round_done, trio.Event()
        rebalanced.set()
        if retry_later:
            self.c.instance.spawn(self._wake_after, LOCK_RETRY_DELAY)

    async def _wake_after(self, delay: float) -> None:
        await trio.sleep(delay)
        self.wake()

    async def _rebalance_topic(self, topic: str) -> bool:
        """Returns True when something should be tried again soon (a queue lock refused)."""
        mq_all = self.c.topic_queues.get(topic)
        if not mq_all:
            route = await self.c.instance.update_route(topic)
            mq_all = self.c.topic_queues.get(topic) or (route.subscribe_queues() if route else [])
            if mq_all:
                self.c.topic_queues[topic] = mq_all
        if not mq_all:
            # the broker creates %RETRY%<group> on our first heartbeat and registers it a moment later: look again
            # soon rather than at the next 20 s round (a topic nobody created yet waits for the route refresh)
            return topic.startswith(RETRY_GROUP_TOPIC_PREFIX) and time.monotonic() - self.c._started_at < 30
        if self.c.clustering:
            cids = await self._consumer_ids(topic)
            if not cids:
                return True
            mine = set(self.c.allocate(self.c.group, self.c.client_id, sorted(mq_all), sorted(cids)))
        else:
            mine = set(mq_all)
        return await self._update_process_queues(topic, mine)

    async def _consumer_ids(self, topic: str) -> list[str]:
        route = self.c.instance.routes.get(topic)
        names = [b.broker_name for b in route.broker_datas] if route else []
        for name in names:
            addr = self.c.instance.broker_addr(name, master_only=False)
            if addr is None:
                continue
            try:
                ids = await api.consumer_ids(self.c.instance, addr, self.c.group)
            except RemotingError:
                continue
            if ids:
                return ids
        return []

    async def _update_process_queues(self, topic: str, mine: set[MessageQueue]) -> bool:
        for mq in [mq for mq in self.c.process_queues if mq.topic == topic]:
            pq = self.c.process_queues[mq]
            if mq not in mine or (pq.pull_expired() and not pq.pull_task_running):
                del self.c.process_queues[mq]
                await self.drop(mq, pq)
        retry_later = False
        new = []
        for mq in sorted(mine - set(self.c.process_queues)):
            if self.c.orderly and self.c.clustering and not await self._lock_one(mq):
                retry_later = True
                continue
            self.c.offset_store.remove(mq)
            new.append(mq)
        # where each new queue starts: asked of the brokers all at once (one round trip, not one per queue), and
        # the queues start pulling once all are known (as Java dispatches its pull requests after the loop)
        offsets: dict[MessageQueue, int] = {}

        async def find(mq: MessageQueue) -> None:
            try:
                offsets[mq] = await self._pull_from_where(mq)
            except Exception as exc:  # noqa: BLE001
                log.warning("%s: cannot find where to start %s: %s", self.c.group, mq, exc)

        if len(new) == 1:
            await find(new[0])
        elif new:
            async with trio.open_nursery() as nursery:
                for mq in new:
                    nursery.start_soon(find, mq)
        for mq in new:
            offset = offsets.get(mq)
            if offset is None:
                retry_later = True
                continue
            pq = ProcessQueue() if self.c.orderly else BatchProcessQueue()
            pq.next_offset = offset
            if self.c.orderly and self.c.clustering:
                pq.locked = True
                pq.last_lock_time = time.monotonic()
            self.c.process_queues[mq] = pq
            log.info("%s: %s now consumes %s from offset %d", self.c.group, self.c.client_id, mq, offset)
            self.c.start_queue(mq, pq)
        return retry_later

    async def drop(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        """Stop a queue this consumer no longer owns: commit its offset (and unlock it, orderly) first."""
        log.info("%s: %s drops %s", self.c.group, self.c.client_id, mq)
        if self.c.orderly and self.c.clustering:
            # the message in progress finishes and records its offset before the queue is marked dropped, the
            # offset committed and the broker lock released (see _drop_orderly)
            self.c.instance.spawn(self._drop_orderly, mq, pq)
            return
        pq.dropped = True
        pq.has_messages.set()
        await self._commit_and_forget(mq)

    async def _drop_orderly(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        # The queue is marked dropped only once its consume lock is ours: a message the listener is consuming right
        # now still records its offset (a dropped queue records none, so a reset cannot be undone by a late
        # commit), and that offset is what the next owner starts from. Marked earlier, the message finished by
        # this consumer was consumed again by the next one. trio.Lock is fair: the queue's task, once it lets
        # go, waits behind us and then sees the queue dropped.
        async with pq.consume_lock:
            pq.dropped = True
            pq.has_messages.set()
            await self._commit_and_forget(mq)
            await self.unlock([mq])

    async def _commit_and_forget(self, mq: MessageQueue) -> None:
        if self.c.clustering:
            try:
                await self.c.offset_store.persist_one(mq)
            except Exception as exc:  # noqa: BLE001
                log.warning("%s: committing %s failed: %s", self.c.group, mq, exc)
            self.c.offset_store.remove(mq)

    async def _pull_from_where(self, mq: MessageQueue) -> int:
        """The committed offset, else where ``consume_from`` says (spec 7.5)."""
        offset = await self.c.offset_store.read_store(mq)
        if offset >= 0:
            return offset
        is_retry = mq.topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
        if self.c.consume_from is ConsumeFrom.FIRST_OFFSET:
            return 0
        addr = await self.c.instance.broker_addr_for(mq)
        if self.c.consume_from is ConsumeFrom.LAST_OFFSET:
            return 0 if is_retry else await api.max_offset(self.c.instance, addr, mq)
        if is_retry:
            return await api.max_offset(self.c.instance, addr, mq)
        return await api.search_offset(self.c.instance, addr, mq, self.c.consume_timestamp)

    # -- orderly locks (spec 4.4, 7.7) ---------------------------------------------------------------------------

    async def _lock_one(self, mq: MessageQueue) -> bool:
        addr = self.c.instance.broker_addr(mq.broker_name)
        if addr is None:
            return False
        try:
            locked = await api.lock_batch(self.c.instance, addr, self.c.group, [mq])
        except (RemotingError, BrokerError) as exc:
            log.info("%s: locking %s failed: %s", self.c.group, mq, exc)
            return False
        return mq in locked

    def _by_broker(self) -> dict[str, list[MessageQueue]]:
        table: dict[str, list[MessageQueue]] = defaultdict(list)
        for mq, pq in self.c.process_queues.items():
            if not pq.dropped:
                table[mq.broker_name].append(mq)
        return table

    async def lock_all(self) -> None:
        """LOCK_BATCH_MQ for every held queue, broker by broker; queues refused are paused (spec 7.7)."""
        for broker_name, mqs in self._by_broker().items():
            addr = self.c.instance.broker_addr(broker_name)
            if addr is None:
                continue
            try:
                locked = await api.lock_batch(self.c.instance, addr, self.c.group, mqs)
            except (RemotingError, BrokerError) as exc:
                log.info("%s: renewing locks on %s failed: %s", self.c.group, broker_name, exc)
                continue
            now = time.monotonic()
            for mq in mqs:
                pq = self.c.process_queues.get(mq)
                if pq is None:
                    continue
                if mq in locked:
                    pq.locked, pq.last_lock_time = True, now
                else:
                    pq.locked = False

    async def lock_loop(self) -> None:
        await trio.sleep(1.0)
        while True:
            await self.lock_all()
            await trio.sleep(self.c.lock_interval)

    async def unlock(self, mqs: Iterable[MessageQueue]) -> None:
        table: dict[str, list[MessageQueue]] = defaultdict(list)
        for mq in mqs:
            table[mq.broker_name].append(mq)
        for broker_name, group_mqs in table.items():
            addr = self.c.instance.broker_addr(broker_name)
            if addr is not None:
                try:
                    await api.unlock_batch(self.c.instance, addr, self.c.group, group_mqs)
                except (RemotingError, BrokerError) as exc:
                    log.info("%s: unlocking on %s failed: %s", self.c.group, broker_name, exc)
            for mq in group_mqs:
                pq = self.c.process_queues.get(mq)
                if pq is not None:
                    pq.locked = False
