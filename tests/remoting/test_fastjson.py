from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyrmq.remoting import fastjson as fj
from pyrmq.remoting.fastjson import ObjectKey

ROUTE = {
    "brokerDatas": [{"brokerAddrs": {0: "10.0.0.5:10911", 1: "10.0.0.6:10911"}, "brokerName": "broker-a",
                     "cluster": "DefaultCluster"}],
    "filterServerTable": {},
    "queueDatas": [{"brokerName": "broker-a", "perm": 6, "readQueueNums": 4, "topicSysFlag": 0,
                    "writeQueueNums": 4}],
}


def test_route_in_both_styles():
    fast = fj.dumps_text(ROUTE, style="fastjson")
    std = fj.dumps_text(ROUTE, style="standard")
    assert fast == ('{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.5:10911",1:"10.0.0.6:10911"},"brokerName":"broker-a",'
                    '"cluster":"DefaultCluster"}],"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a",'
                    '"perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}')
    assert std == fast.replace("{0:", '{"0":').replace(",1:", ',"1":')
    assert json.loads(std)["brokerDatas"][0]["brokerAddrs"] == {"0": "10.0.0.5:10911", "1": "10.0.0.6:10911"}
    assert fj.loads(fast) == fj.loads(std) == json.loads(std)
    assert fj.dumps(ROUTE, standard=False) == fast.encode()


def test_route_style_rule():
    assert fj.route_json_style(121) == fj.FASTJSON
    assert fj.route_json_style(400) == fj.FASTJSON
    assert fj.route_json_style(401) == fj.STANDARD
    assert fj.route_json_style(317, accept_standard_json_only=True) == fj.STANDARD


def test_numeric_keys_sort_numerically():
    assert fj.dumps_text({10: "a", 2: "b", 1: "c"}, style="fastjson") == '{1:"c",2:"b",10:"a"}'
    assert fj.dumps_text({10: "a", 2: "b"}) == '{"2":"b","10":"a"}'


def test_object_keys():
    text = ('{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"t"}:12,'
            '{"brokerName":"b","queueId":1,"topic":"t"}:40}}')
    doc = fj.loads(text)
    table = doc["offsetTable"]
    k0 = ObjectKey(brokerName="b", queueId=0, topic="t")
    assert table[k0] == 12 and k0["topic"] == "t" and dict(k0) == {"brokerName": "b", "queueId": 0, "topic": "t"}
    assert fj.dumps_text(doc, style="fastjson") == text
    assert fj.dumps_text(doc) == text  # fastjson writes object keys as objects in any style


def test_fastjson_extras():
    doc = fj.loads("{a:'it\\'s',\n 'b' : [1, -2.5e3, true, false, null], 7:{}}")
    assert doc == {"a": "it's", "b": [1, -2500.0, True, False, None], "7": {}}
    assert fj.loads("{'q':'say \"hi\"\\n'}") == {"q": 'say "hi"\n'}


def test_non_ascii_is_escaped_only_in_standard_style():
    assert fj.dumps_text({"k": "\u4e2d"}) == '{"k":"\\u4e2d"}'
    assert fj.dumps_text({"k": "\u4e2d"}, style="fastjson") == '{"k":"\u4e2d"}'
    assert fj.dumps({"k": "\u4e2d"}, style="fastjson") == '{"k":"\u4e2d"}'.encode()


def test_heartbeat_body_from_capture_and_bytes_input():
    body = b'{"clientID":"c","consumerDataSet":[],"producerDataSet":[{"groupName":"CLIENT_INNER_PRODUCER"}]}'
    assert fj.loads(body)["producerDataSet"][0]["groupName"] == "CLIENT_INNER_PRODUCER"
    assert fj.loads(memoryview(body)) == fj.loads(body.decode())


@pytest.mark.parametrize("bad", ["", "{", "{0:}", "{a b}", "[1,]x", "{'a':1", "{1:2,}", "\"\\x\"", "nul",
                                  "[" * 2000, b"\xff"])
def test_bad_input_raises_value_error(bad):
    with pytest.raises(ValueError):
        fj.loads(bad)


def test_unsupported_values():
    with pytest.raises(TypeError):
        fj.dumps_text({"a": object()})
    with pytest.raises(ValueError):
        fj.dumps_text({}, style="pretty")


_scalars = st.none() | st.booleans() | st.integers(-(2**63), 2**63) | st.text(max_size=20)
_json = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=4)
                     | st.dictionaries(st.text(max_size=8) | st.integers(0, 1000), inner, max_size=4), max_leaves=20)


def _normalise(v):
    if isinstance(v, dict):
        return {str(k): _normalise(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_normalise(x) for x in v]
    return v


@given(_json, st.sampled_from(["standard", "fastjson"]))
def test_dumps_loads_roundtrip(value, style):
    if isinstance(value, dict) and len({str(k) for k in value}) != len(value):
        return  # 1 and "1" collide once written as text
    assert fj.loads(fj.dumps(value, style=style)) == _normalise(value)


def test_object_keys_mixing_string_and_object_keys_parse():
    # found by the reliability suite's fuzzer (tests/chaos/fuzz_targets.py, 'fastjson'): an object used as a key
    # that itself had both a string key and an object key raised TypeError ('<' between ObjectKey and str)
    value = fj.loads(b'{{k:"",{}:""}:1}')
    (key,) = value
    assert key["k"] == "" and len(key) == 2 and value[key] == 1
    assert fj.loads(b'{{{}:"",k:""}:1}') == value  # the same key whatever the order it was written in
