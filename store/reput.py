"""Replay: walk commit-log records and hand them to the dispatchers (what Java's ``ReputMessageService`` does for
every append; pyrmq needs it only where records reach the commit log without ``put_message``).

``put_message`` dispatches synchronously in the same call (see :mod:`pyrmq.store.dispatch`), so there is no reput
loop. The walk runs at start-up, where recovery re-dispatches what the consume queues and the index lack (which is
also how a deleted consume-queue directory is rebuilt), and after raw appends replicated from a master
(``append_raw``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from .commitlog import END_OF_FILE, CommitLog, RecordHeader, read_record_header
from .dispatch import Dispatchers, DispatchRequest
from .format import BLANK, MESSAGE_MAGIC_CODE, PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, decode_properties, tags_hash_code

log = logging.getLogger(__name__)

#: ``derive(properties, store_timestamp) -> tags code or None`` (None: the hash of TAGS): how a feature derives the
#: consume-queue tags code of a record of its own topic (spec 5.6: the delivery time for ``SCHEDULE_TOPIC_XXXX``)
DeriveTagsCode = Callable[[Mapping[str, str], int], "int | None"]


class TagsCodeResolver:
    """The topics whose consume-queue tags code is derived from the record rather than hashed from ``TAGS``, and how
    (RocketMQ's ``CommitLog.checkMessageAndReturnSize``: a parked delayed message's unit holds its delivery time).

    The store applies it wherever it dispatches: at the append itself (``put_message``: the store time is known only
    then), when recovery re-dispatches, when a replica dispatches replicated bytes, after a truncation. So a parked
    record's unit is the same whichever way it was dispatched. The store knows no topic of its own: the broker hands
    it one resolver built from its schedulers before it loads. Calling it answers ``(topic, properties,
    store_timestamp) -> tags code or None``.
    """

    __slots__ = ("by_topic",)

    def __init__(self, by_topic: Mapping[str, DeriveTagsCode]) -> None:
        #: topic -> its derivation (what the append path looks up, once per put)
        self.by_topic: dict[str, DeriveTagsCode] = dict(by_topic)

    def __call__(self, topic: str, properties: Mapping[str, str], store_timestamp: int) -> int | None:
        derive = self.by_topic.get(topic)
        return None if derive is None else derive(properties, store_timestamp)

    def __repr__(self) -> str:
        return f"TagsCodeResolver({sorted(self.by_topic)})"


def make_request(h: RecordHeader, resolver: TagsCodeResolver | None, recovering: bool) -> DispatchRequest:
    props = decode_properties(h.properties_bytes)
    tags_code = resolver(h.topic, props, h.store_timestamp) if resolver is not None else None
    if tags_code is None:
        tags_code = tags_hash_code(props.get(PROPERTY_TAGS))
    return DispatchRequest(
        topic=h.topic,
        queue_id=h.queue_id,
        commit_log_offset=h.pos,
        msg_size=h.total_size,
        tags_code=tags_code,
        store_timestamp=h.store_timestamp,
        queue_offset=h.queue_offset,
        keys=props.get(PROPERTY_KEYS),
        uniq_key=props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX),
        sys_flag=h.sys_flag,
        prepared_transaction_offset=h.prepared_transaction_offset,
        properties=props,
        recovering=recovering,
    )


def dispatch_range(
    commit_log: CommitLog,
    dispatchers: Dispatchers,
    start: int,
    *,
    resolver: TagsCodeResolver | None = None,
    recovering: bool = False,
    partial_tail: bool = False,
    replicated: bool = False,
) -> tuple[int, set[tuple[str, int]], int]:
    """Re-dispatch what the dispatchers lack, from ``start`` to the end of the commit log.

    A dispatcher that implements ``has_dispatched`` gets only the records it lacks; one that does not gets the
    records the consume queue lacked. A failing dispatcher is logged and the walk goes on. With ``partial_tail`` a
    record whose bytes are not all there yet (a replica mid-transfer) ends the walk quietly. ``replicated``: the
    bytes came from a master (``append_raw``): the ``replicated_only`` dispatchers get each record the consume
    queue lacked too, after the others. Returns how many records were dispatched, the ``(topic, queue_id)`` of every
    record walked (their queue offsets may have moved), and the offset where the walk stopped (just after the last
    complete record).
    """
    files = commit_log.queue.files
    queue = dispatchers.queue
    checks = [(d, getattr(d, "has_dispatched", None)) for d in dispatchers]
    followers = dispatchers.replicated_calls if replicated else ()
    count = 0
    walked: set[tuple[str, int]] = set()
    start = end = max(start, commit_log.min_offset)
    for mf in list(files):
        if mf.file_from_offset + mf.file_size <= start:
            continue
        pos = max(0, start - mf.file_from_offset)
        limit = mf.wrote_position
        while True:
            h = read_record_header(mf.mm, pos, limit, mf.file_from_offset, False)
            if not isinstance(h, RecordHeader):
                if isinstance(h, str):
                    size, magic = BLANK.unpack_from(mf.mm, pos)
                    if not (partial_tail and magic == MESSAGE_MAGIC_CODE and pos + size > limit):
                        log.error("replay stopped at %s@%d: %s", mf.path, pos, h)
                    return count, walked, end
                if h == END_OF_FILE:
                    end = mf.file_from_offset + mf.file_size
                break  # BLANK or end of data: next segment
            pos += h.total_size
            end = mf.file_from_offset + pos
            walked.add((h.topic, h.queue_id))
            args = (h.topic, h.queue_id, h.queue_offset, h.pos, h.sys_flag)
            queue_missing = not queue.has_dispatched(*args)
            targets = [d for d, has in checks if (not has(*args) if has is not None else queue_missing)]
            if not targets:
                continue
            request = make_request(h, resolver, recovering)
            for d in targets:
                try:
                    d.dispatch(request)
                except Exception:
                    log.exception("dispatcher %s failed on the record at %d", d.name, h.pos)
            if queue_missing:
                for call in followers:
                    try:
                        call(request)
                    except Exception:
                        log.exception("dispatcher %r failed on the replicated record at %d", call, h.pos)
            count += 1
    return count, walked, end
