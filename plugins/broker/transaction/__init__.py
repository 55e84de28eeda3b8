"""Transaction messages with check-back (spec 3.6, 3.7, 7.8; RocketMQ 4.9.8's broker/transaction/).

A producer sends a *half* message (property ``TRAN_MSG=true``), runs its local transaction, then sends
END_TRANSACTION (37) with COMMIT or ROLLBACK. Consumers only ever see committed messages. One module a job:

- ``names``: the topics, group and properties transactions own (RocketMQ's TransactionalMessageUtil);
- ``settings``: :class:`TransactionSettings` (transactionCheckInterval, transactionTimeOut, ...);
- ``interceptor``: the put interceptor (order 150) that parks a half under ``RMQ_SYS_TRANS_HALF_TOPIC``;
- ``queues``: reading the half and op queues into the pending set (one *origin* per transaction);
- ``bridge``: the writes: commit, op record, check copy, give-up copy (TransactionalMessageBridge);
- ``end``: END_TRANSACTION (EndTransactionProcessor);
- ``check``: the check service and the default ``pyrmq_check_transaction`` (ask the producer group);
- ``recovery``: the read positions (loaded when the broker becomes master, saved once confirmed) and the commit a
  kill cut from its op record;
- ``metrics``: :class:`TransactionCollector` (rocketmq_commit/rollback/half_messages);
- ``plugin``: :class:`Transactions`, the parts wired together as a plugin object (its methods are the hook
  implementations), following the broker's role: the check service runs only on the master.

This module is the plugin bundles list (``pyrmq.plugins.broker.transaction``): its ``pyrmq_configure`` creates the
system topics and registers a :class:`Transactions` as plugin ``"transaction"``. docs/transactions.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyrmq.kernel.hookspecs import hookimpl
from pyrmq.plugins.broker.transaction.bridge import TransactionError
from pyrmq.plugins.broker.transaction.names import (
    HALF_TOPIC,
    MAX_TIME_TOPIC,
    OP_TOPIC,
    PERM_RW,
    SYS_GROUP,
    SYSTEM_TOPICS,
)
from pyrmq.plugins.broker.transaction.plugin import Transactions
from pyrmq.plugins.broker.transaction.queues import Half
from pyrmq.plugins.broker.transaction.settings import TransactionSettings

if TYPE_CHECKING:  # pragma: no cover - types only
    from pyrmq.kernel.kernel import Kernel
    from pyrmq.plugins.broker.core import BrokerContext

__all__ = [
    "HALF_TOPIC", "MAX_TIME_TOPIC", "OP_TOPIC", "SYS_GROUP", "Half", "TransactionError", "TransactionSettings",
    "Transactions",
]


@hookimpl(trylast=True)
def pyrmq_register_settings() -> dict[str, type]:
    return {"broker": TransactionSettings}


@hookimpl(trylast=True)
def pyrmq_configure(kernel: Kernel) -> None:
    from pyrmq.plugins.broker.core import register_feature

    def make(ctx: BrokerContext) -> Transactions:
        for topic in SYSTEM_TOPICS:
            ctx.topics.create_system_topic(topic, 1, PERM_RW)
        return Transactions(kernel, ctx)

    register_feature(kernel, "transaction", make)
