"""Writing POP's records to the revive topic, and waiting until they are as durable as a send would be.

Records are appended straight to the commit log (``MessageStore.put_one``: no put interceptors, no timer), so they
are replicated and recovered with it. A POP or ACK answer goes out once its record is durable the way the broker's
sends are: at once with ASYNC_FLUSH on an ASYNC_MASTER (a kill -9 keeps the page cache), after the group commit
with SYNC_FLUSH, after the slaves' acknowledgement on a SYNC_MASTER (an automatic-failover group's replicas too).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from typing import TYPE_CHECKING

from pyrmq.store.results import PutMessageResult, PutMessageStatus

if TYPE_CHECKING:  # pragma: no cover - types only
    from pyrmq.plugins.broker.core import BrokerContext

log = logging.getLogger("pyrmq.pop")

_TAGS = b"TAGS\x01"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Journal:
    """Appends ``ck`` / ``ack`` / ``bAck`` / ``ord`` / ``rof`` records to the revive topic's queues."""

    def __init__(self, ctx: BrokerContext, topic: str) -> None:
        self.ctx = ctx
        self.topic = topic
        settings = ctx.settings
        self.sync_flush = settings.flushDiskType == "SYNC_FLUSH"
        self.sync_master = settings.brokerRole == "SYNC_MASTER"
        #: records written, by (group, topic, 5.x revive message type CK/ACK, put status): rocketmq_pop_revive_in
        self.written: Counter[tuple[str, str, str, str]] = Counter()
        self._props: dict[str, tuple[dict[str, str], bytes]] = {}
        #: per revive queue: a record other than a ``rof`` was appended since the last ``rof``
        self.appended_since_rof: dict[int, bool] = {}

    @property
    def waits(self) -> bool:
        """Whether answers wait for the records to be flushed or replicated."""
        return bool(self.sync_flush or self.sync_master)

    def append(self, revive_qid: int, tag: str, body: bytes, *, group: str = "", topic: str = "") -> PutMessageResult:
        """Append one record (synchronous); count it for the metrics by 5.x's CK / ACK types."""
        props = self._props.get(tag)
        if props is None:
            props = self._props[tag] = ({"TAGS": tag}, _TAGS + tag.encode())
        ctx = self.ctx
        host = ctx.store_host
        result = ctx.store.put_one(self.topic, revive_qid, body, 0, props[0], props[1], 0, now_ms(), host, host)
        if tag in ("ck", "ack", "bAck"):
            self.written[(group, topic, "CK" if tag == "ck" else "ACK", result.status.name)] += 1
        if tag != "rof" and result.status is PutMessageStatus.PUT_OK:
            self.appended_since_rof[revive_qid] = True
        if result.status is not PutMessageStatus.PUT_OK:
            log.warning("POP record %s not written to %s queue %d: %s %s", tag, self.topic, revive_qid,
                        result.status.name, result.remark)
        return result

    async def durable(self, end_offset: int) -> bool:
        """Wait until the commit log up to ``end_offset`` is as durable as a send's answer requires."""
        if end_offset <= 0:
            return True
        ctx = self.ctx
        if self.sync_flush and not await ctx.store.wait_flushed(end_offset):
            return False
        if self.sync_master:
            replicator = ctx.replicator
            if replicator is None:
                return False
            return bool(await replicator.wait_replicated(end_offset) is PutMessageStatus.PUT_OK)
        return True
