"""Topic route records (``TopicRouteData``, spec 4.1): which brokers host a topic and with how many queues.

The name server builds them and encodes them in either JSON dialect 4.x clients accept (fastjson's bare numeric
map keys, or standard JSON for clients that ask with ``acceptStandardJsonOnly``; :mod:`pyrmq.remoting.fastjson`);
clients decode both. One set of records for both sides::

    {"brokerDatas": [{"brokerAddrs": {0: "127.0.0.1:10911"}, "brokerName": "broker-a", "cluster": "DefaultCluster"}],
     "filterServerTable": {},
     "queueDatas": [{"brokerName": "broker-a", "perm": 6, "readQueueNums": 4, "topicSynFlag": 0, "topicSysFlag": 0,
                     "writeQueueNums": 4}]}
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from . import fastjson
from .errors import ProtocolError
from .vocabulary import MASTER_ID, Permission

__all__ = ["QueueData", "BrokerData", "TopicRouteData"]

_READ_WRITE = int(Permission.READ | Permission.WRITE)


def _addrs(value: Mapping[int, str] | Mapping[str, str]) -> dict[int, str]:
    # fastjson writes bare numeric keys, standard JSON quoted ones: both mean the broker id
    return {int(k): str(v) for k, v in value.items()}


@attrs.frozen
class QueueData:
    """A topic's queues on one broker name."""

    broker_name: str
    read_queue_nums: int = attrs.field(converter=int)
    write_queue_nums: int = attrs.field(converter=int)
    perm: int = attrs.field(converter=int)  # Permission bits (6 = read and write)
    topic_sys_flag: int = attrs.field(default=0, converter=int)

    def to_json(self) -> dict[str, object]:
        # both spellings of the sys flag: topicSynFlag (<= 4.8.0) and topicSysFlag (4.9.0+); clients ignore it
        return {
            "brokerName": self.broker_name,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicSynFlag": self.topic_sys_flag,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> QueueData:  # type: ignore[explicit-any]  # decoded JSON
        return cls(
            str(data["brokerName"]),
            data.get("readQueueNums", 0),
            data.get("writeQueueNums", 0),
            data.get("perm", _READ_WRITE),
            data.get("topicSysFlag", data.get("topicSynFlag", 0)) or 0,
        )

    @property
    def readable(self) -> bool:
        return bool(self.perm & Permission.READ)

    @property
    def writable(self) -> bool:
        return bool(self.perm & Permission.WRITE)


@attrs.frozen
class BrokerData:
    """The addresses of one broker name: broker id (0 = master) -> "ip:port"."""

    cluster: str
    broker_name: str
    broker_addrs: Mapping[int, str] = attrs.field(factory=dict, converter=_addrs)

    @property
    def master(self) -> str | None:
        return self.broker_addrs.get(MASTER_ID)

    def any_addr(self) -> str | None:
        """The master, else any slave."""
        return self.broker_addrs.get(MASTER_ID) or next(iter(self.broker_addrs.values()), None)

    def to_json(self) -> dict[str, object]:
        return {
            "brokerAddrs": dict(sorted(self.broker_addrs.items())),
            "brokerName": self.broker_name,
            "cluster": self.cluster,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BrokerData:  # type: ignore[explicit-any]  # decoded JSON
        return cls(str(data.get("cluster", "")), str(data["brokerName"]), data.get("brokerAddrs") or {})


def _queue_datas(value: Iterable[QueueData]) -> tuple[QueueData, ...]:
    return tuple(value)


def _broker_datas(value: Iterable[BrokerData]) -> tuple[BrokerData, ...]:
    return tuple(value)


@attrs.frozen
class TopicRouteData:
    """A GET_ROUTEINFO_BY_TOPIC answer (spec 4.1)."""

    queue_datas: tuple[QueueData, ...] = attrs.field(default=(), converter=_queue_datas)
    broker_datas: tuple[BrokerData, ...] = attrs.field(default=(), converter=_broker_datas)
    order_topic_conf: str | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "brokerDatas": [b.to_json() for b in self.broker_datas],
            "filterServerTable": {},
            "queueDatas": [q.to_json() for q in self.queue_datas],
            **({"orderTopicConf": self.order_topic_conf} if self.order_topic_conf else {}),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TopicRouteData:  # type: ignore[explicit-any]  # decoded JSON
        """A decoded route document (JSON of any shape: what does not convert raises ProtocolError)."""
        try:
            return cls(
                tuple(QueueData.from_json(q) for q in data.get("queueDatas") or ()),
                tuple(BrokerData.from_json(b) for b in data.get("brokerDatas") or ()),
                data.get("orderTopicConf") or None,
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ProtocolError(f"not a topic route: {exc!r}") from None

    def encode(self, style: str = fastjson.FASTJSON) -> bytes:
        """The body in one of the two dialects (:func:`pyrmq.remoting.fastjson.route_json_style` picks it)."""
        return fastjson.dumps(self.to_json(), style=style)

    @classmethod
    def decode(cls, body: bytes) -> TopicRouteData:
        """Either dialect."""
        return cls.from_json(fastjson.loads(body))

    def broker(self, broker_name: str) -> BrokerData | None:
        for b in self.broker_datas:
            if b.broker_name == broker_name:
                return b
        return None
