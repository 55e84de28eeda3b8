"""A failover group's records in etcd and on disk: the group's keys, the ``epochs/<n>`` records as epoch entries, the
replica's epoch file, and the master's guard.

Keys under ``/pyrmq/v1/<cluster>/<brokerName>/`` (docs/replication.md, "Automatic failover on etcd"):

- ``master``   {replicaId, addr, haAddr, epoch}, bound to the master's lease (gone TTL seconds after it stops);
- ``epoch``    the last epoch (a counter, one per election);
- ``syncset``  {epoch, members}: the replicas holding every acknowledged message; only they may be elected;
- ``epochs/<n>`` {startOffset, replicaId}: where epoch n's history starts (the elected replica's max offset);
- ``replicas/<id>`` {addr, lastEpoch, maxOffset, role}, bound to each replica's lease (for tools);
- ``config/topics``, ``config/groups``: the master's topic and subscription-group documents.
"""

from __future__ import annotations

import json
import os

import trio

from pyrmq.plugins.broker.failover.etcd import KeyValue
from pyrmq.plugins.broker.ha.autoswitch import EpochEntry


class GroupKeys:
    """The etcd keys of one broker group."""

    def __init__(self, cluster: str, broker_name: str) -> None:
        self.prefix = f"/pyrmq/v1/{cluster}/{broker_name}/"

    def __call__(self, name: str) -> str:
        return self.prefix + name

    def name(self, kv: KeyValue) -> str:
        """A key of the group without the group's prefix (``master``, ``epochs/3``)."""
        return kv.key.removeprefix(self.prefix)


def epoch_entries(kvs: list[KeyValue]) -> list[EpochEntry]:
    """``epochs/<n>`` records as epoch entries."""
    return [EpochEntry(int(kv.key.rsplit("/", 1)[1]), int(kv.json()["startOffset"])) for kv in kvs]


class GuardLost(Exception):
    """A change the master writes under its guard ("``master`` is still my key") was refused: someone else changed
    the group; the master steps down. The message says what it was writing."""


class EpochFile:
    """``config/failover.json``: the last epoch whose history this replica's commit log follows (:attr:`last`)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.last = self.load()

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

    async def record(self, epoch: int) -> None:
        """This replica's log follows ``epoch``'s history from now on: saved (fsynced, in a worker thread), then
        :attr:`last`."""
        await trio.to_thread.run_sync(self.save, epoch)
        self.last = epoch
