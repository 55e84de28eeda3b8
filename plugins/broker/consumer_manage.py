"""Clients and offsets: HEART_BEAT (34), UNREGISTER_CLIENT (35), GET_CONSUMER_LIST_BY_GROUP (38),
CHECK_CLIENT_CONFIG (46), QUERY_CONSUMER_OFFSET (14), UPDATE_CONSUMER_OFFSET (15), SEARCH_OFFSET_BY_TIMESTAMP (29),
GET_MAX_OFFSET (30), GET_MIN_OFFSET (31), GET_EARLIEST_MSG_STORETIME (32) (spec 3.5, 4.2, 7.4, 7.13).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import trio

from pyrmq.kernel.errors import FilterExpressionError
from pyrmq.kernel.hookspecs import hookimpl
from pyrmq.kernel.types import Processor
from pyrmq.kernel.kernel import Kernel
from pyrmq.plugins.broker.clients import (
    CONSUME_FROM_WHERE,
    CONSUME_TYPES,
    MESSAGE_MODELS,
    ChannelInfo,
    Subscription,
    enum_name,
)
from pyrmq.plugins.broker.core import ROLE, BrokerContext, register_feature
from pyrmq.plugins.broker.topics import RETRY_GROUP_TOPIC_PREFIX, Permission
from pyrmq.remoting import fastjson
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.headers import (
    GetConsumerListByGroupRequestHeader,
    GetEarliestMsgStoretimeRequestHeader,
    GetMaxOffsetRequestHeader,
    GetMinOffsetRequestHeader,
    QueryConsumerOffsetRequestHeader,
    SearchOffsetRequestHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from pyrmq.remoting.validation import body_problem

log = logging.getLogger("pyrmq.broker.clients")


class ConsumerManageProcessor:
    """Heartbeats, client lists, consumer offsets and queue offsets; registered as a plugin."""

    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    @hookimpl(trylast=True)
    def pyrmq_register_processors(self, role: str) -> dict[int, Processor] | None:
        if role != ROLE:
            return None
        return {
            RequestCode.HEART_BEAT: self.heart_beat,
            RequestCode.UNREGISTER_CLIENT: self.unregister_client,
            RequestCode.GET_CONSUMER_LIST_BY_GROUP: self.consumer_list,
            RequestCode.CHECK_CLIENT_CONFIG: self.check_client_config,
            RequestCode.QUERY_CONSUMER_OFFSET: self.query_consumer_offset,
            RequestCode.UPDATE_CONSUMER_OFFSET: self.update_consumer_offset,
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: self.search_offset,
            RequestCode.GET_MAX_OFFSET: self.max_offset,
            RequestCode.GET_MIN_OFFSET: self.min_offset,
            RequestCode.GET_EARLIEST_MSG_STORETIME: self.earliest_msg_storetime,
        }

    # -- clients ---------------------------------------------------------------------------------------------

    async def heart_beat(self, connection: Any, request: RemotingCommand) -> RemotingCommand:
        ctx = self.ctx
        try:
            data = fastjson.loads(request.body_bytes())
            client_id = str(data["clientID"])
        except (ValueError, KeyError, TypeError) as exc:
            return request.make_response(ResponseCode.SYSTEM_ERROR, f"the heartbeat body is not HeartbeatData JSON: {exc}")
        now = trio.current_time()
        channel = ChannelInfo(connection, client_id, request.language, request.version, now)
        connection.attributes["client_id"] = client_id
        for consumer in data.get("consumerDataSet") or []:
            group = str(consumer.get("groupName") or "")
            if not group:
                continue
            config = ctx.groups.find_or_create(group)
            notify = True
            if config is not None:
                notify = config.notify_consumer_ids_changed_enable
                ctx.topics.create_system_topic(RETRY_GROUP_TOPIC_PREFIX + group, config.retry_queue_nums, Permission.READ | Permission.WRITE)
            try:
                subscriptions = [Subscription.from_json(sub) for sub in consumer.get("subscriptionDataSet") or []]
                ctx.consumers.register(
                    group,
                    channel,
                    enum_name(consumer.get("consumeType"), CONSUME_TYPES, "CONSUME_PASSIVELY"),
                    enum_name(consumer.get("messageModel"), MESSAGE_MODELS, "CLUSTERING"),
                    enum_name(consumer.get("consumeFromWhere"), CONSUME_FROM_WHERE, "CONSUME_FROM_LAST_OFFSET"),
                    subscriptions,
                    notify_enabled=notify,
                )
                ctx.consumer_filters.register(group, subscriptions)
            except FilterExpressionError as exc:
                return request.make_response(ResponseCode.SUBSCRIPTION_PARSE_FAILED, f"subscription of group {group}: {exc}")
            except (KeyError, TypeError, ValueError) as exc:
                return request.make_response(ResponseCode.SYSTEM_ERROR, f"bad consumer data of group {group}: {body_problem(exc)}")
        for producer in data.get("producerDataSet") or []:
            group = str(producer.get("groupName") or "")
            if group:
                ctx.producers.register(group, channel)
        return request.make_response(ResponseCode.SUCCESS)

    async def unregister_client(self, connection: Any, request: RemotingCommand) -> RemotingCommand:
        header = UnregisterClientRequestHeader.from_ext_fields(request.ext_fields)
        if header.producer_group:
            self.ctx.producers.unregister(header.producer_group, connection)
        if header.consumer_group:
            self.ctx.consumers.unregister(header.consumer_group, connection)
        return request.make_response(ResponseCode.SUCCESS)

    async def consumer_list(self, connection: Any, request: RemotingCommand) -> RemotingCommand:
        group = GetConsumerListByGroupRequestHeader.from_ext_fields(request.ext_fields).consumer_group
        info = self.ctx.consumers.groups.get(group)
        ids = info.client_ids() if info else []
        if not ids:
            return request.make_response(ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {group}")
        return request.make_response(ResponseCode.SUCCESS, body=json.dumps({"consumerIdList": ids}).encode())

    async def check_client_config(self, connection: Any, request: RemotingCommand) -> RemotingCommand:
        try:
            data = fastjson.loads(request.body_bytes())
            sub = data.get("subscriptionData") or {}
            expression_type = str(sub.get("expressionType") or "TAG")
            if expression_type != "TAG" and not self.ctx.settings.enablePropertyFilter:
                return request.make_response(
                    ResponseCode.SYSTEM_ERROR, f"The broker does not support consumer to filter message by {expression_type}"
                )
            self.ctx.compile_filter(expression_type, str(sub.get("subString") or "*"))
        except FilterExpressionError as exc:
            return request.make_response(ResponseCode.SUBSCRIPTION_PARSE_FAILED, str(exc))
        except (ValueError, TypeError, AttributeError) as exc:
            return request.make_response(ResponseCode.SYSTEM_ERROR, f"bad CheckClientRequestBody: {exc}")
        return request.make_response(ResponseCode.SUCCESS)

    # -- offsets ---------------------------------------------------------------------------------------------

    async def query_consumer_offset(self, connection: Any, request: RemotingCommand) -> RemotingCommand:
        h = QueryConsumerOffsetRequestHeader.from_ext_fields(request.ext_fields)
        offset = self.ctx.offsets.query(h.consumer_group, h.topic, h.queue_id)
        if offset >= 0:
            return request.make_response(ResponseCode.SUCCESS, ext_fields={"offset": str(offset)})
        # none committed: a new group starts at 0 while the queue still holds its first message (spec 3.5)
        store = self.ctx.store
        if store.get_min_offset_in_queue(h.topic, h.queue_id) <= 0:
            return request.make_response(ResponseCode.SUCCESS, ext_fields={"offset": "0"})
        return request.make_response(ResponseCode.QUERY_NOT_FOUND, "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first")

    async def update_consumer_offset(self, connection: Any, request: RemotingCommand) -> RemotingCommand:
        h = UpdateConsumerOffsetRequestHeader.from_ext_fields(request.ext_fields)
        self.ctx.offsets.commit(h.consumer_group, h.topic, h.queue_id, h.commit_offset)
        return request.make_response(ResponseCode.SUCCESS)

    async def search_offset(self, connection: Any, request: RemotingCommand) -> RemotingCommand:
        h = SearchOffsetRequestHeader.from_ext_fields(request.ext_fields)
        offset = self.ctx.store.get_offset_in_queue_by_time(h.topic, h.queue_id, h.timestamp)
        return request.make_response(ResponseCode.SUCCESS, ext_fields={"offset": str(offset)})

    async def max_offset(self, connection: Any, request: RemotingCommand) -> RemotingCommand:
        h = GetMaxOffsetRequestHeader.from_ext_fields(request.ext_fields)
        return request.make_response(ResponseCode.SUCCESS, ext_fields={"offset": str(self.ctx.store.get_max_offset_in_queue(h.topic, h.queue_id))})

    async def min_offset(self, connection: Any, request: RemotingCommand) -> RemotingCommand:
        h = GetMinOffsetRequestHeader.from_ext_fields(request.ext_fields)
        return request.make_response(ResponseCode.SUCCESS, ext_fields={"offset": str(self.ctx.store.get_min_offset_in_queue(h.topic, h.queue_id))})

    async def earliest_msg_storetime(self, connection: Any, request: RemotingCommand) -> RemotingCommand:
        h = GetEarliestMsgStoretimeRequestHeader.from_ext_fields(request.ext_fields)
        ts = self.ctx.store.get_earliest_message_time(h.topic, h.queue_id)
        return request.make_response(ResponseCode.SUCCESS, ext_fields={"timestamp": str(ts)})


@hookimpl(trylast=True)
def pyrmq_configure(kernel: Kernel) -> None:
    register_feature(kernel, "broker.consumer_manage", ConsumerManageProcessor)
