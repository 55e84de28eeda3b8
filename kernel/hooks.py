"""The typed, async-aware relay between core code and pluggy: core code never calls pluggy directly.

pluggy has no async support. For an async spec the relay calls each implementation itself, in pluggy's order
(``tryfirst`` ones first, ``trylast`` ones last, otherwise last registered first), and awaits it before calling
the next. Sync hooks go through pluggy as usual.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import pluggy

from pyrmq.kernel.errors import PluginError
from pyrmq.kernel.settings import PLUGIN_SECTION_PREFIX, ROLE_SECTIONS, Declared
from pyrmq.kernel.types import PutInterceptor, Scheduler, TransactionState

if TYPE_CHECKING:  # pragma: no cover
    import argparse

    import trio

    from pyrmq.kernel.bundles import Bundle
    from pyrmq.kernel.kernel import Kernel
    from pyrmq.kernel.types import (
        AllocateStrategy,
        FlushPolicy,
        MessageFilter,
        MetricCollector,
        Processor,
        RequestGuard,
        RoleChange,
        SlaveSyncStep,
        StoreDispatcher,
    )

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
            result = await cast("Awaitable[object]", impl.function(**args))
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
                await cast("Awaitable[object]", impl.function(**{arg: {"kernel": kernel}[arg] for arg in impl.argnames}))
            except Exception:  # noqa: BLE001 - log and keep closing the rest
                log.exception("plugin %s failed to unconfigure", impl.plugin_name)

    def add_commands(self, subparsers: argparse._SubParsersAction[argparse.ArgumentParser], kernel_cli: Any) -> None:
        self._hook.pyrmq_add_commands(subparsers=subparsers, kernel_cli=kernel_cli)

    def add_options(self, command: str, parser: argparse.ArgumentParser) -> None:
        self._hook.pyrmq_add_options(command=command, parser=parser)

    def apply_options(self, command: str, args: argparse.Namespace, bundle: Bundle) -> Bundle:
        """Each implementation in pluggy's order gets the previous one's bundle; returns the last."""
        for impl in impl_order(self.pm, "pyrmq_apply_options"):
            given = {"command": command, "args": args, "bundle": bundle}
            answer = impl.function(**{a: given[a] for a in impl.argnames})
            if answer is not None:
                bundle = cast("Bundle", answer)
        return bundle

    def run_instead(self, command: str, args: argparse.Namespace) -> int | None:
        return cast("int | None", self._hook.pyrmq_run_instead(command=command, args=args))

    def register_settings(self) -> list[Declared]:
        """Every plugin's declared settings classes, by section, in registration order (``pyrmq_register_settings``)."""
        declared: list[Declared] = []
        for impl in reversed(impl_order(self.pm, "pyrmq_register_settings")):
            answer = impl.function() or {}
            if not isinstance(answer, Mapping):
                raise PluginError(f"plugin {impl.plugin_name!r}: pyrmq_register_settings must return "
                                  f"{{section: class or classes}}, got {answer!r}")
            for section, classes in answer.items():
                if section not in ROLE_SECTIONS and not section.startswith(PLUGIN_SECTION_PREFIX):
                    raise PluginError(f"plugin {impl.plugin_name!r}: unknown settings section {section!r}; expected "
                                      f"{', '.join(ROLE_SECTIONS)} or plugins.<plugin name>")
                for cls in (classes,) if isinstance(classes, type) else classes:
                    declared.append(Declared(section, cls, impl.plugin_name))
        return declared

    # -- dispatch --------------------------------------------------------------------------------------------

    def register_processors(self, kernel: Kernel, role: str) -> tuple[dict[int, Processor], dict[int, str]]:
        """Merge every plugin's processors for ``role`` into one table; the first in pluggy's order wins a code.
        Returns the table and, for each code, the name of the plugin that serves it."""
        table: dict[int, Processor] = {}
        owner: dict[int, str] = {}
        for impl in impl_order(self.pm, "pyrmq_register_processors"):
            args = {"kernel": kernel, "role": role}
            answer = cast("Mapping[int, Processor] | None", impl.function(**{a: args[a] for a in impl.argnames}))
            for code, processor in (answer or {}).items():
                code = int(code)
                if code in table:
                    log.info("%s request code %d: %s overrides %s", role, code, owner[code], impl.plugin_name)
                    continue
                table[code] = processor
                owner[code] = impl.plugin_name
        return table, owner

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

    def register_schedulers(self, kernel: Kernel) -> list[Scheduler]:
        """Every plugin's delay schedulers, sorted by ``order`` then ``name``."""
        found: list[Scheduler] = []
        for answer in self._hook.pyrmq_register_schedulers(kernel=kernel):
            found.extend(answer or ())
        return sorted(found, key=lambda s: (s.order, s.name))

    def register_slave_sync(self, kernel: Kernel) -> list[SlaveSyncStep]:
        """Every plugin's metadata-sync steps, sorted by ``name`` (never by plugin order)."""
        found: list[SlaveSyncStep] = []
        for answer in self._hook.pyrmq_register_slave_sync(kernel=kernel):
            found.extend(answer or ())
        return sorted(found, key=lambda s: s.name)

    def register_metric_collectors(self, kernel: Kernel, role: str) -> list[MetricCollector]:
        found: list[MetricCollector] = []
        for answer in self._hook.pyrmq_register_metric_collectors(kernel=kernel, role=role):
            found.extend(answer or ())
        return found

    async def role_changed(self, kernel: Kernel, change: RoleChange) -> None:
        """Await every implementation in pluggy's order (the core's ``tryfirst`` one first)."""
        await self.call_async("pyrmq_role_changed", kernel=kernel, change=change)

    def make_flush_policy(self, kernel: Kernel, config: Any) -> FlushPolicy | None:
        policy = cast("FlushPolicy | None", self._hook.pyrmq_make_flush_policy(kernel=kernel, config=config))
        kernel.flush_policy = policy  # what `pyrmq plugins --codes` shows
        return policy

    def make_request_guard(self, kernel: Kernel, role: str) -> RequestGuard | None:
        return cast("RequestGuard | None", self._hook.pyrmq_make_request_guard(kernel=kernel, role=role))

    def connection_opened(self, kernel: Kernel, role: str, connection: Any) -> None:
        self._hook.pyrmq_connection_opened(kernel=kernel, role=role, connection=connection)

    def connection_closed(self, kernel: Kernel, role: str, connection: Any) -> None:
        self._hook.pyrmq_connection_closed(kernel=kernel, role=role, connection=connection)

    # -- transactions ----------------------------------------------------------------------------------------

    async def check_transaction(self, kernel: Kernel, message: Any, check_times: int) -> TransactionState:
        """``pyrmq_check_transaction``: the first non-None verdict in pluggy's order; UNKNOWN when none answers."""
        args = {"kernel": kernel, "message": message, "check_times": check_times}
        for impl in impl_order(self.pm, "pyrmq_check_transaction"):
            answer = await cast("Awaitable[object]", impl.function(**{a: args[a] for a in impl.argnames}))
            if answer is not None:
                return TransactionState(cast(int, answer))
        return TransactionState.UNKNOWN

    # -- filter, allocate --------------------------------------------------------------------------------------

    def make_message_filter(self, kernel: Kernel, expression_type: str, expression: str) -> MessageFilter | None:
        return cast("MessageFilter | None", self._hook.pyrmq_make_message_filter(
            kernel=kernel, expression_type=expression_type, expression=expression
        ))

    def make_replicator(self, kernel: Kernel, broker: Any) -> Any:
        return self._hook.pyrmq_make_replicator(kernel=kernel, broker=broker)

    def register_allocate_strategies(self) -> dict[str, AllocateStrategy]:
        table: dict[str, AllocateStrategy] = {}
        for impl in impl_order(self.pm, "pyrmq_register_allocate_strategies"):
            for name, strategy in (cast("Mapping[str, AllocateStrategy] | None", impl.function()) or {}).items():
                table.setdefault(name, strategy)
        return table


def relay_methods() -> Sequence[str]:
    """Names of the relay's public methods (the meta-tests check every hook has one)."""
    return [n for n in vars(HookRelay) if not n.startswith("_")]
