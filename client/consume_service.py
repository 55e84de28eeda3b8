"""Running the listener: concurrently with a bounded number of workers, or orderly one message at a time per queue
(Java ``ConsumeMessageConcurrentlyService`` / ``ConsumeMessageOrderlyService``; spec 7.5-7.7).

A listener is ``async def`` (awaited in a worker task) or a plain function (run in a worker thread, one thread
hop per pulled batch). It returns None/True/``ConsumeResult.SUCCESS`` for success; raising, returning False or
``ConsumeResult.RECONSUME_LATER`` asks for the message again:

* concurrently, clustering: the message goes back to the broker (CONSUMER_SEND_MSG_BACK) whose retry topic
  redelivers it later with ``reconsume_times`` raised; if that request fails the client sends the message to
  ``%RETRY%<group>`` itself (spec 7.6); if that fails too it is consumed again here after 5 s;
* concurrently, broadcasting: dropped (logged), as in Java;
* orderly: retried locally after ``suspend_ms`` (1 s) without skipping; with a finite ``max_reconsume_times`` a
  message that keeps failing ends in the dead-letter queue.
"""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

from pyrmq.client import api
from pyrmq.client.consumer import RETRY_TOPIC_PREFIX, ConsumeResult
from pyrmq.client.message import (
    SYSTEM_PROPERTIES,
    Message,
    MessageExt,
    MessageQueue,
)
from pyrmq.client.process_queue import ProcessQueue
from pyrmq.remoting.vocabulary import MessageProperty

if TYPE_CHECKING:  # pragma: no cover
    from pyrmq.client.push_consumer import PushConsumer

__all__ = ["ConcurrentConsumeService", "OrderlyConsumeService", "ConsumeAbandoned", "is_async_listener"]

log = logging.getLogger("pyrmq.client.consume")

Listener = Callable[[MessageExt], Any]
RETRY_LOCAL_DELAY = 5.0


class ConsumeAbandoned(Exception):
    """Raised by a listener that never got to the message (the consumer is stopping): neither consumed nor failed,
    so its offset is not committed and it is not sent back."""


def is_async_listener(listener: Any) -> bool:
    return inspect.iscoroutinefunction(listener) or inspect.iscoroutinefunction(getattr(listener, "__call__", None))


def _worker_done(consumer: PushConsumer) -> None:
    """A worker left its listener call; the last one wakes a shutdown waiting for them."""
    consumer._busy -= 1
    if not consumer._busy and consumer._idle is not None:
        consumer._idle.set()


def _ok(value: Any) -> bool:
    return value is None or value is True or value is ConsumeResult.SUCCESS


class _Base:
    def __init__(self, consumer: PushConsumer, listener: Listener, workers: int) -> None:
        self.consumer = consumer
        self.listener = listener
        self.is_async = is_async_listener(listener)
        self.workers = max(1, workers)
        self.limiter = trio.CapacityLimiter(self.workers)
        group = consumer.group
        self._retry_topic = RETRY_TOPIC_PREFIX + group

    def restore(self, msg: MessageExt) -> None:
        """A message redelivered from %RETRY%<group> shows its original topic (Java resetRetryAndNamespace)."""
        if msg.topic == self._retry_topic:
            original = msg.properties.get(MessageProperty.RETRY_TOPIC)
            if original:
                msg.topic = original

    async def call_one(self, msg: MessageExt) -> bool:
        """Run the listener on one message; True = consumed."""
        try:
            if self.is_async:
                return _ok(await self.listener(msg))
            return await trio.to_thread.run_sync(self._call_sync, msg, limiter=self.limiter)
        except ConsumeAbandoned:
            raise
        except Exception:
            log.warning("%s: the listener failed on %r", self.consumer.group, msg, exc_info=True)
            return False

    def _call_sync(self, msg: MessageExt) -> bool:
        try:
            return _ok(self.listener(msg))
        except Exception:
            log.warning("%s: the listener failed on %r", self.consumer.group, msg, exc_info=True)
            return False

    def _call_sync_batch(self, msgs: list[MessageExt]) -> tuple[int, list[MessageExt]]:
        return len(msgs), [m for m in msgs if not self._call_sync(m)]

    async def call_batch(self, msgs: list[MessageExt], mq: MessageQueue) -> tuple[int, list[MessageExt]]:
        """Run the listener on a pulled batch of ``mq``: how many messages it handled (fewer than ``msgs`` when the
        consumer stopped before the rest) and the ones it failed."""
        retry = self._retry_topic
        if mq.topic == retry:  # a batch comes from one queue: only a retry queue's messages need restoring
            for m in msgs:
                self.restore(m)
        if not self.is_async:
            return await trio.to_thread.run_sync(self._call_sync_batch, msgs, limiter=self.limiter)
        failed: list[MessageExt] = []
        listener = self.listener
        success = ConsumeResult.SUCCESS
        for m in msgs:
            try:
                r = await listener(m)
            except ConsumeAbandoned:
                return msgs.index(m), failed
            except Exception:
                log.warning("%s: the listener failed on %r", self.consumer.group, m, exc_info=True)
                failed.append(m)
                continue
            if r is not None and r is not True and r is not success:
                failed.append(m)
        return len(msgs), failed

    # -- giving a message back ---------------------------------------------------------------------------------

    async def send_back(self, msg: MessageExt, *, delay_level: int = 0, max_reconsume_times: int | None = None) -> bool:
        """CONSUMER_SEND_MSG_BACK, falling back to a send to %RETRY%<group> (spec 7.6). True when handed over."""
        consumer = self.consumer
        instance = consumer.instance
        max_times = consumer.effective_max_reconsume_times if max_reconsume_times is None else max_reconsume_times
        addr = instance.broker_addr(msg.broker_name)
        try:
            if addr is None:
                raise LookupError(f"no address for broker {msg.broker_name}")
            await api.send_back(instance, addr, msg, consumer.group, delay_level=delay_level, max_reconsume_times=max_times)
            return True
        except Exception as exc:  # noqa: BLE001 - any failure: try the client-side fallback
            log.info("%s: CONSUMER_SEND_MSG_BACK of %s failed (%s); sending to %s instead", consumer.group, msg.msg_id, exc, self._retry_topic)
        props = {k: v for k, v in msg.properties.items() if k not in SYSTEM_PROPERTIES or k == MessageProperty.UNIQ_CLIENT_MESSAGE_ID_KEYIDX}
        props[MessageProperty.RETRY_TOPIC] = msg.properties.get(MessageProperty.RETRY_TOPIC) or msg.topic
        props[MessageProperty.RECONSUME_TIME] = str(msg.reconsume_times + 1)
        props[MessageProperty.MAX_RECONSUME_TIMES] = str(max_times)
        props[MessageProperty.ORIGIN_MESSAGE_ID] = msg.properties.get(MessageProperty.ORIGIN_MESSAGE_ID) or msg.msg_id
        if delay_level >= 0:
            props[MessageProperty.DELAY_TIME_LEVEL] = str(delay_level if delay_level > 0 else 3 + msg.reconsume_times)
        P = MessageProperty
        for k in (P.MIN_OFFSET, P.MAX_OFFSET, P.CONSUME_START_TIMESTAMP, P.CLUSTER):
            props.pop(k, None)
        retry = Message(self._retry_topic, msg.body, tags=msg.tags, keys=msg.keys, flag=msg.flag)
        try:
            await consumer.inner_producer.send_raw(retry, props)
            return True
        except Exception as exc:  # noqa: BLE001
            log.warning("%s: could not give %s back for a retry: %s", consumer.group, msg.msg_id, exc)
            return False


class ConcurrentConsumeService(_Base):
    """Workers take whole pulled batches (up to 32 messages) and call the listener once per message."""

    def __init__(self, consumer: PushConsumer, listener: Listener, workers: int) -> None:
        super().__init__(consumer, listener, workers)
        self._send, self._recv = trio.open_memory_channel[tuple[list[MessageExt], ProcessQueue, MessageQueue]](math.inf)

    async def start(self, nursery: trio.Nursery) -> None:
        for _ in range(self.workers):
            nursery.start_soon(self._worker, self._recv.clone())

    def submit(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        self._send.send_nowait((msgs, pq, mq))

    def queue_started(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        pass

    async def _worker(self, recv: trio.MemoryReceiveChannel) -> None:
        consumer = self.consumer
        store = consumer.offset_store
        async for msgs, pq, mq in recv:
            if pq.dropped or consumer._stopping:
                continue
            consumer._busy += 1
            try:
                handled, failed = await self.call_batch(msgs, mq)
                # the rest was abandoned at shutdown: left for a later delivery
                done = msgs if handled == len(msgs) else msgs[:handled]
                if failed and consumer.clustering:
                    kept = []
                    for m in failed:
                        if not await self.send_back(m):
                            kept.append(m)
                    if kept:
                        consumer.instance.spawn(self._later, kept, pq, mq)
                        kept_ids = {id(m) for m in kept}
                        done = [m for m in done if id(m) not in kept_ids]
                elif failed:
                    log.warning("%s: broadcasting: dropping %d failed message(s)", consumer.group, len(failed))
                offset = pq.remove(done)
                if offset >= 0 and not pq.dropped:
                    store.update(mq, offset, increase_only=True)
                consumer.stats_consumed += handled - len(failed)
            except Exception:
                log.exception("%s: consuming a batch of %s failed", consumer.group, mq)
            finally:
                _worker_done(consumer)
                # a worker waiting for its next batch holds none: 20 idle workers each keeping their last batch
                # alive (~400 KB of messages a pull of 256) kept the consumer's memory out of the CPU's caches
                msgs = done = failed = None  # type: ignore[assignment]

    async def _later(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        await trio.sleep(RETRY_LOCAL_DELAY)
        if not pq.dropped:
            self.submit(msgs, pq, mq)


class OrderlyConsumeService(_Base):
    """One task per queue consumes its messages in offset order, one at a time, while the queue is locked."""

    def __init__(self, consumer: PushConsumer, listener: Listener, workers: int, suspend_ms: int) -> None:
        super().__init__(consumer, listener, workers)
        self.suspend = suspend_ms / 1000

    async def start(self, nursery: trio.Nursery) -> None:
        pass

    def submit(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        pass  # the queue's task wakes up on pq.has_messages

    def queue_started(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        self.consumer.instance.spawn(self._queue_task, mq, pq)

    async def _queue_task(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        consumer = self.consumer
        clustering = consumer.clustering
        max_times = consumer.max_reconsume_times
        while not pq.dropped:
            if not pq.msgs:
                if pq.has_messages.is_set():
                    pq.has_messages = trio.Event()
                await pq.has_messages.wait()
                continue
            if clustering and (not pq.locked or pq.lock_expired()):
                await trio.sleep(0.1)
                continue
            if consumer._stopping:
                return
            pause = False
            async with self.limiter:
                async with pq.consume_lock:
                    if pq.dropped or consumer._stopping:
                        break
                    msgs = pq.take(1)
                    if not msgs:
                        continue
                    msg = msgs[0]
                    self.restore(msg)
                    consumer._busy += 1
                    try:
                        ok = await self.call_one(msg)
                    except ConsumeAbandoned:
                        pq.make_consume_again(msgs)
                        return
                    finally:
                        _worker_done(consumer)
                    if not ok and 0 <= max_times <= msg.reconsume_times:
                        # give up here: to the retry topic with RECONSUME_TIME >= max, so the broker dead-letters it
                        ok = clustering and await self.send_back(msg, delay_level=-1, max_reconsume_times=max_times)
                    if ok:
                        offset = pq.commit()
                        if offset >= 0 and not pq.dropped:
                            consumer.offset_store.update(mq, offset, increase_only=False)
                        consumer.stats_consumed += 1
                    else:
                        msg.reconsume_times += 1
                        pq.make_consume_again(msgs)
                        pause = True
            if pause:
                await trio.sleep(self.suspend)


class ChunkIterator(ConcurrentConsumeService):
    """``async for msg in consumer`` of a concurrent consumer: the pulled batches (up to ``pull_batch_size``
    messages) come through one channel and the loop takes them one message at a time from the current batch, with
    no task, channel hop or event per message. A message counts as consumed when the loop asks for the next one
    (or leaves ``async with`` normally); :meth:`PushConsumer.reconsume_later` marks it failed instead. When the
    loop moves past a batch its consumed messages are removed from the process queue and the offset committed, as
    a listener worker does; its failed ones are given back for a retry (CONSUMER_SEND_MSG_BACK, spec 7.6) from a
    task, so ``__anext__`` only ever waits for the next batch (cancel-safe: ``receive(timeout)``)."""

    def __init__(self, consumer: PushConsumer) -> None:
        super().__init__(consumer, _never_called, 1)
        self.msgs: list[MessageExt] = []
        self.pos = 0
        self.pq: ProcessQueue | None = None
        self.mq: MessageQueue | None = None
        #: the current batch's messages the loop gave back (``reconsume_later``); the rest up to ``pos`` is consumed
        self.failed: list[MessageExt] = []

    async def start(self, nursery: trio.Nursery) -> None:
        pass

    @property
    def current(self) -> MessageExt | None:
        """The message the loop body has now: the last one handed out of the current batch."""
        pos = self.pos
        return self.msgs[pos - 1] if pos else None

    def reconsume_later(self, msg: MessageExt) -> bool:
        """Mark the loop body's message failed (given back when the loop moves past its batch); False when ``msg``
        is not the current message."""
        if msg is None or self.current is not msg:
            return False
        if not any(f is msg for f in self.failed):
            self.failed.append(msg)
        return True

    def __aiter__(self) -> ChunkIterator:
        return self

    async def __anext__(self) -> MessageExt:
        """The current batch's next message (asking for it acknowledges the previous one); at the batch's end,
        :meth:`next` commits it and waits for the next batch."""
        pos = self.pos
        msgs = self.msgs
        if pos < len(msgs) and not self.pq.dropped:
            self.pos = pos + 1
            return msgs[pos]
        return await self.next()

    async def next(self) -> MessageExt:
        msgs = self.msgs
        while True:
            pos = self.pos
            if pos < len(msgs) and not self.pq.dropped:  # a queue rebalanced away: the rest is not ours
                self.pos = pos + 1
                return msgs[pos]
            if msgs:
                self._close_batch()
            try:
                # a batch already here is taken without a trip through the scheduler: the reader hands over the
                # answers of one read together, and a yield between each of them would let it wake for every
                # single answer (a read, a pull sent and an epoll a batch); the loop yields once they are taken
                msgs, pq, mq = self._recv.receive_nowait()
            except trio.WouldBlock:
                try:
                    msgs, pq, mq = await self._recv.receive()
                except (trio.EndOfChannel, trio.ClosedResourceError):
                    raise StopAsyncIteration from None
            except (trio.EndOfChannel, trio.ClosedResourceError):
                raise StopAsyncIteration from None
            if pq.dropped or self.consumer._stopping:
                msgs = []
                continue
            if mq.topic == self._retry_topic:  # a batch comes from one queue
                for m in msgs:
                    self.restore(m)
            self.msgs, self.pos, self.pq, self.mq = msgs, 0, pq, mq

    def _close_batch(self, give_back: bool = True) -> list[MessageExt]:
        """The loop is past the current batch: commit what it consumed and (``give_back``) give its failed messages
        back from a task; returns the failed messages still to give back (clustering). Messages the loop never
        reached stay in the process queue, uncommitted."""
        consumer = self.consumer
        msgs, pos = self.msgs, self.pos
        handled = msgs if pos == len(msgs) else msgs[:pos]  # the batch as put: the process queue forgets it at once
        failed, pq, mq = self.failed, self.pq, self.mq
        self.msgs, self.pos, self.failed = [], 0, []
        if failed:
            failed_ids = {id(m) for m in failed}
            done = [m for m in handled if id(m) not in failed_ids]
            if consumer.clustering:
                if give_back:
                    consumer.instance.spawn(self._give_back, failed, pq, mq)
            else:
                log.warning("%s: broadcasting: dropping %d failed message(s)", consumer.group, len(failed))
                done = handled
        else:
            done = handled
        offset = pq.remove(done)
        if offset >= 0 and not pq.dropped:
            consumer.offset_store.update(mq, offset, increase_only=True)
        consumer.stats_consumed += len(handled) - len(failed)
        return failed if consumer.clustering and not give_back else []

    async def _give_back(self, failed: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        kept = [m for m in failed if not await self.send_back(m)]
        if kept:
            self.consumer.instance.spawn(self._later, kept, pq, mq)
            kept_ids = {id(m) for m in kept}
            failed = [m for m in failed if id(m) not in kept_ids]
        offset = pq.remove(failed)
        if offset >= 0 and not pq.dropped:
            self.consumer.offset_store.update(mq, offset, increase_only=True)

    async def close(self, ok: bool) -> None:
        """At shutdown: acknowledge (``ok``) or fail the message the loop body has, commit the current batch's
        consumed messages, give its failed ones back, and end the iteration."""
        if not ok:
            self.reconsume_later(self.current)
        if self.msgs:
            pq, mq = self.pq, self.mq
            failed = self._close_batch(give_back=False)
            if failed:  # given back here, within the shutdown wait, as a listener worker would
                with trio.move_on_after(self.consumer.shutdown_await):
                    await self._give_back(failed, pq, mq)
        await self._send.aclose()


def _never_called(msg: MessageExt) -> None:
    raise AssertionError("a ChunkIterator hands messages to the loop, not to a listener")
