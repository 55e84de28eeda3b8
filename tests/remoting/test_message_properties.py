"""The one properties decoder (``decode_properties``, Java's ``MessageDecoder.string2messageProperties``) and its
variants for one name (``find_property``) and for a batch's entries (``decode_properties_each``), held identical
over generated properties strings."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pyrmq.remoting.message import decode_properties, decode_properties_each, encode_properties, find_property

NAMES = ["TAGS", "KEYS", "UNIQ_KEY", "WAIT", "DELAY", "XTAGS", "TAGSX", "A"]

# items as a client or a careless producer may write them: name-value pairs with empty or odd values (the name-value
# separator inside a value, non-ASCII), bare words, a separator alone, empty items, names that end or start like
# another one
_value = st.one_of(
    st.sampled_from(["", "A", "B", "a b", "\x01", "x\x01y", "é", "\u4e2d", "true"]), st.text(max_size=6)
)
_item = st.one_of(
    st.tuples(st.sampled_from(NAMES), _value).map(lambda nv: f"{nv[0]}\x01{nv[1]}"),
    st.tuples(st.text(max_size=4), _value).map(lambda nv: f"{nv[0]}\x01{nv[1]}"),
    st.sampled_from(["", "TAGS", "\x01", "\x01A", "TAGS\x01", "\x02"]),
    st.text(max_size=5),
)
_props = st.lists(_item, max_size=8).map("\x02".join)


def test_java_rules_later_duplicate_wins_and_empty_is_no_item():
    # MessageDecoder.string2messageProperties: map.put per item (a later duplicate wins); an item counts only with
    # kvSepIndex > index (a name) and kvSepIndex < newIndex - 1 (a value)
    assert decode_properties("TAGS\x01A\x02TAGS\x01") == {"TAGS": "A"}
    assert decode_properties("TAGS\x01A\x02TAGS\x01B") == {"TAGS": "B"}
    assert decode_properties("\x01A\x02K\x01\x02x\x02K2\x01v\x01w") == {"K2": "v\x01w"}
    assert find_property(b"TAGS\x01A\x02TAGS\x01", b"TAGS\x01") == "A"
    assert find_property(b"TAGS\x01A\x02TAGS\x01B", b"TAGS\x01") == "B"
    assert find_property(b"XTAGS\x01A\x02K\x01TAGS\x01B", b"TAGS\x01") is None
    assert find_property(b"TAGS\x01", b"TAGS\x01") is None


@settings(max_examples=400, deadline=None)
@given(_props, st.sampled_from(NAMES))
def test_find_property_is_decode_properties_for_one_name(text, name):
    raw = text.encode("utf-8", "surrogatepass")
    assert find_property(raw, name.encode() + b"\x01") == decode_properties(raw).get(name)


@settings(max_examples=200, deadline=None)
@given(_props)
def test_text_bytes_and_views_decode_alike(text):
    raw = text.encode("utf-8", "surrogatepass")
    assert decode_properties(text) == decode_properties(raw) == decode_properties(memoryview(raw)) == (
        decode_properties(bytearray(raw)))


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(min_size=1).filter(lambda k: "\x01" not in k and "\x02" not in k),
                       st.text(min_size=1).filter(lambda v: "\x02" not in v), max_size=6))
def test_encoded_properties_decode_to_themselves(props):
    assert decode_properties(encode_properties(props)) == props


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.binary(max_size=6), st.sampled_from([b"TAGS\x01", b"TAGS\x01\xff", b"\xe4\xb8"])),
                max_size=6).map(b"\x02".join))
def test_undecodable_bytes_find_and_decode_alike(raw):
    # invalid UTF-8 is replaced (U+FFFD) either way: never where a separator is
    assert find_property(raw, b"TAGS\x01") == decode_properties(raw).get("TAGS")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(_props, _props.map(lambda t: t.encode("utf-8", "surrogatepass")), st.binary(max_size=12)),
                max_size=6))
def test_decode_properties_each_is_decode_properties_of_each(items):
    # the batch paths' variant (one call for a batch's entries) against the decoder itself
    assert decode_properties_each(items) == [decode_properties(item) for item in items]
    assert decode_properties_each(iter(map(memoryview, [i for i in items if type(i) is bytes]))) == [
        decode_properties(i) for i in items if type(i) is bytes]
