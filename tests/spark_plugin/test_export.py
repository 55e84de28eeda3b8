"""``pyrmq export``: the command writes Parquet (or JSON) that Spark reads back; --follow resumes exactly once.

The command runs in this process (through the CLI's ``main``) so it shares the session's JVM; a program that already
has a Spark session keeps it after the command.
"""

from __future__ import annotations

import json

from pyrmq.kernel.cli import main


def test_export_writes_parquet_that_spark_reads_back(spark, broker, topic, tmp_path, capsys) -> None:
    sent = broker.produce(topic, 150)
    out = tmp_path / "export"
    status = main(["export", "--namesrv", broker.namesrv, "--topic", topic, "--to", str(out)])
    assert status == 0
    err = capsys.readouterr().err
    assert "exported 150 messages" in err and "msg/s" in err and "MB/s" in err
    df = spark.read.parquet(str(out))
    assert df.columns[:5] == ["topic", "broker_name", "queue_id", "queue_offset", "msg_id"]
    rows = df.collect()
    assert sorted(r.body for r in rows) == sorted(s.body for s in sent)
    assert {r.msg_id for r in rows} == {s.msg_id for s in sent}
    assert not spark.sparkContext._jsc.sc().isStopped()  # the caller's session survives


def test_export_json_with_a_range(spark, broker, topic, tmp_path) -> None:
    broker.produce(topic, 40)
    b = broker.broker_name
    out = tmp_path / "json"
    until = json.dumps({b: {"0": 4, "1": 0, "2": 0, "3": 0}})
    assert main(["export", "--namesrv", broker.namesrv, "--topic", topic, "--to", str(out), "--format", "json", "--until", until, "--quiet"]) == 0
    rows = spark.read.json(str(out)).collect()
    assert sorted((r.queue_id, r.queue_offset) for r in rows) == [(0, o) for o in range(4)]


def test_export_follow_resumes_from_its_checkpoint(spark, broker, topic, tmp_path) -> None:
    out, cp = tmp_path / "follow", tmp_path / "follow.cp"
    args = ["export", "--namesrv", broker.namesrv, "--topic", topic, "--to", str(out), "--follow", "--once", "--checkpoint", str(cp), "--quiet"]
    first = broker.produce(topic, 30, prefix="a")
    assert main(args) == 0
    second = broker.produce(topic, 30, prefix="b")
    assert main(args) == 0
    rows = spark.read.parquet(str(out)).collect()
    assert sorted(r.body for r in rows) == sorted(s.body for s in first + second)


def test_export_bad_option_names_the_flag(broker, topic, tmp_path, capsys) -> None:
    status = main(["export", "--namesrv", broker.namesrv, "--topic", topic, "--to", str(tmp_path / "x"), "--from", "last tuesday"])
    assert status == 2
    assert "--from ('startingOffsets')" in capsys.readouterr().err
