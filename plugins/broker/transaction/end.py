"""END_TRANSACTION (37): the producer's verdict on a half (RocketMQ's EndTransactionProcessor).

COMMIT writes the message to its real topic and queue (sysFlag TRANSACTION_COMMIT, fresh store time,
``preparedTransactionOffset`` = the half's commit-log offset, properties minus ``REAL_TOPIC``, ``REAL_QID``,
``TRAN_MSG``) and then an op record; ROLLBACK writes only the op record; type 0 (UNKNOWN) is not answered, as in
Java. A request that names no half, a half of another producer group or the wrong queue offset gets SYSTEM_ERROR
with a remark naming what did not match, and changes nothing. Once any half of a transaction has an op record, a
further COMMIT / ROLLBACK for it (late, duplicate, or for an older copy) answers SUCCESS and writes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from pyrmq.kernel.types import TransactionState
from pyrmq.plugins.broker.transaction.bridge import TransactionBridge, TransactionError
from pyrmq.plugins.broker.transaction.names import HALF_TOPIC, PGROUP
from pyrmq.plugins.broker.transaction.queues import HalfOpQueues, origin_of
from pyrmq.remoting.codes import ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.errors import HeaderError
from pyrmq.remoting.headers import EndTransactionRequestHeader
from pyrmq.store.format import StoredMessage

if TYPE_CHECKING:  # pragma: no cover - types only
    from pyrmq.remoting.connection import Connection


class EndTransactionProcessor:
    """Checks what END_TRANSACTION names against the store, then resolves it through the bridge."""

    def __init__(self, queues: HalfOpQueues, bridge: TransactionBridge, *, is_master: Callable[[], bool],
                 ensure_loaded: Callable[[], None]) -> None:
        self.queues = queues
        self.bridge = bridge
        self.store = bridge.store
        self.is_master = is_master
        #: loads the pending set of this term if the check service has not yet (a request right after a start)
        self.ensure_loaded = ensure_loaded
        #: verdicts for transactions already resolved (answered SUCCESS, nothing written)
        self.duplicates = 0

    async def end_transaction(self, connection: Connection, request: RemotingCommand) -> RemotingCommand | None:
        try:
            header = EndTransactionRequestHeader.from_ext_fields(request.ext_fields)
        except (HeaderError, KeyError, ValueError, TypeError) as exc:
            if not self.is_master():
                return request.make_response(ResponseCode.SLAVE_NOT_AVAILABLE, "Can't process transaction on a slave broker")
            return request.make_response(ResponseCode.SYSTEM_ERROR, f"bad END_TRANSACTION header: {exc}")
        answer = self.answer(header)
        return None if answer is None else request.make_response(*answer)

    def answer(self, header: EndTransactionRequestHeader) -> tuple[int, str | None] | None:
        """What END_TRANSACTION answers (response code, remark); None for UNKNOWN, which is not answered. Also the
        way for a producer of another protocol (the gRPC endpoint's EndTransaction)."""
        if not self.is_master():
            return ResponseCode.SLAVE_NOT_AVAILABLE, "Can't process transaction on a slave broker"
        kind = header.commit_or_rollback
        if kind == TransactionState.UNKNOWN:
            return None  # Java answers nothing: the producer does not know yet, a check will ask again
        if kind not in (TransactionState.COMMIT, TransactionState.ROLLBACK):
            return ResponseCode.SYSTEM_ERROR, f"commitOrRollback {kind} is none of 0 (unknown), 8 (commit), 12 (rollback)"
        try:
            remark = self.end(header, TransactionState(kind))
        except TransactionError as exc:
            return exc.code, exc.remark
        return ResponseCode.SUCCESS, remark

    def end(self, header: EndTransactionRequestHeader, state: TransactionState) -> str | None:
        """Check what END_TRANSACTION names against the store, then resolve; raises TransactionError."""
        phy = header.commit_log_offset
        msg: StoredMessage | None
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
        self.ensure_loaded()
        self.queues.ingest()
        half = self.queues.pending.get(origin_of(msg, props))
        if half is None:
            self.duplicates += 1
            return "the transaction was already resolved: nothing written"
        self.bridge.resolve(half, state, msg)
        return None
