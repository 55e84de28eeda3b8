"""plain_acl.yml parsing and the validator's decisions, request by request (no network: the validator is a plain
callable; tests/plugins/broker/test_acl_broker.py runs it in a broker)."""

from __future__ import annotations

import json
import textwrap

import pytest

from pyrmq.kernel.errors import ConfigError
from pyrmq.plugins.broker.acl.rules import DENY, PUB, SUB, AddressPattern, load_rules, parse_perm
from pyrmq.plugins.broker.acl.validator import AclValidator, needed_resources
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.signing import RequestSigner

DISTRIBUTION_YML = """\
globalWhiteRemoteAddresses:
  - 10.10.103.*
  - 192.168.0.*
accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
      - topicC=SUB
    groupPerms:
      # the group should convert to retry topic
      - groupA=DENY
      - groupB=PUB|SUB
      - groupC=SUB
  - accessKey: rocketmq2
    secretKey: 12345678
    whiteRemoteAddress: 192.168.1.*
    # if it is admin, it could access all resources
    admin: true
"""


def write(tmp_path, text, name="plain_acl.yml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def validator(tmp_path):
    return AclValidator(load_rules([write(tmp_path, DISTRIBUTION_YML)]))


class Conn:
    def __init__(self, host="127.0.0.1"):
        self.remote_address = (host, 40000)
        self.attributes = {}


def signed(code, fields, body=b"", account=("RocketMQ", "12345678")):
    request = RemotingCommand.request(code, dict(fields), body)
    if account:
        RequestSigner(*account)(request)
    return request


def refusal(validator, request, host="127.0.0.1"):
    response = validator(Conn(host), request)
    if response is None:
        return None
    assert response.code == ResponseCode.NO_PERMISSION
    return response.remark


def test_the_distribution_file_loads(tmp_path):
    rules = load_rules([write(tmp_path, DISTRIBUTION_YML)])
    rocketmq = rules.accounts["RocketMQ"]
    assert rocketmq.resources == {"topicA": DENY, "topicB": PUB | SUB, "topicC": SUB,
                                  "%RETRY%groupA": DENY, "%RETRY%groupB": PUB | SUB, "%RETRY%groupC": SUB}
    assert (rocketmq.default_topic_perm, rocketmq.default_group_perm, rocketmq.admin) == (DENY, SUB, False)
    assert rules.accounts["rocketmq2"].admin
    assert "12345678" not in json.dumps(rocketmq.listing())
    assert [p.text for p in rules.global_white] == ["10.10.103.*", "192.168.0.*"]


@pytest.mark.parametrize(("text", "perm"), [("PUB", PUB), ("SUB", SUB), ("PUB|SUB", PUB | SUB), ("SUB|PUB", PUB | SUB),
                                            ("DENY", DENY), ("pub", DENY), ("ALL", DENY), (None, DENY), (" SUB ", SUB)])
def test_permission_strings(text, perm):
    assert parse_perm(text) == perm


@pytest.mark.parametrize(
    ("pattern", "inside", "outside"),
    [
        ("*", ["1.2.3.4", "::1"], []),
        ("", [], ["127.0.0.1"]),
        ("192.168.0.{1,2}", ["192.168.0.1", "192.168.0.2"], ["192.168.0.3", "192.168.1.1"]),
        ("192.168.1-10.*", ["192.168.1.0", "192.168.10.255", "192.168.5.7"], ["192.168.11.1", "192.168.0.1"]),
        ("192.168.*.*", ["192.168.0.1", "192.168.255.3"], ["192.169.0.1"]),
        ("10.10.103.*", ["10.10.103.9"], ["10.10.104.9"]),
        ("127.0.0.1,10.0.0.2", ["127.0.0.1", "10.0.0.2"], ["10.0.0.3"]),
        ("127.0.0.1", ["127.0.0.1", "::ffff:127.0.0.1"], ["127.0.0.2"]),
        ("::1", ["::1", "0:0:0:0:0:0:0:1"], ["127.0.0.1"]),
    ],
)
def test_address_patterns(pattern, inside, outside):
    p = AddressPattern.parse(pattern)
    assert all(p.matches(h) for h in inside)
    assert not any(p.matches(h) for h in outside)


@pytest.mark.parametrize(
    ("yml", "key", "what"),
    [
        ("accounts:\n  - accessKey: short\n    secretKey: 12345678\n", "accounts[0].accessKey", "longer than 6"),
        ("accounts:\n  - accessKey: RocketMQ\n    secretKey: 123456\n", "accounts[0].secretKey", "longer than 6"),
        ("accounts:\n  - secretKey: 12345678\n", "accounts[0].accessKey", "missing"),
        ("accounts:\n  - accessKey: RocketMQ\n    secretKey: 12345678\n    topicPerms: [topicA]\n",
         "accounts[0].topicPerms[0]", "name=PERM"),
        ("accounts:\n  - accessKey: RocketMQ\n    secretKey: 12345678\n    whiteRemoteAddress: 192.168.300.*\n",
         "accounts[0].whiteRemoteAddress", "0-255"),
        ("accounts:\n  - accessKey: RocketMQ\n    secretKey: 12345678\n    admin: maybe\n", "accounts[0].admin", "true or false"),
        ("globalWhiteRemoteAddresses: [10.10.*.1]\n", "globalWhiteRemoteAddresses[0]", "after a *"),
        ("accounts: {accessKey: RocketMQ}\n", "accounts", "list of accounts"),
        ("accounts:\n  - accessKey: RocketMQ\n    secretKey: 12345678\n  - accessKey: RocketMQ\n    secretKey: 87654321\n",
         "accounts[1].accessKey", "already defined"),
    ],
)
def test_validation_errors_name_the_file_and_key(tmp_path, yml, key, what):
    path = write(tmp_path, yml)
    with pytest.raises(ConfigError) as info:
        load_rules([path])
    assert info.value.file == str(path) and info.value.key == key
    assert what in str(info.value) and str(path) in str(info.value)


def test_broken_yaml_names_the_file_and_line(tmp_path):
    path = write(tmp_path, "accounts:\n  - accessKey: RocketMQ\n   secretKey: [\n")
    with pytest.raises(ConfigError, match=r"plain_acl.yml: not valid YAML at line \d+"):
        load_rules([path])


def test_the_checks_in_rocketmq_order(validator):
    route = {"topic": "topicB"}
    # a global white address gets in without anything
    assert refusal(validator, RemotingCommand.request(RequestCode.SEND_MESSAGE, {"topic": "topicA"}), "10.10.103.7") is None
    assert refusal(validator, RemotingCommand.request(RequestCode.PULL_MESSAGE, route)).startswith(
        "No accessKey is configured (ACL refused request PULL_MESSAGE from 127.0.0.1)")
    assert refusal(validator, signed(RequestCode.PULL_MESSAGE, route, account=("Stranger", "12345678"))).startswith(
        "No acl config for Stranger")
    # the account's white address: its AccessKey is enough, no signature, no permission check
    unsigned = RemotingCommand.request(RequestCode.SEND_MESSAGE, {"topic": "topicA", "AccessKey": "rocketmq2"})
    assert refusal(validator, unsigned, "192.168.1.20") is None
    assert refusal(validator, unsigned, "192.168.2.20").startswith("Check signature failed for accessKey=rocketmq2")
    assert refusal(validator, signed(RequestCode.PULL_MESSAGE, route, account=("RocketMQ", "wrong-secret"))).startswith(
        "Check signature failed for accessKey=RocketMQ")
    tampered = signed(RequestCode.SEND_MESSAGE, {"topic": "topicB"}, b"body")
    tampered.body = b"bodY"
    assert refusal(validator, tampered).startswith("Check signature failed")


def test_resources_and_permissions(validator):
    send_v2 = signed(RequestCode.SEND_MESSAGE_V2, {"a": "groupB", "b": "topicB"})
    assert refusal(validator, send_v2) is None
    assert refusal(validator, signed(RequestCode.SEND_MESSAGE, {"producerGroup": "p", "topic": "topicA"})) == (
        "No permission for topic:topicA (needs PUB, has DENY) (ACL refused request SEND_MESSAGE from 127.0.0.1)")
    assert "topic:topicC (needs PUB, has SUB)" in refusal(validator, signed(RequestCode.SEND_MESSAGE_V2, {"a": "g", "b": "topicC"}))
    assert "default permission for topic:other (needs PUB, default is DENY)" in refusal(
        validator, signed(RequestCode.SEND_BATCH_MESSAGE, {"a": "g", "b": "other"}))
    # a send to a retry topic needs SUB on the group
    assert refusal(validator, signed(RequestCode.SEND_MESSAGE_V2, {"a": "groupB", "b": "%RETRY%groupB"})) is None
    assert "group:groupA" in refusal(validator, signed(RequestCode.SEND_MESSAGE_V2, {"a": "groupA", "b": "%RETRY%groupA"}))
    pull = {"consumerGroup": "groupC", "topic": "topicC"}
    assert refusal(validator, signed(RequestCode.PULL_MESSAGE, pull)) is None
    assert "group:groupA" in refusal(validator, signed(RequestCode.PULL_MESSAGE, {**pull, "consumerGroup": "groupA"}))
    assert "topic:topicA (needs SUB" in refusal(validator, signed(RequestCode.UPDATE_CONSUMER_OFFSET, {**pull, "topic": "topicA"}))
    assert refusal(validator, signed(RequestCode.CONSUMER_SEND_MSG_BACK, {"group": "groupB"})) is None
    assert "group:groupA" in refusal(validator, signed(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "groupA"}))
    heartbeat = {"clientID": "c", "producerDataSet": [], "consumerDataSet": [
        {"groupName": "groupC", "subscriptionDataSet": [{"topic": "topicB"}, {"topic": "topicA"}]}]}
    assert "topic:topicA" in refusal(validator, signed(RequestCode.HEART_BEAT, {}, json.dumps(heartbeat).encode()))
    assert "not HeartbeatData" in refusal(validator, signed(RequestCode.HEART_BEAT, {}, b"{nope"))
    # trace messages may always be sent
    assert refusal(validator, signed(RequestCode.SEND_MESSAGE_V2, {"a": "g", "b": "RMQ_SYS_TRACE_TOPIC"})) is None


def test_admin_requests_need_the_admin_flag(validator):
    create = signed(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "T"})
    assert refusal(validator, create).startswith("Need admin permission for request code=17, but accessKey=RocketMQ is not")
    for code in (25, 200, 207, 215, 50, 51, 52, 53):
        assert "Need admin permission" in refusal(validator, signed(code, {}))
    admin = ("rocketmq2", "12345678")
    assert refusal(validator, signed(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "T"}, account=admin), "10.0.0.1") is None
    # an admin with no resource list may touch anything
    assert refusal(validator, signed(RequestCode.SEND_MESSAGE_V2, {"a": "g", "b": "topicA"}, account=admin), "10.0.0.1") is None


def test_needed_resources_per_request():
    assert needed_resources(RemotingCommand.request(RequestCode.QUERY_MESSAGE, {"topic": "T"})) == {"T": SUB}
    assert needed_resources(RemotingCommand.request(RequestCode.UNREGISTER_CLIENT, {"producerGroup": "p"})) == {}
    assert needed_resources(RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})) == {}
