"""Access control in a running broker (`pyrmq dev`, real sockets) with pyrmq's own client objects: a permitted
account produces and consumes; no credentials, an unknown key, a wrong secret, a DENY topic, a group without SUB and
an admin request from a non-admin are each refused with a remark that says why; the ACL admin RPCs; hot reload."""

from __future__ import annotations

import json

import logging
import textwrap

import pytest
import trio

from pyrmq.client import Admin, Message, Producer, PullConsumer, PushConsumer
from pyrmq.client.errors import BrokerError, ClientError
from pyrmq.client.message import MessageQueue
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand

ADMIN = ("AdminKey01", "AdminSecret01")
USER = ("UserKey01", "UserSecret01")

PLAIN_ACL = f"""\
globalWhiteRemoteAddresses: []
accounts:
  - accessKey: {ADMIN[0]}
    secretKey: {ADMIN[1]}
    admin: true
  - accessKey: {USER[0]}
    secretKey: {USER[1]}
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - Orders=PUB|SUB
      - Vault=DENY
    groupPerms:
      - shop=SUB
"""


def refused_text(exc: BaseException) -> str:
    return str(exc)


async def wait_registered(namesrv: str) -> None:
    async with Admin(namesrv, credentials=ADMIN) as admin:
        with trio.fail_after(10):
            while not (await admin.cluster_info()).brokers:
                await trio.sleep(0.02)


@pytest.fixture
async def acl_dev(start_role, tmp_path, monkeypatch):
    home = tmp_path / "rocketmq"
    (home / "conf").mkdir(parents=True)
    acl_file = home / "conf" / "plain_acl.yml"
    acl_file.write_text(PLAIN_ACL)
    monkeypatch.setenv("ROCKETMQ_HOME", str(home))
    kernel = await start_role("dev", {"broker.aclEnable": True})
    namesrv = kernel.listening["namesrv"]
    await wait_registered(namesrv)
    async with Admin(namesrv, credentials=ADMIN) as admin:
        await admin.create_topic("Orders", 2)
        await admin.create_topic("Vault", 2)
    return kernel, namesrv, acl_file


async def send_one(namesrv, topic, credentials, body=b"x"):
    async with Producer(namesrv, "shop-producer", credentials=credentials, retry_times=0, send_timeout=3) as producer:
        return await producer.send(Message(topic, body))


async def test_permitted_account_produces_and_consumes_and_the_rest_is_refused(acl_dev):
    kernel, namesrv, _ = acl_dev
    sent = [await send_one(namesrv, "Orders", USER, f"m{i}".encode()) for i in range(3)]
    assert {r.status.name for r in sent} == {"SEND_OK"}

    got: list[bytes] = []
    consumer = PushConsumer(namesrv, "shop", subscribe={"Orders": "*"}, listener=lambda m: got.append(m.body),
                            consume_from="CONSUME_FROM_FIRST_OFFSET", credentials=USER, rebalance_interval=1)
    async with consumer:
        with trio.fail_after(15):
            while len(got) < 3:
                await trio.sleep(0.05)
    assert sorted(got) == [b"m0", b"m1", b"m2"]

    cases = [
        (None, "Orders", "No accessKey is configured"),
        (("Stranger01", USER[1]), "Orders", "No acl config for Stranger01"),
        ((USER[0], "not-the-secret"), "Orders", f"Check signature failed for accessKey={USER[0]}"),
        (USER, "Vault", "No permission for topic:Vault (needs PUB, has DENY)"),
    ]
    for credentials, topic, remark in cases:
        with pytest.raises(ClientError) as info:
            await send_one(namesrv, topic, credentials)
        assert remark in refused_text(info.value), (credentials, topic)
        assert "ACL refused request SEND_MESSAGE" in refused_text(info.value)

    # a group without SUB cannot pull
    async with PullConsumer(namesrv, "nosub", credentials=USER) as puller:
        with pytest.raises(BrokerError) as info:
            await puller.pull(MessageQueue("Orders", "broker-a", 0), offset=0)
    assert info.value.code == ResponseCode.NO_PERMISSION
    assert "No default permission for group:nosub (needs SUB, default is DENY)" in info.value.remark

    # an admin request from a non-admin
    async with Admin(namesrv, credentials=USER) as admin:
        with pytest.raises(BrokerError) as info:
            await admin.create_topic("Sneaky", 1)
    assert info.value.code == ResponseCode.NO_PERMISSION
    assert f"Need admin permission for request code=17, but accessKey={USER[0]} is not" in info.value.remark


async def test_acl_admin_rpcs_and_the_white_list(acl_dev, remoting_client):
    kernel, namesrv, acl_file = acl_dev
    broker = kernel.listening["broker"]
    async with Admin(namesrv, credentials=ADMIN) as admin:
        listing = (await admin.acl_accounts())["broker-a"]
        assert [a["accessKey"] for a in listing["plainAccessConfigs"]] == [ADMIN[0], USER[0]]
        assert USER[1] not in str(listing) and ADMIN[1] not in str(listing)

        await admin.update_acl_account("NewUser01", "NewSecret01", topic_perms=["Vault=PUB"], default_group_perm="SUB")
        assert (await send_one(namesrv, "Vault", ("NewUser01", "NewSecret01"))).status.name == "SEND_OK"
        assert "NewUser01" in acl_file.read_text()
        await admin.update_acl_account("NewUser01", topic_perms=["Vault=SUB"])
        with pytest.raises(ClientError, match="needs PUB, has SUB"):
            await send_one(namesrv, "Vault", ("NewUser01", "NewSecret01"))
        with pytest.raises(BrokerError, match="is not name=PERM") as info:
            await admin.update_acl_account("NewUser01", topic_perms=["Vault=ALL"])
        assert info.value.code == ResponseCode.UPDATE_AND_CREATE_ACL_CONFIG_FAILED
        with pytest.raises(BrokerError, match="secretKey.*longer than 6"):
            await admin.update_acl_account("Another01", "short")
        await admin.delete_acl_account("NewUser01")
        with pytest.raises(ClientError, match="No acl config for NewUser01"):
            await send_one(namesrv, "Vault", ("NewUser01", "NewSecret01"))

        # a white-listed address gets in without signing
        unsigned = RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO, {})
        assert (await remoting_client.invoke(broker, unsigned)).code == ResponseCode.NO_PERMISSION
        await admin.update_acl_white_list(["127.0.0.1"])
        assert (await remoting_client.invoke(broker, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO, {}))).code == 0
        assert (await send_one(namesrv, "Vault", None)).status.name == "SEND_OK"  # white list: no permission check
        await admin.update_acl_white_list([])
        assert (await remoting_client.invoke(broker, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO, {}))).code == 16

    # the management RPCs need an admin account; 54 (which sent secrets) does not exist
    async with Admin(namesrv, credentials=USER) as admin:
        with pytest.raises(BrokerError, match="Need admin permission for request code=52"):
            await admin.acl_accounts()
    request = RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG, {})
    from pyrmq.remoting.signing import RequestSigner

    RequestSigner(*ADMIN)(request)
    response = await remoting_client.invoke(broker, request)
    assert response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED and not response.body_bytes()


async def test_a_changed_file_takes_effect_within_six_seconds_and_a_broken_one_changes_nothing(acl_dev, caplog):
    kernel, namesrv, acl_file = acl_dev
    with pytest.raises(ClientError, match="topic:Vault"):
        await send_one(namesrv, "Vault", USER)
    acl_file.write_text(PLAIN_ACL.replace("Vault=DENY", "Vault=PUB"))
    with trio.fail_after(6):
        while True:
            try:
                await send_one(namesrv, "Vault", USER)
                break
            except ClientError:
                await trio.sleep(0.2)

    caplog.set_level(logging.ERROR, logger="pyrmq.broker.acl")
    acl_file.write_text(textwrap.dedent("""\
        accounts:
          - accessKey: UserKey01
            secretKey: [broken
        """))
    with trio.fail_after(7):
        while "previous rules stay in force" not in caplog.text:
            await trio.sleep(0.1)
    assert str(acl_file) in caplog.text and "not valid YAML" in caplog.text
    assert (await send_one(namesrv, "Vault", USER)).status.name == "SEND_OK"
    with pytest.raises(ClientError, match="No accessKey is configured"):
        await send_one(namesrv, "Vault", None)


async def pyrmq_cli(*args: str, env: dict | None = None) -> tuple[int, str, str]:
    import os
    import subprocess
    import sys

    with trio.fail_after(60):
        result = await trio.run_process([sys.executable, "-m", "pyrmq", *args], capture_stdout=True, capture_stderr=True,
                                        check=False, env={**os.environ, **(env or {})})
    assert isinstance(result, subprocess.CompletedProcess)
    return result.returncode, result.stdout.decode(), result.stderr.decode()


async def test_console_tools_sign_with_keys_from_options_or_the_environment(acl_dev):
    kernel, namesrv, acl_file = acl_dev
    admin = ["--namesrv", namesrv, "--access-key", ADMIN[0], "--secret-key", ADMIN[1]]
    code, out, err = await pyrmq_cli("admin", "acl", "add", "--account", "CliUser01", "--secret", "CliSecret01",
                                     "--topic-perm", "Orders=PUB", "--default-group-perm", "SUB", *admin)
    assert code == 0, err
    assert "account CliUser01 added on broker-a" in out
    code, out, err = await pyrmq_cli("admin", "acl", "list", *admin)
    assert code == 0, err
    assert "CliUser01" in out and "Orders=PUB" in out and "CliSecret01" not in out and USER[1] not in out

    user_env = {"ROCKETMQ_ACCESS_KEY": "CliUser01", "ROCKETMQ_SECRET_KEY": "CliSecret01"}
    code, out, err = await pyrmq_cli("produce", "-n", namesrv, "-t", "Orders", "--count", "2", env=user_env)
    assert code == 0 and "sent 2, failed 0" in out + err, out + err
    code, out, err = await pyrmq_cli("produce", "-n", namesrv, "-t", "Vault", "--count", "1", env=user_env)
    assert code != 0 and "No default permission for topic:Vault" in out + err

    code, out, err = await pyrmq_cli("admin", "acl", "list", "--namesrv", namesrv, env=user_env)
    assert code != 0 and "Need admin permission for request code=52" in out + err
    code, out, err = await pyrmq_cli("admin", "acl", "whitelist", "10.1.*.*", "--json", *admin)
    assert code == 0, err
    assert json.loads(out) == {"brokers": ["broker-a"], "globalWhiteRemoteAddresses": ["10.1.*.*"]}
    code, out, err = await pyrmq_cli("admin", "acl", "delete", "--account", "CliUser01", *admin)
    assert code == 0 and "deleted" in out, err
    assert "CliUser01" not in acl_file.read_text() and "10.1.*.*" in acl_file.read_text()
