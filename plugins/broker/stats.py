"""The broker's traffic counters, in one place: per topic puts, per topic and group gets and send-backs, broker totals.

What reads them: VIEW_BROKER_STATS_DATA (315, mqadmin statsAll / brokerStatus, the dashboard), GET_CONSUME_STATS
(208, ``consumeTps``), the Prometheus exporter (``plugins/broker/metrics.py``) at scrape time. The send and pull
paths pay one dict lookup and a few integer additions (:meth:`BrokerStats.put` / :meth:`BrokerStats.get`); nothing
else runs per message.

RocketMQ's BrokerStatsManager names and keys (4.9.8):

=================== ===================== ===========================================
stats name          key                   value / times
=================== ===================== ===========================================
``TOPIC_PUT_NUMS``  topic                 messages stored / sends
``TOPIC_PUT_SIZE``  topic                 bytes stored / sends
``GROUP_GET_NUMS``  ``topic@group``       messages pulled / pulls that found some
``GROUP_GET_SIZE``  ``topic@group``       bytes pulled / pulls that found some
``SNDBCK_PUT_NUMS`` ``topic@group``       messages sent back for retry / send-backs
``BROKER_PUT_NUMS`` cluster name          messages stored / sends
``BROKER_GET_NUMS`` cluster name          messages pulled / pulls that found some
=================== ===================== ===========================================

:meth:`BrokerStats.view` answers each as RocketMQ's ``BrokerStatsData``: ``statsMinute`` / ``statsHour`` /
``statsDay``, each ``{"sum", "tps", "avgpt"}`` over the last minute / hour / day. Snapshots are taken every 10 s
(minute, 7 kept), 10 min (hour, 7 kept) and 1 h (day, 25 kept) like RocketMQ's StatsItem; unlike RocketMQ the window
ends at the current value instead of the newest snapshot, so a figure is never up to 10 s stale.
"""

from __future__ import annotations

from bisect import bisect_left
import collections
import time
from typing import Any, Iterator

import trio

TOPIC_PUT_NUMS = "TOPIC_PUT_NUMS"
TOPIC_PUT_SIZE = "TOPIC_PUT_SIZE"
GROUP_GET_NUMS = "GROUP_GET_NUMS"
GROUP_GET_SIZE = "GROUP_GET_SIZE"
SNDBCK_PUT_NUMS = "SNDBCK_PUT_NUMS"
BROKER_PUT_NUMS = "BROKER_PUT_NUMS"
BROKER_GET_NUMS = "BROKER_GET_NUMS"
STATS_NAMES = (TOPIC_PUT_NUMS, TOPIC_PUT_SIZE, GROUP_GET_NUMS, GROUP_GET_SIZE, SNDBCK_PUT_NUMS, BROKER_PUT_NUMS,
               BROKER_GET_NUMS)

#: RocketMQ 5.x's rocketmq_message_size buckets (bytes)
MESSAGE_SIZE_BUCKETS = (1024, 4096, 512 * 1024, 1024 * 1024, 2 * 1024 * 1024, 4 * 1024 * 1024)

SAMPLE_SECONDS = 10
# (name, ticks of SAMPLE_SECONDS between snapshots, snapshots kept): RocketMQ's StatsItem
WINDOWS = (("statsMinute", 1, 7), ("statsHour", 60, 7), ("statsDay", 360, 25))


def _now_ms() -> int:
    return int(time.time() * 1000)


class Counter:
    """One key's running figures (``nums``, ``size``, ``times``) and their snapshots for the three windows."""

    __slots__ = ("nums", "size", "times", "snapshots", "extra")

    def __init__(self) -> None:
        self.nums = 0
        self.size = 0
        self.times = 0
        first = (_now_ms(), 0, 0, 0)
        self.snapshots = tuple(collections.deque([first], maxlen=kept) for _, _, kept in WINDOWS)
        self.extra: Any = None

    def snapshot(self, now_ms: int, tick: int) -> None:
        point = (now_ms, self.nums, self.size, self.times)
        for (_, every, _), kept in zip(WINDOWS, self.snapshots):
            if tick % every == 0:
                kept.append(point)

    def window(self, index: int, field: int) -> dict[str, float]:
        """``{"sum", "tps", "avgpt"}`` of ``field`` (1 nums, 2 size) since the oldest snapshot of window ``index``."""
        start = self.snapshots[index][0]
        now = _now_ms()
        total = (self.nums, self.size)[field - 1] - start[field]
        times = self.times - start[3]
        elapsed = now - start[0]
        return {
            "sum": total,
            "tps": total * 1000.0 / elapsed if elapsed > 0 else 0.0,
            "avgpt": total / times if times > 0 else 0.0,
        }


class TopicPut(Counter):
    """A topic's puts, with its message-size histogram (RocketMQ 5.x buckets, cumulative counts kept per bucket)."""

    __slots__ = ("buckets", "dlq_group")

    def __init__(self, topic: str) -> None:
        super().__init__()
        self.buckets = [0] * (len(MESSAGE_SIZE_BUCKETS) + 1)
        #: the group whose dead letters this topic holds (``%DLQ%<group>``), else None
        self.dlq_group = topic[5:] if topic.startswith("%DLQ%") else None


class Totals(Counter):
    """A broker-wide total (BROKER_PUT_NUMS / BROKER_GET_NUMS): the sum of a table of counters, added up when read
    so the hot paths do not count twice."""

    __slots__ = ("table",)

    def __init__(self, table: dict[Any, Any]) -> None:
        self.table = table
        super().__init__()

    def __getattribute__(self, name: str) -> Any:
        if name in ("nums", "size", "times"):
            return sum(getattr(c, name) for c in list(object.__getattribute__(self, "table").values()))
        return object.__getattribute__(self, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in ("nums", "size", "times"):  # the sums are read-only
            object.__setattr__(self, name, value)


class BrokerStats:
    """All counters of one broker. Hot-path API: :meth:`put` (send), :meth:`get` (pull), :meth:`send_back`.

    Read API (admin requests, metrics, dashboard): :attr:`topics` (topic -> :class:`TopicPut`), :attr:`groups`
    ((topic, group) -> :class:`Counter` of gets), :attr:`send_backs` ((topic, group) -> :class:`Counter`),
    :attr:`broker_put` / :attr:`broker_get`, :meth:`find` and :meth:`view` by RocketMQ stats name and key."""

    def __init__(self, cluster: str) -> None:
        self.cluster = cluster
        self.topics: dict[str, TopicPut] = {}
        self.groups: dict[tuple[str, str], Counter] = {}
        self.send_backs: dict[tuple[str, str], Counter] = {}
        self.broker_put = Totals(self.topics)
        self.broker_get = Totals(self.groups)
        self._tick = 0

    # -- hot path ------------------------------------------------------------------------------------------------

    def put(self, topic: str, nums: int, size: int, _bisect: Any = bisect_left, _bounds: Any = MESSAGE_SIZE_BUCKETS) -> None:
        """``nums`` messages of ``size`` bytes in all were stored in ``topic`` by one send."""
        c = self.topics.get(topic)
        if c is None:
            c = self.topics[topic] = TopicPut(topic)
        c.nums += nums
        c.size += size
        c.times += 1
        c.buckets[_bisect(_bounds, size if nums == 1 else size // nums)] += nums

    def get(self, topic: str, group: str, nums: int, size: int) -> None:
        """A pull of ``group`` returned ``nums`` messages of ``size`` bytes in all from ``topic``."""
        key = (topic, group)
        c = self.groups.get(key)
        if c is None:
            c = self.groups[key] = Counter()
        c.nums += nums
        c.size += size
        c.times += 1

    def send_back(self, topic: str, group: str) -> None:
        """``group`` sent a message of ``topic`` back for retry (CONSUMER_SEND_MSG_BACK)."""
        key = (topic, group)
        c = self.send_backs.get(key)
        if c is None:
            c = self.send_backs[key] = Counter()
        c.nums += 1
        c.times += 1

    # -- reading -------------------------------------------------------------------------------------------------

    def find(self, name: str, key: str) -> tuple[Counter, int] | None:
        """The counter behind RocketMQ stats ``name`` / ``key`` and the field it reads (1 nums, 2 size)."""
        if name in (TOPIC_PUT_NUMS, TOPIC_PUT_SIZE):
            c: Counter | None = self.topics.get(key)
        elif name in (GROUP_GET_NUMS, GROUP_GET_SIZE, SNDBCK_PUT_NUMS):
            topic, sep, group = key.partition("@")
            table = self.send_backs if name == SNDBCK_PUT_NUMS else self.groups
            c = table.get((topic, group)) if sep else None
        elif name in (BROKER_PUT_NUMS, BROKER_GET_NUMS):
            c = (self.broker_put if name == BROKER_PUT_NUMS else self.broker_get) if key == self.cluster else None
        else:
            return None
        if c is None:
            return None
        return c, 2 if name.endswith("_SIZE") else 1

    def view(self, name: str, key: str) -> dict[str, dict[str, float]] | None:
        """RocketMQ's BrokerStatsData for ``name`` / ``key``, or None when nothing was counted under them."""
        found = self.find(name, key)
        if found is None:
            return None
        c, field = found
        return {label: c.window(i, field) for i, (label, _, _) in enumerate(WINDOWS)}

    def group_tps(self, group: str, topic: str | None = None) -> float:
        """Messages per second pulled by ``group`` over the last minute (GET_CONSUME_STATS' consumeTps)."""
        return sum(c.window(0, 1)["tps"] for (t, g), c in self.groups.items() if g == group and topic in (None, t))

    def counters(self) -> Iterator[Counter]:
        yield self.broker_put  # its snapshots hold the sums at the time
        yield self.broker_get
        yield from self.topics.values()
        yield from self.groups.values()
        yield from self.send_backs.values()

    # -- service -------------------------------------------------------------------------------------------------

    def sample(self) -> None:
        self._tick += 1
        now = _now_ms()
        for c in list(self.counters()):
            c.snapshot(now, self._tick)

    async def run(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Snapshot every counter every 10 s (the minute window; every 60th / 360th tick the hour / day ones)."""
        task_status.started()
        while True:
            await trio.sleep(SAMPLE_SECONDS)
            self.sample()
