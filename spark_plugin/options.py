"""The data source's options, parsed once into frozen attrs records; every error names the option at fault.

Pure Python (no pyspark): the CLI, the planner and the tests use it without a Spark session.

Offsets options (``startingOffsets`` / ``endingOffsets``) take one of:

* ``earliest`` / ``latest``;
* a JSON map of broker/queue -> offset, nested ``{"broker-a": {"0": 12, "1": -2}}`` or flat
  ``{"broker-a/0": 12}``; -2 means earliest and -1 latest for that queue (Kafka's convention), queues not named
  take the option's default (earliest for starting, latest for ending);
* a timestamp: epoch milliseconds (``1732197600000``) or ISO-8601 (``2026-11-21T14:00:00Z``, naive = UTC):
  the first message whose store time is >= it (spec 7.13 search, then refined to the exact boundary).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

import attrs

EARLIEST = -2
LATEST = -1

DEFAULT_CONSUMER_GROUP = "pyrmq-spark"
DEFAULT_MAX_MESSAGES_PER_PARTITION = 50_000  # small enough to balance the tasks over the cores
DEFAULT_SEND_BATCH_SIZE = 256

_TAG_EXPRESSION = re.compile(r"^\s*(\*|[^|]+(\|\|[^|]+)*)\s*$")


class OptionError(ValueError):
    """A bad data-source or command option; the message names the option and what was expected."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"option {option!r}: {message}")
        self.option = option


@attrs.frozen
class OffsetSpec:
    """``kind`` is "earliest", "latest", "timestamp" (``timestamp`` ms) or "map" (``per_queue`` + ``default``)."""

    kind: str
    timestamp: int = 0
    per_queue: Mapping[tuple[str, int], int] = attrs.field(factory=dict)
    default: int = EARLIEST


def parse_timestamp(text: str, option: str) -> int:
    text = text.strip()
    if re.fullmatch(r"-?\d+", text):
        value = int(text)
        if value < 0:
            raise OptionError(option, f"a timestamp must be >= 0 ms, got {text}")
        return value
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise OptionError(
            option, f"expected earliest, latest, a JSON map of broker/queue -> offset, or a timestamp, got {text!r}"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return int(dt.timestamp() * 1000)


def parse_offsets(text: str | None, option: str, *, default: str) -> OffsetSpec:
    """Parse ``startingOffsets`` / ``endingOffsets``; ``default`` ("earliest"/"latest") when absent."""
    if text is None or not str(text).strip():
        return OffsetSpec(default)
    text = str(text).strip()
    low = text.lower()
    if low in ("earliest", "latest"):
        return OffsetSpec(low)
    if text.startswith("{"):
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise OptionError(option, f"invalid JSON ({exc.msg} at {exc.pos})") from None
        return OffsetSpec("map", per_queue=_queue_map(raw, option), default=EARLIEST if default == "earliest" else LATEST)
    return OffsetSpec("timestamp", timestamp=parse_timestamp(text, option))


def _queue_map(raw: Any, option: str) -> dict[tuple[str, int], int]:
    if not isinstance(raw, dict):
        raise OptionError(option, "expected a JSON object of broker -> {queue id -> offset}")
    out: dict[tuple[str, int], int] = {}

    def put(broker: str, queue: Any, offset: Any) -> None:
        try:
            qid = int(queue)
        except (TypeError, ValueError):
            raise OptionError(option, f"queue id {queue!r} of broker {broker!r} is not an integer") from None
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < -2:
            raise OptionError(option, f"offset of {broker}/{qid} must be an integer >= 0 (or -2 earliest, -1 latest), got {offset!r}")
        out[(broker, qid)] = offset

    for key, value in raw.items():
        if isinstance(value, dict):
            for queue, offset in value.items():
                put(key, queue, offset)
        else:
            broker, sep, queue = str(key).rpartition("/")
            if not sep or not broker:
                raise OptionError(option, f"key {key!r} is neither a broker name (with an object value) nor 'broker/queue'")
            put(broker, queue, value)
    return out


def offsets_to_json(offsets: Mapping[tuple[str, int], int]) -> dict[str, dict[str, int]]:
    """``{(broker, queue): offset}`` -> ``{"broker": {"queue": offset}}`` (the stream's offset in the checkpoint)."""
    out: dict[str, dict[str, int]] = {}
    for (broker, queue), offset in sorted(offsets.items()):
        out.setdefault(broker, {})[str(queue)] = int(offset)
    return out


def offsets_from_json(data: Mapping[str, Any]) -> dict[tuple[str, int], int]:
    return _queue_map(dict(data), "offset")


def parse_subscription(text: str | None, option: str = "subscription") -> frozenset[str] | None:
    """A tag expression ``*`` / ``TagA || TagB`` -> the tag set (None = every message)."""
    if text is None or not text.strip() or text.strip() == "*":
        return None
    if not _TAG_EXPRESSION.match(text):
        raise OptionError(option, f"expected a tag expression like '*' or 'TagA || TagB', got {text!r}")
    tags = frozenset(t.strip() for t in text.split("||") if t.strip())
    if not tags:
        raise OptionError(option, f"no tag in {text!r}")
    return tags


def _positive_int(options: Mapping[str, str], name: str, default: int | None) -> int | None:
    value = options.get(name)
    if value is None or str(value).strip() == "":
        return default
    try:
        n = int(str(value).strip())
    except ValueError:
        raise OptionError(name, f"expected a positive integer, got {value!r}") from None
    if n <= 0:
        raise OptionError(name, f"expected a positive integer, got {value!r}")
    return n


def _namesrv(value: str | None) -> str:
    if not value or not value.strip():
        raise OptionError("namesrv", "required: the name server address(es), e.g. 127.0.0.1:9876 (several separated by ';')")
    for addr in filter(None, (a.strip() for a in value.split(";"))):
        host, sep, port = addr.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise OptionError("namesrv", f"expected host:port[;host:port...], got {value!r}")
    return value.strip()


def _store_paths(value: str | None) -> dict[str, str] | str | None:
    """``storePath``: a store root directory, or a JSON map broker name -> store root."""
    if value is None or not value.strip():
        return None
    value = value.strip()
    if value.startswith("{"):
        try:
            raw = json.loads(value)
        except json.JSONDecodeError as exc:
            raise OptionError("storePath", f"invalid JSON ({exc.msg})") from None
        if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
            raise OptionError("storePath", "expected a directory or a JSON map of broker name -> directory")
        return dict(raw)
    return value


@attrs.frozen
class ReadOptions:
    namesrv: str
    topic: str
    starting: OffsetSpec
    ending: OffsetSpec
    tags: frozenset[str] | None
    subscription: str
    max_per_partition: int
    max_per_trigger: int | None
    store_path: dict[str, str] | str | None
    consumer_group: str
    timeout: float

    @classmethod
    def parse(cls, options: Mapping[str, str], *, streaming: bool = False) -> ReadOptions:
        o = case_insensitive(options)
        topic = (o.get("topic") or "").strip()
        if not topic:
            raise OptionError("topic", "required: the topic to read")
        if streaming and o.get("endingOffsets"):
            raise OptionError("endingOffsets", "is for batch reads only; a stream reads until it is stopped")
        subscription = (o.get("subscription") or "*").strip() or "*"
        return cls(
            namesrv=_namesrv(o.get("namesrv")),
            topic=topic,
            starting=parse_offsets(o.get("startingOffsets"), "startingOffsets", default="latest" if streaming else "earliest"),
            ending=parse_offsets(o.get("endingOffsets"), "endingOffsets", default="latest"),
            tags=parse_subscription(subscription),
            subscription=subscription,
            max_per_partition=_positive_int(o, "maxMessagesPerPartition", DEFAULT_MAX_MESSAGES_PER_PARTITION),
            max_per_trigger=_positive_int(o, "maxMessagesPerTrigger", None),
            store_path=_store_paths(o.get("storePath")),
            consumer_group=(o.get("consumerGroup") or DEFAULT_CONSUMER_GROUP).strip(),
            timeout=float(_positive_int(o, "timeoutSeconds", 10) or 10),
        )


def case_insensitive(options: Mapping[str, str]) -> _CaseInsensitive:
    """Options looked up without regard to case (Spark lower-cases data source option names)."""
    return _CaseInsensitive({str(k).lower(): v for k, v in options.items()})


class _CaseInsensitive(dict):
    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        return super().get(key.lower(), default)


@attrs.frozen
class WriteOptions:
    namesrv: str
    topic: str | None
    batch_size: int
    producer_group: str
    timeout: float

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> WriteOptions:
        opts = case_insensitive(options)
        topic = (opts.get("topic") or "").strip() or None
        return cls(
            namesrv=_namesrv(opts.get("namesrv")),
            topic=topic,
            batch_size=_positive_int(opts, "batchSize", DEFAULT_SEND_BATCH_SIZE) or DEFAULT_SEND_BATCH_SIZE,
            producer_group=(opts.get("producerGroup") or "pyrmq-spark-producer").strip(),
            timeout=float(_positive_int(opts, "timeoutSeconds", 10) or 10),
        )
