"""The commit rule (5.x ``allAckInSyncStateSet``): a SYNC_MASTER send is answered SEND_OK only once every other member
of the in-sync set acknowledged it. The master keeps the set: it adds a caught-up slave (locally first, then in
etcd) and drops one that stopped acknowledging (in etcd first, guarded by "``master`` is still mine", then locally),
never below ``minInSyncReplicas``. So the local set always contains etcd's: no message is acknowledged without every
replica that could be elected. During an etcd outage writes go on with the set as it is.
"""

from __future__ import annotations

import json
import logging

import trio

from pyrmq.plugins.broker.failover.etcd import Compare, EtcdClient, EtcdError, KeyValue, put_op
from pyrmq.plugins.broker.failover.group import GroupKeys, GuardLost
from pyrmq.plugins.broker.failover.visibility import ReadBound
from pyrmq.plugins.broker.ha.master import HAMaster, SlaveConnection

log = logging.getLogger("pyrmq.broker.failover")

#: a slave this close to the master's end starts joining the in-sync set (sends wait for it from then on)
JOIN_LAG = 1024 * 1024


class InSyncSet:
    """The in-sync set of one mastership (epoch): etcd's (:attr:`synced`), the replicas joining it (:attr:`pending`:
    id -> the offset they must acknowledge first), and the set the sends wait for (:attr:`members`: both)."""

    def __init__(self, me: int, epoch: int, *, revision: int, ha: HAMaster, keys: GroupKeys, min_in_sync: int,
                 slave_timeout: float, bound: ReadBound) -> None:
        self.me = me
        self.epoch = epoch
        #: our ``master`` key's mod_revision (the guard of every set change), and the ``syncset`` key's
        self.master_revision = revision
        self.revision = revision
        self.ha = ha
        self.keys = keys
        self.min_in_sync = min_in_sync
        self.slave_timeout = slave_timeout
        self.bound = bound
        self.synced: set[int] = {me}
        self.pending: dict[int, int] = {}
        self.members: set[int] = {me}
        #: the mastership ended (deposed): nothing is changed or written any more
        self.closed = False

    def close(self) -> None:
        """Deposed: a look at the slaves still under way changes nothing from now on."""
        self.closed = True

    async def maintain(self, etcd: EtcdClient, syncset: KeyValue | None) -> None:
        """One look at the connected slaves: drop the members that stopped acknowledging, let the caught-up ones
        join. Raises :class:`GuardLost` when the set was changed by someone else or a guarded write failed."""
        if syncset is not None and syncset.mod_revision != self.revision:
            raise GuardLost("the in-sync set was changed by someone else")
        now = trio.current_time()
        top = self.ha.store.commit_log.max_offset
        connected: dict[int, SlaveConnection] = {
            s.replica_id: s for s in self.ha.slaves if s.replica_id is not None and s.request_offset >= 0 and not s.learner}
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
        if drop and len(keep) >= self.min_in_sync:
            if await self._write(etcd, keep):
                self.synced = keep
                log.warning("replica %d (master, epoch %d): in-sync set shrunk to %s (dropped %s)", self.me,
                            self.epoch, sorted(keep), sorted(drop))
        # a slave close to the end joins in two steps: first every later send waits for it too (locally, at once),
        # then, once it has everything up to where the master's log stood at that moment (so every message
        # acknowledged without it), etcd lists it as electable
        for rid, slave in connected.items():
            if rid not in self.synced and rid not in self.pending and top - slave.ack_offset <= JOIN_LAG:
                self.pending[rid] = top
        self.wait_for(self.synced | set(self.pending))
        ready = {rid for rid, at in self.pending.items() if rid in connected and connected[rid].ack_offset >= at}
        if ready:
            grown = self.synced | ready
            if await self._write(etcd, grown):
                self.synced = grown
                for rid in ready:
                    self.pending.pop(rid, None)
                log.info("replica %d (master, epoch %d): in-sync set %s", self.me, self.epoch, sorted(grown))

    def wait_for(self, members: set[int]) -> None:
        """The set a send waits for; the HA master's confirm offset, and the read bound, follow it."""
        if members != self.members and not self.closed:
            self.members = members
            self.ha.set_members(members - {self.me})
            self.bound.master_confirmed(self.ha)

    async def _write(self, etcd: EtcdClient, members: set[int]) -> bool:
        """``syncset`` = ``members``, guarded; False when etcd could not be asked (the set stays as it is) or the
        mastership ended meanwhile."""
        if self.closed:
            return False
        try:
            result = await etcd.txn(
                [Compare.mod_revision(self.keys("master"), self.master_revision),
                 Compare.mod_revision(self.keys("syncset"), self.revision)],
                [put_op(self.keys("syncset"), json.dumps({"epoch": self.epoch, "members": sorted(members)}))],
            )
        except EtcdError as exc:
            log.info("replica %d: in-sync set change not written: %s", self.me, exc)
            return False
        if self.closed:
            return False
        if not result.succeeded:
            raise GuardLost("its guard failed writing the in-sync set")
        self.revision = result.revision
        return True
