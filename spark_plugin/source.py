"""The PySpark data source ``pyrmq``: batch and streaming reads, batch and streaming writes.

Imported only through :func:`pyrmq.spark_plugin.register` (it imports pyspark at module level). Readers yield
``pyarrow.RecordBatch`` objects in the schema of :data:`~pyrmq.spark_plugin.records.SCHEMA_DDL`.

Partitions read through the remoting protocol (pipelined pulls on the task's own socket) so executors may run
anywhere; a partition whose broker has a ``storePath`` reads the store files directly instead. Streaming offsets are per-queue offsets
``{"broker": {"queue id": next offset}}``: a micro-batch reads ``[start, end)`` of every queue, the same rows
whenever it is replayed, so a restarted query with a file sink writes every message exactly once.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from pyrmq.client import BlockingPullConsumer, MessageQueue
from pyrmq.client.pipelined_pull import direct_pull_range

from .options import OptionError, ReadOptions, WriteOptions, offsets_from_json, offsets_to_json
from .planning import QueueRange, cap_per_trigger, open_consumer, plan_batch, queue_key, read_queues, resolve, split
from .records import COLUMNS, Columns
from .sink import send_batches

log = logging.getLogger("pyrmq.spark")

ARROW_BATCH_ROWS = 8192


class QueueRangePartition(InputPartition):
    def __init__(self, value: QueueRange) -> None:
        super().__init__(value)


def read_range(r: QueueRange | None, options: ReadOptions, arrow_schema: Any) -> Iterator[Any]:
    """The messages of one queue range as Arrow record batches."""
    if r is None:
        return  # Spark reads one empty partition when there is nothing to plan
    if r.store_root is not None:
        from .store_reader import StoreReader

        reader = StoreReader(r.store_root, r.topic, r.queue_id)
        try:
            for cols in reader.read_into(Columns(r.topic, r.broker_name, r.queue_id), r.start, r.end, options.tags, ARROW_BATCH_ROWS):
                yield cols.to_arrow(arrow_schema, options.tags)
        finally:
            reader.close()
        return
    cols = Columns(r.topic, r.broker_name, r.queue_id)
    consumer = open_consumer(options.namesrv, options.consumer_group, options.timeout)
    try:
        # pipelined raw pulls on this thread's own socket (the consumer finds the broker): no second thread to hand
        # the answers over from, so the worker's one core decodes; the records are decoded in bulk (records.py)
        mq = MessageQueue(r.topic, r.broker_name, r.queue_id)
        for batch in direct_pull_range(consumer, mq, r.start, r.end, expression=options.subscription, timeout=options.timeout):
            cols.add_all(batch.body, batch.start, batch.end)
            if len(cols) >= ARROW_BATCH_ROWS:
                yield cols.to_arrow(arrow_schema, options.tags)
                cols = Columns(r.topic, r.broker_name, r.queue_id)
    finally:
        consumer.shutdown()
    if len(cols):
        yield cols.to_arrow(arrow_schema, options.tags)


def _arrow_schema(schema: StructType) -> Any:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


SCHEMA = StructType(
    [
        StructField("topic", StringType()),
        StructField("broker_name", StringType()),
        StructField("queue_id", IntegerType()),
        StructField("queue_offset", LongType()),
        StructField("msg_id", StringType()),
        StructField("keys", StringType()),
        StructField("tags", StringType()),
        StructField("properties", MapType(StringType(), StringType())),
        StructField("body", BinaryType()),
        StructField("born_timestamp", TimestampType()),
        StructField("store_timestamp", TimestampType()),
        StructField("born_host", StringType()),
        StructField("store_host", StringType()),
        StructField("reconsume_times", IntegerType()),
    ]
)
assert tuple(SCHEMA.fieldNames()) == COLUMNS


def _check_schema(schema: StructType) -> None:
    ours = SCHEMA
    if schema.simpleString() != ours.simpleString():
        raise OptionError("schema", f"the pyrmq source has a fixed schema {ours.simpleString()}; got {schema.simpleString()}")


class PyrmqDataSource(DataSource):
    """``spark.read.format("pyrmq")`` / ``readStream`` / ``write`` / ``writeStream``: see docs/spark.md."""

    @classmethod
    def name(cls) -> str:
        return "pyrmq"

    def schema(self) -> StructType:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        _check_schema(schema)
        return PyrmqBatchReader(ReadOptions.parse(self.options), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        _check_schema(schema)
        return PyrmqStreamReader(ReadOptions.parse(self.options, streaming=True), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        return PyrmqWriter(_write_options(self.options, schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamArrowWriter:
        return PyrmqStreamWriter(_write_options(self.options, schema))


class PyrmqBatchReader(DataSourceReader):
    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        return [QueueRangePartition(r) for r in plan_batch(self.options)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        yield from read_range(getattr(partition, "value", None), self.options, _arrow_schema(self.schema))


class PyrmqStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets: ``{"broker": {"queue id": next offset}}``; queues that appear later start at 0 (their earliest)."""

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self._client: BlockingPullConsumer | None = None
        self._target: dict[tuple[str, int], int] | None = None  # Trigger.AvailableNow's end

    @property
    def client(self) -> BlockingPullConsumer:
        if self._client is None:
            self._client = open_consumer(self.options.namesrv, self.options.consumer_group, self.options.timeout)
        return self._client

    def _queues(self) -> list[Any]:
        return read_queues(self.client, self.options.topic)

    def _latest(self) -> dict[tuple[str, int], int]:
        queues = self._queues()
        return {queue_key(mq): self.client.max_offset(mq) for mq in queues}

    def initialOffset(self) -> dict:
        queues = self._queues()
        return offsets_to_json(resolve(self.client, self.options.topic, queues, self.options.starting, "startingOffsets"))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_per_trigger is not None:
            return ReadMaxRows(self.options.max_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._latest()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = offsets_from_json(start)
        latest = self._target if self._target is not None else self._latest()
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        return offsets_to_json(cap_per_trigger(begin, latest, max_rows))

    def reportLatestOffset(self) -> dict | None:
        try:
            return offsets_to_json(self._latest())
        except Exception:  # noqa: BLE001 - only for the query's status display
            return None

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin = offsets_from_json(start)
        stop = offsets_from_json(end)
        queues = [mq for mq in self._queues() if queue_key(mq) in stop]
        missing = [k for k in set(stop) - {queue_key(mq) for mq in queues} if stop[k] > begin.get(k, 0)]
        if missing:
            names = ", ".join(f"{b}/{q}" for b, q in sorted(missing))
            raise RuntimeError(f"queues {names} of topic {self.options.topic!r} are no longer routed: cannot read {start} .. {end}")
        return [QueueRangePartition(r) for r in split(self.options, queues, {k: begin.get(k, 0) for k in stop}, stop)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        yield from read_range(getattr(partition, "value", None), self.options, _arrow_schema(self.schema))

    def commit(self, end: dict) -> None:
        pass  # offsets live in Spark's checkpoint; nothing to tell the broker

    def stop(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            client.shutdown()
            self._client = None


# ---------------------------------------------------------------------------------------------------------------
# Sink
# ---------------------------------------------------------------------------------------------------------------

_OPTIONAL_COLUMNS = {"topic": StringType(), "tags": StringType(), "keys": StringType(), "properties": MapType(StringType(), StringType())}


def _write_options(options: Any, schema: StructType) -> WriteOptions:
    parsed = WriteOptions.parse(options)
    fields = {f.name: f.dataType for f in schema.fields}
    body = fields.get("body")
    if body is None or not isinstance(body, (BinaryType, StringType)):
        raise OptionError("body", f"the DataFrame to write needs a column 'body' of type binary or string; it has {schema.simpleString()}")
    for name, want in _OPTIONAL_COLUMNS.items():
        if name in fields and type(fields[name]) is not type(want):
            raise OptionError(name, f"column {name!r} must be {want.simpleString()}, not {fields[name].simpleString()}")
    if parsed.topic is None and "topic" not in fields:
        raise OptionError("topic", "give the option topic, or a column 'topic' in the DataFrame")
    return parsed


class SentMessages(WriterCommitMessage):
    def __init__(self, count: int) -> None:
        self.count = count


class PyrmqWriter(DataSourceArrowWriter):
    """Each task sends its rows in SEND_BATCH_MESSAGE batches. A failed task is retried by Spark and re-sends its
    whole partition: at-least-once (each message carries a fresh UNIQ_KEY for consumers that drop duplicates)."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[Any]) -> SentMessages:
        return SentMessages(send_batches(self.options, iterator))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        total = sum(m.count for m in messages if isinstance(m, SentMessages))
        log.info("pyrmq sink: %d messages sent", total)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        sent = sum(m.count for m in messages if isinstance(m, SentMessages))
        log.warning("pyrmq sink: write aborted after %d messages were sent (they stay sent: at-least-once)", sent)


class PyrmqStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[Any]) -> SentMessages:
        return SentMessages(send_batches(self.options, iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("pyrmq sink: micro-batch %d aborted; Spark re-runs it (at-least-once)", batchId)
