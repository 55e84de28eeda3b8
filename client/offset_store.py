"""Where a consumer's progress lives (Java ``RemoteBrokerOffsetStore`` / ``LocalFileOffsetStore``; spec 3.5, 7.4).

Clustering consumers commit to the broker that hosts the queue (UPDATE_CONSUMER_OFFSET, every 5 s and at
shutdown); broadcasting consumers keep the offsets in a local JSON file, in the shape Java writes
(``{"offsetTable":{{"brokerName":..,"queueId":..,"topic":..}:offset}}``, fastjson object keys, spec 4.6).
"""

from __future__ import annotations

import abc
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from pyrmq.client import api
from pyrmq.client.errors import BrokerError
from pyrmq.client.message import MessageQueue
from pyrmq.remoting import fastjson
from pyrmq.remoting.errors import RemotingError

if TYPE_CHECKING:  # pragma: no cover
    from pyrmq.client.instance import ClientInstance

__all__ = ["OffsetStore", "RemoteOffsetStore", "LocalOffsetStore", "default_offset_dir"]

log = logging.getLogger("pyrmq.client.offsets")


def default_offset_dir() -> Path:
    return Path(os.environ.get("PYRMQ_OFFSET_STORE_DIR") or Path.home() / ".pyrmq" / "offsets")


class OffsetStore(abc.ABC):
    """Offsets in memory (mq -> next offset to consume) plus a backing store."""

    def __init__(self, instance: ClientInstance, group: str) -> None:
        self.instance = instance
        self.group = group
        self.table: dict[MessageQueue, int] = {}
        self._persisted: dict[MessageQueue, int] = {}

    def update(self, mq: MessageQueue, offset: int, *, increase_only: bool = True) -> None:
        if offset < 0:
            return
        current = self.table.get(mq)
        if current is None or not increase_only or offset > current:
            self.table[mq] = offset

    def read_memory(self, mq: MessageQueue) -> int:
        return self.table.get(mq, -1)

    def remove(self, mq: MessageQueue) -> None:
        self.table.pop(mq, None)
        self._persisted.pop(mq, None)

    @abc.abstractmethod
    async def read_store(self, mq: MessageQueue) -> int:
        """The stored offset (-1 when none); also cached in memory."""

    @abc.abstractmethod
    async def persist(self, mqs: Iterable[MessageQueue] | None = None) -> None:
        """Write the offsets of ``mqs`` (all when None) that changed since the last write."""

    async def persist_one(self, mq: MessageQueue) -> None:
        await self.persist([mq])


class RemoteOffsetStore(OffsetStore):
    async def read_store(self, mq: MessageQueue) -> int:
        addr = await self.instance.broker_addr_for(mq, master_only=False)
        offset = await api.query_consumer_offset(self.instance, addr, self.group, mq)
        if offset >= 0:
            self.table[mq] = offset
            self._persisted[mq] = offset
        return offset

    async def persist(self, mqs: Iterable[MessageQueue] | None = None) -> None:
        todo = [(mq, off) for mq, off in self.table.items() if (mqs is None or mq in mqs) and self._persisted.get(mq) != off]
        if not todo:
            return
        async with trio.open_nursery() as nursery:
            for mq, off in todo:
                nursery.start_soon(self._commit, mq, off)

    async def _commit(self, mq: MessageQueue, offset: int) -> None:
        try:
            addr = await self.instance.broker_addr_for(mq, master_only=False)
            await api.update_consumer_offset(self.instance, addr, self.group, mq, offset)
            self._persisted[mq] = offset
        except (RemotingError, BrokerError) as exc:
            log.warning("%s: committing offset %d of %s failed: %s", self.group, offset, mq, exc)
        except Exception as exc:  # noqa: BLE001 - e.g. the route is gone; try again next round
            log.warning("%s: committing offset %d of %s failed: %r", self.group, offset, mq, exc)


class LocalOffsetStore(OffsetStore):
    """Broadcasting: one file per (client, group)."""

    def __init__(self, instance: ClientInstance, group: str, directory: str | os.PathLike[str] | None = None,
                 name: str | None = None) -> None:
        super().__init__(instance, group)
        base = Path(directory) if directory is not None else default_offset_dir()
        owner = name or f"{instance.client_ip}@{instance.config.instance_name or 'DEFAULT'}"
        self.path = base / owner / group / "offsets.json"
        self._loaded = False

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        for candidate in (self.path, self.path.with_name("offsets.json.bak")):
            try:
                text = candidate.read_text(encoding="utf-8")
            except FileNotFoundError:
                continue
            try:
                table = fastjson.loads(text).get("offsetTable") or {}
                for key, value in table.items():
                    self._persisted[MessageQueue.from_json(key)] = int(value)
                return
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                log.warning("%s: unreadable offset file %s: %s", self.group, candidate, exc)

    async def read_store(self, mq: MessageQueue) -> int:
        self._load()
        offset = self._persisted.get(mq, -1)
        if offset >= 0:
            self.table[mq] = offset
        return offset

    async def persist(self, mqs: Iterable[MessageQueue] | None = None) -> None:
        self._load()
        changed = False
        for mq, off in self.table.items():
            if self._persisted.get(mq) != off:
                self._persisted[mq] = off
                changed = True
        if changed:
            await trio.to_thread.run_sync(self._write)

    def _write(self) -> None:
        doc = {"offsetTable": {fastjson.ObjectKey(mq.to_json()): off for mq, off in sorted(self._persisted.items())}}
        text = fastjson.dumps_text(doc, style=fastjson.FASTJSON)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name("offsets.json.tmp")
        tmp.write_text(text, encoding="utf-8")
        if self.path.exists():
            os.replace(self.path, self.path.with_name("offsets.json.bak"))
        os.replace(tmp, self.path)
