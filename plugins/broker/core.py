"""Broker core plugin: the broker's shared context, its store, config files, name-server registration, housekeeping.

Every other broker feature (send, pull, offsets, queries, locks, admin, delay, retry ...) is a plugin of its own that
finds this context under :data:`BROKER` and registers its processors through the dispatch hook.

Start-up order: ``pyrmq_configure`` (``tryfirst``, so every feature plugin's own configure finds the context
whatever its place in the bundle) builds the context and the (unloaded) store; ``pyrmq_serve`` (``tryfirst``, so
the store is up before other services use it) adds the features' store dispatchers (collected from
``pyrmq_register_store_dispatchers``) to the store's own, recovers the store, starts its
background services, then registers with the name servers. Stop: offsets and configs persisted, store flushed and
closed, broker unregistered.
"""

from __future__ import annotations

import collections
import logging
import os
import time
from collections.abc import Callable
from typing import Any, TypeVar

import trio
from cachetools import LRUCache

from pyrmq.kernel.errors import ConfigError, FilterExpressionError
from pyrmq.kernel.hookspecs import hookimpl
from pyrmq.kernel.kernel import StateKey
from pyrmq.kernel.types import Role, RoleChange
from pyrmq.plugins.broker.clients import ConsumerGroupInfo, ConsumerManager, ProducerManager
from pyrmq.plugins.broker.consumer_filter import ConsumerFilterManager
from pyrmq.plugins.broker.groups import SubscriptionGroupManager
from pyrmq.plugins.broker.offsets import ConsumerOffsetManager
from pyrmq.plugins.broker.registration import NameServerRegistration
from pyrmq.plugins.broker.settings import BrokerSettings
from pyrmq.plugins.broker.stats import BrokerStats
from pyrmq.plugins.broker.topics import TopicConfig, TopicConfigManager
from pyrmq.plugins.builtin.remoting_server import BrokerListenSettings
from pyrmq.remoting.client import RemotingClient
from pyrmq.remoting.codes import RequestCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.errors import RemotingError
from pyrmq.store.config import StoreConfig
from pyrmq.store.config_files import ConfigFile, config_path
from pyrmq.store.errors import StoreError
from pyrmq.store.message_store import MessageStore
from pyrmq.store.reput import TagsCodeResolver

log = logging.getLogger("pyrmq.broker")

ROLE = "broker"


def store_config(settings: Any) -> StoreConfig:
    """The store's settings from the broker's broker.conf-named settings."""
    root = str(settings.store_root)
    try:
        return StoreConfig(
            store_path_root_dir=root,
            store_path_commit_log=os.path.expanduser(settings.storePathCommitLog) or None,
            mapped_file_size_commit_log=settings.mappedFileSizeCommitLog,
            mapped_file_size_consume_queue=settings.mappedFileSizeConsumeQueue,
            max_message_size=settings.maxMessageSize,
            flush_disk_type=settings.flushDiskType,
            flush_interval_commit_log=settings.flushIntervalCommitLog,
            flush_commit_log_least_pages=settings.flushCommitLogLeastPages,
            sync_flush_timeout=settings.syncFlushTimeout,
            file_reserved_time=settings.fileReservedTime,
            delete_when=settings.deleteWhen,
            disk_max_used_space_ratio=settings.diskMaxUsedSpaceRatio,
            disk_space_clean_forcibly_ratio=settings.diskSpaceCleanForciblyRatio,
            disk_space_warning_level_ratio=settings.diskSpaceWarningLevelRatio,
            max_hash_slot_num=settings.maxHashSlotNum,
            max_index_num=settings.maxIndexNum,
            check_crc_on_recover=settings.checkCRCOnRecover,
            preallocate_store_files=settings.preallocateStoreFiles,
            max_transfer_count_on_message_in_memory=settings.maxTransferCountOnMessageInMemory,
            max_transfer_bytes_on_message_in_memory=settings.maxTransferBytesOnMessageInMemory,
            access_message_in_memory_max_ratio=settings.accessMessageInMemoryMaxRatio,
        )
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"store settings rejected: {exc}", file="[broker]") from None


class RateCounter:
    """A running total and its rate over recent windows, like RocketMQ's StoreStatsService ``putTps`` /
    ``getTransferedTps`` ("10 s, 1 min, 10 min" in one string). Samples are taken at most once a second, on use."""

    WINDOWS = (10, 60, 600)

    def __init__(self, clock: Any = time.monotonic) -> None:
        self.clock = clock
        self.total = 0
        self.samples: collections.deque[tuple[float, int]] = collections.deque([(clock(), 0)])

    def add(self, n: int) -> None:
        self.total += n
        self._sample()

    def _sample(self) -> None:
        now = self.clock()
        if now - self.samples[-1][0] >= 1:
            self.samples.append((now, self.total))
        while len(self.samples) > 2 and now - self.samples[1][0] > self.WINDOWS[-1]:
            self.samples.popleft()

    def tps(self, window: float) -> float:
        """Per-second rate since the newest sample at least ``window`` seconds old (or the oldest one kept)."""
        self._sample()
        now = self.clock()
        start, count = self.samples[0]
        for t, c in self.samples:
            if now - t < window:
                break
            start, count = t, c
        return (self.total - count) / (now - start) if now > start else 0.0

    def describe(self) -> str:
        return " ".join(f"{self.tps(w):.2f}" for w in self.WINDOWS)


class BrokerContext:
    """Everything the broker's feature plugins share. One per broker role."""

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel
        self.settings = settings = kernel.settings(BrokerSettings)
        listen_port = kernel.settings(BrokerListenSettings).listenPort
        self.store_host = (settings.brokerIP1, listen_port)
        self.config_dir = os.path.join(str(settings.store_root), "config")
        self._files = {
            name: ConfigFile(config_path(str(settings.store_root), name))
            for name in ("topics.json", "subscriptionGroup.json", "consumerOffset.json", "consumerFilter.json")
        }
        # compiled expressions by (type, text), parse errors included: Java's SelectorParser cache of 100 (spec 7.11)
        self._compiled: LRUCache[tuple[str, str], Any] = LRUCache(maxsize=100)
        self.topics = TopicConfigManager(
            settings, persist=self._files["topics.json"].save, on_created=self._topic_created
        )
        self.groups = SubscriptionGroupManager(settings, persist=self._files["subscriptionGroup.json"].save)
        self.offsets = ConsumerOffsetManager(persist=self._files["consumerOffset.json"].save)
        self.consumers = ConsumerManager(compile_filter=self.compile_filter, notify=self.notify_consumer_ids_changed)
        self.consumer_filters = ConsumerFilterManager(
            compile_filter=self.compile_filter, persist=self._files["consumerFilter.json"].save,
            clean_after_ms=settings.filterDataCleanTimeSpan,
        )
        self.producers = ProducerManager()
        self.put_stats = RateCounter()  # messages stored by SEND_MESSAGE* (mqadmin clusterList's InTPS)
        self.get_stats = RateCounter()  # messages handed out by PULL_MESSAGE (OutTPS)
        #: per topic / group traffic (VIEW_BROKER_STATS_DATA, consumeTps, /metrics): plugins/broker/stats.py
        self.stats = BrokerStats(settings.brokerClusterName)
        # how the commit log reaches the disk is the flush hook's choice (shipped: flushDiskType's two services)
        config = store_config(settings)
        self.store = MessageStore(config, flush_policy=kernel.hooks.make_flush_policy(kernel, config))
        #: the put interceptors (filled at collection, after every plugin's configure): send and send-back run it
        self.put_chain = kernel.put_chain
        self.client = RemotingClient()
        self.registration = NameServerRegistration(
            settings, self.client, self.topics.registration_wrapper, f"{settings.brokerIP1}:{listen_port}")
        #: master/slave replication (``pyrmq_make_replicator``), made once the store is loaded; None without one
        self.replicator: Any = None
        #: the broker's role now (``pyrmq_role_changed``): from ``brokerRole`` at start, or what a replicator that
        #: changes roles (automatic failover) said last; a failover replica starts as a slave until elected
        self.role = RoleChange(Role.SLAVE if settings.brokerRole == "SLAVE" else Role.MASTER, broker_id=settings.brokerId)
        self.started = False

    # -- shared services -------------------------------------------------------------------------------------

    def compile_filter(self, expression_type: str, expression: str) -> Any:
        """A compiled subscription through the filter hook; FilterExpressionError when no plugin handles it or the
        expression does not parse. Answers (errors too) are cached, so a pull carrying its subscription is cheap."""
        key = (expression_type, expression)
        compiled = self._compiled.get(key)
        if compiled is None:
            try:
                compiled = self.kernel.hooks.make_message_filter(self.kernel, expression_type, expression)
                if compiled is None:
                    raise FilterExpressionError(f"no filter plugin handles expression type {expression_type!r}")
            except FilterExpressionError as exc:
                compiled = exc
            self._compiled[key] = compiled
        if isinstance(compiled, FilterExpressionError):
            raise compiled
        return compiled

    def _topic_created(self, config: TopicConfig, sync: bool) -> None:
        if self.started:
            self.registration.trigger()

    def notify_consumer_ids_changed(self, group: ConsumerGroupInfo) -> None:
        """NOTIFY_CONSUMER_IDS_CHANGED, oneway, to every channel of the group (spec 4.2)."""
        config = self.groups.table.get(group.group)
        if config is not None and not config.notify_consumer_ids_changed_enable:
            return
        if not self.settings.notifyConsumerIdsChangedEnable:
            return
        for connection in list(group.channels):
            request = RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": group.group}, oneway=True)
            connection.start_soon(self.send_oneway, connection, request)

    @staticmethod
    async def send_oneway(connection: Any, request: RemotingCommand) -> None:
        try:
            await connection.invoke_oneway(request)
        except RemotingError as exc:
            log.debug("oneway %s to %s failed: %s", request.code, connection, exc)

    # -- life cycle ------------------------------------------------------------------------------------------

    def load_configs(self) -> None:
        try:
            self.topics.load(self._files["topics.json"].load())
            self.groups.load(self._files["subscriptionGroup.json"].load())
            self.offsets.load(self._files["consumerOffset.json"].load())
            self.consumer_filters.load(self._files["consumerFilter.json"].load())
        except StoreError as exc:
            raise ConfigError(str(exc)) from None
        self.topics.persist()
        self.groups.persist()

    async def housekeeping(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Persist consumer offsets every flushConsumerOffsetInterval; drop client channels silent for 120 s."""
        task_status.started()
        offsets_every = self.settings.flushConsumerOffsetInterval / 1000
        next_scan = trio.current_time() + 10
        while True:
            await trio.sleep(offsets_every)
            self.offsets.persist_if_dirty()
            self.consumer_filters.mark_gone(self.consumers.groups)
            self.consumer_filters.persist_if_dirty()
            now = trio.current_time()
            if now >= next_scan:
                next_scan = now + 10
                timeout = self.settings.channelExpiredTimeout / 1000
                for conn in self.consumers.expire(now, timeout) + self.producers.expire(now, timeout):
                    log.info("client channel %s silent for %.0f s: closed", conn, timeout)
                    conn.close("no heartbeat")

    async def register_when_listening(self) -> None:
        """Once the broker's listener is up (its real port known), register with the name servers and keep at it."""
        addr = await self.kernel.wait_listening(ROLE)
        port = int(addr.rpartition(":")[2])
        self.store_host = (self.settings.brokerIP1, port)
        self.registration.broker_addr = f"{self.settings.brokerIP1}:{port}"
        if not self.registration.namesrv_addresses and "namesrv" in self.kernel.bundle.roles:
            # an embedded name server (pyrmq dev) is the default when namesrvAddr is empty
            self.registration.namesrv_addresses = [await self.kernel.wait_listening("namesrv")]
        self.started = True
        await self.registration.run()

    def persist_all(self) -> None:
        self.offsets.persist()
        self.consumer_filters.persist()
        self.topics.persist()
        self.groups.persist()


BROKER = StateKey[BrokerContext]("broker")

F = TypeVar("F")


def register_feature(kernel: Any, name: str, make: Callable[[BrokerContext], F]) -> F | None:
    """For a feature plugin's ``pyrmq_configure``: when the bundle runs a broker, build the feature object from the
    broker's context and register it as a plugin named ``name`` (its ``@hookimpl`` methods answer the hooks from then
    on); None without a broker role."""
    ctx = kernel.state.find(BROKER)
    if ctx is None:
        return None
    feature = make(ctx)
    kernel.register(feature, name)
    return feature


def tags_code_resolver(schedulers: Any) -> TagsCodeResolver | None:
    """The store's tags-code resolver from the schedulers that park under a topic of their own (``parking_topic``
    and ``tags_code``, :class:`pyrmq.kernel.types.Scheduler`); None when none does."""
    table = {}
    for scheduler in schedulers:
        topic = getattr(scheduler, "parking_topic", None)
        derive = getattr(scheduler, "tags_code", None)
        if topic and callable(derive):
            if topic in table:
                raise ConfigError(f"schedulers {table[topic][0]!r} and {scheduler.name!r} both park under {topic}")
            table[topic] = (scheduler.name, derive)
    return TagsCodeResolver({topic: derive for topic, (_, derive) in table.items()}) if table else None


@hookimpl(trylast=True)
def pyrmq_register_settings() -> dict[str, type]:
    return {"broker": BrokerSettings}


@hookimpl(tryfirst=True)
def pyrmq_configure(kernel: Any) -> None:
    # tryfirst: the context exists before any feature plugin's configure looks for it (like pytest's own configure)
    if ROLE in kernel.bundle.roles:
        ctx = kernel.state.put(BROKER, BrokerContext(kernel))
        ctx.load_configs()


@hookimpl(tryfirst=True)
async def pyrmq_serve(kernel: Any, nursery: trio.Nursery) -> None:
    ctx = kernel.state.find(BROKER)
    if ctx is None:
        return
    store = ctx.store
    # the store's list starts with its own consume-queue and index dispatchers; the features' come from the hook
    for dispatcher in kernel.store_dispatchers:
        store.add_dispatcher(dispatcher)
    # a scheduler's parking topic keeps the tags code the scheduler derives (the delivery time), however the store
    # dispatches its records: at the append, at recovery, on a replica, after a truncation
    store.set_tags_code_resolver(tags_code_resolver(kernel.schedulers))
    report = await trio.to_thread.run_sync(store.load)
    log.info("store %s recovered: %s", ctx.settings.store_root, report)
    await nursery.start(store.run)
    await nursery.start(ctx.client.run)
    await nursery.start(ctx.housekeeping)
    await nursery.start(ctx.stats.run)
    ctx.replicator = kernel.hooks.make_replicator(kernel, ctx)
    if getattr(ctx.replicator, "changes_roles", False):
        # automatic failover: a replica is a slave until elected; the replicator announces every change
        ctx.role = RoleChange(Role.SLAVE, broker_id=ctx.settings.brokerId)
    else:
        await kernel.hooks.role_changed(kernel, ctx.role)  # the role brokerRole gives, for the broker's life
    if ctx.replicator is not None:
        await nursery.start(ctx.replicator.run)
    nursery.start_soon(ctx.register_when_listening)


@hookimpl(tryfirst=True)
async def pyrmq_role_changed(kernel: Any, change: RoleChange) -> None:
    # first, so every feature's implementation finds BrokerContext.role up to date; the name servers learn the
    # broker id (0 for a master) and the failover epoch (dataVersion.stateVersion, their fence) at once
    ctx = kernel.state.find(BROKER)
    if ctx is None:
        return
    previous, ctx.role = ctx.role, change
    registration = ctx.registration
    registration.broker_id = change.broker_id
    registration.state_version = change.epoch
    if ctx.started and (previous.broker_id, previous.epoch) != (change.broker_id, change.epoch):
        registration.trigger()


@hookimpl(trylast=True)
def pyrmq_register_metric_collectors(kernel: Any, role: str) -> list[Any] | None:
    from pyrmq.plugins.broker.metrics import BrokerCollector  # prometheus_client only when the exporter is on

    ctx = kernel.state.find(BROKER)
    return [BrokerCollector(ctx)] if ctx is not None and role == ROLE else None


@hookimpl(trylast=True)
def pyrmq_connection_closed(kernel: Any, role: str, connection: Any) -> None:
    ctx = kernel.state.find(BROKER)
    if ctx is not None and role == ROLE:
        ctx.consumers.connection_closed(connection)
        ctx.producers.connection_closed(connection)


@hookimpl(trylast=True)
async def pyrmq_unconfigure(kernel: Any) -> None:
    ctx = kernel.state.find(BROKER)
    if ctx is None:
        return
    ctx.persist_all()
    if ctx.started:
        await ctx.registration.unregister_all()
    await ctx.store.aclose()
