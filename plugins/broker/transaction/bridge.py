"""What transactions write to the store (RocketMQ's TransactionalMessageBridge): the commit of a half to its real
topic, op records, check copies and the give-up copy.

A commit's two appends (the message, then its op record) happen in one synchronous step: no other request runs
between them, so in any prefix of the commit log at most one commit lacks its op record, and it is the prefix's last
record (recovery.py closes it).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import attrs

from pyrmq.kernel.types import TransactionState
from pyrmq.plugins.broker.transaction.names import (
    CHECK_TIMES,
    HALF_TOPIC,
    MAX_TIME_TOPIC,
    NOT_COMMITTED,
    OP_TAG,
    OP_TOPIC,
    REAL_QID,
    REAL_TOPIC,
    TAGS,
)
from pyrmq.plugins.broker.transaction.queues import Half, HalfOpQueues
from pyrmq.remoting.codes import ResponseCode
from pyrmq.store.format import TRANSACTION_COMMIT_TYPE, TRANSACTION_TYPE_MASK, MessageRecord, StoredMessage
from pyrmq.store.results import PutMessageResult, PutMessageStatus

if TYPE_CHECKING:  # pragma: no cover - types only
    from pyrmq.plugins.broker.core import BrokerContext

log = logging.getLogger("pyrmq.broker.transaction")


class TransactionError(Exception):
    """A resolution that cannot be done: ``code`` (a RocketMQ ResponseCode) and ``remark`` are the answer."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


class TransactionBridge:
    """The store writes of one broker's transactions, and what they count (admin, metrics, tests)."""

    def __init__(self, ctx: BrokerContext, queues: HalfOpQueues) -> None:
        self.ctx = ctx
        self.store = ctx.store
        self.queues = queues
        self.committed = 0
        self.rolled_back = 0
        #: real topic -> transactions committed / rolled back (rocketmq_commit/rollback_messages_total)
        self.commits_by_topic: dict[str, int] = {}
        self.rollbacks_by_topic: dict[str, int] = {}
        self.given_up = 0

    def put(self, record: MessageRecord, what: str) -> PutMessageResult:
        result = self.store.put_message(record)
        if result.status is not PutMessageStatus.PUT_OK:
            raise TransactionError(ResponseCode.SYSTEM_ERROR, f"{what} failed: {result.status.name} {result.remark}".rstrip())
        return result

    def op_record(self, half: Half) -> MessageRecord:
        now = self.store.clock()
        return MessageRecord(
            topic=OP_TOPIC, queue_id=0, body=str(half.queue_offset).encode("ascii"), properties={TAGS: OP_TAG},
            born_timestamp=now, born_host=self.ctx.store_host, store_host=self.ctx.store_host,
        )

    def close(self, half: Half, why: str) -> None:
        """Write ``half``'s op record and forget it."""
        self.put(self.op_record(half), why)
        self.queues.forget(half.origin)

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
            for name in NOT_COMMITTED:
                props.pop(name, None)
            record = msg.to_record(topic, queue_id, props, prepared_transaction_offset=msg.commit_log_offset)
            record = attrs.evolve(record, sys_flag=(record.sys_flag & ~TRANSACTION_TYPE_MASK) | TRANSACTION_COMMIT_TYPE)
            # both appends happen in this one synchronous step: nothing runs between them
            self.put(record, "commit")
            self.committed += 1
            self.commits_by_topic[topic] = self.commits_by_topic.get(topic, 0) + 1
        else:
            self.rolled_back += 1
            topic = msg.properties.get(REAL_TOPIC) or ""
            self.rollbacks_by_topic[topic] = self.rollbacks_by_topic.get(topic, 0) + 1
        self.close(half, "op record")

    def check_copy(self, half: Half) -> StoredMessage | None:
        """Re-append ``half`` with its check count raised (renewHalfMessage); the copy as stored, now the origin's
        latest half. None when the half is gone (retention): then it is forgotten."""
        msg = self.store.look_message_by_offset(half.phy, half.size)
        if msg is None:
            log.warning("half message at %d is gone (retention?): dropped", half.phy)
            self.queues.forget(half.origin)
            return None
        props = msg.properties
        props[CHECK_TIMES] = str(half.checks + 1)
        record = msg.to_record(HALF_TOPIC, 0, props, prepared_transaction_offset=half.origin)
        result = self.put(record, "check copy")
        self.queues.ingest()  # takes the copy in: it is now the origin's latest half
        append = result.append
        if append is None:  # PUT_OK always carries it
            return None
        return self.store.look_message_by_offset(append.wrote_offset, append.wrote_bytes)

    def give_up(self, half: Half) -> None:
        """Checked too often (or older than the commit log keeps): to TRANS_CHECK_MAX_TIME_TOPIC, closed by an op."""
        msg = self.store.look_message_by_offset(half.phy, half.size)
        if msg is not None:
            self.put(msg.to_record(MAX_TIME_TOPIC, 0, msg.properties), "give-up copy")
        log.info("transaction %s of group %s given up after %d checks", half.origin, half.group, half.checks)
        self.close(half, "op record")
        self.given_up += 1
