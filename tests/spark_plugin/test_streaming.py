"""Structured streaming: per-queue offsets in the checkpoint, maxMessagesPerTrigger, AvailableNow, restart."""

from __future__ import annotations

import json
import os
import time
from typing import Any


def _stream(spark: Any, broker: Any, topic: str, **options: str) -> Any:
    reader = spark.readStream.format("pyrmq").option("namesrv", broker.namesrv).option("topic", topic)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def _run_available_now(spark, broker, topic, out, checkpoint, **options) -> Any:
    query = (
        _stream(spark, broker, topic, **options)
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    assert query.exception() is None
    return query


def _offsets_files(checkpoint) -> list[dict]:
    d = os.path.join(checkpoint, "offsets")
    out = []
    for name in sorted((n for n in os.listdir(d) if n.isdigit()), key=int):
        with open(os.path.join(d, name)) as f:
            out.append(json.loads(f.read().splitlines()[-1]))
    return out


def test_stream_restarted_from_its_checkpoint_writes_every_message_once(spark, broker, topic, tmp_path) -> None:
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    first = broker.produce(topic, 90, prefix="first")
    query = _run_available_now(spark, broker, topic, out, checkpoint, startingOffsets="earliest", maxMessagesPerTrigger="40")
    # AvailableNow honours the per-trigger limit: 90 messages in batches of at most 40
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sum(sizes) == 90 and max(sizes) <= 40 and len(sizes) >= 3
    # the stream's offsets in the checkpoint are per-queue JSON: broker -> queue id -> next offset
    last = _offsets_files(checkpoint)[-1]
    assert last == {broker.broker_name: {"0": 23, "1": 23, "2": 22, "3": 22}}

    second = broker.produce(topic, 50, prefix="second")
    _run_available_now(spark, broker, topic, out, checkpoint, startingOffsets="earliest", maxMessagesPerTrigger="40")

    # a third run with a processing-time trigger over a topic that grows while it runs, stopped midway
    query = (
        _stream(spark, broker, topic, maxMessagesPerTrigger="25")
        .writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="200 milliseconds").start()
    )
    third = []
    for i in range(3):
        third += broker.produce(topic, 20, prefix=f"third{i}")
        time.sleep(0.3)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and spark.read.parquet(str(out)).count() < 200:
        time.sleep(0.5)
    query.stop()
    assert query.exception() is None

    rows = spark.read.parquet(str(out)).select("queue_id", "queue_offset", "body").collect()
    keys = [(r.queue_id, r.queue_offset) for r in rows]
    assert len(keys) == len(set(keys)) == 200  # no duplicate, nothing lost
    assert sorted(r.body for r in rows) == sorted(s.body for s in first + second + third)


def test_stream_starts_at_latest_by_default(spark, broker, topic, tmp_path) -> None:
    broker.produce(topic, 12, prefix="old")
    stream = _stream(spark, broker, topic)
    query = stream.writeStream.format("memory").queryName("latest_default").trigger(processingTime="100 milliseconds").start()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not query.recentProgress:
            time.sleep(0.1)  # the first batch fixes the starting offsets
        new = broker.produce(topic, 8, prefix="new")
        while time.monotonic() < deadline and spark.table("latest_default").count() < 8:
            time.sleep(0.2)
        bodies = sorted(r.body for r in spark.table("latest_default").collect())
    finally:
        query.stop()
    assert bodies == sorted(s.body for s in new)
