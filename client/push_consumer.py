"""The push consumer (Java ``DefaultMQPushConsumer``; spec 4.2, 4.4, 7.4-7.7, 7.10).

    async with PushConsumer("127.0.0.1:9876", group="billing") as consumer:   # subscribe before start...
        ...

    consumer = PushConsumer(namesrv, group="billing")
    consumer.subscribe("Orders", "created || paid")
    consumer.register_listener(handle)          # async def handle(msg) / def handle(msg)
    async with consumer:
        await trio.sleep_forever()

    async with PushConsumer(namesrv, group="billing", subscribe={"Orders": "*"}) as consumer:
        async for msg in consumer:              # acknowledged when the loop asks for the next one
            ...

Classic mode (default): the group's members split the queues (allocation strategy from the allocate hook, AVG by
default), rebalancing every 20 s, at start, and when a broker says the group changed; offsets are committed to the
brokers every 5 s and at shutdown; ``%RETRY%<group>`` is subscribed automatically. Broadcasting: every member takes
every queue and keeps offsets in a local file. Each queue is long-polled (32 messages per pull, held 15 s by the
broker) into a process queue that pauses pulling at 1,000 messages or 100 MiB. A concurrent consumer's pulls grow
with the queue's backlog, up to ``pull_batch_size_max`` (256) messages (a pyrmq broker answers those beyond
RocketMQ's 32-message cap; docs/decisions.md) while the consumer keeps up with them.

POP mode (``mode="pop"``, RocketMQ 5.x): no rebalance; every member pops from every broker of its topics and acks
each message it consumed (see :mod:`pyrmq.client.pop_push`).
"""

from __future__ import annotations

import datetime
import logging
import math
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import outcome
import trio

from pyrmq.client import api
from pyrmq.client.config import ClientConfig
from pyrmq.client.consume_service import (
    ChunkIterator,
    ConcurrentConsumeService,
    ConsumeAbandoned,
    OrderlyConsumeService,
    is_async_listener,
)
from pyrmq.client.consumer import (
    ConsumeFrom,
    ConsumerCore,
    ConsumeResult,
    MessageModel,
    Subscription,
    retry_topic,
)
from pyrmq.client.errors import BrokerError, ClientStateError, InvalidMessageError
from pyrmq.client.instance import ClientInstance
from pyrmq.client.message import MessageExt, MessageQueue, PullResult, PullStatus
from pyrmq.client.offset_store import LocalOffsetStore, OffsetStore, RemoteOffsetStore
from pyrmq.client.plugins import resolve_strategy
from pyrmq.client.process_queue import ProcessQueue
from pyrmq.client.pop_api import DEFAULT_RETRY_BACKOFF, PopSession, init_mode_of, seconds
from pyrmq.client.pop_push import PopEngine
from pyrmq.client.producer import Producer
from pyrmq.client.rebalance import LOCK_RETRY_DELAY, Rebalancer
from pyrmq.remoting import fastjson
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.errors import RemotingTimeout
from pyrmq.remoting.vocabulary import PullSysFlag

__all__ = ["PushConsumer"]

# PullSysFlag bits as ints, computed once (Flag arithmetic costs microseconds per pull)
_SUSPEND = int(PullSysFlag.SUSPEND)
_SUSPEND_COMMIT = int(PullSysFlag.SUSPEND | PullSysFlag.COMMIT_OFFSET)

log = logging.getLogger("pyrmq.client.consumer")

PULL_EXCEPTION_DELAY = 3.0
FLOW_CONTROL_DELAY = 0.05


class _IterItem:
    __slots__ = ("msg", "done", "ok")

    def __init__(self, msg: MessageExt) -> None:
        self.msg = msg
        self.done = trio.Event()
        self.ok = True


class _PullChain:
    """The pulls of one queue while every answer finds messages (Java's PullCallback): each answer is decoded, held
    and handed to the consume service in the connection's reader (``Connection.invoke_callback``), which sends the
    queue's next pull with the other frames of its round; the queue's pull loop wakes only when the chain stops: an
    answer without messages or an error (handed back to the loop), or a check before the next pull that fails (flow
    control, a dropped queue, a changed subscription or broker): the loop then does what it does for any pull. Each
    pull keeps the loop's timeout (enforced by the loop, which cancels the pull in flight)."""

    __slots__ = ("consumer", "mq", "pq", "sub", "addr", "conn", "timeout", "opaque", "deadline", "done", "stopped",
                 "result", "error")

    def __init__(self, consumer: PushConsumer, mq: MessageQueue, pq: ProcessQueue, sub: Subscription, addr: str,
                 timeout: float) -> None:
        self.consumer = consumer
        self.mq = mq
        self.pq = pq
        self.sub = sub
        self.addr = addr
        self.conn: Any = None
        self.timeout = timeout
        self.opaque = 0
        self.deadline = 0.0
        self.done = trio.Event()
        self.stopped = False
        self.result: PullResult | None = None
        self.error: BaseException | None = None

    def _next(self) -> bool:
        """Send the queue's next pull if the pull loop's checks pass; False when the chain stops here."""
        consumer, mq = self.consumer, self.mq
        conn = self.conn
        if conn.closed or not consumer._may_pull(mq, self.pq) or consumer.subscriptions.get(mq.topic) is not self.sub \
                or consumer.instance.pull_addr(mq) != self.addr:
            return False
        request = consumer._pull_request(mq, self.pq, self.sub, self.addr)
        self.deadline = trio.current_time() + self.timeout
        conn.invoke_callback(request, self._on_answer)
        self.opaque = request.opaque
        return True

    def _stop(self) -> None:
        self.stopped = True
        self.done.set()

    def _on_answer(self, answer: outcome.Outcome) -> None:
        if self.stopped:
            return
        try:
            consumer, mq, pq = self.consumer, self.mq, self.pq
            result = api.pull_result(consumer.instance, self.addr, mq, answer.unwrap(), self.sub.tags or None)
            if pq.dropped or consumer._stopping:
                self._stop()
                return
            if result.status is not PullStatus.FOUND or not result.messages:
                self.result = result
                self._stop()
                return
            consumer._take_found(result, pq, mq)
            if not self._next():
                self._stop()
        except Exception as exc:  # noqa: BLE001 - handed to the pull loop, as an awaited pull's error would be
            self.error = exc
            self._stop()

    async def run(self) -> PullResult | None:
        """Chain the queue's pulls until the chain stops; the answer the loop is to handle, or None."""
        conn = self.consumer.instance.remoting.connections.get(self.addr)
        if conn is None or conn.closed:
            return None
        self.conn = conn
        try:
            if not self._next():
                return None
        except Exception as exc:  # noqa: BLE001 - as the answer's handling would: handed to the pull loop
            self.error = exc
            return None
        try:
            await conn.flush()
            while not self.stopped:
                with trio.move_on_at(self.deadline):
                    await self.done.wait()
                if not self.stopped and trio.current_time() >= self.deadline:
                    self.stopped = True
                    conn.cancel_callback(self.opaque)
                    self.error = RemotingTimeout(self.addr, self.timeout, RequestCode.PULL_MESSAGE)
        finally:
            if not self.stopped:  # cancelled (shutdown): a late answer is ignored
                self.stopped = True
                conn.cancel_callback(self.opaque)
        return self.result


class PushConsumer(ConsumerCore):
    def __init__(
        self,
        namesrv: str | Iterable[str] | None = None,
        group: str = "pyrmq_consumer",
        *,
        subscribe: Mapping[str, str] | None = None,
        listener: Callable[[MessageExt], Any] | None = None,
        config: ClientConfig | None = None,
        instance: ClientInstance | None = None,
        message_model: MessageModel | str = MessageModel.CLUSTERING,
        consume_from: ConsumeFrom | str | int | datetime.datetime = ConsumeFrom.LAST_OFFSET,
        orderly: bool = False,
        allocate_strategy: str | Callable[..., list[MessageQueue]] = "AVG",
        allocate_options: Mapping[str, Any] | None = None,
        plugins: Iterable[object] = (),
        consume_thread_max: int = 20,
        pull_batch_size: int = 32,
        pull_batch_size_max: int = 256,
        pull_threshold_for_queue: int = 1000,
        pull_threshold_size_for_queue_mib: int = 100,
        consume_concurrently_max_span: int = 2000,
        max_reconsume_times: int = -1,
        suspend_current_queue_ms: int = 1000,
        pull_suspend_ms: int = 15000,
        rebalance_interval: float = 20.0,
        lock_interval: float = 20.0,
        offset_store_dir: str | os.PathLike[str] | None = None,
        shutdown_await: float = 3.0,
        credentials: tuple[str, str] | None = None,
        mode: str = "classic",
        pop_invisible_duration: float = 60.0,
        pop_threshold_for_queue: int = 96,
        retry_backoff: Sequence[float] = DEFAULT_RETRY_BACKOFF,
        dead_letter: bool = True,
    ) -> None:
        super().__init__(namesrv, group, config=config, instance=instance, message_model=message_model,
                         consume_from=consume_from, credentials=credentials)
        if mode not in ("classic", "pop"):
            raise InvalidMessageError(f"mode {mode!r} is neither \"classic\" (queues rebalanced among the group) nor "
                                      "\"pop\" (RocketMQ 5.x's POP consumption)")
        #: "classic" (rebalance, pull, offsets) or "pop" (POP_MESSAGE, ack)
        self.mode = mode
        for topic, expression in (subscribe or {}).items():
            self.subscribe(topic, expression)
        self.listener = listener
        self.orderly = orderly
        # this consumer's own plugin table: the client bundle, entry points and ``plugins`` (no process-wide cache)
        self.allocate = resolve_strategy(allocate_strategy, allocate_options, plugins=plugins)
        self.consume_thread_max = consume_thread_max
        self.pull_batch_size = pull_batch_size
        #: concurrent consumption: a queue's pulls grow from pull_batch_size up to this while the broker reports a
        #: backlog behind the pull and the consumer keeps up (orderly keeps pull_batch_size; docs/decisions.md)
        self.pull_batch_size_max = max(pull_batch_size, pull_batch_size_max)
        self.pull_threshold_for_queue = pull_threshold_for_queue
        self.pull_threshold_size = pull_threshold_size_for_queue_mib * 1024 * 1024
        self.consume_concurrently_max_span = consume_concurrently_max_span
        self.max_reconsume_times = max_reconsume_times
        self.suspend_current_queue_ms = suspend_current_queue_ms
        self.pull_suspend_ms = pull_suspend_ms
        self.rebalance_interval = rebalance_interval
        self.lock_interval = lock_interval
        self.offset_store_dir = offset_store_dir
        self.offset_store: OffsetStore = (
            RemoteOffsetStore(self.instance, self.group) if self.clustering
            else LocalOffsetStore(self.instance, self.group, offset_store_dir)
        )
        #: the queues this consumer holds now
        self.process_queues: dict[MessageQueue, ProcessQueue] = {}
        self.inner_producer = Producer(instance=self.instance, group="CLIENT_INNER_PRODUCER")
        self.service: ConcurrentConsumeService | OrderlyConsumeService | None = None
        self.stats_consumed = 0
        self.stats_pulled = 0
        self.rebalancer = Rebalancer(self)
        self._started_at = time.monotonic()
        self._iter_send: trio.MemorySendChannel | None = None
        self._iter_recv: trio.MemoryReceiveChannel | None = None
        self._iter_current: _IterItem | None = None
        #: ``async for`` of a concurrent consumer (its consume service)
        self._chunks: ChunkIterator | None = None
        #: pulls grow with the backlog (concurrent consumption, classic mode)
        self._growing = not orderly and self.pull_batch_size_max > pull_batch_size
        #: set by ``__aexit__``: the ``async with`` body raised (the message it had is not acknowledged)
        self._iter_failed_exit = False
        self.shutdown_await = shutdown_await
        #: set at shutdown: no new batch starts
        self._stopping = False
        #: workers inside a listener call
        self._busy = 0
        #: at shutdown: set when ``_busy`` drops to 0
        self._idle: trio.Event | None = None
        self.pop: PopEngine | None = None
        if mode == "pop":
            if not self.clustering:
                raise InvalidMessageError("POP consumption is for clustering groups: a broadcasting consumer reads "
                                          "every queue itself (mode=\"classic\")")
            if self.consume_from is ConsumeFrom.TIMESTAMP:
                raise InvalidMessageError("a POP consumer starts from \"last\" or \"first\" (5.x's "
                                          "ConsumeInitMode), not from a timestamp")
            self.consume_type = "CONSUME_POP"
            session = PopSession(
                self, order=True if orderly else None,
                max_reconsume_times=None if max_reconsume_times < 0 else max_reconsume_times,
                dead_letter=dead_letter, retry_backoff=retry_backoff, init_mode=init_mode_of(self.consume_from),
            )
            self.pop = PopEngine(self, session, threshold=pop_threshold_for_queue,
                                 invisible=seconds(pop_invisible_duration, "pop_invisible_duration",
                                                   low_inclusive=False))

    @property
    def effective_max_reconsume_times(self) -> int:
        """-1 means 16 for concurrent consumption (spec 7.5)."""
        return 16 if self.max_reconsume_times < 0 else self.max_reconsume_times

    def register_listener(self, listener: Callable[[MessageExt], Any]) -> Callable[[MessageExt], Any]:
        """Set the listener (usable as a decorator). Without one, iterate the consumer: ``async for msg in c``."""
        if self.started:
            raise ClientStateError("register the listener before starting the consumer")
        self.listener = listener
        return listener

    def assigned_queues(self) -> set[MessageQueue]:
        return {mq for mq, pq in self.process_queues.items() if not pq.dropped}

    # -- start / shutdown ------------------------------------------------------------------------------------

    async def _on_start(self, nursery: trio.Nursery) -> None:
        if not self.subscriptions:
            raise InvalidMessageError("subscribe to at least one topic before starting the consumer")
        if self.pop is not None:
            await self._start_pop(nursery)
            return
        if self.clustering:
            retry = retry_topic(self.group)
            self.subscriptions.setdefault(retry, Subscription.build(retry, "*"))
        listener = self.listener
        if listener is None and not self.orderly:
            # ``async for`` of a concurrent consumer: the loop takes whole pulled batches (no hop per message)
            self.service = self._chunks = ChunkIterator(self)
        else:
            if listener is None:  # ``async for`` of an orderly consumer: one message at a time through a channel
                self._iter_send, self._iter_recv = trio.open_memory_channel(0)
                listener = self._iter_listener
            if self.orderly:
                self.service = OrderlyConsumeService(
                    self, listener, self.consume_thread_max, self.suspend_current_queue_ms
                )
            else:
                self.service = ConcurrentConsumeService(self, listener, self.consume_thread_max)
        await self.service.start(nursery)
        self._started_at = time.monotonic()
        try:
            await self._register()
            await self._check_in_brokers()
            await self.instance.send_heartbeat()
            await self.rebalancer.rebalance_all()
        except BaseException:
            self._forget()
            raise
        nursery.start_soon(self.rebalancer.run)
        nursery.start_soon(self._persist_loop)
        if self.orderly and self.clustering:
            nursery.start_soon(self.rebalancer.lock_loop)

    async def _start_pop(self, nursery: trio.Nursery) -> None:
        assert self.pop is not None
        listener = self.listener
        if listener is None:  # ``async for``: one message at a time through a channel
            self._iter_send, self._iter_recv = trio.open_memory_channel(0)
            listener = self._iter_listener
        self._started_at = time.monotonic()
        try:
            await self._register()
            await self.instance.send_heartbeat()
            await self.pop.start(nursery, listener)
        except BaseException:
            self._forget()
            raise

    async def _on_shutdown(self) -> None:
        if self.pop is not None:
            await self._shutdown_pop()
            return
        self._stopping = True
        if self._chunks is not None:
            await self._chunks.close(not self._iter_failed_exit)
        if self._iter_current is not None:
            self._iter_current.done.set()  # the loop body finished with it
            self._iter_current = None
        if self._iter_send is not None:
            # workers waiting to hand a message to ``async for`` give up: those messages stay uncommitted
            await self._iter_send.aclose()
        # let the messages being consumed right now finish and record their offsets
        with trio.move_on_after(self.shutdown_await):
            while self._busy:
                self._idle = trio.Event()  # set by the worker that finishes last (ConsumeService.worker_done)
                await self._idle.wait()
        held = list(self.process_queues)
        for pq in self.process_queues.values():
            pq.dropped = True
            pq.has_messages.set()
        try:
            await self.offset_store.persist(held)
        except Exception:  # noqa: BLE001
            log.exception("%s: committing offsets at shutdown failed", self.group)
        if self.orderly and self.clustering:
            await self.rebalancer.unlock(held)
        await self._unregister()

    async def _shutdown_pop(self) -> None:
        assert self.pop is not None
        self._stopping = True
        if self._iter_current is not None:
            self._iter_current.done.set()  # the loop body finished with it
            self._iter_current = None
        if self._iter_send is not None:
            await self._iter_send.aclose()  # workers waiting to hand a message over give up: it is released
        await self.pop.stop(self.shutdown_await)
        await self._unregister()

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        # leaving ``async with`` normally acknowledges the message the loop body just finished
        if exc_type is not None and self._iter_current is not None:
            self._iter_current.ok = False
        self._iter_failed_exit = exc_type is not None
        await self.shutdown(exc)

    # -- async iteration -------------------------------------------------------------------------------------

    async def _iter_listener(self, msg: MessageExt) -> ConsumeResult:
        item = _IterItem(msg)
        assert self._iter_send is not None
        try:
            await self._iter_send.send(item)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            raise ConsumeAbandoned() from None
        await item.done.wait()
        return ConsumeResult.SUCCESS if item.ok else ConsumeResult.RECONSUME_LATER

    def __aiter__(self) -> PushConsumer | ChunkIterator:
        # a started concurrent consumer: the loop iterates its batches directly (no second coroutine per message)
        return self._chunks if self._chunks is not None else self

    async def __anext__(self) -> MessageExt:
        chunks = self._chunks
        if chunks is not None:
            return await chunks.__anext__()
        if self._iter_recv is None:
            raise ClientStateError("iterate a started consumer that has no listener")
        current, self._iter_current = self._iter_current, None
        if current is not None:
            current.done.set()
        try:
            item = await self._iter_recv.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            raise StopAsyncIteration from None
        self._iter_current = item
        return item.msg

    def reconsume_later(self, msg: MessageExt) -> None:
        """In ``async for``: give the current message back for a later retry instead of acknowledging it."""
        if self._iter_current is not None and self._iter_current.msg is msg:
            self._iter_current.ok = False
        elif self._chunks is not None:
            self._chunks.reconsume_later(msg)

    # -- rebalance (pyrmq.client.rebalance) ----------------------------------------------------------------

    def rebalance_soon(self) -> None:
        if self.pop is not None:
            self.pop.reconcile_soon()  # POP: the brokers of the subscribed topics to pop from
        else:
            self.rebalancer.wake()

    async def wait_rebalanced(self) -> None:
        """Wait for the end of the next rebalance round."""
        await self.rebalancer.wait_round()

    async def lock_all(self) -> None:
        """Renew the broker locks of every held queue now (orderly; also done every 20 s)."""
        await self.rebalancer.lock_all()

    # -- pulling ---------------------------------------------------------------------------------------------

    def start_queue(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        """A queue just assigned by the rebalance: start pulling it (and, orderly, its consuming task)."""
        assert self.service is not None and self.nursery is not None
        self.service.queue_started(mq, pq)
        self.nursery.start_soon(self._pull_loop, mq, pq)

    def _may_pull(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        """The pull loop's checks before a pull (flow control, orderly lock) all pass: pull now."""
        if pq.dropped or self._stopping:
            return False
        if pq.count > self.pull_threshold_for_queue or pq.size > self.pull_threshold_size:
            return False
        if not self.orderly:
            return pq.span <= self.consume_concurrently_max_span
        return not self.clustering or (pq.locked and not pq.lock_expired())

    def _pull_request(self, mq: MessageQueue, pq: ProcessQueue, sub: Subscription, addr: str) -> Any:
        commit = self.offset_store.read_memory(mq) if self.clustering else -1
        # a slave stores no commit offsets from pulls (Java clears the flag for slaves)
        sys_flag = _SUSPEND_COMMIT if commit > 0 and addr == self.instance.broker_addr(mq.broker_name) else _SUSPEND
        pq.last_pull_time = time.monotonic()
        size = pq.pull_size or self.pull_batch_size
        return api.pull_request(
            self.instance, mq, self.group, pq.next_offset, max_nums=size, sys_flag=sys_flag,
            commit_offset=max(commit, 0), suspend_ms=self.pull_suspend_ms, sub_version=sub.version,
            expression_type=sub.expression_type, large=size > self.pull_batch_size,
        )

    def _grow(self, result: PullResult, pq: ProcessQueue) -> None:
        """Size the queue's next pull (before this answer's messages are held): while the consumer keeps up (it
        holds no more than one pull's worth), pull_batch_size doubled until it covers the backlog the broker
        reported behind this answer, at most pull_batch_size_max; else pull_batch_size, so that a slow listener's
        workers share the held messages in batches of that size as before. Java's pullBatchSize is fixed; the
        grown pulls are flagged so a pyrmq broker may answer them beyond RocketMQ's per-pull caps."""
        size = base = self.pull_batch_size
        if pq.count <= (pq.pull_size or base):
            top = self.pull_batch_size_max
            backlog = result.max_offset - result.next_begin_offset
            while size < backlog and size < top:
                size *= 2
            if size > top:
                size = top
        pq.pull_size = 0 if size == base else size

    def _take_found(self, result: PullResult, pq: ProcessQueue, mq: MessageQueue) -> None:
        """A pull that found messages: hold them and hand them to the consume service."""
        pq.next_offset = result.next_begin_offset
        if self._growing:
            self._grow(result, pq)
        msgs = result.messages
        if msgs:
            if type(msgs) is not list:
                msgs = list(msgs)
            self.stats_pulled += len(msgs)
            pq.put(msgs, result.next_begin_offset)
            assert self.service is not None
            self.service.submit(msgs, pq, mq)
        elif pq.count == 0:
            self.offset_store.update(mq, result.next_begin_offset, increase_only=True)

    async def _pull_failed(self, mq: MessageQueue, exc: BaseException) -> None:
        """A pull raised (remoting, broker or route trouble): pause, then the loop retries."""
        delay = PULL_EXCEPTION_DELAY
        if isinstance(exc, BrokerError) and exc.code in (
            ResponseCode.SUBSCRIPTION_NOT_EXIST, ResponseCode.SUBSCRIPTION_NOT_LATEST,
            ResponseCode.FILTER_DATA_NOT_EXIST, ResponseCode.FILTER_DATA_NOT_LATEST,
        ):
            self.instance.heartbeat_soon()  # the broker lost (or has an old copy of) our subscription
            delay = 0.2
        log.info("%s: pull of %s failed: %s", self.group, mq, exc)
        await trio.sleep(delay)

    async def _pull_loop(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        instance = self.instance
        store = self.offset_store
        orderly_locking = self.orderly and self.clustering
        timeout = self.pull_suspend_ms / 1000 + 15
        pq.pull_task_running = True
        try:
            while not pq.dropped:
                if pq.count > self.pull_threshold_for_queue or pq.size > self.pull_threshold_size:
                    await trio.sleep(FLOW_CONTROL_DELAY)
                    continue
                if not self.orderly and pq.span > self.consume_concurrently_max_span:
                    await trio.sleep(FLOW_CONTROL_DELAY)
                    continue
                if orderly_locking and (not pq.locked or pq.lock_expired()):
                    await trio.sleep(LOCK_RETRY_DELAY)
                    continue
                sub = self.subscriptions.get(mq.topic)
                if sub is None:
                    return
                addr = None
                try:
                    addr = instance.pull_addr(mq) or await instance.broker_addr_for(mq, master_only=False)
                    request = self._pull_request(mq, pq, sub, addr)
                    response = await instance.remoting.invoke(addr, request, timeout)
                    result = api.pull_result(instance, addr, mq, response, sub.tags or None)
                except Exception as exc:  # noqa: BLE001 - remoting, broker or route trouble: pause, then retry
                    if pq.dropped:
                        return
                    await self._pull_failed(mq, exc)
                    continue
                while result is not None:
                    if pq.dropped:
                        return
                    status = result.status
                    if status is PullStatus.OFFSET_ILLEGAL:
                        pq.next_offset = result.next_begin_offset
                        log.warning("%s: offset of %s was illegal, moving to %d", self.group, mq, result.next_begin_offset)
                        store.update(mq, result.next_begin_offset, increase_only=False)
                        await store.persist_one(mq)
                        break
                    self._take_found(result, pq, mq)
                    if status is not PullStatus.FOUND or not result.messages:
                        break
                    # the next pulls of this queue go out from the connection's reader as the answers come in
                    chain = _PullChain(self, mq, pq, sub, addr, timeout)
                    result = await chain.run()
                    if chain.error is not None:
                        if pq.dropped:
                            return
                        await self._pull_failed(mq, chain.error)
        finally:
            pq.pull_task_running = False

    # -- offsets ---------------------------------------------------------------------------------------------

    async def _persist_loop(self) -> None:
        interval = self.instance.config.persist_consumer_offset_interval
        while True:
            await trio.sleep(interval)
            try:
                await self.offset_store.persist(self.assigned_queues())
            except Exception:  # noqa: BLE001
                log.exception("%s: committing offsets failed", self.group)

    async def persist_offsets(self) -> None:
        """Commit the current offsets now (the consumer also does it every 5 s and at shutdown)."""
        await self.offset_store.persist(self.assigned_queues())

    async def reset_offsets(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """Move to new offsets (RESET_CONSUMER_CLIENT_OFFSET): drop the topic's queues, store the offsets,
        rebalance (the queues come back and start from there). POP mode: nothing to do, the broker pops from the
        new offsets."""
        if self.pop is not None:
            return
        for mq in [mq for mq in self.process_queues if mq.topic == topic]:
            pq = self.process_queues.pop(mq)
            pq.dropped = True
            pq.has_messages.set()
            pq.clear()
        for mq, offset in offsets.items():
            self.offset_store.update(mq, offset, increase_only=False)
        await self.offset_store.persist(list(offsets))
        self.rebalance_soon()

    # -- asked by the broker for an admin tool -----------------------------------------------------------------

    def running_info(self) -> dict[str, Any]:
        """Java's ConsumerRunningInfo of this consumer (GET_CONSUMER_RUNNING_INFO, mqadmin consumerStatus)."""
        info = super().running_info()
        now_wall, now = time.time(), time.monotonic()

        def wall_ms(mono: float) -> int:
            return int((now_wall - (now - mono)) * 1000) if mono else 0

        mq_table = {}
        for mq, pq in list(self.process_queues.items()):
            msgs = pq.held_offsets()
            mq_table[fastjson.ObjectKey(mq.to_json())] = {
                "commitOffset": self.offset_store.read_memory(mq),
                "cachedMsgMinOffset": msgs[0] if msgs else 0,
                "cachedMsgMaxOffset": msgs[-1] if msgs else 0,
                "cachedMsgCount": pq.count,
                "cachedMsgSizeInMiB": pq.size // (1024 * 1024),
                "transactionMsgMinOffset": 0, "transactionMsgMaxOffset": 0, "transactionMsgCount": 0,
                "locked": pq.locked,
                "tryUnlockTimes": 0,
                "lastLockTimestamp": wall_ms(pq.last_lock_time),
                "droped": pq.dropped,
                "lastPullTimestamp": wall_ms(pq.last_pull_time),
                # pyrmq keeps no per-queue consume time; a queue whose pulls stopped (its cache full) is the
                # blocked one mqadmin looks for, so the last pull time stands in
                "lastConsumeTimestamp": wall_ms(pq.last_pull_time),
            }
        info["mqTable"] = mq_table
        info["properties"].update({
            "PROP_CONSUMEORDERLY": str(self.orderly).lower(),
            "PROP_THREADPOOL_CORE_SIZE": str(self.consume_thread_max),
            "PROP_CONSUMER_START_TIMESTAMP": str(wall_ms(self._started_at)),
            "consumeThreadMax": str(self.consume_thread_max),
            "pullBatchSize": str(self.pull_batch_size),
            "maxReconsumeTimes": str(self.max_reconsume_times),
        })
        if self.pop is not None:
            info["properties"]["PROP_CONSUME_TYPE"] = "CONSUME_POP"
            info["properties"]["popInvisibleTime"] = str(int(self.pop.invisible * 1000))
        return info

    async def consume_directly(self, msg: MessageExt) -> dict[str, Any]:
        """Run the listener on ``msg`` now, outside the queues (CONSUME_MESSAGE_DIRECTLY, mqadmin queryMsgById -d):
        Java's ConsumeMessageDirectlyResult."""
        began = time.monotonic()
        result: dict[str, Any] = {"order": self.orderly, "autoCommit": True, "remark": None}
        if self.listener is None or (self.service is None and self.pop is None):
            result.update(consumeResult="CR_THROW_EXCEPTION", remark="the consumer has no listener to call")
        else:
            try:
                if is_async_listener(self.listener):
                    answer = await self.listener(msg)
                else:
                    answer = await trio.to_thread.run_sync(self.listener, msg)
            except Exception as exc:  # noqa: BLE001 - reported to the admin tool as Java does
                result.update(consumeResult="CR_THROW_EXCEPTION", remark=repr(exc))
            else:
                ok = answer is None or answer is True or answer is ConsumeResult.SUCCESS
                result["consumeResult"] = "CR_SUCCESS" if ok else "CR_LATER"
        result["spentTimeMills"] = int((time.monotonic() - began) * 1000)
        return result

    # -- stats -----------------------------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        if self.pop is not None:
            return {
                "mode": "pop",
                "brokers": len(self.pop.loops),
                "pulled": self.stats_pulled,
                "consumed": self.stats_consumed,
                "held": sum(self.pop.held.values()),
                "dead_lettered": self.pop.session.dead_lettered,
            }
        return {
            "queues": len(self.process_queues),
            "pulled": self.stats_pulled,
            "consumed": self.stats_consumed,
            "held": sum(pq.count for pq in self.process_queues.values()),
            "inflight_limit": math.inf if not self.orderly else self.consume_thread_max,
        }
