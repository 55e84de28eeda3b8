"""Transaction messages with check-back (spec 3.6, 3.7, 7.8; RocketMQ 4.9.8's TransactionalMessageServiceImpl).

A producer sends a *half* message (property ``TRAN_MSG=true``), runs its local transaction, then sends
END_TRANSACTION (37) with COMMIT or ROLLBACK. Consumers only ever see committed messages.

* **Send side** (a put interceptor, order 150): the half is re-addressed to ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0
  with ``REAL_TOPIC`` / ``REAL_QID`` and a plain sysFlag, so nothing delivers it. ``rejectTransactionMessage``
  answers NO_PERMISSION.
* **END_TRANSACTION**: COMMIT writes the message to its real topic and queue (sysFlag TRANSACTION_COMMIT, fresh
  store time, ``preparedTransactionOffset`` = the half's commit-log offset, properties minus ``REAL_TOPIC``,
  ``REAL_QID``, ``TRAN_MSG``) and then an *op record* in ``RMQ_SYS_TRANS_OP_HALF_TOPIC`` (tag ``d``, body = the
  half's queue offset in decimal); ROLLBACK writes only the op record; type 0 (UNKNOWN) is not answered, as in Java.
  A request that names no half, a half of another producer group or the wrong queue offset gets SYSTEM_ERROR with a
  remark naming what did not match, and changes nothing.
* **Check service**: every ``transactionCheckInterval`` a half older than ``transactionTimeOut`` (or its
  ``CHECK_IMMUNITY_TIME_IN_SECONDS``) is re-appended as a *check copy* with ``TRANSACTION_CHECK_TIMES`` counting
  1, 2, ... and the copy goes to the transaction-check hook (``pyrmq_check_transaction``); the shipped answer
  (:func:`pyrmq_check_transaction` below) sends CHECK_TRANSACTION_STATE (39) oneway to one live connection of the
  producer group, round-robin. After ``transactionCheckMax`` checks, or past ``fileReservedTime``, the half is given
  up: copied to ``TRANS_CHECK_MAX_TIME_TOPIC`` (1 queue, consumable) and closed with an op record.
* **No double commit** (docs/decisions.md): every copy carries its original half's commit-log offset in
  ``preparedTransactionOffset``; a transaction is one *origin*, and once any half of an origin has an op record a
  further COMMIT / ROLLBACK for it (late, duplicate, or for an older copy) answers SUCCESS and writes nothing.
* **Durable positions**: the half and op queues are read from the offsets of group ``CID_RMQ_SYS_TRANS``
  (consumerOffset.json, written after each pass); the op records themselves say what is resolved, so a restart
  (even after SIGKILL, with older positions) neither re-checks resolved halves nor loses pending ones.
* **A kill between a commit and its op record** (RocketMQ 4.x would check the half back and commit it again): the
  two appends are one synchronous step, so after such a kill the commit is the last record of the recovered commit
  log. After a crash recovery the service looks at that record, and when it is the commit of a half still pending
  it writes the missing op record instead of checking the half back.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import attrs
import trio
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from pyrmq.kernel.hookspecs import hookimpl
from pyrmq.kernel.kernel import StateKey
from pyrmq.kernel.settings import at_least, setting
from pyrmq.kernel.types import ORDER_REROUTE, PutContext, PutKind, Rejection, TransactionState
from pyrmq.plugins.broker.metrics import broker_labels
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.errors import HeaderError, RemotingError
from pyrmq.remoting.headers import CheckTransactionStateRequestHeader, EndTransactionRequestHeader
from pyrmq.store.format import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_TYPE_MASK,
    MessageRecord,
    StoredMessage,
    decode_message,
)
from pyrmq.store.results import PutMessageStatus

log = logging.getLogger("pyrmq.broker.transaction")

HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
#: the consumer group whose offsets are the check service's read positions (Java's TransactionalMessageUtil)
SYS_GROUP = "CID_RMQ_SYS_TRANS"
OP_TAG = "d"

TRAN_MSG = "TRAN_MSG"
PGROUP = "PGROUP"
REAL_TOPIC = "REAL_TOPIC"
REAL_QID = "REAL_QID"
CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
CHECK_IMMUNITY = "CHECK_IMMUNITY_TIME_IN_SECONDS"
UNIQ_KEY = "UNIQ_KEY"
TAGS = "TAGS"
#: properties a committed message loses (EndTransactionProcessor#endMessageTransaction)
_NOT_COMMITTED = (REAL_TOPIC, REAL_QID, TRAN_MSG)
_PERM_RW = 6
_READ_BATCH = 32


def origin_of(msg: StoredMessage, props: dict[str, str]) -> int:
    """The transaction a half belongs to: its own commit-log offset, or for a check copy (it has
    TRANSACTION_CHECK_TIMES) the original's, kept in preparedTransactionOffset."""
    return msg.prepared_transaction_offset if CHECK_TIMES in props else msg.commit_log_offset


def is_true(text: str | None) -> bool:
    """Java's Boolean.parseBoolean."""
    return text is not None and text.lower() == "true"


@attrs.define(slots=True)
class Half:
    """The latest half (original or check copy) of a pending transaction."""

    origin: int  #: commit-log offset of the original half: the transaction's identity
    queue_offset: int
    phy: int
    size: int
    born: int
    stored: int
    checks: int
    group: str
    immunity_ms: int | None
    topic: str = ""  #: the transaction's real topic (rocketmq_half_messages' ``topic`` label)


class TransactionError(Exception):
    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


class TransactionService:
    """The half-message interceptor, END_TRANSACTION, the op bookkeeping and the check service of one broker."""

    name = "transaction"
    order = ORDER_REROUTE - 50
    trigger_properties = frozenset({TRAN_MSG})

    def __init__(self, ctx: Any, kernel: Any) -> None:
        self.ctx = ctx
        self.kernel = kernel
        self.store = ctx.store
        s = ctx.settings
        t = kernel.settings(TransactionSettings)
        self.check_interval_s = t.transactionCheckInterval / 1000
        self.timeout_ms = t.transactionTimeOut
        self.check_max = t.transactionCheckMax
        self.reserved_ms = s.fileReservedTime * 3600 * 1000
        self.reject = t.rejectTransactionMessage
        self.slave = s.brokerRole == "SLAVE"
        #: origin -> its latest half, for every transaction not resolved yet
        self.pending: dict[int, Half] = {}
        #: queue offset of a pending latest half -> its origin
        self._origin_of: dict[int, int] = {}
        #: half queue offsets with an op record, read before their half was
        self._op_ahead: set[int] = set()
        #: (op queue offset, half queue offset) of op records whose half may still be at or above the half position
        self._op_log: list[tuple[int, int]] = []
        self.half_read = self.op_read = 0
        self.half_pos = self.op_pos = 0
        self._loaded = False
        self._rr = 0
        self._wake = trio.Event()
        #: counters since start (admin, tests, bench)
        self.checks_sent = 0
        self.committed = 0
        self.rolled_back = 0
        #: real topic -> transactions committed / rolled back (rocketmq_commit/rollback_messages_total)
        self.commits_by_topic: dict[str, int] = {}
        self.rollbacks_by_topic: dict[str, int] = {}
        self.given_up = 0
        self.duplicates = 0

    # -- send side (the put interceptor) ----------------------------------------------------------------------

    def intercept(self, record: MessageRecord, context: PutContext) -> MessageRecord | Rejection:
        if not is_true(record.properties.get(TRAN_MSG)) or record.topic == HALF_TOPIC:
            return record  # not a half, or one an earlier interceptor parked already
        if self.reject:
            return Rejection(ResponseCode.NO_PERMISSION, f"the broker[{self.ctx.settings.brokerIP1}] sending transaction message is forbidden")
        if context.kind is not PutKind.SEND:
            return Rejection(ResponseCode.MESSAGE_ILLEGAL, f"a transaction (half) message cannot be sent by {context.kind.value}")
        context.scheduled_by = self.name  # a half is never delayed: its commit is what gets delivered
        properties = dict(record.properties)
        properties[REAL_TOPIC] = record.topic
        properties[REAL_QID] = str(record.queue_id)
        return attrs.evolve(
            record, topic=HALF_TOPIC, queue_id=0, properties=properties, properties_bytes=None,
            sys_flag=(record.sys_flag & ~TRANSACTION_TYPE_MASK) | TRANSACTION_NOT_TYPE,
        )

    # -- reading the half and op queues -----------------------------------------------------------------------

    def load(self) -> None:
        """Read positions from CID_RMQ_SYS_TRANS's offsets and rebuild the pending set from the queues."""
        offsets = self.ctx.offsets
        half = offsets.query(SYS_GROUP, HALF_TOPIC, 0)
        op = offsets.query(SYS_GROUP, OP_TOPIC, 0)
        self.half_read = self.half_pos = max(half, self.store.get_min_offset_in_queue(HALF_TOPIC, 0), 0)
        self.op_read = self.op_pos = max(op, self.store.get_min_offset_in_queue(OP_TOPIC, 0), 0)
        self._loaded = True
        self.ingest()
        if self.pending and not self.slave:
            self._close_commit_cut_by_crash()
        if self.pending:
            log.info("transactions: %d pending half messages from half offset %d, op offset %d",
                     len(self.pending), self.half_pos, self.op_pos)

    def _last_record(self) -> StoredMessage | None:
        """The last record of a commit log just recovered from a crash (walked from the start of the last segment
        that holds one, never before the recovery's verifying scan), or None."""
        store = self.store
        report = getattr(store, "recovery_report", None)
        if report is None or not report.abnormal:
            return None
        end = report.max_offset
        segment = store.config.mapped_file_size_commit_log
        first = (end - 1) // segment * segment if end > 0 else 0
        while first >= max(report.scan_start - segment, 0):
            pos, last = max(first, report.scan_start), None
            while pos < min(end, first + segment):
                size = store.commit_log.record_size_at(pos)
                if size is None:
                    break  # the blank at the end of a segment
                last, pos = pos, pos + size
            if last is not None:
                return store.look_message_by_offset(last)
            first -= segment
        return None

    def _close_commit_cut_by_crash(self) -> None:
        """Write the op record a kill cut off after its half's commit (see the module notes)."""
        try:
            last = self._last_record()
        except Exception:  # noqa: BLE001 - a damaged tail decodes as garbage: then nothing was committed there
            log.warning("transactions: the last record of the recovered commit log does not decode", exc_info=True)
            return
        if last is None or last.sys_flag & TRANSACTION_TYPE_MASK != TRANSACTION_COMMIT_TYPE:
            return
        named = self.store.look_message_by_offset(last.prepared_transaction_offset)
        if named is None or named.topic != HALF_TOPIC or named.properties.get(REAL_TOPIC) != last.topic \
                or named.properties.get(UNIQ_KEY) != last.properties.get(UNIQ_KEY):
            return  # not the commit of that half
        half = self.pending.get(origin_of(named, named.properties))
        if half is None:
            return
        log.warning("transactions: the commit at %d of half %d was the last record before the crash, its op record "
                    "was not written: writing it now (the half is not checked back)", last.commit_log_offset, half.origin)
        self._put(self._op_record(half), "op record")
        self._forget(half.origin)

    def _records(self, topic: str, offset: int):
        """(queue offset, record view) of ``topic`` queue 0 from ``offset`` to its end."""
        store = self.store
        while True:
            result = store.get_message(SYS_GROUP, topic, 0, offset, _READ_BATCH, None)
            for queue_offset, view in zip(result.queue_offsets, result.buffers):
                yield queue_offset, view
            if result.next_begin_offset <= offset:
                return
            offset = result.next_begin_offset
            if offset >= result.max_offset:
                return

    def ingest(self) -> None:
        """Take in every half and op record appended since the last call (synchronous, no await)."""
        if not self._loaded:
            return
        end = self.store.get_max_offset_in_queue(HALF_TOPIC, 0)
        if self.half_read < end:
            for queue_offset, view in self._records(HALF_TOPIC, self.half_read):
                self._take_half(queue_offset, view)
            self.half_read = end
            if self._op_ahead:
                self._op_ahead = {q for q in self._op_ahead if q >= self.half_read}
        end = self.store.get_max_offset_in_queue(OP_TOPIC, 0)
        if self.op_read < end:
            for queue_offset, view in self._records(OP_TOPIC, self.op_read):
                self._take_op(queue_offset, view)
            self.op_read = end

    def _take_half(self, queue_offset: int, view: memoryview) -> None:
        try:
            msg = decode_message(view)[0]
        except Exception as exc:  # noqa: BLE001 - a damaged record is skipped, not fatal
            log.warning("half message at queue offset %d does not decode: %s", queue_offset, exc)
            return
        props = msg.properties
        origin = origin_of(msg, props)
        if queue_offset in self._op_ahead:
            self._op_ahead.discard(queue_offset)
            self._forget(origin)
            return
        try:
            checks = int(props.get(CHECK_TIMES) or 0)
        except ValueError:
            checks = 0
        immunity = props.get(CHECK_IMMUNITY)
        try:
            immunity_ms = int(immunity) * 1000 if immunity else None
        except ValueError:
            immunity_ms = None
        self._forget(origin)
        self.pending[origin] = Half(
            origin, queue_offset, msg.commit_log_offset, msg.total_size, msg.born_timestamp, msg.store_timestamp,
            checks, props.get(PGROUP, ""), immunity_ms, props.get(REAL_TOPIC, ""),
        )
        self._origin_of[queue_offset] = origin

    def _take_op(self, op_offset: int, view: memoryview) -> None:
        try:
            msg = decode_message(view)[0]
            text = msg.body.decode("ascii")
        except Exception as exc:  # noqa: BLE001
            log.warning("op record at queue offset %d does not decode: %s", op_offset, exc)
            return
        if msg.properties.get(TAGS) != OP_TAG:
            return
        # 5.x packs several half offsets into one op body
        for part in text.split(","):
            try:
                half_offset = int(part)
            except ValueError:
                continue
            self._op_log.append((op_offset, half_offset))
            origin = self._origin_of.get(half_offset)
            if origin is not None:
                self._forget(origin)
            elif half_offset >= self.half_read:
                self._op_ahead.add(half_offset)

    def _forget(self, origin: int) -> None:
        half = self.pending.pop(origin, None)
        if half is not None:
            self._origin_of.pop(half.queue_offset, None)

    def save_positions(self) -> None:
        """Move CID_RMQ_SYS_TRANS's offsets to the oldest half still pending and the oldest op record it needs."""
        half_pos = min((h.queue_offset for h in self.pending.values()), default=self.half_read)
        self._op_log = [(o, h) for (o, h) in self._op_log if h >= half_pos]
        op_pos = min((o for o, _ in self._op_log), default=self.op_read)
        if (half_pos, op_pos) != (self.half_pos, self.op_pos):
            self.half_pos, self.op_pos = half_pos, op_pos
            self.ctx.offsets.commit(SYS_GROUP, HALF_TOPIC, 0, half_pos)
            self.ctx.offsets.commit(SYS_GROUP, OP_TOPIC, 0, op_pos)

    # -- writing ----------------------------------------------------------------------------------------------

    def _put(self, record: MessageRecord, what: str) -> Any:
        result = self.store.put_message(record)
        if result.status is not PutMessageStatus.PUT_OK:
            raise TransactionError(ResponseCode.SYSTEM_ERROR, f"{what} failed: {result.status.name} {result.remark}".rstrip())
        return result

    def _op_record(self, half: Half) -> MessageRecord:
        now = self.store.clock()
        return MessageRecord(
            topic=OP_TOPIC, queue_id=0, body=str(half.queue_offset).encode("ascii"), properties={TAGS: OP_TAG},
            born_timestamp=now, born_host=self.ctx.store_host, store_host=self.ctx.store_host,
        )

    def resolve(self, half: Half, state: TransactionState, msg: StoredMessage | None = None) -> None:
        """Commit (the message to its real topic, then the op record) or roll back (the op record) ``half``'s
        transaction; ``msg`` is the half the verdict named (the latest copy when None)."""
        if msg is None:
            msg = self.store.look_message_by_offset(half.phy, half.size)
            if msg is None:
                raise TransactionError(ResponseCode.SYSTEM_ERROR, f"the half message at {half.phy} is gone")
        if state is TransactionState.COMMIT:
            props = msg.properties
            topic = props.get(REAL_TOPIC)
            try:
                queue_id = int(props.get(REAL_QID, ""))
            except ValueError:
                queue_id = -1
            if not topic or queue_id < 0:
                raise TransactionError(ResponseCode.SYSTEM_ERROR, f"the half message at {msg.commit_log_offset} has no REAL_TOPIC/REAL_QID")
            for name in _NOT_COMMITTED:
                props.pop(name, None)
            record = msg.to_record(topic, queue_id, props, prepared_transaction_offset=msg.commit_log_offset)
            record = attrs.evolve(record, sys_flag=(record.sys_flag & ~TRANSACTION_TYPE_MASK) | TRANSACTION_COMMIT_TYPE)
            # both appends happen in this one synchronous step: nothing runs between them
            self._put(record, "commit")
            self.committed += 1
            self.commits_by_topic[topic] = self.commits_by_topic.get(topic, 0) + 1
        else:
            self.rolled_back += 1
            topic = msg.properties.get(REAL_TOPIC) or ""
            self.rollbacks_by_topic[topic] = self.rollbacks_by_topic.get(topic, 0) + 1
        self._put(self._op_record(half), "op record")
        self._forget(half.origin)

    # -- END_TRANSACTION --------------------------------------------------------------------------------------

    async def end_transaction(self, connection: Any, request: RemotingCommand) -> RemotingCommand | None:
        if self.slave:
            return request.make_response(ResponseCode.SLAVE_NOT_AVAILABLE, "Can't process transaction on a slave broker")
        try:
            header = EndTransactionRequestHeader.from_ext_fields(request.ext_fields)
        except (HeaderError, KeyError, ValueError, TypeError) as exc:
            return request.make_response(ResponseCode.SYSTEM_ERROR, f"bad END_TRANSACTION header: {exc}")
        kind = header.commit_or_rollback
        if kind == TransactionState.UNKNOWN:
            return None  # Java answers nothing: the producer does not know yet, a check will ask again
        if kind not in (TransactionState.COMMIT, TransactionState.ROLLBACK):
            return request.make_response(
                ResponseCode.SYSTEM_ERROR, f"commitOrRollback {kind} is none of 0 (unknown), 8 (commit), 12 (rollback)")
        try:
            remark = self.end(header, TransactionState(kind))
        except TransactionError as exc:
            return request.make_response(exc.code, exc.remark)
        return request.make_response(ResponseCode.SUCCESS, remark)

    def end(self, header: EndTransactionRequestHeader, state: TransactionState) -> str | None:
        """Check what END_TRANSACTION names against the store, then resolve; raises TransactionError."""
        phy = header.commit_log_offset
        try:
            msg = self.store.look_message_by_offset(phy)
        except Exception:  # noqa: BLE001 - an offset inside a record decodes as garbage
            msg = None
        if msg is None or msg.commit_log_offset != phy:
            raise TransactionError(ResponseCode.SYSTEM_ERROR, f"Find prepared transaction message failed: no message at commit log offset {phy}")
        if msg.topic != HALF_TOPIC:
            raise TransactionError(
                ResponseCode.SYSTEM_ERROR,
                f"the message at commit log offset {phy} is not a half message: its topic is {msg.topic}, not {HALF_TOPIC}")
        props = msg.properties
        group = props.get(PGROUP)
        if group != header.producer_group:
            raise TransactionError(
                ResponseCode.SYSTEM_ERROR,
                f"The producer group wrong: the half message at commit log offset {phy} belongs to producer group "
                f"{group}, not {header.producer_group}")
        if msg.queue_offset != header.tran_state_table_offset:
            raise TransactionError(
                ResponseCode.SYSTEM_ERROR,
                f"The transaction state table offset wrong: the half message at commit log offset {phy} has queue "
                f"offset {msg.queue_offset}, not {header.tran_state_table_offset}")
        if not self._loaded:
            self.load()  # a request before this plugin's service started (the store is up: it answered above)
        self.ingest()
        half = self.pending.get(origin_of(msg, props))
        if half is None:
            self.duplicates += 1
            return "the transaction was already resolved: nothing written"
        self.resolve(half, state, msg)
        return None

    # -- the check service ------------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        if not self._loaded:
            self.load()
        task_status.started()
        if self.slave:
            return
        while True:
            with trio.move_on_after(self.check_interval_s):
                await self._wake.wait()
            self._wake = trio.Event()
            try:
                await self.check_pass()
            except TransactionError as exc:
                log.warning("transaction check pass stopped: %s", exc.remark)
            self.save_positions()
            await trio.to_thread.run_sync(self.ctx.offsets.persist_if_dirty)

    def check_now(self) -> None:
        """Run a check pass at once (tests, admin)."""
        self._wake.set()

    async def check_pass(self) -> int:
        """Check every half due; returns how many were checked or given up."""
        self.ingest()
        start = self.store.clock()
        done = 0
        for half in sorted(self.pending.values(), key=lambda h: h.queue_offset):
            await trio.lowlevel.checkpoint()  # a pass over many halves must not starve the broker's requests
            if self.pending.get(half.origin) is not half or half.stored > start:
                continue  # resolved meanwhile, or appended after the pass began
            now = self.store.clock()
            age = now - half.born
            # due transactionTimeOut after its birth, and a copy transactionTimeOut after the check that made it:
            # a producer just asked has that long to answer before it is asked again
            since = age if half.checks == 0 else now - half.stored
            if since < (half.immunity_ms if half.immunity_ms is not None else self.timeout_ms):
                continue
            if half.checks >= self.check_max or age > self.reserved_ms:
                self.give_up(half)
                done += 1
                continue
            copy = self._check_copy(half)
            if copy is None:
                continue
            done += 1
            verdict = await self.kernel.hooks.check_transaction(self.kernel, copy, half.checks + 1)
            current = self.pending.get(half.origin)
            if verdict is not TransactionState.UNKNOWN and current is not None:
                self.resolve(current, verdict)
        return done

    def _check_copy(self, half: Half) -> StoredMessage | None:
        """Re-append ``half`` with its check count raised; the copy, as stored."""
        msg = self.store.look_message_by_offset(half.phy, half.size)
        if msg is None:
            log.warning("half message at %d is gone (retention?): dropped", half.phy)
            self._forget(half.origin)
            return None
        props = msg.properties
        props[CHECK_TIMES] = str(half.checks + 1)
        record = msg.to_record(HALF_TOPIC, 0, props, prepared_transaction_offset=half.origin)
        result = self._put(record, "check copy")
        self.ingest()  # takes the copy in: it is now the origin's latest half
        copy = self.store.look_message_by_offset(result.append.wrote_offset, result.append.wrote_bytes)
        return copy

    def give_up(self, half: Half) -> None:
        """Checked too often (or older than the commit log keeps): to TRANS_CHECK_MAX_TIME_TOPIC, closed by an op."""
        msg = self.store.look_message_by_offset(half.phy, half.size)
        if msg is not None:
            self._put(msg.to_record(MAX_TIME_TOPIC, 0, msg.properties), "give-up copy")
        log.info("transaction %s of group %s given up after %d checks", half.origin, half.group, half.checks)
        self._put(self._op_record(half), "op record")
        self._forget(half.origin)
        self.given_up += 1

    async def ask_producer(self, message: StoredMessage) -> bool:
        """CHECK_TRANSACTION_STATE oneway to a live connection of the half's producer group, round-robin; False
        when the group has none."""
        props = message.properties
        group = props.get(PGROUP, "")
        channels = [c for c in self.ctx.producers.groups.get(group, {}) if not getattr(c, "closed", False)]
        if not channels:
            log.debug("no live producer of group %s to check transaction %s", group, message.msg_id)
            return False
        connection = channels[self._rr % len(channels)]
        self._rr += 1
        uniq = props.get(UNIQ_KEY)
        header = CheckTransactionStateRequestHeader(
            tran_state_table_offset=message.queue_offset, commit_log_offset=message.commit_log_offset,
            msg_id=uniq, transaction_id=uniq, offset_msg_id=message.msg_id,
        )
        real_topic = props.get(REAL_TOPIC, message.topic)
        try:
            real_qid = int(props.get(REAL_QID, "0"))
        except ValueError:
            real_qid = 0
        # the body is the message under its real topic and queue, its total size recomputed (the C++ client walks by it)
        body = attrs.evolve(message, topic=real_topic, topic_bytes=real_topic.encode("utf-8"), queue_id=real_qid).encode()
        request = RemotingCommand.request(RequestCode.CHECK_TRANSACTION_STATE, header.to_ext_fields(), body, oneway=True)
        try:
            with trio.move_on_after(3.0):
                await connection.invoke_oneway(request)
        except RemotingError as exc:
            log.debug("check to %s failed: %s", connection, exc)
            return False
        self.checks_sent += 1
        return True


class TransactionCollector:
    """rocketmq_commit_messages, rocketmq_rollback_messages and rocketmq_half_messages (5.x's names), read when scraped."""

    def __init__(self, service: Any) -> None:
        self.service = service

    def describe(self) -> list[Metric]:
        return []  # computed at scrape time

    def collect(self) -> Iterator[Metric]:
        base, common = broker_labels(self.service.ctx.settings)
        service = self.service
        commits = CounterMetricFamily(
            "rocketmq_commit_messages", "Transactions committed, by topic.", labels=base + ["topic"])
        for topic, n in list(service.commits_by_topic.items()):
            commits.add_metric(common + [topic], n)
        rollbacks = CounterMetricFamily(
            "rocketmq_rollback_messages", "Transactions rolled back, by topic.", labels=base + ["topic"])
        for topic, n in list(service.rollbacks_by_topic.items()):
            rollbacks.add_metric(common + [topic], n)
        service.ingest()  # halves sent since the last check pass or END_TRANSACTION (synchronous, a no-op before load)
        pending: dict[str, int] = {}
        for half in list(service.pending.values()):
            pending[half.topic] = pending.get(half.topic, 0) + 1
        # a topic that had transactions stays at 0 once they are resolved (5.x keeps its count too)
        for topic in (*service.commits_by_topic, *service.rollbacks_by_topic):
            pending.setdefault(topic, 0)
        half = GaugeMetricFamily(
            "rocketmq_half_messages", "Half messages whose transaction is not resolved yet, by topic.",
            labels=base + ["topic"])
        for topic, n in sorted(pending.items()):
            half.add_metric(common + [topic], n)
        yield from (commits, rollbacks, half)



@attrs.frozen
class TransactionSettings:
    """The transaction plugin's broker.conf keys (RocketMQ 4.9.8's names and defaults)."""

    rejectTransactionMessage: bool = setting(False, runtime=True, help="refuse half messages (NO_PERMISSION)")
    transactionCheckInterval: int = setting(60_000, check=at_least(1), help="ms between check passes")
    transactionTimeOut: int = setting(6000, check=at_least(0), help="ms before a half is checked first")
    transactionCheckMax: int = setting(15, check=at_least(1), help="checks before a half is given up")


TRANSACTIONS = StateKey[TransactionService]("broker.transaction")


# -- hooks -------------------------------------------------------------------------------------------------------


@hookimpl(trylast=True)
def pyrmq_configure(kernel: Any) -> None:
    from pyrmq.plugins.broker.core import BROKER

    ctx = kernel.state.find(BROKER)
    if ctx is None:
        return
    for topic in (HALF_TOPIC, OP_TOPIC, MAX_TIME_TOPIC):
        ctx.topics.create_system_topic(topic, 1, _PERM_RW)
    kernel.state.put(TRANSACTIONS, TransactionService(ctx, kernel))


@hookimpl(trylast=True)
def pyrmq_register_settings() -> dict[str, type]:
    return {"broker": TransactionSettings}


@hookimpl(trylast=True)
def pyrmq_register_put_interceptors(kernel: Any) -> list[Any] | None:
    service = kernel.state.find(TRANSACTIONS)
    return None if service is None else [service]


@hookimpl(trylast=True)
def pyrmq_register_metric_collectors(kernel: Any, role: str) -> list[Any] | None:
    service = kernel.state.find(TRANSACTIONS)
    return None if service is None or role != "broker" else [TransactionCollector(service)]


@hookimpl(trylast=True)
def pyrmq_register_processors(kernel: Any, role: str) -> dict[int, Any] | None:
    service = kernel.state.find(TRANSACTIONS)
    if role != "broker" or service is None:
        return None
    return {RequestCode.END_TRANSACTION: service.end_transaction}


@hookimpl(trylast=True)
async def pyrmq_serve(kernel: Any, nursery: trio.Nursery) -> None:
    service = kernel.state.find(TRANSACTIONS)
    if service is not None:
        await nursery.start(service.run)


@hookimpl(trylast=True)
async def pyrmq_check_transaction(kernel: Any, message: Any, check_times: int) -> TransactionState | None:
    # the default verdict: ask the producer group; its answer comes back as END_TRANSACTION
    service = kernel.state.find(TRANSACTIONS)
    if service is None:
        return None
    await service.ask_producer(message)
    return TransactionState.UNKNOWN


@hookimpl
async def pyrmq_unconfigure(kernel: Any) -> None:
    # before the core (trylast) persists offsets and closes the store
    service = kernel.state.find(TRANSACTIONS)
    if service is not None and service._loaded:
        service.save_positions()
