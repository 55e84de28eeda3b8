"""Topics and subscription groups across a failover: the master writes its documents to etcd (``config/topics``,
``config/groups``, under its guard, when their DataVersion changed), and the next master takes them in its winning
election txn, so it knows a topic created after the last metadata sync."""

from __future__ import annotations

import json
import logging
from typing import Any

from pyrmq.plugins.broker.core import BrokerContext
from pyrmq.plugins.broker.failover.etcd import Compare, EtcdClient, KeyValue, put_op
from pyrmq.plugins.broker.failover.group import GroupKeys, GuardLost

log = logging.getLogger("pyrmq.broker.failover")


class ConfigDocuments:
    """The broker's topic and group documents as the master publishes them."""

    def __init__(self, ctx: BrokerContext, keys: GroupKeys, me: int) -> None:
        self.ctx = ctx
        self.keys = keys
        self.me = me
        #: while master: the DataVersion of each document last written to etcd
        self.published: dict[str, Any] = {}

    def _managers(self) -> tuple[tuple[str, Any], ...]:
        return (("topics", self.ctx.topics), ("groups", self.ctx.groups))

    def adopt(self, topics: list[KeyValue], groups: list[KeyValue]) -> None:
        """Elected: take the documents the last masters published (the txn's reads) when their DataVersion differs
        from ours (newer than what the metadata sync brought)."""
        self.published = {}
        for (name, manager), kvs in zip(self._managers(), (topics, groups)):
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

    async def publish(self, etcd: EtcdClient, master_revision: int) -> None:
        """While master: write the documents that changed, guarded; :class:`GuardLost` when the guard failed."""
        for name, manager in self._managers():
            version = manager.data_version.to_json()
            if self.published.get(name) == version:
                continue
            result = await etcd.txn([Compare.mod_revision(self.keys("master"), master_revision)],
                                    [put_op(self.keys(f"config/{name}"), json.dumps(manager.document()))])
            if not result.succeeded:
                raise GuardLost("its guard failed writing the configs")
            self.published[name] = version
