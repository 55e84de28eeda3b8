"""Every hook of the pyrmq kernel, grouped by phase.

pluggy project name: ``pyrmq``; every hook is prefixed ``pyrmq_``.

Colour. A spec written ``async def`` is an *async hook*: its implementations must be ``async def`` too, and the
kernel's relay (:mod:`pyrmq.kernel.hooks`) awaits them one by one in pluggy's order. ``firstresult=True`` and hook
wrappers are never used on async specs (pluggy would stop at an unawaited coroutine); async first-result hooks are
marked with the ``FIRST_RESULT`` set below and the relay stops at the first non-None answer itself.

Verbs (STYLE.md): ``pyrmq_register_*`` collects lists or tables from every plugin; ``pyrmq_make_*`` / ``pyrmq_get_*``
means the first non-None answer wins, so a user plugin answers before the built-in one (built-ins are ``trylast``).

Hot paths never go through pluggy: processors, store dispatchers, filters, flush policies, delay schedulers and
allocation strategies are collected once when a role starts and then called directly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:  # pragma: no cover - types only
    import argparse

    import trio

    from pyrmq.kernel.kernel import Kernel
    from pyrmq.kernel.types import (
        AllocateStrategy,
        DelayScheduler,
        FlushPolicy,
        MessageFilter,
        Processor,
        Replicator,
        StoreDispatcher,
        TransactionDecision,
    )

PROJECT = "pyrmq"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

#: async hooks whose relay call stops at the first non-None result (pluggy's firstresult is unusable for them)
FIRST_RESULT: frozenset[str] = frozenset({"pyrmq_check_transaction"})


# ---------------------------------------------------------------------------------------------------------------
# Lifecycle
# ---------------------------------------------------------------------------------------------------------------


@hookspec(historic=True)
def pyrmq_addhooks(pluginmanager: pluggy.PluginManager) -> None:
    """Add new hook specifications (a third-party package's own hooks, like pytest-xdist's newhooks.py).

    Called by the plugin manager once every plugin of the bundle is registered, before ``check_pending``; historic,
    so a plugin registered later is called too. Call ``pluginmanager.add_hookspecs(module)``. Return value unused.
    """


@hookspec
def pyrmq_configure(kernel: Kernel) -> None:
    """Create the plugin's state for this role and store it on the kernel under a typed key.

    Called once by the kernel's service (:func:`pyrmq.kernel.service.serve_kernel`) when a role starts, after
    plugins are loaded and before any processor, dispatcher or service is collected. Read settings from
    ``kernel.bundle`` and ``kernel.plugin_settings(name)``; put objects with ``kernel.state.put(KEY, obj)`` so other
    plugins can find them through the same key. Raise :class:`pyrmq.kernel.errors.ConfigError` for a bad setting.
    Return value unused.
    """


@hookspec
async def pyrmq_serve(kernel: Kernel, nursery: trio.Nursery) -> None:
    """Start the plugin's long-lived services in ``nursery`` and return once they are ready.

    Called once per role start by the kernel's service, after ``pyrmq_configure`` and after the processor table
    and store dispatchers are collected (``kernel.processors``, ``kernel.store_dispatchers``). Awaited one plugin at
    a time in pluggy's order. Objects are created in ``pyrmq_configure``, so a service may use another plugin's
    object whatever order the services start in. Start services with ``await nursery.start(service.run)`` so this
    returns only when each has called ``task_status.started()``.
    Return value unused.
    """


@hookspec
async def pyrmq_unconfigure(kernel: Kernel) -> None:
    """Release the plugin's resources when the role stops: final flush, checkpoint, unregister, close files.

    Called once by the kernel's service after the service nursery has been cancelled, inside a shielded cancel scope
    with the stop deadline (``kernel.stop_timeout``), so a final flush is not interrupted by the stop itself.
    Must not raise for resources that were never opened (configure may have failed half way). Return value unused.
    """


@hookspec
def pyrmq_add_commands(subparsers: argparse._SubParsersAction, kernel_cli: Any) -> None:
    """Add sub-commands to the ``pyrmq`` command line (e.g. ``pyrmq export`` from the Spark plugin).

    Called by :mod:`pyrmq.kernel.cli` while it builds its argument parser, with the plugins of the ``cli`` bundle
    (configs/cli.toml) and third-party entry points loaded. Each sub-parser sets ``func=callable(args) -> int`` via
    ``set_defaults``; the callable's return value is the process exit status. Import heavy optional packages inside
    the callable, not at module import, so the base install works without them. ``kernel_cli`` is the CLI module.
    Return value unused.
    """


# ---------------------------------------------------------------------------------------------------------------
# Dispatch: request processors and store dispatchers
# ---------------------------------------------------------------------------------------------------------------


@hookspec
def pyrmq_register_processors(kernel: Kernel, role: str) -> Mapping[int, Processor] | None:
    """Return the request processors this plugin serves on ``role``'s listener: ``{request_code: async processor}``.

    Called once per role of the bundle (``namesrv``, ``broker``) by the kernel's service at start; the answers are
    merged into ``kernel.processors[role]``, the table that role's remoting server calls directly (no pluggy per
    request). Return None for a role the plugin does not serve. When two plugins register one
    code, the first in pluggy's call order wins (a user plugin before the ``trylast`` built-ins) and the kernel logs
    the override. A processor is ``async (connection, request) -> RemotingCommand | None``; None means it answers
    later through ``connection.send_response`` (long polling, flush waits) or the request was oneway.
    """


@hookspec
def pyrmq_register_store_dispatchers(kernel: Kernel) -> Sequence[StoreDispatcher] | None:
    """Return this plugin's store dispatchers: objects with ``name``, ``order`` and ``dispatch(request)`` that see
    every record appended to the commit log.

    Called once by the kernel's service at role start (``kernel.collect()``, after ``pyrmq_configure``); the answers
    of all plugins are concatenated and sorted by ``dispatcher.order`` (then name) into ``kernel.store_dispatchers``.
    The broker core adds them to its store before the store loads. The store owns the one ordered dispatcher list:
    its own consume-queue builder (order 0) and index builder (order 10) are in it from the start (do not return
    them); a feature's dispatcher (the long-polling wake-up is order 20) runs after them, in ascending ``order``.
    ``put_message`` and ``put_messages`` call ``dispatch(request)`` once per appended record, synchronously, before
    they return (no pluggy per message, no reput loop); recovery also re-dispatches records a dispatcher lacks, with
    ``request.recovering`` set. Keep ``dispatch`` cheap: it is on the append path. Return None when the plugin has
    none for this role.
    """


@hookspec
def pyrmq_connection_opened(kernel: Kernel, role: str, connection: Any) -> None:
    """A remoting connection was accepted by ``role``'s server (``namesrv`` or ``broker``).

    Called by the remoting server (through the callback the kernel hands it) once per accepted TCP connection,
    before its first request is processed. Keep it quick. Return value unused.
    """


@hookspec
def pyrmq_connection_closed(kernel: Kernel, role: str, connection: Any) -> None:
    """A remoting connection of ``role``'s server closed (peer closed, error, idle timeout or shutdown).

    Called once per connection by the remoting server. The name server drops a broker at once when its connection
    closes; the broker forgets the client channels of that connection. Return value unused.
    """


# ---------------------------------------------------------------------------------------------------------------
# Filter
# ---------------------------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def pyrmq_make_message_filter(kernel: Kernel, expression_type: str, expression: str) -> MessageFilter | None:
    """Compile a subscription expression of ``expression_type`` (``TAG``, ``SQL92``, ...) into a message filter.

    Called by the broker when a consumer's subscription is registered (heartbeat) or arrives with a pull, never per
    message: the pull path hands the compiled filter to the store, which calls its
    ``is_matched_by_consume_queue`` / ``is_matched_by_commit_log`` directly. Return None
    when this plugin does not handle the type; the first non-None answer wins. Raise
    :class:`pyrmq.kernel.errors.FilterExpressionError` for an expression of a handled type that does not parse
    (the broker answers SUBSCRIPTION_PARSE_FAILED with its text).
    """


# ---------------------------------------------------------------------------------------------------------------
# Flush
# ---------------------------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def pyrmq_make_flush_policy(kernel: Kernel, flush_disk_type: str) -> FlushPolicy | None:
    """Return the store's flush policy for ``flush_disk_type`` (``ASYNC_FLUSH`` or ``SYNC_FLUSH``).

    Called once by the store plugin when it builds the store at role start. ASYNC_FLUSH flushes in the background
    (every ``flushIntervalCommitLog`` ms or ``flushCommitLogLeastPages`` dirty pages); SYNC_FLUSH is a group commit
    where appenders wait until their bytes are on disk (timeout gives FLUSH_DISK_TIMEOUT). First non-None wins;
    None means "not mine".
    """


# ---------------------------------------------------------------------------------------------------------------
# HA (master/slave replication)
# ---------------------------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def pyrmq_make_replicator(kernel: Kernel, broker_role: str) -> Replicator | None:
    """Return the replicator that ships appended commit-log bytes to slaves for ``broker_role``.

    Called once by the broker at role start. ``broker_role`` is ``ASYNC_MASTER``, ``SYNC_MASTER`` or ``SLAVE``.
    The send path calls ``replicator.wait_replicated(end_offset)`` directly for SYNC_MASTER; None (no HA plugin
    loaded) means a stand-alone broker: SYNC_MASTER sends then answer SLAVE_NOT_AVAILABLE like a master without
    slaves.
    """


@hookspec
def pyrmq_slave_acked(kernel: Kernel, slave_address: str, acked_offset: int) -> None:
    """A slave reported the commit-log offset it has stored (the 8-byte HA acknowledgement, spec 7.12).

    Called by the HA plugin on the master each time a slave's acknowledged offset advances (not per message).
    Observers (metrics, admin) record it. Return value unused.
    """


# ---------------------------------------------------------------------------------------------------------------
# Allocate strategy (client-side rebalance)
# ---------------------------------------------------------------------------------------------------------------


@hookspec
def pyrmq_register_allocate_strategies() -> Mapping[str, AllocateStrategy] | None:
    """Return queue-allocation strategies by name (``AVG``, ``AVG_BY_CIRCLE``, ``CONSISTENT_HASH``, ...).

    Called once by the client library when a consumer starts (the client loads plugins too); the consumer picks its
    configured strategy from the merged table and calls it directly at every rebalance:
    ``strategy(consumer_group, current_cid, mq_all, cid_all) -> list[MessageQueue]`` (spec 7.10). When two plugins
    register a name, the first in pluggy's order wins.
    """


# ---------------------------------------------------------------------------------------------------------------
# Delay scheduling
# ---------------------------------------------------------------------------------------------------------------


@hookspec
def pyrmq_register_delay_schedulers(kernel: Kernel) -> Sequence[DelayScheduler] | None:
    """Return delay schedulers: objects that decide where and when a delayed message is delivered.

    Called once by the broker at role start; the send path keeps the collected list and, for each message, calls
    ``scheduler.redirect(record)`` on the first scheduler whose ``property_keys`` the message carries (``DELAY`` for
    the 18 levels, ``TIMER_DELIVER_MS`` / ``TIMER_DELAY_SEC`` for the timing wheel); the first in registration order
    decides. ``redirect`` returns the record to store instead (e.g. under ``SCHEDULE_TOPIC_XXXX``) or None to store
    it unchanged, and raises ValueError for a property value it cannot honour (the send is answered MESSAGE_ILLEGAL
    with that text). The scheduler's own service (started from ``pyrmq_serve``) delivers due messages.
    """


# ---------------------------------------------------------------------------------------------------------------
# Transaction check
# ---------------------------------------------------------------------------------------------------------------


@hookspec
async def pyrmq_check_transaction(kernel: Kernel, half_message: Any, check_times: int) -> TransactionDecision | None:
    """Decide on a half (prepared) transaction message whose outcome is still unknown.

    Called by the transaction plugin's checker (every ``transactionCheckInterval``) for each half message older than
    ``transactionTimeOut`` without an op record; ``check_times`` is how often it was checked before. Async and
    first-result: the relay awaits implementations one by one and stops at the first non-None. Return COMMIT or
    ROLLBACK to settle it here, UNKNOWN to leave it for the next round; the built-in (``trylast``) sends
    CHECK_TRANSACTION_STATE to a live producer of the group and returns UNKNOWN (the producer answers with
    END_TRANSACTION).
    """


#: every hook name defined here, for meta-tests and the relay
ALL_HOOKS: tuple[str, ...] = tuple(name for name in dir() if name.startswith("pyrmq_"))
