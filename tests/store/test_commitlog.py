import os
import struct

from pyrmq.store import MessageRecord, PutMessageStatus, decode_messages
from pyrmq.store.format import BLANK_MAGIC_CODE, java_string_hash

from .conftest import SEGMENT, read_all, record


def test_segments_roll_over_with_blank_padding(store, config):
    results = [store.put_message(record(body=bytes([i % 251]) * 1000, TAGS="t")) for i in range(150)]
    assert all(r.status is PutMessageStatus.PUT_OK for r in results)
    names = sorted(os.listdir(config.commit_log_dir))
    assert names[:3] == ["00000000000000000000", "00000000000000065536", "00000000000000131072"]
    # the last record of the first segment is followed by an 8-byte BLANK: (bytes left, 0xCBD43194)
    first_roll = next(i for i, r in enumerate(results) if r.append.wrote_offset >= SEGMENT)
    last_in_first = results[first_roll - 1].append
    with open(os.path.join(config.commit_log_dir, names[0]), "rb") as f:
        data = f.read()
    blank_at = last_in_first.end_offset
    left, magic = struct.unpack_from(">iI", data, blank_at)
    assert magic == BLANK_MAGIC_CODE and left == SEGMENT - blank_at
    assert SEGMENT - blank_at < last_in_first.wrote_bytes + 8
    assert results[first_roll].append.wrote_offset == SEGMENT  # the next record starts the next segment
    msgs = read_all(store, "TopicTest", 0)
    assert [m.queue_offset for m in msgs] == list(range(150))
    assert [m.body[0] for m in msgs] == [i % 251 for i in range(150)]
    assert all(m.crc_ok() and m.commit_log_offset == r.append.wrote_offset for m, r in zip(msgs, results))


def test_queue_offsets_count_per_topic_and_queue(store):
    offsets = [store.put_message(record(topic=t, queue_id=q)).append.queue_offset
               for t, q in [("A", 0), ("A", 1), ("A", 0), ("B", 0), ("A", 0), ("B", 0)]]
    assert offsets == [0, 0, 1, 0, 2, 1]
    assert store.get_max_offset_in_queue("A", 0) == 3
    assert store.get_max_offset_in_queue("B", 0) == 2
    assert store.get_max_offset_in_queue("C", 0) == 0


def test_stored_record_fields(store):
    r = store.put_message(record(body=b"xyz", TAGS="TagA", KEYS="k1 k2"))
    msg = store.look_message_by_offset(r.append.wrote_offset)
    assert msg.body == b"xyz" and msg.topic == "TopicTest"
    assert msg.born_host == ("10.0.0.7", 50123) and msg.store_host == ("127.0.0.1", 10911)
    assert msg.store_timestamp == r.append.store_timestamp
    assert msg.msg_id == r.append.msg_id
    assert msg.properties == {"TAGS": "TagA", "KEYS": "k1 k2"}
    raw = store.look_message_bytes_by_offset(r.append.wrote_offset)
    assert bytes(raw) == msg.encode()
    assert store.look_message_by_offset(r.append.wrote_offset + 1) is None
    assert store.look_message_by_offset(r.append.wrote_offset, size=r.append.wrote_bytes + 1) is None


def test_batch_gets_consecutive_queue_offsets_in_one_call(store):
    store.put_message(record())
    batch = [MessageRecord("TopicTest", 0, f"m{i}".encode(), properties={"UNIQ_KEY": f"U{i}"}) for i in range(40)]
    r = store.put_messages(batch)
    assert r.status is PutMessageStatus.PUT_OK
    assert r.append.queue_offset == 1 and r.append.msg_num == 40
    ids = r.append.msg_id.split(",")
    assert len(ids) == 40
    msgs = read_all(store, "TopicTest", 0)
    assert [m.queue_offset for m in msgs] == list(range(41))
    assert [m.msg_id for m in msgs[1:]] == ids
    assert [m.body for m in msgs[1:]] == [f"m{i}".encode() for i in range(40)]


def test_batch_rules(store):
    mixed = [MessageRecord("A", 0, b"1"), MessageRecord("B", 0, b"2")]
    assert store.put_messages(mixed).status is PutMessageStatus.MESSAGE_ILLEGAL
    tx = [MessageRecord("A", 0, b"1", sys_flag=0x4)]
    assert store.put_messages(tx).status is PutMessageStatus.MESSAGE_ILLEGAL
    delayed = [MessageRecord("A", 0, b"1", properties={"DELAY": "3"})]
    assert store.put_messages(delayed).status is PutMessageStatus.MESSAGE_ILLEGAL
    assert store.max_phy_offset == 0


def test_put_entries_has_the_batch_rules_of_put_messages(store):
    hosts = (("10.0.0.2", 1), ("10.0.0.1", 2))
    for props in (b"DELAY\x013", b"TAGS\x01A\x02DELAY\x010"):  # a delay level, even 0, as put_messages says
        refused = store.put_entries("A", 0, [(0, b"1", b""), (0, b"2", props)], 0, 1, *hosts)
        assert (refused.status, refused.remark) == (
            PutMessageStatus.MESSAGE_ILLEGAL, "batch messages cannot have a delay level")
        records = [MessageRecord("A", 0, b"1"), MessageRecord("A", 0, b"2", properties_bytes=props)]
        assert (store.put_messages(records).status, store.put_messages(records).remark) == (
            refused.status, refused.remark)
    assert store.max_phy_offset == 0


def test_both_batch_puts_read_the_tags_as_the_properties_decoder(store):
    # Java's string2messageProperties: an empty value is no item, a later duplicate wins. The consume queue's tags
    # code is hashCode of that TAGS on either batch put (put_entries once stored 0 for an empty duplicate)
    hosts = (("10.0.0.2", 1), ("10.0.0.1", 2))
    cases = [(b"TAGS\x01A\x02TAGS\x01", "A"), (b"TAGS\x01A\x02TAGS\x01B", "B"), (b"XTAGS\x01C\x02TAGS\x01", None)]
    assert store.put_entries("T", 0, [(0, b"x", props) for props, _ in cases], 0, 1, *hosts).is_ok
    assert store.put_messages([MessageRecord("T", 0, b"y", properties_bytes=props) for props, _ in cases]).is_ok
    queue = store.consume_queues.get("T", 0)
    expected = [java_string_hash(tags) if tags else 0 for _, tags in cases] * 2
    assert [queue.get_unit(i)[2] for i in range(6)] == expected
    assert expected[:2] == [65, 66]


def test_limits_are_rejected_with_clear_status_and_nothing_written(config, tmp_path):
    from pyrmq.store import MessageStore
    from .conftest import small_config

    s = MessageStore(small_config(tmp_path / "s", max_message_size=1000))
    s.load()
    try:
        r = s.put_message(record(body=b"x" * 1001))
        assert r.status is PutMessageStatus.MESSAGE_ILLEGAL and "maxMessageSize" in r.remark
        r = s.put_message(record(topic="T" * 128))
        assert r.status is PutMessageStatus.MESSAGE_ILLEGAL and "topic" in r.remark
        r = s.put_message(record(BIG="v" * 33000))
        assert r.status is PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
        assert s.max_phy_offset == 0
        ok = s.put_message(record(body=b"x" * 1000))
        assert ok.status is PutMessageStatus.PUT_OK and ok.append.queue_offset == 0
    finally:
        s.close()


def test_transaction_prepared_records_take_no_queue_offset(store):
    half = store.put_message(MessageRecord("T", 0, b"half", sys_flag=0x4))
    assert half.append.queue_offset == 0
    normal = store.put_message(MessageRecord("T", 0, b"n"))
    assert normal.append.queue_offset == 0
    assert [m.body for m in read_all(store, "T", 0)] == [b"n"]
    assert store.look_message_by_offset(half.append.wrote_offset).body == b"half"


def test_pre_encoded_properties_are_stored_verbatim(store):
    raw = b"TAGS\x01TagB\x02UNIQ_KEY\x01ABC\x02"  # trailing separator as some clients send it
    r = store.put_message(MessageRecord("T", 0, b"b", properties_bytes=raw))
    msg = store.look_message_by_offset(r.append.wrote_offset)
    assert msg.properties_bytes == raw and msg.tags == "TagB"
    g = store.get_message("g", "T", 0, 0, 1)
    assert decode_messages(g.body())[0].uniq_key == "ABC"


def test_new_segments_have_their_blocks_allocated(tmp_path):
    # found by the reliability suite (tests/chaos/test_disk_full.py): a sparse segment written through mmap killed
    # the broker with SIGBUS once another writer had filled the file system; allocated up front, a full disk shows
    # as ENOSPC when the segment is created, and the append is refused cleanly
    from pyrmq.store.mapped_file import MappedFile

    mf = MappedFile(str(tmp_path / "00000000000000000000"), 1 << 20, preallocate=True)
    try:
        assert os.stat(mf.path).st_blocks * 512 >= 1 << 20
    finally:
        mf.close()
    # off (the default, as RocketMQ): a sparse file that costs disk only as it is written
    sparse = MappedFile(str(tmp_path / "00000000000001048576"), 1 << 20)
    try:
        assert os.stat(sparse.path).st_size == 1 << 20 and os.stat(sparse.path).st_blocks * 512 < 1 << 20
    finally:
        sparse.close()


def _resident_kib(directory) -> int:
    """Resident KiB of this process's mappings of the files under ``directory`` (/proc/self/smaps)."""
    total = 0
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            fields = line.split()
            if not fields[0].endswith(":"):  # a mapping's header line: range, perms, offset, dev, inode[, path]
                inside = len(fields) >= 6 and fields[5].startswith(str(directory))
            elif inside and fields[0] == "Rss:":
                total += int(fields[1])
    return total


def test_flushed_pages_behind_the_tail_leave_the_resident_set_and_still_read_back(tmp_path):
    from pyrmq.store import MessageStore
    from pyrmq.store.message_store import COMMIT_LOG_RESIDENT_TAIL

    from .conftest import small_config

    config = small_config(tmp_path / "store", mapped_file_size_commit_log=64 * 1024 * 1024,
                          mapped_file_size_consume_queue=20 * 300_000)
    with MessageStore(config) as store:
        bodies = [bytes([i % 251]) * 1024 for i in range(24 * 1024)]  # ~25 MiB of records in one segment
        for body in bodies:
            store.put_message(record(body=body))
        written_kib = _resident_kib(config.commit_log_dir)
        assert written_kib > 24 * 1024
        store.flush_all()
        after_kib = _resident_kib(config.commit_log_dir)
        assert after_kib <= COMMIT_LOG_RESIDENT_TAIL // 1024 + 256, (written_kib, after_kib)  # + fault-around
        msgs = read_all(store, "TopicTest", 0)  # the dropped pages fault back in from the page cache
        assert [m.body for m in msgs] == bodies and all(m.crc_ok() for m in msgs)


def test_put_one_stores_and_indexes_what_put_message_does(tmp_path):
    """The broker's single-send call (fields, no record object) writes the same record bytes, consume-queue unit
    (tags code) and index entries as ``put_message`` of the equivalent record."""
    from pyrmq.store import MessageStore
    from pyrmq.store.format import encode_properties, java_string_hash

    from .conftest import small_config

    props = {"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "AC110002000100000000000000000001"}
    stores = [MessageStore(small_config(tmp_path / name), clock=lambda: 1700000001000) for name in ("one", "record")]
    try:
        for s in stores:
            s.load()
        one, by_record = stores
        r1 = one.put_one("TopicTest", 3, b"xyz", 7, dict(props), encode_properties(props).encode(), 0, 1700000000000,
                         ("10.0.0.7", 50123), ("127.0.0.1", 10911), 2)
        r2 = by_record.put_message(MessageRecord(
            "TopicTest", 3, b"xyz", 7, properties=dict(props), born_timestamp=1700000000000,
            born_host=("10.0.0.7", 50123), store_host=("127.0.0.1", 10911), reconsume_times=2,
        ))
        assert r1.status is r2.status is PutMessageStatus.PUT_OK
        assert (r1.append.wrote_offset, r1.append.wrote_bytes, r1.append.queue_offset, r1.append.msg_id) == (
            r2.append.wrote_offset, r2.append.wrote_bytes, r2.append.queue_offset, r2.append.msg_id)
        raw1 = bytes(one.look_message_bytes_by_offset(r1.append.wrote_offset))
        assert raw1 == bytes(by_record.look_message_bytes_by_offset(r2.append.wrote_offset))
        msg = decode_messages(raw1)[0]
        assert (msg.flag, msg.reconsume_times, msg.properties) == (7, 2, props)
        for s in stores:
            s.index_dispatcher.drain()
        units = [s.consume_queues.find_or_create("TopicTest", 3).get_unit(0) for s in stores]
        assert units[0] == units[1] == (r1.append.wrote_offset, r1.append.wrote_bytes, java_string_hash("TagA"))
        for key in ("k1", "k2", "AC110002000100000000000000000001"):
            found = [s.query_message("TopicTest", key, 10, 0, 2**62).message_count for s in stores]
            assert found == [1, 1], key
        assert one.put_one("T" * 128, 0, b"x", 0, {}, b"", 0, 0, ("10.0.0.7", 1), ("127.0.0.1", 10911)).status is (
            PutMessageStatus.MESSAGE_ILLEGAL)
    finally:
        for s in stores:
            s.close()
