"""Transaction messages (Java ``TransactionMQProducer``; spec 3.6, 3.7, 7.8).

    async def place_order(msg, order):            # your local transaction
        await db.insert(order)
        return LocalTransactionState.COMMIT

    async def was_placed(msg):                     # the broker asks when it heard nothing (producer died ...)
        return LocalTransactionState.COMMIT if await db.has(msg.keys) else LocalTransactionState.ROLLBACK

    async with TransactionProducer(namesrv, group="orders", check_local=was_placed) as producer:
        result = await producer.send_in_transaction(Message("Orders", b"..."), place_order, order)

``send_in_transaction`` sends a *half* message (invisible to consumers), runs ``execute_local(msg, arg)`` once the
broker stored it, then commits or rolls back by END_TRANSACTION (oneway, like Java). An exception in
``execute_local`` or ``check_local`` counts as UNKNOWN: the broker asks again later through ``check_local``. Either
callback may be a plain function or a coroutine function. ``DELAY`` is stripped, as Java does (a transaction message
is delivered when committed). :class:`BlockingTransactionProducer` is the same for threads: its callbacks run in the
calling thread (``execute_local``) or a worker thread (``check_local``).
"""

from __future__ import annotations

import enum
import inspect
import logging
from collections.abc import Callable, Iterable
from typing import Any

import attrs
import trio

from pyrmq.client.blocking import _BlockingService
from pyrmq.client.errors import BrokerError, ClientError, ClientStateError
from pyrmq.client.message import Message, MessageExt, SendResult, SendStatus, decode_messages
from pyrmq.client.producer import Producer
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.errors import HeaderError, RemotingError
from pyrmq.remoting.headers import CheckTransactionStateRequestHeader, EndTransactionRequestHeader
from pyrmq.remoting.message import TRANSACTION_PREPARED_TYPE, decode_message_id
from pyrmq.remoting.vocabulary import (
    AUTO_CREATE_TOPIC_KEY,
    MASTER_ID,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    MessageProperty,
)

DELAY = MessageProperty.DELAY_TIME_LEVEL

__all__ = ["BlockingTransactionProducer", "LocalTransactionState", "TransactionProducer", "TransactionSendResult"]

log = logging.getLogger("pyrmq.client.transaction")

TRAN_MSG = "TRAN_MSG"
PGROUP = "PGROUP"


class LocalTransactionState(enum.Enum):
    """What the local transaction did (Java's LocalTransactionState); the value is END_TRANSACTION's
    ``commitOrRollback``."""

    COMMIT = 8
    ROLLBACK = 12
    UNKNOWN = 0


@attrs.frozen
class TransactionSendResult:
    """The half message's send result and what the local transaction answered."""

    send_result: SendResult
    local_state: LocalTransactionState

    @property
    def msg_id(self) -> str:
        return self.send_result.msg_id

    @property
    def transaction_id(self) -> str:
        return self.send_result.transaction_id or self.send_result.msg_id


async def _call(fn: Callable[..., Any], *args: Any, in_thread: bool = False) -> LocalTransactionState:
    """Run a user callback; anything but a LocalTransactionState (an exception included) is UNKNOWN."""
    try:
        if in_thread and not inspect.iscoroutinefunction(fn):
            answer = await trio.to_thread.run_sync(fn, *args)
        else:
            answer = fn(*args)
            if inspect.isawaitable(answer):
                answer = await answer
    except Exception:  # noqa: BLE001 - Java: an exception in the local transaction is UNKNOW
        log.exception("transaction callback %r failed: the state is UNKNOWN", fn)
        return LocalTransactionState.UNKNOWN
    if isinstance(answer, LocalTransactionState):
        return answer
    log.warning("transaction callback %r returned %r, not a LocalTransactionState: UNKNOWN", fn, answer)
    return LocalTransactionState.UNKNOWN


class TransactionProducer(Producer):
    """A :class:`Producer` that also sends transaction messages; ``check_local(msg)`` answers the broker's checks."""

    def __init__(
        self,
        namesrv: str | Iterable[str] | None = None,
        group: str = "pyrmq_transaction_producer",
        *,
        check_local: Callable[[MessageExt], Any] | None = None,
        check_in_thread: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(namesrv, group, **kwargs)
        self.check_local = check_local
        self.check_in_thread = check_in_thread
        #: check-backs answered since start
        self.checks_answered = 0
        self._heartbeat_sent: set[str] = set()

    async def _on_start(self, nursery: trio.Nursery) -> None:
        await super()._on_start(nursery)
        instance = self.instance
        checkers = getattr(instance, "transaction_producers", None)
        if checkers is None:
            checkers = instance.transaction_producers = {}
            # the broker's CHECK_TRANSACTION_STATE arrives on our own connection to it (spec 7.8)
            instance.remoting.processors[RequestCode.CHECK_TRANSACTION_STATE] = _checker_for(checkers)
        checkers[self.group] = self
        nursery.start_soon(self._announce)

    async def _announce(self) -> None:
        """Learn the brokers from TBW102's route and heartbeat them, so that a producer that has sent nothing yet (a
        restarted one) answers the checks of its group's halves (Java's producer tracks TBW102 from its start)."""
        try:
            await self.instance.publish_info(AUTO_CREATE_TOPIC_KEY)
        except ClientError as exc:
            log.info("group %s: no route of %s yet (%s); the next heartbeat round will do", self.group, AUTO_CREATE_TOPIC_KEY, exc)
            return
        await self.instance.send_heartbeat()

    async def _on_shutdown(self) -> None:
        checkers = getattr(self.instance, "transaction_producers", {})
        if checkers.get(self.group) is self:
            del checkers[self.group]
        await super()._on_shutdown()

    # -- sending ---------------------------------------------------------------------------------------------

    async def send_half(self, msg: Message, *, timeout: float | None = None) -> SendResult:
        """Send ``msg`` as a half message (stored, not delivered until committed)."""
        self._ready()
        if msg.delay_time_level or DELAY in msg.properties:
            msg = attrs.evolve(msg, delay_time_level=0, properties={k: v for k, v in msg.properties.items() if k != DELAY})
        p = self._prepare(msg, extra_properties={TRAN_MSG: "true", PGROUP: self.group})
        p.sys_flag |= TRANSACTION_PREPARED_TYPE
        result = await self._send_prepared(p, timeout=timeout)
        addr = self.instance.broker_addr(result.message_queue.broker_name)
        if addr is not None and addr not in self._heartbeat_sent:
            # the broker checks back through a connection it knows from our heartbeat: send one now, not in 30 s
            self._heartbeat_sent.add(addr)
            await self.instance.send_heartbeat([addr])
        return result

    async def send_in_transaction(
        self, msg: Message, execute_local: Callable[[Message, Any], Any], arg: Any = None, *, timeout: float | None = None
    ) -> TransactionSendResult:
        """Half message, ``execute_local(msg, arg)``, then COMMIT / ROLLBACK / nothing (UNKNOWN) to the broker.

        A half the broker did not store OK is rolled back without running the local transaction (Java)."""
        result = await self.send_half(msg, timeout=timeout)
        if result.status is SendStatus.SEND_OK:
            state = await _call(execute_local, msg, arg)
        else:
            state = LocalTransactionState.ROLLBACK
        await self.end_transaction(result, state)
        return TransactionSendResult(result, state)

    async def end_transaction(self, result: SendResult, state: LocalTransactionState, *, from_check: bool = False) -> None:
        """END_TRANSACTION (oneway) for the half ``result`` names."""
        mq = result.message_queue
        addr = self.instance.broker_addr(mq.broker_name) or await self.instance.broker_addr_for(mq)
        _ip, _port, commit_log_offset = decode_message_id(result.offset_msg_id)
        header = EndTransactionRequestHeader(
            producer_group=self.group, tran_state_table_offset=result.queue_offset, commit_log_offset=commit_log_offset,
            commit_or_rollback=state.value, msg_id=result.msg_id, from_transaction_check=from_check,
            transaction_id=result.transaction_id or result.msg_id,
        )
        request = RemotingCommand.request(RequestCode.END_TRANSACTION, header.to_ext_fields(), oneway=True)
        try:
            await self.instance.remoting.invoke_oneway(addr, request, self.send_timeout)
        except RemotingError as exc:
            # the broker will check the half: nothing is lost
            log.warning("END_TRANSACTION %s for %s to %s failed: %s", state.name, result.msg_id, addr, exc)

    # -- check-backs -----------------------------------------------------------------------------------------

    async def answer_check(self, connection: Any, header: CheckTransactionStateRequestHeader, msg: MessageExt) -> None:
        if self.check_local is None:
            log.warning("group %s has no check_local: check of %s left unanswered", self.group, msg.msg_id)
            return
        state = await _call(self.check_local, msg, in_thread=self.check_in_thread)
        uniq = msg.properties.get("UNIQ_KEY") or header.msg_id or msg.msg_id
        end = EndTransactionRequestHeader(
            producer_group=self.group, tran_state_table_offset=header.tran_state_table_offset,
            commit_log_offset=msg.commit_log_offset, commit_or_rollback=state.value, msg_id=uniq,
            from_transaction_check=True, transaction_id=header.transaction_id or uniq,
        )
        request = RemotingCommand.request(RequestCode.END_TRANSACTION, end.to_ext_fields(), oneway=True)
        try:
            await connection.invoke_oneway(request)
        except RemotingError as exc:
            log.warning("END_TRANSACTION after a check of %s failed: %s", uniq, exc)
            return
        self.checks_answered += 1


def _checker_for(producers: dict[str, TransactionProducer]) -> Callable[[Any, RemotingCommand], Any]:
    async def on_check(connection: Any, request: RemotingCommand) -> None:
        try:
            header = CheckTransactionStateRequestHeader.from_ext_fields(request.ext_fields)
            [msg] = decode_messages(request.body_bytes())
        except (HeaderError, ValueError, KeyError) as exc:
            log.warning("bad CHECK_TRANSACTION_STATE from %s: %s", connection, exc)
            return None
        producer = producers.get(msg.properties.get(PGROUP, ""))
        if producer is None:
            log.warning("CHECK_TRANSACTION_STATE for group %s: no such transaction producer here", msg.properties.get(PGROUP))
            return None
        # answered from a task: a slow check_local does not hold up the connection
        connection.start_soon(producer.answer_check, connection, header, msg)
        return None

    return on_check


class BlockingTransactionProducer(_BlockingService):
    """:class:`TransactionProducer` for threads: ``execute_local`` runs in the calling thread, ``check_local`` in a
    worker thread."""

    def __init__(
        self,
        namesrv: str | Iterable[str] | None = None,
        group: str = "pyrmq_transaction_producer",
        *,
        check_local: Callable[[MessageExt], Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self.producer = TransactionProducer(namesrv, group, check_local=check_local, check_in_thread=True, **kwargs)
        super().__init__(self.producer)

    def send(self, msg: Message, **kwargs: Any) -> SendResult:
        return self._run(self.producer.send, msg, **kwargs)

    def send_in_transaction(
        self, msg: Message, execute_local: Callable[[Message, Any], Any], arg: Any = None, **kwargs: Any
    ) -> TransactionSendResult:
        if self._portal is None:
            raise ClientStateError("BlockingTransactionProducer is not started (use `with` or .start())")
        result = self._run(self.producer.send_half, msg, **kwargs)
        if result.status is SendStatus.SEND_OK:
            try:
                state = execute_local(msg, arg)
            except Exception:  # noqa: BLE001
                log.exception("local transaction %r failed: the state is UNKNOWN", execute_local)
                state = LocalTransactionState.UNKNOWN
            if not isinstance(state, LocalTransactionState):
                state = LocalTransactionState.UNKNOWN
        else:
            state = LocalTransactionState.ROLLBACK
        self._run(self.producer.end_transaction, result, state)
        return TransactionSendResult(result, state)


# -- admin: pending half messages -----------------------------------------------------------------------------------

HALF_TOPIC = TRANS_HALF_TOPIC
OP_TOPIC = TRANS_OP_HALF_TOPIC
SYS_GROUP = "CID_RMQ_SYS_TRANS"


@attrs.frozen
class PendingTransaction:
    """A half message not committed or rolled back yet (its latest check copy), as ``pyrmq admin transaction
    pending`` prints it."""

    broker_name: str
    topic: str
    queue_id: int
    keys: str
    tags: str
    msg_id: str
    producer_group: str
    check_times: int
    born_timestamp: int
    half_queue_offset: int
    commit_log_offset: int


async def _read_queue(instance: Any, addr: str, mq: Any, offset: int) -> list[MessageExt]:
    from pyrmq.client import api
    from pyrmq.client.message import PullStatus

    out: list[MessageExt] = []
    while True:
        # sysFlag 4 = the subscription travels with the pull (no consumer of this group is registered)
        try:
            result = await api.pull(instance, addr, mq, SYS_GROUP, offset, sys_flag=4, suspend_ms=0, subscription="*", timeout=10.0)
        except BrokerError as exc:
            if exc.code == ResponseCode.TOPIC_NOT_EXIST:  # a Java broker creates these topics on first use
                return out
            raise
        if result.status is not PullStatus.FOUND:
            return out
        out.extend(result.messages)
        if result.next_begin_offset <= offset:
            return out
        offset = result.next_begin_offset


async def pending_transactions(admin: Any, topic: str | None = None) -> list[PendingTransaction]:
    """Every pending half message of ``topic`` (all topics when None) on every master: the half queue read from
    CID_RMQ_SYS_TRANS's position, minus the halves the op queue closes, one entry per transaction (its latest copy).
    Read with plain pulls, so it works against a Java broker too."""
    from pyrmq.client import api
    from pyrmq.client.message import MessageQueue

    instance = admin.instance
    found: list[PendingTransaction] = []
    info = await admin.cluster_info()
    for broker_name, data in sorted(info.brokers.items()):
        addr = data.broker_addrs.get(MASTER_ID)
        if addr is None:
            continue
        half_mq, op_mq = MessageQueue(HALF_TOPIC, broker_name, 0), MessageQueue(OP_TOPIC, broker_name, 0)
        half_from = max(await api.query_consumer_offset(instance, addr, SYS_GROUP, half_mq), 0)
        op_from = max(await api.query_consumer_offset(instance, addr, SYS_GROUP, op_mq), 0)
        closed: set[int] = set()
        for op in await _read_queue(instance, addr, op_mq, op_from):
            if op.tags == "d":
                closed.update(int(p) for p in op.body.decode("ascii", "replace").split(",") if p.strip().isdigit())
        latest: dict[Any, MessageExt] = {}
        resolved: set[Any] = set()
        for half in await _read_queue(instance, addr, half_mq, half_from):
            # check copies keep the original's UNIQ_KEY (and, from pyrmq, its offset in preparedTransactionOffset)
            origin = half.properties.get("UNIQ_KEY") or half.prepared_transaction_offset or half.commit_log_offset
            if half.queue_offset in closed:
                resolved.add(origin)
                latest.pop(origin, None)
            elif origin not in resolved:
                latest[origin] = half
        for half in latest.values():
            props = half.properties
            if topic is not None and props.get("REAL_TOPIC") != topic:
                continue
            found.append(PendingTransaction(
                broker_name, props.get("REAL_TOPIC", ""), int(props.get("REAL_QID", "0") or 0), props.get("KEYS", ""),
                props.get("TAGS", ""), props.get("UNIQ_KEY", half.msg_id), props.get("PGROUP", ""),
                int(props.get("TRANSACTION_CHECK_TIMES", "0") or 0), half.born_timestamp, half.queue_offset,
                half.commit_log_offset,
            ))
    return sorted(found, key=lambda p: (p.broker_name, p.born_timestamp, p.half_queue_offset))  # oldest first
