"""What the Spark plugin asks of name servers and brokers, over the remoting protocol (blocking, for Spark's threads).

pyrmq.client (the Python client library) had not landed when this was written, so this small module speaks the
remoting layer directly: routes (GET_ROUTEINFO_BY_TOPIC 105, spec 4.1), queue offsets (GET_MIN/MAX_OFFSET 31/30,
SEARCH_OFFSET_BY_TIMESTAMP 29, spec 7.13), pulls (PULL_MESSAGE 11, spec 3.3/3.4) and batched sends
(SEND_BATCH_MESSAGE 320, spec 5.8).

Pulls are pipelined: a broker answers at most 32 messages per pull by default (``maxTransferCountOnMessageInMemory``),
so one pull in flight would cap a partition at 32 messages per round trip. :func:`pull_range` learns the broker's
cap from its first answer, keeps a window of pulls in flight at speculative offsets and keeps only what continues
the range in order (see ``_pull_loop``).
"""

from __future__ import annotations

import logging
import os
import queue
import random
import socket
import struct
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import attrs
import trio

from pyrmq.remoting import fastjson
from pyrmq.remoting.blocking import BlockingRemotingClient
from pyrmq.remoting.client import RemotingClient
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.errors import RemotingError
from pyrmq.remoting.headers import (
    GetMaxOffsetRequestHeader,
    GetMinOffsetRequestHeader,
    GetRouteInfoRequestHeader,
    PullMessageRequestHeader,
    SearchOffsetRequestHeader,
    SendMessageRequestHeader,
)

log = logging.getLogger("pyrmq.spark")

PERM_WRITE = 0x2
PERM_READ = 0x4
FLAG_SUBSCRIPTION = 0x4
PULL_BATCH = 32  # a broker's default per-pull cap (maxTransferCountOnMessageInMemory)
PULL_MAX = 1024  # the most a pull asks for (a Java consumer's pullBatchSize limit)
PULL_WINDOW = 16


class BrokerError(RuntimeError):
    """A name server or broker refused or failed a request; the message says which, and what it answered."""


class TopicNotFound(BrokerError):
    """The name servers know no route for the topic."""


@attrs.frozen
class MessageQueue:
    broker_name: str
    queue_id: int
    addr: str  # the master's host:port


@attrs.frozen
class TopicRoute:
    topic: str
    read_queues: tuple[MessageQueue, ...]
    write_queues: tuple[MessageQueue, ...]


def _namesrv_list(namesrv: str) -> list[str]:
    return [a.strip() for a in namesrv.split(";") if a.strip()]


class BrokerClient:
    """Blocking requests to name servers and brokers; one per process/thread user, closed after use."""

    def __init__(self, namesrv: str, *, timeout: float = 10.0) -> None:
        self.namesrv = _namesrv_list(namesrv)
        self.timeout = timeout
        self._client = BlockingRemotingClient(name="pyrmq-spark")

    def close(self) -> None:
        self._client.close()

    @property
    def closed(self) -> bool:
        return self._client.closed

    def __enter__(self) -> BrokerClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _invoke(self, addr: str, request: RemotingCommand) -> RemotingCommand:
        try:
            return self._client.invoke(addr, request, self.timeout)
        except RemotingError as exc:
            raise BrokerError(f"{addr}: request {RequestCode(request.code).name} failed: {exc}") from exc

    # -- routes ------------------------------------------------------------------------------------------------
    def route(self, topic: str) -> TopicRoute:
        header = GetRouteInfoRequestHeader(topic=topic, accept_standard_json_only=True)
        problems = []
        for addr in self.namesrv:
            try:
                resp = self._client.invoke(addr, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, header.to_ext_fields()), self.timeout)
            except RemotingError as exc:
                problems.append(f"{addr}: {exc}")
                continue
            if resp.code == ResponseCode.TOPIC_NOT_EXIST:
                raise TopicNotFound(f"topic {topic!r} does not exist (name server {addr}: {resp.remark})")
            if resp.code != ResponseCode.SUCCESS:
                problems.append(f"{addr}: code {resp.code} {resp.remark}")
                continue
            return _parse_route(topic, fastjson.loads(resp.body_bytes()))
        raise BrokerError(f"no name server answered the route of {topic!r}: {'; '.join(problems)}")

    # -- offsets -----------------------------------------------------------------------------------------------
    def _offset(self, mq: MessageQueue, code: int, header: Any) -> int:
        resp = self._invoke(mq.addr, RemotingCommand.request(code, header.to_ext_fields()))
        if resp.code != ResponseCode.SUCCESS:
            raise BrokerError(f"{mq.broker_name} ({mq.addr}): {RequestCode(code).name} of queue {mq.queue_id}: code {resp.code} {resp.remark}")
        return int(resp.ext_fields.get("offset", "0"))

    def min_offset(self, topic: str, mq: MessageQueue) -> int:
        return self._offset(mq, RequestCode.GET_MIN_OFFSET, GetMinOffsetRequestHeader(topic=topic, queue_id=mq.queue_id))

    def max_offset(self, topic: str, mq: MessageQueue) -> int:
        return self._offset(mq, RequestCode.GET_MAX_OFFSET, GetMaxOffsetRequestHeader(topic=topic, queue_id=mq.queue_id))

    def offset_for_time(self, topic: str, mq: MessageQueue, timestamp: int) -> int:
        """The first queue offset whose store time is >= ``timestamp`` (exact, unlike the broker's "closest")."""
        lo, hi = self.min_offset(topic, mq), self.max_offset(topic, mq)
        if lo >= hi:
            return hi
        found = self._offset(
            mq, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, SearchOffsetRequestHeader(topic=topic, queue_id=mq.queue_id, timestamp=timestamp)
        )
        found = min(max(found, lo), hi - 1)
        # spec 7.13: the broker answers the closer of the two neighbours; step right while the time is earlier
        # (at most once for the broker's binary search, but stay correct for any answer)
        while found < hi:
            ts = self.store_time(topic, mq, found)
            if ts is None or ts >= timestamp:
                break
            found += 1
        while found > lo:
            ts = self.store_time(topic, mq, found - 1)
            if ts is None or ts < timestamp:
                break
            found -= 1
        return found

    def store_time(self, topic: str, mq: MessageQueue, offset: int) -> int | None:
        resp = self.pull(topic, mq, offset, 1)
        if resp.code != ResponseCode.SUCCESS:
            return None
        body = resp.body_bytes()
        if len(body) < 64:
            return None
        sys_flag = struct.unpack_from(">i", body, 36)[0]
        pos = 68 if sys_flag & 0x10 else 56
        return struct.unpack_from(">q", body, pos)[0]

    def pull(self, topic: str, mq: MessageQueue, offset: int, max_nums: int, subscription: str = "*", group: str = "pyrmq-spark") -> RemotingCommand:
        return self._invoke(mq.addr, pull_request(topic, mq.queue_id, offset, max_nums, subscription, group))

    # -- send --------------------------------------------------------------------------------------------------
    def send_batch(self, mq: MessageQueue, header: SendMessageRequestHeader, body: bytes) -> RemotingCommand:
        request = RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE, header.to_ext_fields_v2(), body)
        resp = self._invoke(mq.addr, request)
        if resp.code != ResponseCode.SUCCESS:
            raise BrokerError(f"{mq.broker_name} ({mq.addr}): batch send to {header.topic} queue {mq.queue_id} failed: code {resp.code} {resp.remark}")
        return resp


def _parse_route(topic: str, data: Any) -> TopicRoute:
    masters: dict[str, str] = {}
    for bd in data.get("brokerDatas") or []:
        addrs = bd.get("brokerAddrs") or {}
        master = addrs.get(0, addrs.get("0"))
        if master:
            masters[bd["brokerName"]] = master
    read: list[MessageQueue] = []
    write: list[MessageQueue] = []
    for qd in sorted(data.get("queueDatas") or [], key=lambda q: q["brokerName"]):
        name = qd["brokerName"]
        addr = masters.get(name)
        if addr is None:
            continue
        perm = int(qd.get("perm", 6))
        if perm & PERM_READ:
            read.extend(MessageQueue(name, i, addr) for i in range(int(qd.get("readQueueNums", 0))))
        if perm & PERM_WRITE:
            write.extend(MessageQueue(name, i, addr) for i in range(int(qd.get("writeQueueNums", 0))))
    return TopicRoute(topic, tuple(read), tuple(write))


def pull_request(topic: str, queue_id: int, offset: int, max_nums: int, subscription: str, group: str) -> RemotingCommand:
    header = PullMessageRequestHeader(
        consumer_group=group,
        topic=topic,
        queue_id=queue_id,
        queue_offset=offset,
        max_msg_nums=max_nums,
        sys_flag=FLAG_SUBSCRIPTION,  # no commit (Spark keeps offsets), no suspend (never park a bounded read)
        commit_offset=0,
        suspend_timeout_millis=0,
        sub_version=0,
        subscription=subscription,
        expression_type="TAG",
    )
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, header.to_ext_fields())


# ---------------------------------------------------------------------------------------------------------------
# Pipelined pull of one queue range
# ---------------------------------------------------------------------------------------------------------------

_DONE = object()


def pull_range(
    addr: str, topic: str, queue_id: int, start: int, end: int, *, subscription: str = "*", group: str = "pyrmq-spark",
    timeout: float = 10.0, window: int = PULL_WINDOW,
) -> Iterator[tuple[bytes, int, int]]:
    """Yield ``(pull body, lo, hi)`` covering queue offsets ``[start, end)`` in order: keep the body's records
    whose queue offset is in ``[lo, hi)``. A trio loop on a helper thread keeps ``window`` pulls in flight."""
    if start >= end:
        return
    out: queue.Queue = queue.Queue(maxsize=window * 2)
    stop = threading.Event()
    thread = threading.Thread(
        target=_pull_thread, args=(out, stop, addr, topic, queue_id, start, end, subscription, group, timeout, window),
        name=f"pyrmq-pull-{topic}-{queue_id}", daemon=True,
    )
    thread.start()
    try:
        while True:
            item = out.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        while thread.is_alive():  # unblock a producer waiting on a full queue
            try:
                out.get_nowait()
            except queue.Empty:
                thread.join(0.05)


def _pull_thread(out: queue.Queue, stop: threading.Event, *args: Any) -> None:
    try:
        trio.run(_pull_loop, out, stop, *args)
        item: Any = _DONE
    except BaseException as exc:  # handed to the reading thread
        item = exc
    while not stop.is_set():
        try:
            out.put(item, timeout=0.1)
            return
        except queue.Full:
            continue


async def _put(out: queue.Queue, stop: threading.Event, item: Any) -> bool:
    while not stop.is_set():
        try:
            out.put_nowait(item)
            return True
        except queue.Full:
            await trio.sleep(0.002)
    return False


async def _pull_loop(
    out: queue.Queue, stop: threading.Event, addr: str, topic: str, queue_id: int, start: int, end: int,
    subscription: str, group: str, timeout: float, window: int,
) -> None:
    # Speculative pipelining: pull k asks for ``stride`` messages at ``start + k * stride``. Without a filter a
    # broker returns exactly what is asked up to its per-pull cap (count, bytes), so ``stride`` is learned from the
    # first answer (asked for PULL_MAX) and lowered when an answer comes back short. With a filter the answer
    # covers the entries it scanned, so the stride follows the last scan length. Only answers that continue the
    # range in order are used; anything else restarts the window at the first missing offset.
    filtered = subscription.strip() not in ("", "*")
    async with RemotingClient(name="pyrmq-spark-pull") as client:
        pos = start  # everything below pos has been handed out
        next_req = start
        stride = PULL_MAX
        learned = False
        inflight: list[tuple[int, int, Any]] = []  # (request offset, asked count, result box) in request order
        retries = 0

        async def fetch(offset: int, count: int, box: dict) -> None:
            try:
                box["resp"] = await client.invoke(addr, pull_request(topic, queue_id, offset, count, subscription, group), timeout)
            except BaseException as exc:  # noqa: BLE001 - delivered in order to the loop below
                box["error"] = exc
            box["done"].set()

        async with trio.open_nursery() as nursery:
            while pos < end and not stop.is_set():
                while len(inflight) < (window if learned else 1) and next_req < end:
                    box: dict = {"done": trio.Event()}
                    count = min(stride, end - next_req, PULL_MAX)
                    nursery.start_soon(fetch, next_req, count, box)
                    inflight.append((next_req, count, box))
                    next_req += count
                req, asked, box = inflight.pop(0)
                await box["done"].wait()
                if "error" in box:
                    err = box["error"]
                    if isinstance(err, RemotingError) and retries < 3:
                        retries += 1
                        inflight.clear()
                        next_req = pos
                        await trio.sleep(0.2 * retries)
                        continue
                    raise BrokerError(f"{addr}: pull of {topic} queue {queue_id} at {req} failed: {err}") from err
                resp = box["resp"]
                if req > pos:
                    # a gap: an earlier answer stopped short; restart the window at pos
                    inflight.clear()
                    next_req = pos
                    continue
                code = resp.code
                nxt = int(resp.ext_fields.get("nextBeginOffset", req))
                if code == ResponseCode.SUCCESS:
                    if not await _put(out, stop, (resp.body_bytes(), pos, end)):
                        return
                elif code == ResponseCode.PULL_RETRY_IMMEDIATELY:
                    pass  # scanned entries without a matching tag
                elif code == ResponseCode.PULL_OFFSET_MOVED:
                    if nxt > pos:
                        log.warning("%s queue %d: offsets [%d, %d) are gone from broker %s (retention); skipping", topic, queue_id, pos, nxt, addr)
                    else:
                        raise BrokerError(f"{addr}: {topic} queue {queue_id}: offset {req} moved ({resp.remark}); the range ends at {end}")
                elif code == ResponseCode.PULL_NOT_FOUND:
                    raise BrokerError(f"{addr}: {topic} queue {queue_id}: no message at offset {req}, but the range ends at {end} ({resp.remark})")
                else:
                    raise BrokerError(f"{addr}: pull of {topic} queue {queue_id} at {req}: code {code} {resp.remark}")
                if nxt <= req:
                    raise BrokerError(f"{addr}: pull of {topic} queue {queue_id} at {req} made no progress (nextBeginOffset {nxt})")
                got = nxt - req
                if filtered:
                    stride = max(PULL_BATCH, min(got, PULL_MAX))
                    learned = True
                elif got < asked and nxt < end and code == ResponseCode.SUCCESS:
                    stride = got  # the broker's per-pull cap
                    learned = True
                elif not learned and req + asked >= end:
                    learned = True
                elif not learned:
                    stride = asked  # the broker gave all it was asked: a cap of at least PULL_MAX
                    learned = True
                pos = max(pos, nxt)
                retries = 0
                if next_req < pos or nxt < req + asked:
                    # the broker scanned past the speculative offsets (filtered reads), or answered short of the
                    # next one (its cap): the pulls in flight no longer continue the range
                    inflight.clear()
                    next_req = pos
            nursery.cancel_scope.cancel()


# ---------------------------------------------------------------------------------------------------------------
# Unique message ids (spec 5.10): what a consumer uses to drop the duplicates an at-least-once retry can make
# ---------------------------------------------------------------------------------------------------------------


def _local_ip() -> bytes:
    try:
        return socket.inet_aton(socket.gethostbyname(socket.gethostname()))
    except OSError:
        return b"\x7f\x00\x00\x01"


class UniqueIds:
    """``MessageClientIDSetter``: ip(4) + pid(2) + random(4) + ms since the month started(4) + counter(2), hex."""

    def __init__(self) -> None:
        self.prefix = (_local_ip() + struct.pack(">H", os.getpid() & 0xFFFF) + random.getrandbits(32).to_bytes(4, "big")).hex().upper()
        now = time.localtime()
        month_start = time.mktime((now.tm_year, now.tm_mon, 1, 0, 0, 0, 0, 0, -1))
        self.month_start_ms = int(month_start * 1000)
        self.counter = random.getrandbits(16)

    def next(self) -> str:
        self.counter = (self.counter + 1) & 0xFFFF
        diff = (int(time.time() * 1000) - self.month_start_ms) & 0x7FFFFFFF
        return self.prefix + f"{diff:08X}{self.counter:04X}"


def queues_of(route: TopicRoute, only: Sequence[str] | None = None) -> list[MessageQueue]:
    return [mq for mq in route.read_queues if only is None or mq.broker_name in only]
