"""The sink: DataFrame rows become messages that a consumer then receives."""

from __future__ import annotations

import pytest


def test_batch_write_sends_rows_that_a_consumer_receives(spark, broker, topic) -> None:
    rows = [(f"body-{i}", f"tag{i % 2}", f"k{i}", {"n": str(i), "team": "data"}) for i in range(300)]
    df = spark.createDataFrame(rows, "body string, tags string, keys string, properties map<string,string>").repartition(3)
    df.write.format("pyrmq").option("namesrv", broker.namesrv).option("topic", topic).option("batchSize", "50").mode("append").save()

    got = broker.consume(topic)
    assert sorted(m.body for m in got) == sorted(r[0].encode() for r in rows)
    by_body = {m.body.decode(): m for m in got}
    for body, tag, key, props in rows[:20]:
        m = by_body[body]
        assert (m.tags, m.keys, m.properties["n"], m.properties["team"]) == (tag, key, props["n"], "data")
        assert len(m.uniq_key or "") == 32  # every message carries a client unique id (for de-duplication)
    assert len({m.queue_id for m in got}) > 1  # spread over the topic's queues


def test_write_with_a_topic_column_and_binary_body(spark, broker, topic) -> None:
    other = topic + "_b"
    broker.create_topic(other, 2)
    df = spark.createDataFrame([(bytes([i, 0, 255]), topic if i % 2 else other) for i in range(40)], "body binary, topic string")
    df.write.format("pyrmq").option("namesrv", broker.namesrv).mode("append").save()
    assert sorted(m.body for m in broker.consume(topic)) == sorted(bytes([i, 0, 255]) for i in range(1, 40, 2))
    assert sorted(m.body for m in broker.consume(other, 2)) == sorted(bytes([i, 0, 255]) for i in range(0, 40, 2))


def test_write_without_a_body_column_names_it(spark, broker, topic) -> None:
    df = spark.createDataFrame([("x",)], "payload string")
    with pytest.raises(Exception, match="needs a column 'body'"):
        df.write.format("pyrmq").option("namesrv", broker.namesrv).option("topic", topic).mode("append").save()


def test_streaming_write_copies_a_topic(spark, broker, topic, tmp_path) -> None:
    target = topic + "_copy"
    broker.create_topic(target, 4)
    sent = broker.produce(topic, 60)
    query = (
        spark.readStream.format("pyrmq").option("namesrv", broker.namesrv).option("topic", topic)
        .option("startingOffsets", "earliest").load()
        .select("body", "tags", "keys")
        .writeStream.format("pyrmq").option("namesrv", broker.namesrv).option("topic", target)
        .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start()
    )
    assert query.awaitTermination(120) and query.exception() is None
    got = broker.consume(target)
    assert sorted((m.body, m.tags, m.keys) for m in got) == sorted((s.body, s.tags, s.keys) for s in sent)
