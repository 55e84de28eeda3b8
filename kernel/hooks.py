"""The typed, async-aware relay between core code and pluggy: core code never calls pluggy directly.

pluggy has no async support. For an async spec the relay calls each implementation itself, in pluggy's order
(``tryfirst`` ones first, ``trylast`` ones last, otherwise last registered first), and awaits it before calling
the next. Sync hooks go through pluggy as usual.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pluggy

from pyrmq.kernel.types import PutInterceptor, TransactionState

if TYPE_CHECKING:  # pragma: no cover
    import argparse

    import trio

    from pyrmq.kernel.kernel import Kernel
    from pyrmq.kernel.types import AllocateStrategy, MessageFilter, Processor, RequestGuard, StoreDispatcher

log = logging.getLogger("pyrmq.kernel.hooks")


def is_async_spec(pm: pluggy.PluginManager, name: str) -> bool:
    """True when the hook's spec is declared ``async def``."""
    caller = getattr(pm.hook, name)
    return caller.spec is not None and inspect.iscoroutinefunction(caller.spec.function)


def impl_order(pm: pluggy.PluginManager, name: str) -> list[pluggy.HookImpl]:
    """Implementations of a hook in the order pluggy would call them."""
    return list(reversed(getattr(pm.hook, name).get_hookimpls()))


class HookRelay:
    """One typed method per hook. Built once per plugin manager; cheap to call, but never on a hot path."""

    def __init__(self, pm: pluggy.PluginManager) -> None:
        self.pm = pm
        self._hook = pm.hook

    # -- generic async calling -----------------------------------------------------------------------------

    async def call_async(self, name: str, **kwargs: Any) -> list[Any]:
        """Await every implementation of async hook ``name`` one by one; collect non-None results."""
        results: list[Any] = []
        for impl in impl_order(self.pm, name):
            args = {arg: kwargs[arg] for arg in impl.argnames}
            result = await impl.function(**args)
            if result is not None:
                results.append(result)
        return results

    # -- lifecycle -------------------------------------------------------------------------------------------

    def configure(self, kernel: Kernel) -> None:
        self._hook.pyrmq_configure(kernel=kernel)

    async def serve(self, kernel: Kernel, nursery: trio.Nursery) -> None:
        await self.call_async("pyrmq_serve", kernel=kernel, nursery=nursery)

    async def unconfigure(self, kernel: Kernel) -> None:
        """Run every plugin's unconfigure; one failing plugin does not stop the others' final flush."""
        for impl in impl_order(self.pm, "pyrmq_unconfigure"):
            try:
                await impl.function(**{arg: {"kernel": kernel}[arg] for arg in impl.argnames})
            except Exception:  # noqa: BLE001 - log and keep closing the rest
                log.exception("plugin %s failed to unconfigure", impl.plugin_name)

    def add_commands(self, subparsers: argparse._SubParsersAction, kernel_cli: Any) -> None:
        self._hook.pyrmq_add_commands(subparsers=subparsers, kernel_cli=kernel_cli)

    # -- dispatch --------------------------------------------------------------------------------------------

    def register_processors(self, kernel: Kernel, role: str) -> dict[int, Processor]:
        """Merge every plugin's processors for ``role`` into one table; the first in pluggy's order wins a code."""
        table: dict[int, Processor] = {}
        owner: dict[int, str] = {}
        for impl in impl_order(self.pm, "pyrmq_register_processors"):
            args = {"kernel": kernel, "role": role}
            answer: Mapping[int, Processor] | None = impl.function(**{a: args[a] for a in impl.argnames})
            for code, processor in (answer or {}).items():
                code = int(code)
                if code in table:
                    log.info("%s request code %d: %s overrides %s", role, code, owner[code], impl.plugin_name)
                    continue
                table[code] = processor
                owner[code] = impl.plugin_name
        return table

    def register_store_dispatchers(self, kernel: Kernel) -> list[StoreDispatcher]:
        found: list[StoreDispatcher] = []
        for answer in self._hook.pyrmq_register_store_dispatchers(kernel=kernel):
            found.extend(answer or ())
        return sorted(found, key=lambda d: (d.order, d.name))

    def register_put_interceptors(self, kernel: Kernel) -> list[PutInterceptor]:
        """Every plugin's put interceptors, sorted by ``order`` then ``name`` (never by plugin order)."""
        found: list[PutInterceptor] = []
        for answer in self._hook.pyrmq_register_put_interceptors(kernel=kernel):
            found.extend(answer or ())
        return sorted(found, key=lambda i: (i.order, i.name))

    def make_request_guard(self, kernel: Kernel, role: str) -> RequestGuard | None:
        return self._hook.pyrmq_make_request_guard(kernel=kernel, role=role)

    def connection_opened(self, kernel: Kernel, role: str, connection: Any) -> None:
        self._hook.pyrmq_connection_opened(kernel=kernel, role=role, connection=connection)

    def connection_closed(self, kernel: Kernel, role: str, connection: Any) -> None:
        self._hook.pyrmq_connection_closed(kernel=kernel, role=role, connection=connection)

    # -- transactions ----------------------------------------------------------------------------------------

    async def check_transaction(self, kernel: Kernel, message: Any, check_times: int) -> TransactionState:
        """``pyrmq_check_transaction``: the first non-None verdict in pluggy's order; UNKNOWN when none answers."""
        args = {"kernel": kernel, "message": message, "check_times": check_times}
        for impl in impl_order(self.pm, "pyrmq_check_transaction"):
            answer = await impl.function(**{a: args[a] for a in impl.argnames})
            if answer is not None:
                return TransactionState(answer)
        return TransactionState.UNKNOWN

    # -- filter, allocate --------------------------------------------------------------------------------------

    def make_message_filter(self, kernel: Kernel, expression_type: str, expression: str) -> MessageFilter | None:
        return self._hook.pyrmq_make_message_filter(
            kernel=kernel, expression_type=expression_type, expression=expression
        )

    def make_replicator(self, kernel: Kernel, broker: Any) -> Any:
        return self._hook.pyrmq_make_replicator(kernel=kernel, broker=broker)

    def register_allocate_strategies(self) -> dict[str, AllocateStrategy]:
        table: dict[str, AllocateStrategy] = {}
        for impl in impl_order(self.pm, "pyrmq_register_allocate_strategies"):
            for name, strategy in (impl.function() or {}).items():
                table.setdefault(name, strategy)
        return table


def relay_methods() -> Sequence[str]:
    """Names of the relay's public methods (the meta-tests check every hook has one)."""
    return [n for n in vars(HookRelay) if not n.startswith("_")]
