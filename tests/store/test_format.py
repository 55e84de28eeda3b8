import json
import struct
import zlib
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from pyrmq.store.format import (
    BatchEntry,
    decode_batch_body,
    decode_message,
    decode_message_id,
    decode_messages,
    decode_properties,
    encode_batch_body,
    encode_message_id,
    encode_properties,
    encode_record,
    java_string_hash,
)

CAPTURES = Path(__file__).resolve().parents[1] / "data" / "captures"  # real clients' frames, kept in the repository


def _frame_body(raw: bytes) -> bytes:
    total, header_word = struct.unpack_from(">ii", raw)
    header_len = header_word & 0xFFFFFF
    assert total == len(raw) - 4
    return raw[8 + header_len :]


def test_captured_pull_body_decodes_and_reencodes_byte_for_byte():
    raw = (CAPTURES / "fakeserver-response-code11-found.bin").read_bytes()
    meta = json.loads((CAPTURES / "fakeserver-response-code11-found.json").read_text())
    body = _frame_body(raw)
    assert body.hex() == meta["message_hex"]
    [msg] = decode_messages(body, check_crc=True)
    assert msg.topic == "TopicTest"
    assert msg.body == b"hello"
    assert msg.queue_id == 0 and msg.queue_offset == 0 and msg.commit_log_offset == 0
    assert msg.born_host == ("127.0.0.1", 50000)
    assert msg.store_host == ("127.0.0.1", 10911)
    assert msg.properties == {"KEYS": "k1", "TAGS": "TagA", "UNIQ_KEY": "7F000001000000000000000000000001"}
    assert msg.body_crc == zlib.crc32(b"hello") & 0x7FFFFFFF
    assert msg.msg_id == "7F00000100002A9F0000000000000000"
    assert msg.encode() == body


def test_record_layout_matches_spec_offsets():
    props = encode_properties({"TAGS": "TagA", "KEYS": "a b"}).encode()
    rec = encode_record(
        queue_id=3, flag=7, queue_offset=0x1122334455, commit_log_offset=0x66778899, sys_flag=0,
        born_timestamp=1111, born_host=("10.1.2.3", 4567), store_timestamp=2222, store_host=("10.9.8.7", 10911),
        reconsume_times=5, prepared_transaction_offset=99, body=b"payload", topic=b"T1", properties=props,
    )
    assert len(rec) == 91 + 7 + 2 + len(props)
    assert struct.unpack_from(">i", rec, 0)[0] == len(rec)
    assert rec[4:8] == bytes.fromhex("DAA320A7")
    assert struct.unpack_from(">i", rec, 8)[0] == zlib.crc32(b"payload") & 0x7FFFFFFF
    assert struct.unpack_from(">ii", rec, 12) == (3, 7)
    assert struct.unpack_from(">q", rec, 20)[0] == 0x1122334455
    assert struct.unpack_from(">q", rec, 28)[0] == 0x66778899
    assert struct.unpack_from(">i", rec, 36)[0] == 0
    assert struct.unpack_from(">q", rec, 40)[0] == 1111
    assert rec[48:52] == bytes([10, 1, 2, 3]) and struct.unpack_from(">i", rec, 52)[0] == 4567
    assert struct.unpack_from(">q", rec, 56)[0] == 2222
    assert rec[64:68] == bytes([10, 9, 8, 7]) and struct.unpack_from(">i", rec, 68)[0] == 10911
    assert struct.unpack_from(">i", rec, 72)[0] == 5
    assert struct.unpack_from(">q", rec, 76)[0] == 99
    assert struct.unpack_from(">i", rec, 84)[0] == 7 and rec[88:95] == b"payload"
    assert rec[95] == 2 and rec[96:98] == b"T1"
    assert struct.unpack_from(">h", rec, 98)[0] == len(props) and rec[100:] == props
    msg, end = decode_message(rec)
    assert end == len(rec) and msg.encode() == rec


def test_ipv6_hosts_set_the_sysflag_bits_and_widen_the_record():
    rec = encode_record(
        queue_id=0, flag=0, queue_offset=0, commit_log_offset=0, sys_flag=0, born_timestamp=1,
        born_host=("::1", 1), store_timestamp=2, store_host=("fe80::2", 2), reconsume_times=0,
        prepared_transaction_offset=0, body=b"", topic=b"T", properties=b"",
    )
    assert len(rec) == 91 + 24 + 1
    msg = decode_messages(rec)[0]
    assert msg.sys_flag & 0x30 == 0x30
    assert msg.born_host == ("::1", 1) and msg.store_host == ("fe80::2", 2)
    assert len(msg.msg_id) == 56
    assert decode_message_id(msg.msg_id) == ("fe80::2", 2, 0)


def test_properties_string_rules():
    assert encode_properties({"A": "1", "B": "2", "C": None}) == "A\x011\x02B\x012"
    # segments shorter than 3 chars or without an inner separator are ignored; later duplicates win
    assert decode_properties("A\x011\x02\x01x\x02y\x01\x02ab\x02A\x013\x02") == {"A": "3"}
    assert decode_properties(b"") == {}


def _reference_hash(s: str) -> int:
    units = s.encode("utf-16-be")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def test_java_string_hash_known_values():
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112
    assert java_string_hash("TagA") == 2598919
    assert java_string_hash("polygenelubricants") == -2147483648


@given(st.text(max_size=300))
def test_java_string_hash_matches_utf16_reference(s):
    assert java_string_hash(s) == _reference_hash(s)


def test_java_string_hash_of_long_and_wide_strings_matches_the_utf16_reference():
    # the hash works in parts (64 one-byte units, 256 UTF-16 units): lengths around and past those, one-byte
    # (ASCII, Latin-1), two-byte (Cyrillic) and surrogate-pair (emoji) code units
    for unit in ("a", "é", "я", "\U0001F600", "a\xff", "ab\u044f"):
        for n in (1, 63, 64, 65, 127, 128, 129, 255, 256, 257, 1000):
            s = (unit * n)[:n] if len(unit) == 1 else unit * n
            assert java_string_hash(s) == _reference_hash(s), (unit, n)


@given(st.integers(0, 2**63 - 1), st.integers(0, 65535))
def test_message_id_round_trip(offset, port):
    msg_id = encode_message_id("192.168.0.10", port, offset)
    assert len(msg_id) == 32 and msg_id == msg_id.upper()
    assert decode_message_id(msg_id) == ("192.168.0.10", port, offset)


def test_batch_body_round_trip():
    entries = [BatchEntry(0, b"a", b"UNIQ_KEY\x01X1"), BatchEntry(3, b"bb" * 10, b"")]
    assert decode_batch_body(encode_batch_body(entries)) == entries
