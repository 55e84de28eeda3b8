"""The write side of :class:`~pyrmq.store.message_store.MessageStore`: append to the commit log, dispatch what was
appended, and (SYNC_FLUSH) wait for the group commit.

``put_message`` hands the :class:`~pyrmq.store.dispatch.DispatchRequest` of the appended record to the store's
dispatchers, in order (:meth:`StoreWrites.put_one`); the batch puts (``put_messages``, ``put_entries``)
build one request per record and hand them over together (:meth:`~pyrmq.store.dispatch.Dispatchers.dispatch_batch`:
each dispatcher takes the whole batch in one call). Either way dispatch is done before the put returns (see
:mod:`pyrmq.store.dispatch` for why dispatch is synchronous).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import cast

from .commitlog import AppendRejected, CommitLog
from .dispatch import DispatchBatch, Dispatchers, DispatchRequest
from .flush import FlushPolicy, FlushTarget
from .format import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    MessageRecord,
    encode_properties,
    java_string_hash,
)
from .results import AppendMessageResult, PutMessageResult, PutMessageStatus
from .reput import DeriveTagsCode

log = logging.getLogger("pyrmq.store.message_store")


#: tags codes remembered (tags strings repeat: a topic has a handful)
MAX_TAGS_CODES = 65536


def _first(derived: int | None, preset: int | None) -> int | None:
    return preset if derived is None else derived


class StoreWrites:
    """Mixed into :class:`~pyrmq.store.message_store.MessageStore`, which sets these attributes."""

    commit_log: CommitLog
    dispatchers: Dispatchers
    flush_policy: FlushPolicy
    _flush_target: FlushTarget | None
    _sync_flush: bool
    _sync_timeout: float
    _tags_codes: dict[str, int]
    #: topic -> how its tags code is derived at the append (the tags-code resolver's table; empty without one)
    _derive_tags: dict[str, DeriveTagsCode]
    #: why writes are refused (not loaded, closing), None when the store is up
    _unavailable: str | None
    #: why writes are refused for lack of disk (set by retention), None when there is room
    _disk_full: str | None
    #: why new messages are refused while replicated bytes are still taken (a failover replica that is not the
    #: master, :meth:`set_read_only`), None otherwise
    _read_only: str | None
    #: the first of the three reasons above, None when new messages are accepted: the one test every put path
    #: makes; only the setters below change a reason, and each refreshes it
    _refusal: str | None

    def _refresh_refusal(self) -> None:
        self._refusal = next((r for r in (self._unavailable, self._disk_full, self._read_only) if r is not None), None)

    def _set_unavailable(self, reason: str | None) -> None:
        self._unavailable = reason
        self._refresh_refusal()

    def _set_disk_full(self, reason: str | None) -> None:
        if reason != self._disk_full:
            if reason:
                log.error("refusing writes: %s", reason)
            elif self._disk_full:
                log.info("disk usage back under the limit: accepting writes again")
        self._disk_full = reason
        self._refresh_refusal()

    @property
    def is_writable(self) -> bool:
        return self._refusal is None

    def _refused(self) -> PutMessageResult:
        return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, None, self._refusal or "")

    def _tags_code(self, tags: str) -> int:
        code = self._tags_codes.get(tags)
        if code is None:
            if len(self._tags_codes) > MAX_TAGS_CODES:
                self._tags_codes.clear()
            code = self._tags_codes[tags] = java_string_hash(tags)
        return code

    def put_message(self, record: MessageRecord) -> PutMessageResult:
        """Append one message and dispatch it (synchronous, no await). Under SYNC_FLUSH follow with
        :meth:`wait_flushed` (or use :meth:`put_message_async`). :meth:`put_one` of the record's fields."""
        props = record.properties_bytes
        if props is None:
            props = encode_properties(record.properties).encode("utf-8")
        return self.put_one(
            record.topic, record.queue_id, record.body, record.flag, record.properties, props, record.sys_flag,
            record.born_timestamp, record.born_host, record.store_host, record.reconsume_times,
            record.prepared_transaction_offset, record.tags_code, derive=self._derive_tags.get(record.topic),
        )

    def put_one(
        self,
        topic: str,
        queue_id: int,
        body: bytes | memoryview,
        flag: int,
        properties: dict[str, str],
        props: bytes,
        sys_flag: int,
        born_timestamp: int,
        born_host: tuple[str, int],
        store_host: tuple[str, int],
        reconsume_times: int = 0,
        prepared_offset: int = 0,
        tags_code: int | None = None,
        *,
        derive: DeriveTagsCode | None = None,
    ) -> PutMessageResult:
        """Append one message given as its fields and hand its :class:`~pyrmq.store.dispatch.DispatchRequest` to
        every dispatcher, in order (their ``dispatch`` methods called directly: no pluggy, no type test per
        message). ``properties`` is what the dispatchers read (KEYS, UNIQ_KEY, TAGS), ``props`` the same properties
        encoded as stored. The consume-queue unit's tags code is ``derive(properties, store_timestamp)`` when a
        derivation is given and answers (the record's topic is one the tags-code resolver derives), else
        ``tags_code``, else (None) the hash of TAGS. The broker's single-send path calls it with no record object;
        :meth:`put_message` with a record's fields and its topic's derivation."""
        if self._refusal is not None:
            return self._refused()
        try:
            res, sys_flag, _props = self.commit_log.append_one(
                topic, queue_id, body, flag, props, sys_flag, born_timestamp, born_host, store_host, reconsume_times,
                prepared_offset,
            )
        except AppendRejected as exc:
            return exc.result()
        except OSError as exc:
            log.exception("append failed")
            return PutMessageResult(PutMessageStatus.UNKNOWN_ERROR, None, f"append failed: {exc}")
        if derive is not None:
            derived = derive(properties, res.store_timestamp)
            if derived is not None:
                tags_code = derived
        if tags_code is None:
            tags = properties.get(PROPERTY_TAGS)
            tags_code = (self._tags_codes.get(tags) or self._tags_code(tags)) if tags else 0
        request = DispatchRequest(
            topic, queue_id, res.wrote_offset, res.wrote_bytes, tags_code, res.store_timestamp, res.queue_offset,
            properties.get(PROPERTY_KEYS), properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX), sys_flag,
            prepared_offset, properties,
        )
        dispatchers = self.dispatchers
        for call in dispatchers.calls:
            try:
                call(request)
            except Exception:
                if dispatchers.failed(call, request):
                    raise
        return PutMessageResult(PutMessageStatus.PUT_OK, res)

    def put_messages(self, records: Sequence[MessageRecord]) -> PutMessageResult:
        """Append a batch of one topic-queue: consecutive queue offsets, one segment, one call (spec 5.8)."""
        if self._refusal is not None:
            return self._refused()
        if not records:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, None, "empty batch")
        try:
            res, sizes, sys_flag = self.commit_log.append_batch(records)
        except AppendRejected as exc:
            return exc.result()
        except OSError as exc:
            log.exception("batch append failed")
            return PutMessageResult(PutMessageStatus.UNKNOWN_ERROR, None, f"append failed: {exc}")
        codes = self._tags_codes
        tags_codes = []
        keys = []
        uniq_keys = []
        props = [record.properties for record in records]
        derive = self._derive_tags.get(records[0].topic)
        for record, properties in zip(records, props):
            tags_code = record.tags_code
            if derive is not None:
                tags_code = _first(derive(properties, res.store_timestamp), tags_code)
            if tags_code is None:
                tags = properties.get(PROPERTY_TAGS)
                tags_code = (codes.get(tags) or self._tags_code(tags)) if tags else 0
            tags_codes.append(tags_code)
            keys.append(properties.get(PROPERTY_KEYS))
            uniq_keys.append(properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX))
        self.dispatchers.dispatch_columns(DispatchBatch(
            records[0].topic, records[0].queue_id, sys_flag, res.store_timestamp, res.queue_offset,
            cast("list[int]", res.offsets), sizes, tags_codes, keys, uniq_keys, props,  # a batch's result has offsets
        ))
        return PutMessageResult(PutMessageStatus.PUT_OK, res)

    def put_entries(
        self,
        topic: str,
        queue_id: int,
        entries: Sequence[tuple[int, bytes | memoryview, bytes]],
        sys_flag: int,
        born_timestamp: int,
        born_host: tuple[str, int],
        store_host: tuple[str, int],
        reconsume_times: int = 0,
    ) -> PutMessageResult:
        """Append a batch of one topic-queue given as ``(flag, body, stored properties bytes)`` entries (the
        broker's SEND_BATCH_MESSAGE path: no record object per message, see :meth:`CommitLog.append_entries`) and
        dispatch it. The keys, UNIQ_KEY and tags the dispatchers get are read from the properties bytes; the
        properties dict of each :class:`DispatchRequest` is only decoded if a dispatcher reads it."""
        if self._refusal is not None:
            return self._refused()
        if not entries:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, None, "empty batch")
        try:
            res, sizes, sys_flag = self.commit_log.append_entries(
                topic, queue_id, entries, sys_flag, born_timestamp, born_host, store_host, reconsume_times
            )
        except AppendRejected as exc:
            return exc.result()
        except OSError as exc:
            log.exception("batch append failed")
            return PutMessageResult(PutMessageStatus.UNKNOWN_ERROR, None, f"append failed: {exc}")
        codes = self._tags_codes
        raw = [props for _flag, _body, props in entries]
        tags_codes = []
        keys = []
        uniq_keys = []
        derive = self._derive_tags.get(topic)
        for props in raw:
            # one decode and split per message (find_property's rules: a later duplicate wins, empty is absent)
            found = {}
            for item in props.decode("utf-8", "replace").split(PROPERTY_SEPARATOR):
                name, sep, value = item.partition(NAME_VALUE_SEPARATOR)
                if sep:
                    found[name] = value
            tags_code = derive(found, res.store_timestamp) if derive is not None else None
            if tags_code is None:
                tags = found.get(PROPERTY_TAGS)
                tags_code = (codes.get(tags) or self._tags_code(tags)) if tags else 0
            tags_codes.append(tags_code)
            keys.append(found.get(PROPERTY_KEYS) or None)
            uniq_keys.append(found.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or None)
        self.dispatchers.dispatch_columns(DispatchBatch(
            topic, queue_id, sys_flag, res.store_timestamp, res.queue_offset, cast("list[int]", res.offsets), sizes,
            tags_codes, keys, uniq_keys, None, raw,  # a batch's result has offsets
        ))
        return PutMessageResult(PutMessageStatus.PUT_OK, res)

    async def wait_flushed(self, end_offset: int, timeout: float | None = None) -> bool:
        """Wait until the commit log is durable up to ``end_offset`` (group commit); False after the timeout
        (``sync_flush_timeout``, 5 s by default)."""
        # the flush target is set by load(), before anything can be put
        return await self.flush_policy.wait_flushed(
            cast(FlushTarget, self._flush_target), end_offset, self._sync_timeout if timeout is None else timeout
        )

    async def _finish(self, result: PutMessageResult, wait: bool) -> PutMessageResult:
        if result.status is PutMessageStatus.PUT_OK and self._sync_flush and wait:
            if not await self.wait_flushed(cast(AppendMessageResult, result.append).end_offset):  # PUT_OK has it
                result.status = PutMessageStatus.FLUSH_DISK_TIMEOUT
                result.remark = f"flush did not complete within {self._sync_timeout:g} s"
        return result

    async def put_message_async(self, record: MessageRecord) -> PutMessageResult:
        """Append, then under SYNC_FLUSH wait for the flush unless the message carries ``WAIT=false``."""
        return await self._finish(self.put_message(record), record.wait_store_msg_ok)

    async def put_messages_async(self, records: Sequence[MessageRecord]) -> PutMessageResult:
        wait = bool(records) and records[0].wait_store_msg_ok
        return await self._finish(self.put_messages(records), wait)
