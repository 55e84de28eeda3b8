"""Without Spark: the base install, Java detection, and option errors that name the option."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from pyrmq.spark_plugin.options import EARLIEST, LATEST, OptionError, ReadOptions, WriteOptions, parse_offsets
from pyrmq.spark_plugin.planning import cap_per_trigger
from pyrmq.spark_plugin.session import SparkSetupError, check_java

# Blocks pyspark and pyarrow as if the extra were not installed, then runs the code given.
_WITHOUT_EXTRA = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('pyspark', 'pyarrow'):
            raise ImportError('No module named ' + repr(name))
sys.meta_path.insert(0, Block())
"""


def test_base_install_imports_the_plugin_and_export_says_how_to_install_the_extra(tmp_path) -> None:
    code = _WITHOUT_EXTRA + f"""
import pyrmq.spark_plugin, pyrmq.spark_plugin.cli
from pyrmq.kernel.cli import main
sys.exit(main(['export', '--namesrv', '127.0.0.1:1', '--topic', 'T', '--to', {str(tmp_path / 'out')!r}]))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYRMQ_DISABLE_PLUGIN_AUTOLOAD="1"))
    assert proc.returncode == 2, proc.stderr
    assert "pip install 'pyrmq[spark]'" in proc.stderr
    assert "pyspark" in proc.stderr


def test_register_without_the_extra_raises_a_clear_error() -> None:
    code = _WITHOUT_EXTRA + """
from pyrmq.spark_plugin import register, SparkSetupError
try:
    register(object())
except SparkSetupError as exc:
    print(exc)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "pip install 'pyrmq[spark]'" in proc.stdout


def _fake_java(tmp_path, banner: str) -> str:
    java = tmp_path / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text(f"#!/bin/sh\necho '{banner}' >&2\n")
    java.chmod(java.stat().st_mode | stat.S_IEXEC)
    return str(tmp_path)


def test_missing_java_is_reported_with_what_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SparkSetupError, match=r"Java 17\+ is missing.*openjdk-17"):
        check_java()


def test_old_java_is_reported_with_its_version(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("JAVA_HOME", _fake_java(tmp_path, 'openjdk version "1.8.0_392"'))
    with pytest.raises(SparkSetupError, match=r"needs Java 17\+, but .* is Java 8"):
        check_java()
    monkeypatch.setenv("JAVA_HOME", _fake_java(tmp_path / "j21", 'openjdk version "21.0.2" 2024-01-16'))
    assert check_java() == 21


def test_offsets_options() -> None:
    assert parse_offsets(None, "startingOffsets", default="earliest").kind == "earliest"
    assert parse_offsets("LATEST", "startingOffsets", default="earliest").kind == "latest"
    spec = parse_offsets('{"broker-a": {"0": 5, "1": -1}, "broker-b/3": -2}', "startingOffsets", default="earliest")
    assert spec.kind == "map" and spec.per_queue == {("broker-a", 0): 5, ("broker-a", 1): LATEST, ("broker-b", 3): EARLIEST}
    assert parse_offsets("1732197600000", "endingOffsets", default="latest").timestamp == 1732197600000
    assert parse_offsets("2024-11-21T14:00:00Z", "endingOffsets", default="latest").timestamp == 1732197600000


@pytest.mark.parametrize(
    ("options", "option", "words"),
    [
        ({"topic": "T"}, "namesrv", "required"),
        ({"namesrv": "localhost", "topic": "T"}, "namesrv", "host:port"),
        ({"namesrv": "127.0.0.1:9876"}, "topic", "required"),
        ({"namesrv": "127.0.0.1:9876", "topic": "T", "startingOffsets": "yesterday"}, "startingOffsets", "earliest, latest"),
        ({"namesrv": "127.0.0.1:9876", "topic": "T", "endingOffsets": "{oops"}, "endingOffsets", "invalid JSON"),
        ({"namesrv": "127.0.0.1:9876", "topic": "T", "startingOffsets": '{"b": {"x": 1}}'}, "startingOffsets", "not an integer"),
        ({"namesrv": "127.0.0.1:9876", "topic": "T", "maxMessagesPerPartition": "0"}, "maxMessagesPerPartition", "positive integer"),
        ({"namesrv": "127.0.0.1:9876", "topic": "T", "subscription": "a || "}, "subscription", "tag expression"),
    ],
)
def test_bad_read_options_name_the_option(options: dict[str, str], option: str, words: str) -> None:
    with pytest.raises(OptionError, match=words) as info:
        ReadOptions.parse(options)
    assert info.value.option == option
    assert repr(option) in str(info.value)


def test_option_names_are_case_insensitive_as_spark_passes_them_lowercased() -> None:
    opts = ReadOptions.parse({"namesrv": "h:1", "topic": "T", "startingoffsets": "latest", "maxmessagesperpartition": "7"})
    assert opts.starting.kind == "latest" and opts.max_per_partition == 7
    with pytest.raises(OptionError, match="batch reads only"):
        ReadOptions.parse({"namesrv": "h:1", "topic": "T", "endingOffsets": "latest"}, streaming=True)
    assert WriteOptions.parse({"namesrv": "h:1", "batchsize": "10"}).batch_size == 10


def test_per_trigger_cap_shares_the_budget_fairly() -> None:
    start = {("b", 0): 0, ("b", 1): 10, ("b", 2): 0}
    latest = {("b", 0): 100, ("b", 1): 12, ("b", 2): 100, ("b", 3): 5}
    end = cap_per_trigger(start, latest, 50)
    assert sum(end[k] - start.get(k, 0) for k in end) == 50
    assert end[("b", 1)] == 12 and end[("b", 3)] == 5  # short queues are drained, the rest is shared
    assert cap_per_trigger(start, latest, None) == latest
