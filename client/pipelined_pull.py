"""Pipelined pulls of one queue range, raw: what bulk readers (the Spark data source) use instead of pull-and-decode.

A broker answers at most 32 messages per pull by default (``maxTransferCountOnMessageInMemory``), so one pull in
flight caps a reader at 32 messages per round trip. :func:`pull_range` learns the broker's cap from its first answer,
keeps a window of pulls in flight at speculative offsets and hands out, in order, only the answers that continue the
range. Bodies are not decoded here: a :class:`RawPullBatch` carries the records back to back (spec 5.1) for the
caller's own bulk decoder.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import attrs
import trio

from pyrmq.client.errors import BrokerError
from pyrmq.client.message import MessageQueue
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.errors import RemotingError
from pyrmq.remoting.vocabulary import PullSysFlag

if TYPE_CHECKING:  # pragma: no cover
    from pyrmq.client.instance import ClientInstance

__all__ = ["RawPullBatch", "pull_range", "PULL_WINDOW"]

log = logging.getLogger("pyrmq.client.pull")

PULL_BATCH = 32  # a broker's default per-pull cap (maxTransferCountOnMessageInMemory)
PULL_MAX = 1024  # the most a pull asks for (a Java consumer's pullBatchSize limit)
PULL_WINDOW = 16
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
    }
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, ext)


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
    # Speculative pipelining: pull k asks for ``stride`` messages at ``start + k * stride``. Without a filter a
    # broker returns exactly what is asked up to its per-pull cap (count, bytes), so ``stride`` is learned from the
    # first answer (asked for PULL_MAX) and lowered when an answer comes back short. With a filter the answer
    # covers the entries it scanned, so the stride follows the last scan length. Only answers that continue the
    # range in order are used; anything else restarts the window at the first missing offset.
    if start >= end:
        return
    filtered = subscription.strip() not in ("", "*")
    invoke = instance.remoting.invoke
    pos = start  # everything below pos has been handed out
    next_req = start
    stride = PULL_MAX
    learned = False
    inflight: list[tuple[int, int, dict[str, Any]]] = []  # (request offset, asked count, result box) in request order
    retries = 0

    def fail(code: int, what: str) -> BrokerError:
        return BrokerError(code, f"{mq.topic} queue {mq.queue_id}: {what}", addr, "PULL_MESSAGE")

    async def fetch(offset: int, count: int, box: dict[str, Any]) -> None:
        try:
            box["resp"] = await invoke(addr, _request(mq, group, offset, count, subscription, expression_type), timeout)
        except RemotingError as exc:  # delivered in order to the loop below
            box["error"] = exc
        box["done"].set()

    failure: BrokerError | None = None
    async with trio.open_nursery() as nursery:
        try:
            while pos < end:
                while len(inflight) < (window if learned else 1) and next_req < end:
                    box: dict[str, Any] = {"done": trio.Event()}
                    count = min(stride, end - next_req, PULL_MAX)
                    nursery.start_soon(fetch, next_req, count, box)
                    inflight.append((next_req, count, box))
                    next_req += count
                req, asked, box = inflight.pop(0)
                await box["done"].wait()
                if "error" in box:
                    if retries < RETRIES:
                        retries += 1
                        inflight.clear()
                        next_req = pos
                        await trio.sleep(0.2 * retries)
                        continue
                    raise fail(-1, f"pull at {req} failed {RETRIES + 1} times: {box['error']}") from box["error"]
                resp = box["resp"]
                if req > pos:
                    # a gap: an earlier answer stopped short; restart the window at pos
                    inflight.clear()
                    next_req = pos
                    continue
                code = resp.code
                nxt = int(resp.ext_fields.get("nextBeginOffset", req))
                if code == ResponseCode.SUCCESS:
                    if not await deliver(RawPullBatch(resp.body_bytes(), pos, end)):
                        break
                elif code == ResponseCode.PULL_RETRY_IMMEDIATELY:
                    pass  # scanned entries without a matching tag
                elif code == ResponseCode.PULL_OFFSET_MOVED:
                    if nxt <= pos:
                        raise fail(code, f"offset {req} moved ({resp.remark}); the range ends at {end}")
                    log.warning("%s queue %d: offsets [%d, %d) are gone from broker %s (retention); skipping",
                                mq.topic, mq.queue_id, pos, nxt, addr)
                elif code == ResponseCode.PULL_NOT_FOUND:
                    raise fail(code, f"no message at offset {req}, but the range ends at {end} ({resp.remark})")
                else:
                    raise fail(code, f"pull at {req}: {resp.remark}")
                if nxt <= req:
                    raise fail(code, f"pull at {req} made no progress (nextBeginOffset {nxt})")
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
        except BrokerError as exc:
            failure = exc  # raised below, outside the nursery (not wrapped in an exception group)
        nursery.cancel_scope.cancel()
    if failure is not None:
        raise failure
