"""What push and pull consumers share: group, subscriptions, message model, the heartbeat's consumer data, the
topic's readable queues as routes change (spec 4.2, 7.5).
"""

from __future__ import annotations

import datetime
import enum
import json
import time
from collections.abc import Iterable
from typing import Any

import attrs

from pyrmq.client.config import ClientConfig, check_name
from pyrmq.client.errors import InvalidMessageError
from pyrmq.client.instance import ClientInstance
from pyrmq.client.message import MessageQueue
from pyrmq.client.message_selector import MessageSelector, check_expression
from pyrmq.client.route import TopicRoute
from pyrmq.client.service import ClientService
from pyrmq.remoting.codes import RequestCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.message import java_string_hash
from pyrmq.remoting.vocabulary import RETRY_GROUP_TOPIC_PREFIX as RETRY_TOPIC_PREFIX

__all__ = [
    "ConsumerCore",
    "ConsumeFrom",
    "ConsumeResult",
    "MessageModel",
    "Subscription",
    "RETRY_TOPIC_PREFIX",
    "retry_topic",
    "parse_timestamp",
]

SUB_ALL = "*"


def retry_topic(group: str) -> str:
    return RETRY_TOPIC_PREFIX + group


class MessageModel(enum.Enum):
    CLUSTERING = "CLUSTERING"
    BROADCASTING = "BROADCASTING"


class ConsumeFrom(enum.Enum):
    """Where a queue starts when the group has no committed offset for it (Java ConsumeFromWhere, spec 7.5)."""

    LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    TIMESTAMP = "CONSUME_FROM_TIMESTAMP"


class ConsumeResult(enum.Enum):
    """What a listener returns. Returning None (or True) means SUCCESS; raising or returning False means
    RECONSUME_LATER: sent back for a later retry (concurrent), or retried locally after a pause (orderly)."""

    SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


def parse_timestamp(value: str | int | float | datetime.datetime) -> int:
    """Milliseconds since the epoch from ms, a datetime, ``yyyyMMddHHmmss`` (Java's consumeTimestamp, local time)
    or ISO 8601 text."""
    if isinstance(value, datetime.datetime):
        return int(value.timestamp() * 1000)
    if isinstance(value, (int, float)):
        return int(value)
    text = str(value).strip()
    if text.isdigit() and len(text) == 14:
        return int(datetime.datetime.strptime(text, "%Y%m%d%H%M%S").timestamp() * 1000)
    if text.isdigit():
        return int(text)
    try:
        return int(datetime.datetime.fromisoformat(text).timestamp() * 1000)
    except ValueError:
        raise InvalidMessageError(f"not a timestamp: {value!r} (ms since epoch, yyyyMMddHHmmss or ISO 8601)") from None


def selector_parts(
    expression: str | MessageSelector | None, expression_type: str, sql: str | None
) -> tuple[str | None, str]:
    """(expression, type) from subscribe/pull arguments: a MessageSelector, ``sql=``, or an expression and type."""
    if sql is not None:
        if expression not in (None, "*"):
            raise InvalidMessageError("give either a tag expression or sql=, not both")
        return sql, "SQL92"
    if isinstance(expression, MessageSelector):
        return expression.expression, expression.expression_type
    return expression, expression_type


@attrs.define
class Subscription:
    """A topic and its filter (TAG expressions ``*`` / ``A || B``, or SQL92 checked here and evaluated by the broker)."""

    topic: str
    expression: str = SUB_ALL
    expression_type: str = "TAG"
    tags: frozenset[str] = frozenset()
    version: int = attrs.Factory(lambda: int(time.time() * 1000))

    @classmethod
    def build(cls, topic: str, expression: str | None = None, expression_type: str = "TAG") -> Subscription:
        check_name("topic", topic)
        expression = (expression or SUB_ALL).strip() or SUB_ALL
        expression_type = (expression_type or "TAG").upper()
        tags: frozenset[str] = frozenset()
        check_expression(expression_type, expression)
        if expression_type == "TAG" and expression != SUB_ALL:
            tags = frozenset(t.strip() for t in expression.split("||") if t.strip())
            if not tags:
                raise InvalidMessageError(f"tag expression {expression!r} names no tag")
        return cls(topic, expression, expression_type, tags)

    def to_json(self) -> dict[str, Any]:
        tags = sorted(self.tags)
        return {
            "classFilterMode": False,
            "codeSet": [java_string_hash(t) for t in tags],
            "expressionType": self.expression_type,
            "subString": self.expression,
            "subVersion": self.version,
            "tagsSet": tags,
            "topic": self.topic,
        }


class ConsumerCore(ClientService):
    """Group, subscriptions and the queues of subscribed topics; registered on the client instance."""

    consume_type = "CONSUME_PASSIVELY"

    def __init__(
        self,
        namesrv: str | Iterable[str] | None,
        group: str,
        *,
        config: ClientConfig | None,
        instance: ClientInstance | None,
        message_model: MessageModel | str,
        consume_from: ConsumeFrom | str | int | datetime.datetime,
        credentials: tuple[str, str] | None = None,
    ) -> None:
        if config is None and instance is None:
            config = ClientConfig(namesrv_addr=namesrv)
        super().__init__(instance, config, credentials)
        self.group = check_name("consumer group", group)
        self.message_model = MessageModel(message_model.upper() if isinstance(message_model, str) else message_model)
        self.consume_from, self.consume_timestamp = self._consume_from(consume_from)
        self.subscriptions: dict[str, Subscription] = {}
        #: topic -> readable queues, from the latest route
        self.topic_queues: dict[str, list[MessageQueue]] = {}

    @staticmethod
    def _consume_from(value: Any) -> tuple[ConsumeFrom, int]:
        half_hour_ago = int(time.time() * 1000) - 30 * 60 * 1000  # Java's default consumeTimestamp
        if isinstance(value, ConsumeFrom):
            return value, half_hour_ago
        if isinstance(value, str) and value.lower() in ("last", "first"):
            return (ConsumeFrom.LAST_OFFSET if value.lower() == "last" else ConsumeFrom.FIRST_OFFSET), half_hour_ago
        if isinstance(value, str):
            try:
                return ConsumeFrom(value.upper()), half_hour_ago
            except ValueError:
                pass
        return ConsumeFrom.TIMESTAMP, parse_timestamp(value)

    @property
    def clustering(self) -> bool:
        return self.message_model is MessageModel.CLUSTERING

    def subscribe(
        self, topic: str, expression: str | MessageSelector | None = "*", expression_type: str = "TAG", *,
        sql: str | None = None,
    ) -> None:
        """Subscribe ``topic`` with a tag expression (``*``, ``TagA || TagB``), an SQL92 expression over message
        properties (``sql="region = 'eu'"``, or ``MessageSelector.by_sql(...)``; the broker needs
        ``enablePropertyFilter``) or another expression type; calling again replaces the expression. An SQL92
        expression that does not parse raises InvalidSubscriptionError naming the line and column."""
        expression, expression_type = selector_parts(expression, expression_type, sql)
        sub = Subscription.build(topic, expression, expression_type)
        old = self.subscriptions.get(topic)
        if old is not None and sub.version <= old.version:
            sub.version = old.version + 1  # within the same millisecond: brokers take only a newer subVersion
        self.subscriptions[topic] = sub
        if self.started:
            self.instance.heartbeat_soon()
            self.rebalance_soon()

    def unsubscribe(self, topic: str) -> None:
        self.subscriptions.pop(topic, None)
        if self.started:
            self.instance.heartbeat_soon()
            self.rebalance_soon()

    # -- what the client instance asks of a consumer --------------------------------------------------------

    def consumer_data(self) -> dict[str, Any]:
        return {
            "consumeFromWhere": self.consume_from.value,
            "consumeType": self.consume_type,
            "groupName": self.group,
            "messageModel": self.message_model.value,
            "subscriptionDataSet": [s.to_json() for s in self.subscriptions.values()],
            "unitMode": False,
        }

    def running_info(self) -> dict[str, Any]:
        """The part of Java's ConsumerRunningInfo every consumer has: properties, subscriptions (no queues)."""
        from pyrmq.remoting.codes import MQVersion

        properties = {
            "PROP_CONSUME_TYPE": self.consume_type,
            "PROP_CLIENT_VERSION": MQVersion.V4_9_8.name,
            "PROP_NAMESERVER_ADDR": ";".join(self.instance.config.namesrv_addr),
            "PROP_CONSUMER_START_TIMESTAMP": "0",
            "consumerGroup": self.group,
            "messageModel": self.message_model.value,
            "consumeFromWhere": self.consume_from.value,
        }
        return {
            "properties": properties,
            "subscriptionSet": [s.to_json() for s in self.subscriptions.values()],
            "mqTable": {},
            "statusTable": {},
            "jstack": None,
        }

    def subscribed_topics(self) -> list[str]:
        return list(self.subscriptions)

    def route_changed(self, route: TopicRoute) -> None:
        if route.topic in self.subscriptions or route.topic in self.topic_queues:
            queues = route.subscribe_queues()
            if queues != self.topic_queues.get(route.topic):
                self.topic_queues[route.topic] = queues
                self.rebalance_soon()

    def rebalance_soon(self) -> None:
        """Rebalance as soon as possible (a pull consumer has nothing to rebalance)."""

    async def reset_offsets(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """The broker asks us to move our offsets (RESET_CONSUMER_CLIENT_OFFSET, 220)."""

    async def _register(self) -> None:
        """Register on the instance and read the routes of the subscribed topics (NameServerUnreachable when no
        name server answers; a topic without a route is only logged, it may be created later)."""
        instance = self.instance
        if self.group in instance.consumers and instance.consumers[self.group] is not self:
            raise InvalidMessageError(f"consumer group {self.group!r} is already used by another consumer of this client")
        instance.consumers[self.group] = self  # type: ignore[assignment]
        for topic in list(self.subscriptions):
            route = await instance.update_route(topic)
            if route is not None:
                self.topic_queues[topic] = route.subscribe_queues()

    async def _check_in_brokers(self) -> None:
        """CHECK_CLIENT_CONFIG (46) for each non-TAG subscription, to one broker of its topic (Java
        ``checkClientInBroker``): a broker without ``enablePropertyFilter`` or one that cannot parse the expression
        refuses the start with BrokerError (SYSTEM_ERROR, or SUBSCRIPTION_PARSE_FAILED with the parser's reason)."""
        for sub in list(self.subscriptions.values()):
            queues = self.topic_queues.get(sub.topic)
            if sub.expression_type == "TAG" or not queues:
                continue
            addr = await self.instance.broker_addr_for(queues[0])
            body = {"clientId": self.instance.client_id, "group": self.group, "subscriptionData": sub.to_json()}
            request = RemotingCommand.request(RequestCode.CHECK_CLIENT_CONFIG, {}, json.dumps(body).encode())
            await self.instance.invoke_broker(addr, request)

    def _forget(self) -> None:
        if self.instance.consumers.get(self.group) is self:
            del self.instance.consumers[self.group]

    async def _unregister(self) -> None:
        if self.instance.consumers.get(self.group) is self:
            self._forget()
            await self.instance.unregister(consumer_group=self.group)
