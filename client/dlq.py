"""Dead-letter queues from the outside: list ``%DLQ%<group>`` and re-send its messages to their original topic.

Used by ``pyrmq admin dlq list|resend``. Speaks the remoting protocol: the route of ``%DLQ%<group>`` from a name
server (GET_ROUTEINFO_BY_TOPIC), each queue's offsets (GET_MIN_OFFSET / GET_MAX_OFFSET), PULL_MESSAGE without
committing an offset (the tools group ``TOOLS_CONSUMER``), records decoded with :mod:`pyrmq.remoting.message`.

A re-sent message goes to the topic in its ``RETRY_TOPIC`` property (the topic it was consumed from, spec 7.6)
with the same body, flag, keys, tags, ``UNIQ_KEY`` and user properties, a reconsume count of 0 (a fresh set of
retries) and without the broker's bookkeeping properties. The DLQ keeps its copy (RocketMQ queues are append-only),
so re-sending twice delivers twice.
"""

from __future__ import annotations

import random
import time
from typing import Any

import attrs

from pyrmq.remoting.client import RemotingClient
from pyrmq.remoting.signing import RequestSigner
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.message import COMPRESSED_FLAG, decode_messages, encode_properties
from pyrmq.remoting.route import TopicRouteData
from pyrmq.remoting.vocabulary import AUTO_CREATE_TOPIC_KEY, MessageProperty, PullSysFlag
from pyrmq.remoting.vocabulary import DLQ_GROUP_TOPIC_PREFIX as DLQ_PREFIX

TOOLS_GROUP = "TOOLS_CONSUMER"
PULL_BATCH = 32
#: properties the broker or the retry machinery added; not carried over by a re-send
P = MessageProperty
BOOKKEEPING = frozenset({
    P.DELAY_TIME_LEVEL, P.REAL_TOPIC, P.REAL_QUEUE_ID, P.RETRY_TOPIC, P.CLUSTER, P.MIN_OFFSET, P.MAX_OFFSET,
    P.CONSUME_START_TIMESTAMP, P.RECONSUME_TIME, P.MAX_RECONSUME_TIMES, P.TIMER_DELIVER_MS, P.TIMER_DELAY_SEC,
    P.WAIT_STORE_MSG_OK,
})


class DlqError(Exception):
    """A request of a DLQ command failed; carries the RocketMQ response code and the broker's remark."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


@attrs.frozen
class DeadLetter:
    """One message of a dead-letter queue."""

    msg_id: str  # offset message id of the DLQ copy (spec 5.9)
    uniq_key: str | None
    original_topic: str | None  # RETRY_TOPIC: where it was consumed from
    origin_msg_id: str | None
    broker_addr: str
    queue_id: int
    queue_offset: int
    reconsume_times: int
    store_timestamp: int
    born_timestamp: int
    flag: int
    sys_flag: int
    body: bytes
    properties: dict[str, str]

    def as_dict(self) -> dict[str, Any]:
        d = attrs.asdict(self)
        d["body"] = self.body.decode("utf-8", "replace")
        return d


async def _invoke(client: RemotingClient, addr: str, request: RemotingCommand) -> RemotingCommand:
    try:
        return await client.invoke(addr, request, timeout=5.0)
    except Exception as exc:  # RemotingError and its timeouts
        raise DlqError(f"{addr}: {exc}") from None


async def _route(client: RemotingClient, namesrv: str, topic: str) -> TopicRouteData | None:
    last: DlqError | None = None
    for addr in [a.strip() for a in namesrv.split(";") if a.strip()]:
        try:
            resp = await _invoke(client, addr, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}))
        except DlqError as exc:
            last = exc
            continue
        if resp.code == ResponseCode.TOPIC_NOT_EXIST:
            return None
        if resp.code != ResponseCode.SUCCESS:
            raise DlqError(f"route of {topic} from {addr}: {resp.remark}", resp.code)
        return TopicRouteData.decode(resp.body_bytes())
    raise last or DlqError(f"no name server address in {namesrv!r}")


def _masters(route: TopicRouteData) -> dict[str, str]:
    """brokerName -> master address."""
    return {b.broker_name: b.master for b in route.broker_datas if b.master}


async def _offset(client: RemotingClient, addr: str, code: int, topic: str, queue_id: int) -> int:
    resp = await _invoke(client, addr, RemotingCommand.request(code, {"topic": topic, "queueId": str(queue_id)}))
    if resp.code != ResponseCode.SUCCESS:
        raise DlqError(f"{addr}: offset of {topic}/{queue_id}: {resp.remark}", resp.code)
    return int(resp.ext_fields["offset"])


async def _scan(client: RemotingClient, namesrv: str, group: str, limit: int | None) -> list[DeadLetter]:
    topic = DLQ_PREFIX + group
    route = await _route(client, namesrv, topic)
    if route is None:
        return []
    masters = _masters(route)
    out: list[DeadLetter] = []
    for qd in sorted(route.queue_datas, key=lambda q: q.broker_name):
        addr = masters.get(qd.broker_name)
        if addr is None:
            continue
        for queue_id in range(qd.read_queue_nums):
            offset = await _offset(client, addr, RequestCode.GET_MIN_OFFSET, topic, queue_id)
            end = await _offset(client, addr, RequestCode.GET_MAX_OFFSET, topic, queue_id)
            while offset < end and (limit is None or len(out) < limit):
                resp = await _invoke(client, addr, RemotingCommand.request(RequestCode.PULL_MESSAGE, {
                    "consumerGroup": TOOLS_GROUP, "topic": topic, "queueId": str(queue_id), "queueOffset": str(offset),
                    "maxMsgNums": str(PULL_BATCH), "sysFlag": str(int(PullSysFlag.SUBSCRIPTION)), "commitOffset": "0", "suspendTimeoutMillis": "0",
                    "subscription": "*", "subVersion": "0",
                }))
                if resp.code != ResponseCode.SUCCESS:
                    next_begin = int(resp.ext_fields.get("nextBeginOffset", offset))
                    if resp.code in (ResponseCode.PULL_OFFSET_MOVED, ResponseCode.PULL_RETRY_IMMEDIATELY) and next_begin > offset:
                        offset = next_begin
                        continue
                    break
                for m in decode_messages(resp.body_bytes()):
                    props = m.properties
                    out.append(DeadLetter(
                        msg_id=m.msg_id, uniq_key=props.get(P.UNIQ_CLIENT_MESSAGE_ID_KEYIDX),
                        original_topic=props.get(P.RETRY_TOPIC), origin_msg_id=props.get(P.ORIGIN_MESSAGE_ID), broker_addr=addr, queue_id=m.queue_id,
                        queue_offset=m.queue_offset, reconsume_times=m.reconsume_times,
                        store_timestamp=m.store_timestamp, born_timestamp=m.born_timestamp, flag=m.flag,
                        sys_flag=m.sys_flag, body=m.body, properties=props,
                    ))
                offset = int(resp.ext_fields["nextBeginOffset"])
    return out if limit is None else out[:limit]


def _client(credentials: tuple[str, str] | None) -> RemotingClient:
    return RemotingClient(signer=RequestSigner(*credentials) if credentials else None)


async def list_dlq(
    namesrv: str, group: str, limit: int = 100, *, credentials: tuple[str, str] | None = None
) -> list[DeadLetter]:
    """Up to ``limit`` messages of ``%DLQ%<group>``, oldest first per queue ([] when the group has no DLQ)."""
    async with _client(credentials) as client:
        return await _scan(client, namesrv, group, limit)


async def resend_dlq(
    namesrv: str, group: str, msg_ids: list[str] | None = None, *, credentials: tuple[str, str] | None = None
) -> int:
    """Re-send messages of ``%DLQ%<group>`` (all, or those whose offset msgId or UNIQ_KEY is in ``msg_ids``) to
    their original topic; returns how many were sent. Raises :class:`DlqError` when a send fails."""
    wanted = set(msg_ids) if msg_ids is not None else None
    sent = 0
    async with _client(credentials) as client:
        letters = await _scan(client, namesrv, group, None)
        if wanted is not None:
            letters = [d for d in letters if d.msg_id in wanted or d.uniq_key in wanted]
        routes: dict[str, TopicRouteData | None] = {}
        for letter in letters:
            topic = letter.original_topic
            if not topic:
                raise DlqError(f"message {letter.msg_id} of {DLQ_PREFIX}{group} has no RETRY_TOPIC: its topic is unknown")
            if topic not in routes:
                routes[topic] = await _route(client, namesrv, topic)
            addr, queue_id = _target(routes[topic], letter)
            props = {k: v for k, v in letter.properties.items() if k not in BOOKKEEPING}
            fields = {
                "a": "DLQ_RESEND_PRODUCER", "b": topic, "c": AUTO_CREATE_TOPIC_KEY, "d": 4, "e": queue_id,
                "f": letter.sys_flag & (COMPRESSED_FLAG | 0x700), "g": int(time.time() * 1000), "h": letter.flag,
                "i": encode_properties(props), "j": 0, "k": False,
            }
            resp = await _invoke(client, addr, RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, fields, letter.body))
            if resp.code != ResponseCode.SUCCESS:
                raise DlqError(f"re-sending {letter.msg_id} to {topic} via {addr}: {resp.remark}", resp.code)
            sent += 1
    return sent


def _target(route: TopicRouteData | None, letter: DeadLetter) -> tuple[str, int]:
    """A writable master queue of the original topic; the DLQ's broker (topic auto-created) when it has no route."""
    if route:
        masters = _masters(route)
        choices = [
            (masters[qd.broker_name], q)
            for qd in route.queue_datas
            if qd.broker_name in masters and qd.writable
            for q in range(qd.write_queue_nums)
        ]
        if choices:
            return random.choice(choices)
    return letter.broker_addr, 0
