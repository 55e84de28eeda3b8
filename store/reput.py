"""Reput: walk commit-log records and hand them to the dispatchers (Java ``ReputMessageService``).

pyrmq dispatches appends synchronously inside ``put_message``; the walk is needed when records reach the commit
log another way: at start-up (recovery re-dispatches what the consume queues and the index lack, which is also how
a deleted consume-queue directory is rebuilt) and for raw appends replicated from a master (``append_raw``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from .commitlog import CommitLog, RecordHeader, read_record_header
from .dispatch import Dispatcher, DispatchRequest
from .format import (
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_TYPE_MASK,
    decode_properties,
    tags_hash_code,
)

log = logging.getLogger(__name__)

#: ``(topic, properties, store_timestamp) -> tags code or None``: lets a feature (the delay schedule) restore the
#: tags code it put into its consume queue (spec 5.6: delivery time for ``SCHEDULE_TOPIC_XXXX``)
TagsCodeResolver = Callable[[str, dict, int], "int | None"]


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
    dispatchers: Sequence[Dispatcher],
    start: int,
    *,
    only_missing: bool,
    resolver: TagsCodeResolver | None = None,
    recovering: bool = False,
    queue_dispatcher=None,
) -> int:
    """Dispatch every record from ``start`` to the end of the commit log; returns how many were dispatched.

    With ``only_missing`` each dispatcher that implements ``has_dispatched`` gets only what it lacks, and the others
    get the records the consume queue (``queue_dispatcher``) lacked. Also advances the per-queue offset counter.
    """
    table = commit_log.topic_queue_table
    files = commit_log.queue.files
    count = 0
    start = max(start, commit_log.min_offset)
    for mf in list(files):
        if mf.file_from_offset + mf.file_size <= start:
            continue
        pos = max(0, start - mf.file_from_offset)
        limit = mf.wrote_position
        while True:
            h = read_record_header(mf.mm, pos, limit, mf.file_from_offset, False)
            if not isinstance(h, RecordHeader):
                if isinstance(h, str):
                    log.error("reput stopped at %s@%d: %s", mf.path, pos, h)
                    return count
                break  # BLANK or end of data: next segment
            pos += h.total_size
            tran = h.sys_flag & TRANSACTION_TYPE_MASK
            if tran == 0 or tran == TRANSACTION_COMMIT_TYPE:
                key = (h.topic, h.queue_id)
                if table.get(key, 0) <= h.queue_offset:
                    table[key] = h.queue_offset + 1
            if only_missing:
                args = (h.topic, h.queue_id, h.queue_offset, h.pos, h.sys_flag)
                queue_missing = queue_dispatcher is not None and not queue_dispatcher.has_dispatched(*args)
                targets = [
                    d for d in dispatchers
                    if (not d.has_dispatched(*args) if hasattr(d, "has_dispatched") else queue_missing)
                ]
            else:
                targets = list(dispatchers)
            if not targets:
                continue
            request = make_request(h, resolver, recovering)
            for d in targets:
                try:
                    d.dispatch(request)
                except Exception:
                    log.exception("dispatcher %s failed on the record at %d", getattr(d, "name", d), h.pos)
            count += 1
    return count
