"""Each kernel hook doing the job it exists for, through a real role on real sockets.

Every test here carries ``@pytest.mark.hook(...)`` with the hooks it exercises and implements them in a test plugin
of its own; tests/kernel/test_hookspecs_meta.py checks that every hook has such a test (a test that merely names a
hook does not count).
"""

from __future__ import annotations

import time
from typing import Any

import attrs
import pytest
import trio

from pyrmq.kernel.hookspecs import hookimpl
from pyrmq.kernel.kernel import StateKey
from pyrmq.kernel.settings import at_least, setting
from pyrmq.kernel.types import ORDER_REFUSE, ORDER_REROUTE, PutContext, PutKind, Rejection, Role, RoleChange
from pyrmq.remoting import fastjson
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.store.format import (
    TRANSACTION_NOT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    BatchEntry,
    decode_messages,
    encode_batch_body,
    encode_properties,
    java_string_hash,
)

GROUP = "g-hooks"


def send_request(topic, body, props=None, *, queue_id=0, sys_flag=0, extra_fields=None, code=RequestCode.SEND_MESSAGE):
    properties = {"UNIQ_KEY": f"U{time.monotonic_ns():030d}"[:32]}
    properties.update(props or {})
    fields = {
        "producerGroup": "pg", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": 4,
        "queueId": queue_id, "sysFlag": sys_flag, "bornTimestamp": int(time.time() * 1000), "flag": 0,
        "properties": encode_properties(properties), "reconsumeTimes": 0, "unitMode": False,
    }
    fields.update(extra_fields or {})
    return RemotingCommand.request(code, fields, body)


def pull_request(topic, queue_id=0, offset=0, *, sub="*", expression_type=None):
    fields = {
        "consumerGroup": GROUP, "topic": topic, "queueId": str(queue_id), "queueOffset": str(offset),
        "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": sub,
        "subVersion": "0",
    }
    if expression_type:
        fields["expressionType"] = expression_type
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, fields)


async def pulled(client, addr, topic, queue_id=0, **kw) -> list[Any]:
    response = await client.invoke(addr, pull_request(topic, queue_id, **kw))
    return decode_messages(response.body_bytes()) if response.code == ResponseCode.SUCCESS else []


# -- put interceptors --------------------------------------------------------------------------------------------


class VaultGuard:
    """An ACL-style refusal: topics named Vault* (and retries of their messages) need AccessKey=open-sesame."""

    name = "vault-guard"
    order = ORDER_REFUSE

    def __init__(self) -> None:
        self.kinds: list[PutKind] = []

    def intercept(self, record, context: PutContext):
        guarded = record.topic.startswith("Vault") or record.properties.get("RETRY_TOPIC", "").startswith("Vault")
        if not guarded:
            return record
        self.kinds.append(context.kind)
        if context.request.ext_fields.get("AccessKey") != "open-sesame":
            return Rejection(ResponseCode.NO_PERMISSION, f"no access to {record.topic} from {context.born_host[0]}: AccessKey missing or wrong")
        return record


HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"


class HalfMessages:
    """What a transaction plugin does with a prepared message: park it under the half topic, undelivered."""

    name = "half-messages"
    order = ORDER_REROUTE - 50

    def intercept(self, record, context):
        if record.properties.get("TRAN_MSG") != "true" or record.sys_flag & 0xC != TRANSACTION_PREPARED_TYPE:
            return record
        properties = dict(record.properties, REAL_TOPIC=record.topic, REAL_QID=str(record.queue_id))
        return attrs.evolve(record, topic=HALF_TOPIC, queue_id=0, properties=properties, properties_bytes=None,
                            sys_flag=(record.sys_flag & ~0xC) | TRANSACTION_NOT_TYPE)


class InterceptorPlugin:
    def __init__(self) -> None:
        self.guard = VaultGuard()

    @hookimpl
    def pyrmq_configure(self, kernel):
        from pyrmq.plugins.broker.core import BROKER

        # a plain configure finds the broker's context: the core's runs first (tryfirst)
        kernel.state.get(BROKER).topics.create_system_topic(HALF_TOPIC, 1, 6)

    @hookimpl
    def pyrmq_register_put_interceptors(self, kernel):
        return [HalfMessages(), self.guard]


@pytest.mark.hook("pyrmq_register_put_interceptors")
async def test_put_interceptors_refuse_with_a_code_and_re_address_half_messages(start_role, remoting_client):
    plugin = InterceptorPlugin()
    kernel = await start_role("dev", extra_plugins=[plugin])
    addr = kernel.listening["broker"]
    names = [i.name for i in kernel.put_chain.interceptors]
    assert names == ["vault-guard", "half-messages", "transaction", "dead-letter", "delay-levels", "timer"]

    # refused over TCP with the interceptor's code and remark; nothing stored
    refused = await remoting_client.invoke(addr, send_request("Vault", b"gold"))
    assert refused.code == ResponseCode.NO_PERMISSION
    assert refused.remark == "no access to Vault from 127.0.0.1: AccessKey missing or wrong"
    assert await pulled(remoting_client, addr, "Vault") == []
    ok = await remoting_client.invoke(addr, send_request("Vault", b"gold", extra_fields={"AccessKey": "open-sesame"}))
    assert ok.code == ResponseCode.SUCCESS
    assert [m.body for m in await pulled(remoting_client, addr, "Vault")] == [b"gold"]
    # the batch send runs the chain too
    batch_body = encode_batch_body([BatchEntry(0, b"a", b""), BatchEntry(0, b"b", b"")])
    batch = send_request("Vault", batch_body, code=RequestCode.SEND_BATCH_MESSAGE)
    assert (await remoting_client.invoke(addr, batch)).code == ResponseCode.NO_PERMISSION
    # and so does a consumer's send-back of a Vault message
    [stored] = await pulled(remoting_client, addr, "Vault")
    back = RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, {
        "offset": str(stored.commit_log_offset), "group": GROUP, "delayLevel": "0", "originMsgId": stored.msg_id,
        "originTopic": "Vault", "maxReconsumeTimes": "16"})
    refused_back = await remoting_client.invoke(addr, back)
    assert refused_back.code == ResponseCode.NO_PERMISSION and "AccessKey" in refused_back.remark
    assert plugin.guard.kinds == [PutKind.SEND, PutKind.SEND, PutKind.BATCH, PutKind.SEND_BACK]

    # a prepared message is re-addressed before the append: invisible on its topic, parked under the half topic
    prepared = send_request("Orders", b"half", {"TRAN_MSG": "true", "PGROUP": "pg"}, sys_flag=TRANSACTION_PREPARED_TYPE)
    assert (await remoting_client.invoke(addr, prepared)).code == ResponseCode.SUCCESS
    assert await pulled(remoting_client, addr, "Orders") == []
    [half] = await pulled(remoting_client, addr, HALF_TOPIC)
    assert half.body == b"half" and half.properties["REAL_TOPIC"] == "Orders" and half.properties["REAL_QID"] == "0"


# -- processors, lifecycle ---------------------------------------------------------------------------------------

ECHO = 9100
SEEN = StateKey[list]("test.hooks.seen")


class Lifecycle:
    """configure creates, register returns what exists, serve starts a service, unconfigure runs before the store
    closes."""

    def __init__(self) -> None:
        self.at_stop: list[int] = []

    @hookimpl
    def pyrmq_configure(self, kernel):
        kernel.state.put(SEEN, [])

    @hookimpl
    def pyrmq_register_processors(self, kernel, role):
        if role != "broker":
            return None
        seen = kernel.state.get(SEEN)

        async def echo(connection, request):
            return request.make_response(0, f"echo {request.ext_fields.get('word')} after {len(seen)} ticks")

        return {ECHO: echo}

    @hookimpl
    async def pyrmq_serve(self, kernel, nursery):
        async def ticker(*, task_status=trio.TASK_STATUS_IGNORED):
            task_status.started()
            while True:
                kernel.state.get(SEEN).append("tick")
                await trio.sleep(0.01)

        await nursery.start(ticker)

    @hookimpl
    async def pyrmq_unconfigure(self, kernel):
        from pyrmq.plugins.broker.core import BROKER

        # a feature's unconfigure runs before the core's (trylast): the store is still open
        self.at_stop.append(kernel.state.get(BROKER).store.max_phy_offset)


@pytest.mark.hook("pyrmq_configure", "pyrmq_register_processors", "pyrmq_serve", "pyrmq_unconfigure")
async def test_a_plugin_configures_registers_serves_and_unconfigures(start_role, remoting_client):
    plugin = Lifecycle()
    kernel = await start_role("broker", extra_plugins=[plugin])
    addr = kernel.listening["broker"]
    with trio.fail_after(10):
        while len(kernel.state.get(SEEN)) < 3:
            await trio.sleep(0.01)
    answer = await remoting_client.invoke(addr, RemotingCommand.request(ECHO, {"word": "hi"}))
    assert answer.code == 0 and answer.remark.startswith("echo hi after ")
    assert (await remoting_client.invoke(addr, send_request("T", b"x"))).code == ResponseCode.SUCCESS
    kernel.request_stop()
    with trio.fail_after(10):
        while not plugin.at_stop:
            await trio.sleep(0.01)
    assert plugin.at_stop[0] > 0  # it read the store after the send, before the store closed


# -- store dispatchers -------------------------------------------------------------------------------------------


class Audit:
    name = "audit"
    order = 15  # after the consume queue (0) and the index (10)

    def __init__(self) -> None:
        self.seen: list[tuple[str, int, int]] = []

    def dispatch(self, request):
        self.seen.append((request.topic, request.queue_id, request.queue_offset))


class AuditPlugin:
    def __init__(self) -> None:
        self.audit = Audit()

    @hookimpl
    def pyrmq_register_store_dispatchers(self, kernel):
        return [self.audit]


@pytest.mark.hook("pyrmq_register_store_dispatchers")
async def test_a_store_dispatcher_sees_every_appended_record_in_order(start_role, remoting_client):
    plugin = AuditPlugin()
    kernel = await start_role("broker", extra_plugins=[plugin])
    addr = kernel.listening["broker"]
    # the hook collects the features' dispatchers; the store's own list puts its consume queue and index first
    assert [d.name for d in kernel.store_dispatchers] == [
        "audit", "long-polling", "pop-long-polling", "ha-transfer-wakeup", "delay-copies", "timer-copies"]
    from pyrmq.plugins.broker.core import BROKER

    store = kernel.state.get(BROKER).store
    assert [d.name for d in store.dispatchers] == ["consume_queue", "index", "audit", "long-polling", "pop-long-polling",
                                                   "ha-transfer-wakeup"]
    for i in range(3):
        assert (await remoting_client.invoke(addr, send_request("TA", b"m%d" % i, queue_id=1))).code == 0
    assert plugin.audit.seen == [("TA", 1, 0), ("TA", 1, 1), ("TA", 1, 2)]


# -- connection events -------------------------------------------------------------------------------------------


class Watch:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, Any]] = []

    @hookimpl
    def pyrmq_connection_opened(self, kernel, role, connection):
        self.events.append(("open", role, connection.remote_address))

    @hookimpl
    def pyrmq_connection_closed(self, kernel, role, connection):
        self.events.append(("close", role, connection.remote_address))


@pytest.mark.hook("pyrmq_connection_opened", "pyrmq_connection_closed")
async def test_connection_events_follow_a_tcp_connection(start_role):
    watch = Watch()
    kernel = await start_role("broker", extra_plugins=[watch])
    host, port = kernel.listening["broker"].rsplit(":", 1)
    stream = await trio.open_tcp_stream(host, int(port))
    local = stream.socket.getsockname()[:2]
    with trio.fail_after(10):
        while not watch.events:
            await trio.sleep(0.01)
    await stream.aclose()
    with trio.fail_after(10):
        while len(watch.events) < 2:
            await trio.sleep(0.01)
    assert watch.events == [("open", "broker", tuple(local)), ("close", "broker", tuple(local))]


# -- message filter ----------------------------------------------------------------------------------------------


class NotTag:
    def __init__(self, expression: str) -> None:
        self.excluded = java_string_hash(expression.strip())

    def is_matched_by_consume_queue(self, tags_code: int) -> bool:
        return tags_code != self.excluded

    def is_matched_by_commit_log(self, record) -> bool:
        return True


class NotTagPlugin:
    @hookimpl
    def pyrmq_make_message_filter(self, kernel, expression_type, expression):
        return NotTag(expression) if expression_type == "NOT_TAG" else None


@pytest.mark.hook("pyrmq_make_message_filter")
async def test_a_filter_plugin_answers_its_own_expression_type(start_role, remoting_client):
    kernel = await start_role("broker", {"broker.enablePropertyFilter": True}, extra_plugins=[NotTagPlugin()])
    addr = kernel.listening["broker"]
    for tag in ("TagA", "TagB", "TagA", "TagC"):
        await remoting_client.invoke(addr, send_request("TF", tag.encode(), {"TAGS": tag}))
    kept = await pulled(remoting_client, addr, "TF", sub="TagA", expression_type="NOT_TAG")
    assert [m.body for m in kept] == [b"TagB", b"TagC"]
    # the built-in TAG filter is still the answer for TAG
    assert [m.body for m in await pulled(remoting_client, addr, "TF", sub="TagA")] == [b"TagA", b"TagA"]
    unknown = await remoting_client.invoke(addr, pull_request("TF", sub="//a", expression_type="XPATH"))
    assert unknown.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED and "XPATH" in unknown.remark


# -- settings ----------------------------------------------------------------------------------------------------

QUOTA = 9101


@attrs.frozen
class QuotaSettings:
    """A third-party feature's broker.conf key."""

    auditQuotaPerSecond: int = setting(100, check=at_least(1), help="audited messages a second")


class QuotaPlugin:
    def __init__(self) -> None:
        self.settings: QuotaSettings | None = None

    @hookimpl
    def pyrmq_register_settings(self):
        return {"broker": QuotaSettings}

    @hookimpl
    def pyrmq_configure(self, kernel):
        self.settings = kernel.settings(QuotaSettings)

    @hookimpl
    def pyrmq_register_processors(self, kernel, role):
        async def quota(connection, request):
            return request.make_response(0, f"quota {self.settings.auditQuotaPerSecond}")

        return {QUOTA: quota} if role == "broker" else None


class SqueezeBrokerName:
    """A plugin that claims a key the broker core declares already."""

    @attrs.frozen
    class Clash:
        brokerName: str = setting("mine")

    @hookimpl
    def pyrmq_register_settings(self):
        return {"broker": self.Clash}


@pytest.mark.hook("pyrmq_register_settings")
async def test_a_plugin_declares_its_broker_conf_keys(start_role, remoting_client, tmp_path):
    from pyrmq.kernel.bundles import load_bundle
    from pyrmq.kernel.errors import ConfigError, PluginError
    from pyrmq.kernel.service import build_kernel

    plugin = QuotaPlugin()
    kernel = await start_role("broker", {"broker.auditQuotaPerSecond": "250"}, extra_plugins=[plugin])
    addr = kernel.listening["broker"]
    # parsed to the declared type, read by the plugin, served by the broker
    assert (await remoting_client.invoke(addr, RemotingCommand.request(QUOTA, {}))).remark == "quota 250"
    config = await remoting_client.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_CONFIG, {}))
    assert "auditQuotaPerSecond=250\n" in config.body_bytes().decode()
    # a bad value stops the start, naming where it came from, the key and the expectation
    bundle = load_bundle("broker")
    with pytest.raises(ConfigError, match=r"command line: key 'auditQuotaPerSecond': expected an integer >= 1, got '0'"):
        build_kernel(bundle.with_overrides({"broker.auditQuotaPerSecond": "0"}), extra_plugins=[QuotaPlugin()],
                     entry_points=False)
    # without the plugin nobody reads the key: unknown, with the closest known key
    with pytest.raises(ConfigError, match="unknown setting in \\[broker\\]"):
        build_kernel(bundle.with_overrides({"broker.auditQuotaPerSecond": "5"}), entry_points=False)
    # a key two plugins declare is refused at start, naming both
    with pytest.raises(PluginError, match="'brokerName' of \\[broker\\] is declared twice"):
        build_kernel(bundle, extra_plugins=[SqueezeBrokerName()], entry_points=False)


# -- metric collectors -------------------------------------------------------------------------------------------


class Backlog:
    """A collector computed when scraped."""

    def __init__(self) -> None:
        self.waiting = 3

    def collect(self):
        from prometheus_client.core import GaugeMetricFamily

        gauge = GaugeMetricFamily("audit_backlog_messages", "Messages waiting for the audit.", labels=["node_type"])
        gauge.add_metric(["broker"], self.waiting)
        yield gauge


class BacklogPlugin:
    def __init__(self) -> None:
        self.backlog = Backlog()
        self.roles: list[str] = []

    @hookimpl
    def pyrmq_register_metric_collectors(self, kernel, role):
        self.roles.append(role)
        return [self.backlog] if role == "broker" else None


async def scrape(port: int) -> str:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        data = b""
        with trio.fail_after(10):
            while chunk := await stream.receive_some(65536):
                data += chunk
    return data.decode()


@pytest.mark.hook("pyrmq_register_metric_collectors")
async def test_a_plugin_adds_series_to_metrics(start_role):
    from pyrmq.plugins.builtin.metrics import ENDPOINTS

    plugin = BacklogPlugin()
    kernel = await start_role("dev", {"broker.metricsExporterType": "PROM", "broker.metricsPromExporterPort": 0},
                              extra_plugins=[plugin])
    assert plugin.roles == ["broker"]  # asked for the roles whose exporter is on
    port = kernel.state.get(ENDPOINTS)["broker"].port
    page = await scrape(port)
    assert 'audit_backlog_messages{node_type="broker"} 3.0' in page
    assert "rocketmq_messages_in" in page or "rocketmq_topic_number" in page  # the core's collector beside it
    plugin.backlog.waiting = 7  # read at scrape time, not at start
    assert 'audit_backlog_messages{node_type="broker"} 7.0' in await scrape(port)


# -- role changes ------------------------------------------------------------------------------------------------


class RoleWatch:
    def __init__(self) -> None:
        self.changes: list[RoleChange] = []

    @hookimpl
    async def pyrmq_role_changed(self, kernel, change):
        self.changes.append(change)


@pytest.mark.hook("pyrmq_role_changed")
async def test_role_changes_reach_every_plugin_and_the_registration(start_role, remoting_client, until):
    from pyrmq.plugins.broker.core import BROKER

    master_watch, slave_watch = RoleWatch(), RoleWatch()
    kernel = await start_role("dev", extra_plugins=[master_watch])
    assert master_watch.changes == [RoleChange(Role.MASTER, broker_id=0)]  # brokerRole ASYNC_MASTER, at start
    slave = await start_role("broker", {"broker.brokerRole": "SLAVE", "broker.brokerId": 2, "broker.brokerName": "b-s"},
                             extra_plugins=[slave_watch])
    assert slave_watch.changes == [RoleChange(Role.SLAVE, broker_id=2)]
    assert slave.state.get(BROKER).role.role is Role.SLAVE

    # a replicator that changes roles (automatic failover) announces them the same way: the name server learns the
    # new broker id through the core's own implementation
    namesrv = kernel.listening["namesrv"]

    async def broker_ids():
        info = await remoting_client.invoke(namesrv, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO, {}))
        table = fastjson.loads(info.body_bytes())["brokerAddrTable"]
        addrs = table.get("broker-a", {}).get("brokerAddrs")
        return None if addrs is None else {str(k) for k in addrs}

    await until(broker_ids, "broker-a registered")
    await kernel.hooks.role_changed(kernel, RoleChange(Role.SLAVE, broker_id=3, epoch=None))
    assert master_watch.changes[-1] == RoleChange(Role.SLAVE, broker_id=3)
    assert kernel.state.get(BROKER).role.broker_id == 3
    assert await until(lambda: _ids_are(broker_ids, {"3"}), "broker-a registered as broker id 3", timeout=30)


async def _ids_are(fetch, wanted):
    ids = await fetch()
    return ids if ids == wanted else None


# -- flush policy ------------------------------------------------------------------------------------------------


class CountingFlush:
    """A flush policy of one's own: RocketMQ's group commit, counting what it was asked."""

    def __init__(self) -> None:
        from pyrmq.store.flush import GroupCommitService

        self.inner = GroupCommitService()
        self.waits: list[int] = []

    async def run(self, target, *, task_status=trio.TASK_STATUS_IGNORED):
        await self.inner.run(target, task_status=task_status)

    async def wait_flushed(self, target, offset, timeout):
        self.waits.append(offset)
        return await self.inner.wait_flushed(target, offset, timeout)


class FlushPlugin:
    def __init__(self) -> None:
        self.policy = CountingFlush()

    @hookimpl
    def pyrmq_make_flush_policy(self, kernel, config):
        return self.policy


@pytest.mark.hook("pyrmq_make_flush_policy")
async def test_a_plugin_chooses_how_the_commit_log_reaches_the_disk(start_role, remoting_client):
    from pyrmq.plugins.broker.core import BROKER

    plugin = FlushPlugin()
    kernel = await start_role("broker", {"broker.flushDiskType": "SYNC_FLUSH"}, extra_plugins=[plugin])
    store = kernel.state.get(BROKER).store
    assert store.flush_policy is plugin.policy  # answered first, the shipped one (trylast) not asked
    answer = await remoting_client.invoke(kernel.listening["broker"], send_request("TFlush", b"durable"))
    assert answer.code == ResponseCode.SUCCESS
    # the SYNC_FLUSH send was answered once this policy had its bytes on disk
    assert plugin.policy.waits == [store.max_phy_offset]
    assert store.commit_log.queue.flushed_offset >= store.max_phy_offset


# -- delay schedulers --------------------------------------------------------------------------------------------


class HoldScheduler:
    """Parks messages carrying HOLD under HOLD_PARKED (released by an operator, say); claims them before the delay
    levels do (order 290 < 300)."""

    name = "hold"
    order = 290
    trigger_properties = frozenset({"HOLD"})

    def intercept(self, record, context):
        if "HOLD" not in record.properties or context.scheduled_by is not None:
            return record
        context.scheduled_by = self.name
        properties = dict(record.properties, REAL_TOPIC=record.topic, REAL_QID=str(record.queue_id))
        return attrs.evolve(record, topic="HOLD_PARKED", queue_id=0, properties=properties, properties_bytes=None)

    def summary(self):
        return "HOLD: until released, under HOLD_PARKED"


class HoldPlugin:
    @hookimpl
    def pyrmq_configure(self, kernel):
        from pyrmq.plugins.broker.core import BROKER

        kernel.state.get(BROKER).topics.create_system_topic("HOLD_PARKED", 1, 6)

    @hookimpl
    def pyrmq_register_schedulers(self, kernel):
        return [HoldScheduler()]


@pytest.mark.hook("pyrmq_register_schedulers")
async def test_a_scheduler_parks_what_it_claims_in_the_kernels_order(start_role, remoting_client):
    kernel = await start_role("broker", extra_plugins=[HoldPlugin()])
    addr = kernel.listening["broker"]
    assert [s.name for s in kernel.schedulers] == ["hold", "delay-levels", "timer"]
    assert [i.name for i in kernel.put_chain.interceptors][-3:] == ["hold", "delay-levels", "timer"]
    # HOLD and DELAY both: the first scheduler in order claims it, the delay levels leave it alone
    both = send_request("TH", b"both", {"HOLD": "1", "DELAY": "1"})
    assert (await remoting_client.invoke(addr, both)).code == ResponseCode.SUCCESS
    [held] = await pulled(remoting_client, addr, "HOLD_PARKED")
    assert held.body == b"both" and held.properties["REAL_TOPIC"] == "TH"
    assert await pulled(remoting_client, addr, "SCHEDULE_TOPIC_XXXX") == []
    # DELAY alone still goes to the delay levels
    delayed = send_request("TH", b"delayed", {"DELAY": "3"})
    assert (await remoting_client.invoke(addr, delayed)).code == ResponseCode.SUCCESS
    assert [m.body for m in await pulled(remoting_client, addr, "SCHEDULE_TOPIC_XXXX", queue_id=2)] == [b"delayed"]
    assert await pulled(remoting_client, addr, "TH") == []


# -- command-line options ----------------------------------------------------------------------------------------


class GreetingOptions:
    """A plugin's options of `pyrmq dev`: --greeting sets its table's value, --greeting-check runs instead."""

    @attrs.frozen
    class Greeting:
        text: str = setting("hello")

    @hookimpl
    def pyrmq_register_settings(self):
        return {"plugins.greeting": self.Greeting}

    @hookimpl
    def pyrmq_add_options(self, command, parser):
        if command == "dev":
            parser.add_argument("--greeting", help="what 9102 answers")
            parser.add_argument("--greeting-check", action="store_true", help="print the greeting and exit")

    @hookimpl
    def pyrmq_apply_options(self, command, args, bundle):
        if command == "dev" and args.greeting:
            return bundle.with_plugin_settings("greeting", {"text": args.greeting})
        return None

    @hookimpl
    def pyrmq_run_instead(self, command, args):
        if command == "dev" and args.greeting_check:
            print(f"greeting: {args.greeting or 'hello'}")
            return 3
        return None

    @hookimpl
    def pyrmq_register_processors(self, kernel, role):
        async def greet(connection, request):
            return request.make_response(0, kernel.settings(self.Greeting).text)

        return {9102: greet} if role == "broker" else None


@pytest.mark.hook("pyrmq_add_options", "pyrmq_apply_options", "pyrmq_run_instead")
async def test_a_plugin_adds_options_to_pyrmq_dev(monkeypatch, capsys, start_role, remoting_client):
    from pyrmq.kernel import cli
    from pyrmq.kernel.bundles import load_bundle
    from pyrmq.kernel.hooks import HookRelay
    from pyrmq.kernel.manager import load_plugins

    plugin = GreetingOptions()
    relay = HookRelay(load_plugins(load_bundle("cli"), extra=[plugin], entry_points_enabled=False))
    monkeypatch.setattr(cli, "_CLI_HOOKS", relay)
    # run instead of the roles: the plugin's exit status, nothing started
    assert cli.main(["dev", "--greeting", "hej", "--greeting-check"]) == 3
    assert capsys.readouterr().out == "greeting: hej\n"
    # applied to the bundle before the roles start: the value reaches the plugin's settings
    args = cli.build_parser().parse_args(["dev", "--greeting", "hej", "--no-dashboard"])
    bundle = relay.apply_options("dev", args, load_bundle("dev").with_plugin_settings("pyrmq.plugins.dashboard.plugin", {}))
    assert bundle.plugin_settings["greeting"] == {"text": "hej"}
    # the shipped plugins' own options of dev are there too (the dashboard's, failover's)
    help_text = cli.build_parser()._subparsers._group_actions[0].choices["dev"].format_help()
    assert "--dashboard-port" in help_text and "--no-dashboard" in help_text and "--ha" in help_text
