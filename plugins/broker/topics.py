"""Topic configs of a broker (RocketMQ's TopicConfigManager, spec 3.9, 4.3, 6.6, 7.3, 7.9).

Holds every topic's queue counts and permission, the built-in topics, TBW102 auto-creation, and the data version
that name-server registration carries. Persisted to ``config/topics.json`` in RocketMQ's shape.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from typing import Any

import attrs

from pyrmq.remoting.vocabulary import (  # noqa: F401 - the topic names are used from here by other broker modules
    AUTO_CREATE_TOPIC_KEY,
    DLQ_GROUP_TOPIC_PREFIX,
    RETRY_GROUP_TOPIC_PREFIX,
    SCHEDULE_TOPIC,
    TRACE_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    Permission,
)

log = logging.getLogger("pyrmq.broker.topics")

#: topics a producer may not send to directly (spec 2.4)
NOT_ALLOWED_SEND_TOPICS = frozenset({SCHEDULE_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC})
MAX_TOPIC_LENGTH = 127
_VALID = re.compile(r"^[%|a-zA-Z0-9_-]+$")


def topic_problem(topic: str | None) -> str | None:
    """Why ``topic`` is not a valid topic name (spec 7.9), or None when it is."""
    if not topic or not topic.strip():
        return "the topic name is blank"
    if len(topic) > MAX_TOPIC_LENGTH:
        return f"the topic name is longer than {MAX_TOPIC_LENGTH} characters"
    if not _VALID.match(topic):
        return f"the topic name {topic!r} contains characters outside [%|a-zA-Z0-9_-]"
    return None


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

    def to_json(self) -> dict[str, Any]:
        return {
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
            TopicConfig("SELF_TEST_TOPIC", 1, 1),
            TopicConfig("BenchmarkTest", 1024, 1024),
            TopicConfig(s.brokerClusterName, 16, 16, Permission.INHERIT | (Permission.READ | Permission.WRITE if s.clusterTopicEnable else 0)),
            TopicConfig(s.brokerName, 1, 1, Permission.INHERIT | (Permission.READ | Permission.WRITE if s.brokerTopicEnable else 0)),
            TopicConfig("OFFSET_MOVED_EVENT", 1, 1),
            TopicConfig(SCHEDULE_TOPIC, 18, 18),
            TopicConfig(f"{s.brokerClusterName}_REPLY_TOPIC", 1, 1),
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
        """Auto-create ``topic`` on first send from the template topic (TBW102) when it allows it (spec 7.3)."""
        existing = self.table.get(topic)
        if existing is not None:
            return existing
        template = self.table.get(default_topic or AUTO_CREATE_TOPIC_KEY)
        if template is None:
            return None
        if not template.perm & Permission.INHERIT:
            return None
        nums = max(1, min(int(queue_nums), template.write_queue_nums))
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
