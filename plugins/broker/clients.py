"""Clients of a broker: consumer groups with their channels and subscriptions, producer groups (spec 4.2, 7.4).

A channel is a remoting connection; a client (``clientID``) may have several. Subscriptions registered by heartbeat
are compiled once through the filter hook (``pyrmq_make_message_filter``) and the pull path uses the compiled filter.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import attrs

from pyrmq.kernel.errors import FilterExpressionError
from pyrmq.remoting.message import java_string_hash

log = logging.getLogger("pyrmq.broker.clients")

SUB_ALL = "*"
# Java enum ordinals, for clients that send the enums as numbers (spec 4.2); CONSUME_POP is 5.x's (a SimpleConsumer,
# a push consumer in POP mode): kept, so that consumer lists, /metrics and the dashboard show POP consumers as such
CONSUME_TYPES = ("CONSUME_ACTIVELY", "CONSUME_PASSIVELY", "CONSUME_POP")
#: 5.x's ``ConsumeType.typeCN``, lower case: the consume_mode label of rocketmq_consumer_connections
CONSUME_MODES = {"CONSUME_ACTIVELY": "pull", "CONSUME_PASSIVELY": "push", "CONSUME_POP": "pop"}
MESSAGE_MODELS = ("BROADCASTING", "CLUSTERING")
CONSUME_FROM_WHERE = (
    "CONSUME_FROM_LAST_OFFSET",
    "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
    "CONSUME_FROM_MIN_OFFSET",
    "CONSUME_FROM_MAX_OFFSET",
    "CONSUME_FROM_FIRST_OFFSET",
    "CONSUME_FROM_TIMESTAMP",
)


def enum_name(value: Any, names: tuple[str, ...], default: str) -> str:
    """An enum sent as its name (Java, Go, ali-ons) or its ordinal (some cpp builds)."""
    if isinstance(value, str) and value in names:
        return value
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(names):
        return names[value]
    if isinstance(value, str) and value.isdigit() and int(value) < len(names):
        return names[int(value)]
    return default


@attrs.define
class Subscription:
    topic: str
    sub_string: str
    expression_type: str
    tags_set: frozenset[str]
    code_set: frozenset[int]
    sub_version: int
    message_filter: Any = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Subscription:
        expression_type = str(data.get("expressionType") or "TAG")
        sub_string = str(data.get("subString") or SUB_ALL).strip() or SUB_ALL
        tags = data.get("tagsSet") or []
        if expression_type == "TAG" and not tags and sub_string != SUB_ALL:
            tags = [t.strip() for t in sub_string.split("||") if t.strip()]
        tags_set = frozenset(str(t) for t in tags)
        # recompute codes from the tags rather than trusting the client (spec 4.2)
        code_set = frozenset(java_string_hash(t) for t in tags_set)
        return cls(str(data["topic"]), sub_string, expression_type, tags_set, code_set, int(data.get("subVersion") or 0))


@attrs.define
class ChannelInfo:
    connection: Any
    client_id: str
    language: str
    version: int
    last_update: float


@attrs.define
class ConsumerGroupInfo:
    group: str
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    channels: dict[Any, ChannelInfo] = attrs.Factory(dict)
    subscriptions: dict[str, Subscription] = attrs.Factory(dict)

    def client_ids(self) -> list[str]:
        return sorted({info.client_id for info in self.channels.values()})


class ConsumerManager:
    """Consumer groups seen through heartbeats; tells a group's members when membership or subscriptions change."""

    def __init__(self, *, compile_filter: Callable[[str, str], Any], notify: Callable[[ConsumerGroupInfo], None]) -> None:
        self.groups: dict[str, ConsumerGroupInfo] = {}
        self.compile_filter = compile_filter
        self.notify = notify

    def register(
        self,
        group: str,
        channel: ChannelInfo,
        consume_type: str,
        message_model: str,
        consume_from_where: str,
        subscriptions: list[Subscription],
        *,
        notify_enabled: bool = True,
    ) -> bool:
        """Register a heartbeat; returns True when the group's members or subscriptions changed."""
        info = self.groups.get(group)
        if info is None:
            info = self.groups[group] = ConsumerGroupInfo(group)
        info.consume_type, info.message_model, info.consume_from_where = consume_type, message_model, consume_from_where
        changed = False
        known = info.channels.get(channel.connection)
        if known is None:
            info.channels[channel.connection] = channel
            changed = True
            log.info("consumer %s joined group %s", channel.client_id, group)
        else:
            known.last_update = channel.last_update
        for sub in subscriptions:
            old = info.subscriptions.get(sub.topic)
            if old is None or sub.sub_version > old.sub_version:
                try:
                    sub.message_filter = self.compile_filter(sub.expression_type, sub.sub_string)
                except FilterExpressionError as exc:
                    # as Java: the heartbeat succeeds; pulls of this subscription get FILTER_DATA_NOT_EXIST
                    log.warning("group %s: subscription of %s does not compile: %s", group, sub.topic, exc)
                    sub.message_filter = None
                info.subscriptions[sub.topic] = sub
                changed = changed or old is None or (old.sub_string, old.expression_type) != (sub.sub_string, sub.expression_type)
        new_topics = {s.topic for s in subscriptions}
        for topic in [t for t in info.subscriptions if t not in new_topics]:
            del info.subscriptions[topic]
            changed = True
        if changed and notify_enabled:
            self.notify(info)
        return changed

    def unregister(self, group: str, connection: Any, *, notify_enabled: bool = True) -> None:
        info = self.groups.get(group)
        if info is None or info.channels.pop(connection, None) is None:
            return
        if not info.channels:
            del self.groups[group]
        elif notify_enabled:
            self.notify(info)

    def connection_closed(self, connection: Any) -> None:
        for group in list(self.groups):
            self.unregister(group, connection)

    def expire(self, now: float, timeout: float) -> list[Any]:
        """Channels not refreshed by a heartbeat within ``timeout``: removed; returns their connections."""
        stale = [
            info.connection
            for group in self.groups.values()
            for info in group.channels.values()
            if now - info.last_update > timeout
        ]
        for conn in stale:
            self.connection_closed(conn)
        return stale

    def find_subscription(self, group: str, topic: str) -> Subscription | None:
        info = self.groups.get(group)
        return info.subscriptions.get(topic) if info else None


class ProducerManager:
    """Producer groups and their channels (for transaction check-back, spec 7.8)."""

    def __init__(self) -> None:
        self.groups: dict[str, dict[Any, ChannelInfo]] = {}

    def register(self, group: str, channel: ChannelInfo) -> None:
        channels = self.groups.setdefault(group, {})
        known = channels.get(channel.connection)
        if known is None:
            channels[channel.connection] = channel
        else:
            known.last_update = channel.last_update

    def unregister(self, group: str, connection: Any) -> None:
        channels = self.groups.get(group)
        if channels is not None:
            channels.pop(connection, None)
            if not channels:
                del self.groups[group]

    def connection_closed(self, connection: Any) -> None:
        for group in list(self.groups):
            self.unregister(group, connection)

    def expire(self, now: float, timeout: float) -> list[Any]:
        stale = [c for channels in self.groups.values() for c, info in channels.items() if now - info.last_update > timeout]
        for conn in stale:
            self.connection_closed(conn)
        return stale

    def find_channel(self, client_id: str) -> Any | None:
        """The live connection of the producer with this client id (the requester of a reply, spec 2.1 code 326)."""
        for channels in self.groups.values():
            for connection, info in channels.items():
                if info.client_id == client_id and not getattr(connection, "closed", False):
                    return connection
        return None

    def any_channel(self, group: str) -> Any | None:
        channels = self.groups.get(group)
        if not channels:
            return None
        live = [c for c in channels if not getattr(c, "closed", False)]
        return live[0] if live else None
