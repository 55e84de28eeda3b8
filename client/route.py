"""Topic routes as the client uses them (spec 4.1, 7.3): which brokers host a topic, which queues a producer writes
and a consumer reads, and the TBW102 fallback for topics that do not exist yet.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Mapping
from typing import Any

import attrs

from pyrmq.client.message import MessageQueue
from pyrmq.remoting.route import BrokerData, QueueData, TopicRouteData
from pyrmq.remoting.vocabulary import Permission

__all__ = ["TopicRoute", "QueueData", "BrokerData", "PublishInfo"]


@attrs.frozen
class TopicRoute:
    """A decoded TopicRouteData body, for one topic."""

    topic: str
    queue_datas: tuple[QueueData, ...]
    broker_datas: tuple[BrokerData, ...]
    order_topic_conf: str | None = None

    @classmethod
    def from_body(cls, topic: str, body: bytes) -> TopicRoute:
        return cls.from_data(topic, TopicRouteData.decode(body))

    @classmethod
    def from_json(cls, topic: str, data: Mapping[str, Any]) -> TopicRoute:
        return cls.from_data(topic, TopicRouteData.from_json(data))

    @classmethod
    def from_data(cls, topic: str, data: TopicRouteData) -> TopicRoute:
        return cls(topic, data.queue_datas, data.broker_datas, data.order_topic_conf)

    def to_json(self) -> dict[str, Any]:
        return TopicRouteData(self.queue_datas, self.broker_datas, self.order_topic_conf).to_json()

    def broker(self, broker_name: str) -> BrokerData | None:
        for b in self.broker_datas:
            if b.broker_name == broker_name:
                return b
        return None

    def as_topic(self, topic: str, max_queue_nums: int | None = None) -> TopicRoute:
        """This route (normally TBW102's) used for another topic, queues capped like Java's auto-create (7.3)."""
        queues = self.queue_datas
        if max_queue_nums is not None:
            queues = tuple(
                attrs.evolve(q, read_queue_nums=min(max_queue_nums, q.read_queue_nums),
                             write_queue_nums=min(max_queue_nums, q.read_queue_nums))
                for q in queues
            )
        return TopicRoute(topic, queues, self.broker_datas, None)

    def publish_queues(self) -> list[MessageQueue]:
        """Writable queues, brokers sorted by name, masters only (Java ``topicRouteData2TopicPublishInfo``)."""
        out: list[MessageQueue] = []
        if self.order_topic_conf:
            for part in self.order_topic_conf.split(";"):
                name, _, num = part.partition(":")
                if name and num.isdigit():
                    out.extend(MessageQueue(self.topic, name, i) for i in range(int(num)))
            return out
        for q in sorted(self.queue_datas, key=lambda q: q.broker_name):
            if not q.perm & Permission.WRITE:
                continue
            broker = self.broker(q.broker_name)
            if broker is None or broker.master is None:
                continue
            out.extend(MessageQueue(self.topic, q.broker_name, i) for i in range(q.write_queue_nums))
        return out

    def subscribe_queues(self) -> list[MessageQueue]:
        """Readable queues (Java ``topicRouteData2TopicSubscribeInfo``)."""
        out: list[MessageQueue] = []
        for q in self.queue_datas:
            if q.perm & Permission.READ:
                out.extend(MessageQueue(self.topic, q.broker_name, i) for i in range(q.read_queue_nums))
        return sorted(out)


class PublishInfo:
    """A producer's view of a topic: its writable queues and a round-robin index (Java ``TopicPublishInfo``)."""

    __slots__ = ("route", "queues", "order_topic", "have_route", "_index", "_by_broker")

    def __init__(self, route: TopicRoute) -> None:
        self.route = route
        self.queues = route.publish_queues()
        self.order_topic = bool(route.order_topic_conf)
        self.have_route = True
        self._index = itertools.count(int.from_bytes(os.urandom(2), "big"))
        self._by_broker: dict[str, int] = {}
        for q in route.queue_datas:
            self._by_broker[q.broker_name] = q.write_queue_nums

    @property
    def ok(self) -> bool:
        return bool(self.queues)

    def next_index(self) -> int:
        return next(self._index)

    def write_queue_nums(self, broker_name: str) -> int:
        return self._by_broker.get(broker_name, 0)

    def select(self, last_broker: str | None = None) -> MessageQueue:
        """Round robin; on a retry avoid the broker that just failed when another exists."""
        queues = self.queues
        if last_broker is None:
            return queues[next(self._index) % len(queues)]
        for _ in range(len(queues)):
            mq = queues[next(self._index) % len(queues)]
            if mq.broker_name != last_broker:
                return mq
        return queues[next(self._index) % len(queues)]
