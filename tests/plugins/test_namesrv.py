"""Name server: registration, routes in both JSON styles, liveness, permissions, KV config (spec 3.10, 4, 7.1)."""

from __future__ import annotations

import json
import struct
import zlib

import pytest
import trio

from pyrmq.plugins.namesrv.routes import RouteTable
from pyrmq.remoting import fastjson
from pyrmq.remoting.client import RemotingClient
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.errors import RemotingTimeout


def register_request(broker_name="broker-a", addr="127.0.0.1:10911", broker_id=0, topics=None, counter=1, cluster="DefaultCluster",
                     state_version=None):
    topics = topics if topics is not None else {"TopicA": {"topicName": "TopicA", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6}}
    version = {"counter": counter, "timestamp": 1}
    if state_version is not None:
        version["stateVersion"] = state_version
    body = json.dumps(
        {"filterServerList": [], "topicConfigSerializeWrapper": {"dataVersion": version, "topicConfigTable": topics}}
    ).encode()
    ext = {
        "brokerName": broker_name,
        "brokerAddr": addr,
        "clusterName": cluster,
        "haServerAddr": addr.rsplit(":", 1)[0] + ":10912",
        "brokerId": str(broker_id),
        "compressed": "false",
        "bodyCrc32": str(zlib.crc32(body) & 0x7FFFFFFF),
    }
    return RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, body)


def route_request(topic, version=409):
    req = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    req.version = version
    return req


@pytest.fixture
async def namesrv(start_role):
    kernel = await start_role("namesrv")
    return kernel.listening["namesrv"]


async def test_registered_broker_gives_a_route_in_both_json_styles(namesrv, remoting_client):
    resp = await remoting_client.invoke(namesrv, register_request())
    assert resp.code == ResponseCode.SUCCESS, resp.remark

    standard = await remoting_client.invoke(namesrv, route_request("TopicA", version=409))
    assert standard.code == ResponseCode.SUCCESS
    text = standard.body_bytes().decode()
    assert '"brokerAddrs":{"0":"127.0.0.1:10911"}' in text
    route = json.loads(text)
    assert route["queueDatas"][0]["brokerName"] == "broker-a" and route["queueDatas"][0]["writeQueueNums"] == 4
    assert route["brokerDatas"][0]["cluster"] == "DefaultCluster"

    old_client = await remoting_client.invoke(namesrv, route_request("TopicA", version=317))
    assert '"brokerAddrs":{0:"127.0.0.1:10911"}' in old_client.body_bytes().decode()
    assert fastjson.loads(old_client.body_bytes()) == route


async def test_unknown_topic_is_topic_not_exist(namesrv, remoting_client):
    resp = await remoting_client.invoke(namesrv, route_request("Nope"))
    assert resp.code == ResponseCode.TOPIC_NOT_EXIST and "Nope" in resp.remark


async def test_broker_dropped_at_once_when_its_connection_closes(namesrv):
    async with RemotingClient() as broker_side, RemotingClient() as client:
        assert (await broker_side.invoke(namesrv, register_request())).code == 0
        assert (await client.invoke(namesrv, route_request("TopicA"))).code == 0
        broker_side.close_connection(namesrv)
        with trio.fail_after(5):
            while (await client.invoke(namesrv, route_request("TopicA"))).code == 0:
                await trio.sleep(0.01)
        resp = await client.invoke(namesrv, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO))
        assert fastjson.loads(resp.body_bytes()) == {"brokerAddrTable": {}, "clusterAddrTable": {}}


async def test_cluster_info_topics_and_permissions(namesrv, remoting_client):
    await remoting_client.invoke(namesrv, register_request())
    await remoting_client.invoke(namesrv, register_request("broker-b", "127.0.0.1:10921", topics={"TopicA": {"readQueueNums": 2, "writeQueueNums": 2, "perm": 6}, "TopicB": {}}))
    info = await remoting_client.invoke(namesrv, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO))
    text = info.body_bytes().decode()
    assert "{0:" in text  # the Java name server always writes ClusterInfo fastjson style
    cluster = fastjson.loads(text)
    assert cluster["clusterAddrTable"] == {"DefaultCluster": ["broker-a", "broker-b"]}
    assert cluster["brokerAddrTable"]["broker-b"]["brokerAddrs"] == {"0": "127.0.0.1:10921"}

    topics = await remoting_client.invoke(namesrv, RemotingCommand.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))
    assert json.loads(topics.body_bytes()) == {"topicList": ["TopicA", "TopicB"]}
    by_cluster = await remoting_client.invoke(namesrv, RemotingCommand.request(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": "DefaultCluster"}))
    assert json.loads(by_cluster.body_bytes())["topicList"] == ["TopicA", "TopicB"]

    wiped = await remoting_client.invoke(namesrv, RemotingCommand.request(RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"}))
    assert wiped.ext_fields["wipeTopicCount"] == "1"
    route = json.loads((await remoting_client.invoke(namesrv, route_request("TopicA"))).body_bytes())
    assert {q["brokerName"]: q["perm"] for q in route["queueDatas"]} == {"broker-a": 4, "broker-b": 6}
    added = await remoting_client.invoke(namesrv, RemotingCommand.request(RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"}))
    assert added.ext_fields["addTopicCount"] == "1"

    deleted = await remoting_client.invoke(namesrv, RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "TopicB"}))
    assert deleted.code == 0
    assert (await remoting_client.invoke(namesrv, route_request("TopicB"))).code == ResponseCode.TOPIC_NOT_EXIST


async def test_slave_learns_its_master_and_route_lists_both(namesrv, remoting_client):
    await remoting_client.invoke(namesrv, register_request())
    resp = await remoting_client.invoke(namesrv, register_request(addr="127.0.0.1:10931", broker_id=1))
    assert resp.ext_fields["masterAddr"] == "127.0.0.1:10911" and resp.ext_fields["haServerAddr"] == "127.0.0.1:10912"
    route = json.loads((await remoting_client.invoke(namesrv, route_request("TopicA"))).body_bytes())
    assert route["brokerDatas"][0]["brokerAddrs"] == {"0": "127.0.0.1:10911", "1": "127.0.0.1:10931"}


async def test_master_of_an_older_epoch_does_not_take_id_0_back(namesrv, remoting_client):
    """Automatic failover's fence (RocketMQ 5.x): id 0 with a lower dataVersion.stateVersion than the live holder's
    is ignored; a higher one takes over."""
    async def master():
        route = json.loads((await remoting_client.invoke(namesrv, route_request("TopicA"))).body_bytes())
        return route["brokerDatas"][0]["brokerAddrs"].get("0")

    await remoting_client.invoke(namesrv, register_request(addr="127.0.0.1:10911", state_version=2))
    stale = await remoting_client.invoke(namesrv, register_request(addr="127.0.0.1:10921", state_version=1))
    assert stale.code == ResponseCode.SUCCESS and stale.ext_fields["masterAddr"] == "127.0.0.1:10911"
    assert await master() == "127.0.0.1:10911"
    assert (await remoting_client.invoke(namesrv, register_request(addr="127.0.0.1:10931"))).code == ResponseCode.SUCCESS
    assert await master() == "127.0.0.1:10911"  # no stateVersion at all counts as 0
    await remoting_client.invoke(namesrv, register_request(addr="127.0.0.1:10921", state_version=3))
    assert await master() == "127.0.0.1:10921"
    # the deposed one registers under its replica id: a slave of the new master
    resp = await remoting_client.invoke(namesrv, register_request(addr="127.0.0.1:10911", broker_id=2))
    assert resp.ext_fields["masterAddr"] == "127.0.0.1:10921"


async def test_bad_crc_and_bad_body_are_refused_with_a_remark(namesrv, remoting_client):
    req = register_request()
    req.ext_fields["bodyCrc32"] = "12345"
    resp = await remoting_client.invoke(namesrv, req)
    assert resp.code == ResponseCode.SYSTEM_ERROR and resp.remark == "crc32 not match"
    req = register_request()
    req.body = b"{not json"
    req.ext_fields["bodyCrc32"] = "0"
    resp = await remoting_client.invoke(namesrv, req)
    assert resp.code == ResponseCode.SYSTEM_ERROR and "REGISTER_BROKER body" in resp.remark
    missing = RemotingCommand.request(RequestCode.REGISTER_BROKER, {"brokerName": "x"})
    resp = await remoting_client.invoke(namesrv, missing)
    assert resp.code == ResponseCode.SYSTEM_ERROR and "brokerAddr" in resp.remark


async def test_compressed_registration_body(namesrv, remoting_client):
    dv = json.dumps({"counter": 1, "timestamp": 5}).encode()
    topic = b"Zipped 3 3 6 SINGLE_TAG"
    flt = b"[]"
    raw = struct.pack(">i", len(dv)) + dv + struct.pack(">i", 1) + struct.pack(">i", len(topic)) + topic + struct.pack(">i", len(flt)) + flt
    req = register_request(topics={})
    req.body = zlib.compress(raw, 9)
    req.ext_fields.update(compressed="true", bodyCrc32="0")
    assert (await remoting_client.invoke(namesrv, req)).code == 0
    route = json.loads((await remoting_client.invoke(namesrv, route_request("Zipped"))).body_bytes())
    assert route["queueDatas"][0]["readQueueNums"] == 3


async def test_kv_config_round_trip_and_persistence(start_role, remoting_client, tmp_path):
    kv_path = tmp_path / "kv.json"
    kernel = await start_role("namesrv", {"namesrv.kvConfigPath": str(kv_path)})
    addr = kernel.listening["namesrv"]
    put = RemotingCommand.request(RequestCode.PUT_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "T", "value": "broker-a:4"})
    assert (await remoting_client.invoke(addr, put)).code == 0
    got = await remoting_client.invoke(addr, RemotingCommand.request(RequestCode.GET_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "T"}))
    assert got.ext_fields["value"] == "broker-a:4"
    assert json.loads(kv_path.read_text()) == {"configTable": {"ORDER_TOPIC_CONFIG": {"T": "broker-a:4"}}}
    await remoting_client.invoke(addr, RemotingCommand.request(RequestCode.DELETE_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "T"}))
    gone = await remoting_client.invoke(addr, RemotingCommand.request(RequestCode.GET_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "T"}))
    assert gone.code == ResponseCode.QUERY_NOT_FOUND and "Key: T" in gone.remark


async def test_unknown_code_gets_no_answer_like_the_java_name_server(namesrv, remoting_client):
    with pytest.raises(RemotingTimeout):
        await remoting_client.invoke(namesrv, RemotingCommand.request(9999), timeout=0.3)
    # the connection still works afterwards
    assert (await remoting_client.invoke(namesrv, route_request("Nope"))).code == ResponseCode.TOPIC_NOT_EXIST


async def test_name_servers_side_by_side_are_independent(start_role, remoting_client):
    a = (await start_role("namesrv")).listening["namesrv"]
    b = (await start_role("namesrv")).listening["namesrv"]
    await remoting_client.invoke(a, register_request())
    assert (await remoting_client.invoke(a, route_request("TopicA"))).code == 0
    assert (await remoting_client.invoke(b, route_request("TopicA"))).code == ResponseCode.TOPIC_NOT_EXIST


def test_silent_brokers_expire_after_120_s():
    table = RouteTable()
    table.register_broker(cluster="C", broker_addr="a:1", broker_name="b1", broker_id=0, ha_server_addr="", data_version={"counter": 1},
                          topic_configs={"T": {}}, connection=None, now_ms=0)
    table.register_broker(cluster="C", broker_addr="a:2", broker_name="b2", broker_id=0, ha_server_addr="", data_version={"counter": 1},
                          topic_configs={"T": {}}, connection=None, now_ms=100_000)
    assert table.scan_not_active(now_ms=119_000, expired_ms=120_000) == []
    assert table.scan_not_active(now_ms=121_000, expired_ms=120_000) == ["a:1"]
    route = table.route("T")
    assert [q["brokerName"] for q in route["queueDatas"]] == ["b2"]
    assert table.scan_not_active(now_ms=221_000, expired_ms=120_000) == ["a:2"]
    assert table.route("T") is None and table.cluster_info() == {"brokerAddrTable": {}, "clusterAddrTable": {}}


def test_registration_never_deletes_topics_and_ignores_an_unchanged_version():
    table = RouteTable()
    kw = dict(cluster="C", broker_addr="a:1", broker_name="b1", broker_id=0, ha_server_addr="", connection=None, now_ms=0)
    table.register_broker(data_version={"counter": 1, "timestamp": 1}, topic_configs={"T": {"readQueueNums": 4, "writeQueueNums": 4}}, **kw)
    table.register_broker(data_version={"counter": 1, "timestamp": 1}, topic_configs={"T": {"readQueueNums": 8, "writeQueueNums": 8}}, **kw)
    assert table.route("T")["queueDatas"][0]["readQueueNums"] == 4
    table.register_broker(data_version={"counter": 2, "timestamp": 1}, topic_configs={"U": {}}, **kw)
    assert table.route("T") is not None and table.route("U") is not None
