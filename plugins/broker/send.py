"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320) (spec 2.1, 2.4, 3.1, 3.2, 5.7, 5.8, 7.3), and
SEND_REPLY_MESSAGE / _V2 (324, 325) of request-reply.

Checks in RocketMQ's order (AbstractSendMessageProcessor#msgCheck), topic auto-creation from TBW102, then the put
interceptors (``kernel.put_chain``, collected once through ``pyrmq_register_put_interceptors``: dead-letter
re-routing, delay levels, timer, or a plugin's own refusal), then one synchronous append. Under SYNC_FLUSH the
processor returns None and answers from a task once the bytes are on disk, so the connection keeps reading while the
group commit gathers other appends; a SYNC_MASTER waits for the replicator (``pyrmq_make_replicator``) to have a
slave acknowledge the message: SLAVE_NOT_AVAILABLE / FLUSH_SLAVE_TIMEOUT otherwise (message stored either way).
"""

from __future__ import annotations

import logging
import operator
import random
import time
from typing import Any

from pyrmq.kernel.hookspecs import hookimpl
from pyrmq.kernel.kernel import StateKey
from pyrmq.kernel.types import PutContext, PutKind, Rejection
from pyrmq.plugins.broker.core import BROKER, BrokerContext
from pyrmq.plugins.broker.topics import PERM_WRITE, TopicCreationRefused
from pyrmq.remoting.codes import MQVersion, RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand, json_text
from pyrmq.remoting.errors import RemotingError
from pyrmq.remoting.headers import SendMessageRequestHeader, SendMessageResponseHeader
from pyrmq.remoting.validation import JavaNumberError, java_int, java_long, not_allowed_send_problem, topic_problem
from pyrmq.remoting.vocabulary import RETRY_GROUP_TOPIC_PREFIX, Permission
from pyrmq.remoting.vocabulary import MessageProperty
from pyrmq.store.errors import CorruptRecordError
from pyrmq.store.format import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    TRANSACTION_TYPE_MASK,
    BatchEntry,
    MessageRecord,
    decode_batch_body,
    decode_properties,
    decode_properties_each,
    drop_property,
    encode_message_id,
    encode_properties,
    split_batch_body,
)
from pyrmq.store.results import PutMessageResult, PutMessageStatus

log = logging.getLogger("pyrmq.broker.send")

#: what :meth:`SendProcessor._send_one` returns for a send it leaves to the general path
_GENERIC = object()

PROPERTY_CLUSTER = MessageProperty.CLUSTER
PROPERTY_WAIT = MessageProperty.WAIT_STORE_MSG_OK
PROPERTY_REPLY_TO_CLIENT = MessageProperty.MESSAGE_REPLY_TO_CLIENT
PROPERTY_PUSH_REPLY_TIME = MessageProperty.PUSH_REPLY_TIME
_WAIT_ITEM = (PROPERTY_WAIT + NAME_VALUE_SEPARATOR).encode()
_PROPERTY_SEPARATOR_BYTES = PROPERTY_SEPARATOR.encode()
REPLY_PUSH_TIMEOUT = 3.0  # seconds; a requester that cannot take its reply within a producer's send timeout is gone

# PutMessageStatus -> send response code (spec 2.4)
_PUT_CODE = {
    PutMessageStatus.PUT_OK: ResponseCode.SUCCESS,
    PutMessageStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
    PutMessageStatus.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
    PutMessageStatus.MESSAGE_ILLEGAL: ResponseCode.MESSAGE_ILLEGAL,
    PutMessageStatus.PROPERTIES_SIZE_EXCEEDED: ResponseCode.MESSAGE_ILLEGAL,
    PutMessageStatus.SERVICE_NOT_AVAILABLE: ResponseCode.SERVICE_NOT_AVAILABLE,
}


def _unencodable(exc: UnicodeEncodeError, key: str) -> str:
    """The remark refusing properties that hold a lone UTF-16 surrogate (a JSON ``\\ud800`` escape): RocketMQ
    stores ``?`` in its place; pyrmq refuses the message rather than store other text than was sent."""
    return (f"the custom field <{key}> holds a lone UTF-16 surrogate {exc.object[exc.start:exc.end]!r}: message "
            f"properties must be text UTF-8 can encode")


class SendRejected(Exception):
    """A send refused before the append, with the response code and remark the client gets."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


#: the V2 header's short names, as the header class declares them (spec 3.1): attribute -> key
_V2 = SendMessageRequestHeader.WIRE_NAMES_V2
#: the key whose presence makes a request's header V2 (what ``SendMessageRequestHeader.from_ext_fields`` tests)
_V2_PROBE = _V2["producer_group"]
_V2_PROPERTIES = _V2["properties"]
_V1_PROPERTIES = SendMessageRequestHeader.WIRE_NAMES["properties"]
#: the fields the one-pass path reads with ``ext[key]`` (a missing one: the general path decides), in the order
#: :meth:`SendProcessor._send_one` unpacks them: every field of the header a client sends on every message
_V2_REQUIRED_FIELDS = (
    "producer_group", "topic", "default_topic", "default_topic_queue_nums", "queue_id", "sys_flag", "born_timestamp",
    "flag",
)
_V2_REQUIRED = operator.itemgetter(*[_V2[name] for name in _V2_REQUIRED_FIELDS])
#: the optional fields it reads with ``ext.get``, likewise: every optional field that can refuse a request (the
#: numbers) or changes the path (``batch``); the others (unitMode, bname) are read by nobody on a single send
_V2_OPTIONAL_FIELDS = ("properties", "reconsume_times", "max_reconsume_times", "batch")
_V2_OPTIONAL = tuple(_V2[name] for name in _V2_OPTIONAL_FIELDS)

_SEND_BATCH = int(RequestCode.SEND_BATCH_MESSAGE)
_SUCCESS = int(ResponseCode.SUCCESS)
_PUT_OK = PutMessageStatus.PUT_OK
#: the text of the numbers a send usually carries (queue ids, flags, counts), as ``Integer.parseInt`` reads it
_SMALL_INTS = {str(i): i for i in range(1024)}
#: topic names that passed :func:`topic_problem` and are not forbidden: remembered, since every send names one
_MAX_CHECKED_TOPICS = 65536


class SendProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        s = ctx.settings
        self.ext_common = {MessageProperty.MSG_REGION: s.regionId, MessageProperty.TRACE_SWITCH: "true"}
        # the send response's extFields as JSON members, up to the message id (RemotingCommand.ext_json): the same
        # members, in the same order, as the generic encoder writes for ext_common + SendMessageResponseHeader
        self._ext_json_head = ",".join(f"{json_text(k)}:{json_text(v)}" for k, v in self.ext_common.items()) + ',"msgId":"'
        self._msg_id_host: tuple[bytes, int] | None = None
        self._msg_id_prefix = ""
        self._checked_topics: set[str] = set()
        self.sync_flush = s.flushDiskType == "SYNC_FLUSH"
        self.sync_master = s.brokerRole == "SYNC_MASTER"
        self.chain = ctx.put_chain
        self.rng = random.Random()

    # -- checks ----------------------------------------------------------------------------------------------

    def check(self, header: SendMessageRequestHeader, born_host: tuple[str, int]) -> tuple[Any, int]:
        """(topic config, queue id) for a send, or SendRejected (spec 2.4 pre-send checks, 7.3 auto-creation):
        :meth:`check_fields` of the header's fields."""
        return self.check_fields(
            header.topic, header.queue_id, header.default_topic, header.default_topic_queue_nums, born_host
        )

    def check_fields(
        self,
        topic: str,
        queue_id: int,
        default_topic: str | None,
        default_topic_queue_nums: int | None,
        born_host: tuple[str, int],
    ) -> tuple[Any, int]:
        """The checks of every send, in RocketMQ's order (AbstractSendMessageProcessor#msgCheck): a slave refuses,
        then the topic name, forbidden topics, the broker's and the topic's write permission (an unknown topic
        auto-created from ``default_topic``, a ``%RETRY%`` one as a system topic), the queue id (a negative one
        picks a writable queue at random). (topic config, queue id), or SendRejected. The one-pass single send
        calls it with the header fields it read, the other paths through :meth:`check`."""
        ctx = self.ctx
        s = ctx.settings
        if s.brokerRole == "SLAVE":
            raise SendRejected(ResponseCode.SERVICE_NOT_AVAILABLE, f"the broker[{s.brokerName}] is a slave: sending is not allowed")
        if topic not in self._checked_topics:  # a valid name, not forbidden: remembered, since every send names one
            problem = topic_problem(topic)
            if problem:
                raise SendRejected(ResponseCode.SYSTEM_ERROR, problem)
            problem = not_allowed_send_problem(topic)
            if problem:
                raise SendRejected(ResponseCode.NO_PERMISSION, problem)
            if len(self._checked_topics) >= _MAX_CHECKED_TOPICS:
                self._checked_topics.clear()
            self._checked_topics.add(topic)
        config = ctx.topics.get(topic)
        if config is None or not s.brokerPermission & config.perm & PERM_WRITE:
            config = self._config_to_write(topic, config, default_topic, default_topic_queue_nums)
        if queue_id < 0 or (queue_id >= config.write_queue_nums and queue_id >= config.read_queue_nums):
            if queue_id >= 0:
                raise SendRejected(
                    ResponseCode.SYSTEM_ERROR,
                    f"request queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.writeQueueNums: "
                    f"[{config.write_queue_nums}] consumer: [{born_host[0]}]",
                )
            if config.write_queue_nums <= 0:  # (RocketMQ 4.9.7: an ArithmeticException, "/ by zero")
                raise SendRejected(
                    ResponseCode.SYSTEM_ERROR,
                    f"request queueId[{queue_id}] asks for any queue, but topic[{topic}] has no write queue "
                    f"(writeQueueNums {config.write_queue_nums})",
                )
            queue_id = self.rng.randrange(config.write_queue_nums)
        return config, queue_id

    def _config_to_write(
        self, topic: str, config: Any, default_topic: str | None, default_topic_queue_nums: int | None
    ) -> Any:
        """:meth:`check_fields` for a topic not known or not writable here: the config to write to (auto-created),
        or SendRejected."""
        ctx = self.ctx
        s = ctx.settings
        if not s.brokerPermission & PERM_WRITE and (config is None or config.order):
            raise SendRejected(ResponseCode.NO_PERMISSION, f"the broker[{s.brokerIP1}] sending message is forbidden")
        if config is None:
            if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                config = ctx.topics.create_system_topic(topic, 1, Permission.READ | Permission.WRITE)
            else:
                # a send that creates its topic needs the template and queue count (RocketMQ: a NullPointerException)
                if default_topic is None or default_topic_queue_nums is None:
                    key = "defaultTopic (c)" if default_topic is None else "defaultTopicQueueNums (d)"
                    raise SendRejected(
                        ResponseCode.SYSTEM_ERROR,
                        f"the custom field <{key}> is null: topic[{topic}] does not exist and would be created from it",
                    )
                try:
                    config = ctx.topics.create_in_send(topic, default_topic, default_topic_queue_nums)
                except TopicCreationRefused as exc:
                    raise SendRejected(ResponseCode.SYSTEM_ERROR, exc.remark) from None
            if config is None:
                raise SendRejected(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!")
        if not config.perm & PERM_WRITE:
            raise SendRejected(ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden")
        return config

    @staticmethod
    def max_reconsume_times(header: Any, version: int) -> int | None:
        """The client's maximum reconsume count; it counts from request version 121 (V3_4_9) on (spec 7.6)."""
        if header.max_reconsume_times is not None and version >= MQVersion.V3_4_9:
            return header.max_reconsume_times
        return None

    # -- records ---------------------------------------------------------------------------------------------

    def record(
        self,
        header: SendMessageRequestHeader,
        topic: str,
        queue_id: int,
        body: bytes,
        properties: dict[str, str],
        born_host: tuple[str, int],
        flag: int | None = None,
    ) -> MessageRecord:
        properties[PROPERTY_CLUSTER] = self.ctx.settings.brokerClusterName
        properties.pop(PROPERTY_WAIT, None)  # not stored from 4.9.3 on (spec 5.1)
        return MessageRecord(
            topic=topic,
            queue_id=queue_id,
            body=body,
            flag=header.flag if flag is None else flag,
            properties=properties,
            sys_flag=header.sys_flag,
            born_timestamp=header.born_timestamp,
            born_host=born_host,
            store_host=self.ctx.store_host,
            reconsume_times=header.reconsume_times or 0,
        )

    # -- processors ------------------------------------------------------------------------------------------

    async def send(self, connection: Any, request: RemotingCommand) -> RemotingCommand | None:
        ext = request.ext_fields
        if _V2_PROBE in ext and request.code != _SEND_BATCH:
            response = self._send_one(connection, request, ext)
            if response is not _GENERIC:
                return response
        return await self.send_general(connection, request)

    async def send_general(self, connection: Any, request: RemotingCommand) -> RemotingCommand | None:
        """The general path of :meth:`send`: the header decoded into its object, the checks, a record, the put
        interceptors, the append. What :meth:`send` does when the one-pass path leaves a send to it, and for every
        V1-named or batch send."""
        header = SendMessageRequestHeader.from_ext_fields(request.ext_fields)
        born_host = connection.remote_address
        try:
            if header.batch or request.code == RequestCode.SEND_BATCH_MESSAGE:
                result, wait, queue_id = self._put_batch(header, request, born_host)
            else:
                record, wait, queue_id = self._single_record(header, request, born_host)
                result = self.ctx.store.put_message(record)
        except SendRejected as exc:
            return request.make_response(exc.code, exc.remark, dict(self.ext_common))
        except UnicodeEncodeError as exc:  # properties (the header's or a re-addressed copy's) UTF-8 cannot encode
            key = _V2_PROPERTIES if _V2_PROBE in request.ext_fields else _V1_PROPERTIES
            return request.make_response(ResponseCode.MESSAGE_ILLEGAL, _unencodable(exc, key), dict(self.ext_common))
        if result.status is PutMessageStatus.PUT_OK and result.append is not None:
            self.ctx.put_stats.add(result.append.msg_num)
            self.ctx.stats.put(header.topic, result.append.msg_num, result.append.wrote_bytes)
        if result.status is PutMessageStatus.PUT_OK and wait and (self.sync_flush or self.sync_master):
            connection.start_soon(self._answer_when_durable, connection, request, result, queue_id)
            return None
        return self._response(request, result, queue_id)

    def _send_one(self, connection: Any, request: RemotingCommand, ext: dict[str, Any]) -> Any:
        """One message of a SEND_MESSAGE(_V2) with V2 header names (every client's single send), in one pass: the
        header fields read straight from ``ext`` (the keys the header class declares, converted as it converts
        them), :meth:`check_fields` and the put chain's trigger test (:meth:`PutChain.wants`) as the general path
        makes them, the append from the fields (no header or record object: :meth:`MessageStore.put_one`), the
        response rendered from a template. A field the header class would refuse or convert (missing, not a
        number, not text), a batch flag, or a message an interceptor wants returns ``_GENERIC`` before any side
        effect, and :meth:`send` takes the general path, which decides and answers as before."""
        try:
            group, topic, default_topic, nums_text, qid_text, sys_text, born_text, flag_text = _V2_REQUIRED(ext)
        except KeyError:
            return _GENERIC  # the general path names the missing field
        text, reconsume, max_reconsume, batch = map(ext.get, _V2_OPTIONAL)
        # the numbers by Java's rules (Integer.parseInt, Long.parseLong): the usual ones looked up ("0".."1023"),
        # a born timestamp of plain digits converted, anything else through the parser; a number Java refuses
        # leaves the send to the general path, which names the field
        small = _SMALL_INTS.get
        default_nums = small(nums_text)
        queue_id = small(qid_text)
        sys_flag = small(sys_text)
        flag = small(flag_text)
        reconsume_times = 0 if reconsume is None else small(reconsume)
        if (
            default_nums is None or queue_id is None or sys_flag is None or flag is None or reconsume_times is None
            or (max_reconsume is not None and small(max_reconsume) is None)
        ):
            try:
                default_nums = java_int(nums_text)
                queue_id = java_int(qid_text)
                sys_flag = java_int(sys_text)
                flag = java_int(flag_text)
                reconsume_times = 0 if reconsume is None else java_int(reconsume)
                if max_reconsume is not None:
                    java_int(max_reconsume)
            except JavaNumberError:
                return _GENERIC
        if type(born_text) is str and born_text.isdecimal() and len(born_text) < 19:
            born_timestamp = int(born_text)
        else:
            try:
                born_timestamp = java_long(born_text)
            except JavaNumberError:
                return _GENERIC
        if (
            group is None
            or type(topic) is not str
            or type(default_topic) is not str
            or (text is not None and type(text) is not str)
            or (batch is not None and batch != "false")
        ):
            return _GENERIC
        ctx = self.ctx
        properties = decode_properties(text) if text else {}
        wait = properties.pop(PROPERTY_WAIT, None) != "false"  # not stored from 4.9.3 on (spec 5.1)
        properties[PROPERTY_CLUSTER] = ctx.settings.brokerClusterName
        if self.chain.wants(topic, properties):  # chain.applies(record) of the record :meth:`record` would build
            return _GENERIC
        born_host = connection.remote_address
        try:
            config, queue_id = self.check_fields(topic, queue_id, default_topic, default_nums, born_host)
        except SendRejected as exc:
            return request.make_response(exc.code, exc.remark, dict(self.ext_common))
        try:
            encoded = encode_properties(properties).encode("utf-8")
        except UnicodeEncodeError as exc:
            return request.make_response(ResponseCode.MESSAGE_ILLEGAL, _unencodable(exc, _V2_PROPERTIES), dict(self.ext_common))
        result = ctx.store.put_one(
            topic, queue_id, request.body_bytes(), flag, properties, encoded, sys_flag, born_timestamp, born_host,
            ctx.store_host, reconsume_times,
        )
        if result.status is _PUT_OK:
            ctx.put_stats.add(1)
            ctx.stats.put(topic, 1, result.append.wrote_bytes)
            if wait and (self.sync_flush or self.sync_master):
                connection.start_soon(self._answer_when_durable, connection, request, result, queue_id)
                return None
        return self._response(request, result, queue_id)

    async def send_reply(self, connection: Any, request: RemotingCommand) -> RemotingCommand | None:
        """SEND_REPLY_MESSAGE(_V2), as RocketMQ's ReplyMessageProcessor: the reply goes at once to the requesting
        producer (PUSH_REPLY_MESSAGE_TO_CLIENT, 326, on the connection whose heartbeat carried the client id in
        ``REPLY_TO_CLIENT``; SYSTEM_ERROR with a remark when that fails), then it is stored in its topic
        (``<cluster>_REPLY_TOPIC``) like RocketMQ's default ``storeReplyMessageEnable = true``.

        Answered from a task: the requester's connection may be this very one (requester and replier in one
        client), whose reader must stay free to read the requester's answer to the push."""
        header = SendMessageRequestHeader.from_ext_fields(request.ext_fields)
        born_host = connection.remote_address
        try:
            _, queue_id = self.check(header, born_host)
        except SendRejected as exc:
            return request.make_response(exc.code, exc.remark, dict(self.ext_common))
        connection.start_soon(self._answer_reply, connection, request, header, queue_id)
        return None

    async def _answer_reply(
        self, connection: Any, request: RemotingCommand, header: SendMessageRequestHeader, queue_id: int
    ) -> None:
        born_host = connection.remote_address
        properties = decode_properties(header.properties) if header.properties else {}
        code, remark = await self._push_reply(header, request, properties, born_host)
        ext = dict(self.ext_common)
        if code == ResponseCode.SUCCESS:
            ext.update(SendMessageResponseHeader(msg_id="0", queue_id=queue_id, queue_offset=0).to_ext_fields())
        record = self.record(header, header.topic, queue_id, request.body_bytes(), properties, born_host)
        if self.chain.applies(record):  # a reply is a put like any other: the interceptors see it too
            record = self.chain(record, PutContext(PutKind.SEND, request, born_host, header.reconsume_times or 0, None))
        if record.__class__ is Rejection:
            code, remark = record.code, record.remark
        else:
            result = self.ctx.store.put_message(record)
            if result.status.is_ok and result.append is not None:
                self.ctx.put_stats.add(1)
                self.ctx.stats.put(record.topic, 1, result.append.wrote_bytes)
                ext.update(SendMessageResponseHeader(
                    msg_id=result.append.msg_id, queue_id=queue_id, queue_offset=result.append.queue_offset
                ).to_ext_fields())
        try:
            await connection.send_response(request.make_response(code, remark, ext))
        except RemotingError as exc:
            log.debug("reply answer to %s lost: %s", connection, exc)

    async def _push_reply(
        self, header: SendMessageRequestHeader, request: RemotingCommand, properties: dict[str, str],
        born_host: tuple[str, int],
    ) -> tuple[int, str | None]:
        requester = properties.get(PROPERTY_REPLY_TO_CLIENT)
        if not requester:
            return ResponseCode.SYSTEM_ERROR, f"reply message properties[{PROPERTY_REPLY_TO_CLIENT}] is null"
        channel = self.ctx.producers.find_channel(requester)
        if channel is None:
            return ResponseCode.SYSTEM_ERROR, f"push reply message fail, channel of <{requester}> not found."
        now = int(time.time() * 1000)
        pushed = dict(properties, **{PROPERTY_PUSH_REPLY_TIME: str(now)})
        store_ip, store_port = self.ctx.store_host
        push = RemotingCommand.request(RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT, {
            "producerGroup": header.producer_group, "topic": header.topic, "defaultTopic": header.default_topic,
            "defaultTopicQueueNums": str(header.default_topic_queue_nums), "queueId": str(header.queue_id),
            "sysFlag": str(header.sys_flag), "bornTimestamp": str(header.born_timestamp), "flag": str(header.flag),
            "properties": encode_properties(pushed), "reconsumeTimes": str(header.reconsume_times or 0),
            "unitMode": "true" if header.unit_mode else "false", "bornHost": f"{born_host[0]}:{born_host[1]}",
            "storeHost": f"{store_ip}:{store_port}", "storeTimestamp": str(now),
        }, body=request.body_bytes())
        try:
            answer = await channel.invoke(push, timeout=REPLY_PUSH_TIMEOUT)
        except RemotingError as exc:
            log.warning("push reply message to <%s> failed: %s", requester, exc)
            return ResponseCode.SYSTEM_ERROR, f"push reply message to <{requester}> fail: {exc}"
        if answer.code != ResponseCode.SUCCESS:
            return ResponseCode.SYSTEM_ERROR, f"push reply message to <{requester}> fail: {answer.remark}"
        return ResponseCode.SUCCESS, None

    def _single_record(
        self, header: SendMessageRequestHeader, request: RemotingCommand, born_host: tuple[str, int]
    ) -> tuple[MessageRecord, bool, int]:
        config, queue_id = self.check(header, born_host)
        properties = decode_properties(header.properties) if header.properties else {}
        wait = properties.get(PROPERTY_WAIT) != "false"
        record = self.record(header, header.topic, queue_id, request.body_bytes(), properties, born_host)
        chain = self.chain
        if chain.applies(record):
            context = PutContext(
                PutKind.SEND, request, born_host, header.reconsume_times or 0,
                self.max_reconsume_times(header, request.version),
            )
            record = chain(record, context)
            if record.__class__ is Rejection:
                raise SendRejected(record.code, record.remark)
        # the response names the queue the producer chose (or was given), like RocketMQ's
        return record, wait, queue_id

    def _put_batch(
        self, header: SendMessageRequestHeader, request: RemotingCommand, born_host: tuple[str, int]
    ) -> tuple[PutMessageResult, bool, int]:
        """SEND_BATCH_MESSAGE in bulk: the entries are cut out of the request body (the bodies as views of it) and
        appended with the stored properties built as bytes (the entry's, without WAIT, then the request's and
        CLUSTER, which win on decoding as later duplicates, like RocketMQ's batch encoder) and decoded once for the
        dispatchers: no record object per message. A batch an interceptor wants to see (:meth:`PutChain.wants` of
        the topic and every property name of its messages) takes the per-record path, :meth:`_batch_records`."""
        topic = header.topic
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            raise SendRejected(ResponseCode.MESSAGE_ILLEGAL, "batch request does not support retry group " + topic)
        if header.sys_flag & TRANSACTION_TYPE_MASK:
            raise SendRejected(ResponseCode.MESSAGE_ILLEGAL, "batch message does not support transaction messages")
        chain = self.chain
        outer = decode_properties(header.properties) if header.properties else {}
        if chain.wants(topic, outer):
            return self._put_batch_records(header, request, born_host)
        _, queue_id = self.check(header, born_host)
        try:
            parsed = split_batch_body(request.body_bytes())
        except CorruptRecordError as exc:
            raise SendRejected(ResponseCode.MESSAGE_ILLEGAL, f"the batch body does not decode: {exc}") from None
        if not parsed:
            raise SendRejected(ResponseCode.MESSAGE_ILLEGAL, "the batch body is empty")
        wait = outer.get(PROPERTY_WAIT) != "false"
        outer.pop(PROPERTY_WAIT, None)
        outer[PROPERTY_CLUSTER] = self.ctx.settings.brokerClusterName
        suffix = encode_properties(outer).encode("utf-8")
        joined = _PROPERTY_SEPARATOR_BYTES + suffix
        flags, bodies, sent = zip(*parsed)
        kept = [drop_property(p, _WAIT_ITEM) if _WAIT_ITEM in p else p for p in sent]
        stored = [p + joined if p else suffix for p in kept]
        # what the dispatchers read, and the chain's trigger test sees: the stored properties decoded
        dicts = decode_properties_each(stored)
        if chain.wants(topic, set().union(*dicts)):
            return self._put_batch_records(header, request, born_host, queue_id)
        entries = list(zip(flags, bodies, stored))
        result = self.ctx.store.put_entries(
            topic, queue_id, entries, header.sys_flag, header.born_timestamp, born_host, self.ctx.store_host,
            header.reconsume_times or 0, properties=dicts,
        )
        return result, wait, queue_id

    def _put_batch_records(
        self, header: SendMessageRequestHeader, request: RemotingCommand, born_host: tuple[str, int],
        queue_id: int | None = None,
    ) -> tuple[PutMessageResult, bool, int]:
        records, wait, queue_id = self._batch_records(header, request, born_host, queue_id)
        return self.ctx.store.put_messages(records), wait, queue_id

    def _batch_records(
        self, header: SendMessageRequestHeader, request: RemotingCommand, born_host: tuple[str, int],
        queue_id: int | None = None,
    ) -> tuple[list[MessageRecord], bool, int]:
        """The records of a batch, each through the put chain when it wants it; ``queue_id``: the queue
        :meth:`check` already gave this batch (None: checked here)."""
        if header.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            raise SendRejected(ResponseCode.MESSAGE_ILLEGAL, "batch request does not support retry group " + header.topic)
        if header.sys_flag & TRANSACTION_TYPE_MASK:
            raise SendRejected(ResponseCode.MESSAGE_ILLEGAL, "batch message does not support transaction messages")
        if queue_id is None:
            _, queue_id = self.check(header, born_host)
        try:
            entries: list[BatchEntry] = decode_batch_body(request.body_bytes())
        except CorruptRecordError as exc:
            raise SendRejected(ResponseCode.MESSAGE_ILLEGAL, f"the batch body does not decode: {exc}") from None
        if not entries:
            raise SendRejected(ResponseCode.MESSAGE_ILLEGAL, "the batch body is empty")
        outer = decode_properties(header.properties) if header.properties else {}
        wait = outer.get(PROPERTY_WAIT) != "false"
        records = []
        chain = self.chain
        for entry in entries:
            properties = decode_properties(entry.properties_bytes) if entry.properties_bytes else {}
            properties.update(outer)
            record = self.record(header, header.topic, queue_id, entry.body, properties, born_host, flag=entry.flag)
            if chain.applies(record):
                record = chain(record, PutContext(PutKind.BATCH, request, born_host, header.reconsume_times or 0))
                if record.__class__ is Rejection:
                    raise SendRejected(record.code, record.remark)
                if record.topic != header.topic or record.queue_id != queue_id:
                    raise SendRejected(
                        ResponseCode.MESSAGE_ILLEGAL,
                        f"batch message cannot be re-addressed to {record.topic}:{record.queue_id}: a batch goes to one queue",
                    )
            records.append(record)
        return records, wait, queue_id

    async def _answer_when_durable(
        self, connection: Any, request: RemotingCommand, result: PutMessageResult, queue_id: int
    ) -> None:
        end = result.append.end_offset
        if self.sync_flush and not await self.ctx.store.wait_flushed(end):
            result.status = PutMessageStatus.FLUSH_DISK_TIMEOUT
        elif self.sync_master:
            # the replicator's group-transfer wait; without one a SYNC_MASTER is a master without a slave
            replicator = self.ctx.replicator
            result.status = (
                PutMessageStatus.SLAVE_NOT_AVAILABLE if replicator is None else await replicator.wait_replicated(end)
            )
        await connection.send_response(self._response(request, result, queue_id))

    def _response(self, request: RemotingCommand, result: PutMessageResult, queue_id: int) -> RemotingCommand:
        status = result.status
        ext = dict(self.ext_common)
        append = result.append
        if status is _PUT_OK:  # (an enum's hash is a Python call: the usual case tests identity only)
            response = request.make_response(_SUCCESS, None, ext)
        else:
            code = _PUT_CODE.get(status, ResponseCode.SYSTEM_ERROR)
            response = request.make_response(code, None if code == _SUCCESS else (result.remark or status.value), ext)
        if append is not None and (status is _PUT_OK or status.is_ok):
            if append.offsets is None:
                # one message: the id is the store host's hex (remembered) and the offset; the members of
                # SendMessageResponseHeader (msgId, queueId, queueOffset; no transactionId) also pre-rendered as JSON
                host = (append.store_ip, append.store_port)
                if host != self._msg_id_host:
                    self._msg_id_prefix = encode_message_id(append.store_ip, append.store_port, 0)[:-16]
                    self._msg_id_host = host
                msg_id = f"{self._msg_id_prefix}{append.wrote_offset:016X}"
                qid = str(queue_id)
                qoff = str(append.queue_offset)
                ext["msgId"] = msg_id
                ext["queueId"] = qid
                ext["queueOffset"] = qoff
                response.ext_json = f'{self._ext_json_head}{msg_id}","queueId":"{qid}","queueOffset":"{qoff}"'
            else:
                ext.update(SendMessageResponseHeader(
                    msg_id=append.msg_id, queue_id=queue_id, queue_offset=append.queue_offset
                ).to_ext_fields())
        return response


SEND = StateKey[SendProcessor]("broker.send")


@hookimpl(trylast=True)
def pyrmq_configure(kernel: Any) -> None:
    ctx = kernel.state.find(BROKER)
    if ctx is not None:
        kernel.state.put(SEND, SendProcessor(ctx))


@hookimpl(trylast=True)
def pyrmq_register_processors(kernel: Any, role: str) -> dict[int, Any] | None:
    processor = kernel.state.find(SEND)
    if role != "broker" or processor is None:
        return None
    return {
        RequestCode.SEND_MESSAGE: processor.send,
        RequestCode.SEND_MESSAGE_V2: processor.send,
        RequestCode.SEND_BATCH_MESSAGE: processor.send,
        RequestCode.SEND_REPLY_MESSAGE: processor.send_reply,
        RequestCode.SEND_REPLY_MESSAGE_V2: processor.send_reply,
    }
