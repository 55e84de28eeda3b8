"""Broker-side rebalance and message request modes: 5.5.0's ``QueryAssignmentProcessor`` and
``MessageRequestModeManager``, what the Java 5.x remoting push consumer needs to consume by POP.

A push consumer with ``setClientRebalance(false)`` does not split a topic's queues itself: it asks a broker
(QUERY_ASSIGNMENT 400) which queues it should work on and how. The *request mode* of the (topic, group) decides: PULL
(the queues are allocated as the client would, by its strategy ``AVG`` or ``AVG_BY_CIRCLE``) or POP (with
``popShareQueueNum`` <= 0, or at least the group's consumers - 1, every consumer gets every queue of the topic as
queue id -1, one pop of all queues; otherwise its own share plus the next ``popShareQueueNum`` consumers'). Each
assignment carries the mode, and a POP assignment makes the client send POP_MESSAGE instead of PULL_MESSAGE.

The request mode is set per (topic, group) by SET_MESSAGE_REQUEST_MODE 401 (``mqadmin setConsumeMode -b <broker> -t
<topic> -g <group> -m POP -q <popShareQueueNum>``), or broker-wide by ``defaultMessageRequestMode`` (PULL). The modes
are kept in ``<store>/config/messageRequestMode.json`` in 5.x's shape and a slave copies its master's
(GET_ALL_MESSAGE_REQUEST_MODE 402, a step of the metadata sync, as 5.x's SlaveSynchronize). A ``%RETRY%`` topic is
always PULL. The queues of a topic are those the name servers route (every broker of the cluster; this broker's own
topic config when no name server knows it), as 5.x's TopicRouteInfoManager.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from pyrmq.plugins.broker.topics import is_readable
from pyrmq.plugins.client.allocate import allocate_averagely, allocate_averagely_by_circle
from pyrmq.remoting import fastjson
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.errors import RemotingError
from pyrmq.store.config_files import ConfigFile, config_path

if TYPE_CHECKING:  # pragma: no cover - types only
    from pyrmq.plugins.broker.core import BrokerContext
    from pyrmq.plugins.broker.pop.settings import PopSettings

log = logging.getLogger("pyrmq.pop")

PULL = "PULL"
POP = "POP"
MODES = (PULL, POP)
RETRY_PREFIX = "%RETRY%"
#: the allocation strategies 5.5.0's broker knows, by the names the client sends
STRATEGIES: dict[str, Callable[[str, str, Sequence[Any], Sequence[str]], list[Any]]] = {
    "AVG": allocate_averagely,
    "AVG_BY_CIRCLE": allocate_averagely_by_circle,
}
#: seconds a topic's queues read from the name servers are reused (5.x refreshes its table every 30 s)
ROUTE_TTL = 5.0
FILE_NAME = "messageRequestMode.json"


@attrs.frozen(order=True)
class Queue:
    """A message queue as the allocation strategies and 5.x's JSON see it (sorted by topic, broker, queue id)."""

    topic: str
    broker_name: str
    queue_id: int

    def to_json(self) -> dict[str, Any]:
        return {"brokerName": self.broker_name, "queueId": self.queue_id, "topic": self.topic}


@attrs.frozen
class RequestMode:
    """5.x's ``SetMessageRequestModeRequestBody``: how a group consumes a topic."""

    topic: str
    group: str
    mode: str = PULL
    pop_share_queue_num: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"consumerGroup": self.group, "mode": self.mode, "popShareQueueNum": self.pop_share_queue_num,
                "topic": self.topic}

    @classmethod
    def from_json(cls, data: Any) -> RequestMode:
        """Raises ValueError naming the field that is wrong."""
        if not isinstance(data, dict):
            raise ValueError("the body is not a JSON object")
        topic, group = data.get("topic"), data.get("consumerGroup")
        if not isinstance(topic, str) or not topic:
            raise ValueError("topic is missing")
        if not isinstance(group, str) or not group:
            raise ValueError("consumerGroup is missing")
        mode = data.get("mode", PULL)
        if mode not in MODES:
            raise ValueError(f"mode {mode!r} is not one of PULL, POP")
        share = data.get("popShareQueueNum", 0)
        if isinstance(share, bool) or not isinstance(share, int):
            raise ValueError(f"popShareQueueNum {share!r} is not a number")
        return cls(topic, group, mode, share)


class RequestModes:
    """The (topic, group) request modes of one broker, persisted as 5.x's ``messageRequestMode.json``."""

    def __init__(self, store_root: str) -> None:
        self.file = ConfigFile(config_path(store_root, FILE_NAME))
        self.table: dict[str, dict[str, RequestMode]] = {}

    def load(self) -> None:
        self.adopt(self.file.load() or {})

    def adopt(self, document: Any) -> None:
        """Take a ``{"messageRequestModeMap": {topic: {group: body}}}`` document (the file, or the master's)."""
        table: dict[str, dict[str, RequestMode]] = {}
        for topic, groups in ((document or {}).get("messageRequestModeMap") or {}).items():
            for group, body in (groups or {}).items():
                try:
                    table.setdefault(str(topic), {})[str(group)] = RequestMode.from_json(body)
                except ValueError as exc:
                    log.warning("%s: request mode of %s@%s skipped: %s", self.file.path, group, topic, exc)
        self.table = table

    def document(self) -> dict[str, Any]:
        return {"messageRequestModeMap": {topic: {group: mode.to_json() for group, mode in sorted(groups.items())}
                                          for topic, groups in sorted(self.table.items())}}

    def persist(self) -> bool:
        return self.file.save(self.document())

    def get(self, topic: str, group: str) -> RequestMode | None:
        return self.table.get(topic, {}).get(group)

    def set(self, mode: RequestMode) -> None:
        self.table.setdefault(mode.topic, {})[mode.group] = mode


def allocate_pop(strategy: Callable[[str, str, Sequence[Any], Sequence[str]], list[Any]], group: str, client_id: str,
                 mq_all: list[Queue], cid_all: list[str], share: int) -> list[Queue]:
    """5.5.0's ``allocate4Pop``: every queue as queue id -1 when ``share`` <= 0 or >= consumers - 1; else the
    client's own share and the next ``share`` consumers' (with more consumers than queues, one queue each, round
    robin)."""
    if share <= 0 or share >= len(cid_all) - 1:
        return [Queue(mq.topic, mq.broker_name, -1) for mq in mq_all]
    if len(cid_all) <= len(mq_all):
        out = list(strategy(group, client_id, mq_all, cid_all))
        if client_id in cid_all:
            index = cid_all.index(client_id)
            for _ in range(share):
                index = (index + 1) % len(cid_all)
                out += strategy(group, cid_all[index], mq_all, cid_all)
        return out
    if client_id not in cid_all:
        return []
    return [mq_all[cid_all.index(client_id) % len(mq_all)]]


class AssignmentProcessor:
    """QUERY_ASSIGNMENT, SET_MESSAGE_REQUEST_MODE and GET_ALL_MESSAGE_REQUEST_MODE of one broker, and the metadata
    sync step copying the master's request modes (:class:`RequestModeSync`)."""

    def __init__(self, ctx: BrokerContext, settings: PopSettings) -> None:
        self.ctx = ctx
        self.settings = settings
        self.modes = RequestModes(str(ctx.settings.store_root))
        self.modes.load()
        #: topic -> (monotonic time read, its readable queues from the name servers)
        self._routes: dict[str, tuple[float, list[Queue]]] = {}

    # -- SET_MESSAGE_REQUEST_MODE ------------------------------------------------------------------------------------

    async def set_mode(self, connection: Any, request: RemotingCommand) -> RemotingCommand:
        try:
            mode = RequestMode.from_json(fastjson.loads(request.body_bytes() or b"{}"))
        except ValueError as exc:
            return request.make_response(ResponseCode.SYSTEM_ERROR, f"bad SetMessageRequestModeRequestBody: {exc}")
        if mode.topic.startswith(RETRY_PREFIX):
            return request.make_response(ResponseCode.NO_PERMISSION, "retry topic is not allowed to set mode")
        if self.ctx.topics.get(mode.topic) is None:
            return request.make_response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{mode.topic}] not exist")
        if self.ctx.groups.table.get(mode.group) is None:
            return request.make_response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, "subscription group does not exist")
        self.modes.set(mode)
        self.modes.persist()
        log.info("request mode of %s@%s set to %s (popShareQueueNum %d)", mode.group, mode.topic, mode.mode,
                 mode.pop_share_queue_num)
        return request.make_response(ResponseCode.SUCCESS, None)

    # -- GET_ALL_MESSAGE_REQUEST_MODE -------------------------------------------------------------------------------

    async def all_modes(self, connection: Any, request: RemotingCommand) -> RemotingCommand:
        return request.make_response(ResponseCode.SUCCESS, None, body=fastjson.dumps(self.modes.document()))

    # -- QUERY_ASSIGNMENT ------------------------------------------------------------------------------------------

    def mode_of(self, topic: str, group: str) -> RequestMode:
        found = self.modes.get(topic, group)
        if found is not None:
            return found
        if topic.startswith(RETRY_PREFIX):
            return RequestMode(topic, group, PULL)  # 5.x: a retry topic is always pulled
        mode = self.settings.defaultMessageRequestMode
        return RequestMode(topic, group, mode, self.settings.defaultPopShareQueueNum if mode == POP else 0)

    async def query(self, connection: Any, request: RemotingCommand) -> RemotingCommand:
        try:
            body = fastjson.loads(request.body_bytes() or b"{}")
            if not isinstance(body, dict):
                raise ValueError("the body is not a JSON object")
            topic, group, client_id = (str(body.get(k) or "") for k in ("topic", "consumerGroup", "clientId"))
            if not topic or not group:
                raise ValueError("topic is missing" if not topic else "consumerGroup is missing")
        except ValueError as exc:
            return request.make_response(ResponseCode.SYSTEM_ERROR, f"bad QueryAssignmentRequestBody: {exc}")
        model = str(body.get("messageModel") or "CLUSTERING")
        strategy_name = str(body.get("strategyName") or "")
        mode = self.mode_of(topic, group)
        queues = await self._balance(topic, group, client_id, model, strategy_name, mode)
        # fastjson leaves null fields out: no assignments (the client keeps its queues) is ``{}``
        answer = {} if queues is None else {"messageQueueAssignments": [
            {"messageQueue": q.to_json(), "mode": mode.mode} for q in sorted(set(queues))]}
        return request.make_response(ResponseCode.SUCCESS, None, body=fastjson.dumps(answer))

    async def _balance(self, topic: str, group: str, client_id: str, model: str, strategy_name: str,
                       mode: RequestMode) -> list[Queue] | None:
        """5.5.0's ``doLoadBalance``: None = no answer (the client keeps what it has), [] = nothing for it."""
        mq_set = await self.topic_queues(topic)
        if model == "BROADCASTING":
            return mq_set
        if model != "CLUSTERING":
            return []
        if mq_set is None:
            if not topic.startswith(RETRY_PREFIX):
                log.warning("QUERY_ASSIGNMENT: no assignment for group %s, the topic %s does not exist", group, topic)
            return None
        if not self.settings.serverLoadBalancerEnable:
            return mq_set
        info = self.ctx.consumers.groups.get(group)
        if info is None:
            log.warning("QUERY_ASSIGNMENT: no assignment for group %s topic %s: no consumer of it", group, topic)
            return None
        strategy = STRATEGIES.get(strategy_name)
        if strategy is None:
            log.warning("QUERY_ASSIGNMENT: unsupported strategy %r (group %s)", strategy_name, group)
            return None
        mq_all = sorted(mq_set)
        cid_all = sorted(info.client_ids())
        if mode.mode == POP:
            return allocate_pop(strategy, group, client_id, mq_all, cid_all, mode.pop_share_queue_num)
        return list(strategy(group, client_id, mq_all, cid_all))

    async def topic_queues(self, topic: str) -> list[Queue] | None:
        """The topic's readable queues in the cluster: the name servers' route (cached ``ROUTE_TTL``), else this
        broker's own config; None when neither knows the topic."""
        now = time.monotonic()
        cached = self._routes.get(topic)
        if cached is not None and now - cached[0] < ROUTE_TTL:
            return cached[1]
        queues = await self._route_queues(topic)
        if queues is None:
            config = self.ctx.topics.get(topic)
            if config is None or not is_readable(config.perm):
                return None
            queues = [Queue(topic, self.ctx.settings.brokerName, q) for q in range(config.read_queue_nums)]
            return queues
        self._routes[topic] = (now, queues)
        if len(self._routes) > 4096:
            self._routes = {t: v for t, v in self._routes.items() if now - v[0] < ROUTE_TTL}
        return queues

    async def _route_queues(self, topic: str) -> list[Queue] | None:
        ctx = self.ctx
        for addr in list(ctx.registration.namesrv_addresses):
            request = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
            try:
                response = await ctx.client.invoke(addr, request, timeout=3)
            except RemotingError as exc:
                log.debug("route of %s from name server %s: %s", topic, addr, exc)
                continue
            if response.code != ResponseCode.SUCCESS:
                continue
            try:
                route = fastjson.loads(response.body_bytes())
                return [Queue(topic, str(qd["brokerName"]), q)
                        for qd in route.get("queueDatas") or () if is_readable(int(qd.get("perm", 0)))
                        for q in range(int(qd.get("readQueueNums", 0)))]
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                log.warning("route of %s from name server %s unreadable: %s", topic, addr, exc)
        return None


class RequestModeSync:
    """A step of a slave's metadata sync (``pyrmq_register_slave_sync``): the master's request modes, replacing
    this broker's, written at once (5.x's ``SlaveSynchronize.syncMessageRequestMode``)."""

    name = "pop-request-modes"

    def __init__(self, processor: AssignmentProcessor) -> None:
        self.processor = processor

    async def sync(self, fetch: Callable[[int], Any]) -> None:
        document = await fetch(RequestCode.GET_ALL_MESSAGE_REQUEST_MODE)
        modes = self.processor.modes
        before = modes.document()
        modes.adopt(document)
        if modes.document() != before:
            modes.persist()
            log.info("request modes synchronised from the master (%d topics)", len(modes.table))
