"""The revive service (5.5.0's ``PopReviveService``), on the master only.

* **Revive.** A checkpoint whose invisible time has ended with messages still unacked is revived at its due time:
  each such message is copied to the group's retry topic (``%RETRY%<group>_<topic>``, queue 0; a message popped from
  the retry topic goes back to it): same body, tags, flag and properties, ``reconsumeTimes`` + 1 (kept with
  ``suspend``), ``1ST_POP_TIME`` (the checkpoint's pop time) when it had none, ``ORIGIN_GROUP``, born and store
  host this broker. Then one ``bAck`` record marks those messages done (the broker acks on the consumer's behalf once
  the copy is stored), and the group's waiting pops are woken. 5.x waits for the checkpoint to leave the timer and
  for its revive pass, about 3 s after the due time; pyrmq revives at the due time. A message no longer in the store
  is skipped, as 5.x does. A copy the store refuses (disk full, a slave's read-only store) is tried again later, as
  5.x re-puts a checkpoint: the checkpoint is written again with ``rp`` + 1 and its invisible time extended by
  10 s, 20 s, 30 s, 1 min, ... 2 h (:data:`REPUT_INTERVALS_S`, 5.5.0's ``ckRewriteIntervalsInSeconds``), never
  dropped; a retry topic the store could never take (a name over 127 bytes) is refused at the pop instead
  (:mod:`.pop`).
* **FIFO wake-ups.** When a FIFO queue's batch becomes visible again, the pops waiting for the queue are woken
  (``enableNotifyAfterPopOrderLockRelease``).
* **Live offsets and compaction** (every second). Each revive queue's first live record (:mod:`.ledger`) is
  written as a ``rof`` record when it moved (and committed as ``CID_RMQ_SYS_REVIVE_GROUP``'s consumer offset, as 5.x
  does, for the admin tools); recovery starts reading there. A live record that lies more than
  ``max(COMPACT_RECORDS, 4 x live records)`` behind its queue's end (a long invisible time, a queue popped once long
  ago) is written again at the end, so recovery never reads far.
"""

from __future__ import annotations

import heapq
import logging
from typing import TYPE_CHECKING

import attrs
import trio

from pyrmq.plugins.broker.pop.fifo import OrderState
from pyrmq.plugins.broker.pop.journal import now_ms
from pyrmq.plugins.broker.pop.names import PERM_RW, RETRY_QUEUE_NUMS, REVIVE_GROUP, REVIVE_OFFSET_TAG
from pyrmq.plugins.broker.pop.records import CheckPoint, revive_offset_json
from pyrmq.remoting.message import StoredMessage, decode_message
from pyrmq.remoting.pop import PROPERTY_FIRST_POP_TIME, PROPERTY_ORIGIN_GROUP, PROPERTY_POP_CK, pop_retry_topic
from pyrmq.store.results import PutMessageStatus

if TYPE_CHECKING:  # pragma: no cover - types only
    from pyrmq.plugins.broker.pop.plugin import PopService

log = logging.getLogger("pyrmq.pop")

#: a live record this many records behind its revive queue's end is written again (at least)
COMPACT_RECORDS = 20_000
#: records re-written per queue and pass
COMPACT_BATCH = 1000
#: checkpoints revived before letting other tasks run
REVIVE_BATCH = 256
#: seconds added to a checkpoint's invisible time at each revive the store refused (5.5.0's
#: ``ckRewriteIntervalsInSeconds``; the last repeats)
REPUT_INTERVALS_S = (10, 20, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200)
HOUSEKEEPING_MS = 1000
RETRY_PREFIX = "%RETRY%"


class ReviveService:
    """Revives due checkpoints, wakes FIFO pops, keeps the revive queues' live offsets and compacts them."""

    def __init__(self, pop: PopService) -> None:
        self.pop = pop
        self.ctx = pop.ctx
        self._wake = trio.Event()
        self._sleep_until = 0
        #: FIFO queues to wake when their batch becomes visible: (time, seq, state)
        self._orders: list[tuple[int, int, OrderState]] = []
        self._seq = 0
        #: per revive queue: the first live offset last written as a ``rof`` record, and whether a record other than
        #: a ``rof`` was appended since
        self.written_first: dict[int, int] = {}
        #: messages copied to retry topics, by (group, topic read, put status): rocketmq_pop_revive_retry_messages
        self.retried: dict[tuple[str, str, str], int] = {}
        #: checkpoints that reached their due time (rocketmq_pop_revive_out_message, CK) and acks applied (ACK)
        self.revived_checkpoints = 0
        #: lateness of each revive (ms after the due time; only while a list is assigned: tests and benchmarks)
        self.lateness: list[int] | None = None
        #: compaction: a live record this many records behind its queue's end (at least) is written again
        self.compact_records = COMPACT_RECORDS
        #: revives put back for later (the store refused a retry copy), and the seconds added each time
        self.put_back_count = 0
        self.reput_intervals_s: tuple[float, ...] = REPUT_INTERVALS_S

    def note_due(self, due: int) -> None:
        """A checkpoint due at ``due`` was added: wake the service if it sleeps longer."""
        if due < self._sleep_until:
            self._wake.set()

    def watch_order(self, state: OrderState) -> None:
        """Wake the queue's waiting pops once ``state``'s batch is visible again."""
        if not self.pop.settings.enableNotifyAfterPopOrderLockRelease:
            return
        at = state.unblock_time(now_ms())
        if at is not None:
            self._seq += 1
            heapq.heappush(self._orders, (at, self._seq, state))
            self.note_due(at)

    def reset(self) -> None:
        self._orders.clear()
        self.written_first.clear()

    async def serve(self) -> None:
        """Until cancelled (the broker stops being master)."""
        housekeeping = now_ms() + HOUSEKEEPING_MS
        while True:
            now = now_ms()
            busy = self.revive_due(now)
            self._wake_orders(now)
            if now >= housekeeping:
                self.housekeeping()
                housekeeping = now + HOUSEKEEPING_MS
            if busy:
                await trio.lowlevel.checkpoint()
                continue
            wake_at = housekeeping
            due = self.pop.ledger.next_due()
            if due is not None:
                wake_at = min(wake_at, due)
            if self._orders:
                wake_at = min(wake_at, self._orders[0][0])
            self._sleep_until = wake_at
            delay = (wake_at - now_ms()) / 1000
            if delay > 0:
                with trio.move_on_after(delay):
                    await self._wake.wait()
            self._wake = trio.Event()
            self._sleep_until = 0

    # -- revive ------------------------------------------------------------------------------------------------------

    def revive_due(self, now: int) -> bool:
        """Revive up to REVIVE_BATCH due checkpoints; True when more may be due."""
        due = self.pop.ledger.take_due(now, REVIVE_BATCH)
        for ck in due:
            try:
                self.revive(ck, now)
            except Exception:  # never lose a checkpoint: it is tried again later
                log.exception("revive of %s@%s queue %d failed", ck.group, ck.topic, ck.queue_id)
                self.put_back(ck, now, "an error")
        return len(due) >= REVIVE_BATCH

    def put_back(self, ck: CheckPoint, now: int, why: str) -> None:
        """A revive that could not be done: try again later, each time later (5.5.0's ``rePutCK``). The checkpoint
        is written again with ``rp`` + 1 and, once past its due time, its invisible time extended by the next of
        :data:`REPUT_INTERVALS_S`, so a restart keeps the pace; it is never dropped."""
        if ck.closed:
            return
        intervals = self.reput_intervals_s
        step = intervals[min(ck.re_put, len(intervals) - 1)] * 1000
        due = max(ck.due, now) + step
        ck.re_put += 1
        due = int(due)
        self.pop.ledger.reschedule(ck, due)
        self.put_back_count += 1
        written = self.pop.rewrite(ck)
        log.warning("revive of %s@%s queue %d (%d messages) not done (%s): try %d in %.0f s%s", ck.group, ck.topic,
                    ck.queue_id, len(ck.unacked()), why, ck.re_put + 1, (due - now) / 1000,
                    "" if written else " (the re-put checkpoint was not written: a restart tries it at once)")

    def revive(self, ck: CheckPoint, now: int) -> None:
        pop = self.pop
        ctx = self.ctx
        store = ctx.store
        done: list[int] = []
        refused = ""
        retry_topic = ck.topic if ck.topic.startswith(RETRY_PREFIX) else pop_retry_topic(
            ck.topic, ck.group, pop.settings.enableRetryTopicV2)
        for offset in ck.unacked():
            message = self._read(ck.topic, ck.queue_id, offset)
            if message is None:
                done.append(offset)  # gone from the store (retention, a deleted topic): nothing to revive
                continue
            if ctx.topics.get(retry_topic) is None:
                ctx.topics.create_system_topic(retry_topic, RETRY_QUEUE_NUMS, PERM_RW)
            properties = message.properties
            properties.pop(PROPERTY_POP_CK, None)
            if message.reconsume_times == 0 or PROPERTY_FIRST_POP_TIME not in properties:
                properties[PROPERTY_FIRST_POP_TIME] = str(ck.pop_time)
            properties[PROPERTY_ORIGIN_GROUP] = ck.group
            record = message.to_record(retry_topic, 0, properties,
                                       reconsume_times=message.reconsume_times + (0 if ck.suspend else 1),
                                       prepared_transaction_offset=0)
            record = attrs.evolve(record, born_host=ctx.store_host, store_host=ctx.store_host)
            result = store.put_message(record)
            status = result.status.name
            key = (ck.group, ck.topic, status)
            self.retried[key] = self.retried.get(key, 0) + 1
            if result.status is not PutMessageStatus.PUT_OK:
                refused = f"offset {offset} refused by the store: {status} {result.remark or ''}".rstrip()
                break
            if result.append is not None:
                ctx.stats.put(retry_topic, 1, result.append.wrote_bytes)
            done.append(offset)
        if done:
            written = pop.write_ack(ck, done, batch=True)
            if written.status is not PutMessageStatus.PUT_OK:
                log.warning("revived %d messages of %s@%s queue %d but could not mark them done: %s (a restart now "
                            "would revive them again)", len(done), ck.group, ck.topic, ck.queue_id, written.status.name)
            pop.ledger.ack(ck.key, done)
            self.revived_checkpoints += 1
            if self.lateness is not None:
                self.lateness.append(now_ms() - ck.due)
            pop.polling.notify_group(self.original_topic(ck), ck.group)
        if refused and not ck.closed:
            self.put_back(ck, now, refused)

    @staticmethod
    def original_topic(ck: CheckPoint) -> str:
        """The topic the group popped (a checkpoint of a retry topic names the retry topic)."""
        topic = ck.topic
        prefix = RETRY_PREFIX + ck.group
        if topic.startswith(prefix) and len(topic) > len(prefix) and topic[len(prefix)] in "_+":
            return topic[len(prefix) + 1:]
        return topic

    def _read(self, topic: str, queue_id: int, offset: int) -> StoredMessage | None:
        store = self.ctx.store
        cq = store.consume_queues.get(topic, queue_id)
        unit = cq.get_unit(offset) if cq is not None else None
        if unit is None:
            return None
        view = store.look_message_bytes_by_offset(unit[0], unit[1])
        if view is None:
            return None
        return decode_message(view)[0]

    def _wake_orders(self, now: int) -> None:
        orders = self._orders
        polling = self.pop.polling
        while orders and orders[0][0] <= now:
            state = heapq.heappop(orders)[2]
            if self.pop.book.states.get(state.key) is state and not state.blocks(None, now):
                polling.notify(state.topic, state.group, state.queue_id)
                polling.notify(state.topic, state.group, -1)

    # -- live offsets, compaction ----------------------------------------------------------------------------------

    def housekeeping(self) -> None:
        pop = self.pop
        store = self.ctx.store
        topic = pop.revive_topic
        for qid in pop.revive_queues():
            end = store.get_max_offset_in_queue(topic, qid)
            live = pop.ledger.live.get(qid) or {}
            below = end - max(self.compact_records, 4 * len(live))
            for record in list(pop.ledger.oldest(qid, below, COMPACT_BATCH)):
                if not pop.rewrite(record):
                    break
            first = pop.ledger.first_live(qid)
            start = first[0] if first is not None else store.get_max_offset_in_queue(topic, qid)
            if start > self.written_first.get(qid, -1) and pop.journal.appended_since_rof.get(qid):
                result = pop.journal.append(qid, REVIVE_OFFSET_TAG, revive_offset_json(start))
                if result.status is PutMessageStatus.PUT_OK:
                    self.written_first[qid] = start
                    pop.journal.appended_since_rof[qid] = False
                    self.ctx.offsets.commit(REVIVE_GROUP, topic, qid, start)
