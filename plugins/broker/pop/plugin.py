"""One broker's POP consumption as a plugin object (registered as ``"pop"`` by the package's ``pyrmq_configure``):
the parts wired together, their hook implementations, and the broker's role.

POP is served by the master only: a slave answers every POP code SLAVE_NOT_AVAILABLE (5.x's clients address the
master). Each time the broker becomes master (at start for a master, or when a failover replica is elected), its
state is read again from its own store (:mod:`.recovery`) and the revive service starts; when it stops being
master the service stops, waiting requests are answered SLAVE_NOT_AVAILABLE and the state is dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

from pyrmq.kernel.hookspecs import hookimpl
from pyrmq.kernel.types import MetricCollector, Processor, RoleChange, SlaveSyncStep, StoreDispatcher
from pyrmq.plugins.broker.pop.ack import AckProcessor
from pyrmq.plugins.broker.pop.assignment import AssignmentProcessor, RequestModeSync
from pyrmq.plugins.broker.pop.fifo import OrderBook, OrderState
from pyrmq.plugins.broker.pop.journal import Journal, now_ms
from pyrmq.plugins.broker.pop.ledger import Ledger, LiveRecord
from pyrmq.plugins.broker.pop.names import ACK_TAG, BATCH_ACK_TAG, CK_TAG, ORDER_TAG, revive_topic
from pyrmq.plugins.broker.pop.notification import NotificationProcessor, notification_error
from pyrmq.plugins.broker.pop.offsets import PopOffsets
from pyrmq.plugins.broker.pop.polling import Parked, PopLongPolling
from pyrmq.plugins.broker.pop.pop import PopMessageProcessor, pop_error
from pyrmq.plugins.broker.pop.records import CheckPoint, QueueKey, ack_json, batch_ack_json
from pyrmq.plugins.broker.pop.recovery import Recovery
from pyrmq.plugins.broker.pop.revive import ReviveService
from pyrmq.plugins.broker.pop.settings import PopSettings
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.store.results import PutMessageResult, PutMessageStatus

if TYPE_CHECKING:  # pragma: no cover - types only
    from pyrmq.kernel.kernel import Kernel
    from pyrmq.plugins.broker.core import BrokerContext
    from pyrmq.plugins.broker.topics import TopicConfig

log = logging.getLogger("pyrmq.pop")

ROLE = "broker"
#: revive-topic records read between two checkpoints while the state is recovered
RECOVERY_STEP = 5000

ErrorAnswer = Callable[[RemotingCommand, int, "str | None"], RemotingCommand]


class PopService:
    """POP_MESSAGE and friends, the delivery state (ledger, FIFO states, pop offsets), long polling and revive of
    one broker."""

    def __init__(self, kernel: Kernel, ctx: BrokerContext) -> None:
        self.kernel = kernel
        self.ctx = ctx
        self.settings = kernel.settings(PopSettings)
        self.revive_topic = revive_topic(ctx.settings.brokerClusterName)
        self.ledger = Ledger()
        self.book = OrderBook()
        self.offsets = PopOffsets(ctx, self.settings, self._offset_reset)
        self.journal = Journal(ctx, self.revive_topic)
        self.popper = PopMessageProcessor(self)
        self.acks = AckProcessor(self)
        self.notifications = NotificationProcessor(self)
        self.polling = PopLongPolling(self.settings.popPollingSize, self.settings.maxPopPollingSize, self._run_parked)
        self.revive = ReviveService(self)
        self.recovery = Recovery(self)
        #: QUERY_ASSIGNMENT and the (topic, group) request modes (the Java push consumer's POP mode); served by
        #: slaves too, which copy their master's modes
        self.assignments = AssignmentProcessor(ctx, self.settings)
        self.request_mode_sync = RequestModeSync(self.assignments)
        #: the commit-log end offset of the last record written (what an answer waits to be durable)
        self.last_end = 0
        #: messages acked (rocketmq_pop_revive_out_message ACK)
        self.acked = 0
        #: the role last announced (None before the first announcement)
        self.role: RoleChange | None = None
        self.term = 0
        self._loaded_term = 0
        self._master = trio.Event()
        self._scope: trio.CancelScope | None = None
        ctx.offsets.reset_listeners.append(self._admin_reset)

    # -- role ------------------------------------------------------------------------------------------------------

    def is_master(self) -> bool:
        return self.role is not None and self.role.is_master

    def not_master(self, request: RemotingCommand, error: ErrorAnswer) -> RemotingCommand:
        return error(request, ResponseCode.SLAVE_NOT_AVAILABLE,
                     f"the broker[{self.ctx.settings.brokerIP1}] of {self.ctx.settings.brokerName} is not the master: "
                     "POP, ACK and their companions are served by the master only")

    def refuse_unless_master(self, request: RemotingCommand, error: ErrorAnswer) -> RemotingCommand | None:
        return None if self.is_master() else self.not_master(request, error)

    def ensure_ready(self) -> None:
        """Finish reading this term's state now if the service has not yet (a request right after promotion)."""
        if self._loaded_term != self.term:
            self._loaded_term = self.term
            self.recovery.start()
        if not self.recovery.finished:
            self.recovery.finish()

    async def _load(self) -> None:
        if self._loaded_term != self.term:
            self._loaded_term = self.term
            self.recovery.start()
        while not self.recovery.finished and not self.recovery.step(RECOVERY_STEP):
            await trio.lowlevel.checkpoint()
        self.recovery.finish()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The revive service of each term as master, stopped when the term ends."""
        task_status.started()
        while True:
            await self._master.wait()
            if not self.is_master():
                continue
            with trio.CancelScope() as scope:
                self._scope = scope
                await self._load()
                await self.revive.serve()
            self._scope = None

    def _stop_term(self) -> None:
        self._master = trio.Event()
        if self._scope is not None:
            self._scope.cancel()
        for parked in self.polling.drain():
            error = notification_error if parked.notification else pop_error
            parked.connection.start_soon(parked.connection.send_response, self.not_master(parked.request, error))
        self.ledger.reset()
        self.book.states.clear()
        self.offsets.reset()
        self.revive.reset()
        self.recovery = Recovery(self)

    # -- writes ----------------------------------------------------------------------------------------------------

    def revive_queues(self) -> list[int]:
        """Every queue of the revive topic with records, and those ``reviveQueueNum`` writes to."""
        have = {qid for topic, qid in self.ctx.store.consume_queues.table if topic == self.revive_topic}
        return sorted(have | set(range(self.settings.reviveQueueNum)))

    def _appended(self, result: PutMessageResult) -> int:
        append = result.append
        if append is None:
            return -1
        self.last_end = append.end_offset
        return append.queue_offset

    def write_checkpoint(self, ck: CheckPoint) -> PutMessageStatus:
        """Write ``ck`` to its revive queue and open it."""
        result = self.journal.append(ck.revive_qid, CK_TAG, ck.to_json(), group=ck.group, topic=ck.topic)
        if result.status is PutMessageStatus.PUT_OK:
            ck.ro = self._appended(result)
            self.ledger.add(ck)
            self.revive.note_due(ck.due)
        return result.status

    def write_ack(self, ck: CheckPoint, offsets: list[int], *, batch: bool) -> PutMessageResult:
        """Write an ack record of ``offsets`` of ``ck`` (to the checkpoint's revive queue); the ledger is the
        caller's to update once it is written."""
        if batch or len(offsets) > 1:
            body = batch_ack_json(ck.topic, ck.group, ck.queue_id, ck.start_offset, ck.pop_time, ck.broker_name, offsets)
            tag = BATCH_ACK_TAG
        else:
            body = ack_json(ck.topic, ck.group, ck.queue_id, ck.start_offset, ck.pop_time, ck.broker_name, offsets[0])
            tag = ACK_TAG
        result = self.journal.append(ck.revive_qid, tag, body, group=ck.group, topic=ck.topic)
        if result.status is PutMessageStatus.PUT_OK:
            self._appended(result)
        return result

    def write_order(self, state: OrderState, replaces: OrderState | None = None) -> bool:
        """Write a FIFO queue's state: ``state`` again (an ack, a change of invisible time) or a new one that
        ``replaces`` the queue's previous state (a new batch, a reset)."""
        if state.ro < 0:
            state.revive_qid = replaces.revive_qid if replaces is not None and replaces.ro >= 0 else \
                state.queue_id % self.settings.reviveQueueNum
        result = self.journal.append(state.revive_qid, ORDER_TAG, state.to_json(), group=state.group,
                                     topic=state.topic)
        if result.status is not PutMessageStatus.PUT_OK:
            return False
        old_ro = state.ro
        state.ro = self._appended(result)
        if old_ro >= 0:
            self.ledger.moved(state, old_ro)
        else:
            self.ledger.set_order(state, replaces)
        self.revive.watch_order(state)
        return True

    def rewrite(self, record: LiveRecord) -> bool:
        """Write a live record again at its revive queue's end (compaction, a revive put back for later)."""
        if isinstance(record, OrderState):
            return self.write_order(record)
        old_ro = record.ro
        result = self.journal.append(record.revive_qid, CK_TAG, record.to_json(), group=record.group,
                                     topic=record.topic)
        if result.status is not PutMessageStatus.PUT_OK:
            return False
        record.ro = self._appended(result)
        self.ledger.moved(record, old_ro)
        return True

    def _offset_reset(self, key: QueueKey) -> None:
        """A queue's committed offset was reset (an admin): written down, so that a restart or a promoted replica
        starts there too. A FIFO queue's batch is forgotten (a cleared state); otherwise a checkpoint without
        messages of the queue's next generation holds the offset. Open checkpoints stay: their messages come back or
        are acked as before."""
        if not self.is_master():
            return
        offset = self.offsets.next.get(key, 0)
        state = self.book.clear(key)
        if state is not None:
            cleared = OrderState(key[0], key[1], key[2], 0, 0, [], committed=offset)
            self.book.states[key] = cleared
            self.write_order(cleared, replaces=state)
            return
        topic, group, queue_id = key
        qid = queue_id % self.settings.reviveQueueNum
        mark = CheckPoint(topic, group, queue_id, offset, now_ms(), 0, [], self.ctx.settings.brokerName, qid,
                          gen=self.offsets.gen.get(key, 0))
        self.write_checkpoint(mark)

    def _admin_reset(self, group: str, topic: str, offsets: dict[int, int]) -> None:
        """ConsumerOffsetManager's reset listener (INVOKE_BROKER_TO_RESET_OFFSET): the queues this broker pops for
        the group move at once."""
        if not self.is_master():
            return
        self.ensure_ready()
        for queue_id, offset in offsets.items():
            key = (topic, group, queue_id)
            if key in self.offsets.next or key in self.ledger.holders or key in self.book.states:
                self.offsets.adopt(key, offset)

    # -- answers -----------------------------------------------------------------------------------------------------

    def apply_commits(self, commits: list[tuple[QueueKey, int]]) -> None:
        """Commit consumer offsets: a checkpoint's next offset (only ever forward), or a FIFO queue's (negative:
        exactly, ``-(offset + 1)``)."""
        for key, offset in commits:
            if offset < 0:
                self.offsets.commit(key, -offset - 1)
            else:
                self.offsets.commit_forward(key, offset)

    def answer(self, connection: Any, response: RemotingCommand, end: int,
               commits: list[tuple[QueueKey, int]] | None = None) -> RemotingCommand | None:
        """An ACK / BATCH_ACK / CHANGE answer: now (committing ``commits``), or with SYNC_FLUSH / SYNC_MASTER once the
        records up to ``end`` are durable; when they do not become durable in time it is FLUSH_DISK_TIMEOUT /
        FLUSH_SLAVE_TIMEOUT, as a send's (the record is stored here, not yet where a crash or failover keeps it)."""
        if end and self.journal.waits:
            connection.start_soon(self.answer_when_durable, connection, response, end, commits or [], True)
            return None
        self.apply_commits(commits or [])
        return response

    async def answer_when_durable(self, connection: Any, response: RemotingCommand, end: int,
                                  commits: list[tuple[QueueKey, int]], strict: bool = False) -> None:
        """Send ``response`` once the records up to ``end`` are durable, then commit ``commits``. A POP answer goes
        out either way (its messages come back after their invisible time if its checkpoint is lost); an ack
        (``strict``) says it was not made durable."""
        if await self.journal.durable(end):
            self.apply_commits(commits)
        else:
            log.warning("POP records up to commit-log offset %d not durable in time (flush or replication)", end)
            if strict and response.code == ResponseCode.SUCCESS:
                code = ResponseCode.FLUSH_SLAVE_TIMEOUT if self.journal.sync_master else ResponseCode.FLUSH_DISK_TIMEOUT
                what = "replicated" if self.journal.sync_master else "flushed"
                response.code = code
                response.remark = f"the ack is stored but was not {what} in time: after a crash or failover the " \
                                  "message may be delivered again"
        await connection.send_response(response)

    def note_held(self, parked: Parked, topic: TopicConfig) -> None:
        """With a read bound (automatic failover): mark a request that waits while its queue holds messages it could
        not read yet, so that the bound's move runs it again."""
        if not self.polling.bounded:
            return
        store = self.ctx.store
        queues = [parked.queue_id] if parked.queue_id >= 0 else range(topic.read_queue_nums)
        for queue_id in queues:
            key = (parked.topic, parked.group, queue_id)
            if store.get_max_offset_in_queue(parked.topic, queue_id) > self.peek_offset(key, 1):
                self.polling.hold(parked)
                return

    def peek_offset(self, key: QueueKey, init_mode: int) -> int:
        """Where the next pop of ``key`` would start, without committing anything."""
        found = self.offsets.next.get(key)
        if found is not None:
            return found
        topic, group, queue_id = key
        table = self.ctx.offsets.query(group, topic, queue_id)
        return table if table >= 0 else self.offsets.init_offset(key, init_mode)

    def inflight(self, group: str, topic: str, queue_id: int) -> int:
        """Messages of a queue popped by ``group`` and neither acked nor revived (GET_CONSUME_STATS)."""
        key = (topic, group, queue_id)
        state = self.book.states.get(key)
        return max(self.ledger.inflight.get(key, 0), 0) + (state.inflight() if state is not None else 0)

    def popped_queue(self, group: str, topic: str, queue_id: int) -> int | None:
        """A queue's in-flight messages for ``group`` when this broker pops it for the group, else None (what
        GET_CONSUME_STATS adds as ``inflight``)."""
        key = (topic, group, queue_id)
        if key not in self.offsets.next and key not in self.ledger.inflight and key not in self.book.states:
            return None
        return self.inflight(group, topic, queue_id)

    def inflight_by_group(self) -> dict[tuple[str, str], int]:
        out: dict[tuple[str, str], int] = {}
        for (topic, group, _), n in list(self.ledger.inflight.items()):
            if n > 0:
                out[(topic, group)] = out.get((topic, group), 0) + n
        for (topic, group, _), state in list(self.book.states.items()):
            n = state.inflight()
            if n:
                out[(topic, group)] = out.get((topic, group), 0) + n
        return out

    async def _run_parked(self, parked: Parked, final: bool) -> bool:
        if parked.notification:
            return await self.notifications.run_parked(parked, final)
        return await self.popper.run_parked(parked, final)

    # -- hook implementations ----------------------------------------------------------------------------------

    @hookimpl
    async def pyrmq_role_changed(self, change: RoleChange) -> None:
        was_master = self.is_master()
        self.role = change
        if change.is_master and not was_master:
            self.term += 1
            self._master.set()
        elif not change.is_master and was_master:
            self._stop_term()

    @hookimpl(trylast=True)
    def pyrmq_register_processors(self, role: str) -> dict[int, Processor] | None:
        if role != ROLE:
            return None
        return {
            RequestCode.POP_MESSAGE: self.popper,
            RequestCode.PEEK_MESSAGE: self.popper.peek,
            RequestCode.ACK_MESSAGE: self.acks.ack,
            RequestCode.BATCH_ACK_MESSAGE: self.acks.batch_ack,
            RequestCode.CHANGE_MESSAGE_INVISIBLETIME: self.acks.change_invisible_time,
            RequestCode.NOTIFICATION: self.notifications.notification,
            RequestCode.POLLING_INFO: self.notifications.polling_info,
            RequestCode.QUERY_ASSIGNMENT: self.assignments.query,
            RequestCode.SET_MESSAGE_REQUEST_MODE: self.assignments.set_mode,
            RequestCode.GET_ALL_MESSAGE_REQUEST_MODE: self.assignments.all_modes,
        }

    @hookimpl(trylast=True)
    def pyrmq_register_slave_sync(self) -> list[SlaveSyncStep]:
        return [self.request_mode_sync]

    @hookimpl(trylast=True)
    def pyrmq_register_store_dispatchers(self) -> list[StoreDispatcher]:
        return [self.polling]

    @hookimpl(trylast=True)
    def pyrmq_register_metric_collectors(self, role: str) -> list[MetricCollector] | None:
        from pyrmq.plugins.broker.pop.metrics import PopCollector  # prometheus_client only when exporting

        return [PopCollector(self)] if role == ROLE else None

    @hookimpl(trylast=True)
    async def pyrmq_serve(self, nursery: trio.Nursery) -> None:
        await nursery.start(self.polling.run)
        await nursery.start(self.run)
