"""The blocking face: the same producer, consumers and admin, for plain threads and scripts.

    with BlockingProducer("127.0.0.1:9876", group="orders") as producer:
        result = producer.send(Message("Orders", b"..."))

    consumer = BlockingPushConsumer("127.0.0.1:9876", group="billing")
    consumer.subscribe("Orders", "*")
    consumer.register_listener(lambda msg: print(msg.body))   # runs in worker threads
    consumer.start(); ...; consumer.shutdown()

    with BlockingSimpleConsumer("127.0.0.1:9876", group="billing", subscribe={"Orders": "*"}) as consumer:
        for msg in consumer.receive(16, invisible_duration=30):
            consumer.ack(msg)

One trio loop per process runs on a daemon thread (started with the first blocking object, stopped with the
last, like remoting/blocking.py does for a single remoting client); every call hops onto it with
``trio.from_thread``, so any number of threads may share one object. Sync listeners run in trio's worker threads.
Do not call these objects from inside an async listener (that is the loop's own thread: RuntimeError).
"""

from __future__ import annotations

import concurrent.futures
import functools
import logging
import queue
import socket
import struct
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from typing import Any

import trio

from pyrmq.client.admin import Admin
from pyrmq.client.errors import BrokerError, ClientStateError
from pyrmq.client.message import Message, MessageExt, MessageQueue, PullResult, SendResult, SendStatus
from pyrmq.client.pipelined_pull import PULL_WINDOW, RawPullBatch
from pyrmq.client.producer import RETRY_CODES, Producer, SendHook
from pyrmq.client.pull_consumer import PullConsumer
from pyrmq.client.pop_api import PopMessage
from pyrmq.client.push_consumer import PushConsumer
from pyrmq.client.simple_consumer import SimpleConsumer
from pyrmq.remoting.pop import ReceiptHandle
from pyrmq.remoting.errors import RemotingClosed, RemotingError
from pyrmq.remoting.framing import FrameDecoder
from pyrmq.remoting.message import BatchEntry

__all__ = ["BlockingProducer", "BlockingPushConsumer", "BlockingPullConsumer", "BlockingSimpleConsumer", "BlockingAdmin"]

log = logging.getLogger("pyrmq.client.blocking")

_RANGE_DONE = object()


class _Portal:
    """The process's background trio loop, shared and reference counted."""

    _lock = threading.Lock()
    _current: _Portal | None = None

    def __init__(self) -> None:
        self.users = 0
        self._token: trio.lowlevel.TrioToken | None = None
        self._nursery: trio.Nursery | None = None
        self._stop: trio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main_thread, name="pyrmq-client-loop", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error

    @classmethod
    def acquire(cls) -> _Portal:
        with cls._lock:
            portal = cls._current
            if portal is None or not portal._thread.is_alive():
                portal = cls._current = _Portal()
            portal.users += 1
            return portal

    def release(self) -> None:
        with _Portal._lock:
            self.users -= 1
            if self.users > 0:
                return
            if _Portal._current is self:
                _Portal._current = None
        token, self._token = self._token, None
        if token is not None and self._stop is not None:
            try:
                trio.from_thread.run_sync(self._stop.set, trio_token=token)
            except trio.RunFinishedError:
                pass
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=15)

    def _main_thread(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as exc:  # pragma: no cover - trio itself failed
            self._error = exc
            self._ready.set()

    async def _main(self) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self._stop = trio.Event()
            self._token = trio.lowlevel.current_trio_token()
            self._ready.set()
            await self._stop.wait()
            nursery.cancel_scope.cancel()

    def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        token = self._token
        if token is None:
            raise ClientStateError("the client loop is stopped")
        call = functools.partial(fn, *args, **kwargs) if kwargs else fn
        try:
            return trio.from_thread.run(call, *([] if kwargs else args), trio_token=token)
        except trio.RunFinishedError:
            raise ClientStateError("the client loop is stopped") from None

    def run_sync(self, fn: Callable[..., Any], *args: Any) -> Any:
        token = self._token
        if token is None:
            raise ClientStateError("the client loop is stopped")
        return trio.from_thread.run_sync(fn, *args, trio_token=token)

    def spawn(self, fn: Callable[[], Awaitable[Any]]) -> None:
        """Start ``fn()`` as a task of the loop (it must not raise: hand its outcome over yourself)."""
        assert self._nursery is not None
        self.run_sync(self._nursery.start_soon, fn)

    def start_service(self, service: Any) -> threading.Event:
        """Run ``service.run`` in the loop; returns once it started, with an event set when it has ended."""
        done = threading.Event()

        async def serve(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            started = False

            def mark(value: Any = None) -> None:
                nonlocal started
                started = True
                task_status.started(value)

            class _Status:
                def started(self, value: Any = None) -> None:
                    mark(value)

            try:
                await service.run(task_status=_Status())
            except Exception:
                if not started:
                    raise
                log.exception("%r stopped with an error", service)
            finally:
                done.set()

        assert self._nursery is not None
        self.run(self._nursery.start, serve)
        return done


class _BlockingService:
    """Start/shutdown plumbing shared by the blocking wrappers."""

    def __init__(self, target: Any) -> None:
        self._target = target
        self._portal: _Portal | None = None
        self._done: threading.Event | None = None

    def start(self) -> None:
        if self._portal is not None:
            return
        portal = _Portal.acquire()
        try:
            self._done = portal.start_service(self._target)
        except BaseException:
            portal.release()
            raise
        self._portal = portal

    def shutdown(self, timeout: float = 30.0) -> None:
        portal, self._portal = self._portal, None
        if portal is None:
            return
        try:
            portal.run_sync(self._target.close)
            if self._done is not None:
                self._done.wait(timeout)
        finally:
            portal.release()

    def __enter__(self) -> Any:
        self.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.shutdown()

    def _run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self._portal is None:
            raise ClientStateError(f"{type(self).__name__} is not started (use `with` or .start())")
        return self._portal.run(fn, *args, **kwargs)

    @property
    def client_id(self) -> str:
        return self._target.client_id


class _DirectSender:
    """The plain-socket path of :meth:`BlockingProducer.send`: the calling thread writes the request and reads the
    answer on a blocking socket of its own to the broker (one per thread and broker), with no hop onto the client's
    loop. It uses the loop's route and queue choice (round robin / fault strategy), prepares the message and reads
    the answer with the producer's own code, and hands the send to the loop's path (``Producer._send_prepared``,
    same UNIQ_KEY) whenever that path has more to do: no route yet, send hooks, a connection or broker error worth a
    retry, a status that asks for another broker."""

    def __init__(self, producer: Producer) -> None:
        self.producer = producer
        self._local = threading.local()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self.closed = False

    def _connection(self, addr: str) -> tuple[socket.socket, FrameDecoder]:
        conns = getattr(self._local, "conns", None)
        if conns is None:
            conns = self._local.conns = {}
        conn = conns.get(addr)
        if conn is None:
            host, _, port = addr.rpartition(":")
            timeout = self.producer.send_timeout
            sock = socket.create_connection((host, int(port)), timeout=timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            # a plain blocking socket whose kernel send/receive timeouts bound each call: no poll() before every
            # send and receive, no fcntl per send (what a Python-level timeout costs); a timeout is an OSError
            sock.settimeout(None)
            limit = struct.pack("ll", int(timeout), int((timeout % 1) * 1_000_000))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, limit)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, limit)
            with self._lock:
                self._sockets.append(sock)
            conn = conns[addr] = (sock, FrameDecoder())
        return conn

    def _drop(self, addr: str) -> None:
        conn = self._local.conns.pop(addr, None)
        if conn is not None:
            with self._lock:
                if conn[0] in self._sockets:
                    self._sockets.remove(conn[0])
            conn[0].close()

    def send(self, msg: Message, loop: Callable[..., Any]) -> SendResult:
        producer = self.producer
        instance = producer.instance
        info = instance.publish.get(msg.topic)
        if self.closed or producer.hooks or info is None or not info.ok:
            return loop(producer.send, msg)
        producer._ready()
        p = producer._prepare(msg)
        mq = producer.fault.select(info, None)
        addr = instance.broker_addr(mq.broker_name)
        if addr is None:
            return loop(producer._send_prepared, p)
        begin = time.monotonic()
        request = producer._request(p, mq, int(time.time() * 1000))
        signer = instance.remoting.signer
        if signer is not None:
            request.ext_json = None  # the signer adds members: the header is written from ext_fields
            signer(request)
        parts: list = []
        request.encode_into(parts)
        opaque = request.opaque
        try:
            sock, decoder = self._connection(addr)
            sock.sendall(b"".join(parts))
            response = None
            while response is None:
                data = sock.recv(65536)
                if not data:
                    raise RemotingClosed(addr)
                for cmd in decoder.feed(data):
                    if cmd.flag & 1 and cmd.opaque == opaque:  # RPC_RESPONSE
                        response = cmd
        except (OSError, RemotingError) as exc:
            self._drop(addr)
            producer.fault.update(mq.broker_name, (time.monotonic() - begin) * 1000, True)
            log.info("direct send to %s failed (%s): the client loop retries it", addr, exc)
            return loop(producer._send_prepared, p)
        try:
            result = producer._result(p, mq, response, addr)
        except BrokerError as exc:
            if exc.code in RETRY_CODES:
                return loop(producer._send_prepared, p)
            raise
        producer.fault.update(mq.broker_name, (time.monotonic() - begin) * 1000, False)
        if result.status is not SendStatus.SEND_OK and producer.retry_another_broker_when_not_store_ok:
            return loop(producer._send_prepared, p)
        return result

    def close(self) -> None:
        self.closed = True
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            sock.close()


class BlockingProducer(_BlockingService):
    """:class:`Producer` for threads; same arguments.

    ``send(msg)`` without options goes over a blocking socket of the calling thread once the topic's route is
    known (see :class:`_DirectSender`): a thread's round trip without the hops onto the client's loop thread."""

    def __init__(self, namesrv: str | Iterable[str] | None = None, group: str = "pyrmq_producer", **kwargs: Any) -> None:
        self.producer = Producer(namesrv, group, **kwargs)
        super().__init__(self.producer)
        self._direct = _DirectSender(self.producer)

    def send(self, msg: Message, **kwargs: Any) -> SendResult:
        if kwargs or self._portal is None:
            return self._run(self.producer.send, msg, **kwargs)
        return self._direct.send(msg, self._run)

    def shutdown(self, timeout: float = 30.0) -> None:
        self._direct.close()
        super().shutdown(timeout)

    def send_orderly(self, msg: Message, sharding_key: Any, **kwargs: Any) -> SendResult:
        return self._run(self.producer.send_orderly, msg, sharding_key, **kwargs)

    def send_batch(self, msgs: Iterable[Message], **kwargs: Any) -> list[SendResult]:
        return self._run(self.producer.send_batch, list(msgs), **kwargs)

    def send_encoded_batch(self, topic: str, entries: Sequence[BatchEntry], uniq_keys: Sequence[str], **kwargs: Any) -> SendResult:
        return self._run(self.producer.send_encoded_batch, topic, entries, uniq_keys, **kwargs)

    def send_oneway(self, msg: Message, **kwargs: Any) -> None:
        self._run(self.producer.send_oneway, msg, **kwargs)

    def send_async(
        self, msg: Message, callback: Callable[[SendResult | None, BaseException | None], None] | None = None, **kwargs: Any
    ) -> concurrent.futures.Future[SendResult]:
        """Returns once the request is written; the Future completes with the answer. ``callback`` runs on the
        client's loop thread and must not block."""
        future: concurrent.futures.Future[SendResult] = concurrent.futures.Future()

        def done(result: SendResult | None, error: BaseException | None) -> None:
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)  # type: ignore[arg-type]
            if callback is not None:
                callback(result, error)

        self._run(self.producer.send_async, msg, done, **kwargs)
        return future

    def add_send_hook(self, hook: SendHook | None = None, **kwargs: Any) -> None:
        self.producer.add_send_hook(hook, **kwargs)


class BlockingPushConsumer(_BlockingService):
    """:class:`PushConsumer` for threads: a sync listener runs in worker threads, or iterate ``for msg in c``."""

    def __init__(self, namesrv: str | Iterable[str] | None = None, group: str = "pyrmq_consumer", **kwargs: Any) -> None:
        self.consumer = PushConsumer(namesrv, group, **kwargs)
        super().__init__(self.consumer)

    def subscribe(self, topic: str, expression: Any = "*", expression_type: str = "TAG", *, sql: str | None = None) -> None:
        if self._portal is None:
            self.consumer.subscribe(topic, expression, expression_type, sql=sql)
        else:
            self._portal.run_sync(functools.partial(self.consumer.subscribe, topic, expression, expression_type, sql=sql))

    def register_listener(self, listener: Callable[[MessageExt], Any]) -> Callable[[MessageExt], Any]:
        return self.consumer.register_listener(listener)

    def assigned_queues(self) -> set[MessageQueue]:
        return set(self._portal.run_sync(self.consumer.assigned_queues)) if self._portal else set()

    def __iter__(self) -> Iterator[MessageExt]:
        return self

    def __next__(self) -> MessageExt:
        try:
            return self._run(self.consumer.__anext__)
        except StopAsyncIteration:
            raise StopIteration from None

    def receive(self, timeout: float | None = None) -> MessageExt | None:
        """The next message (acknowledging the previous one), or None after ``timeout`` seconds."""
        if timeout is None:
            return next(self)

        async def bounded() -> MessageExt | None:
            with trio.move_on_after(timeout):
                return await self.consumer.__anext__()
            return None

        try:
            return self._run(bounded)
        except StopAsyncIteration:
            return None

    def reconsume_later(self, msg: MessageExt) -> None:
        self.consumer.reconsume_later(msg)


class BlockingPullConsumer(_BlockingService):
    """:class:`PullConsumer` for threads."""

    def __init__(self, namesrv: str | Iterable[str] | None = None, group: str = "pyrmq_pull_consumer", **kwargs: Any) -> None:
        self.consumer = PullConsumer(namesrv, group, **kwargs)
        super().__init__(self.consumer)

    def fetch_queues(self, topic: str) -> list[MessageQueue]:
        return self._run(self.consumer.fetch_queues, topic)

    def pull(self, mq: MessageQueue, expression: str = "*", offset: int = 0, max_nums: int = 32, **kwargs: Any) -> PullResult:
        return self._run(self.consumer.pull, mq, expression, offset, max_nums, **kwargs)

    def committed_offset(self, mq: MessageQueue) -> int:
        return self._run(self.consumer.committed_offset, mq)

    def update_offset(self, mq: MessageQueue, offset: int) -> None:
        self._run(self._async_update, mq, offset)

    async def _async_update(self, mq: MessageQueue, offset: int) -> None:
        self.consumer.update_offset(mq, offset)

    def commit_offset(self, mq: MessageQueue, offset: int) -> None:
        self._run(self.consumer.commit_offset, mq, offset)

    def min_offset(self, mq: MessageQueue) -> int:
        return self._run(self.consumer.min_offset, mq)

    def max_offset(self, mq: MessageQueue) -> int:
        return self._run(self.consumer.max_offset, mq)

    def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        return self._run(self.consumer.search_offset, mq, timestamp_ms)

    def pull_range(
        self, mq: MessageQueue, start: int, end: int, *, expression: str = "*", window: int = PULL_WINDOW,
        timeout: float | None = None,
    ) -> Iterator[RawPullBatch]:
        """:meth:`PullConsumer.pull_range` as an iterator: the pulls run on the client loop, at most ``2 * window``
        answers ahead of the reading thread; closing the iterator stops them."""
        portal = self._portal
        if portal is None:
            raise ClientStateError("BlockingPullConsumer is not started (use `with` or .start())")
        out: queue.Queue[Any] = queue.Queue(maxsize=2 * window)
        stop = threading.Event()
        finished = threading.Event()

        async def put(item: Any) -> bool:
            # the reader is a plain thread: poll a bounded queue rather than block the loop
            while not stop.is_set():
                try:
                    out.put_nowait(item)
                    return True
                except queue.Full:
                    await trio.sleep(0.002)
            return False

        async def run() -> None:
            try:
                await self.consumer.pull_range(mq, start, end, put, expression=expression, window=window, timeout=timeout)
                item: Any = _RANGE_DONE
            except Exception as exc:  # noqa: BLE001 - raised in the reading thread
                item = exc
            try:
                await put(item)
            finally:
                finished.set()

        portal.spawn(run)
        try:
            while True:
                try:
                    item = out.get(timeout=0.5)
                except queue.Empty:
                    if finished.is_set() and out.empty():
                        raise ClientStateError("the client loop stopped during a pull") from None
                    continue
                if item is _RANGE_DONE:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            stop.set()


class BlockingSimpleConsumer(_BlockingService):
    """:class:`SimpleConsumer` for threads: ``receive`` / ``ack`` / ``change_invisible_duration`` block the calling
    thread; any number of threads may share one consumer."""

    def __init__(self, namesrv: str | Iterable[str] | None = None, group: str = "pyrmq_simple_consumer",
                 **kwargs: Any) -> None:
        self.consumer = SimpleConsumer(namesrv, group, **kwargs)
        super().__init__(self.consumer)

    def subscribe(self, topic: str, expression: Any = "*", expression_type: str = "TAG", *, sql: str | None = None) -> None:
        if self._portal is None:
            self.consumer.subscribe(topic, expression, expression_type, sql=sql)
        else:
            self._portal.run_sync(functools.partial(self.consumer.subscribe, topic, expression, expression_type, sql=sql))

    def receive(self, max_messages: int = 16, invisible_duration: Any = 30.0, *,
                await_duration: Any = None) -> list[PopMessage]:
        return self._run(self.consumer.receive, max_messages, invisible_duration, await_duration=await_duration)

    def ack(self, message: PopMessage) -> None:
        self._run(self.consumer.ack, message)

    def ack_batch(self, messages: Sequence[PopMessage]) -> None:
        self._run(self.consumer.ack_batch, list(messages))

    def change_invisible_duration(self, message: PopMessage, invisible_duration: Any) -> ReceiptHandle:
        return self._run(self.consumer.change_invisible_duration, message, invisible_duration)


class BlockingAdmin(_BlockingService):
    """:class:`Admin` for threads: every async method of Admin, called the same way, blocking."""

    _METHODS = frozenset({
        "cluster_info", "list_clusters", "create_topic", "delete_topic", "list_topics", "topic_route", "topic_stats",
        "group_progress", "reset_offset", "query_message_by_key", "query_message_by_unique_key", "query_message_by_id",
        "list_groups", "put_group", "delete_group",
    })

    def __init__(self, namesrv: str | Iterable[str] | None = None, **kwargs: Any) -> None:
        self.admin = Admin(namesrv, **kwargs)
        super().__init__(self.admin)

    def __getattr__(self, name: str) -> Any:
        if name in BlockingAdmin._METHODS:
            method = getattr(self.admin, name)
            return functools.partial(self._run, method)
        raise AttributeError(name)
