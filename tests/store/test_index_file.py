import os

from pyrmq.store import MessageRecord, MessageStore, decode_messages

from .conftest import record, small_config


def _keys(result):
    return [m.body for m in decode_messages(result.body())]


def test_query_by_keys_and_unique_key(store):
    store.put_message(record(body=b"1", KEYS="order-1 user-9", UNIQ_KEY="AAAA00000000000000000001"))
    store.put_message(record(body=b"2", KEYS="order-2", UNIQ_KEY="AAAA00000000000000000002"))
    store.put_message(record(topic="Other", body=b"3", KEYS="order-1"))
    everything = (0, 2**62)
    assert _keys(store.query_message("TopicTest", "order-1", 32, *everything)) == [b"1"]
    assert _keys(store.query_message("TopicTest", "user-9", 32, *everything)) == [b"1"]
    assert _keys(store.query_message("TopicTest", "AAAA00000000000000000002", 32, *everything)) == [b"2"]
    assert _keys(store.query_message("Other", "order-1", 32, *everything)) == [b"3"]
    assert _keys(store.query_message("TopicTest", "missing", 32, *everything)) == []


def test_chains_survive_collisions_and_files_roll_when_full(tmp_path):
    cfg = small_config(tmp_path, max_hash_slot_num=4, max_index_num=50, mapped_file_size_commit_log=1 << 20)
    s = MessageStore(cfg)
    s.load()
    try:
        for i in range(120):
            s.put_message(record(body=str(i).encode(), KEYS=f"k{i % 7}"))
        got = _keys(s.query_message("TopicTest", "k3", 64, 0, 2**62))
        names = sorted(os.listdir(cfg.index_dir))
        assert len(names) == 3 and all(len(n) == 17 and n.isdigit() for n in names)
        assert sorted(got, key=int) == [str(i).encode() for i in range(120) if i % 7 == 3]
        assert len(_keys(s.query_message("TopicTest", "k3", 5, 0, 2**62))) == 5
    finally:
        s.close()
    s = MessageStore(cfg)
    s.load()
    try:
        got = _keys(s.query_message("TopicTest", "k5", 64, 0, 2**62))
        assert sorted(got, key=int) == [str(i).encode() for i in range(120) if i % 7 == 5]
    finally:
        s.close()


def test_time_range_limits_the_query(tmp_path):
    now = [10_000_000]
    s = MessageStore(small_config(tmp_path), clock=lambda: now[0])
    s.load()
    try:
        for i in range(5):
            now[0] = 10_000_000 + i * 10_000
            s.put_message(record(body=str(i).encode(), KEYS="same"))
        got = _keys(s.query_message("TopicTest", "same", 32, 10_010_000, 10_030_000))
        assert sorted(got) == [b"1", b"2", b"3"]
    finally:
        s.close()


def test_rollback_records_are_not_indexed(store):
    store.put_message(MessageRecord("T", 0, b"rb", sys_flag=0xC, properties={"KEYS": "x"}))
    store.put_message(MessageRecord("T", 0, b"ok", properties={"KEYS": "x"}))
    assert _keys(store.query_message("T", "x", 32, 0, 2**62)) == [b"ok"]


def test_the_key_hasher_matches_javas_string_hash_code_for_every_shape_of_key():
    import random
    import string

    from pyrmq.store.index_file import KeyHasher

    def java_index_hash(s: str) -> int:  # abs(s.hashCode()) over UTF-16 code units; Integer.MIN_VALUE gives 0
        units = s.encode("utf-16-be")
        h = 0
        for i in range(0, len(units), 2):
            h = (31 * h + int.from_bytes(units[i : i + 2], "big")) & 0xFFFFFFFF
        signed = h - (1 << 32) if h >= 1 << 31 else h
        return 0 if signed == -(1 << 31) else abs(signed)

    rnd = random.Random(7)
    keys = ["7F0000010FA318B4AAC2%012X" % rnd.randrange(1 << 48) for _ in range(400)]  # Java UNIQ_KEYs
    keys += ["7F0000010FA318B4AAC21234ABCD%04X" % i for i in range(300)]  # one producer's batch: a counter
    keys += ["order-%d" % i for i in range(0, 100_000, 333)]
    keys += ["".join(rnd.choice(string.printable) for _ in range(rnd.randrange(0, 40))) for _ in range(400)]
    keys += ["ключ-%d-ключ-ключ" % i for i in range(50)] + ["\0" * 16, "a" * 13, "a" * 300, "\U0001F600" * 5, "abcd"]
    keys += ["x" * 200 + "é", "k1MF>7LE", "k02JH=<D"]  # the last two: "T#" / "%RETRY%group#" + it hash to MIN_VALUE
    assert KeyHasher()("T", "k1MF>7LE") == KeyHasher()("%RETRY%group", "k02JH=<D") == 0
    for topic in ("T", "%RETRY%group", "тема"):
        expected = [java_index_hash(f"{topic}#{key}") for key in keys]
        for hasher in (KeyHasher(), KeyHasher(max_cached=4)):  # the tiny cache is cleared over and over
            assert [hasher(topic, key) for key in keys] == expected
            assert hasher.hash_keys(topic, keys) == expected
            assert hasher.hash_keys(topic, keys) == expected  # second pass: everything from the caches


def test_a_bulk_index_write_leaves_the_bytes_sequential_put_key_calls_leave(tmp_path):
    # IndexService.put_many packs a run of entries with one Struct: the files must hold byte for byte what one
    # IndexFile.put_key per entry writes, across collisions (8 slots),
    # one store timestamp per batch, and a file that fills up (40 entries a file) and rolls to the next
    import random

    from pyrmq.store.index_file import IndexFile, IndexService

    rng = random.Random(18)
    items = []
    for batch in range(9):
        ts = 1_700_000_000_000 + batch * 1500
        for _ in range(rng.randrange(1, 30)):
            items.append((rng.randrange(0, 2**31), 1000 + len(items) * 37, ts))
    cfg = small_config(tmp_path / "bulk", max_hash_slot_num=8, max_index_num=40)
    service = IndexService(cfg)
    for start in range(0, len(items), 50):
        service.put_many(items[start : start + 50])
    assert len(service.files) > 1
    sequential = []
    at = 0
    for f in service.files:
        ref = IndexFile(str(tmp_path / f"ref{len(sequential)}"), 8, 40, create=True)
        if sequential:
            prev = sequential[-1]
            ref.begin_phy_offset, ref.begin_timestamp = prev.end_phy_offset, prev.end_timestamp
            ref.end_phy_offset, ref.end_timestamp = prev.end_phy_offset, prev.end_timestamp
        while at < len(items) and ref.put_key(*items[at]):
            at += 1
        sequential.append(ref)
    assert at == len(items)
    for bulk, ref in zip(service.files, sequential):
        bulk.write_header()
        ref.write_header()
        assert bulk.mm[:] == ref.mm[:]
        ref.close()
    service.close()
