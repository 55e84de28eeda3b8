"""A raw POP client for the tests: RemotingCommand requests with 5.5.0's headers, answers read as the 5.x Java
client reads them (handles built from the info strings, POP_CK on revived messages, FIFO counts)."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import attrs

from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.message import StoredMessage, decode_messages, encode_properties
from pyrmq.remoting.pop import (
    PROPERTY_POP_CK,
    AckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    NotificationRequestHeader,
    PeekMessageRequestHeader,
    PollingInfoRequestHeader,
    PopMessageRequestHeader,
    ReceiptHandle,
    batch_acks,
    encode_batch_ack_body,
    parse_order_count_info,
    parse_start_offset_info,
    receipt_handle,
)


@attrs.define
class Popped:
    message: StoredMessage
    handle: ReceiptHandle
    topic: str  #: the topic popped (what the ack's real topic derives from)
    group: str
    #: a FIFO message's attempts beyond the first (orderCountInfo), else the stored reconsume count
    reconsume_times: int

    @property
    def key(self) -> str:
        return self.message.properties.get("KEYS", "")

    @property
    def real_topic(self) -> str:
        return self.handle.real_topic(self.topic, self.group)


@attrs.define
class PopAnswer:
    response: RemotingCommand
    messages: list[Popped]

    @property
    def code(self) -> int:
        return self.response.code

    @property
    def ext(self) -> dict[str, str]:
        return dict(self.response.ext_fields)

    @property
    def keys(self) -> list[str]:
        return [m.key for m in self.messages]


class PopClient:
    """One group's POP requests to one broker, over a RemotingClient."""

    def __init__(self, client: Any, addr: str, group: str, topic: str, broker_name: str = "broker-a") -> None:
        self.client = client
        self.addr = addr
        self.group = group
        self.topic = topic
        self.broker_name = broker_name

    async def invoke(self, code: int, ext: dict[str, str], body: bytes = b"", timeout: float = 30.0) -> RemotingCommand:
        return await self.client.invoke(self.addr, RemotingCommand.request(code, ext, body=body), timeout=timeout)

    async def pop(self, n: int = 32, *, invisible: int = 30_000, poll: int = 0, queue_id: int = -1,
                  order: bool = False, attempt_id: str | None = None, exp_type: str | None = None,
                  exp: str | None = None, init_mode: int = 0, born: int | None = None, topic: str | None = None,
                  ) -> PopAnswer:
        header = PopMessageRequestHeader(
            consumer_group=self.group, topic=topic or self.topic, queue_id=queue_id, max_msg_nums=n,
            invisible_time=invisible, poll_time=poll, born_time=int(time.time() * 1000) if born is None else born,
            init_mode=init_mode, exp_type=exp_type, exp=exp, order=order, attempt_id=attempt_id)
        response = await self.invoke(RequestCode.POP_MESSAGE, header.to_ext_fields(), timeout=poll / 1000 + 30)
        return PopAnswer(response, self.read(response, topic or self.topic))

    def read(self, response: RemotingCommand, topic: str) -> list[Popped]:
        if response.code != ResponseCode.SUCCESS:
            return []
        ext = response.ext_fields
        starts = parse_start_offset_info(ext.get("startOffsetInfo"))
        counts = parse_order_count_info(ext.get("orderCountInfo"))
        out = []
        for msg in decode_messages(response.body_bytes()):
            props = msg.properties
            handle = receipt_handle(
                topic=msg.topic, queue_id=msg.queue_id, queue_offset=msg.queue_offset, pop_ck=props.get(PROPERTY_POP_CK),
                start_offsets=starts, pop_time=int(ext["popTime"]), invisible_time=int(ext["invisibleTime"]),
                revive_qid=int(ext["reviveQid"]), broker_name=self.broker_name)
            reconsume = msg.reconsume_times
            if counts:
                flag = handle.retry_flag
                reconsume = counts.get(f"{flag}@qo{msg.queue_id}%{msg.queue_offset}",
                                       counts.get(f"{flag}@{msg.queue_id}", reconsume))
            out.append(Popped(msg, handle, topic, self.group, reconsume))
        return out

    async def ack(self, popped: Popped, *, extra_info: str | None = None, offset: int | None = None,
                  queue_id: int | None = None, topic: str | None = None) -> RemotingCommand:
        header = AckMessageRequestHeader(
            consumer_group=self.group, topic=topic or popped.real_topic,
            queue_id=popped.handle.queue_id if queue_id is None else queue_id,
            extra_info=popped.handle.encode() if extra_info is None else extra_info,
            offset=popped.handle.queue_offset if offset is None else offset)
        return await self.invoke(RequestCode.ACK_MESSAGE, header.to_ext_fields())

    async def batch_ack(self, popped: list[Popped]) -> RemotingCommand:
        acks = batch_acks(self.topic, self.group, [p.handle for p in popped])
        return await self.invoke(RequestCode.BATCH_ACK_MESSAGE, {}, encode_batch_ack_body(acks, self.broker_name))

    async def change(self, popped: Popped, invisible: int, *, suspend: bool = False) -> tuple[RemotingCommand, Popped]:
        """CHANGE_MESSAGE_INVISIBLETIME; the message with the new handle the client builds from the answer."""
        h = popped.handle
        header = ChangeInvisibleTimeRequestHeader(
            consumer_group=self.group, topic=popped.real_topic, queue_id=h.queue_id, extra_info=h.encode(),
            offset=h.queue_offset, invisible_time=invisible, suspend=suspend)
        response = await self.invoke(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, header.to_ext_fields())
        if response.code != ResponseCode.SUCCESS:
            return response, popped
        ext = response.ext_fields
        new = attrs.evolve(h, ck_queue_offset=h.queue_offset if not h.is_order else h.ck_queue_offset,
                           pop_time=int(ext["popTime"]), invisible_time=int(ext["invisibleTime"]),
                           revive_qid=int(ext["reviveQid"]))
        return response, attrs.evolve(popped, handle=new)

    async def peek(self, n: int = 32, queue_id: int = -1) -> RemotingCommand:
        header = PeekMessageRequestHeader(consumer_group=self.group, topic=self.topic, queue_id=queue_id, max_msg_nums=n)
        return await self.invoke(RequestCode.PEEK_MESSAGE, header.to_ext_fields())

    async def notification(self, *, poll: int = 0, queue_id: int = -1, order: bool = False,
                           exp_type: str | None = None, exp: str | None = None) -> RemotingCommand:
        header = NotificationRequestHeader(
            consumer_group=self.group, topic=self.topic, queue_id=queue_id, poll_time=poll,
            born_time=int(time.time() * 1000), order=order, exp_type=exp_type, exp=exp)
        return await self.invoke(RequestCode.NOTIFICATION, header.to_ext_fields(), timeout=poll / 1000 + 30)

    async def polling_info(self, queue_id: int = -1) -> RemotingCommand:
        header = PollingInfoRequestHeader(consumer_group=self.group, topic=self.topic, queue_id=queue_id)
        return await self.invoke(RequestCode.POLLING_INFO, header.to_ext_fields())


async def request(client: Any, addr: str, code: int, ext: dict[str, Any], body: bytes = b"") -> RemotingCommand:
    command = RemotingCommand.request(code, {k: str(v) for k, v in ext.items() if v is not None}, body=body)
    return await client.invoke(addr, command, timeout=30)


async def create_topic(client: Any, addr: str, topic: str, queues: int = 1) -> None:
    response = await request(client, addr, RequestCode.UPDATE_AND_CREATE_TOPIC, {
        "topic": topic, "defaultTopic": "TBW102", "readQueueNums": queues, "writeQueueNums": queues, "perm": 6,
        "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": "false"})
    assert response.code == ResponseCode.SUCCESS, response.remark


async def create_group(client: Any, addr: str, group: str, **config: Any) -> None:
    body = json.dumps({"groupName": group, **config}).encode()
    response = await request(client, addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, body)
    assert response.code == ResponseCode.SUCCESS, response.remark


async def send(client: Any, addr: str, topic: str, keys: list[str], *, queue_id: int = 0, tags: str | None = None,
               properties: dict[str, str] | None = None) -> list[int]:
    """Send one message per key (body = the key) with SEND_MESSAGE; their queue offsets."""
    offsets = []
    for key in keys:
        props = {"KEYS": key, "UNIQ_KEY": uuid.uuid4().hex.upper(), **(properties or {})}
        if tags:
            props["TAGS"] = tags
        response = await request(client, addr, RequestCode.SEND_MESSAGE, {
            "producerGroup": "pop_test_pg", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": 4,
            "queueId": queue_id, "sysFlag": 0, "bornTimestamp": int(time.time() * 1000), "flag": 0,
            "properties": encode_properties(props)}, key.encode())
        assert response.code == ResponseCode.SUCCESS, response.remark
        offsets.append(int(response.ext_fields["queueOffset"]))
    return offsets
