"""Following another replica's mastership: truncate the own commit log to where the first epoch after the own last
one started in the followed master's history (a returning master's unreplicated tail), remember that epoch, then
run the HA client (AutoSwitch wire) and the metadata sync against the master.

etcd's ``epochs/`` records are the authority: the master's handshake repeats its history, and a master whose entries
disagree with etcd (or that answers another epoch, or holds less log than this replica) is not followed; its
entries decide only where etcd has no later epoch recorded (its keys were removed by hand).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from pyrmq.plugins.broker.core import BrokerContext
from pyrmq.plugins.broker.failover.etcd import EtcdClient
from pyrmq.plugins.broker.failover.group import EpochFile, GroupKeys, epoch_entries
from pyrmq.plugins.broker.failover.settings import FailoverConfig
from pyrmq.plugins.broker.failover.visibility import ReadBound
from pyrmq.plugins.broker.ha.autoswitch import MasterHandshake, history, truncation_point
from pyrmq.plugins.broker.ha.settings import HASettings
from pyrmq.plugins.broker.ha.slave import AutoSwitchFollower, HASlave, MetadataSync

log = logging.getLogger("pyrmq.broker.failover")


class Following:
    """The master this replica follows (:attr:`record`, None: none) and the HA client + metadata sync doing it."""

    def __init__(self, ctx: BrokerContext, cfg: FailoverConfig, ha_settings: HASettings, keys: GroupKeys,
                 epochs: EpochFile, bound: ReadBound) -> None:
        self.ctx = ctx
        self.cfg = cfg
        self.me = cfg.replica_id
        self.ha_settings = ha_settings
        self.keys = keys
        self.epochs = epochs
        self.bound = bound
        #: the ``master`` record followed, and the HA client's session while following
        self.record: dict[str, Any] | None = None
        self.session: HASlave | None = None
        self._scope: trio.CancelScope | None = None
        self._done = trio.Event()
        self._nursery: trio.Nursery | None = None

    def start(self, nursery: trio.Nursery) -> None:
        """Where the following tasks run (the replicator's nursery)."""
        self._nursery = nursery

    async def stop(self) -> None:
        """Stop following (no more acks to the old master) and cut a record its master never finished sending."""
        scope, self._scope = self._scope, None
        if scope is not None:
            scope.cancel()
            # until the HA connection is closed: no report (ack) leaves after this, no byte is appended
            await self._done.wait()
            self.record = None
            self.session = None
            log.info("replica %d: stopped following (no master)", self.me)
        # a record cut in the middle by the old master's end: drop its first bytes before standing. On the event
        # loop, like every store write: pulls must not read a consume queue while it is cut
        self.ctx.store.cut_partial_tail()

    async def follow(self, etcd: EtcdClient, record: dict[str, Any]) -> None:
        """Follow the master of ``record`` (etcd's ``master`` key)."""
        await self.stop()
        epoch = int(record["epoch"])
        prior = self.epochs.last
        etcd_point: int | None = None
        if prior < epoch:
            # the first epoch after our own in the followed master's history: our log is right up to where it started
            entries = [e for e in epoch_entries(await etcd.range(self.keys("epochs/"))) if e.epoch <= epoch]
            etcd_point = truncation_point(history(entries), prior)
            if etcd_point is not None:
                self._truncate(etcd_point, "etcd")
                await self.epochs.record(epoch)
            # else: etcd holds no later epoch's start (its keys were removed): the master's handshake decides
        self.record = record
        follower = AutoSwitchFollower(self.me, self._handshake_check(epoch, prior, etcd_point), self.bound.follower_confirmed)
        self.session = HASlave(self.ctx.store, self.ha_settings, lambda: record["haAddr"], follower=follower)
        sync = MetadataSync(self.ctx, lambda: record["addr"], interval=self.cfg.sync_interval, first=self.cfg.sync_first)
        scope = self._scope = trio.CancelScope()
        self._done = trio.Event()
        assert self._nursery is not None
        self._nursery.start_soon(self._run, scope, self._done, self.session, sync)
        log.info("replica %d follows replica %s (epoch %d) at %s", self.me, record["replicaId"], epoch, record["haAddr"])

    def _truncate(self, point: int, source: str) -> None:
        store = self.ctx.store
        if store.commit_log.max_offset > point:
            # on the event loop (see stop); the store lowers its read bound with its end
            dropped = store.truncate_replica(point)
            log.warning("replica %d: %d bytes after offset %d were never part of the master's history (%s): "
                        "truncated", self.me, dropped, point, source)
            moved = self.ctx.offsets.clamp(store.get_max_offset_in_queue)
            if moved:
                log.warning("replica %d: %d consumer offsets pointed past the truncated queues: clamped", self.me, moved)

    def _handshake_check(self, epoch: int, prior: int, etcd_point: int | None
                         ) -> Callable[[MasterHandshake], Awaitable[str | None]]:
        """The check of the followed master's AutoSwitch handshake, before this replica's first ACK."""

        async def check(answer: MasterHandshake) -> str | None:
            if answer.epoch != epoch:
                return f"it answered epoch {answer.epoch}, etcd names epoch {epoch}"
            point = truncation_point(answer.entries, prior)
            if prior < epoch and self.epochs.last < epoch:
                # etcd had no start for a later epoch: the master's history decides where our log leaves it
                if point is not None:
                    self._truncate(point, "the master's handshake")
                await self.epochs.record(epoch)
            elif etcd_point is not None and point != etcd_point:
                return (f"its epoch entries put the end of epoch {prior}'s history at {point}, etcd's at {etcd_point} "
                        "(etcd is the authority)")
            own = self.ctx.store.commit_log.max_offset
            if own > answer.max_offset:
                return f"it holds {answer.max_offset} bytes of commit log, this replica {own}"
            return None

        return check

    @staticmethod
    async def _run(scope: trio.CancelScope, done: trio.Event, ha: HASlave, sync: MetadataSync) -> None:
        try:
            with scope:
                async with trio.open_nursery() as nursery:
                    await nursery.start(ha.run)
                    await nursery.start(sync.run)
        finally:
            done.set()

    def status(self) -> dict[str, str]:
        """Runtime-info entries while following: the master's HA address and how far behind this replica is."""
        session = self.session
        if session is None:
            return {}
        own = self.ctx.store.commit_log.max_offset
        return {"haMasterAddress": session.connected_to or "-",
                "haBehindBytes": str(max(0, session.master_offset - own))}
