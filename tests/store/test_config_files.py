import os

import pytest

from pyrmq.store.config_files import (
    ConfigFile,
    ConsumerOffsetFile,
    DelayOffsetFile,
    SubscriptionGroupFile,
    TopicsFile,
    config_path,
    fastjson_dumps,
    fastjson_loads,
)
from pyrmq.store.errors import ConfigFileError


def test_consumer_offsets_round_trip_with_bare_integer_keys(tmp_path):
    f = ConsumerOffsetFile(config_path(str(tmp_path), "consumerOffset.json"))
    f.save_table({"TopicTest@g1": {0: 12, 1: 40}, "%RETRY%g1@g1": {0: 0}})
    text = open(f.path).read()
    assert "\t\t\t0:12" in text and '"TopicTest@g1":' in text
    assert ConsumerOffsetFile(f.path).load_table() == {"TopicTest@g1": {0: 12, 1: 40}, "%RETRY%g1@g1": {0: 0}}


def test_reads_what_the_java_broker_writes(tmp_path):
    path = tmp_path / "delayOffset.json"
    path.write_text('{\n\t"offsetTable":{1:0,2:17,\n\t\t18:3}\n}')
    assert DelayOffsetFile(str(path)).load_table() == {1: 0, 2: 17, 18: 3}
    assert fastjson_loads("{{'topic':'t','queueId':0}:123, unquoted:true}") == {
        (("queueId", 0), ("topic", "t")): 123, "unquoted": True}


def test_save_keeps_a_backup_and_load_falls_back_to_it(tmp_path):
    f = DelayOffsetFile(str(tmp_path / "config" / "delayOffset.json"))
    f.save_table({1: 5})
    f.save_table({1: 6})
    assert os.path.exists(f.path + ".bak") and not os.path.exists(f.path + ".tmp")
    with open(f.path, "w") as out:
        out.write('{"offsetTable":{1:')  # torn by a crash
    assert f.load_table() == {1: 5} and f.loaded_from.endswith(".bak")
    os.unlink(f.path + ".bak")
    with pytest.raises(ConfigFileError):
        f.load()


@pytest.mark.parametrize("damage", [b'{"offsetTable":{1:\xe3\x93', b"\xff\xfe{}", b"[]", b"17"])
def test_bytes_that_are_not_utf8_or_not_an_object_fall_back_to_the_backup(tmp_path, damage, caplog):
    # found by the reliability suite (tests/chaos/test_torn.py): a bit-flipped config file stopped the broker with
    # a UnicodeDecodeError instead of falling back to its .bak
    f = DelayOffsetFile(str(tmp_path / "config" / "delayOffset.json"))
    f.save_table({1: 5})
    f.save_table({1: 6})
    with open(f.path, "wb") as out:
        out.write(damage)
    assert f.load_table() == {1: 5} and f.loaded_from.endswith(".bak")
    assert "delayOffset.json is unreadable" in caplog.text and "delayOffset.json.bak instead" in caplog.text
    os.unlink(f.path + ".bak")
    with pytest.raises(ConfigFileError):
        f.load()


def test_a_save_the_disk_refuses_is_logged_and_keeps_the_old_file(tmp_path, caplog):
    # found by the reliability suite (tests/chaos/test_disk_full.py): on a full disk a new consumer group's first
    # pull failed with SYSTEM_ERROR, because saving subscriptionGroup.json raised ENOSPC into the request
    f = ConsumerOffsetFile(str(tmp_path / "consumerOffset.json"))
    assert f.save({"offsetTable": {"t@g": {0: 1}}})
    blocker = tmp_path / "consumerOffset.json.tmp"
    blocker.mkdir()  # the temporary file cannot be created (EISDIR), as a full disk's ENOSPC would refuse it
    try:
        assert f.save({"offsetTable": {"t@g": {0: 2}}}) is False
    finally:
        blocker.rmdir()
    assert f.load_table() == {"t@g": {0: 1}}
    assert "consumerOffset.json not saved" in caplog.text


@pytest.mark.parametrize("text", ["{[[1]]:1}", "{[0,{r:1}]:2}", "{{a:[1]}:1}", "{{1:1,a:2}:3}"])
def test_unhashable_keys_are_a_parse_error(text):
    # found by the reliability suite's fuzzer (tests/chaos/fuzz_targets.py, 'fastjson'): an array as an object key
    # raised TypeError out of the config reader instead of its ValueError (so no fallback to the .bak)
    with pytest.raises(ValueError):
        fastjson_loads(text)


def test_topics_and_subscription_groups_shapes(tmp_path):
    topics = TopicsFile(str(tmp_path / "topics.json"))
    table = {"TopicTest": {"topicName": "TopicTest", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6,
                           "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": False}}
    topics.save_table(table, {"counter": 3, "timestamp": 1700000000000})
    assert topics.load_table() == (table, {"counter": 3, "timestamp": 1700000000000})
    groups = SubscriptionGroupFile(str(tmp_path / "subscriptionGroup.json"))
    assert groups.load() is None
    g = {"g1": {"groupName": "g1", "consumeEnable": True, "retryMaxTimes": 16, "retryQueueNums": 1}}
    groups.save_table(g, {"counter": 1, "timestamp": 1})
    assert groups.load_table()[0] == g


def test_dumps_is_fastjson_pretty():
    assert fastjson_dumps({"a": {1: 2}, "b": [1, "x"]}, pretty=False) == '{"a":{1:2},"b":[1,"x"]}'
    assert fastjson_dumps({"a": 1}) == '{\n\t"a":1\n}'
    assert ConfigFile  # the generic helper is public too
