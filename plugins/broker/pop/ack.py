"""ACK_MESSAGE (200051), BATCH_ACK_MESSAGE (200151) and CHANGE_MESSAGE_INVISIBLETIME (200053): 5.5.0's
``AckMessageProcessor`` and ``ChangeInvisibleTimeProcessor``.

An ack names the message's real topic (its retry topic for a revived message), queue and offset, and its receipt
handle (which checkpoint, popped when). 5.5.0's checks and answers: unknown topic TOPIC_NOT_EXIST; a queue id out of
range MESSAGE_ILLEGAL; an offset outside the queue NO_MESSAGE (``offset is illegal, key:...``); a handle that does
not parse SYSTEM_ERROR naming the field (5.x answers its exception's text). Otherwise SUCCESS, also for an ack of a
message already acked or revived, as 5.x (which does not look): pyrmq then writes nothing. An ack of a message still
in flight writes an ``ack`` record (a batch: one ``bAck`` per checkpoint) and is answered once it is durable; a FIFO
handle (revive queue 999) moves its queue's order state instead.

Changing a message's invisible time writes a new one-message checkpoint from now (``suspend``: the revive keeps the
reconsume count) and acks the old one; the answer's popTime, invisibleTime and reviveQid make the new handle. For a
FIFO message it moves the message's next visible time.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from pyrmq.plugins.broker.pop.fifo import NOT_FOUND, OTHER_POP
from pyrmq.plugins.broker.pop.journal import now_ms
from pyrmq.plugins.broker.pop.pop import APPLY_TOPIC_URL, peer
from pyrmq.plugins.broker.pop.records import CheckPoint, CheckPointKey, QueueKey
from pyrmq.remoting.codes import ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.errors import HeaderError
from pyrmq.remoting.pop import (
    AckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    ChangeInvisibleTimeResponseHeader,
    PopWireError,
    ReceiptHandle,
    decode_batch_ack_body,
    real_topic,
)
from pyrmq.store.results import PutMessageStatus

if TYPE_CHECKING:  # pragma: no cover - types only
    from pyrmq.plugins.broker.pop.plugin import PopService

log = logging.getLogger("pyrmq.pop")

#: what 5.x's ``createResponseCommand(Class)`` leaves in the remark when a processor sets none
NOT_SET = "not set any response code"


class Refused(Exception):
    """An ack or change that cannot be done: the answer's code and remark."""

    def __init__(self, code: int, remark: str | None) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


def _plain_error(request: RemotingCommand, code: int, remark: str | None) -> RemotingCommand:
    return request.make_response(code, remark)


class AckProcessor:
    """Acks, batch acks and invisible-time changes over the POP service's parts."""

    def __init__(self, pop: PopService) -> None:
        self.pop = pop
        self.ctx = pop.ctx

    # -- shared checks -----------------------------------------------------------------------------------------------

    def _check_queue(self, connection: Any, topic: str, queue_id: int, offset: int, *, change: bool) -> None:
        """The topic, queue and offset checks of ACK (offset <= max passes) and CHANGE (offset < max)."""
        config = self.ctx.topics.get(topic)
        if config is None:
            raise Refused(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please! {APPLY_TOPIC_URL}")
        if not 0 <= queue_id < config.read_queue_nums:
            raise Refused(ResponseCode.MESSAGE_ILLEGAL,
                          f"queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:"
                          f"[{config.read_queue_nums}] consumer:[{peer(connection)}]")
        store = self.ctx.store
        low = store.get_min_offset_in_queue(topic, queue_id)
        high = store.get_max_offset_in_queue(topic, queue_id)
        if change:
            if offset < low or offset >= high:
                raise Refused(ResponseCode.NO_MESSAGE, NOT_SET)
        elif offset < low or offset > high:
            raise Refused(ResponseCode.NO_MESSAGE,
                          f"offset is illegal, key:{topic}@{queue_id}, commit:{offset}, store:{low}~{high}")

    @staticmethod
    def _handle(text: str) -> ReceiptHandle:
        try:
            return ReceiptHandle.parse(text)
        except PopWireError as exc:
            raise Refused(ResponseCode.SYSTEM_ERROR, f"{exc}") from None

    # -- ACK_MESSAGE -------------------------------------------------------------------------------------------------

    async def ack(self, connection: Any, request: RemotingCommand) -> RemotingCommand | None:
        try:
            h = AckMessageRequestHeader.from_ext_fields(request.ext_fields)
        except HeaderError as exc:
            return request.make_response(ResponseCode.SYSTEM_ERROR, str(exc))
        pop = self.pop
        refusal = pop.refuse_unless_master(request, _plain_error)
        if refusal is not None:
            return refusal
        try:
            self._check_queue(connection, h.topic, h.queue_id, h.offset, change=False)
            handle = self._handle(h.extra_info)
            pop.ensure_ready()
            commits: list[tuple[QueueKey, int]] = []
            if handle.is_order:
                end = self._ack_orderly(connection, h.topic, h.consumer_group, h.queue_id, h.offset, handle.pop_time,
                                        commits)
            else:
                key = (h.topic, h.consumer_group, h.queue_id, handle.ck_queue_offset, handle.pop_time)
                end = self._ack_checkpoint(key, [h.offset], batch=False)
        except Refused as refused:
            return request.make_response(refused.code, refused.remark)
        return pop.answer(connection, request.make_response(ResponseCode.SUCCESS, None), end, commits)

    def _ack_checkpoint(self, key: CheckPointKey, offsets: list[int], *, batch: bool) -> int:
        """Ack ``offsets`` of an open checkpoint: write the record, then mark them; the record's end offset (0 when
        nothing was in flight: already acked, revived, or never popped)."""
        pop = self.pop
        ck = pop.ledger.open.get(key)
        if ck is None:
            return 0
        in_flight = set(ck.unacked())
        pending = [o for o in offsets if o in in_flight]
        if not pending:
            return 0
        result = pop.write_ack(ck, pending, batch=batch)
        if result.status is not PutMessageStatus.PUT_OK:
            code = (ResponseCode.SERVICE_NOT_AVAILABLE if result.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
                    else ResponseCode.SYSTEM_ERROR)
            raise Refused(code, f"the ack was not stored: {result.status.name} {result.remark}".rstrip())
        pop.ledger.ack(key, pending)
        pop.acked += len(pending)
        return result.append.end_offset if result.append is not None else 0

    def _ack_orderly(self, connection: Any, topic: str, group: str, queue_id: int, offset: int, pop_time: int,
                     commits: list[tuple[QueueKey, int]]) -> int:
        """``ackOrderly``: the FIFO queue's state takes the ack; its record's end offset (0: nothing changed). The
        queue's new committed offset goes to ``commits`` (committed once the record is durable)."""
        pop = self.pop
        key = (topic, group, queue_id)
        old = self.ctx.offsets.query(group, topic, queue_id)
        if offset < old:
            return 0
        state = pop.book.states.get(key)
        before = state.commit_bits if state is not None else 0
        nxt = pop.book.commit_and_next(key, offset, pop_time)
        if nxt == OTHER_POP:
            return 0
        if nxt == NOT_FOUND:
            raise Refused(ResponseCode.MESSAGE_ILLEGAL,
                          f"offset is illegal, key:{topic}@{group}@{queue_id}, old:{old}, commit:{offset}, "
                          f"next:{nxt}, {peer(connection)}")
        end = 0
        if state is not None and (state.commit_bits != before or state.committed != nxt):
            state.committed = nxt
            if not pop.write_order(state):
                state.commit_bits = before
                raise Refused(ResponseCode.SYSTEM_ERROR, "the ack was not stored: the revive topic refused the write")
            end = pop.last_end
            pop.acked += 1
        pop.offsets.set(key, nxt, commit=False)
        commits.append((key, -nxt - 1))  # exactly this offset (PopService.apply_commits)
        if state is None or not state.blocks(None, now_ms()):
            pop.polling.notify(topic, group, queue_id)
            pop.polling.notify(topic, group, -1)
        return end

    # -- BATCH_ACK_MESSAGE ----------------------------------------------------------------------------------------

    async def batch_ack(self, connection: Any, request: RemotingCommand) -> RemotingCommand | None:
        pop = self.pop
        refusal = pop.refuse_unless_master(request, _plain_error)
        if refusal is not None:
            return refusal
        body = request.body_bytes()
        if not body:
            return request.make_response(ResponseCode.NO_MESSAGE, None)
        try:
            acks, _broker_name = decode_batch_ack_body(body)
        except PopWireError as exc:
            return request.make_response(ResponseCode.SYSTEM_ERROR, f"bad BATCH_ACK_MESSAGE body: {exc}")
        if not acks:
            return request.make_response(ResponseCode.NO_MESSAGE, None)
        pop.ensure_ready()
        store = self.ctx.store
        end = 0
        commits: list[tuple[QueueKey, int]] = []
        try:
            for b in acks:
                topic = real_topic(b.topic, b.consumer_group, b.retry)
                low = store.get_min_offset_in_queue(topic, b.queue_id)
                high = store.get_max_offset_in_queue(topic, b.queue_id)
                offsets = [o for o in b.offsets if low <= o <= high]
                if not offsets:
                    continue
                if b.revive_queue_id == 999:
                    for offset in offsets:
                        end = max(end, self._ack_orderly(connection, topic, b.consumer_group, b.queue_id, offset,
                                                         b.pop_time, commits))
                else:
                    key = (topic, b.consumer_group, b.queue_id, b.start_offset, b.pop_time)
                    end = max(end, self._ack_checkpoint(key, offsets, batch=True))
        except Refused as refused:
            return request.make_response(refused.code, refused.remark)
        return pop.answer(connection, request.make_response(ResponseCode.SUCCESS, None), end, commits)

    # -- CHANGE_MESSAGE_INVISIBLETIME ---------------------------------------------------------------------------

    async def change_invisible_time(self, connection: Any, request: RemotingCommand) -> RemotingCommand | None:
        try:
            h = ChangeInvisibleTimeRequestHeader.from_ext_fields(request.ext_fields)
        except HeaderError as exc:
            return request.make_response(ResponseCode.SYSTEM_ERROR, str(exc))
        pop = self.pop
        refusal = pop.refuse_unless_master(request, _plain_error)
        if refusal is not None:
            return refusal
        zero = ChangeInvisibleTimeResponseHeader(0, 0, 0).to_ext_fields()
        try:
            self._check_queue(connection, h.topic, h.queue_id, h.offset, change=True)
            handle = self._handle(h.extra_info)
            if h.invisible_time < 0:
                raise Refused(ResponseCode.INVALID_PARAMETER,
                              f"invisibleTime {h.invisible_time} is negative: the ms the message stays invisible from now")
            pop.ensure_ready()
            if handle.is_order:
                answer, end = self._change_orderly(h, handle)
            else:
                answer, end = self._change(h, handle)
        except Refused as refused:
            return request.make_response(refused.code, refused.remark, zero)
        return pop.answer(connection, request.make_response(ResponseCode.SUCCESS, NOT_SET, answer.to_ext_fields()), end)

    def _change(self, h: ChangeInvisibleTimeRequestHeader,
                handle: ReceiptHandle) -> tuple[ChangeInvisibleTimeResponseHeader, int]:
        pop = self.pop
        now = now_ms()
        answer = ChangeInvisibleTimeResponseHeader(pop_time=now, invisible_time=h.invisible_time,
                                                   revive_qid=handle.revive_qid)
        key = (h.topic, h.consumer_group, h.queue_id, handle.ck_queue_offset, handle.pop_time)
        old = pop.ledger.open.get(key)
        if old is None or h.offset not in old.unacked():
            # acked or revived already: nothing is in flight under this handle (5.x would add a checkpoint anyway)
            return answer, 0
        revive_qid = handle.revive_qid if 0 <= handle.revive_qid < pop.settings.reviveQueueNum else old.revive_qid
        ck = CheckPoint(h.topic, h.consumer_group, h.queue_id, h.offset, now, h.invisible_time, [0],
                        handle.broker_name or self.ctx.settings.brokerName, revive_qid, suspend=h.suspend)
        status = pop.write_checkpoint(ck)
        if status is not PutMessageStatus.PUT_OK:
            raise Refused(ResponseCode.SYSTEM_ERROR, f"the new checkpoint was not stored: {status.name}")
        end = pop.last_end
        end = max(end, self._ack_checkpoint(key, [h.offset], batch=False))
        return answer, end

    def _change_orderly(self, h: ChangeInvisibleTimeRequestHeader,
                        handle: ReceiptHandle) -> tuple[ChangeInvisibleTimeResponseHeader, int]:
        pop = self.pop
        zero = ChangeInvisibleTimeResponseHeader(0, 0, 0)
        if h.offset < self.ctx.offsets.query(h.consumer_group, h.topic, h.queue_id):
            return zero, 0
        next_visible = now_ms() + h.invisible_time
        key = (h.topic, h.consumer_group, h.queue_id)
        state = pop.book.change_visible(key, h.offset, handle.pop_time, next_visible)
        end = 0
        if state is not None:
            if not pop.write_order(state):
                raise Refused(ResponseCode.SYSTEM_ERROR, "the change was not stored: the revive topic refused the write")
            end = pop.last_end
            pop.revive.watch_order(state)
        return ChangeInvisibleTimeResponseHeader(handle.pop_time, next_visible - handle.pop_time, handle.revive_qid), end
