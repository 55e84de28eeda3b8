"""Pipelined pulls of one queue range, raw: what bulk readers (the Spark data source) use instead of pull-and-decode.

A broker answers at most 32 messages per pull by default (``maxTransferCountOnMessageInMemory``), so one pull in
flight caps a reader at 32 messages per round trip; the pulls here carry ``largePull``, for which a pyrmq broker
answers up to its ``largePullMaxCount`` (1024) messages instead. :func:`pull_range` learns the broker's cap from its first answer,
keeps a window of pulls in flight at speculative offsets and hands out, in order, only the answers that continue the
range. Bodies are not decoded here: a :class:`RawPullBatch` carries the records back to back (spec 5.1) for the
caller's own bulk decoder. :func:`blocking_pull_range` keeps the same window on a blocking socket of the calling
thread, for readers that are plain threads (a Spark task): no event loop to hand the answers over from.
"""

from __future__ import annotations

import logging
import socket
import struct
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

import attrs
import trio

from pyrmq.client.errors import BrokerError
from pyrmq.client.message import MessageQueue
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.errors import RemotingClosed, RemotingConnectError, RemotingError
from pyrmq.remoting.framing import FrameDecoder
from pyrmq.remoting.vocabulary import LARGE_PULL_FIELD, PullSysFlag

if TYPE_CHECKING:  # pragma: no cover
    from pyrmq.client.blocking import BlockingPullConsumer
    from pyrmq.client.instance import ClientInstance

__all__ = ["RawPullBatch", "blocking_pull_range", "direct_pull_range", "pull_range", "PULL_WINDOW"]

log = logging.getLogger("pyrmq.client.pull")

PULL_BATCH = 32  # a broker's default per-pull cap (maxTransferCountOnMessageInMemory)
PULL_MAX = 1024  # the most a pull asks for (a Java consumer's pullBatchSize limit)
PULL_WINDOW = 16
#: messages asked by the pulls in flight at most (16 pulls of 32 at RocketMQ's cap; 4 of 1024 from a pyrmq broker)
WINDOW_MESSAGES = 4096
RETRIES = 3
# no commit (the caller keeps its offsets), no suspend (never park a bounded read)
_SYS_FLAG = str(int(PullSysFlag.SUBSCRIPTION))


@attrs.frozen
class RawPullBatch:
    """One pull answer: ``body`` holds stored records back to back; keep those whose queue offset is in
    ``[start, end)`` (a speculative pull may overlap what was already handed out)."""

    body: bytes
    start: int
    end: int


def _request(mq: MessageQueue, group: str, offset: int, count: int, subscription: str, expression_type: str) -> RemotingCommand:
    ext = {
        "consumerGroup": group, "topic": mq.topic, "queueId": str(mq.queue_id), "queueOffset": str(offset),
        "maxMsgNums": str(count), "sysFlag": _SYS_FLAG, "commitOffset": "0", "suspendTimeoutMillis": "0",
        "subscription": subscription, "subVersion": "0", "expressionType": expression_type,
        # a pyrmq broker then caps the pull by its largePullMaxCount / largePullMaxBytes rather than RocketMQ's
        # 32 / 256 KiB (docs/decisions.md); other brokers ignore the field
        LARGE_PULL_FIELD: "true",
    }
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, ext)


class _RangeWindow:
    """The speculative window of one range read, shared by :func:`pull_range` (trio) and
    :func:`blocking_pull_range` (a plain socket of the calling thread); the drivers only send and wait.

    Pull k asks for ``stride`` messages at ``start + k * stride``. Without a filter a broker returns exactly what is
    asked up to its per-pull cap (count, bytes), so ``stride`` is learned from the first answer (asked for
    PULL_MAX) and lowered when an answer comes back short. With a filter the answer covers the entries it scanned,
    so the stride follows the last scan length. Only answers that continue the range in order are used; anything
    else restarts the window at the first missing offset."""

    __slots__ = ("addr", "mq", "end", "window", "filtered", "pos", "next_req", "stride", "learned", "inflight", "retries")

    def __init__(self, addr: str, mq: MessageQueue, start: int, end: int, subscription: str, window: int) -> None:
        self.addr = addr
        self.mq = mq
        self.end = end
        self.window = window
        self.filtered = subscription.strip() not in ("", "*")
        self.pos = start  # everything below pos has been handed out
        self.next_req = start
        self.stride = PULL_MAX
        self.learned = False
        #: (request offset, asked count, the driver's handle) in request order
        self.inflight: list[tuple[int, int, Any]] = []
        self.retries = 0

    def fail(self, code: int, what: str) -> BrokerError:
        return BrokerError(code, f"{self.mq.topic} queue {self.mq.queue_id}: {what}", self.addr, "PULL_MESSAGE")

    def next_pull(self) -> tuple[int, int] | None:
        """``(offset, count)`` of the next pull to send now, or None when the window is full (or the range asked).
        The window holds at most WINDOW_MESSAGES messages asked (at least 2 pulls): big pulls, fewer of them."""
        window = max(2, min(self.window, WINDOW_MESSAGES // self.stride)) if self.learned else 1
        if len(self.inflight) < window and self.next_req < self.end:
            return self.next_req, min(self.stride, self.end - self.next_req, PULL_MAX)
        return None

    def sent(self, offset: int, count: int, handle: Any) -> None:
        self.inflight.append((offset, count, handle))
        self.next_req = offset + count

    def restart(self) -> None:
        """Forget the pulls in flight (their answers are ignored) and ask again from ``pos``."""
        self.inflight.clear()
        self.next_req = self.pos

    def failed(self, req: int, error: Exception) -> float:
        """The pull at ``req`` failed on the wire: the seconds to wait before the window restarts, or raise."""
        if self.retries < RETRIES:
            self.retries += 1
            self.restart()
            return 0.2 * self.retries
        raise self.fail(-1, f"pull at {req} failed {RETRIES + 1} times: {error}") from error

    def take(self, req: int, resp: RemotingCommand) -> RawPullBatch | None:
        """The answer to the oldest pull (``req``, popped from ``inflight`` by the caller): the batch to hand out,
        if any; raises BrokerError for an answer that ends the read."""
        code = resp.code
        if code == ResponseCode.SUCCESS:
            return RawPullBatch(resp.body_bytes(), self.pos, self.end)
        if code == ResponseCode.PULL_RETRY_IMMEDIATELY:
            return None  # scanned entries without a matching tag
        nxt = int(resp.ext_fields.get("nextBeginOffset", req))
        if code == ResponseCode.PULL_OFFSET_MOVED:
            if nxt <= self.pos:
                raise self.fail(code, f"offset {req} moved ({resp.remark}); the range ends at {self.end}")
            log.warning("%s queue %d: offsets [%d, %d) are gone from broker %s (retention); skipping",
                        self.mq.topic, self.mq.queue_id, self.pos, nxt, self.addr)
            return None
        if code == ResponseCode.PULL_NOT_FOUND:
            raise self.fail(code, f"no message at offset {req}, but the range ends at {self.end} ({resp.remark})")
        raise self.fail(code, f"pull at {req}: {resp.remark}")

    def advance(self, req: int, asked: int, resp: RemotingCommand) -> None:
        """Move past the answer to the pull at ``req`` (after :meth:`take`): learn the stride, restart the window
        when the answer does not continue the range."""
        code = resp.code
        nxt = int(resp.ext_fields.get("nextBeginOffset", req))
        if nxt <= req:
            raise self.fail(code, f"pull at {req} made no progress (nextBeginOffset {nxt})")
        got = nxt - req
        if self.filtered:
            self.stride = max(PULL_BATCH, min(got, PULL_MAX))
            self.learned = True
        elif got < asked and nxt < self.end and code == ResponseCode.SUCCESS:
            self.stride = got  # the broker's per-pull cap
            self.learned = True
        elif not self.learned and req + asked >= self.end:
            self.learned = True
        elif not self.learned:
            self.stride = asked  # the broker gave all it was asked: a cap of at least PULL_MAX
            self.learned = True
        self.pos = max(self.pos, nxt)
        self.retries = 0
        if self.next_req < self.pos or nxt < req + asked:
            # the broker scanned past the speculative offsets (filtered reads), or answered short of the next one
            # (its cap): the pulls in flight no longer continue the range
            self.restart()


async def pull_range(
    instance: ClientInstance,
    addr: str,
    mq: MessageQueue,
    start: int,
    end: int,
    deliver: Callable[[RawPullBatch], Awaitable[bool]],
    *,
    group: str,
    subscription: str = "*",
    expression_type: str = "TAG",
    window: int = PULL_WINDOW,
    timeout: float = 10.0,
) -> None:
    """Pull queue offsets ``[start, end)`` of ``mq`` from the broker at ``addr``; ``await deliver(batch)`` for every
    answer, in offset order. Stops early when ``deliver`` returns False. Raises :class:`BrokerError` when the broker
    refuses, when the range's messages are gone, or after three failed attempts at one offset."""
    if start >= end:
        return
    invoke = instance.remoting.invoke
    w = _RangeWindow(addr, mq, start, end, subscription, window)

    async def fetch(offset: int, count: int, box: dict[str, Any]) -> None:
        try:
            box["resp"] = await invoke(addr, _request(mq, group, offset, count, subscription, expression_type), timeout)
        except RemotingError as exc:  # delivered in order to the loop below
            box["error"] = exc
        box["done"].set()

    failure: BrokerError | None = None
    async with trio.open_nursery() as nursery:
        try:
            while w.pos < end:
                while (pull := w.next_pull()) is not None:
                    box: dict[str, Any] = {"done": trio.Event()}
                    nursery.start_soon(fetch, *pull, box)
                    w.sent(*pull, box)
                req, asked, box = w.inflight.pop(0)
                await box["done"].wait()
                if "error" in box:
                    await trio.sleep(w.failed(req, box["error"]))
                    continue
                if req > w.pos:
                    w.restart()  # a gap: an earlier answer stopped short
                    continue
                resp = box["resp"]
                batch = w.take(req, resp)
                if batch is not None and not await deliver(batch):
                    break
                w.advance(req, asked, resp)
        except BrokerError as exc:
            failure = exc  # raised below, outside the nursery (not wrapped in an exception group)
        nursery.cancel_scope.cancel()
    if failure is not None:
        raise failure


def _connect(addr: str, timeout: float) -> socket.socket:
    host, _, port = addr.rpartition(":")
    try:
        sock = socket.create_connection((host, int(port)), timeout=timeout)
    except OSError as exc:
        raise RemotingConnectError(addr, str(exc)) from exc
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    # kernel receive/send timeouts bound every call (a timeout is an OSError) without a poll() per recv
    sock.settimeout(None)
    limit = struct.pack("ll", int(timeout), int((timeout % 1) * 1_000_000))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, limit)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, limit)
    return sock


def blocking_pull_range(
    addr: str,
    mq: MessageQueue,
    start: int,
    end: int,
    *,
    group: str,
    subscription: str = "*",
    expression_type: str = "TAG",
    window: int = PULL_WINDOW,
    timeout: float = 10.0,
    signer: Callable[[RemotingCommand], None] | None = None,
) -> Iterator[RawPullBatch]:
    """:func:`pull_range` for a plain thread: the same window of pulls, in flight on a blocking socket of the
    calling thread (its own connection to ``addr``), the answers yielded in offset order. No event loop and no
    second thread: a bulk reader that decodes the bodies itself (the Spark data source) keeps its process to one
    thread. Closing the iterator closes the connection."""
    if start >= end:
        return
    w = _RangeWindow(addr, mq, start, end, subscription, window)
    sock: socket.socket | None = None
    decoder = FrameDecoder()
    answers: dict[int, RemotingCommand] = {}  # opaque -> answer, for pulls still in the window
    try:
        while w.pos < end:
            try:
                if sock is None:
                    sock = _connect(addr, timeout)
                    decoder = FrameDecoder()
                parts: list[Any] = []
                # refill once half the window is answered: one send for several pulls (each send on loopback costs
                # tens of microseconds of this thread's CPU, as much as decoding a few messages)
                while len(w.inflight) <= w.window // 2 or parts:
                    pull = w.next_pull()
                    if pull is None:
                        break
                    request = _request(mq, group, pull[0], pull[1], subscription, expression_type)
                    if signer is not None:
                        signer(request)
                    request.encode_into(parts)
                    w.sent(*pull, request.opaque)
                if parts:
                    sock.sendall(b"".join(parts))
                req, asked, opaque = w.inflight[0]
                while opaque not in answers:
                    data = sock.recv(_RECV_SIZE)
                    if not data:
                        raise RemotingClosed(addr)
                    live = {h for _, _, h in w.inflight}
                    for cmd in decoder.feed(data):
                        if cmd.flag & 1 and cmd.opaque in live:  # a response to a pull still wanted
                            answers[cmd.opaque] = cmd
            except (OSError, RemotingError) as exc:
                if sock is not None:
                    sock.close()
                    sock = None
                answers.clear()
                req = w.inflight[0][0] if w.inflight else w.pos
                time.sleep(w.failed(req, exc))
                continue
            w.inflight.pop(0)
            resp = answers.pop(opaque)
            if req > w.pos:
                w.restart()  # a gap: an earlier answer stopped short
                answers.clear()
                continue
            batch = w.take(req, resp)
            if batch is not None:
                yield batch
            w.advance(req, asked, resp)
            if not w.inflight:
                answers.clear()
    finally:
        if sock is not None:
            sock.close()


_RECV_SIZE = 256 * 1024


def direct_pull_range(
    consumer: BlockingPullConsumer, mq: MessageQueue, start: int, end: int, *, expression: str = "*",
    window: int = PULL_WINDOW, timeout: float | None = None,
) -> Iterator[RawPullBatch]:
    """:func:`blocking_pull_range` for a started :class:`~pyrmq.client.BlockingPullConsumer`: its route finds the
    broker (as :meth:`~pyrmq.client.BlockingPullConsumer.pull_range` does) and its credentials sign the pulls; the
    pulls themselves go over the calling thread's own socket, not through the consumer's loop thread."""
    pull = consumer.consumer
    addr = consumer._run(pull._addr, mq)
    instance = pull.instance
    return blocking_pull_range(
        addr, mq, start, end, group=pull.group, subscription=expression, window=window,
        timeout=instance.config.api_timeout + 7 if timeout is None else timeout, signer=instance.remoting.signer,
    )
