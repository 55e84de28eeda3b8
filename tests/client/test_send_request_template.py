"""The SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE request's JSON template (``Producer._request`` fills
``RemotingCommand.ext_json`` from a per-topic head) writes the same header bytes as the generic JSON encoder over
the request's ``ext_fields``, for any group, topic and properties text (quotes, backslashes, control characters,
non-ASCII) and any numbers; a signed request is written from its ``ext_fields`` (the signer adds members)."""

from __future__ import annotations

import json

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from pyrmq.client.message import MessageQueue
from pyrmq.client.producer import Producer, _Prepared
from pyrmq.remoting.signing import RequestSigner, verify_signature

_odd = st.sampled_from(['"', "\\", '\\"', "\x00", "\x01", "\x02", "\x1f", "\x7f", "\u2028", "é", "\u4e2d", "\U0001f600",
                        "\n", "/"])
_text = st.lists(st.one_of(_odd, st.text(max_size=4)), max_size=6).map("".join)
_name = st.text(alphabet="abcXYZ019_-%|", min_size=1, max_size=12)
_int = st.integers(min_value=-(2**31), max_value=2**31 - 1)
_long = st.integers(min_value=0, max_value=2**63 - 1)


@settings(max_examples=300, deadline=None)
@given(
    group=_name, topic=_name, queue_id=_int, sys_flag=_int, born=_long, flag=_int, properties=st.none() | _text,
    reconsume=st.none() | _int, max_reconsume=st.none() | _int, batch=st.booleans(), oneway=st.booleans(),
)
def test_send_request_template_writes_the_generic_encoders_bytes(
    group, topic, queue_id, sys_flag, born, flag, properties, reconsume, max_reconsume, batch, oneway
):
    producer = Producer("127.0.0.1:9876", group)  # not started: _request only builds the request
    mq = MessageQueue(topic, "broker-a", queue_id)
    p = _Prepared(topic, b"body", sys_flag, properties, "UNIQ", flag, reconsume, max_reconsume, batch, None)
    for _ in range(2):  # the head made, then taken from the cache
        request = producer._request(p, mq, born, oneway=oneway)
        assert request.ext_json is not None  # the template was used
        generic = attrs.evolve(request, ext_json=None)
        assert request.encode_header() == generic.encode_header()
        assert request.encode() == generic.encode()
        assert json.loads(request.encode_header())["extFields"] == {k: str(v) for k, v in request.ext_fields.items()}


def test_signed_send_request_carries_its_signature():
    producer = Producer("127.0.0.1:9876", "g", credentials=("ak", "secret"))
    assert producer.instance.remoting.signer is not None
    p = _Prepared("T", b"body", 0, "UNIQ_KEY\x01X", "X", 0, None, None, False, None)
    request = producer._request(p, MessageQueue("T", "b", 1), 1700000000000)
    assert request.ext_json is None
    signer = RequestSigner("ak", "secret")
    signer(request)
    header = json.loads(request.encode_header())["extFields"]
    assert header["AccessKey"] == "ak" and header["Signature"] == request.ext_fields["Signature"]
    assert verify_signature(request, "secret")


def test_prepared_properties_of_plain_and_other_messages():
    from pyrmq.client.message import Message, encode_properties

    producer = Producer("127.0.0.1:9876", "g", compress_over=64)
    plain = producer._prepare(Message("T", b"x" * 10))
    assert plain.properties == encode_properties({"UNIQ_KEY": plain.uniq_key}) and plain.sys_flag == 0
    tagged = producer._prepare(Message("T", b"x", tags="A", keys="k1"))
    assert tagged.properties == encode_properties({"KEYS": "k1", "TAGS": "A", "UNIQ_KEY": tagged.uniq_key})
    big = producer._prepare(Message("T", b"x" * 100))  # compressed: the general path
    assert big.sys_flag & 1 and big.properties == encode_properties({"UNIQ_KEY": big.uniq_key})
    delayed = producer._prepare(Message("T", b"x", delay_time_level=3))
    assert delayed.properties == encode_properties({"DELAY": "3", "UNIQ_KEY": delayed.uniq_key})
    assert plain.uniq_key != tagged.uniq_key


def test_batch_body_of_plain_and_other_messages():
    """Each entry of a SEND_BATCH_MESSAGE body carries its message's flag, body and properties (UNIQ_KEY, plus
    tags and keys when set), whichever way the producer wrote it; a bad message after the first is refused with the
    same error as the first would be."""
    import pytest

    from pyrmq.client.errors import InvalidMessageError
    from pyrmq.client.message import Message
    from pyrmq.remoting.message import decode_batch_body, decode_properties

    producer = Producer("127.0.0.1:9876", "g")
    msgs = [Message("T", b"a"), Message("T", b"bb", flag=5), Message("T", b"c", tags="X", keys="k"),
            Message("T", b"d" * 300), Message("T", b"e", tags="")]
    (p,) = producer._prepare_batches(msgs)
    entries = decode_batch_body(p.body)
    ids = p.uniq_key.split(",")
    assert [e.body for e in entries] == [m.body for m in msgs] and [e.flag for e in entries] == [0, 5, 0, 0, 0]
    props = [decode_properties(e.properties_bytes) for e in entries]
    assert [d["UNIQ_KEY"] for d in props] == ids and len(set(ids)) == 5
    assert props[2] == {"TAGS": "X", "KEYS": "k", "UNIQ_KEY": ids[2]} and props[4] == {"UNIQ_KEY": ids[4]}
    for bad, match in ((Message("T", b""), "empty"), (Message("U", b"x"), "one topic"),
                       (Message("T", b"x", delay_time_level=2), "delayed"), (Message("T", b"x" * 5000), "over"),
                       (Message("T", b"x", wait_store_msg_ok=False), "wait_store_msg_ok"), ("not a message", "expected")):
        with pytest.raises(InvalidMessageError, match=match):
            Producer("127.0.0.1:9876", "g", max_message_size=4096)._prepare_batches([Message("T", b"1"), bad])
