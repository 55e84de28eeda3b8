"""Broker requests the consumers and the admin use (Java ``MQClientAPIImpl``; spec 2.1, 3.3-3.8, 4.4, 4.5).

Functions over a :class:`ClientInstance`: they build the request, send it to one broker address, and decode the
answer; a refused request raises :class:`BrokerError` with the code and remark.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from pyrmq.client.errors import BrokerError
from pyrmq.client.message import MessageExt, MessageQueue, PullResult, PullStatus, decode_messages, raw_tags
from pyrmq.remoting import fastjson
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand, json_text
from pyrmq.remoting.vocabulary import LARGE_PULL_FIELD

if TYPE_CHECKING:  # pragma: no cover
    from pyrmq.client.instance import ClientInstance

__all__ = [
    "pull",
    "pull_request",
    "pull_result",
    "query_consumer_offset",
    "update_consumer_offset",
    "max_offset",
    "min_offset",
    "search_offset",
    "consumer_ids",
    "lock_batch",
    "unlock_batch",
    "send_back",
    "query_message",
    "view_message",
]


_PULL_STATUS = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}


#: (group, queue, max_nums, suspend_ms, expression_type, subscription, large) -> the PULL_MESSAGE header's JSON
#: members around the fields that change from pull to pull (queueOffset, sysFlag, commitOffset, subVersion)
_PULL_JSON: dict[tuple[Any, ...], tuple[str, str, str, str, str]] = {}
_PULL_JSON_MAX = 4096


def _pull_json_parts(
    group: str, mq: MessageQueue, max_nums: int, suspend_ms: int, expression_type: str, subscription: str | None,
    large: bool = False,
) -> tuple[str, str, str, str, str]:
    key = (group, mq, max_nums, suspend_ms, expression_type, subscription, large)
    parts = _PULL_JSON.get(key)
    if parts is None:
        if len(_PULL_JSON) >= _PULL_JSON_MAX:
            _PULL_JSON.clear()
        # the members in the order of pull()'s ext dict, as RemotingCommand's generic JSON encoder writes them
        tail = f'","expressionType":{json_text(expression_type)}'
        if subscription is not None:
            tail += f',"subscription":{json_text(subscription)}'
        if large:
            tail += f',"{LARGE_PULL_FIELD}":"true"'
        parts = _PULL_JSON[key] = (
            f'"consumerGroup":{json_text(group)},"topic":{json_text(mq.topic)},"queueId":"{mq.queue_id:d}",'
            f'"queueOffset":"',
            f'","maxMsgNums":"{max_nums:d}","sysFlag":"',
            '","commitOffset":"',
            f'","suspendTimeoutMillis":"{suspend_ms:d}","subVersion":"',
            tail,
        )
    return parts


def pull_request(
    instance: ClientInstance,
    mq: MessageQueue,
    group: str,
    offset: int,
    *,
    max_nums: int = 32,
    sys_flag: int = 0,
    commit_offset: int = 0,
    suspend_ms: int = 15000,
    sub_version: int = 0,
    subscription: str | None = None,
    expression_type: str = "TAG",
    large: bool = False,
) -> RemotingCommand:
    """The PULL_MESSAGE (11) request :func:`pull` sends (its answer goes to :func:`pull_result`). ``large``: the
    pull may take more than RocketMQ's per-pull caps (:data:`LARGE_PULL_FIELD`)."""
    ext: dict[str, Any] = {
        "consumerGroup": group, "topic": mq.topic, "queueId": mq.queue_id, "queueOffset": offset, "maxMsgNums": max_nums,
        "sysFlag": sys_flag, "commitOffset": commit_offset, "suspendTimeoutMillis": suspend_ms, "subVersion": sub_version,
        "expressionType": expression_type,
    }
    if subscription is not None:
        ext["subscription"] = subscription
    if large:
        ext[LARGE_PULL_FIELD] = "true"
    request = RemotingCommand.request(RequestCode.PULL_MESSAGE, ext)
    if instance.remoting.signer is None and type(offset) is int and type(sys_flag) is int \
            and type(commit_offset) is int and type(sub_version) is int and type(max_nums) is int \
            and type(suspend_ms) is int:
        # the header's members from the queue's template, only the per-pull numbers written (RemotingCommand.ext_json;
        # the same bytes as the generic encoder's); a signer adds fields to ``ext``, so a signed request takes the
        # generic encoder
        head, mid, mid2, mid3, tail = _pull_json_parts(group, mq, max_nums, suspend_ms, expression_type, subscription,
                                                           large)
        request.ext_json = f"{head}{offset:d}{mid}{sys_flag:d}{mid2}{commit_offset:d}{mid3}{sub_version:d}{tail}"
    return request


def pull_result(
    instance: ClientInstance, addr: str, mq: MessageQueue, response: RemotingCommand, tags: frozenset[str] | None = None
) -> PullResult:
    """Decode the answer to a PULL_MESSAGE of ``mq`` sent to ``addr`` (see :func:`pull`); raises BrokerError."""
    status = _PULL_STATUS.get(response.code)
    if status is None:
        raise BrokerError(response.code, response.remark, addr, "PULL_MESSAGE")
    h = response.ext_fields
    try:
        next_begin = int(h["nextBeginOffset"])
        low = int(h.get("minOffset", 0))
        high = int(h.get("maxOffset", 0))
    except (KeyError, ValueError) as exc:
        raise BrokerError(response.code, f"pull response without offsets: {exc}", addr, "PULL_MESSAGE") from None
    messages: list[MessageExt] = []
    if status is PullStatus.FOUND:
        try:
            messages = decode_messages(response.body, mq.broker_name, low, high)
        except ValueError as exc:
            raise BrokerError(response.code, f"undecodable pull body: {exc}", addr, "PULL_MESSAGE") from None
        if tags:
            messages = [m for m in messages if raw_tags(m.raw_properties) in tags]
    suggest = int(h.get("suggestWhichBrokerId", 0) or 0)
    # the next pull of this queue goes where the broker suggested (Java's PullAPIWrapper.updatePullFromWhichNode)
    instance.pull_from[mq] = suggest
    return PullResult(status, next_begin, low, high, messages, suggest)


async def pull(
    instance: ClientInstance,
    addr: str,
    mq: MessageQueue,
    group: str,
    offset: int,
    *,
    max_nums: int = 32,
    sys_flag: int = 0,
    commit_offset: int = 0,
    suspend_ms: int = 15000,
    sub_version: int = 0,
    subscription: str | None = None,
    expression_type: str = "TAG",
    timeout: float = 30.0,
    tags: frozenset[str] | None = None,
    large: bool = False,
) -> PullResult:
    """PULL_MESSAGE (11). ``tags`` (when not None) re-checks the messages' TAGS client side (spec 5.2): the broker
    filters on the tag hash only. ``large``: a pyrmq broker may answer beyond RocketMQ's per-pull caps."""
    request = pull_request(
        instance, mq, group, offset, max_nums=max_nums, sys_flag=sys_flag, commit_offset=commit_offset,
        suspend_ms=suspend_ms, sub_version=sub_version, subscription=subscription, expression_type=expression_type,
        large=large,
    )
    response = await instance.remoting.invoke(addr, request, timeout)
    return pull_result(instance, addr, mq, response, tags)


def _offset_of(response: RemotingCommand, addr: str, name: str) -> int:
    try:
        return int(response.ext_fields["offset"])
    except (KeyError, ValueError):
        raise BrokerError(response.code, f"{name} response without an offset", addr, name) from None


async def query_consumer_offset(instance: ClientInstance, addr: str, group: str, mq: MessageQueue) -> int:
    """QUERY_CONSUMER_OFFSET (14); -1 when the broker has none (QUERY_NOT_FOUND)."""
    request = RemotingCommand.request(
        RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": group, "topic": mq.topic, "queueId": mq.queue_id}
    )
    response = await instance.invoke_broker(addr, request, ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND))
    if response.code == ResponseCode.QUERY_NOT_FOUND:
        return -1
    return _offset_of(response, addr, "QUERY_CONSUMER_OFFSET")


async def update_consumer_offset(
    instance: ClientInstance, addr: str, group: str, mq: MessageQueue, offset: int, *, oneway: bool = False
) -> None:
    """UPDATE_CONSUMER_OFFSET (15)."""
    ext = {"consumerGroup": group, "topic": mq.topic, "queueId": mq.queue_id, "commitOffset": offset}
    request = RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, ext, oneway=oneway)
    if oneway:
        await instance.remoting.invoke_oneway(addr, request, instance.config.api_timeout)
    else:
        await instance.invoke_broker(addr, request)


async def max_offset(instance: ClientInstance, addr: str, mq: MessageQueue) -> int:
    request = RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": mq.topic, "queueId": mq.queue_id})
    return _offset_of(await instance.invoke_broker(addr, request), addr, "GET_MAX_OFFSET")


async def min_offset(instance: ClientInstance, addr: str, mq: MessageQueue) -> int:
    request = RemotingCommand.request(RequestCode.GET_MIN_OFFSET, {"topic": mq.topic, "queueId": mq.queue_id})
    return _offset_of(await instance.invoke_broker(addr, request), addr, "GET_MIN_OFFSET")


async def search_offset(instance: ClientInstance, addr: str, mq: MessageQueue, timestamp_ms: int) -> int:
    """SEARCH_OFFSET_BY_TIMESTAMP (29): the queue offset of the message stored nearest to ``timestamp_ms``."""
    request = RemotingCommand.request(
        RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {"topic": mq.topic, "queueId": mq.queue_id, "timestamp": timestamp_ms}
    )
    return _offset_of(await instance.invoke_broker(addr, request), addr, "SEARCH_OFFSET_BY_TIMESTAMP")


async def consumer_ids(instance: ClientInstance, addr: str, group: str) -> list[str]:
    """GET_CONSUMER_LIST_BY_GROUP (38): client ids of the group's live consumers (empty when none)."""
    request = RemotingCommand.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})
    response = await instance.remoting.invoke(addr, request, instance.config.api_timeout)
    if response.code != ResponseCode.SUCCESS:
        return []
    data = fastjson.loads(response.body_bytes()) if response.body else {}
    return [str(c) for c in data.get("consumerIdList") or ()]


def _mq_set(mqs: Iterable[MessageQueue]) -> list[dict[str, Any]]:
    return [mq.to_json() for mq in mqs]


async def lock_batch(instance: ClientInstance, addr: str, group: str, mqs: Iterable[MessageQueue]) -> set[MessageQueue]:
    """LOCK_BATCH_MQ (41): the queues of ``mqs`` now locked by this client (spec 4.4)."""
    body = json.dumps({"clientId": instance.client_id, "consumerGroup": group, "mqSet": _mq_set(mqs)}).encode()
    response = await instance.invoke_broker(addr, RemotingCommand.request(RequestCode.LOCK_BATCH_MQ, body=body))
    data = fastjson.loads(response.body_bytes()) if response.body else {}
    return {MessageQueue.from_json(m) for m in data.get("lockOKMQSet") or ()}


async def unlock_batch(
    instance: ClientInstance, addr: str, group: str, mqs: Iterable[MessageQueue], *, oneway: bool = False
) -> None:
    """UNLOCK_BATCH_MQ (42)."""
    body = json.dumps({"clientId": instance.client_id, "consumerGroup": group, "mqSet": _mq_set(mqs)}).encode()
    request = RemotingCommand.request(RequestCode.UNLOCK_BATCH_MQ, body=body, oneway=oneway)
    if oneway:
        await instance.remoting.invoke_oneway(addr, request, instance.config.api_timeout)
    else:
        await instance.invoke_broker(addr, request)


async def send_back(
    instance: ClientInstance, addr: str, msg: MessageExt, group: str, *, delay_level: int = 0, max_reconsume_times: int = 16
) -> None:
    """CONSUMER_SEND_MSG_BACK (36): hand a failed message to the broker's retry / dead-letter machinery (spec 3.8,
    7.6). ``delay_level`` 0 lets the broker pick ``3 + reconsume_times``; -1 sends it straight to the DLQ."""
    ext = {
        "offset": msg.commit_log_offset, "group": group, "delayLevel": delay_level, "originMsgId": msg.msg_id,
        "originTopic": msg.topic, "unitMode": "false", "maxReconsumeTimes": max_reconsume_times, "bname": msg.broker_name,
    }
    await instance.invoke_broker(addr, RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, ext), name="CONSUMER_SEND_MSG_BACK")


async def query_message(
    instance: ClientInstance, addr: str, topic: str, key: str, *, max_num: int = 32, begin_ms: int = 0,
    end_ms: int | None = None, unique_key: bool = False, broker_name: str = "",
) -> list[MessageExt]:
    """QUERY_MESSAGE (12) against one broker's index; [] when nothing matches (QUERY_NOT_FOUND)."""
    ext = {
        "topic": topic, "key": key, "maxNum": max_num, "beginTimestamp": begin_ms,
        "endTimestamp": int(time.time() * 1000) + 60_000 if end_ms is None else end_ms,
        "_UNIQUE_KEY_QUERY": "true" if unique_key else "false",
    }
    response = await instance.invoke_broker(
        addr, RemotingCommand.request(RequestCode.QUERY_MESSAGE, ext), timeout=max(instance.config.api_timeout, 5.0),
        ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND), name="QUERY_MESSAGE",
    )
    if response.code != ResponseCode.SUCCESS or not response.body:
        return []
    return decode_messages(response.body, broker_name)


async def view_message(instance: ClientInstance, addr: str, commit_log_offset: int, broker_name: str = "") -> MessageExt:
    """VIEW_MESSAGE_BY_ID (33): the record at a commit-log offset of the broker at ``addr``."""
    request = RemotingCommand.request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": commit_log_offset})
    response = await instance.invoke_broker(addr, request, name="VIEW_MESSAGE_BY_ID")
    messages = decode_messages(response.body, broker_name) if response.body else []
    if not messages:
        raise BrokerError(response.code, f"no message at commit-log offset {commit_log_offset}", addr, "VIEW_MESSAGE_BY_ID")
    return messages[0]
