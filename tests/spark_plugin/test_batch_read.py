"""Batch reads against a real broker: every message once, right fields, offset ranges, timestamps, tags, both paths."""

from __future__ import annotations

import datetime as dt
import json
import time
from typing import Any

import pytest

PATHS = ["remoting", "store"]


def _opts(path: str, broker: Any, **extra: str) -> dict[str, str]:
    return {**extra, **({"storePath": broker.store_dir} if path == "store" else {})}


@pytest.mark.parametrize("path", PATHS)
def test_batch_read_returns_every_message_once_with_its_fields(broker, read, topic, path) -> None:
    sent = broker.produce(topic, 120)
    df = read(topic, **_opts(path, broker, maxMessagesPerPartition="10"))
    # 4 queues of 30 messages, cut into ranges of 10: one partition per range
    assert df.rdd.getNumPartitions() == 12
    rows = df.collect()
    assert len(rows) == len(sent)
    by_key = {(r.queue_id, r.queue_offset): r for r in rows}
    assert len(by_key) == len(sent)
    for s in sent:
        r = by_key[(s.queue_id, s.queue_offset)]
        assert (r.topic, r.broker_name, r.body, r.tags, r.keys) == (topic, broker.broker_name, s.body, s.tags, s.keys)
        assert r.msg_id == s.msg_id  # the offset message id the send answered (spec 5.9)
        assert r.properties["seq"] == s.properties["seq"] and r.properties["TAGS"] == s.tags
        assert r.store_host == broker.addr
        assert r.born_host.startswith("127.0.0.1:")
        assert r.reconsume_times == 0
        born = r.born_timestamp.replace(tzinfo=dt.timezone.utc) if r.born_timestamp.tzinfo is None else r.born_timestamp
        assert int(born.timestamp() * 1000) == s.born_timestamp
        assert r.store_timestamp >= r.born_timestamp


def test_schema_is_kafka_like(read, broker, topic) -> None:
    df = read(topic)
    assert df.schema.simpleString() == (
        "struct<topic:string,broker_name:string,queue_id:int,queue_offset:bigint,msg_id:string,keys:string,tags:string,"
        "properties:map<string,string>,body:binary,born_timestamp:timestamp,store_timestamp:timestamp,born_host:string,"
        "store_host:string,reconsume_times:int>"
    )
    assert df.count() == 0  # an empty topic reads as no rows


@pytest.mark.parametrize("path", PATHS)
def test_offset_ranges_select_their_rows(broker, read, topic, path) -> None:
    broker.produce(topic, 80)  # 20 per queue
    b = broker.broker_name
    start = json.dumps({b: {"0": 5, "1": -1}, f"{b}/2": 18})
    end = json.dumps({f"{b}/0": 12, f"{b}/2": -1, b: {"3": 3}})
    rows = read(topic, **_opts(path, broker, startingOffsets=start, endingOffsets=end)).select("queue_id", "queue_offset").collect()
    got = sorted((r.queue_id, r.queue_offset) for r in rows)
    want = [(0, o) for o in range(5, 12)] + [(2, 18), (2, 19)] + [(3, o) for o in range(0, 3)]
    assert got == want  # queue 1 starts at latest: nothing


def test_offsets_naming_an_unknown_queue_fail_with_the_option(broker, read, topic) -> None:
    broker.produce(topic, 4)
    with pytest.raises(Exception, match="startingOffsets.*no queue broker-x/0"):
        read(topic, startingOffsets='{"broker-x": {"0": 1}}').collect()
    with pytest.raises(Exception, match="option 'endingOffsets'"):
        read(topic, endingOffsets="not-a-time").collect()


@pytest.mark.parametrize("path", PATHS)
def test_timestamps_select_by_store_time(broker, read, topic, path) -> None:
    before = broker.produce(topic, 40, prefix="before")
    time.sleep(0.05)
    cut = int(time.time() * 1000)
    time.sleep(0.05)
    after = broker.produce(topic, 40, prefix="after")
    late = read(topic, **_opts(path, broker, startingOffsets=str(cut))).collect()
    assert sorted(r.body for r in late) == sorted(s.body for s in after)
    iso = dt.datetime.fromtimestamp(cut / 1000, dt.timezone.utc).isoformat()
    early = read(topic, **_opts(path, broker, endingOffsets=iso)).collect()
    assert sorted(r.body for r in early) == sorted(s.body for s in before)


@pytest.mark.parametrize("path", PATHS)
def test_subscription_keeps_the_tags_asked_for(broker, read, topic, path) -> None:
    sent = broker.produce(topic, 60, tags=("red", "green", "blue"))
    rows = read(topic, **_opts(path, broker, subscription="red || blue")).collect()
    assert sorted(r.body for r in rows) == sorted(s.body for s in sent if s.tags in ("red", "blue"))
    assert {r.tags for r in rows} == {"red", "blue"}


def test_store_path_and_remoting_read_the_same_rows(broker, read, topic) -> None:
    broker.produce(topic, 100)
    cols = ["queue_id", "queue_offset", "msg_id", "body", "properties", "store_timestamp", "born_host"]
    remote = read(topic).select(*cols).collect()
    direct = read(topic, storePath=broker.store_dir).select(*cols).collect()
    assert sorted(remote) == sorted(direct) and len(direct) == 100


def test_store_path_that_is_not_a_store_says_so(broker, read, topic, tmp_path) -> None:
    broker.produce(topic, 4)
    with pytest.raises(Exception, match="storePath.*not a broker store"):
        read(topic, storePath=str(tmp_path)).collect()
