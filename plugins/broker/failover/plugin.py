"""Automatic failover of a broker group on etcd: the broker's replicator (``pyrmq_make_replicator``) when this plugin
is in the bundle (configs/failover.toml). etcd decides which replica is master; the data moves on RocketMQ 5.x's
AutoSwitch HA wire (plugins/broker/ha/autoswitch.py): the slave's handshake names its replica id (so the master knows
who acknowledged what), the master answers with its epoch entries, and every transfer header carries the confirm
offset.

Keys under ``/pyrmq/v1/<cluster>/<brokerName>/``:

- ``master``   {replicaId, addr, haAddr, epoch}, bound to the master's lease (gone TTL seconds after it stops);
- ``epoch``    the last epoch (a counter, one per election);
- ``syncset``  {epoch, members}: the replicas holding every acknowledged message; only they may be elected;
- ``epochs/<n>`` {startOffset, replicaId}: where epoch n's history starts (the elected replica's max offset);
- ``replicas/<id>`` {addr, lastEpoch, maxOffset}, bound to each replica's lease (for tools);
- ``config/topics``, ``config/groups``: the master's topic and subscription-group documents (written under its
  guard when their DataVersion changes, taken by the next master when elected).

A replica starts read-only (its store refuses new messages, takes replicated ones). The control loop reads the
group's keys every ``pollInterval``:

- no ``master``: stop following (close the HA connection: no more acks to the old master), cut a half-received
  record, and if this replica is in ``syncset`` (or there has never been an election, or ``uncleanElection``) run
  one txn: ``master`` absent, ``epoch`` and ``syncset`` unchanged -> write master (with its lease), epoch + 1,
  syncset {itself}, epochs/<new> {its max offset}. The winner accepts writes, registers as brokerId 0 with
  ``dataVersion.stateVersion = epoch`` (the name server's fence), and serves slaves;
- another replica's ``master``: truncate the own commit log to where the first epoch after the own last one
  started in the followed master's history (a returning master's unreplicated tail), remember that epoch, follow
  the master (HA client + metadata sync) and register as its own replica id. The master's handshake repeats its
  history (epoch entries); etcd's record is the authority: a master whose entries disagree is not followed, and the
  entries decide only where etcd has no later epoch recorded;
- its own ``master`` gone or replaced, or the lease lost: back to read-only (deposed).

Commit rule (5.x ``allAckInSyncStateSet``): a SYNC_MASTER send is answered SEND_OK only once every other syncset
member acknowledged it. The master adds a caught-up slave to the set (locally first, then in etcd) and drops one that
stopped acknowledging (in etcd first, guarded by "``master`` is still mine", then locally), never below
``minInSyncReplicas``. A deposed master cannot commit: its set members stopped acknowledging it and its guard fails.
During an etcd outage writes continue with the set as it is; only elections and set changes wait.

Read rule: consumers read only up to the confirm offset (the store's ``read_bound``), so no consumer sees a message a
failover could remove. A master reads up to what every member of the set a send waits for acknowledged (its whole
log while it is alone); the bound only moves forward, and the HA master's advances wake the pulls parked in front of
it. A follower's bound is the confirm offset of its master's transfer headers (capped at its own end), so a slave
serves reads up to what every in-sync replica holds; a replica neither master nor following keeps its last bound.

Plugin settings (``[plugins."pyrmq.plugins.broker.failover.plugin"]``): ``etcdEndpoints`` (comma separated
host:port), ``leaseTtl`` (s, 3), ``pollInterval`` (ms, 100), ``minInSyncReplicas`` (1), ``uncleanElection``
(false), ``asyncFailover`` (false: an ASYNC_MASTER group is refused), ``replicaId`` (default brokerId),
``slaveSyncInterval`` / ``slaveSyncFirstDelay`` (ms, 10000 / 3000).
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

import attrs
import trio

from pyrmq.kernel.errors import ConfigError
from pyrmq.kernel.hookspecs import hookimpl
from pyrmq.kernel.types import Role, RoleChange
from pyrmq.plugins.broker.failover.etcd import (
    Compare,
    EtcdClient,
    EtcdError,
    EtcdUnavailable,
    KeyValue,
    LeaseExpired,
    get_op,
    put_op,
)
from pyrmq.plugins.broker.ha.autoswitch import EpochEntry, EpochHistory, MasterHandshake, history, truncation_point
from pyrmq.plugins.broker.ha.master import HAMaster
from pyrmq.plugins.broker.ha.plugin import NOTIFIER
from pyrmq.plugins.broker.ha.settings import HASettings
from pyrmq.plugins.builtin.remoting_server import BrokerListenSettings
from pyrmq.plugins.broker.ha.slave import AutoSwitchFollower, HASlave, MetadataSync
from pyrmq.plugins.broker.pull import PULL
from pyrmq.store.results import PutMessageStatus

log = logging.getLogger("pyrmq.broker.failover")

PLUGIN = "pyrmq.plugins.broker.failover.plugin"
MASTER = "MASTER"
SLAVE = "SLAVE"
#: a slave this close to the master's end starts joining the in-sync set (sends wait for it from then on)
JOIN_LAG = 1024 * 1024


@attrs.frozen
class FailoverSettings:
    endpoints: tuple[str, ...]
    lease_ttl: int = 3
    poll: float = 0.1
    min_in_sync: int = 1
    unclean: bool = False
    replica_id: int = 1
    sync_interval: float = 10.0
    sync_first: float = 3.0

    @classmethod
    def from_plugin(cls, raw: Any, broker_settings: Any) -> FailoverSettings:
        where = f'[plugins."{PLUGIN}"]'
        endpoints = raw.get("etcdEndpoints", "")
        if isinstance(endpoints, str):
            endpoints = [e.strip() for e in endpoints.split(",") if e.strip()]
        if not endpoints:
            raise ConfigError("etcdEndpoints is empty: etcd's client addresses, host:port,...", file=where, key="etcdEndpoints")
        role = broker_settings.brokerRole
        if role == "SLAVE":
            raise ConfigError("a failover replica is configured SYNC_MASTER (or ASYNC_MASTER with asyncFailover): "
                              "etcd decides which replica is master", file="broker", key="brokerRole")
        if role == "ASYNC_MASTER" and not _flag(raw.get("asyncFailover", False)):
            raise ConfigError("failover of an ASYNC_MASTER group loses the tail its slaves had not received when the "
                              "master died; set asyncFailover = true to accept that, or use SYNC_MASTER",
                              file=where, key="asyncFailover")
        return cls(
            endpoints=tuple(endpoints),
            lease_ttl=max(1, int(raw.get("leaseTtl", 3))),
            poll=float(raw.get("pollInterval", 100)) / 1000,
            min_in_sync=max(1, int(raw.get("minInSyncReplicas", 1))),
            unclean=_flag(raw.get("uncleanElection", False)),
            replica_id=int(raw.get("replicaId", broker_settings.brokerId)),
            sync_interval=float(raw.get("slaveSyncInterval", 10_000)) / 1000,
            sync_first=float(raw.get("slaveSyncFirstDelay", 3000)) / 1000,
        )


def _flag(value: Any) -> bool:
    return value if isinstance(value, bool) else str(value).lower() == "true"


class EpochFile:
    """``config/failover.json``: the last epoch whose history this replica's commit log follows."""

    def __init__(self, path: str) -> None:
        self.path = path

    def load(self) -> int:
        try:
            with open(self.path) as f:
                return int(json.load(f).get("lastEpoch", 0))
        except FileNotFoundError:
            return 0

    def save(self, epoch: int) -> None:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"lastEpoch": epoch}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)


class FailoverReplicator:
    """One replica of a failover group: elections and set changes in etcd, the HA master or slave it currently is."""

    #: this replicator announces the broker's role (``pyrmq_role_changed``): elected, deposed
    changes_roles = True

    def __init__(self, ctx: Any, cfg: FailoverSettings, notifier: Any) -> None:
        self.ctx = ctx
        self.cfg = cfg
        self.notifier = notifier
        s = ctx.settings
        self.ha_settings = ctx.kernel.settings(HASettings)
        self.listen = ctx.kernel.settings(BrokerListenSettings)
        self.me = cfg.replica_id
        self.prefix = f"/pyrmq/v1/{s.brokerClusterName}/{s.brokerName}/"
        self.slave_timeout = self.ha_settings.slaveTimeout / 1000
        self.epoch_file = EpochFile(os.path.join(str(s.store_root), "config", "failover.json"))
        self.last_epoch = self.epoch_file.load()
        self.role = SLAVE
        #: the epoch of the master this replica is or follows (0: none yet)
        self.epoch = 0
        self.lease = 0
        self.etcd: EtcdClient | None = None
        #: while master: our ``master`` key's mod_revision (the guard of every set change) and the local set
        self.master_revision = 0
        #: the in-sync set as etcd has it, the replicas joining it (id -> offset they must acknowledge first), and
        #: the set a send waits for (both): always a superset of what etcd says
        self.synced: set[int] = set()
        self.pending: dict[int, int] = {}
        self.members: set[int] = set()
        self.syncset_revision = 0
        self.ha: HAMaster | None = None
        self._ha_scopes: set[trio.CancelScope] = set()
        #: while slave: the master record followed and the scope of the HA client + metadata sync
        self.following: dict[str, Any] | None = None
        self._follow_scope: trio.CancelScope | None = None
        self._followed = trio.Event()
        self._nursery: trio.Nursery | None = None
        self.ha_addr = ""
        self.elections_won = 0
        self.slave_session: HASlave | None = None
        #: while master: the DataVersion of the topic / group documents last written to etcd
        self.published: dict[str, Any] = {}
        #: the store's read bound (commit-log offset): the highest confirm offset of this replica's masterships
        self.readable = 0
        self._hold: Any = None

    def key(self, name: str) -> str:
        return self.prefix + name

    # -- life ------------------------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        ctx = self.ctx
        ctx.store.set_read_only(f"replica {self.me} of {ctx.settings.brokerName} is not the elected master")
        ctx.store.read_bound = self.read_bound
        pull = ctx.kernel.state.find(PULL)
        self._hold = pull.hold if pull is not None else None
        await ctx.kernel.hooks.role_changed(ctx.kernel, RoleChange(Role.SLAVE, broker_id=self.me))
        async with EtcdClient(self.cfg.endpoints, timeout=max(0.5, self.cfg.lease_ttl / 3)) as etcd, trio.open_nursery() as nursery:
            self.etcd = etcd
            self._nursery = nursery
            try:
                await nursery.start(self._ha_listener)
                task_status.started()
                nursery.start_soon(self._lease_loop)
                nursery.start_soon(self._control_loop)
                await trio.sleep_forever()
            finally:
                # a clean stop: refuse writes, and give the lease back so that another replica is elected at once
                # rather than a TTL later
                ctx.store.set_read_only(f"replica {self.me} of {ctx.settings.brokerName} is stopping")
                if self.lease:
                    with trio.CancelScope(shield=True), trio.move_on_after(1):
                        try:
                            await etcd.revoke(self.lease)
                        except EtcdError as exc:
                            log.info("replica %d: lease not revoked at stop: %s", self.me, exc)

    async def _ha_listener(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        s = self.ctx.settings
        port = self.listen.listenPort + 1 if self.listen.listenPort else 0
        try:
            listeners = await trio.open_tcp_listeners(port, host=self.listen.listenHost)
        except OSError as exc:
            log.warning("HA port %d not available (%s): listening on a free port instead", port, exc)
            listeners = await trio.open_tcp_listeners(0, host=self.listen.listenHost)
        real = listeners[0].socket.getsockname()[1]
        self.ha_addr = f"{s.brokerIP2 or s.brokerIP1}:{real}"
        self.ctx.registration.ha_addr = self.ha_addr
        task_status.started()
        await trio.serve_listeners(self._serve_ha, listeners)

    async def _serve_ha(self, stream: trio.SocketStream) -> None:
        ha = self.ha
        if ha is None or self.role != MASTER:
            await stream.aclose()  # not the master (any more): a slave that still thinks so reconnects elsewhere
            return
        with trio.CancelScope() as scope:
            self._ha_scopes.add(scope)
            try:
                await ha.serve_autoswitch(stream)
            finally:
                self._ha_scopes.discard(scope)

    async def _lease_loop(self) -> None:
        etcd = self.etcd
        assert etcd is not None
        while True:
            try:
                if not self.lease:
                    self.lease = await etcd.grant(self.cfg.lease_ttl)
                else:
                    await etcd.keepalive_once(self.lease)
                await etcd.put(self.key(f"replicas/{self.me}"), json.dumps({
                    "addr": self.ctx.registration.broker_addr, "lastEpoch": self.last_epoch,
                    "maxOffset": self.ctx.store.commit_log.max_offset, "role": self.role}), lease=self.lease)
            except LeaseExpired:
                log.warning("replica %d: lease %x expired", self.me, self.lease)
                self.lease = 0
                if self.role == MASTER:
                    await self._depose("its lease expired")
                continue
            except EtcdUnavailable as exc:
                # an etcd outage: a master keeps its role and its set (writes go on), nobody can be elected
                log.info("replica %d: etcd unavailable (%s)", self.me, exc.message)
            except EtcdError as exc:
                log.warning("replica %d: lease: %s", self.me, exc)
            await trio.sleep(self.cfg.lease_ttl / 3)

    async def _control_loop(self) -> None:
        etcd = self.etcd
        assert etcd is not None
        await self.ctx.kernel.wait_listening("broker")
        while not self.ctx.started:
            await trio.sleep(0.05)
        while True:
            try:
                await self._step(etcd)
            except EtcdUnavailable as exc:
                log.debug("replica %d: etcd unavailable: %s", self.me, exc)
            except EtcdError as exc:
                log.warning("replica %d: %s", self.me, exc)
            await trio.sleep(self.cfg.poll)

    async def _step(self, etcd: EtcdClient) -> None:
        # from "epoch" on: every key but config/ (the topic and group documents, read only when elected)
        kvs = {kv.key.removeprefix(self.prefix): kv for kv in await etcd.range(self.prefix, start=self.key("epoch"))}
        master = kvs.get("master")
        if self.role == MASTER:
            if master is None or master.mod_revision != self.master_revision:
                await self._depose("its master key is gone or another replica's")
                return
            await self._maintain_syncset(etcd, kvs.get("syncset"))
            if self.role == MASTER:
                await self._publish_configs(etcd)
            return
        if master is None:
            await self._stop_following()
            if self.lease and self._eligible(kvs):
                await self._campaign(etcd, kvs)
            return
        record = master.json()
        if int(record["replicaId"]) == self.me:
            return  # our previous life's key, bound to a lease that is about to expire
        if self.following is None or self.following["epoch"] != record["epoch"]:
            await self._follow(etcd, record)

    # -- election --------------------------------------------------------------------------------------------

    def _eligible(self, kvs: dict[str, KeyValue]) -> bool:
        syncset = kvs.get("syncset")
        if syncset is None or self.cfg.unclean:
            return True  # the group's first election, or unclean elections allowed
        return self.me in syncset.json().get("members", [])

    async def _campaign(self, etcd: EtcdClient, kvs: dict[str, KeyValue]) -> None:
        store = self.ctx.store
        epoch_kv, syncset_kv = kvs.get("epoch"), kvs.get("syncset")
        epoch = (int(epoch_kv.value) if epoch_kv else 0) + 1
        start = store.commit_log.max_offset
        record = {"replicaId": self.me, "addr": self.ctx.registration.broker_addr, "haAddr": self.ha_addr,
                  "epoch": epoch}
        compares = [Compare.absent(self.key("master"))]
        compares.append(Compare.mod_revision(self.key("epoch"), epoch_kv.mod_revision) if epoch_kv
                        else Compare.absent(self.key("epoch")))
        compares.append(Compare.mod_revision(self.key("syncset"), syncset_kv.mod_revision) if syncset_kv
                        else Compare.absent(self.key("syncset")))
        result = await etcd.txn(compares, [
            put_op(self.key("master"), json.dumps(record), self.lease),
            put_op(self.key("epoch"), str(epoch)),
            put_op(self.key("syncset"), json.dumps({"epoch": epoch, "members": [self.me]})),
            put_op(self.key(f"epochs/{epoch}"), json.dumps({"startOffset": start, "replicaId": self.me})),
            get_op(self.key("epochs/"), prefix=True),
            get_op(self.key("config/topics")),
            get_op(self.key("config/groups")),
        ])
        if not result.succeeded:
            return
        # the topics and groups the last masters published, newer than what the metadata sync brought (a topic
        # created just before the old master died)
        self._adopt_configs(result.responses[-2], result.responses[-1])
        await trio.to_thread.run_sync(self.epoch_file.save, epoch)
        self.last_epoch = self.epoch = epoch
        # every key of one txn has the txn's revision as its mod_revision: the guard of later set changes
        self.master_revision = self.syncset_revision = result.revision
        self.synced = {self.me}
        self.pending = {}
        self.members = {self.me}
        # the history the handshake sends: every epoch up to ours, as etcd records them (ours included)
        entries = {e.epoch: e for e in _epoch_entries(result.responses[-3])}
        entries[epoch] = EpochEntry(epoch, start)
        self.ha = HAMaster(store, self.ha_settings, file_size=self.ctx.settings.mappedFileSizeCommitLog,
                           listen_host=self.listen.listenHost, epochs=EpochHistory(entries.values()),
                           confirm_source=self.read_bound)
        self.ha.on_confirm = self._confirm_advanced
        self.ha.set_members(())
        if self.notifier is not None:
            self.notifier.master = self.ha
        self.role = MASTER
        self.elections_won += 1
        store.set_read_only(None)
        await self.ctx.kernel.hooks.role_changed(self.ctx.kernel, RoleChange(Role.MASTER, broker_id=0, epoch=epoch))
        log.warning("replica %d of %s elected master of epoch %d at offset %d", self.me,
                    self.ctx.settings.brokerName, epoch, start)

    def _adopt_configs(self, topics: list[KeyValue], groups: list[KeyValue]) -> None:
        ctx = self.ctx
        self.published = {}
        for name, manager, kvs in (("topics", ctx.topics, topics), ("groups", ctx.groups, groups)):
            if not kvs:
                continue
            document = kvs[0].json()
            version = document.get("dataVersion") or {}
            if version != manager.data_version.to_json():
                manager.table.clear()
                manager.load(document)
                manager.data_version.timestamp = int(version.get("timestamp", 0))
                manager.data_version.counter = int(version.get("counter", 0))
                manager.persist()
                log.warning("replica %d: %s taken from etcd (%d entries)", self.me, name, len(manager.table))
            self.published[name] = manager.data_version.to_json()

    async def _publish_configs(self, etcd: EtcdClient) -> None:
        """The master writes its topic and subscription-group documents to etcd (guarded) when they changed."""
        ctx = self.ctx
        for name, manager in (("topics", ctx.topics), ("groups", ctx.groups)):
            version = manager.data_version.to_json()
            if self.published.get(name) == version:
                continue
            result = await etcd.txn([Compare.mod_revision(self.key("master"), self.master_revision)],
                                    [put_op(self.key(f"config/{name}"), json.dumps(manager.document()))])
            if not result.succeeded:
                await self._depose("its guard failed writing the configs")
                return
            self.published[name] = version

    async def _depose(self, why: str) -> None:
        if self.role != MASTER:
            return
        self.ctx.store.set_read_only(f"replica {self.me} of {self.ctx.settings.brokerName} is no longer the master ({why})")
        self.role = SLAVE
        self.master_revision = 0
        self.members = set()
        self.synced = set()
        self.pending = {}
        ha, self.ha = self.ha, None
        if self.notifier is not None:
            self.notifier.master = None
        for scope in list(self._ha_scopes):
            scope.cancel()
        if ha is not None:
            ha.set_members(None)  # every waiting send fails now
        await self.ctx.kernel.hooks.role_changed(self.ctx.kernel, RoleChange(Role.SLAVE, broker_id=self.me))
        log.warning("replica %d of %s deposed: %s", self.me, self.ctx.settings.brokerName, why)

    # -- following -------------------------------------------------------------------------------------------

    async def _stop_following(self) -> None:
        scope, self._follow_scope = self._follow_scope, None
        if scope is not None:
            scope.cancel()
            # until the HA connection is closed: no report (ack) leaves after this, no byte is appended
            await self._followed.wait()
            self.following = None
            self.slave_session = None
            log.info("replica %d: stopped following (no master)", self.me)
        # a record cut in the middle by the old master's end: drop its first bytes before standing. On the event
        # loop, like every store write: pulls must not read a consume queue while it is cut
        self.ctx.store.cut_partial_tail()

    async def _follow(self, etcd: EtcdClient, record: dict[str, Any]) -> None:
        await self._stop_following()
        epoch = int(record["epoch"])
        prior = self.last_epoch
        etcd_point: int | None = None
        if prior < epoch:
            # the first epoch after our own in the followed master's history: our log is right up to where it started
            entries = [e for e in _epoch_entries(await etcd.range(self.key("epochs/"))) if e.epoch <= epoch]
            etcd_point = truncation_point(history(entries), prior)
            if etcd_point is not None:
                self._truncate(etcd_point, "etcd")
                await trio.to_thread.run_sync(self.epoch_file.save, epoch)
                self.last_epoch = epoch
            # else: etcd holds no later epoch's start (its keys were removed): the master's handshake decides
        self.epoch = epoch
        self.following = record
        follower = AutoSwitchFollower(self.me, self._handshake_check(epoch, prior, etcd_point), self._confirmed)
        self.slave_session = HASlave(self.ctx.store, self.ha_settings, lambda: record["haAddr"], follower=follower)
        sync = MetadataSync(self.ctx, lambda: record["addr"], interval=self.cfg.sync_interval, first=self.cfg.sync_first)
        scope = self._follow_scope = trio.CancelScope()
        self._followed = trio.Event()
        assert self._nursery is not None
        self._nursery.start_soon(self._run_following, scope, self._followed, self.slave_session, sync)
        log.info("replica %d follows replica %s (epoch %d) at %s", self.me, record["replicaId"], epoch, record["haAddr"])

    def _truncate(self, point: int, source: str) -> None:
        store = self.ctx.store
        if store.commit_log.max_offset > point:
            dropped = store.truncate_replica(point)  # on the event loop: see _stop_following
            # what an unclean election cut away was never confirmed (a clean one cuts beyond the bound)
            self.readable = min(self.readable, store.commit_log.max_offset)
            log.warning("replica %d: %d bytes after offset %d were never part of the master's history (%s): "
                        "truncated", self.me, dropped, point, source)
            moved = self.ctx.offsets.clamp(store.get_max_offset_in_queue)
            if moved:
                log.warning("replica %d: %d consumer offsets pointed past the truncated queues: clamped", self.me, moved)

    def _handshake_check(self, epoch: int, prior: int, etcd_point: int | None) -> Any:
        """The check of the followed master's AutoSwitch handshake, before this replica's first ACK."""

        async def check(answer: MasterHandshake) -> str | None:
            if answer.epoch != epoch:
                return f"it answered epoch {answer.epoch}, etcd names epoch {epoch}"
            point = truncation_point(answer.entries, prior)
            if prior < epoch and self.last_epoch < epoch:
                # etcd had no start for a later epoch: the master's history decides where our log leaves it
                if point is not None:
                    self._truncate(point, "the master's handshake")
                await trio.to_thread.run_sync(self.epoch_file.save, epoch)
                self.last_epoch = epoch
            elif etcd_point is not None and point != etcd_point:
                return (f"its epoch entries put the end of epoch {prior}'s history at {point}, etcd's at {etcd_point} "
                        "(etcd is the authority)")
            own = self.ctx.store.commit_log.max_offset
            if own > answer.max_offset:
                return f"it holds {answer.max_offset} bytes of commit log, this replica {own}"
            return None

        return check

    def _confirmed(self, offset: int) -> None:
        """A transfer header's confirm offset (capped at our own end): the read bound of a follower."""
        if offset > self.readable:
            self.readable = offset
            if self._hold is not None:
                self._hold.bound_advanced()

    @staticmethod
    async def _run_following(scope: trio.CancelScope, done: trio.Event, ha: HASlave, sync: MetadataSync) -> None:
        try:
            with scope:
                async with trio.open_nursery() as nursery:
                    await nursery.start(ha.run)
                    await nursery.start(sync.run)
        finally:
            done.set()

    # -- the in-sync set -------------------------------------------------------------------------------------

    async def _maintain_syncset(self, etcd: EtcdClient, syncset: KeyValue | None) -> None:
        ha = self.ha
        if ha is None:
            return
        if syncset is not None and syncset.mod_revision != self.syncset_revision:
            await self._depose("the in-sync set was changed by someone else")
            return
        now = trio.current_time()
        top = self.ctx.store.commit_log.max_offset
        connected = {s.replica_id: s for s in ha.slaves
                     if s.replica_id is not None and s.request_offset >= 0 and not s.learner}
        behind = set()
        for member in self.members - {self.me}:
            slave = connected.get(member)
            if slave is not None and (slave.ack_offset >= top or now - slave.acked_at <= self.slave_timeout / 2):
                continue
            behind.add(member)
        # joining replicas that fell behind again leave quietly (etcd never listed them)
        for rid in behind & set(self.pending):
            del self.pending[rid]
            log.info("replica %d (master, epoch %d): replica %d did not catch up", self.me, self.epoch, rid)
        drop = behind & self.synced
        keep = self.synced - drop
        if drop and len(keep) >= self.cfg.min_in_sync:
            if await self._write_syncset(etcd, keep):
                self.synced = keep
                log.warning("replica %d (master, epoch %d): in-sync set shrunk to %s (dropped %s)", self.me,
                            self.epoch, sorted(keep), sorted(drop))
        # a slave close to the end joins in two steps: first every later send waits for it too (locally, at once),
        # then, once it has everything up to where the master's log stood at that moment (so every message
        # acknowledged without it), etcd lists it as electable
        for rid, slave in connected.items():
            if rid not in self.synced and rid not in self.pending and top - slave.ack_offset <= JOIN_LAG:
                self.pending[rid] = top
        self._set_waited(self.synced | set(self.pending))
        ready = {rid for rid, at in self.pending.items() if rid in connected and connected[rid].ack_offset >= at}
        if ready:
            grown = self.synced | ready
            if await self._write_syncset(etcd, grown):
                self.synced = grown
                for rid in ready:
                    self.pending.pop(rid, None)
                log.info("replica %d (master, epoch %d): in-sync set %s", self.me, self.epoch, sorted(grown))

    def _set_waited(self, members: set[int]) -> None:
        """The set a send waits for; the HA master's confirm offset follows it."""
        if members != self.members:
            self.members = members
            if self.ha is not None:
                self.ha.set_members(members - {self.me})

    async def _write_syncset(self, etcd: EtcdClient, members: set[int]) -> bool:
        try:
            result = await etcd.txn(
                [Compare.mod_revision(self.key("master"), self.master_revision),
                 Compare.mod_revision(self.key("syncset"), self.syncset_revision)],
                [put_op(self.key("syncset"), json.dumps({"epoch": self.epoch, "members": sorted(members)}))],
            )
        except EtcdError as exc:
            log.info("replica %d: in-sync set change not written: %s", self.me, exc)
            return False
        if not result.succeeded:
            await self._depose("its guard failed writing the in-sync set")
            return False
        self.syncset_revision = result.revision
        return True

    # -- the read bound --------------------------------------------------------------------------------------

    def read_bound(self) -> int:
        """The store's ``read_bound``: while master, the HA master's confirm offset (the log's end while no other
        replica must acknowledge), never moving back; otherwise the bound this replica last had as master."""
        ha = self.ha
        if ha is not None:
            confirm = ha.confirm_offset
            top = self.ctx.store.commit_log.max_offset
            if confirm > top:
                confirm = top  # alone in the set (ALL_ACKED): everything written is committed
            if confirm > self.readable:
                self.readable = confirm
        return self.readable

    def _confirm_advanced(self) -> None:
        if self._hold is not None:
            self._hold.bound_advanced()

    # -- the replicator interface ----------------------------------------------------------------------------

    async def wait_replicated(self, end_offset: int) -> PutMessageStatus:
        ha = self.ha
        if ha is None or self.role != MASTER:
            return PutMessageStatus.FLUSH_SLAVE_TIMEOUT  # stored, but this replica was deposed meanwhile
        if ha.confirm_offset >= end_offset or await ha.wait_acked(end_offset, self.slave_timeout):
            return PutMessageStatus.PUT_OK if self.ha is ha else PutMessageStatus.FLUSH_SLAVE_TIMEOUT
        return PutMessageStatus.FLUSH_SLAVE_TIMEOUT

    def status(self) -> dict[str, str]:
        out = {"failoverRole": self.role, "failoverEpoch": str(self.epoch), "failoverReplicaId": str(self.me),
               "failoverInSyncSet": ",".join(map(str, sorted(self.synced))),
               "failoverJoining": ",".join(map(str, sorted(self.pending)))}
        if self.ha is not None:
            lag = self.ha.lag()
            out.update({"haSlaveCount": str(len(lag)),
                        "haSlaves": ";".join(f"{x['slave']}@{x['ackOffset']}" for x in lag),
                        "haBehindBytes": str(max((x["behindBytes"] for x in lag), default=0))})
        elif self.slave_session is not None:
            own = self.ctx.store.commit_log.max_offset
            out.update({"haMasterAddress": self.slave_session.connected_to or "-",
                        "haBehindBytes": str(max(0, self.slave_session.master_offset - own))})
        return out


def _epoch_entries(kvs: list[KeyValue]) -> list[EpochEntry]:
    """``epochs/<n>`` records as epoch entries."""
    return [EpochEntry(int(kv.key.rsplit("/", 1)[1]), int(kv.json()["startOffset"])) for kv in kvs]


@hookimpl
def pyrmq_make_replicator(kernel: Any, broker: Any) -> Any:
    cfg = FailoverSettings.from_plugin(kernel.plugin_settings(PLUGIN), broker.settings)
    return FailoverReplicator(broker, cfg, kernel.state.find(NOTIFIER))
