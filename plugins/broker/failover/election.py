"""Election: when the group has no ``master`` key, a replica in ``syncset`` (or any, before the group's first election
or with ``uncleanElection``) runs one etcd txn: ``master`` absent, ``epoch`` and ``syncset`` unchanged -> write
``master`` (bound to its lease), ``epoch`` + 1, ``syncset`` {itself}, ``epochs/<new>`` {its max offset}, and read
the history (``epochs/``) and the last masters' topic and group documents in the same txn."""

from __future__ import annotations

import json
from typing import Any

import attrs

from pyrmq.plugins.broker.failover.etcd import Compare, EtcdClient, KeyValue, get_op, put_op
from pyrmq.plugins.broker.failover.group import GroupKeys, epoch_entries
from pyrmq.plugins.broker.ha.autoswitch import EpochEntry, EpochHistory


@attrs.frozen
class Won:
    """A won election: the new epoch, the txn's revision (the ``master`` and ``syncset`` keys' mod_revision: the
    guard of later set changes), where the epoch's history starts, the history up to it, the published configs."""

    epoch: int
    revision: int
    start: int
    history: EpochHistory
    topics: list[KeyValue]
    groups: list[KeyValue]


class Election:
    def __init__(self, me: int, keys: GroupKeys, *, unclean: bool) -> None:
        self.me = me
        self.keys = keys
        self.unclean = unclean

    def eligible(self, kvs: dict[str, KeyValue]) -> bool:
        """Whether this replica may run for master, given the group's keys."""
        syncset = kvs.get("syncset")
        if syncset is None or self.unclean:
            return True  # the group's first election, or unclean elections allowed
        return self.me in syncset.json().get("members", [])

    async def campaign(self, etcd: EtcdClient, kvs: dict[str, KeyValue], *, record: dict[str, Any], lease: int,
                       start: int) -> Won | None:
        """The election txn with ``record`` as the ``master`` key and ``start`` (this replica's max offset) as the
        new epoch's start; None when another replica was faster or the keys changed meanwhile."""
        key = self.keys
        epoch_kv, syncset_kv = kvs.get("epoch"), kvs.get("syncset")
        epoch = (int(epoch_kv.value) if epoch_kv else 0) + 1
        compares = [Compare.absent(key("master"))]
        compares.append(Compare.mod_revision(key("epoch"), epoch_kv.mod_revision) if epoch_kv
                        else Compare.absent(key("epoch")))
        compares.append(Compare.mod_revision(key("syncset"), syncset_kv.mod_revision) if syncset_kv
                        else Compare.absent(key("syncset")))
        result = await etcd.txn(compares, [
            put_op(key("master"), json.dumps({"replicaId": self.me, **record, "epoch": epoch}), lease),
            put_op(key("epoch"), str(epoch)),
            put_op(key("syncset"), json.dumps({"epoch": epoch, "members": [self.me]})),
            put_op(key(f"epochs/{epoch}"), json.dumps({"startOffset": start, "replicaId": self.me})),
            get_op(key("epochs/"), prefix=True),
            get_op(key("config/topics")),
            get_op(key("config/groups")),
        ])
        if not result.succeeded:
            return None
        # the history the handshake sends: every epoch up to ours, as etcd records them (ours included)
        entries = {e.epoch: e for e in epoch_entries(result.responses[-3])}
        entries[epoch] = EpochEntry(epoch, start)
        # every key of one txn has the txn's revision as its mod_revision
        return Won(epoch, result.revision, start, EpochHistory(entries.values()), result.responses[-2],
                   result.responses[-1])
