"""POP consumption (RocketMQ 5.x): the broker side of SimpleConsumer and of the push consumer's POP mode.

Consumers do not own queues: they *pop*. The broker hands out a group's messages, each invisible for a while; an
ack removes it for good; an unacked message comes back after its invisible time through the group's retry topic
(``%RETRY%<group>_<topic>``) with its reconsume count + 1. FIFO groups (``consumeMessageOrderly``) get a queue's next
messages only once its last batch is acked or visible again. docs/pop.md for users, docs/decisions.md ("POP's
delivery state") for the design. One module a job:

- ``settings``: :class:`PopSettings` (5.x's broker.conf names: reviveQueueNum, popPollingSize, ...);
- ``names``: the revive topic ``rmq_sys_REVIVE_LOG_<cluster>``, its group and record tags;
- ``records``: checkpoints and ack records (5.x's JSON), pyrmq's ``rof`` record;
- ``fifo``: FIFO order states (5.x's ConsumerOrderInfoManager rules), durable as ``ord`` records;
- ``ledger``: open checkpoints by due time, in-flight counts, the live records of each revive queue;
- ``offsets``: pop offsets and the committed consumer offsets they write;
- ``journal``: writing records to the revive topic, and waiting until an answer may go out;
- ``pop``: POP_MESSAGE and PEEK_MESSAGE; ``ack``: ACK_MESSAGE, BATCH_ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME;
  ``notification``: NOTIFICATION, POLLING_INFO;
- ``polling``: long polling of POP and NOTIFICATION (a store dispatcher);
- ``revive``: the revive service (expired checkpoints to retry topics), FIFO wake-ups, live offsets, compaction;
- ``recovery``: the state read back from the store when the broker becomes master;
- ``metrics``: :class:`PopCollector` (5.x's rocketmq_pop_* series, rocketmq_consumer_inflight_messages);
- ``plugin``: :class:`PopService`, the parts wired together as a plugin object following the broker's role.

This module is the plugin bundles list (``pyrmq.plugins.broker.pop``): its ``pyrmq_configure`` creates the revive
topic and registers a :class:`PopService` as plugin ``"pop"``. The wire format (headers, receipt handles, info
strings, batch-ack bodies, retry-topic names) is :mod:`pyrmq.remoting.pop`, shared with the client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyrmq.kernel.hookspecs import hookimpl
from pyrmq.plugins.broker.pop.names import PERM_RW, REVIVE_GROUP, revive_topic
from pyrmq.plugins.broker.pop.plugin import PopService
from pyrmq.plugins.broker.pop.settings import PopSettings

if TYPE_CHECKING:  # pragma: no cover - types only
    from pyrmq.kernel.kernel import Kernel
    from pyrmq.plugins.broker.core import BrokerContext

__all__ = ["REVIVE_GROUP", "PopService", "PopSettings", "revive_topic"]


@hookimpl(trylast=True)
def pyrmq_register_settings() -> dict[str, type]:
    return {"broker": PopSettings}


@hookimpl(trylast=True)
def pyrmq_configure(kernel: Kernel) -> None:
    from pyrmq.plugins.broker.core import register_feature

    def make(ctx: BrokerContext) -> PopService:
        settings = kernel.settings(PopSettings)
        ctx.topics.create_system_topic(revive_topic(ctx.settings.brokerClusterName), settings.reviveQueueNum, PERM_RW)
        return PopService(kernel, ctx)

    register_feature(kernel, "pop", make)
