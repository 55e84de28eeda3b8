"""Every hook of the pyrmq kernel, grouped by phase.

pluggy project name: ``pyrmq``; every hook is prefixed ``pyrmq_``.

Colour. A spec written ``async def`` is an *async hook*: its implementations must be ``async def`` too, and the
kernel's relay (:mod:`pyrmq.kernel.hooks`) awaits them one by one in pluggy's order. ``firstresult=True`` and hook
wrappers are never used on async specs (pluggy would stop at an unawaited coroutine).

Verbs: ``pyrmq_register_*`` collects lists or tables from every plugin; ``pyrmq_make_*`` / ``pyrmq_get_*``
means the first non-None answer wins, so a user plugin answers before the built-in one (built-ins are ``trylast``).

Order. A hook's call order never decides what a role is made of: the broker core builds its context in a
``tryfirst`` ``pyrmq_configure``, every feature plugin creates its objects in its own ``pyrmq_configure``, and the
``pyrmq_register_*`` hooks only return objects that already exist. Ordered collections carry their own ``order``
(store dispatchers, put interceptors). tests/kernel/test_plugin_order.py starts every bundle with its plugin list
reversed and shuffled and checks that nothing changes.

Hot paths never go through pluggy: processors, store dispatchers, put interceptors, filters and allocation
strategies are collected once when a role starts (or a subscription is registered) and then called directly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:  # pragma: no cover - types only
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
        PutInterceptor,
        Replicator,
        RequestGuard,
        RoleChange,
        Scheduler,
        SlaveSyncStep,
        StoreDispatcher,
        TransactionState,
    )

PROJECT = "pyrmq"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

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
    """Create the plugin's objects for this role (processors, services, interceptors) and store them on the kernel.

    Called once by the kernel's service (:func:`pyrmq.kernel.service.serve_kernel`) when a role starts, after
    plugins are loaded and before any processor, dispatcher or interceptor is collected. A role's core plugin
    implements it ``tryfirst`` (the broker core builds its context and store there), so a feature plugin finds the
    core's objects (e.g. ``kernel.state.get(BROKER)``) whatever its place in the bundle. Read settings from
    ``kernel.bundle`` and ``kernel.plugin_settings(name)``; put objects with ``kernel.state.put(KEY, obj)`` so other
    plugins can find them through the same key. Raise :class:`pyrmq.kernel.errors.ConfigError` for a bad setting.
    Return value unused.
    """


@hookspec
async def pyrmq_serve(kernel: Kernel, nursery: trio.Nursery) -> None:
    """Start the plugin's long-lived services in ``nursery`` and return once they are ready.

    Called once per role start by the kernel's service, after ``pyrmq_configure`` and after the processor table,
    store dispatchers and put interceptors are collected (``kernel.processors``, ``kernel.store_dispatchers``,
    ``kernel.put_chain``). The broker core's is ``tryfirst`` (it recovers the store). Awaited one plugin at
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
def pyrmq_add_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], kernel_cli: Any) -> None:
    """Add sub-commands to the ``pyrmq`` command line (e.g. ``pyrmq export`` from the Spark plugin).

    Called by :mod:`pyrmq.kernel.cli` while it builds its argument parser, with the plugins of the ``cli`` bundle
    (configs/cli.toml) and third-party entry points loaded. Each sub-parser sets ``func=callable(args) -> int`` via
    ``set_defaults``; the callable's return value is the process exit status. Import heavy optional packages inside
    the callable, not at module import, so the base install works without them. ``kernel_cli`` is the CLI module.
    Return value unused.
    """


@hookspec
def pyrmq_add_options(command: str, parser: argparse.ArgumentParser) -> None:
    """Add options to one of the kernel's own role commands (``namesrv``, ``broker``, ``dev``), e.g. the dashboard's
    ``--dashboard-port`` on ``pyrmq dev``.

    Called by :mod:`pyrmq.kernel.cli` while it builds its parser, once per role command, with the plugins of the
    ``cli`` bundle loaded (as for ``pyrmq_add_commands``). What the options mean is applied by
    ``pyrmq_apply_options`` / ``pyrmq_run_instead``. Return value unused.
    """


@hookspec
def pyrmq_apply_options(command: str, args: argparse.Namespace, bundle: Bundle) -> Bundle | None:
    """Apply this plugin's options of role command ``command`` to the bundle about to start; return the changed
    bundle (``bundle.with_plugin_settings(...)``) or None to leave it.

    Called by the CLI after the bundle is loaded and the command line's overrides applied, before the kernel is
    built; each implementation gets the previous one's bundle.
    """


@hookspec(firstresult=True)
def pyrmq_run_instead(command: str, args: argparse.Namespace) -> int | None:
    """Run something else than the role command's bundle (``pyrmq dev --ha``: a local etcd and a failover group as
    processes); return its exit status, or None to let the command run as usual. First non-None answer wins.
    Called by the CLI before the bundle is loaded.
    """


@hookspec
def pyrmq_register_settings() -> Mapping[str, type | Sequence[type]] | None:
    """Declare the settings this plugin reads: ``{section: settings class(es)}``.

    A section is a role table (``"broker"``: RocketMQ's broker.conf key names; ``"namesrv"``) or the plugin's own
    table (``"plugins.<plugin name>"``, ``[plugins."<plugin name>"]`` in a bundle). A settings class is a frozen
    attrs class whose fields are made with :func:`pyrmq.kernel.settings.setting` (type, default, check, help).
    Called once when the kernel is built, right after the plugins are loaded; the kernel parses every present
    section into one instance per class and stops with the file, the key and the expectation on a bad value; a key
    nobody declares is an error (a warning for a RocketMQ broker.conf), a key two plugins declare is a PluginError.
    Plugins read theirs with ``kernel.settings(MySettings)``; ``pyrmq plugins --settings`` lists them all. Return
    None when the plugin reads no settings.
    """


# ---------------------------------------------------------------------------------------------------------------
# Dispatch: request processors, store dispatchers, put interceptors, connection events
# ---------------------------------------------------------------------------------------------------------------


@hookspec
def pyrmq_register_processors(kernel: Kernel, role: str) -> Mapping[int, Processor] | None:
    """Return the request processors this plugin serves on ``role``'s listener: ``{request_code: async processor}``.

    Called once per role of the bundle (``namesrv``, ``broker``) by the kernel's service at start; the answers are
    merged into ``kernel.processors[role]``, the table that role's remoting server calls directly (no pluggy per
    request). Return processors created in ``pyrmq_configure``; None for a role the plugin does not serve. When two
    plugins register one code, the first in pluggy's call order wins (a user plugin before the ``trylast``
    built-ins) and the kernel logs the override. A processor is ``async (connection, request) -> RemotingCommand | None``; None means it answers
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
    ``request.recovering`` set. Keep ``dispatch`` cheap: it is on the append path. A dispatcher may also define
    ``visible(bound)``: the store calls it when its read bound moves (automatic failover), so a feature that waits for
    records to become readable (long polling) learns it without knowing about failover. Return None when the plugin
    has none for this role.
    """


@hookspec
def pyrmq_register_put_interceptors(kernel: Kernel) -> Sequence[PutInterceptor] | None:
    """Return put interceptors: objects that see every message a client puts, after decoding, before the append.

    Called once by the kernel's service at role start (after ``pyrmq_configure``); the answers of all plugins are
    sorted by ``interceptor.order`` (then name) into ``kernel.put_chain``, which the send (SEND_MESSAGE, V2,
    reply), batch-send and CONSUMER_SEND_MSG_BACK processors call directly for each message (RocketMQ's
    SendMessageHook / PutMessageHook). ``interceptor.intercept(record, context)`` returns the record to append,
    a re-addressed copy, or a :class:`pyrmq.kernel.types.Rejection` (the client gets its response code and remark).
    An interceptor may declare ``trigger_properties`` / ``trigger_topic_prefixes`` so that a send it does not care
    about never runs the chain (:class:`pyrmq.kernel.types.PutInterceptor`). Return objects created in
    ``pyrmq_configure``. Shipped: half messages (transaction, order 150), the dead-letter re-routing (retry_dlq, order
    200), delay levels (300) and the timer (310).
    """


@hookspec(firstresult=True)
def pyrmq_make_request_guard(kernel: Kernel, role: str) -> RequestGuard | None:
    """Return the check every request of ``role`` passes before its processor runs (access control), or None.

    Called once per role by the kernel's service at start, right after the processor table is collected; the first
    non-None answer wins. The kernel then wraps every processor of ``role``'s table so that
    ``guard(connection, request)`` runs first: it returns None to let the request through, or a response
    (``request.make_response(code, remark)``) that is sent instead. It must not block or await. With no guard the
    table is left as it is: requests pay nothing. Shipped: the ACL plugin (``pyrmq.plugins.broker.acl``, when
    ``aclEnable = true``).
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
    """Compile a subscription expression of ``expression_type`` into a message filter.

    ``TAG`` is built in (plugins/broker/tag_filter.py); a plugin may answer other types (RocketMQ's ``SQL92``).

    Called by the broker when a consumer's subscription is registered (heartbeat) or arrives with a pull, never per
    message: the pull path hands the compiled filter to the store, which calls its
    ``is_matched_by_consume_queue`` / ``is_matched_by_commit_log`` directly. Return None
    when this plugin does not handle the type; the first non-None answer wins. Raise
    :class:`pyrmq.kernel.errors.FilterExpressionError` for an expression of a handled type that does not parse
    (the broker answers SUBSCRIPTION_PARSE_FAILED with its text).
    """


# ---------------------------------------------------------------------------------------------------------------
# Transactions
# ---------------------------------------------------------------------------------------------------------------


@hookspec
async def pyrmq_check_transaction(kernel: Kernel, message: Any, check_times: int) -> TransactionState | None:
    """Decide a pending half message (a transaction whose producer has not committed or rolled back in time).

    Called by the transaction plugin's check service (plugins/broker/transaction/check.py) once per check of a half older
    than ``transactionTimeOut``, at most ``transactionCheckMax`` times, after it re-appended the half as a check
    copy. ``message`` is that copy as stored (a :class:`pyrmq.store.format.StoredMessage` under
    ``RMQ_SYS_TRANS_HALF_TOPIC`` with ``REAL_TOPIC`` / ``REAL_QID`` / ``PGROUP`` properties, its own commit-log and
    queue offsets); ``check_times`` counts this check (1, 2, ...). Async: an implementation may await (look the
    transaction up in a database). The relay awaits implementations in pluggy's order and stops at the first
    non-None answer. Return :class:`pyrmq.kernel.types.TransactionState` ``COMMIT`` or ``ROLLBACK`` to resolve the
    half now (written exactly as an END_TRANSACTION would), ``UNKNOWN`` to leave it pending (checked again next
    pass), None to let the next plugin answer. The shipped implementation (``trylast``) asks the producer group:
    CHECK_TRANSACTION_STATE oneway to one live producer connection of the half's group, round-robin, and answers
    UNKNOWN (the producer's verdict arrives later as END_TRANSACTION).
    """


# ---------------------------------------------------------------------------------------------------------------
# Replication
# ---------------------------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def pyrmq_make_replicator(kernel: Kernel, broker: Any) -> Replicator | None:
    """Make the broker's replicator (master/slave HA) for ``broker`` (the broker core's context: its settings with
    ``brokerRole`` / ``brokerId``, its loaded store, its name-server registration that learns ``masterAddr`` and
    ``haServerAddr``).

    Called once by the broker core in ``pyrmq_serve``, after the store is loaded and before the broker registers
    with the name servers; the core starts ``replicator.run`` in its nursery (it calls ``task_status.started()``
    once the HA port is bound, so the registration carries it). A SYNC_MASTER send with ``WAIT=true`` awaits
    ``replicator.wait_replicated(end_offset)`` -> ``PutMessageStatus`` (PUT_OK, SLAVE_NOT_AVAILABLE,
    FLUSH_SLAVE_TIMEOUT). Shipped: plugins/broker/ha/plugin.py (RocketMQ 4.x HA). Return None when this plugin
    does not replicate; without any replicator a SYNC_MASTER answers SLAVE_NOT_AVAILABLE.
    """


@hookspec
async def pyrmq_role_changed(kernel: Kernel, change: RoleChange) -> None:
    """The broker's role changed: it is now the writable master of its group, or a slave (read-only).

    Called (awaited, one plugin at a time in pluggy's order) by the broker core once the store is loaded, with the
    role its settings give (``brokerRole``), and again by a replicator that changes roles at run time (automatic
    failover: elected, deposed, following a new master). When a replica becomes master its store already accepts
    writes; when it stops being master its store already refuses them. ``change.role`` is ``MASTER`` or ``SLAVE``,
    ``change.epoch`` the failover epoch (None without automatic failover), ``change.broker_id`` the id to register
    (0 for a master). Services that must run on the master only (the timer's and delay levels' delivery, the
    transaction check) follow it; the core's own implementation (``tryfirst``) updates ``BrokerContext.role`` and the
    name-server registration. The first call may come before or after a plugin's own ``pyrmq_serve``: keep the role
    and let the service act on it (set an event its loop waits for). Keep it short: never serve here. Return value
    unused.
    """


@hookspec(firstresult=True)
def pyrmq_make_flush_policy(kernel: Kernel, config: Any) -> FlushPolicy | None:
    """Choose how the commit log reaches the disk: return a :class:`pyrmq.kernel.types.FlushPolicy` for the store
    with settings ``config`` (a :class:`pyrmq.store.config.StoreConfig`).

    Called once by the broker core when it builds the store (in its ``pyrmq_configure``). First non-None answer
    wins. Shipped (``plugins/broker/flush.py``, ``trylast``): RocketMQ's two, chosen by ``flushDiskType``: the
    periodic ASYNC_FLUSH service (``flushIntervalCommitLog``, at least ``flushCommitLogLeastPages`` pages) and the
    SYNC_FLUSH group commit (a send is answered once its bytes are on disk). The store runs the policy as a service
    and awaits ``wait_flushed`` for SYNC_FLUSH sends.
    """


@hookspec
def pyrmq_register_schedulers(kernel: Kernel) -> Sequence[Scheduler] | None:
    """Return delay schedulers: put interceptors that park a message for later delivery, each claiming the messages
    that carry one of its ``trigger_properties`` (delay levels: ``DELAY``; the timer: ``TIMER_DELIVER_MS``,
    ``TIMER_DELAY_SEC``).

    Called once at role start (``kernel.collect()``); the kernel sorts them by ``order`` (then name) into
    ``kernel.schedulers`` and adds them to the put chain in that order, after the ``pyrmq_register_put_interceptors``
    answers of lower order. The first scheduler that claims a message sets ``context.scheduled_by``; later ones leave
    it alone, so the order decides which property wins when a message carries both. A scheduler delivers what it
    parked with its own service, on the master only (``pyrmq_role_changed``). ``pyrmq plugins --codes`` lists them.
    A scheduler that parks under a topic of its own declares ``parking_topic`` and ``tags_code(properties,
    store_timestamp)`` (:class:`pyrmq.kernel.types.Scheduler`): the broker core builds the store's tags-code resolver
    from them before the store loads, so a parked record's consume-queue unit (its delivery time) is derived the same
    way at the append, at recovery, on a replica and after a truncation.
    Shipped: delay levels (order 300), the timer (310).
    """


@hookspec
def pyrmq_register_slave_sync(kernel: Kernel) -> Sequence[SlaveSyncStep] | None:
    """Return steps of a slave's metadata sync (RocketMQ's ``SlaveSynchronize``): what a feature copies from the
    master besides topics, subscription groups and consumer offsets.

    Called by the HA plugin's metadata sync (plugins/broker/ha/slave.py) when it is made (a classic slave at start, a
    failover replica each time it follows a master); each round, after the core's own documents, it awaits every
    step's ``sync(fetch)`` in name order, where ``await fetch(request_code)`` is the master's parsed JSON answer
    (:class:`pyrmq.kernel.types.SlaveSyncStep`). A failing step fails the round (logged; the next round tries again).
    The HA plugin imports no feature: the delay levels contribute ``delayOffset.json`` (GET_ALL_DELAY_OFFSET) this way.
    Return objects created in ``pyrmq_configure``; None when the plugin has none.
    """


@hookspec
def pyrmq_register_metric_collectors(kernel: Kernel, role: str) -> Sequence[MetricCollector] | None:
    """Return Prometheus collectors of this plugin's series for ``role`` (objects with ``collect()`` yielding
    ``prometheus_client`` metric families, read when ``/metrics`` is scraped).

    Called once per role by the metrics plugin at start, when the exporter is on (``metricsExporterType = PROM``);
    nothing is collected otherwise. Series are computed at scrape time from what the plugin already counts: nothing
    is added to the send or pull path. Every broker series carries ``cluster``, ``node_type`` and ``node_id``
    (RocketMQ 5.x's labels). Shipped: the broker core (traffic, lag, connections, storage), transactions, the timer,
    the name server.
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


#: every hook name defined here, for meta-tests and the relay
ALL_HOOKS: tuple[str, ...] = tuple(name for name in dir() if name.startswith("pyrmq_"))
