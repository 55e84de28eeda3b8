"""The simple consumer (RocketMQ 5.x's ``SimpleConsumer``): receive messages when you want them, ack each one.

    async with SimpleConsumer("127.0.0.1:9876", group="billing", subscribe={"Orders": "*"}) as consumer:
        for msg in await consumer.receive(16, invisible_duration=30):
            handle(msg)
            await consumer.ack(msg)           # or: await consumer.change_invisible_duration(msg, 60)

No queues are assigned: the consumer *pops* (POP_MESSAGE). The broker hands out the group's next messages and
hides each one for ``invisible_duration``; ``ack`` removes it for good; a message not acked in time comes back
(``delivery_attempt`` + 1) to whichever consumer of the group receives next, and after the group's
``retryMaxTimes`` it is forwarded to ``%DLQ%<group>`` instead (as 5.x's gRPC proxy does). Any number of consumers
share a queue. A FIFO group (``consumeMessageOrderly``, ``pyrmq admin group create --fifo``) gets a queue's next
messages only once the ones handed out are acked or visible again.

``receive`` long-polls: it waits up to ``await_duration`` for messages and returns [] when none came. Each receive
asks one broker, round robin over the subscribed topics and the brokers holding them (the 5.x clients' rule).
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import trio

from pyrmq.client.config import ClientConfig
from pyrmq.client.consumer import ConsumeFrom, ConsumerCore, MessageModel, Subscription
from pyrmq.client.errors import InvalidMessageError, TopicNotFoundError
from pyrmq.client.instance import ClientInstance
from pyrmq.client.pop_api import (
    DEFAULT_RETRY_BACKOFF,
    PopMessage,
    PopSession,
    PopStatus,
    init_mode_of,
    seconds,
)
from pyrmq.remoting.errors import RemotingError
from pyrmq.remoting.pop import MAX_POP_NUMS, ReceiptHandle

__all__ = ["SimpleConsumer"]

log = logging.getLogger("pyrmq.client.simple")

#: 5.x's gRPC proxy caps a long poll at 20 s (grpcClientConsumerMaxLongPollingTimeoutMillis)
DEFAULT_AWAIT_DURATION = 20.0
MAX_AWAIT_DURATION = 3600.0
#: pause before a receive tries again after a remoting failure (within its await duration)
RETRY_PAUSE = 0.2


class SimpleConsumer(ConsumerCore):
    """Receive, ack, change invisible duration (5.x's SimpleConsumer over the remoting protocol).

    * ``subscribe``: ``{topic: tag expression}``, or call :meth:`subscribe` (SQL92 with ``sql=...``);
    * ``await_duration``: how long a receive waits for messages (seconds; 0 = answer at once);
    * ``fifo``: None = as the group is declared on the brokers (``consumeMessageOrderly``), True/False to force;
    * ``max_reconsume_times``: None = the group's ``retryMaxTimes``; a message delivered that many times + 1 is
      forwarded to ``%DLQ%<group>`` at the next receive instead of being handed out (``dead_letter=False``: handed
      out anyway);
    * ``consume_from``: where a new group starts: ``"last"`` (5.x's ConsumeInitMode.MAX: the newest message of a
      queue, or the first when it is still in memory) or ``"first"``.
    """

    consume_type = "CONSUME_POP"

    def __init__(
        self,
        namesrv: str | Iterable[str] | None = None,
        group: str = "pyrmq_simple_consumer",
        *,
        subscribe: Mapping[str, str] | None = None,
        await_duration: float | datetime.timedelta = DEFAULT_AWAIT_DURATION,
        fifo: bool | None = None,
        max_reconsume_times: int | None = None,
        dead_letter: bool = True,
        consume_from: ConsumeFrom | str = ConsumeFrom.LAST_OFFSET,
        config: ClientConfig | None = None,
        instance: ClientInstance | None = None,
        credentials: tuple[str, str] | None = None,
    ) -> None:
        super().__init__(namesrv, group, config=config, instance=instance, message_model=MessageModel.CLUSTERING,
                         consume_from=consume_from, credentials=credentials)
        if self.consume_from is ConsumeFrom.TIMESTAMP:
            raise InvalidMessageError("a POP consumer starts from \"last\" or \"first\" (5.x's ConsumeInitMode), "
                                      "not from a timestamp: reset the group's offsets with `pyrmq admin offset reset`")
        self.await_duration = seconds(await_duration, "await_duration", high=MAX_AWAIT_DURATION)
        for topic, expression in (subscribe or {}).items():
            self.subscribe(topic, expression)
        self.session = PopSession(self, order=fifo, max_reconsume_times=max_reconsume_times, dead_letter=dead_letter,
                                  retry_backoff=DEFAULT_RETRY_BACKOFF, init_mode=init_mode_of(self.consume_from))
        self._next_target = 0

    # -- start / shutdown ------------------------------------------------------------------------------------

    async def _on_start(self, nursery: trio.Nursery) -> None:
        if not self.subscriptions:
            raise InvalidMessageError("subscribe to at least one topic before starting the consumer")
        try:
            await self._register()
            await self.instance.send_heartbeat()
            await self.session.refresh_settings()
        except BaseException:
            self._forget()
            raise
        nursery.start_soon(self.session.settings_loop)

    async def _on_shutdown(self) -> None:
        await self.session.acks_flushed()
        await self._unregister()

    # -- receive ---------------------------------------------------------------------------------------------

    def _targets(self) -> list[tuple[Subscription, str]]:
        out = []
        for topic, sub in self.subscriptions.items():
            for name in sorted({mq.broker_name for mq in self.topic_queues.get(topic, ())}):
                out.append((sub, name))
        return out

    async def _ensure_targets(self) -> list[tuple[Subscription, str]]:
        targets = self._targets()
        if not targets:
            for topic in list(self.subscriptions):
                route = await self.instance.update_route(topic)
                if route is not None:
                    self.topic_queues[topic] = route.subscribe_queues()
            targets = self._targets()
            if targets and not self.session.settings:
                await self.session.refresh_settings()
        if not targets:
            raise TopicNotFoundError(", ".join(self.subscriptions), "no broker serves the subscribed topics (create "
                                                                     "the topic first)")
        return targets

    async def receive(
        self, max_messages: int = 16, invisible_duration: float | datetime.timedelta = 30.0, *,
        await_duration: float | datetime.timedelta | None = None,
    ) -> list[PopMessage]:
        """Up to ``max_messages`` (1..32) messages, each invisible to the group for ``invisible_duration`` seconds
        unless acked; waits up to ``await_duration`` (the consumer's by default) for the first ones and returns []
        when none came. BrokerError when the broker refuses the request (bad filter, unknown group with
        auto-creation off ...)."""
        self._check_started()
        if isinstance(max_messages, bool) or not isinstance(max_messages, int) or not 1 <= max_messages <= MAX_POP_NUMS:
            raise InvalidMessageError(f"max_messages {max_messages!r} is out of range [1, {MAX_POP_NUMS}]")
        invisible = seconds(invisible_duration, "invisible_duration", low_inclusive=False)
        wait = self.await_duration if await_duration is None else seconds(await_duration, "await_duration",
                                                                          high=MAX_AWAIT_DURATION)
        deadline = trio.current_time() + wait
        targets = await self._ensure_targets()
        start = self._next_target % len(targets)
        self._next_target = start + 1
        # several brokers or topics: first a look at each without waiting, then the long poll at the next in turn
        order = [targets[(start + i) % len(targets)] for i in range(len(targets))]
        if len(order) > 1:
            for sub, broker in order:
                msgs = await self._pop(sub, broker, max_messages, invisible, 0.0, deadline)
                if msgs:
                    return msgs
        sub, broker = order[0]
        attempt_id = PopSession.new_attempt_id()
        while True:
            remaining = max(deadline - trio.current_time(), 0.0)
            try:
                msgs = await self._pop(sub, broker, max_messages, invisible, remaining, deadline, attempt_id)
            except RemotingError:
                if trio.current_time() + RETRY_PAUSE >= deadline:
                    raise
                await trio.sleep(RETRY_PAUSE)  # a lost answer: ask again with the same attempt id (FIFO)
                continue
            if msgs or trio.current_time() >= deadline:
                return msgs
            attempt_id = PopSession.new_attempt_id()

    async def _pop(self, sub: Subscription, broker: str, n: int, invisible: float, poll: float, deadline: float,
                   attempt_id: str | None = None) -> list[PopMessage]:
        result, msgs = await self.session.pop(broker, sub, n, invisible, poll, attempt_id=attempt_id)
        if result.status is PopStatus.POLLING_FULL and not msgs and poll > 0:
            await trio.sleep(min(RETRY_PAUSE, max(deadline - trio.current_time(), 0.0)))
        return msgs

    # -- ack / change invisible --------------------------------------------------------------------------------

    def _check_message(self, message: PopMessage) -> None:
        if not isinstance(message, PopMessage):
            raise InvalidMessageError(f"{message!r} was not received by a POP consumer (it has no receipt handle)")
        if message.consumer_group != self.group:
            raise InvalidMessageError(f"{message.msg_id} was received by group {message.consumer_group}, not "
                                      f"{self.group}")

    async def ack(self, message: PopMessage) -> None:
        """The message is consumed: it is never delivered to the group again (unless its invisible time ended
        before the ack; RocketMQ is at-least-once). BrokerError when the broker refuses."""
        self._check_started()
        self._check_message(message)
        await self.session.ack(message)

    async def ack_batch(self, messages: Sequence[PopMessage]) -> None:
        """Ack several messages: one BATCH_ACK_MESSAGE per broker."""
        self._check_started()
        by_broker: dict[str, list[PopMessage]] = {}
        for m in messages:
            self._check_message(m)
            by_broker.setdefault(m.receipt_handle.broker_name, []).append(m)
        for name, msgs in by_broker.items():
            await self.session.send_acks(name, msgs)

    async def change_invisible_duration(self, message: PopMessage,
                                        invisible_duration: float | datetime.timedelta) -> ReceiptHandle:
        """Keep the message invisible ``invisible_duration`` seconds from now (0: visible again at once); the
        message's receipt handle is replaced by the new one (returned too). BrokerError when the broker refuses."""
        self._check_started()
        self._check_message(message)
        duration = seconds(invisible_duration, "invisible_duration")
        return await self.session.change_invisible(message, duration)

    # -- what the client instance asks of a consumer --------------------------------------------------------

    def running_info(self) -> dict[str, Any]:
        info = super().running_info()
        info["properties"].update({
            "PROP_CONSUMEORDERLY": str(any(self.session.fifo(b) for b in self.session.broker_names())).lower(),
            "awaitDuration": str(int(self.await_duration * 1000)),
        })
        return info

    def stats(self) -> dict[str, Any]:
        return {"dead_lettered": self.session.dead_lettered, "unmatched_acked": self.session.unmatched}

