"""The PULL_MESSAGE request's JSON template (``client.api.pull_request`` fills ``RemotingCommand.ext_json`` from a
per-queue template) writes the same header bytes as the generic JSON encoder over the request's ``ext_fields``,
for any group, topic, subscription and expression type (quotes, backslashes, control characters, non-ASCII) and
any numbers."""

from __future__ import annotations

import json

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from pyrmq.client.api import pull_request
from pyrmq.client.instance import ClientInstance
from pyrmq.client.message import MessageQueue

_odd = st.sampled_from(['"', "\\", '\\"', "\x00", "\x1f", "\x7f", "\u2028", "é", "\u4e2d", "\U0001f600", "\n", "/"])
_name = st.lists(st.one_of(_odd, st.text(max_size=4)), max_size=5).map("".join)
_long = st.integers(min_value=-(2**63), max_value=2**63 - 1)
_int = st.integers(min_value=-(2**31), max_value=2**31 - 1)

INSTANCE = ClientInstance()  # not started: pull_request only reads whether its requests are signed


@settings(max_examples=300, deadline=None)
@given(
    group=_name, topic=_name, broker=_name, queue_id=_int, offset=_long, max_nums=_int, sys_flag=_int,
    commit_offset=_long, suspend_ms=_long, sub_version=_long, subscription=st.none() | _name, expression_type=_name,
    large=st.booleans(),
)
def test_pull_request_template_writes_the_generic_encoders_bytes(
    group, topic, broker, queue_id, offset, max_nums, sys_flag, commit_offset, suspend_ms, sub_version, subscription,
    expression_type, large,
):
    mq = MessageQueue(topic, broker, queue_id)
    for _ in range(2):  # the template made, then taken from the cache
        request = pull_request(
            INSTANCE, mq, group, offset, max_nums=max_nums, sys_flag=sys_flag, commit_offset=commit_offset,
            suspend_ms=suspend_ms, sub_version=sub_version, subscription=subscription, expression_type=expression_type,
            large=large,
        )
        assert request.ext_json is not None  # the template was used
        generic = attrs.evolve(request, ext_json=None)
        assert request.encode_header() == generic.encode_header()
        assert request.encode() == generic.encode()
        assert json.loads(request.encode_header())["extFields"] == {k: str(v) for k, v in request.ext_fields.items()}
