"""Topic configs of a broker (RocketMQ's TopicConfigManager, spec 3.9, 4.3, 6.6, 7.3, 7.9).

Holds every topic's queue counts and permission, the built-in topics, TBW102 auto-creation, and the data version
that name-server registration carries. Persisted to ``config/topics.json`` in RocketMQ's shape.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import attrs

from pyrmq.remoting.validation import (  # noqa: F401 - the checks are used from here by other broker modules
    NOT_ALLOWED_SEND_TOPICS,
    TOPIC_MAX_LENGTH,
    broker_system_topics,
    is_system_topic,
    not_allowed_send_problem,
    system_topic_problem,
    topic_problem,
)
from pyrmq.remoting.vocabulary import (  # noqa: F401 - the topic names are used from here by other broker modules
    AUTO_CREATE_TOPIC_KEY,
    BENCHMARK_TOPIC,
    DLQ_GROUP_TOPIC_PREFIX,
    OFFSET_MOVED_EVENT_TOPIC,
    REPLY_TOPIC_SUFFIX,
    RETRY_GROUP_TOPIC_PREFIX,
    SCHEDULE_TOPIC,
    SELF_TEST_TOPIC,
    TRACE_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    Permission,
)

log = logging.getLogger("pyrmq.broker.topics")

#: RocketMQ's longest topic name (``TopicValidator``), under the name other broker modules import from here
MAX_TOPIC_LENGTH = TOPIC_MAX_LENGTH

#: the most queues a topic may have (UPDATE_AND_CREATE_TOPIC; docs/decisions.md): every per-queue answer (topic
#: stats, consume stats, offset reset) walks them all
MAX_QUEUE_NUMS = 1024


class TopicCreationRefused(Exception):
    """A topic that may not be created as asked; ``remark`` says why (the send answers SYSTEM_ERROR with it)."""

    def __init__(self, remark: str) -> None:
        super().__init__(remark)
        self.remark = remark


#: RocketMQ 5.x's topic attribute saying which messages a topic takes (``TopicMessageType``); absent = NORMAL
MESSAGE_TYPE_ATTRIBUTE = "message.type"
MESSAGE_TYPE_MIXED = "MIXED"
MESSAGE_TYPES = ("NORMAL", "FIFO", "DELAY", "TRANSACTION", MESSAGE_TYPE_MIXED)


def alter_attributes(current: dict[str, str], changes: str | None, *, creating: bool) -> dict[str, str]:
    """A topic's attributes after an UPDATE_AND_CREATE_TOPIC ``attributes`` field (5.x ``AttributeParser``:
    ``+message.type=FIFO`` adds or sets, ``-message.type`` removes, comma-separated). ValueError names what is wrong:
    a key other than ``message.type``, a value outside :data:`MESSAGE_TYPES`, a removal when creating."""
    out = dict(current)
    if not changes:
        return out
    for item in changes.split(","):
        item = item.strip()
        if not item:
            continue
        sign, body = item[0], item[1:]
        if sign not in "+-":
            raise ValueError(f"attribute {item!r} must start with + (set) or - (remove)")
        key, eq, value = body.partition("=")
        if key != MESSAGE_TYPE_ATTRIBUTE:
            raise ValueError(f"unsupported topic attribute key {key!r}: only {MESSAGE_TYPE_ATTRIBUTE} is known")
        if sign == "-":
            if eq or creating:
                raise ValueError(f"attribute {item!r}: only an existing topic's attribute can be removed, without value")
            out.pop(key, None)
            continue
        if not eq or value not in MESSAGE_TYPES:
            raise ValueError(f"attribute {key} value {value!r} is not one of {', '.join(MESSAGE_TYPES)}")
        out[key] = value
    return out


def message_type_of(config: TopicConfig | None) -> str:
    """The topic's ``message.type`` (NORMAL when absent; UNSPECIFIED for no topic, as 5.x)."""
    if config is None:
        return "UNSPECIFIED"
    return config.attributes.get(MESSAGE_TYPE_ATTRIBUTE, "NORMAL")


#: the permission bits as plain ints: ``int & IntFlag`` goes through the enum's Python-level operator
PERM_READ = int(Permission.READ)
PERM_WRITE = int(Permission.WRITE)


def is_writeable(perm: int) -> bool:
    return bool(perm & PERM_WRITE)


def is_readable(perm: int) -> bool:
    return bool(perm & PERM_READ)


@attrs.define
class TopicConfig:
    """One topic on this broker (``TopicConfig`` in RocketMQ; JSON field names in ``to_json``)."""

    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = int(Permission.READ | Permission.WRITE)
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False
    #: RocketMQ 5.x's topic attributes (``message.type``); written to topics.json only when set
    attributes: dict[str, str] = attrs.field(factory=dict)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"attributes": dict(self.attributes)} if self.attributes else {}
        return data | {
            "order": self.order,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicFilterType": self.topic_filter_type,
            "topicName": self.topic_name,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }

    @classmethod
    def from_json(cls, name: str, data: dict[str, Any]) -> TopicConfig:
        return cls(
            topic_name=str(data.get("topicName") or name),
            read_queue_nums=int(data.get("readQueueNums", 16)),
            write_queue_nums=int(data.get("writeQueueNums", 16)),
            perm=int(data.get("perm", Permission.READ | Permission.WRITE)),
            topic_filter_type=str(data.get("topicFilterType", "SINGLE_TAG")),
            topic_sys_flag=int(data.get("topicSysFlag", 0)),
            order=bool(data.get("order", False)),
            attributes={str(k): str(v) for k, v in (data.get("attributes") or {}).items()},
        )


class DataVersion:
    """``{"counter": N, "timestamp": ms}``; bumped on every change so name servers pick up new routes."""

    def __init__(self, timestamp: int | None = None, counter: int = 0) -> None:
        self.timestamp = int(time.time() * 1000) if timestamp is None else timestamp
        self.counter = counter

    def next(self) -> None:
        self.timestamp = int(time.time() * 1000)
        self.counter += 1

    def to_json(self) -> dict[str, int]:
        return {"counter": self.counter, "timestamp": self.timestamp}


class TopicConfigManager:
    """Topic configs with RocketMQ 4.9.8's built-ins and auto-creation rules.

    ``persist(document)`` writes topics.json; ``on_created(topic_config, sync)`` is called when a topic is created
    so the broker re-registers with the name servers at once (oneway for send/heartbeat auto-creation).
    """

    def __init__(
        self,
        settings: Any,
        *,
        persist: Callable[[dict[str, Any]], None] = lambda doc: None,
        on_created: Callable[[TopicConfig, bool], None] = lambda config, sync: None,
    ) -> None:
        self.settings = settings
        self.persist_document = persist
        self.on_created = on_created
        self.table: dict[str, TopicConfig] = {}
        self.data_version = DataVersion()
        #: what this broker adds to RocketMQ's system topics (``TopicValidator.addSystemTopic``): its cluster's and
        #: its own name, ``<cluster>_REPLY_TOPIC``, the trace topic when tracing is on
        self.system_topics = broker_system_topics(
            settings.brokerClusterName, settings.brokerName,
            TRACE_TOPIC if getattr(settings, "traceTopicEnable", False) else None,
        )

    # -- loading and built-ins -------------------------------------------------------------------------------

    def load(self, document: dict[str, Any] | None) -> None:
        if document:
            for name, data in (document.get("topicConfigTable") or {}).items():
                self.table[name] = TopicConfig.from_json(name, data)
            dv = document.get("dataVersion") or {}
            self.data_version = DataVersion(int(dv.get("timestamp", 0)) or None, int(dv.get("counter", 0)))
        self._add_builtins()

    def _add_builtins(self) -> None:
        s = self.settings
        builtins = [
            TopicConfig(SELF_TEST_TOPIC, 1, 1),
            TopicConfig(BENCHMARK_TOPIC, 1024, 1024),
            TopicConfig(s.brokerClusterName, 16, 16, Permission.INHERIT | (Permission.READ | Permission.WRITE if s.clusterTopicEnable else 0)),
            TopicConfig(s.brokerName, 1, 1, Permission.INHERIT | (Permission.READ | Permission.WRITE if s.brokerTopicEnable else 0)),
            TopicConfig(OFFSET_MOVED_EVENT_TOPIC, 1, 1),
            TopicConfig(SCHEDULE_TOPIC, 18, 18),
            TopicConfig(s.brokerClusterName + REPLY_TOPIC_SUFFIX, 1, 1),
        ]
        if s.autoCreateTopicEnable:
            builtins.append(TopicConfig(AUTO_CREATE_TOPIC_KEY, s.defaultTopicQueueNums, s.defaultTopicQueueNums, 7))
        if s.traceTopicEnable:
            builtins.append(TopicConfig(TRACE_TOPIC, 1, 1))
        for config in builtins:
            self.table.setdefault(config.topic_name, config)
        template = self.table.get(AUTO_CREATE_TOPIC_KEY)
        if template is not None and not s.autoCreateTopicEnable:
            # a TBW102 left in topics.json from before must not allow auto-creation any more (spec 7.3)
            template.perm &= ~Permission.INHERIT.value

    def document(self) -> dict[str, Any]:
        return {
            "dataVersion": self.data_version.to_json(),
            "topicConfigTable": {name: config.to_json() for name, config in sorted(self.table.items())},
        }

    def persist(self) -> None:
        self.persist_document(self.document())

    # -- queries ---------------------------------------------------------------------------------------------

    def get(self, topic: str) -> TopicConfig | None:
        return self.table.get(topic)

    def is_system_topic(self, topic: str) -> bool:
        """RocketMQ's system topics, with the ones this broker adds (:attr:`system_topics`)."""
        return is_system_topic(topic, self.system_topics)

    def registration_wrapper(self) -> dict[str, Any]:
        """TopicConfigSerializeWrapper for REGISTER_BROKER; topics carry the broker permission when it is not rw."""
        broker_perm = self.settings.brokerPermission
        table = {}
        for name, config in self.table.items():
            data = config.to_json()
            if broker_perm & (Permission.READ | Permission.WRITE) != Permission.READ | Permission.WRITE:
                data["perm"] = broker_perm
            table[name] = data
        return {"dataVersion": self.data_version.to_json(), "topicConfigTable": table}

    # -- changes ---------------------------------------------------------------------------------------------

    def _changed(self, config: TopicConfig, *, sync_register: bool) -> None:
        self.data_version.next()
        self.persist()
        self.on_created(config, sync_register)

    def update(self, config: TopicConfig) -> None:
        """UPDATE_AND_CREATE_TOPIC: create or replace, persist, re-register synchronously."""
        self.table[config.topic_name] = config
        log.info("topic %s: read %d write %d perm %d", config.topic_name, config.read_queue_nums, config.write_queue_nums, config.perm)
        self._changed(config, sync_register=True)

    def delete(self, topic: str) -> bool:
        if self.table.pop(topic, None) is None:
            return False
        self.data_version.next()
        self.persist()
        return True

    def create_in_send(self, topic: str, default_topic: str | None, queue_nums: int, topic_sys_flag: int = 0) -> TopicConfig | None:
        """Auto-create ``topic`` on first send from the template topic (TBW102) when it allows it (spec 7.3), with
        ``min(queue_nums, the template's write queues)`` queues. None when the template does not allow it;
        TopicCreationRefused when that count is below one (RocketMQ 4.9.7 creates a topic without queues, then refuses
        the send: pyrmq refuses without creating it, docs/decisions.md)."""
        existing = self.table.get(topic)
        if existing is not None:
            return existing
        template = self.table.get(default_topic or AUTO_CREATE_TOPIC_KEY)
        if template is None:
            return None
        if not template.perm & Permission.INHERIT:
            return None
        nums = min(int(queue_nums), template.write_queue_nums)
        if nums < 1:
            raise TopicCreationRefused(
                f"defaultTopicQueueNums[{queue_nums}] is illegal: topic[{topic}] would be created from "
                f"[{template.topic_name}] with {max(nums, 0)} queues; a topic needs at least one"
            )
        config = TopicConfig(
            topic,
            nums,
            nums,
            template.perm & ~Permission.INHERIT.value,
            template.topic_filter_type,
            topic_sys_flag,
        )
        self.table[topic] = config
        log.info("auto-created topic %s from %s with %d queues", topic, template.topic_name, nums)
        self._changed(config, sync_register=False)
        return config

    def create_system_topic(self, topic: str, queue_nums: int, perm: int, topic_sys_flag: int = 0) -> TopicConfig:
        """Retry / DLQ / transaction topics: created on demand with fixed queue counts (spec 7.6)."""
        existing = self.table.get(topic)
        if existing is not None:
            return existing
        config = TopicConfig(topic, queue_nums, queue_nums, perm, "SINGLE_TAG", topic_sys_flag)
        self.table[topic] = config
        log.info("created topic %s with %d queues", topic, queue_nums)
        self._changed(config, sync_register=False)
        return config
