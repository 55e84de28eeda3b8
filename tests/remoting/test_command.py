"""RemotingCommand: the captured frames of a real client, both header serialisations, round-trip properties."""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyrmq.remoting import fastjson
from pyrmq.remoting.codes import CURRENT_VERSION, LanguageCode, RequestCode
from pyrmq.remoting.command import RemotingCommand, decode_parts, ext_value_text
from pyrmq.remoting.errors import ProtocolError

from .conftest import load_captures

CLIENT_CAPTURES = load_captures("alions-")
SERVER_CAPTURES = load_captures("fakeserver-")


def _frame(header: bytes, body: bytes = b"", serialize_type: int = 0) -> bytes:
    return struct.pack(">II", 4 + len(header) + len(body), (serialize_type << 24) | len(header)) + header + body


def _as_text(v) -> str:
    return "true" if v is True else "false" if v is False else str(v)


# ---- captures --------------------------------------------------------------------------------------------------

def test_captures_are_present():
    assert len(CLIENT_CAPTURES) >= 15
    assert len(SERVER_CAPTURES) == 3


@pytest.mark.parametrize("name,frame,meta", CLIENT_CAPTURES, ids=[c[0] for c in CLIENT_CAPTURES])
def test_client_capture_decodes(name, frame, meta):
    assert len(frame) == meta["frame_len_incl_prefix"]
    cmd = RemotingCommand.decode(frame)
    h = meta["header"]
    assert cmd.code == h["code"]
    assert RequestCode(cmd.code).name == meta["code_name"]
    assert (cmd.language, cmd.version, cmd.opaque, cmd.flag) == (h["language"], h["version"], h["opaque"], h["flag"])
    assert cmd.serialize_type == 0
    assert not cmd.is_response and not cmd.is_oneway
    # numbers and JSON booleans (ali-ons sends "k": false) arrive as text
    assert cmd.ext_fields == {k: _as_text(v) for k, v in h["extFields"].items()}
    assert all(type(v) is str for v in cmd.ext_fields.values())
    assert len(cmd.body) == meta["body_length"]
    if "body_text" in meta:
        assert cmd.body.decode() == meta["body_text"]
    if "body_json" in meta:
        assert fastjson.loads(cmd.body) == meta["body_json"]


@pytest.mark.parametrize("name,frame,meta", CLIENT_CAPTURES, ids=[c[0] for c in CLIENT_CAPTURES])
def test_client_capture_reencodes_to_an_equivalent_frame(name, frame, meta):
    cmd = RemotingCommand.decode(frame)
    again = cmd.encode()
    # same frame shape: type byte, body bytes; the header is the same object with every extFields value as text
    total, word = struct.unpack_from(">II", again)
    assert total + 4 == len(again) and word >> 24 == 0
    header = json.loads(again[8:8 + (word & 0xFFFFFF)])
    assert header.pop("serializeTypeCurrentRPC") == "JSON"
    original = dict(meta["header"])
    ext = {k: _as_text(v) for k, v in original.pop("extFields").items()}
    if ext:  # an empty map is omitted, as Java omits nulls
        original["extFields"] = ext
    assert header == original
    assert again.endswith(cmd.body)
    assert RemotingCommand.decode(again) == cmd


@pytest.mark.parametrize("name,frame,meta", SERVER_CAPTURES, ids=[c[0] for c in SERVER_CAPTURES])
def test_server_capture_roundtrips_byte_for_byte(name, frame, meta):
    cmd = RemotingCommand.decode(frame)
    h = meta["header"]
    assert cmd.is_response and cmd.code == h["code"] and cmd.opaque == h["opaque"]
    assert cmd.version == h["version"] and cmd.language == "JAVA"
    assert cmd.ext_fields == h.get("extFields", {})
    if "body_text" in meta:
        assert cmd.body.decode() == meta["body_text"]
    if "message_hex" in meta:
        assert cmd.body == bytes.fromhex(meta["message_hex"])
    # our writer uses Java's field order and omissions, so the frame comes out identical
    assert cmd.encode() == frame


def test_route_capture_bodies_parse_to_the_same_route():
    bodies = {name: RemotingCommand.decode(frame).body for name, frame, _ in SERVER_CAPTURES if "code105" in name}
    strict = fastjson.loads(bodies["fakeserver-response-code105-strict"])
    loose = fastjson.loads(bodies["fakeserver-response-code105-fastjson"])
    assert strict == loose
    assert strict["brokerDatas"][0]["brokerAddrs"] == {"0": "127.0.0.1:10911"}
    # and our emitter writes both styles exactly as the accepted responses had them
    route = {**strict, "brokerDatas": [{**strict["brokerDatas"][0], "brokerAddrs": {0: "127.0.0.1:10911"}}]}
    assert fastjson.dumps(route, style="standard") == bodies["fakeserver-response-code105-strict"]
    assert fastjson.dumps(route, style="fastjson") == bodies["fakeserver-response-code105-fastjson"]


# ---- JSON header details -----------------------------------------------------------------------------------------

def test_json_header_tolerates_trailing_newline_and_mixed_scalars():
    header = b'{"code":310,"language":"CPP","version":333,"opaque":7,"flag":0,"remark":null,' \
             b'"extFields":{"a":"g","d":4,"k":true,"x":null,"f":1.50}}\n'
    cmd = RemotingCommand.decode(_frame(header, b"body"))
    assert cmd.language == "CPP" and cmd.remark is None
    assert cmd.ext_fields == {"a": "g", "d": "4", "k": "true", "f": "1.50"}
    assert cmd.body == b"body"


def test_json_header_missing_optional_fields_defaults():
    cmd = RemotingCommand.decode(_frame(b'{"code":34}'))
    assert (cmd.code, cmd.opaque, cmd.flag, cmd.ext_fields, cmd.remark) == (34, 0, 0, {}, None)


@pytest.mark.parametrize("header", [
    b"", b"{", b"[]", b'"x"', b'{"code":1,"opaque":"x"}', b'{"code":" 310"}', b'{"code":"3_10"}', b'{"code":"310.7"}',
    b'{"code":"1e2"}', b'{"code":"0x10"}', b'{"code":"2147483648"}', b'{"code":[310]}', b'{"code":{"a":1}}',
    b'{"code":1,"opaque":" 5"}', b'{"code":1,"version":"V4_9_7"}', b'{"code":1,"flag":"1 "}',
    b'{"code":1,"extFields":[1]}', b'{"code":1,"extFields":"x"}', b'{"code":1,"extFields":[]}',
    b'{"code":1} trailing', b"\xff\xfe",
])
def test_bad_json_headers_raise_protocol_error(header):
    """What RocketMQ 4.9.7's fastjson 1.2.69 refuses too (the Java broker then closes the connection)."""
    with pytest.raises(ProtocolError):
        RemotingCommand.decode(_frame(header))


@pytest.mark.parametrize("header, code, opaque, flag, version", [
    # each checked against RocketMQ 4.9.7's own JSON header decoder (fastjson 1.2.69, RemotingSerializable.decode)
    (b'{"code":"310","opaque":"7","flag":"0","version":"395"}', 310, 7, 0, 395),
    (b'{"code":"+310","opaque":"-5"}', 310, -5, 0, 0),
    (b'{"code":310.7,"opaque":1.5}', 310, 1, 0, 0),
    (b'{"code":-310.5}', -310, 0, 0, 0),
    (b'{"code":"310.00"}', 310, 0, 0, 0),
    (b'{"code":"1,000"}', 1000, 0, 0, 0),
    (b'{"code":"0310"}', 310, 0, 0, 0),
    (b'{"code":true,"flag":false}', 1, 0, 0, 0),
    (b'{"code":"","opaque":null}', 0, 0, 0, 0),
    (b'{"code":"null"}', 0, 0, 0, 0),
    (b"{}", 0, 0, 0, 0),
    (b'{"code":1e2}', 100, 0, 0, 0),
    ('{"code":"\u0661\u0662"}'.encode(), 12, 0, 0, 0),  # Arabic-Indic digits, as Java's Character.digit
    (b'{"code":1,"flag":"1"}', 1, 0, 1, 0),
])
def test_json_header_numbers_read_as_fastjson_reads_them(header, code, opaque, flag, version):
    cmd = RemotingCommand.decode(_frame(header))
    assert (cmd.code, cmd.opaque, cmd.flag, cmd.version) == (code, opaque, flag, version)


def test_json_header_float_ext_values_keep_their_text():
    cmd = RemotingCommand.decode(_frame(b'{"code":1,"extFields":{"d":1.50,"e":1e2,"n":null}}'))
    assert cmd.ext_fields == {"d": "1.50", "e": "1e2"} and all(type(v) is str for v in cmd.ext_fields.values())


def test_response_written_like_java():
    req = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {"a": "g"})
    resp = req.make_response(0, ext_fields={"queueId": 1, "msgId": "AB", "ok": True})
    frame = resp.encode()
    text = frame[8:].decode()
    assert text == ('{"code":0,"extFields":{"queueId":"1","msgId":"AB","ok":"true"},"flag":1,"language":"JAVA",'
                    f'"opaque":{req.opaque},"serializeTypeCurrentRPC":"JSON","version":{CURRENT_VERSION}}}')
    assert resp.is_response and not resp.is_oneway and resp.opaque == req.opaque


def test_remark_and_unicode_are_escaped_correctly():
    cmd = RemotingCommand.request(12, {"k\u00e9y": 'va"l\\ue\n'}, remark="it's \"quoted\" \u4e2d")
    back = RemotingCommand.decode(cmd.encode())
    assert back == cmd


def test_request_helper_and_flags():
    a = RemotingCommand.request(RequestCode.HEART_BEAT, body=b"{}")
    b = RemotingCommand.request(RequestCode.UNLOCK_BATCH_MQ, oneway=True)
    assert b.opaque != a.opaque and 0 < a.opaque < 2**31
    assert a.language == "PYTHON" and a.version == CURRENT_VERSION
    assert b.is_oneway and not b.is_response
    assert RemotingCommand.decode(b.encode()).is_oneway


def test_list_body_is_written_without_joining():
    parts = [b"abc", memoryview(b"defg"), bytearray(b"h")]
    cmd = RemotingCommand.request(11).make_response(0, body=parts)
    out: list = []
    size = cmd.encode_into(out)
    assert len(out) == 4 and out[1] is parts[0] and out[2] is parts[1]
    frame = b"".join(bytes(x) for x in out)
    assert size == len(frame)
    assert RemotingCommand.decode(frame).body == b"abcdefgh"
    assert cmd.body_bytes() == b"abcdefgh"


def test_big_body_is_a_separate_buffer():
    body = bytes(200_000)
    out: list = []
    RemotingCommand.request(10, body=body).encode_into(out)
    assert len(out) == 2 and out[1] is body


def test_ext_value_text_rule():
    assert [ext_value_text(v) for v in ("s", 5, -1, True, False, 1.5)] == ["s", "5", "-1", "true", "false", "1.5"]


# ---- ROCKETMQ binary header --------------------------------------------------------------------------------------

def test_rocketmq_header_layout():
    cmd = RemotingCommand(code=10, language="JAVA", version=409, opaque=5, flag=0, remark="hi",
                          ext_fields={"k": "v"}, body=b"B", serialize_type=1)
    frame = cmd.encode()
    total, word = struct.unpack_from(">II", frame)
    assert word >> 24 == 1
    header = frame[8:8 + (word & 0xFFFFFF)]
    assert header == (struct.pack(">hBhiii", 10, 0, 409, 5, 0, 2) + b"hi" + struct.pack(">i", 2 + 1 + 4 + 1)
                      + struct.pack(">h", 1) + b"k" + struct.pack(">i", 1) + b"v")
    assert RemotingCommand.decode(frame) == cmd


def test_rocketmq_response_keeps_request_serialization():
    req = RemotingCommand.request(14, {"topic": "T"}, serialize_type=1)
    resp = RemotingCommand.decode(req.encode()).make_response(0, ext_fields={"offset": "3"})
    assert resp.serialize_type == 1
    assert RemotingCommand.decode(resp.encode()).ext_fields == {"offset": "3"}


def test_rocketmq_empty_remark_decodes_as_none():
    cmd = RemotingCommand(code=1, remark="", serialize_type=1)
    assert RemotingCommand.decode(cmd.encode()).remark is None


@pytest.mark.parametrize("header", [
    b"\x00" * 5,
    struct.pack(">hBhiii", 1, 0, 1, 1, 0, 100) + b"\x00" * 4,  # remark longer than header
    struct.pack(">hBhiii", 1, 0, 1, 1, 0, 0) + struct.pack(">i", 50),  # ext longer than header
    struct.pack(">hBhiii", 1, 0, 1, 1, 0, 0) + struct.pack(">i", 3) + b"\x00\x05a",  # key overruns
    struct.pack(">hBhiii", 1, 0, 1, 1, 0, -4) + struct.pack(">i", 0),
    struct.pack(">hBhiii", 1, 0, 1, 1, 0, 2) + b"\xff\xff" + struct.pack(">i", 0),  # bad UTF-8
])
def test_bad_rocketmq_headers_raise_protocol_error(header):
    with pytest.raises(ProtocolError):
        decode_parts(1, header, b"")


def test_unknown_serialize_type():
    with pytest.raises(ProtocolError):
        RemotingCommand.decode(_frame(b'{"code":1}', serialize_type=7))


# ---- properties ----------------------------------------------------------------------------------------------------

_i16 = st.integers(-(2**15), 2**15 - 1)
_i32 = st.integers(-(2**31), 2**31 - 1)
_languages = st.sampled_from([m.name for m in LanguageCode])
_body = st.one_of(st.binary(max_size=300), st.just(b""))


def _commands(serialize_type: int):
    remark = st.none() | (st.text(min_size=1) if serialize_type == 1 else st.text())
    return st.builds(
        RemotingCommand,
        code=_i16,
        language=_languages,
        version=_i16,
        opaque=_i32,
        flag=_i32,
        remark=remark,
        ext_fields=st.dictionaries(st.text(max_size=20), st.text(max_size=40), max_size=8),
        body=_body,
        serialize_type=st.just(serialize_type),
    )


@settings(max_examples=300, deadline=None)
@given(_commands(0))
def test_json_roundtrip(cmd):
    assert RemotingCommand.decode(cmd.encode()) == cmd


@settings(max_examples=300, deadline=None)
@given(_commands(1))
def test_rocketmq_roundtrip(cmd):
    assert RemotingCommand.decode(cmd.encode()) == cmd


@settings(max_examples=100, deadline=None)
@given(_commands(0), st.dictionaries(st.text(max_size=10),
                                     st.one_of(st.integers(), st.booleans(), st.text(max_size=10)), max_size=6))
def test_json_scalars_coerce_to_text(cmd, ext):
    header = json.loads(cmd.encode_header())
    header["extFields"] = ext
    decoded = decode_parts(0, json.dumps(header).encode(), b"")
    assert decoded.ext_fields == {k: _as_text(v) for k, v in ext.items()}
