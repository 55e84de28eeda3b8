"""One broker's transactions as a plugin object (registered as ``"transaction"`` by the package's
``pyrmq_configure``): the parts wired together, their hook implementations, and the broker's role.

The check service runs only while this broker is master (``pyrmq_role_changed``): every time it becomes master (at
start for a master, or when a failover replica is elected) the pending set is read again from its own store from
the saved positions (recovery.py), and when it stops being master the service stops and the pending set is dropped.
END_TRANSACTION on a broker that is not master answers SLAVE_NOT_AVAILABLE.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from pyrmq.kernel.hookspecs import hookimpl
from pyrmq.kernel.types import MetricCollector, Processor, PutInterceptor, RoleChange, TransactionState
from pyrmq.plugins.broker.transaction.bridge import TransactionBridge
from pyrmq.plugins.broker.transaction.check import TransactionCheckService
from pyrmq.plugins.broker.transaction.end import EndTransactionProcessor
from pyrmq.plugins.broker.transaction.interceptor import HalfMessageInterceptor
from pyrmq.plugins.broker.transaction.queues import HalfOpQueues
from pyrmq.plugins.broker.transaction.recovery import TransactionRecovery
from pyrmq.plugins.broker.transaction.settings import TransactionSettings
from pyrmq.remoting.codes import RequestCode
from pyrmq.remoting.headers import EndTransactionRequestHeader
from pyrmq.store.format import StoredMessage

if TYPE_CHECKING:  # pragma: no cover - types only
    from pyrmq.kernel.kernel import Kernel
    from pyrmq.plugins.broker.core import BrokerContext

ROLE = "broker"
#: records of each queue read between two checkpoints while the pending set is loaded
LOAD_STEP = 2000


class Transactions:
    """Half messages, END_TRANSACTION, the half/op bookkeeping and the check service of one broker."""

    def __init__(self, kernel: Kernel, ctx: BrokerContext) -> None:
        self.kernel = kernel
        self.ctx = ctx
        self.queues = HalfOpQueues(ctx.store)
        self.bridge = TransactionBridge(ctx, self.queues)
        self.recovery = TransactionRecovery(ctx, self.queues, self.bridge)
        self.interceptor = HalfMessageInterceptor(ctx, kernel.settings)
        self.checker = TransactionCheckService(
            kernel, ctx, kernel.settings(TransactionSettings), self.queues, self.bridge, self.recovery)
        self.end = EndTransactionProcessor(self.queues, self.bridge, is_master=self.is_master,
                                           ensure_loaded=self.ensure_loaded)
        #: the role last announced (None before the first announcement)
        self.role: RoleChange | None = None
        #: terms as master so far, and the one whose pending set is loaded (0: none)
        self.term = 0
        self._loaded_term = 0
        #: set while master: the check service waits for it
        self._master = trio.Event()
        self._scope: trio.CancelScope | None = None

    def is_master(self) -> bool:
        return self.role is not None and self.role.is_master

    def end_transaction(self, header: EndTransactionRequestHeader) -> tuple[int, str | None] | None:
        """END_TRANSACTION for a producer of another protocol (the gRPC endpoint of 5.x clients): the response code
        and remark the remoting request would get; None for UNKNOWN (left to the check)."""
        return self.end.answer(header)

    def _start_term(self) -> None:
        if self._loaded_term != self.term:
            self._loaded_term = self.term
            self.recovery.start()

    def ensure_loaded(self) -> None:
        """Read the whole pending set of this term as master now, if the check service has not yet (an
        END_TRANSACTION right after the broker became master). Synchronous."""
        if self.is_master():
            self._start_term()
            if not self.recovery.finished:
                self.queues.ingest()
                self.recovery.finish()

    async def _load(self) -> None:
        """Read the pending set of this term in steps of LOAD_STEP records, letting other tasks run between them (a
        replica elected with 100,000 pending halves keeps its lease meanwhile)."""
        self._start_term()
        while not self.recovery.finished and not self.queues.ingest(LOAD_STEP):
            await trio.lowlevel.checkpoint()
        self.recovery.finish()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The check service of each term as master, stopped when the term ends."""
        task_status.started()
        while True:
            await self._master.wait()
            if not self.is_master():
                continue  # master and slave again before this task ran: wait for the next term
            with trio.CancelScope() as scope:
                self._scope = scope
                await self._load()
                await self.checker.serve()
            self._scope = None

    # -- hook implementations ----------------------------------------------------------------------------------

    @hookimpl(tryfirst=True)
    async def pyrmq_role_changed(self, change: RoleChange) -> None:
        # tryfirst and without awaiting: the last record of the log is noted before any other implementation could
        # let a request append (recovery.py: a commit cut from its op record)
        was_master = self.is_master()
        self.role = change
        if change.is_master and not was_master:
            self.term += 1
            self.recovery.became_master()
            self._master.set()
        elif not change.is_master and was_master:
            self._master = trio.Event()
            if self._scope is not None:
                self._scope.cancel()
            self.queues.reset()
            self.recovery.reset()

    @hookimpl(trylast=True)
    def pyrmq_register_put_interceptors(self) -> list[PutInterceptor]:
        return [self.interceptor]

    @hookimpl(trylast=True)
    def pyrmq_register_processors(self, role: str) -> dict[int, Processor] | None:
        return {RequestCode.END_TRANSACTION: self.end.end_transaction} if role == ROLE else None

    @hookimpl(trylast=True)
    def pyrmq_register_metric_collectors(self, role: str) -> list[MetricCollector] | None:
        from pyrmq.plugins.broker.transaction.metrics import TransactionCollector  # prometheus_client when exporting

        return [TransactionCollector(self.ctx, self.queues, self.bridge)] if role == ROLE else None

    @hookimpl(trylast=True)
    async def pyrmq_serve(self, nursery: trio.Nursery) -> None:
        await nursery.start(self.run)

    @hookimpl(trylast=True)
    async def pyrmq_check_transaction(self, message: StoredMessage, check_times: int) -> TransactionState:
        # the default verdict: ask the producer group; its answer comes back as END_TRANSACTION
        await self.checker.ask_producer(message)
        return TransactionState.UNKNOWN

    @hookimpl
    async def pyrmq_unconfigure(self) -> None:
        # before the core (trylast) persists offsets and closes the store
        if self.is_master() and self.queues.loaded:
            self.recovery.save()
