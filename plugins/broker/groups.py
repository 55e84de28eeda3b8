"""Subscription groups of a broker (RocketMQ's SubscriptionGroupManager, spec 6.6 and 7.6).

Groups are auto-created on first use when ``autoCreateSubscriptionGroup`` (default) or when the group is a system
group (``CID_RMQ_SYS_`` prefix). Persisted to ``config/subscriptionGroup.json`` in RocketMQ's shape.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import attrs

from pyrmq.plugins.broker.topics import DataVersion

log = logging.getLogger("pyrmq.broker.groups")

SYSTEM_GROUP_PREFIX = "CID_RMQ_SYS_"
PRECREATED_GROUPS = (
    "TOOLS_CONSUMER",
    "FILTERSRV_CONSUMER",
    "SELF_TEST_C_GROUP",
    "CID_ONS-HTTP-PROXY",
    "CID_ONSAPI_PULL",
    "CID_ONSAPI_PERMISSION",
    "CID_ONSAPI_OWNER",
)


@attrs.define
class SubscriptionGroupConfig:
    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True
    #: a FIFO group (5.x): its POP consumers get a queue's next messages only once the last batch is acked or visible
    #: again (plugins/broker/pop/fifo.py); mqadmin updateSubGroup -o, pyrmq admin group create --fifo
    consume_message_orderly: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "brokerId": self.broker_id,
            "consumeBroadcastEnable": self.consume_broadcast_enable,
            "consumeEnable": self.consume_enable,
            "consumeFromMinEnable": self.consume_from_min_enable,
            "consumeMessageOrderly": self.consume_message_orderly,
            "groupName": self.group_name,
            "notifyConsumerIdsChangedEnable": self.notify_consumer_ids_changed_enable,
            "retryMaxTimes": self.retry_max_times,
            "retryQueueNums": self.retry_queue_nums,
            "whichBrokerWhenConsumeSlowly": self.which_broker_when_consume_slowly,
        }

    @classmethod
    def from_json(cls, name: str, data: dict[str, Any]) -> SubscriptionGroupConfig:
        return cls(
            group_name=str(data.get("groupName") or name),
            consume_enable=bool(data.get("consumeEnable", True)),
            consume_from_min_enable=bool(data.get("consumeFromMinEnable", True)),
            consume_broadcast_enable=bool(data.get("consumeBroadcastEnable", True)),
            retry_queue_nums=int(data.get("retryQueueNums", 1)),
            retry_max_times=int(data.get("retryMaxTimes", 16)),
            broker_id=int(data.get("brokerId", 0)),
            which_broker_when_consume_slowly=int(data.get("whichBrokerWhenConsumeSlowly", 1)),
            notify_consumer_ids_changed_enable=bool(data.get("notifyConsumerIdsChangedEnable", True)),
            consume_message_orderly=bool(data.get("consumeMessageOrderly", False)),
        )


class SubscriptionGroupManager:
    def __init__(self, settings: Any, *, persist: Callable[[dict[str, Any]], None] = lambda doc: None) -> None:
        self.settings = settings
        self.persist_document = persist
        self.table: dict[str, SubscriptionGroupConfig] = {}
        self.data_version = DataVersion()

    def load(self, document: dict[str, Any] | None) -> None:
        if document:
            for name, data in (document.get("subscriptionGroupTable") or {}).items():
                self.table[name] = SubscriptionGroupConfig.from_json(name, data)
        for name in PRECREATED_GROUPS:
            self.table.setdefault(name, SubscriptionGroupConfig(name))

    def document(self) -> dict[str, Any]:
        return {
            "dataVersion": self.data_version.to_json(),
            "subscriptionGroupTable": {name: g.to_json() for name, g in sorted(self.table.items())},
        }

    def persist(self) -> None:
        self.persist_document(self.document())

    def find_or_create(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config, auto-created when allowed; None when unknown and auto-creation is off."""
        config = self.table.get(group)
        if config is not None:
            return config
        if not (self.settings.autoCreateSubscriptionGroup or group.startswith(SYSTEM_GROUP_PREFIX)):
            return None
        config = self.table[group] = SubscriptionGroupConfig(group)
        log.info("auto-created subscription group %s", group)
        self.data_version.next()
        self.persist()
        return config

    def update(self, config: SubscriptionGroupConfig) -> None:
        self.table[config.group_name] = config
        self.data_version.next()
        self.persist()

    def delete(self, group: str) -> bool:
        if self.table.pop(group, None) is None:
            return False
        self.data_version.next()
        self.persist()
        return True
