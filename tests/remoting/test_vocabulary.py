"""The shared wire vocabulary: flag and permission bits, property names, and route records in both JSON dialects."""

from __future__ import annotations

import json

import pytest

from pyrmq.remoting import fastjson
from pyrmq.remoting.errors import ProtocolError
from pyrmq.remoting.message import decode_properties, encode_properties
from pyrmq.remoting.route import BrokerData, QueueData, TopicRouteData
from pyrmq.remoting.vocabulary import SYSTEM_PROPERTIES, MessageProperty, MessageSysFlag, Permission, PullSysFlag


def test_bits_are_rocketmqs():
    # PullSysFlag, PermName and MessageSysFlag of RocketMQ 4.9.8 (spec 3.3, 4.1, 5.4)
    assert [int(f) for f in (PullSysFlag.COMMIT_OFFSET, PullSysFlag.SUSPEND, PullSysFlag.SUBSCRIPTION)] == [1, 2, 4]
    assert int(Permission.READ | Permission.WRITE) == 6 and int(Permission.INHERIT) == 1
    assert str(PullSysFlag.SUBSCRIPTION | PullSysFlag.SUSPEND) == "6"  # what goes into a header's extFields
    assert int(MessageSysFlag.BORNHOST_V6) == 0x10 and int(MessageSysFlag.TRANSACTION_TYPE_MASK) == 0xC


def test_property_names_and_system_set():
    props = {MessageProperty.TAGS: "t", MessageProperty.DELAY_TIME_LEVEL: "3", MessageProperty.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: "U"}
    assert encode_properties(props) == "TAGS\x01t\x02DELAY\x013\x02UNIQ_KEY\x01U"
    assert decode_properties(encode_properties(props)) == props
    assert {"KEYS", "TAGS", "WAIT", "DELAY", "REAL_TOPIC", "REAL_QID", "RETRY_TOPIC"} <= SYSTEM_PROPERTIES
    assert "my-own" not in SYSTEM_PROPERTIES


ROUTE = TopicRouteData(
    (QueueData("broker-a", 4, 4, Permission.READ | Permission.WRITE), QueueData("broker-b", 2, 2, Permission.READ)),
    (BrokerData("DefaultCluster", "broker-a", {0: "10.0.0.5:10911", 1: "10.0.0.6:10911"}),
     BrokerData("DefaultCluster", "broker-b", {1: "10.0.0.7:10911"})),
)


@pytest.mark.parametrize("style", [fastjson.FASTJSON, fastjson.STANDARD])
def test_route_round_trips_in_both_dialects(style):
    body = ROUTE.encode(style)
    if style == fastjson.FASTJSON:
        assert b'"brokerAddrs":{0:"10.0.0.5:10911",1:"10.0.0.6:10911"}' in body
    else:
        assert json.loads(body)["brokerDatas"][0]["brokerAddrs"] == {"0": "10.0.0.5:10911", "1": "10.0.0.6:10911"}
    # both spellings of the queue sys flag, as the Java name server writes them
    assert b'"topicSynFlag":0' in body and b'"topicSysFlag":0' in body
    assert TopicRouteData.decode(body) == ROUTE
    route = TopicRouteData.decode(body)
    assert route.broker("broker-a").master == "10.0.0.5:10911"
    assert route.broker("broker-b").master is None and route.broker("broker-b").any_addr() == "10.0.0.7:10911"
    assert [q.writable for q in route.queue_datas] == [True, False]


def test_route_from_an_old_name_server_and_garbage():
    old = b'{"brokerDatas":[{"brokerAddrs":{0:"h:1"},"brokerName":"b","cluster":"c"}],"queueDatas":[{"brokerName":"b","perm":6,"readQueueNums":1,"topicSynFlag":2,"writeQueueNums":1}]}'
    assert TopicRouteData.decode(old).queue_datas == (QueueData("b", 1, 1, 6, 2),)
    with pytest.raises(ProtocolError, match="not a topic route"):
        TopicRouteData.decode(b'{"queueDatas":[{"perm":6}]}')
