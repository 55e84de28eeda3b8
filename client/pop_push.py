"""The push consumer's POP mode (``PushConsumer(..., mode="pop")``; RocketMQ 5.x's POP push consumption).

No rebalance: every consumer of the group pops from every broker of each subscribed topic (queueId -1: all its
queues, and the group's POP retry topic), as 5.x's push consumer does once the broker assigns queues in POP mode,
and as its gRPC push consumer does. Two pop loops per (topic, broker) long-poll (``pull_suspend_ms``, 15 s) for up to
``pull_batch_size`` (32) messages at a time, each invisible for ``pop_invisible_duration`` (60 s), while fewer than
``pop_threshold_for_queue`` (96) of its messages are being consumed (flow control). The listener runs as in
classic mode (``consume_thread_max`` workers; ``async def`` in tasks, plain functions in threads) or the loop takes
the messages (``async for``):

* success: the message is acked (acks go out batched per broker, BATCH_ACK_MESSAGE);
* failure (raise, False, RECONSUME_LATER): its invisible time becomes the back-off of its attempt (5.x's group retry
  policy: 1 s, 5 s, 10 s, 30 s, 1 min ...) so it comes back then with ``delivery_attempt`` + 1; after its last
  attempt (the group's retryMaxTimes + 1, or ``max_reconsume_times`` + 1) it is forwarded to ``%DLQ%<group>``
  (CONSUMER_SEND_MSG_BACK, delayLevel -1) and acked, as 5.x's push consumer does;
* FIFO (the group's ``consumeMessageOrderly``, or ``orderly=True``): a queue's messages are consumed one at a time
  in order; a failed one is retried here after its back-off (kept invisible meanwhile, so the queue stays blocked
  for every other consumer) until its last attempt, then dead-lettered, and the next one follows.

At shutdown messages popped but not consumed are made visible again at once (their attempt not counted).
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any

import attrs
import trio

from pyrmq.client.consume_service import ConsumeAbandoned, is_async_listener
from pyrmq.client.consumer import ConsumeResult
from pyrmq.client.errors import BrokerError, TopicNotFoundError
from pyrmq.client.pop_api import PopMessage, PopSession, PopStatus
from pyrmq.remoting.errors import RemotingError
from pyrmq.remoting.pop import MAX_POP_NUMS

if TYPE_CHECKING:  # pragma: no cover
    from pyrmq.client.push_consumer import PushConsumer

__all__ = ["PopEngine"]

log = logging.getLogger("pyrmq.client.consumer")

#: pause after a failed pop (Java's PULL_TIME_DELAY_MILLS_WHEN_EXCEPTION: 3 s)
POP_EXCEPTION_DELAY = 3.0
#: pause after POLLING_FULL
POLLING_FULL_DELAY = 0.5
#: pops of one (topic, broker) out at once (while the flow control leaves room): answers overlap the consuming
POPS_IN_FLIGHT = 2
#: messages handed to a worker at a time (fewer when the batch is smaller)
MIN_CHUNK = 8

Target = tuple[str, str]  # (topic, broker name)


@attrs.define(eq=False)
class _Item:
    target: Target
    msgs: list[PopMessage]
    #: FIFO: one queue's messages, consumed one at a time in order
    sequential: bool


def _ok(value: Any) -> bool:
    return value is None or value is True or value is ConsumeResult.SUCCESS


class PopEngine:
    """Pop loops, workers and acks of a push consumer in POP mode."""

    def __init__(self, consumer: PushConsumer, session: PopSession, *, invisible: float, threshold: int) -> None:
        self.consumer = consumer
        self.session = session
        self.invisible = invisible
        self.threshold = max(1, threshold)
        self.batch = max(1, min(consumer.pull_batch_size, MAX_POP_NUMS))
        self.poll = consumer.pull_suspend_ms / 1000
        self.listener: Any = None
        self.is_async = True
        self.workers = max(1, consumer.consume_thread_max)
        self.limiter = trio.CapacityLimiter(self.workers)
        self._send, self._recv = trio.open_memory_channel[_Item](math.inf)
        #: running pop loops
        self.loops: dict[Target, trio.CancelScope] = {}
        #: messages of a target popped and not finished yet; and the event its loop waits on for room
        self.held: dict[Target, int] = {}
        self._room: dict[Target, trio.Event] = {}
        self._changed = trio.Event()
        self._nursery: trio.Nursery | None = None
        #: messages handed to no listener (shutdown): made visible again
        self._abandoned: list[PopMessage] = []
        self.stopping = False

    # -- life cycle ------------------------------------------------------------------------------------------

    async def start(self, nursery: trio.Nursery, listener: Any) -> None:
        self.listener = listener
        self.is_async = is_async_listener(listener)
        self._nursery = nursery
        await self.session.refresh_settings()
        for _ in range(self.workers):
            nursery.start_soon(self._worker)
        nursery.start_soon(self._supervise)
        nursery.start_soon(self.session.settings_loop)

    def reconcile_soon(self) -> None:
        self._changed.set()

    async def stop(self, wait: float) -> None:
        """Stop popping, let the messages being consumed finish (up to ``wait`` s), flush the acks, and make the
        messages nobody consumed visible again."""
        self.stopping = True
        for scope in self.loops.values():
            scope.cancel()
        self.loops.clear()
        with trio.move_on_after(wait):
            while self.consumer._busy:
                await trio.sleep(0.01)
        left = list(self._abandoned)
        self._abandoned.clear()
        while True:
            try:
                item = self._recv.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                break
            left += item.msgs
        with trio.move_on_after(wait):
            await self.session.acks_flushed()
            if left:
                await self.session.release(left)

    # -- pop loops -------------------------------------------------------------------------------------------

    def targets(self) -> set[Target]:
        consumer = self.consumer
        return {(topic, mq.broker_name) for topic in consumer.subscriptions
                for mq in consumer.topic_queues.get(topic, ())}

    async def _supervise(self) -> None:
        while not self.stopping:
            wanted = self.targets()
            for target in wanted - set(self.loops):
                assert self._nursery is not None
                scope = self.loops[target] = trio.CancelScope()
                self._nursery.start_soon(self._pop_loops, target, scope)
            for target in set(self.loops) - wanted:
                self.loops.pop(target).cancel()
            await self._changed.wait()
            self._changed = trio.Event()

    async def _pop_loops(self, target: Target, scope: trio.CancelScope) -> None:
        with scope:
            async with trio.open_nursery() as nursery:
                for _ in range(POPS_IN_FLIGHT):
                    nursery.start_soon(self._pop_loop, target)

    async def _pop_loop(self, target: Target) -> None:
        topic, broker = target
        consumer, session = self.consumer, self.session
        attempt_id: str | None = None
        while not self.stopping:
            sub = consumer.subscriptions.get(topic)
            if sub is None:
                return
            room = self.threshold - self.held.get(target, 0)
            if room <= 0:
                event = self._room.setdefault(target, trio.Event())
                await event.wait()
                continue
            if attempt_id is None:
                attempt_id = PopSession.new_attempt_id()
            asked = min(self.batch, room)
            self.held[target] = self.held.get(target, 0) + asked  # reserved while the pop is out
            try:
                result, msgs = await session.pop(broker, sub, asked, self.invisible, self.poll,
                                                 attempt_id=attempt_id)
            except RemotingError as exc:  # an answer lost: the next pop repeats the attempt id (FIFO)
                self._finished(target, asked)
                log.info("%s: pop of %s on %s failed: %s", consumer.group, topic, broker, exc)
                await trio.sleep(POP_EXCEPTION_DELAY)
                continue
            except (BrokerError, TopicNotFoundError) as exc:
                self._finished(target, asked)
                log.warning("%s: pop of %s on %s refused: %s", consumer.group, topic, broker, exc)
                attempt_id = None
                await trio.sleep(POP_EXCEPTION_DELAY)
                continue
            except BaseException:
                self._finished(target, asked)
                raise
            attempt_id = None
            self._finished(target, asked - len(msgs))
            if msgs:
                self._dispatch(target, msgs, result.fifo or consumer.orderly)
            elif result.status is PopStatus.POLLING_FULL:
                await trio.sleep(POLLING_FULL_DELAY)

    def _dispatch(self, target: Target, msgs: list[PopMessage], fifo: bool) -> None:
        consumer = self.consumer
        consumer.stats_pulled += len(msgs)
        send = self._send.send_nowait
        if fifo:
            queues: dict[tuple[str, int], list[PopMessage]] = {}
            for m in msgs:
                h = m.receipt_handle
                queues.setdefault((h.retry_flag, h.queue_id), []).append(m)
            for queue in queues.values():
                queue.sort(key=lambda m: m.queue_offset)
                send(_Item(target, queue, True))
            return
        # spread over the workers, but at least MIN_CHUNK a hand-over (a fast listener pays per hand-over)
        size = max(MIN_CHUNK, math.ceil(len(msgs) / self.workers))
        for i in range(0, len(msgs), size):
            send(_Item(target, msgs[i:i + size], False))

    def _finished(self, target: Target, n: int) -> None:
        self.held[target] = self.held.get(target, 0) - n
        event = self._room.pop(target, None)
        if event is not None:
            event.set()

    # -- consuming -------------------------------------------------------------------------------------------

    async def _worker(self) -> None:
        consumer = self.consumer
        async for item in self._recv:
            if self.stopping:
                self._abandoned += item.msgs
                self._finished(item.target, len(item.msgs))
                continue
            consumer._busy += 1
            try:
                if item.sequential:
                    await self._consume_in_order(item)
                else:
                    await self._consume(item)
            except Exception:
                log.exception("%s: consuming popped messages failed", consumer.group)
            finally:
                consumer._busy -= 1
                self._finished(item.target, len(item.msgs))

    def _call_sync_batch(self, msgs: list[PopMessage]) -> list[bool]:
        out = []
        for m in msgs:
            try:
                out.append(_ok(self.listener(m)))
            except Exception:
                log.warning("%s: the listener failed on %r", self.consumer.group, m, exc_info=True)
                out.append(False)
        return out

    async def _call_one(self, m: PopMessage) -> bool:
        """The listener on one message; ConsumeAbandoned when the consumer stops before it got it."""
        try:
            if self.is_async:
                return _ok(await self.listener(m))
            return (await trio.to_thread.run_sync(self._call_sync_batch, [m], limiter=self.limiter))[0]
        except ConsumeAbandoned:
            raise
        except Exception:
            log.warning("%s: the listener failed on %r", self.consumer.group, m, exc_info=True)
            return False

    async def _consume(self, item: _Item) -> None:
        msgs = item.msgs
        consumer, session = self.consumer, self.session
        if self.is_async:
            results: list[bool] = []
            for m in msgs:
                try:
                    results.append(await self._call_one(m))
                except ConsumeAbandoned:
                    self._abandoned += msgs[len(results):]
                    break
        else:
            results = await trio.to_thread.run_sync(self._call_sync_batch, msgs, limiter=self.limiter)
        done = [m for m, ok in zip(msgs, results) if ok]
        if done:
            session.ack_soon(done)
            consumer.stats_consumed += len(done)
        for m, ok in zip(msgs, results):
            if not ok:
                await session.nack(m)

    async def _consume_in_order(self, item: _Item) -> None:
        consumer, session = self.consumer, self.session
        msgs = item.msgs
        for i, m in enumerate(msgs):
            while True:
                if self.stopping:
                    self._abandoned += msgs[i:]
                    return
                try:
                    ok = await self._call_one(m)
                except ConsumeAbandoned:
                    self._abandoned += msgs[i:]
                    return
                if ok:
                    session.ack_soon([m])
                    consumer.stats_consumed += 1
                    break
                broker = m.receipt_handle.broker_name
                if session.dead_letter and m.delivery_attempt >= session.max_attempts(broker):
                    await session.nack(m)  # its last attempt: to the dead-letter queue, then the next one
                    break
                delay = session.backoff(m.delivery_attempt)
                try:  # stays invisible (the queue blocked for the group) while it waits for its next attempt here
                    await session.change_invisible(m, delay + self.invisible)
                except (RemotingError, BrokerError, TopicNotFoundError) as exc:
                    log.info("%s: keeping %s invisible failed: %s", consumer.group, m.msg_id, exc)
                await trio.sleep(delay)
                m.reconsume_times += 1
