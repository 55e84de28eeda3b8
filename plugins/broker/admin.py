"""Broker administration: topics, subscription groups, offsets and statistics (spec 2.1, 3.9, mqadmin's codes).

UPDATE_AND_CREATE_TOPIC (17), DELETE_TOPIC_IN_BROKER (215), GET_ALL_TOPIC_CONFIG (21),
UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200), GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201), GET_SUBSCRIPTIONGROUP_CONFIG (352,
5.x), DELETE_SUBSCRIPTIONGROUP (207),
GET_ALL_CONSUMER_OFFSET (43), GET_TOPIC_STATS_INFO (202), GET_CONSUME_STATS (208), GET_BROKER_RUNTIME_INFO (28),
GET_CONSUMER_CONNECTION_LIST (203), INVOKE_BROKER_TO_RESET_OFFSET (222), QUERY_TOPIC_CONSUME_BY_WHO (300),
GET_BROKER_CONFIG (26), UPDATE_BROKER_CONFIG (25, the keys plugins declare ``runtime=True``), GET_PRODUCER_CONNECTION_LIST
(204), GET_ALL_PRODUCER_INFO (328), VIEW_BROKER_STATS_DATA (315, plugins/broker/stats.py), and
GET_CONSUMER_RUNNING_INFO (307) / CONSUME_MESSAGE_DIRECTLY (309), which are passed on to the consumer they name.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import trio

from pyrmq.kernel.javaprops import format_java_properties, parse_java_properties
from pyrmq.kernel.errors import ConfigError
from pyrmq.kernel.hookspecs import hookimpl
from pyrmq.kernel.types import Processor
from pyrmq.kernel.kernel import Kernel
from pyrmq.plugins.broker.core import ROLE, BrokerContext, register_feature
from pyrmq.plugins.broker.groups import SubscriptionGroupConfig
from pyrmq.plugins.broker.topics import MAX_QUEUE_NUMS, TopicConfig, alter_attributes
from pyrmq.remoting import fastjson
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.errors import HeaderError, RemotingError, RemotingTimeout
from pyrmq.remoting.headers import HeaderBase, CreateTopicRequestHeader, header
from pyrmq.remoting.validation import body_problem, system_topic_problem, topic_problem
from pyrmq.store.format import decode_message_id
from pyrmq.store.retention import disk_usage_ratio

log = logging.getLogger("pyrmq.broker.admin")


@header
class TopicHeader(HeaderBase):
    topic: str


@header
class GroupHeader(HeaderBase):
    group_name: str


@header
class GetGroupConfigHeader(HeaderBase):
    group: str


@header
class ConsumeStatsHeader(HeaderBase):
    consumer_group: str
    topic: str | None = None


@header
class ProducerGroupHeader(HeaderBase):
    producer_group: str


@header
class CallConsumerHeader(HeaderBase):
    consumer_group: str
    client_id: str


@header
class ViewBrokerStatsDataHeader(HeaderBase):
    stats_name: str
    stats_key: str


#: UPDATE_BROKER_CONFIG changes only the settings that take effect on a running pyrmq broker, those their plugins
#: declare ``runtime=True`` (RocketMQ 4.9.8 takes any key and most only act after a restart; pyrmq refuses the others
#: with a remark, see docs/decisions.md)


CALL_CONSUMER_TIMEOUT = 10.0  # seconds, RocketMQ's Broker2Client.callClient
#: ``TopicFilterType``'s names, what UPDATE_AND_CREATE_TOPIC's ``topicFilterType`` may say
_TOPIC_FILTER_TYPES = ("SINGLE_TAG", "MULTI_TAG")


@header
class ResetOffsetHeader(HeaderBase):
    topic: str
    group: str
    timestamp: int
    is_force: bool = True


def _mq_key(ctx: BrokerContext, topic: str, queue_id: int) -> fastjson.ObjectKey:
    return fastjson.ObjectKey({"brokerName": ctx.settings.brokerName, "queueId": queue_id, "topic": topic})


class AdminProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self.started_ms = int(time.time() * 1000)
        self.config_version = 0  # GET_BROKER_CONFIG's DataVersion counter: one per UPDATE_BROKER_CONFIG

    @hookimpl(trylast=True)
    def pyrmq_register_processors(self, role: str) -> dict[int, Processor] | None:
        if role != ROLE:
            return None
        return {
            RequestCode.UPDATE_AND_CREATE_TOPIC: self.create_topic,
            RequestCode.DELETE_TOPIC_IN_BROKER: self.delete_topic,
            RequestCode.GET_ALL_TOPIC_CONFIG: self.all_topic_config,
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: self.create_group,
            RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: self.all_group_config,
            RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG: self.group_config,
            RequestCode.DELETE_SUBSCRIPTIONGROUP: self.delete_group,
            RequestCode.GET_ALL_CONSUMER_OFFSET: self.all_consumer_offset,
            RequestCode.GET_TOPIC_STATS_INFO: self.topic_stats,
            RequestCode.GET_CONSUME_STATS: self.consume_stats,
            RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: self.topic_consumed_by,
            RequestCode.GET_BROKER_CONFIG: self.broker_config,
            RequestCode.UPDATE_BROKER_CONFIG: self.update_broker_config,
            RequestCode.VIEW_BROKER_STATS_DATA: self.view_stats,
            RequestCode.GET_ALL_PRODUCER_INFO: self.all_producer_info,
            RequestCode.GET_PRODUCER_CONNECTION_LIST: self.producer_connections,
            RequestCode.GET_CONSUMER_RUNNING_INFO: self.call_consumer,
            RequestCode.CONSUME_MESSAGE_DIRECTLY: self.call_consumer,
            RequestCode.GET_BROKER_RUNTIME_INFO: self.runtime_info,
            RequestCode.GET_CONSUMER_CONNECTION_LIST: self.consumer_connections,
            RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: self.reset_offset,
        }

    async def create_topic(self, connection: Any, request: RemotingCommand) -> RemotingCommand:
        h = CreateTopicRequestHeader.from_ext_fields(request.ext_fields)
        # RocketMQ's checks (AdminBrokerProcessor#updateAndCreateTopic): the name, then the system topics
        problem = topic_problem(h.topic) or system_topic_problem(h.topic, self.ctx.topics.system_topics)
        if problem:
            return request.make_response(ResponseCode.SYSTEM_ERROR, problem)
        if h.topic_filter_type not in _TOPIC_FILTER_TYPES:  # Java's TopicFilterType.valueOf throws
            return request.make_response(
                ResponseCode.SYSTEM_ERROR,
                f"the custom field <topicFilterType> is {h.topic_filter_type!r}: expected SINGLE_TAG or MULTI_TAG",
            )
        # pyrmq's own bounds (docs/decisions.md): RocketMQ takes any int
        for key, nums in (("readQueueNums", h.read_queue_nums), ("writeQueueNums", h.write_queue_nums)):
            if not 0 <= nums <= MAX_QUEUE_NUMS:
                return request.make_response(
                    ResponseCode.SYSTEM_ERROR, f"the custom field <{key}> is {nums}: expected 0 to {MAX_QUEUE_NUMS}"
                )
        existing = self.ctx.topics.get(h.topic)
        try:
            attributes = alter_attributes(existing.attributes if existing else {}, h.attributes, creating=existing is None)
        except ValueError as exc:
            return request.make_response(ResponseCode.SYSTEM_ERROR, f"attributes: {exc}")
        config = TopicConfig(
            h.topic, h.read_queue_nums, h.write_queue_nums, h.perm, h.topic_filter_type, h.topic_sys_flag or 0, bool(h.order),
            attributes,
        )
        self.ctx.topics.update(config)
        if self.ctx.started:
            await self.ctx.registration.register_all()
        return request.make_response(ResponseCode.SUCCESS)

    async def delete_topic(self, connection: Any, request: RemotingCommand) -> RemotingCommand:
        topic = TopicHeader.from_ext_fields(request.ext_fields).topic
        problem = topic_problem(topic) or system_topic_problem(topic, self.ctx.topics.system_topics)
        if problem:
            return request.make_response(ResponseCode.SYSTEM_ERROR, problem)
        self.ctx.topics.delete(topic)
        self.ctx.offsets.delete_topic(topic)
        self.ctx.store.delete_topics({topic})
        return request.make_response(ResponseCode.SUCCESS)

    async def all_topic_config(self, connection: Any, request: RemotingCommand) -> RemotingCommand:
        return request.make_response(ResponseCode.SUCCESS, body=json.dumps(self.ctx.topics.document()).encode())

    async def create_group(self, connection: Any, request: RemotingCommand) -> RemotingCommand:
        try:
            data = fastjson.loads(request.body_bytes())
            config = SubscriptionGroupConfig.from_json(str(data["groupName"]), data)
        except (ValueError, KeyError, TypeError) as exc:
            return request.make_response(ResponseCode.SYSTEM_ERROR, f"bad SubscriptionGroupConfig body: {body_problem(exc)}")
        self.ctx.groups.update(config)
        return request.make_response(ResponseCode.SUCCESS)

    async def all_group_config(self, connection: Any, request: RemotingCommand) -> RemotingCommand:
        return request.make_response(ResponseCode.SUCCESS, body=json.dumps(self.ctx.groups.document()).encode())

    async def group_config(self, connection: Any, request: RemotingCommand) -> RemotingCommand:
        """GET_SUBSCRIPTIONGROUP_CONFIG (352, RocketMQ 5.x): one group's config, as 5.5.0 answers it (an unknown group
        SUBSCRIPTION_GROUP_NOT_EXIST ``No group in this broker``; no auto-creation)."""
        try:
            group = GetGroupConfigHeader.from_ext_fields(request.ext_fields).group
        except HeaderError as exc:
            return request.make_response(ResponseCode.SYSTEM_ERROR, str(exc))
        config = self.ctx.groups.table.get(group)
        if config is None:
            return request.make_response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, "No group in this broker")
        return request.make_response(ResponseCode.SUCCESS, None, body=json.dumps(config.to_json()).encode())

    async def delete_group(self, connection: Any, request: RemotingCommand) -> RemotingCommand:
        self.ctx.groups.delete(GroupHeader.from_ext_fields(request.ext_fields).group_name)
        return request.make_response(ResponseCode.SUCCESS)

    async def all_consumer_offset(self, connection: Any, request: RemotingCommand) -> RemotingCommand:
        return request.make_response(ResponseCode.SUCCESS, body=fastjson.dumps(self.ctx.offsets.document(), style=fastjson.FASTJSON))

    async def topic_stats(self, connection: Any, request: RemotingCommand) -> RemotingCommand:
        topic = TopicHeader.from_ext_fields(request.ext_fields).topic
        config = self.ctx.topics.get(topic)
        if config is None:
            return request.make_response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        store = self.ctx.store
        table = {}
        for qid in range(config.write_queue_nums):
            max_offset = store.get_max_offset_in_queue(topic, qid)
            table[_mq_key(self.ctx, topic, qid)] = {
                "minOffset": store.get_min_offset_in_queue(topic, qid),
                "maxOffset": max_offset,
                "lastUpdateTimestamp": store.get_message_store_timestamp(topic, qid, max_offset - 1) if max_offset > 0 else 0,
            }
        return request.make_response(ResponseCode.SUCCESS, body=fastjson.dumps({"offsetTable": table}, style=fastjson.FASTJSON))

    async def topic_consumed_by(self, connection: Any, request: RemotingCommand) -> RemotingCommand:
        """QUERY_TOPIC_CONSUME_BY_WHO: groups subscribed to the topic now, plus groups with offsets on it (mqadmin
        queryMsgById's message track)."""
        topic = TopicHeader.from_ext_fields(request.ext_fields).topic
        groups = {g for g, info in self.ctx.consumers.groups.items() if topic in info.subscriptions}
        groups.update(self.ctx.offsets.groups_of_topic(topic))
        return request.make_response(ResponseCode.SUCCESS, body=json.dumps({"groupList": sorted(groups)}).encode())

    async def consume_stats(self, connection: Any, request: RemotingCommand) -> RemotingCommand:
        """ConsumeStats: per queue broker offset, consumer offset (lag = difference) (mqadmin consumerProgress).

        A POP group's consumer offset is "popped up to" (5.x), so its lag counts never-popped messages; pyrmq adds
        ``inflight`` (popped, neither acked nor revived) to each queue the group pops, from the POP plugin (a key
        Java's ConsumeStats ignores)."""
        h = ConsumeStatsHeader.from_ext_fields(request.ext_fields)
        ctx = self.ctx
        pop = ctx.kernel.plugin("pop")  # the POP plugin, when the bundle has it: its in-flight counts
        popped = getattr(pop, "popped_queue", None)
        info = ctx.consumers.groups.get(h.consumer_group)
        topics = {h.topic} if h.topic else set(info.subscriptions) if info else set()
        topics |= {t for t in ctx.topics.table if h.consumer_group in ctx.offsets.groups_of_topic(t)} if not h.topic else set()
        table = {}
        total_diff = 0
        for topic in sorted(topics):
            config = ctx.topics.get(topic)
            if config is None:
                continue
            for qid in range(config.write_queue_nums):
                broker_offset = ctx.store.get_max_offset_in_queue(topic, qid)
                consumer_offset = max(ctx.offsets.query(h.consumer_group, topic, qid), 0)
                total_diff += broker_offset - consumer_offset
                last = ctx.store.get_message_store_timestamp(topic, qid, consumer_offset - 1) if consumer_offset > 0 else 0
                entry = table[_mq_key(ctx, topic, qid)] = {
                    "brokerOffset": broker_offset,
                    "consumerOffset": consumer_offset,
                    "lastTimestamp": last,
                }
                inflight = popped(h.consumer_group, topic, qid) if popped is not None else None
                if inflight is not None:
                    entry["inflight"] = inflight
        body = {"consumeTps": ctx.stats.group_tps(h.consumer_group, h.topic), "offsetTable": table}
        return request.make_response(ResponseCode.SUCCESS, body=fastjson.dumps(body, style=fastjson.FASTJSON))

    async def runtime_info(self, connection: Any, request: RemotingCommand) -> RemotingCommand:
        store = self.ctx.store
        table = {
            "brokerVersion": "409",
            "brokerVersionDesc": "V4_9_8 (pyrmq)",
            "commitLogMaxOffset": str(store.max_phy_offset),
            "commitLogMinOffset": str(store.min_phy_offset),
            "earliestMessageTimeStamp": str(store.get_earliest_store_time()),
            "bootTimestamp": str(self.started_ms),
            # what mqadmin clusterList prints (it fails on a missing key): rates, queue backlogs, disk use.
            # pyrmq has no request thread pools in front of its handlers and no page-cache lock, hence the zeros.
            "putTps": self.ctx.put_stats.describe(),
            "getTransferedTps": self.ctx.get_stats.describe(),
            "msgPutTotalTodayNow": str(self.ctx.put_stats.total),
            "msgGetTotalTodayNow": str(self.ctx.get_stats.total),
            "sendThreadPoolQueueSize": "0",
            "pullThreadPoolQueueSize": "0",
            "sendThreadPoolQueueHeadWaitTimeMills": "0",
            "pullThreadPoolQueueHeadWaitTimeMills": "0",
            "pageCacheLockTimeMills": "0",
            "commitLogDiskRatio": f"{disk_usage_ratio(store.config.commit_log_dir):.4f}",
        }
        if self.ctx.replicator is not None:
            table.update(self.ctx.replicator.status())
        return request.make_response(ResponseCode.SUCCESS, body=json.dumps({"table": table}).encode())

    async def consumer_connections(self, connection: Any, request: RemotingCommand) -> RemotingCommand:
        group = ConsumeStatsHeader.from_ext_fields(request.ext_fields).consumer_group
        info = self.ctx.consumers.groups.get(group)
        if info is None:
            return request.make_response(ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online")
        body = {
            "connectionSet": [
                {"clientId": c.client_id, "clientAddr": "%s:%d" % tuple(conn.remote_address), "language": c.language, "version": c.version}
                for conn, c in info.channels.items()
            ],
            "consumeType": info.consume_type,
            "messageModel": info.message_model,
            "consumeFromWhere": info.consume_from_where,
            "subscriptionTable": {
                t: {"topic": s.topic, "subString": s.sub_string, "expressionType": s.expression_type, "subVersion": s.sub_version,
                    "tagsSet": sorted(s.tags_set), "codeSet": sorted(s.code_set)}
                for t, s in info.subscriptions.items()
            },
        }
        return request.make_response(ResponseCode.SUCCESS, body=json.dumps(body).encode())

    async def broker_config(self, connection: Any, request: RemotingCommand) -> RemotingCommand:
        """GET_BROKER_CONFIG: the settings as Java properties text; the data version counts the
        UPDATE_BROKER_CONFIG requests applied (mqadmin getBrokerConfig)."""
        version = json.dumps({"counter": self.config_version, "timestamp": self.started_ms}, separators=(",", ":"))
        return request.make_response(
            ResponseCode.SUCCESS, ext_fields={"version": version},
            body=format_java_properties(self.ctx.kernel.settings.section("broker"), listenPort=self.ctx.store_host[1]).encode()
        )

    async def update_broker_config(self, connection: Any, request: RemotingCommand) -> RemotingCommand:
        """UPDATE_BROKER_CONFIG: Java properties text in the body; only keys declared ``runtime=True``, validated as in
        a bundle file. Applied to every holder of the settings at once (not written back to any file)."""
        try:
            values = parse_java_properties(request.body_bytes().decode("utf-8").splitlines())
        except (UnicodeDecodeError, ValueError) as exc:
            return request.make_response(ResponseCode.SYSTEM_ERROR, f"bad properties body: {exc}")
        if not values:
            return request.make_response(ResponseCode.SYSTEM_ERROR, "string2Properties error: no properties in the body")
        kernel = self.ctx.kernel
        runtime = kernel.settings.runtime_keys("broker")
        refused = sorted(set(values) - runtime)
        if refused:
            return request.make_response(
                ResponseCode.SYSTEM_ERROR,
                f"{', '.join(refused)} cannot be changed while the broker runs; these can: {', '.join(sorted(runtime))}",
            )
        old = self.ctx.settings
        try:
            changed = kernel.settings.update("broker", values, source="UPDATE_BROKER_CONFIG")
        except ConfigError as exc:
            return request.make_response(ResponseCode.SYSTEM_ERROR, str(exc))
        # every object holding a replaced settings instance (the broker context, feature objects, registered plugin
        # objects) gets the new one
        holders = [self.ctx, *vars(self.ctx).values(), *(v for _, v in kernel.state.items()),
                   *(p for _, p in kernel.pluginmanager.list_name_plugin())]
        for before, after in changed:
            for holder in holders:
                try:
                    attributes = vars(holder)
                except TypeError:
                    continue
                for name, value in list(attributes.items()):
                    if value is before:
                        setattr(holder, name, after)
        new = self.ctx.settings
        self.config_version += 1
        log.info("broker config updated at runtime: %s", values)
        if new.brokerPermission != old.brokerPermission and self.ctx.started:
            # name servers learn the new permission at once, as RocketMQ: a new topic data version, registered now
            self.ctx.topics.data_version.next()
            await self.ctx.registration.register_all()
        return request.make_response(ResponseCode.SUCCESS)

    async def view_stats(self, connection: Any, request: RemotingCommand) -> RemotingCommand:
        """VIEW_BROKER_STATS_DATA: BrokerStatsData of one RocketMQ stats name and key (mqadmin statsAll, brokerStatus)."""
        h = ViewBrokerStatsDataHeader.from_ext_fields(request.ext_fields)
        data = self.ctx.stats.view(h.stats_name, h.stats_key)
        if data is None:
            return request.make_response(ResponseCode.SYSTEM_ERROR, f"The stats <{h.stats_name}> <{h.stats_key}> not exist")
        return request.make_response(ResponseCode.SUCCESS, body=json.dumps(data).encode())

    async def all_producer_info(self, connection: Any, request: RemotingCommand) -> RemotingCommand:
        """GET_ALL_PRODUCER_INFO: every producer group and its live clients (ProducerTableInfo)."""
        now_ms, now = time.time() * 1000, trio.current_time()
        data = {
            group: [
                {"clientId": c.client_id, "remoteIP": "%s:%d" % tuple(conn.remote_address), "language": c.language,
                 "version": c.version, "lastUpdateTimestamp": int(now_ms - (now - c.last_update) * 1000)}
                for conn, c in channels.items()
            ]
            for group, channels in self.ctx.producers.groups.items()
        }
        return request.make_response(ResponseCode.SUCCESS, body=json.dumps({"data": data}).encode())

    async def producer_connections(self, connection: Any, request: RemotingCommand) -> RemotingCommand:
        """GET_PRODUCER_CONNECTION_LIST: the live producers of a group (mqadmin producerConnection)."""
        group = ProducerGroupHeader.from_ext_fields(request.ext_fields).producer_group
        channels = self.ctx.producers.groups.get(group)
        if not channels:
            return request.make_response(ResponseCode.SYSTEM_ERROR, f"the producer group[{group}] not exist")
        body = {"connectionSet": [
            {"clientId": c.client_id, "clientAddr": "%s:%d" % tuple(conn.remote_address), "language": c.language,
             "version": c.version}
            for conn, c in channels.items()
        ]}
        return request.make_response(ResponseCode.SUCCESS, body=json.dumps(body).encode())

    async def call_consumer(self, connection: Any, request: RemotingCommand) -> RemotingCommand | None:
        """GET_CONSUMER_RUNNING_INFO / CONSUME_MESSAGE_DIRECTLY: passed on to the named consumer and its answer passed
        back (mqadmin consumerStatus, queryMsgById -g -d), as RocketMQ's callConsumer. Answered from a task."""
        h = CallConsumerHeader.from_ext_fields(request.ext_fields)
        info = self.ctx.consumers.groups.get(h.consumer_group)
        target = next((conn for conn, c in info.channels.items() if c.client_id == h.client_id), None) if info else None
        if target is None:
            return request.make_response(
                ResponseCode.SYSTEM_ERROR, f"The Consumer <{h.consumer_group}> <{h.client_id}> not online"
            )
        fields, body = dict(request.ext_fields), request.body_bytes()
        if request.code == RequestCode.CONSUME_MESSAGE_DIRECTLY:
            # the broker fetches the message by its offset id and hands the stored record to the consumer
            fields["brokerName"] = self.ctx.settings.brokerName
            try:
                record = self.ctx.store.look_message_bytes_by_offset(decode_message_id(fields.get("msgId", ""))[2])
            except ValueError as exc:
                return request.make_response(ResponseCode.SYSTEM_ERROR, f"bad msgId {fields.get('msgId')!r}: {exc}")
            if record is None:
                return request.make_response(ResponseCode.SYSTEM_ERROR, f"can not find message {fields.get('msgId')}")
            body = bytes(record)
        connection.start_soon(self._forward_to_consumer, connection, request, target, h, fields, body)
        return None

    async def _forward_to_consumer(
        self, connection: Any, request: RemotingCommand, target: Any, h: Any, fields: dict[str, str], body: bytes
    ) -> None:
        forward = RemotingCommand.request(request.code, fields, body=body)
        try:
            answer = await target.invoke(forward, timeout=CALL_CONSUMER_TIMEOUT)
            response = request.make_response(answer.code, answer.remark, dict(answer.ext_fields), answer.body_bytes())
        except RemotingTimeout:
            response = request.make_response(
                ResponseCode.CONSUME_MSG_TIMEOUT, f"consumer <{h.consumer_group}> <{h.client_id}> Timeout")
        except RemotingError as exc:
            response = request.make_response(
                ResponseCode.SYSTEM_ERROR, f"invoke consumer <{h.consumer_group}> <{h.client_id}> Exception: {exc}")
        await connection.send_response(response)

    async def reset_offset(self, connection: Any, request: RemotingCommand) -> RemotingCommand:
        """INVOKE_BROKER_TO_RESET_OFFSET: move a group's committed offsets to a timestamp (mqadmin resetOffsetByTime)."""
        h = ResetOffsetHeader.from_ext_fields(request.ext_fields)
        ctx = self.ctx
        config = ctx.topics.get(h.topic)
        if config is None:
            return request.make_response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist")
        offsets = {}
        for qid in range(config.read_queue_nums):
            if h.timestamp < 0:
                offsets[qid] = ctx.store.get_max_offset_in_queue(h.topic, qid)
            else:
                offsets[qid] = ctx.store.get_offset_in_queue_by_time(h.topic, qid, h.timestamp)
            committed = ctx.offsets.query(h.group, h.topic, qid)
            if not h.is_force and 0 <= committed <= offsets[qid]:
                offsets[qid] = committed  # without force an offset only moves back (RocketMQ's Broker2Client)
        ctx.offsets.reset(h.group, h.topic, offsets)
        ctx.offsets.persist()
        table = {_mq_key(ctx, h.topic, q): o for q, o in offsets.items()}
        body = fastjson.dumps({"offsetTable": table}, style=fastjson.FASTJSON)
        # Running consumers hold their offsets in memory and would write the old ones back: tell each of them, as
        # RocketMQ does (RESET_CONSUMER_CLIENT_OFFSET, oneway, JSON).
        info = ctx.consumers.groups.get(h.group)
        for conn in list(info.channels) if info else []:
            push = RemotingCommand.request(
                RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
                {"topic": h.topic, "group": h.group, "timestamp": str(h.timestamp), "isForce": str(h.is_force).lower()},
                body=body, oneway=True,
            )
            conn.start_soon(ctx.send_oneway, conn, push)
        return request.make_response(ResponseCode.SUCCESS, body=body)


@hookimpl(trylast=True)
def pyrmq_configure(kernel: Kernel) -> None:
    register_feature(kernel, "broker.admin", AdminProcessor)
