"""From options to queue ranges: resolve starting/ending offsets per message queue, split large ranges.

Runs on the driver (batch planning and every micro-batch), asking the name servers and brokers through
:class:`pyrmq.client.BlockingPullConsumer`; pure Python.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from pyrmq.client import BlockingPullConsumer, ClientConfig, MessageQueue, PullStatus

from .options import EARLIEST, LATEST, OffsetSpec, OptionError, ReadOptions


@attrs.frozen
class QueueRange:
    """Queue offsets ``[start, end)`` of one message queue; what one Spark input partition reads."""

    topic: str
    broker_name: str
    queue_id: int
    start: int
    end: int
    store_root: str | None = None

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


def queue_key(mq: MessageQueue) -> tuple[str, int]:
    return (mq.broker_name, mq.queue_id)


def open_consumer(namesrv: str, group: str, timeout: float) -> BlockingPullConsumer:
    """A started pull consumer of the client library for the data source's requests (close it with ``shutdown``)."""
    consumer = BlockingPullConsumer(namesrv, group, config=ClientConfig(namesrv_addr=namesrv, api_timeout=timeout))
    consumer.start()
    return consumer


def store_time(consumer: BlockingPullConsumer, mq: MessageQueue, offset: int) -> int | None:
    """The store timestamp of the message at ``offset`` (None when there is none)."""
    result = consumer.pull(mq, "*", offset, 1)
    if result.status is not PullStatus.FOUND or not result.messages:
        return None
    return result.messages[0].store_timestamp


def offset_for_time(consumer: BlockingPullConsumer, mq: MessageQueue, timestamp: int) -> int:
    """The first queue offset whose store time is >= ``timestamp`` (exact, unlike the broker's "closest")."""
    lo, hi = consumer.min_offset(mq), consumer.max_offset(mq)
    if lo >= hi:
        return hi
    found = min(max(consumer.search_offset(mq, timestamp), lo), hi - 1)
    # spec 7.13: the broker answers the closer of the two neighbours; step right while the time is earlier
    # (at most once for the broker's binary search, but stay correct for any answer)
    while found < hi:
        ts = store_time(consumer, mq, found)
        if ts is None or ts >= timestamp:
            break
        found += 1
    while found > lo:
        ts = store_time(consumer, mq, found - 1)
        if ts is None or ts < timestamp:
            break
        found -= 1
    return found


def resolve(client: BlockingPullConsumer, topic: str, queues: Sequence[MessageQueue], spec: OffsetSpec, option: str) -> dict[tuple[str, int], int]:
    """The concrete offset of every queue for ``spec``."""
    out: dict[tuple[str, int], int] = {}
    if spec.kind == "map":
        known = {queue_key(mq) for mq in queues}
        unknown = sorted(set(spec.per_queue) - known)
        if unknown:
            names = ", ".join(f"{b}/{q}" for b, q in unknown)
            have = ", ".join(f"{b}/{q}" for b, q in sorted(known))
            raise OptionError(option, f"topic {topic!r} has no queue {names} (its queues: {have})")
    for mq in queues:
        if spec.kind == "earliest":
            out[queue_key(mq)] = client.min_offset(mq)
        elif spec.kind == "latest":
            out[queue_key(mq)] = client.max_offset(mq)
        elif spec.kind == "timestamp":
            out[queue_key(mq)] = offset_for_time(client, mq, spec.timestamp)
        else:
            value = spec.per_queue.get(queue_key(mq), spec.default)
            if value == EARLIEST:
                value = client.min_offset(mq)
            elif value == LATEST:
                value = client.max_offset(mq)
            out[queue_key(mq)] = value
    return out


def store_root_for(options: ReadOptions, broker_name: str, brokers: Sequence[str]) -> str | None:
    """The store directory a partition of ``broker_name`` reads directly, if ``storePath`` names one."""
    sp = options.store_path
    if sp is None:
        return None
    if isinstance(sp, str):
        if len(set(brokers)) > 1:
            raise OptionError(
                "storePath", f"topic {options.topic!r} lives on brokers {', '.join(sorted(set(brokers)))}: "
                'give a JSON map {"broker name": "store directory"}'
            )
        return sp
    return sp.get(broker_name)


def split(
    options: ReadOptions, queues: Sequence[MessageQueue], starts: Mapping[tuple[str, int], int], ends: Mapping[tuple[str, int], int]
) -> list[QueueRange]:
    """One range per queue with data, cut into pieces of at most ``maxMessagesPerPartition`` offsets."""
    brokers = [mq.broker_name for mq in queues]
    out: list[QueueRange] = []
    step = options.max_per_partition
    for mq in queues:
        key = queue_key(mq)
        start, end = starts.get(key, 0), ends.get(key, 0)
        if end <= start:
            continue
        root = store_root_for(options, mq.broker_name, brokers)
        for lo in range(start, end, step):
            out.append(QueueRange(options.topic, mq.broker_name, mq.queue_id, lo, min(end, lo + step), root))
    return out


def plan_batch(options: ReadOptions) -> list[QueueRange]:
    client = open_consumer(options.namesrv, options.consumer_group, options.timeout)
    try:
        queues = read_queues(client, options.topic)
        starts = resolve(client, options.topic, queues, options.starting, "startingOffsets")
        ends = resolve(client, options.topic, queues, options.ending, "endingOffsets")
    finally:
        client.shutdown()
    return split(options, queues, starts, ends)


def read_queues(client: BlockingPullConsumer, topic: str) -> list[MessageQueue]:
    """The topic's readable queues whose broker has a master, brokers in name order (what a partition pulls)."""
    return [mq for mq in client.fetch_queues(topic) if client.consumer.instance.broker_addr(mq.broker_name)]


def cap_per_trigger(
    start: Mapping[tuple[str, int], int], latest: Mapping[tuple[str, int], int], max_rows: int | None
) -> dict[tuple[str, int], int]:
    """End offsets of a micro-batch: ``latest``, or at most ``max_rows`` messages shared fairly by the queues."""
    end = {k: max(v, start.get(k, 0)) for k, v in latest.items()}
    for k, v in start.items():
        end.setdefault(k, v)
    if max_rows is None:
        return end
    pending = {k: end[k] - start.get(k, 0) for k in end if end[k] > start.get(k, 0)}
    budget = max_rows
    capped = {k: start.get(k, 0) for k in end}
    # water-filling: give every queue an equal share; what a short queue does not use goes to the others
    while pending and budget > 0:
        share = max(1, budget // len(pending))
        for k in sorted(pending):
            if budget <= 0:
                break
            take = min(share, pending[k], budget)
            capped[k] += take
            pending[k] -= take
            budget -= take
        pending = {k: v for k, v in pending.items() if v > 0}
    return capped
