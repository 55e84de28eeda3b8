"""The send side of a transaction: the put interceptor that parks half messages (RocketMQ's
SendMessageProcessor#sendMessage with TRAN_MSG, TransactionalMessageBridge#parseHalfMessageInner)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from pyrmq.kernel.types import ORDER_REROUTE, PutContext, PutKind, Rejection
from pyrmq.plugins.broker.transaction.names import HALF_TOPIC, REAL_QID, REAL_TOPIC, TRAN_MSG, is_true
from pyrmq.plugins.broker.transaction.settings import TransactionSettings
from pyrmq.remoting.codes import ResponseCode
from pyrmq.store.format import TRANSACTION_NOT_TYPE, TRANSACTION_TYPE_MASK, MessageRecord

if TYPE_CHECKING:  # pragma: no cover - types only
    from pyrmq.kernel.settings import Settings
    from pyrmq.plugins.broker.core import BrokerContext


class HalfMessageInterceptor:
    """A send with ``TRAN_MSG=true`` is re-addressed to ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0 with ``REAL_TOPIC`` /
    ``REAL_QID`` and a plain sysFlag, so nothing delivers it. ``rejectTransactionMessage`` (read per half: it may
    change at runtime) answers NO_PERMISSION; a half in a batch or a send-back is refused."""

    name = "transaction"
    order = ORDER_REROUTE - 50
    trigger_properties = frozenset({TRAN_MSG})

    def __init__(self, ctx: BrokerContext, settings: Settings) -> None:
        self.ctx = ctx
        self.settings = settings

    def intercept(self, record: MessageRecord, context: PutContext) -> MessageRecord | Rejection:
        if not is_true(record.properties.get(TRAN_MSG)) or record.topic == HALF_TOPIC:
            return record  # not a half, or one an earlier interceptor parked already
        if self.settings(TransactionSettings).rejectTransactionMessage:
            return Rejection(ResponseCode.NO_PERMISSION,
                             f"the broker[{self.ctx.settings.brokerIP1}] sending transaction message is forbidden")
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
