"""The check service (RocketMQ's TransactionalMessageCheckService and its default listener): while this broker is
master, every ``transactionCheckInterval`` a half older than ``transactionTimeOut`` (or its
``CHECK_IMMUNITY_TIME_IN_SECONDS``) is re-appended as a *check copy* with ``TRANSACTION_CHECK_TIMES`` counting
1, 2, ... and the copy goes to the transaction-check hook (``pyrmq_check_transaction``). The shipped answer
(:meth:`TransactionCheckService.ask_producer`) sends CHECK_TRANSACTION_STATE (39) oneway to one live connection of
the producer group, round-robin. After ``transactionCheckMax`` checks, or past ``fileReservedTime``, the half is
given up: copied to ``TRANS_CHECK_MAX_TIME_TOPIC`` and closed with an op record.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import attrs
import trio

from pyrmq.kernel.types import TransactionState
from pyrmq.plugins.broker.transaction.bridge import TransactionBridge, TransactionError
from pyrmq.plugins.broker.transaction.names import PGROUP, REAL_QID, REAL_TOPIC, UNIQ_KEY
from pyrmq.plugins.broker.transaction.queues import HalfOpQueues
from pyrmq.plugins.broker.transaction.recovery import TransactionRecovery
from pyrmq.plugins.broker.transaction.settings import TransactionSettings
from pyrmq.remoting.codes import RequestCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.errors import RemotingError
from pyrmq.remoting.headers import CheckTransactionStateRequestHeader
from pyrmq.store.format import StoredMessage

if TYPE_CHECKING:  # pragma: no cover - types only
    from pyrmq.kernel.kernel import Kernel
    from pyrmq.plugins.broker.core import BrokerContext

log = logging.getLogger("pyrmq.broker.transaction")


class TransactionCheckService:
    """Checks the pending halves of this broker's term as master; :meth:`serve` runs until cancelled (the broker
    stops, or stops being master)."""

    def __init__(self, kernel: Kernel, ctx: BrokerContext, settings: TransactionSettings, queues: HalfOpQueues,
                 bridge: TransactionBridge, recovery: TransactionRecovery) -> None:
        self.kernel = kernel
        self.ctx = ctx
        self.store = ctx.store
        self.queues = queues
        self.bridge = bridge
        self.recovery = recovery
        self.check_interval_s = settings.transactionCheckInterval / 1000
        self.timeout_ms = settings.transactionTimeOut
        self.check_max = settings.transactionCheckMax
        self.reserved_ms = ctx.settings.fileReservedTime * 3600 * 1000
        self._wake = trio.Event()
        self._rr = 0
        #: CHECK_TRANSACTION_STATE requests sent since start (admin, tests, bench)
        self.checks_sent = 0

    async def serve(self) -> None:
        while True:
            with trio.move_on_after(self.check_interval_s):
                await self._wake.wait()
            self._wake = trio.Event()
            try:
                await self.check_pass()
            except TransactionError as exc:
                log.warning("transaction check pass stopped: %s", exc.remark)
            self.recovery.save()
            await trio.to_thread.run_sync(self.ctx.offsets.persist_if_dirty)

    def check_now(self) -> None:
        """Run a check pass at once (tests, admin)."""
        self._wake.set()

    async def check_pass(self) -> int:
        """Check every half due; returns how many were checked or given up."""
        queues = self.queues
        queues.ingest()
        start = self.store.clock()
        done = 0
        for half in sorted(queues.pending.values(), key=lambda h: h.queue_offset):
            await trio.lowlevel.checkpoint()  # a pass over many halves must not starve the broker's requests
            if queues.pending.get(half.origin) is not half or half.stored > start:
                continue  # resolved meanwhile, or appended after the pass began
            now = self.store.clock()
            age = now - half.born
            # due transactionTimeOut after its birth, and a copy transactionTimeOut after the check that made it:
            # a producer just asked has that long to answer before it is asked again
            since = age if half.checks == 0 else now - half.stored
            if since < (half.immunity_ms if half.immunity_ms is not None else self.timeout_ms):
                continue
            if half.checks >= self.check_max or age > self.reserved_ms:
                self.bridge.give_up(half)
                done += 1
                continue
            copy = self.bridge.check_copy(half)
            if copy is None:
                continue
            done += 1
            verdict = await self.kernel.hooks.check_transaction(self.kernel, copy, half.checks + 1)
            current = queues.pending.get(half.origin)
            if verdict is not TransactionState.UNKNOWN and current is not None:
                self.bridge.resolve(current, verdict)
        return done

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
