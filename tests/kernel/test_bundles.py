"""Bundles: TOML and broker.conf parsing, and errors that name the file, the key and what was expected."""

from __future__ import annotations

import textwrap

import pytest

from pyrmq.kernel.bundles import load_bundle, parse_delay_levels, parse_java_properties
from pyrmq.kernel.errors import ConfigError, PluginError
from pyrmq.kernel.manager import load_plugins


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def test_packaged_broker_bundle_has_rocketmq_defaults():
    bundle = load_bundle("broker")
    broker = bundle.broker
    assert bundle.roles == ("broker",)
    assert (broker.brokerClusterName, broker.brokerName, broker.brokerId) == ("DefaultCluster", "broker-a", 0)
    assert (broker.listenPort, broker.haListenPort) == (10911, 10912)
    assert broker.flushDiskType == "ASYNC_FLUSH" and broker.brokerRole == "ASYNC_MASTER"
    assert broker.mappedFileSizeCommitLog == 1 << 30 and broker.maxMessageSize == 4 << 20
    assert (broker.fileReservedTime, broker.deleteWhen, broker.diskMaxUsedSpaceRatio) == (72, "04", 75)
    assert broker.autoCreateTopicEnable and broker.defaultTopicQueueNums == 8
    assert len(broker.delay_levels_ms) == 18 and broker.delay_levels_ms[1] == 5000 and broker.delay_levels_ms[-1] == 7_200_000


def test_bad_value_names_file_key_and_expectation(tmp_path):
    path = write(tmp_path, "b.toml", """
        [bundle]
        name = "b"
        roles = ["broker"]
        [broker]
        flushDiskType = "SOMETIMES"
    """)
    with pytest.raises(ConfigError) as err:
        load_bundle(path)
    text = str(err.value)
    assert str(path) in text and "flushDiskType" in text and "ASYNC_FLUSH" in text and "SOMETIMES" in text


def test_wrong_type_is_reported(tmp_path):
    path = write(tmp_path, "b.toml", """
        [bundle]
        name = "b"
        roles = ["broker"]
        [broker]
        listenPort = "ten"
    """)
    with pytest.raises(ConfigError, match=r"listenPort.*expected an integer.*'ten'"):
        load_bundle(path)


def test_misspelled_setting_gets_a_suggestion(tmp_path):
    path = write(tmp_path, "b.toml", """
        [bundle]
        name = "b"
        roles = ["broker"]
        [broker]
        autoCreateTopicEnabled = true
    """)
    with pytest.raises(ConfigError, match="did you mean 'autoCreateTopicEnable'"):
        load_bundle(path)


def test_misspelled_bundle_key_and_unknown_role(tmp_path):
    with pytest.raises(ConfigError, match="did you mean 'plugins'"):
        load_bundle(write(tmp_path, "a.toml", '[bundle]\nname = "a"\nplugin = []\n'))
    with pytest.raises(ConfigError, match="unknown role 'brokr'"):
        load_bundle(write(tmp_path, "c.toml", '[bundle]\nname = "c"\nroles = ["brokr"]\n'))


def test_misspelled_plugin_fails_naming_it(tmp_path):
    path = write(tmp_path, "p.toml", """
        [bundle]
        name = "p"
        plugins = ["pyrmq.plugins.builtin.esentials"]
    """)
    with pytest.raises(PluginError) as err:
        load_plugins(load_bundle(path), entry_points_enabled=False)
    assert "pyrmq.plugins.builtin.esentials" in str(err.value) and str(path) in str(err.value)


def test_plugin_settings_must_belong_to_a_listed_plugin(tmp_path):
    path = write(tmp_path, "p.toml", """
        [bundle]
        name = "p"
        plugins = ["pyrmq.plugins.builtin.essentials"]
        [plugins."pyrmq.plugins.builtin.delay"]
        levels = "1s"
    """)
    with pytest.raises(ConfigError, match="not in bundle.plugins"):
        load_bundle(path)


def test_unknown_packaged_bundle_lists_the_shipped_ones():
    with pytest.raises(ConfigError, match="packaged bundles: .*broker.*dev"):
        load_bundle("nosuchbundle")


def test_broker_conf_in_java_properties_format(tmp_path, caplog):
    path = write(tmp_path, "broker.conf", """
        # a RocketMQ broker.conf
        brokerClusterName = DefaultCluster
        brokerName=broker-b
        brokerId : 0
        deleteWhen = 04
        fileReservedTime = 48
        brokerRole = SYNC_MASTER
        flushDiskType = SYNC_FLUSH
        namesrvAddr = 127.0.0.1:9876;127.0.0.1:9877
        autoCreateTopicEnable=false
        sendMessageThreadPoolNums = 16
    """)
    bundle = load_bundle(path)
    b = bundle.broker
    assert (b.brokerName, b.fileReservedTime, b.brokerRole, b.flushDiskType) == ("broker-b", 48, "SYNC_MASTER", "SYNC_FLUSH")
    assert b.autoCreateTopicEnable is False
    assert b.namesrv_addresses == ["127.0.0.1:9876", "127.0.0.1:9877"]
    assert bundle.plugins == load_bundle("broker").plugins
    assert "sendMessageThreadPoolNums" in caplog.text


def test_broker_conf_bad_value_names_the_file(tmp_path):
    path = write(tmp_path, "broker.conf", "brokerId = first\n")
    with pytest.raises(ConfigError) as err:
        load_bundle(path)
    assert str(path) in str(err.value) and "brokerId" in str(err.value)


def test_java_properties_continuations_and_separators():
    props = parse_java_properties(["a=1", "! comment", "b : two", "c three", "d = x \\", "   y", "", "# x=y"])
    assert props == {"a": "1", "b": "two", "c": "three", "d": "x y"}


def test_overrides_from_the_command_line():
    bundle = load_bundle("dev").with_overrides({"broker.listenPort": "20911", "namesrv.listenPort": 19876, "brokerName": "b2"})
    assert (bundle.broker.listenPort, bundle.namesrv.listenPort, bundle.broker.brokerName) == (20911, 19876, "b2")
    with pytest.raises(ConfigError, match="deleteWhen"):
        bundle.with_overrides({"deleteWhen": "25"})


def test_delay_levels_parse_and_reject_bad_tokens():
    assert parse_delay_levels("1s 2m 1h 1d") == (1000, 120_000, 3_600_000, 86_400_000)
    with pytest.raises(ValueError, match="5x"):
        parse_delay_levels("1s 5x")
