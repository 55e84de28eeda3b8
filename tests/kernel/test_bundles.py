"""Bundles: TOML and broker.conf parsing, includes, and errors that name the file, the key and what was expected.

A bundle keeps its values as written; the plugins declare the keys (``pyrmq_register_settings``) and the kernel checks
them when it loads the plugins, so these tests read settings through :func:`settings_of` (what ``build_kernel`` does).
"""

from __future__ import annotations

import textwrap

import pytest

from types import SimpleNamespace

from pyrmq.kernel.bundles import Bundle, load_bundle, packaged_bundle_path
from pyrmq.kernel.javaprops import parse_java_properties
from pyrmq.kernel.errors import ConfigError, PluginError
from pyrmq.kernel.manager import load_plugins
from pyrmq.kernel.service import bundle_settings
from pyrmq.plugins.broker.delay_levels import DelayLevelSettings, parse_delay_levels
from pyrmq.plugins.broker.settings import BrokerSettings


def settings_of(bundle: Bundle):
    """The bundle's settings as its plugins declare and check them (what build_kernel does)."""
    return bundle_settings(bundle)


def section(bundle: Bundle, name: str = "broker") -> SimpleNamespace:
    """Every key of a section, parsed, as attributes."""
    return SimpleNamespace(**settings_of(bundle).section(name))


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def test_packaged_broker_bundle_has_rocketmq_defaults():
    bundle = load_bundle("broker")
    broker = section(bundle)
    assert bundle.roles == ("broker",)
    assert (broker.brokerClusterName, broker.brokerName, broker.brokerId) == ("DefaultCluster", "broker-a", 0)
    assert (broker.listenPort, broker.haListenPort) == (10911, 10912)
    assert broker.flushDiskType == "ASYNC_FLUSH" and broker.brokerRole == "ASYNC_MASTER"
    assert broker.mappedFileSizeCommitLog == 1 << 30 and broker.maxMessageSize == 4 << 20
    assert (broker.fileReservedTime, broker.deleteWhen, broker.diskMaxUsedSpaceRatio) == (72, "04", 75)
    assert broker.autoCreateTopicEnable and broker.defaultTopicQueueNums == 8
    levels = settings_of(bundle)(DelayLevelSettings).delay_levels_ms
    assert len(levels) == 18 and levels[1] == 5000 and levels[-1] == 7_200_000


def test_bad_value_names_file_key_and_expectation(tmp_path):
    path = write(tmp_path, "b.toml", """
        [bundle]
        name = "b"
        roles = ["broker"]
        include = ["broker"]
        [broker]
        flushDiskType = "SOMETIMES"
    """)
    with pytest.raises(ConfigError) as err:
        settings_of(load_bundle(path))
    text = str(err.value)
    assert str(path) in text and "flushDiskType" in text and "ASYNC_FLUSH" in text and "SOMETIMES" in text


def test_wrong_type_is_reported(tmp_path):
    path = write(tmp_path, "b.toml", """
        [bundle]
        name = "b"
        roles = ["broker"]
        include = ["broker"]
        [broker]
        listenPort = "ten"
    """)
    with pytest.raises(ConfigError, match=r"listenPort.*expected an integer.*'ten'"):
        settings_of(load_bundle(path))


def test_misspelled_setting_gets_a_suggestion(tmp_path):
    path = write(tmp_path, "b.toml", """
        [bundle]
        name = "b"
        roles = ["broker"]
        include = ["broker"]
        [broker]
        autoCreateTopicEnabled = true
    """)
    with pytest.raises(ConfigError, match="did you mean 'autoCreateTopicEnable'"):
        settings_of(load_bundle(path))


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
    b = settings_of(bundle)(BrokerSettings)
    assert (b.brokerName, b.fileReservedTime, b.brokerRole, b.flushDiskType) == ("broker-b", 48, "SYNC_MASTER", "SYNC_FLUSH")
    assert b.autoCreateTopicEnable is False
    assert b.namesrv_addresses == ["127.0.0.1:9876", "127.0.0.1:9877"]
    assert bundle.plugins == load_bundle("broker").plugins
    assert "sendMessageThreadPoolNums" in caplog.text


def test_broker_conf_bad_value_names_the_file(tmp_path):
    path = write(tmp_path, "broker.conf", "brokerId = first\n")
    with pytest.raises(ConfigError) as err:
        settings_of(load_bundle(path))
    assert str(path) in str(err.value) and "brokerId" in str(err.value)


def test_java_properties_continuations_and_separators():
    props = parse_java_properties(["a=1", "! comment", "b : two", "c three", "d = x \\", "   y", "", "# x=y"])
    assert props == {"a": "1", "b": "two", "c": "three", "d": "x y"}


def test_overrides_from_the_command_line():
    bundle = load_bundle("dev").with_overrides({"broker.listenPort": "20911", "namesrv.listenPort": 19876, "brokerName": "b2"})
    broker, namesrv = section(bundle, "broker"), section(bundle, "namesrv")
    assert (broker.listenPort, namesrv.listenPort, broker.brokerName) == (20911, 19876, "b2")
    with pytest.raises(ConfigError, match="deleteWhen") as err:
        settings_of(bundle.with_overrides({"deleteWhen": "25"}))
    assert "command line" in str(err.value)
    with pytest.raises(ConfigError, match="did you mean 'brokerName'"):
        settings_of(bundle.with_overrides({"brokerNme": "x"}))


def test_delay_levels_parse_and_reject_bad_tokens():
    assert parse_delay_levels("1s 2m 1h 1d") == (1000, 120_000, 3_600_000, 86_400_000)
    with pytest.raises(ValueError, match="5x"):
        parse_delay_levels("1s 5x")


# -- one broker plugin list; includes ------------------------------------------------------------------------------


SHIPPED = sorted(p.stem for p in packaged_bundle_path("dev").parent.glob("*.toml"))


@pytest.mark.parametrize("name", SHIPPED)
def test_every_broker_bundle_agrees_with_the_broker_plugin_list(name):
    """configs/broker.toml holds THE broker plugin list: a bundle that runs a broker includes it (directly or through
    another bundle) instead of copying it, so it has every one of its plugins."""
    bundle = load_bundle(name)
    if "broker" not in bundle.roles:
        return
    broker = load_bundle("broker")
    missing = [p for p in broker.plugins if p not in bundle.plugins]
    assert not missing, f"{name}: lacks {missing} of configs/broker.toml"
    assert name == "broker" or "broker" in bundle.includes, f"{name} copies the broker plugin list instead of including it"
    text = packaged_bundle_path(name).read_text(encoding="utf-8")
    if name != "broker":
        # no broker plugin written out again in another bundle file: the include is the one place
        assert not [p for p in broker.plugins if f'"{p}"' in text], f"{name} repeats plugins of configs/broker.toml"


def test_include_merges_plugins_and_settings_and_own_values_win(tmp_path):
    write(tmp_path, "base.toml", """
        [bundle]
        name = "base"
        roles = ["broker"]
        include = ["broker"]
        [broker]
        brokerName = "base-b"
        fileReservedTime = 12
    """)
    path = write(tmp_path, "top.toml", """
        [bundle]
        name = "top"
        roles = ["broker"]
        include = ["base.toml"]
        plugins = ["pyrmq.plugins.broker.failover.plugin"]
        [broker]
        fileReservedTime = 24
    """)
    bundle = load_bundle(path)
    assert bundle.plugins[: len(load_bundle("broker").plugins)] == load_bundle("broker").plugins
    assert bundle.plugins[-1] == "pyrmq.plugins.broker.failover.plugin"
    broker = section(bundle)
    assert (broker.brokerName, broker.fileReservedTime) == ("base-b", 24)


def test_include_cycles_and_missing_includes_name_the_file(tmp_path):
    write(tmp_path, "a.toml", '[bundle]\nname = "a"\ninclude = ["b.toml"]\n')
    write(tmp_path, "b.toml", '[bundle]\nname = "b"\ninclude = ["a.toml"]\n')
    with pytest.raises(ConfigError, match="include cycle"):
        load_bundle(tmp_path / "a.toml")
    with pytest.raises(ConfigError, match="included bundle 'nope.toml' not found") as err:
        load_bundle(write(tmp_path, "c.toml", '[bundle]\nname = "c"\ninclude = ["nope.toml"]\n'))
    assert "c.toml" in str(err.value)


def test_a_role_table_needs_its_role(tmp_path):
    with pytest.raises(ConfigError, match="'namesrv' is not in bundle.roles"):
        load_bundle(write(tmp_path, "n.toml", '[bundle]\nname = "n"\nroles = ["broker"]\n[namesrv]\nlistenPort = 1\n'))


def test_keys_no_plugin_declares_say_so(tmp_path):
    path = write(tmp_path, "bare.toml", """
        [bundle]
        name = "bare"
        roles = ["broker"]
        [broker]
        brokerName = "x"
    """)
    with pytest.raises(ConfigError, match=r"brokerName.*no plugin of the bundle declares \[broker\] keys") as err:
        settings_of(load_bundle(path))
    assert str(path) in str(err.value)
