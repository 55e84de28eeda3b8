"""pyrmq.client: the Python client library for pyrmq and any RocketMQ 4.x broker.

Two faces over one trio implementation:

* async (trio): :class:`Producer`, :class:`PushConsumer`, :class:`PullConsumer`, :class:`SimpleConsumer` (RocketMQ
  5.x's POP consumption), :class:`Admin` - ``async with Producer(namesrv) as p: await p.send(Message("T", b"hi"))``;
* blocking (plain threads and scripts): :class:`BlockingProducer`, :class:`BlockingPushConsumer`,
  :class:`BlockingPullConsumer`, :class:`BlockingSimpleConsumer`, :class:`BlockingAdmin`, which run the same objects
  on a background trio thread.

See docs/client.md for a guide.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Names are imported on first use (PEP 562): `pyrmq` loads pyrmq.client.commands for every command line, and that
# must not pay for trio and the whole library.
_EXPORTS = {
    "Admin": "admin",
    "BlockingAdmin": "blocking",
    "BlockingProducer": "blocking",
    "BlockingPullConsumer": "blocking",
    "BlockingPushConsumer": "blocking",
    "BlockingSimpleConsumer": "blocking",
    "BlockingTransactionProducer": "transaction",
    "BrokerError": "errors",
    "ClientConfig": "config",
    "ClientError": "errors",
    "ClientStateError": "errors",
    "ConsumeFrom": "consumer",
    "ConsumeResult": "consumer",
    "InvalidMessageError": "errors",
    "InvalidSubscriptionError": "errors",
    "LocalTransactionState": "transaction",
    "Message": "message",
    "MessageExt": "message",
    "MessageModel": "consumer",
    "MessageQueue": "message",
    "MessageSelector": "message_selector",
    "NameServerUnreachable": "errors",
    "Producer": "producer",
    "PullConsumer": "pull_consumer",
    "PullResult": "message",
    "PopMessage": "pop_api",
    "PullStatus": "message",
    "PushConsumer": "push_consumer",
    "SendContext": "producer",
    "SendFailedError": "errors",
    "SendFuture": "producer",
    "SendHook": "producer",
    "SendResult": "message",
    "SendStatus": "message",
    "SimpleConsumer": "simple_consumer",
    "Subscription": "consumer",
    "TopicNotFoundError": "errors",
    "TransactionProducer": "transaction",
    "TransactionSendResult": "transaction",
    "select_by_hash": "selectors",
    "select_by_random": "selectors",
}

if TYPE_CHECKING:  # pragma: no cover
    from pyrmq.client.admin import Admin
    from pyrmq.client.blocking import (
        BlockingAdmin,
        BlockingProducer,
        BlockingPullConsumer,
        BlockingPushConsumer,
        BlockingSimpleConsumer,
    )
    from pyrmq.client.config import ClientConfig
    from pyrmq.client.consumer import ConsumeFrom, ConsumeResult, MessageModel, Subscription
    from pyrmq.client.errors import (
        BrokerError,
        ClientError,
        ClientStateError,
        InvalidMessageError,
        NameServerUnreachable,
        SendFailedError,
        TopicNotFoundError,
    )
    from pyrmq.client.message_selector import MessageSelector
    from pyrmq.client.message import Message, MessageExt, MessageQueue, PullResult, PullStatus, SendResult, SendStatus
    from pyrmq.client.pop_api import PopMessage
    from pyrmq.client.producer import Producer, SendContext, SendFuture, SendHook
    from pyrmq.client.pull_consumer import PullConsumer
    from pyrmq.client.push_consumer import PushConsumer
    from pyrmq.client.selectors import select_by_hash, select_by_random
    from pyrmq.client.simple_consumer import SimpleConsumer
    from pyrmq.client.transaction import (
        BlockingTransactionProducer,
        LocalTransactionState,
        TransactionProducer,
        TransactionSendResult,
    )


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pyrmq.client' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"pyrmq.client.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_EXPORTS))


__all__ = [
    "Admin",
    "BlockingAdmin",
    "BlockingProducer",
    "BlockingPullConsumer",
    "BlockingPushConsumer",
    "BlockingSimpleConsumer",
    "BlockingTransactionProducer",
    "BrokerError",
    "ClientConfig",
    "ClientError",
    "ClientStateError",
    "ConsumeFrom",
    "ConsumeResult",
    "InvalidMessageError",
    "LocalTransactionState",
    "Message",
    "MessageExt",
    "MessageModel",
    "MessageQueue",
    "NameServerUnreachable",
    "PopMessage",
    "Producer",
    "PullConsumer",
    "PullResult",
    "PullStatus",
    "PushConsumer",
    "SendContext",
    "SendFailedError",
    "SendFuture",
    "SendHook",
    "SendResult",
    "SendStatus",
    "SimpleConsumer",
    "Subscription",
    "TopicNotFoundError",
    "TransactionProducer",
    "TransactionSendResult",
    "select_by_hash",
    "select_by_random",
]
