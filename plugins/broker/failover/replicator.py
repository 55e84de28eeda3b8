"""The failover replicator (``pyrmq_make_replicator``'s answer in the failover bundle): one replica of a group whose
master etcd elects. It holds the replica's lease, reads the group's keys every ``pollInterval`` and acts:

- no ``master``: stop following, and if eligible run for master (:mod:`.election`); the winner accepts writes,
  announces ``pyrmq_role_changed`` (MASTER, broker id 0, the epoch: the name server's fence) and serves slaves on
  its HA port with the in-sync set (:mod:`.syncset`) deciding when a send is committed;
- another replica's ``master``: follow it (:mod:`.following`);
- its own ``master`` gone or replaced, or the lease lost: back to read-only, SLAVE announced (deposed).

A replica starts read-only (its store refuses new messages, takes replicated ones) and as a SLAVE; the store's read
bound follows the role (:mod:`.visibility`). This replicator changes roles (``changes_roles``): the broker core
announces nothing itself, and services that run on the master only follow ``pyrmq_role_changed``.
"""

from __future__ import annotations

import json
import logging
import os

import trio

from pyrmq.kernel.types import Role, RoleChange
from pyrmq.plugins.broker.core import BrokerContext
from pyrmq.plugins.broker.failover.configs import ConfigDocuments
from pyrmq.plugins.broker.failover.election import Election, Won
from pyrmq.plugins.broker.failover.etcd import EtcdClient, EtcdError, EtcdUnavailable, KeyValue, LeaseExpired
from pyrmq.plugins.broker.failover.following import Following
from pyrmq.plugins.broker.failover.group import EpochFile, GroupKeys, GuardLost
from pyrmq.plugins.broker.failover.settings import FailoverConfig
from pyrmq.plugins.broker.failover.syncset import InSyncSet
from pyrmq.plugins.broker.failover.visibility import ReadBound
from pyrmq.plugins.broker.ha.master import HAMaster
from pyrmq.plugins.broker.ha.plugin import Replication
from pyrmq.plugins.broker.ha.settings import HASettings
from pyrmq.plugins.builtin.remoting_server import BrokerListenSettings
from pyrmq.store.results import PutMessageStatus

log = logging.getLogger("pyrmq.broker.failover")

MASTER = "MASTER"
SLAVE = "SLAVE"


class FailoverReplicator:
    """One replica of a failover group: its lease, the control loop, and the HA master or slave it currently is."""

    #: this replicator announces the broker's role (``pyrmq_role_changed``): elected, deposed
    changes_roles = True

    def __init__(self, ctx: BrokerContext, cfg: FailoverConfig, replication: Replication | None) -> None:
        self.ctx = ctx
        self.cfg = cfg
        #: the HA plugin's registered object: its append wake-up serves our HA master too (None: not in the bundle)
        self.replication = replication
        s = ctx.settings
        self.ha_settings = ctx.kernel.settings(HASettings)
        self.listen = ctx.kernel.settings(BrokerListenSettings)
        self.me = cfg.replica_id
        self.keys = GroupKeys(s.brokerClusterName, s.brokerName)
        self.slave_timeout = self.ha_settings.slaveTimeout / 1000
        self.epochs = EpochFile(os.path.join(str(s.store_root), "config", "failover.json"))
        self.bound = ReadBound(ctx.store)
        self.election = Election(self.me, self.keys, unclean=cfg.unclean)
        self.following = Following(ctx, cfg, self.ha_settings, self.keys, self.epochs, self.bound)
        self.configs = ConfigDocuments(ctx, self.keys, self.me)
        self.role = SLAVE
        #: the epoch of the master this replica is or follows (0: none yet)
        self.epoch = 0
        self.lease = 0
        self.etcd: EtcdClient | None = None
        #: while master: the HA master serving the slaves and the in-sync set
        self.ha: HAMaster | None = None
        self.syncset: InSyncSet | None = None
        self._ha_scopes: set[trio.CancelScope] = set()
        self.ha_addr = ""
        self.elections_won = 0

    @property
    def last_epoch(self) -> int:
        return self.epochs.last

    # -- life ------------------------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        ctx = self.ctx
        ctx.store.set_read_only(f"replica {self.me} of {ctx.settings.brokerName} is not the elected master")
        self.bound.starting()
        await ctx.kernel.hooks.role_changed(ctx.kernel, RoleChange(Role.SLAVE, broker_id=self.me))
        async with EtcdClient(self.cfg.endpoints, timeout=max(0.5, self.cfg.lease_ttl / 3)) as etcd, trio.open_nursery() as nursery:
            self.etcd = etcd
            self.following.start(nursery)
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
        # what the registration tells the name servers (the replicator hook's contract: haServerAddr)
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
                await etcd.put(self.keys(f"replicas/{self.me}"), json.dumps({
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
        kvs = {self.keys.name(kv): kv for kv in await etcd.range(self.keys.prefix, start=self.keys("epoch"))}
        master = kvs.get("master")
        if self.role == MASTER:
            await self._as_master(etcd, master, kvs.get("syncset"))
            return
        if master is None:
            await self.following.stop()
            if self.lease and self.election.eligible(kvs):
                await self._campaign(etcd, kvs)
            return
        record = master.json()
        if int(record["replicaId"]) == self.me:
            return  # our previous life's key, bound to a lease that is about to expire
        followed = self.following.record
        if followed is None or followed["epoch"] != record["epoch"]:
            await self.following.follow(etcd, record)
            self.epoch = int(record["epoch"])

    # -- master ----------------------------------------------------------------------------------------------

    async def _as_master(self, etcd: EtcdClient, master: KeyValue | None, syncset: KeyValue | None) -> None:
        assert self.syncset is not None
        if master is None or master.mod_revision != self.syncset.master_revision:
            await self._depose("its master key is gone or another replica's")
            return
        current = self.syncset
        try:
            await current.maintain(etcd, syncset)
            if self.syncset is current:  # still master (the lease loop may have deposed us meanwhile)
                await self.configs.publish(etcd, current.master_revision)
        except GuardLost as exc:
            if self.syncset is current:
                await self._depose(str(exc))

    async def _campaign(self, etcd: EtcdClient, kvs: dict[str, KeyValue]) -> None:
        store = self.ctx.store
        start = store.commit_log.max_offset
        won = await self.election.campaign(
            etcd, kvs, record={"addr": self.ctx.registration.broker_addr, "haAddr": self.ha_addr},
            lease=self.lease, start=start)
        if won is not None:
            await self._elected(won)

    async def _elected(self, won: Won) -> None:
        store = self.ctx.store
        # the topics and groups the last masters published, newer than what the metadata sync brought (a topic
        # created just before the old master died)
        self.configs.adopt(won.topics, won.groups)
        await self.epochs.record(won.epoch)
        self.epoch = won.epoch
        ha = self.ha = HAMaster(store, self.ha_settings, file_size=self.ctx.settings.mappedFileSizeCommitLog,
                                listen_host=self.listen.listenHost, epochs=won.history,
                                confirm_source=self.bound.for_followers)
        ha.on_confirm = lambda: self.bound.master_confirmed(ha)
        self.syncset = InSyncSet(self.me, won.epoch, revision=won.revision, ha=ha, keys=self.keys,
                                 min_in_sync=self.cfg.min_in_sync, slave_timeout=self.slave_timeout, bound=self.bound)
        ha.set_members(())  # alone in the set: every append is committed (no read bound)
        if self.replication is not None:
            self.replication.wake_on_append(ha)
        self.role = MASTER
        self.elections_won += 1
        store.set_read_only(None)
        await self.ctx.kernel.hooks.role_changed(self.ctx.kernel, RoleChange(Role.MASTER, broker_id=0, epoch=won.epoch))
        log.warning("replica %d of %s elected master of epoch %d at offset %d", self.me,
                    self.ctx.settings.brokerName, won.epoch, won.start)

    async def _depose(self, why: str) -> None:
        if self.role != MASTER:
            return
        self.ctx.store.set_read_only(f"replica {self.me} of {self.ctx.settings.brokerName} is no longer the master ({why})")
        self.role = SLAVE
        if self.syncset is not None:
            self.syncset.close()
        self.syncset = None
        ha, self.ha = self.ha, None
        if self.replication is not None:
            self.replication.wake_on_append(None)
        for scope in list(self._ha_scopes):
            scope.cancel()
        self.bound.deposed()
        if ha is not None:
            ha.set_members(None)  # every waiting send fails now
        await self.ctx.kernel.hooks.role_changed(self.ctx.kernel, RoleChange(Role.SLAVE, broker_id=self.me))
        log.warning("replica %d of %s deposed: %s", self.me, self.ctx.settings.brokerName, why)

    # -- the replicator interface ----------------------------------------------------------------------------

    async def wait_replicated(self, end_offset: int) -> PutMessageStatus:
        ha = self.ha
        if ha is None or self.role != MASTER:
            return PutMessageStatus.FLUSH_SLAVE_TIMEOUT  # stored, but this replica was deposed meanwhile
        if ha.confirm_offset >= end_offset or await ha.wait_acked(end_offset, self.slave_timeout):
            return PutMessageStatus.PUT_OK if self.ha is ha else PutMessageStatus.FLUSH_SLAVE_TIMEOUT
        return PutMessageStatus.FLUSH_SLAVE_TIMEOUT

    def status(self) -> dict[str, str]:
        syncset = self.syncset
        out = {"failoverRole": self.role, "failoverEpoch": str(self.epoch), "failoverReplicaId": str(self.me),
               "failoverInSyncSet": ",".join(map(str, sorted(syncset.synced if syncset else ()))),
               "failoverJoining": ",".join(map(str, sorted(syncset.pending if syncset else ())))}
        if self.ha is not None:
            lag = self.ha.lag()
            out.update({"haSlaveCount": str(len(lag)),
                        "haSlaves": ";".join(f"{x['slave']}@{x['ackOffset']}" for x in lag),
                        "haBehindBytes": str(max((x["behindBytes"] for x in lag), default=0))})
        else:
            out.update(self.following.status())
        return out
