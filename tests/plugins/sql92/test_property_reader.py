"""The SQL92 filter reads only the properties its expression names, straight from a stored record's bytes: it must
see exactly what decoding the whole property map gives (Java's decodeProperties), malformed segments included."""

from __future__ import annotations

import pytest

from pyrmq.plugins.sql92 import compile_sql92
from pyrmq.plugins.sql92.message_filter import PropertyReader, Sql92MessageFilter, record_properties
from pyrmq.remoting.message import BORNHOST_V6_FLAG
from pyrmq.store import MessageRecord, MessageStore, StoreConfig

S, V = "\x02", "\x01"
CASES = [
    f"region{V}eu{S}amount{V}150",  # the named ones first and last
    f"TAGS{V}T1{S}amount{V}150{S}region{V}eu{S}vip{V}true",
    f"region{V}eu{S}region{V}us",  # a later duplicate wins
    f"region{V}eu{S}region{V}",  # ... unless its value is empty: that segment is skipped
    f"xregion{V}eu{S}regionx{V}us{S}amount{V}1{V}2",  # other names that contain a named one; a value with \x01
    f"{V}region{S}region{S}amount{V}{S}zone{V}région 🌍",  # no name, no separator, empty value; non-ASCII values
    "",
    f"amount{V}7",
]
NAMES = frozenset({"region", "amount", "zone", "vip"})


@pytest.fixture
def records(tmp_path):
    store = MessageStore(StoreConfig(store_path_root_dir=str(tmp_path), message_index_enable=False))
    store.load()
    try:
        for i, text in enumerate(CASES):
            host = ("::1", 9000) if i % 2 else ("10.0.0.2", 9000)  # IPv6 born and store hosts move the field
            store.put_message(MessageRecord("P", 0, b"body" * i, properties_bytes=text.encode(), born_host=host,
                                            store_host=host))
        result = store.get_message("g", "P", 0, 0, 32)
        yield [memoryview(bytes(v)) for v in result.buffers]
        result.release()
    finally:
        store.close()


def test_reads_the_named_properties_as_the_full_decoder_sees_them(records):
    read = PropertyReader(NAMES)
    assert len(records) == len(CASES)
    assert {int.from_bytes(v[36:40], "big") & BORNHOST_V6_FLAG for v in records} == {0, BORNHOST_V6_FLAG}
    for view in records:
        full = record_properties(view)
        assert read(view) == {k: v for k, v in full.items() if k in NAMES}
    assert read(records[2]) == {"region": "us"} and read(records[3]) == {"region": "eu"}
    assert read(records[5]) == {"zone": "région 🌍"}


def test_the_filter_matches_as_on_the_decoded_map(records):
    for text in ("region = 'eu'", "region <> 'us' OR amount IS NULL", "zone = 'région 🌍' OR amount > 5", "vip = TRUE",
                 "region IN ('us', 'eu') AND amount > 5", "region = 'us' OR zone = 'région 🌍'", "amount = '1\x012'"):
        f = Sql92MessageFilter(compile_sql92(text))
        for view in records:
            assert f.is_matched_by_commit_log(view) == f.is_matched_by_properties(record_properties(view))


@pytest.mark.parametrize(("text", "required"), [
    ("region = 'eu' AND amount > 1", (b"region\x01eu",)),
    ("amount > 1 AND (region IN ('a', 'b') OR zone = 'é')", (b"region\x01a", b"region\x01b", "zone\x01é".encode())),
    ("region = 'eu' OR amount > 1", None),  # the right side can be TRUE without any segment
    ("NOT region = 'eu'", None),
    ("region <> 'eu'", None),
    ("region NOT IN ('eu')", None),
    ("'eu' = region", None),
    ("region = '\ufffd'", None),  # undecodable bytes read as U+FFFD: no bytes to look for
])
def test_segments_a_matching_record_must_contain(text, required):
    """A record without one of these byte strings is rejected before its properties are read."""
    assert compile_sql92(text).required == required
