import os
import struct

from pyrmq.store import GetMessageStatus, MessageStore, TagsCodeFilter, decode_messages, java_string_hash

from .conftest import record, small_config


def test_units_are_20_bytes_pointing_into_the_commit_log(store, config):
    rs = [store.put_message(record(TAGS="TagA")) for _ in range(3)]
    path = os.path.join(config.consume_queue_dir, "TopicTest", "0", "00000000000000000000")
    with open(path, "rb") as f:
        data = f.read()
    assert len(data) == config.mapped_file_size_consume_queue
    units = [struct.unpack_from(">qiq", data, i * 20) for i in range(4)]
    assert units[:3] == [(r.append.wrote_offset, r.append.wrote_bytes, java_string_hash("TagA")) for r in rs]
    assert units[3] == (0, 0, 0)


def test_consume_queue_rolls_into_files_named_by_byte_offset(store, config):
    for _ in range(150):  # 64 units per file
        store.put_message(record())
    names = sorted(os.listdir(os.path.join(config.consume_queue_dir, "TopicTest", "0")))
    assert names == ["00000000000000000000", "00000000000000001280", "00000000000000002560"]
    assert store.get_max_offset_in_queue("TopicTest", 0) == 150


def test_get_message_statuses_and_next_offsets(store):
    assert store.get_message("g", "TopicTest", 0, 0, 32).status is GetMessageStatus.NO_MESSAGE_IN_QUEUE
    for i in range(40):
        store.put_message(record(body=str(i).encode()))
    r = store.get_message("g", "TopicTest", 0, 0, 100)
    assert r.status is GetMessageStatus.FOUND
    assert r.message_count == 32 and r.next_begin_offset == 32  # 32-message cap (spec 7.5)
    assert (r.min_offset, r.max_offset) == (0, 40)
    r = store.get_message("g", "TopicTest", 0, 32, 5)
    assert r.message_count == 5 and r.next_begin_offset == 37 and r.queue_offsets == [32, 33, 34, 35, 36]
    assert [m.body for m in decode_messages(r.body())] == [b"32", b"33", b"34", b"35", b"36"]
    r = store.get_message("g", "TopicTest", 0, 40, 32)
    assert r.status is GetMessageStatus.OFFSET_OVERFLOW_ONE and r.next_begin_offset == 40
    r = store.get_message("g", "TopicTest", 0, 45, 32)
    assert r.status is GetMessageStatus.OFFSET_OVERFLOW_BADLY and r.next_begin_offset == 40


def test_byte_cap_returns_at_least_one_message(tmp_path):
    s = MessageStore(small_config(tmp_path, mapped_file_size_commit_log=1 << 20,
                                  max_transfer_bytes_on_message_in_memory=2500))
    s.load()
    try:
        for _ in range(5):
            s.put_message(record(body=b"x" * 1000))
        r = s.put_message(record(body=b"y" * 3000))
        r = s.get_message("g", "TopicTest", 0, 0, 32)
        assert r.message_count == 2 and r.next_begin_offset == 2
        r = s.get_message("g", "TopicTest", 0, 5, 32)
        assert r.message_count == 1 and r.buffer_total_size > 2500
    finally:
        s.close()


def test_filter_by_tags_code_and_by_record(store):
    for i in range(10):
        store.put_message(record(body=str(i).encode(), TAGS="A" if i % 3 == 0 else "B"))
    only_a = TagsCodeFilter(frozenset({java_string_hash("A")}))
    r = store.get_message("g", "TopicTest", 0, 0, 32, only_a)
    assert [m.body for m in decode_messages(r.body())] == [b"0", b"3", b"6", b"9"]
    assert r.next_begin_offset == 10
    r = store.get_message("g", "TopicTest", 0, 1, 2, only_a)
    assert r.queue_offsets == [3, 6] and r.next_begin_offset == 7
    none = TagsCodeFilter(frozenset({java_string_hash("C")}))
    r = store.get_message("g", "TopicTest", 0, 0, 32, none)
    assert r.status is GetMessageStatus.NO_MATCHED_MESSAGE and r.next_begin_offset == 10
    r = store.get_message("g", "TopicTest", 0, 0, 32, lambda tags, rec: b"5" in bytes(rec[88:92]))
    assert [m.body for m in decode_messages(r.body())] == [b"5"]


def test_offset_by_time_and_store_times(tmp_path):
    now = [1_000_000]
    s = MessageStore(small_config(tmp_path), clock=lambda: now[0])
    s.load()
    try:
        for t in (1000, 2000, 2000, 3000, 5000):
            now[0] = 1_000_000 + t
            s.put_message(record())
        base = 1_000_000
        q = lambda ts: s.get_offset_in_queue_by_time("TopicTest", 0, base + ts)
        assert q(2000) == 1  # exact hit: the first of equal times
        assert q(0) == 0  # all later -> first
        assert q(9000) == 4  # all earlier -> last
        assert q(3900) == 3 and q(4100) == 4  # the closer neighbour
        assert s.get_offset_in_queue_by_time("Nope", 0, base) == 0
        assert s.get_earliest_message_time("TopicTest", 0) == base + 1000
        assert s.get_latest_message_time("TopicTest", 0) == base + 5000
        assert s.get_message_store_timestamp("TopicTest", 0, 3) == base + 3000
        assert s.get_message_store_timestamp("TopicTest", 0, 9) == -1
        assert s.get_earliest_message_time("Nope", 0) == -1
        assert s.get_earliest_store_time() == base + 1000
    finally:
        s.close()
