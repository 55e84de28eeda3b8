"""Filter data of consumer groups using a non-TAG expression (SQL92), versioned and persisted (spec 7.11).

Java's ``ConsumerFilterManager``: every heartbeat registers each non-TAG subscription of a group under
``topic -> group``; an entry is replaced only by a newer ``subVersion`` (the client's version of its subscription)
and recompiled only when the expression or its type changed. A pull without a subscription in its header is
answered FILTER_DATA_NOT_EXIST (27) when the group has no filter data for the topic and FILTER_DATA_NOT_LATEST (28)
when the data is older than the pull's ``subVersion``. A group without live consumers has its data marked dead;
dead data is dropped after ``filterDataCleanTimeSpan``. Persisted in ``config/consumerFilter.json`` in Java's
layout (``filterDataByTopic -> {topic, groupFilterData -> ConsumerFilterData}``) with the offsets.

With ``filterSupportRetry``, messages of a group's retry topic are filtered with the group's filter data for the
topic they were first sent to (their ``RETRY_TOPIC`` property), as Java's ``ExpressionForRetryMessageFilter``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

import attrs

from pyrmq.kernel.errors import FilterExpressionError
from pyrmq.plugins.broker.topics import RETRY_GROUP_TOPIC_PREFIX
from pyrmq.store.format import decode_message

__all__ = [
    "RETRY_GROUP_TOPIC_PREFIX", "ConsumerFilterData", "ConsumerFilterManager", "FilterResultsDispatcher", "ResultsFilter",
    "RetryTopicFilter", "is_tag_type",
]

log = logging.getLogger("pyrmq.broker.filter")

PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"


def is_tag_type(expression_type: str | None) -> bool:
    """Java ``ExpressionType.isTagType``: null, empty or ``TAG``."""
    return not expression_type or expression_type == "TAG"


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@attrs.define
class ConsumerFilterData:
    consumer_group: str
    topic: str
    expression: str
    expression_type: str
    client_version: int
    born_time: int = attrs.Factory(_now_ms)
    dead_time: int = 0
    compiled: Any = attrs.field(default=None, eq=False, repr=False)
    #: queue id -> the compiled filter's answers for the messages dispatched since this data was registered
    results: dict[int, QueueResults] = attrs.field(factory=dict, eq=False, repr=False)

    @property
    def dead(self) -> bool:
        return self.dead_time >= self.born_time

    def pull_filter(self, queue_id: int) -> ResultsFilter:
        """The filter of a pull of ``queue_id``: the answers kept at dispatch, the compiled filter for the rest."""
        return ResultsFilter(self.compiled, self.results.get(queue_id))

    def to_json(self) -> dict[str, Any]:
        return {
            "bornTime": self.born_time, "clientVersion": self.client_version, "consumerGroup": self.consumer_group,
            "deadTime": self.dead_time, "expression": self.expression, "expressionType": self.expression_type,
            "topic": self.topic,
        }


class ConsumerFilterManager:
    def __init__(self, *, compile_filter: Callable[[str, str], Any], persist: Callable[[dict[str, Any]], None],
                 clean_after_ms: int = 24 * 3600 * 1000) -> None:
        self.compile_filter = compile_filter
        self._persist = persist
        self.clean_after_ms = clean_after_ms
        self.by_topic: dict[str, dict[str, ConsumerFilterData]] = {}
        #: bumped by every change (what the dispatch-time evaluation caches its list of live filters by)
        self.generation = 0
        self.dirty = False
        #: called with (topic, group) when a heartbeat changed a group's expression (the pull path wakes its pulls)
        self.listeners: list[Callable[[str, str], None]] = []

    @property
    def dirty(self) -> bool:
        """Changed since the last persist."""
        return self._dirty

    @dirty.setter
    def dirty(self, value: bool) -> None:
        self._dirty = value
        if value:
            self.generation += 1

    def _build(self, topic: str, group: str, expression: str, expression_type: str, version: int) -> ConsumerFilterData | None:
        try:
            compiled = self.compile_filter(expression_type, expression)
        except FilterExpressionError as exc:
            log.warning("filter of group %s on %s not registered: %s", group, topic, exc)
            return None
        return ConsumerFilterData(group, topic, expression, expression_type, version, compiled=compiled)

    def register(self, group: str, subscriptions: Iterable[Any]) -> None:
        """A heartbeat's subscriptions (``topic``, ``sub_string``, ``expression_type``, ``sub_version``)."""
        topics = set()
        for sub in subscriptions:
            topics.add(sub.topic)
            if not is_tag_type(sub.expression_type) and sub.sub_string:
                self._register_one(sub.topic, group, sub.sub_string, sub.expression_type, sub.sub_version)
        now = _now_ms()
        for by_group in self.by_topic.values():
            data = by_group.get(group)
            if data is not None and data.topic not in topics and not data.dead:
                data.dead_time = now
                self.dirty = True

    def _register_one(self, topic: str, group: str, expression: str, expression_type: str, version: int) -> None:
        by_group = self.by_topic.setdefault(topic, {})
        old = by_group.get(group)
        if old is not None and version <= old.client_version:
            if version == old.client_version and old.dead:
                old.dead_time = 0
                self.dirty = True
            elif (expression, expression_type) != (old.expression, old.expression_type):
                log.warning("filter of group %s on %s ignored: version %d <= %d", group, topic, version, old.client_version)
            return
        if old is not None and (expression, expression_type) == (old.expression, old.expression_type):
            old.client_version = version
            old.dead_time = 0
            self.dirty = True
            return
        data = self._build(topic, group, expression, expression_type, version)
        if data is None:
            by_group.pop(group, None)
        else:
            by_group[group] = data
        self.dirty = True
        for listener in self.listeners:
            listener(topic, group)

    def get(self, topic: str, group: str) -> ConsumerFilterData | None:
        by_group = self.by_topic.get(topic)
        return by_group.get(group) if by_group else None

    def mark_gone(self, live_groups: Iterable[str]) -> None:
        """Data of groups without a live consumer is marked dead; data dead for ``clean_after_ms`` is dropped."""
        live = set(live_groups)
        now = _now_ms()
        for topic in list(self.by_topic):
            by_group = self.by_topic[topic]
            for group, data in list(by_group.items()):
                if group not in live and not data.dead:
                    data.dead_time = now
                    self.dirty = True
                elif data.dead and now - data.dead_time >= self.clean_after_ms:
                    del by_group[group]
                    self.dirty = True
            if not by_group:
                del self.by_topic[topic]

    # -- persistence ---------------------------------------------------------------------------------------------

    def encode(self) -> dict[str, Any]:
        return {
            "filterDataByTopic": {
                topic: {"topic": topic, "groupFilterData": {g: d.to_json() for g, d in sorted(by_group.items())}}
                for topic, by_group in sorted(self.by_topic.items())
            }
        }

    def load(self, data: dict[str, Any] | None) -> None:
        """Recompile the persisted data; as in Java, live entries come back dead until a heartbeat revives them."""
        now = _now_ms()
        for topic, entry in ((data or {}).get("filterDataByTopic") or {}).items():
            for group, item in ((entry or {}).get("groupFilterData") or {}).items():
                if not item:
                    continue
                try:
                    filter_data = ConsumerFilterData(
                        str(item.get("consumerGroup") or group), str(item.get("topic") or topic), str(item["expression"]),
                        str(item.get("expressionType") or ""), int(item.get("clientVersion") or 0),
                        int(item.get("bornTime") or 0), int(item.get("deadTime") or 0),
                    )
                except (KeyError, TypeError, ValueError) as exc:
                    log.warning("consumerFilter.json: entry %s/%s skipped: %r", topic, group, exc)
                    continue
                try:
                    filter_data.compiled = self.compile_filter(filter_data.expression_type, filter_data.expression)
                except FilterExpressionError as exc:
                    log.warning("consumerFilter.json: filter of %s on %s does not compile: %s", group, topic, exc)
                if filter_data.dead_time == 0:
                    filter_data.dead_time = max(now - 30_000, filter_data.born_time)
                self.by_topic.setdefault(filter_data.topic, {})[filter_data.consumer_group] = filter_data
        self.generation += 1

    def persist(self) -> None:
        self._persist(self.encode())
        self.dirty = False

    def persist_if_dirty(self) -> None:
        if self.dirty:
            self.persist()


#: answers kept per queue and filter (one byte a message); past it the older half is dropped (those messages are
#: then evaluated at the commit log again)
MAX_KEPT_RESULTS = 1 << 21


class QueueResults:
    """A filter's answers for one queue: ``answers[i]`` is 1 when the message at consume-queue offset ``start + i``
    matched."""

    __slots__ = ("start", "answers")

    def __init__(self, start: int) -> None:
        self.start = start
        self.answers = bytearray()


class FilterResultsDispatcher:
    """Store dispatcher: evaluates each live registered property filter (SQL92) of the record's topic on the
    properties the write path already decoded, and keeps the answer per consume-queue offset, so a pull of that group
    decides on the consume-queue entry alone, as a tag filter does (Java's ``CommitLogDispatcherCalcBitMap`` keeps a
    bloom-filter bit per group in the consume-queue ext file; pyrmq keeps the exact answer in memory: see
    docs/decisions.md). Messages stored before a group's filter data was registered (or changed, or before a
    restart) have no answer kept and are evaluated on the commit log at pull time."""

    name = "filter-results"
    order = 15  # after the consume queue (0) and the index (10), before the long-polling wake-up (20)

    def __init__(self, filters: ConsumerFilterManager, max_kept: int = MAX_KEPT_RESULTS) -> None:
        self.filters = filters
        self.max_kept = max_kept
        self._generation = -1
        #: topic -> (results by queue, check) of each live filter data with a property check
        self._live: dict[str, list[tuple[dict[int, QueueResults], Callable[[dict[str, str]], bool]]]] = {}

    def _collect(self) -> None:
        self._generation = self.filters.generation
        live: dict[str, list[tuple[dict[int, QueueResults], Callable[[dict[str, str]], bool]]]] = {}
        for topic, by_group in self.filters.by_topic.items():
            for data in by_group.values():
                check = getattr(data.compiled, "is_matched_by_properties", None)
                if check is not None and not data.dead:
                    live.setdefault(topic, []).append((data.results, check))
        self._live = live

    def dispatch(self, request: Any) -> None:
        if self._generation != self.filters.generation:
            self._collect()
        live = self._live.get(request.topic)
        if live is None:
            return
        queue_id, offset, properties = request.queue_id, request.queue_offset, request.properties
        for results, check in live:
            kept = results.get(queue_id)
            if kept is None:
                kept = results[queue_id] = QueueResults(offset)
            else:
                n = len(kept.answers)
                if offset != kept.start + n:
                    kept = results[queue_id] = QueueResults(offset)  # a gap: the data was dead for a while
                elif n >= self.max_kept:
                    del kept.answers[: n // 2]
                    kept.start += n // 2
            kept.answers.append(check(properties))


class ResultsFilter:
    """A pull's filter for a group with registered filter data: the answer kept at dispatch where there is one (no
    commit-log read for a message that does not match), the compiled filter on the record otherwise."""

    __slots__ = ("compiled", "kept", "_known")

    def __init__(self, compiled: Any, kept: QueueResults | None) -> None:
        self.compiled = compiled
        self.kept = kept
        self._known = False

    def is_matched_by_consume_queue(self, tags_code: int) -> bool:
        return True

    def is_matched_by_consume_queue_at(self, tags_code: int, queue_offset: int) -> bool:
        kept = self.kept
        if kept is not None:
            i = queue_offset - kept.start
            if 0 <= i < len(kept.answers):
                if kept.answers[i]:
                    self._known = True
                    return True
                return False
        self._known = False
        return True

    def is_matched_by_commit_log(self, record: memoryview) -> bool:
        return self._known or bool(self.compiled.is_matched_by_commit_log(record))

    def is_matched_by_properties(self, properties: dict[str, str]) -> bool:
        return bool(self.compiled.is_matched_by_properties(properties))

    def is_matched_on_arrival(self, queue_offset: int, properties: dict[str, str]) -> bool:
        """Whether a message just dispatched wakes a parked pull: the answer dispatch kept for it, if any."""
        kept = self.kept
        if kept is not None:
            i = queue_offset - kept.start
            if 0 <= i < len(kept.answers):
                return bool(kept.answers[i])
        return self.is_matched_by_properties(properties)

    def __repr__(self) -> str:
        return f"ResultsFilter({self.compiled!r})"


class RetryTopicFilter:
    """The filter of a pull on ``%RETRY%<group>`` with ``filterSupportRetry``: a retry message is matched with the
    group's filter data for its original topic; messages without such data pass."""

    __slots__ = ("base", "group", "filters")

    def __init__(self, base: Any, group: str, filters: ConsumerFilterManager) -> None:
        self.base = base
        self.group = group
        self.filters = filters

    def is_matched_by_consume_queue(self, tags_code: int) -> bool:
        return self.base is None or self.base.is_matched_by_consume_queue(tags_code)

    def is_matched_by_commit_log(self, record: memoryview) -> bool:
        properties = decode_message(record)[0].properties
        data = self.filters.get(properties.get(PROPERTY_RETRY_TOPIC, ""), self.group)
        if data is None or data.compiled is None:
            return True
        return bool(data.compiled.is_matched_by_commit_log(record))
