"""The MessagingService as a client sees it, over real HTTP/2 on 127.0.0.1 (the raw test client sends what the
official clients never would: their own checks stop it first)."""

from __future__ import annotations

import time

import pytest
import trio

from pyrmq.client import MessageQueue, PullConsumer, PullStatus
from pyrmq.plugins.broker.topics import TopicConfig
from pyrmq.plugins.grpc.schema import pb

Code = pb.Code


def message(topic: str, body: bytes = b"hello", *, message_id: str = "01AB", tag: str | None = "TagA", **system):
    m = pb.Message()
    m.topic.name = topic
    m.body = body
    m.system_properties.message_id = message_id
    m.system_properties.message_type = system.pop("message_type", pb.MessageType.NORMAL)
    if tag is not None:
        m.system_properties.tag = tag
    for key, value in system.pop("user", {}).items():
        m.user_properties[key] = value
    for key, value in system.items():
        if key == "delivery_ms":
            m.system_properties.delivery_timestamp.seconds = value // 1000
            m.system_properties.delivery_timestamp.nanos = (value % 1000) * 1_000_000
        else:
            setattr(m.system_properties, key, value)
    return m


async def send(client, *messages, metadata=None):
    answer = await client.call("SendMessage", pb.SendMessageRequest(messages=list(messages)), metadata=metadata)
    assert answer.grpc_status == 0, answer.grpc_message
    return answer.parse(pb.SendMessageResponse)


async def pull_all(dev, topic: str, queues: int) -> list:
    got = []
    async with PullConsumer(dev.namesrv, "readback") as consumer:
        for qid in range(queues):
            result = await consumer.pull(MessageQueue(topic, "broker-a", qid), "*", 0, 32)
            if result.status is PullStatus.FOUND:
                got += result.messages
    return got


async def test_query_route_lists_each_queue_with_the_endpoint_and_the_topic_type(grpc_dev, raw):
    dev = await grpc_dev()
    await dev.create_topic("RouteFifo", 3, message_type="FIFO")
    client = await raw(dev.grpc)
    answer = await client.call("QueryRoute", pb.QueryRouteRequest(topic=pb.Resource(name="RouteFifo")))
    route = answer.parse(pb.QueryRouteResponse)
    assert route.status.code == Code.OK
    assert [q.id for q in route.message_queues] == [0, 1, 2]
    assert {q.permission for q in route.message_queues} == {pb.Permission.READ_WRITE}
    (endpoint,) = {(a.host, a.port) for q in route.message_queues for a in q.broker.endpoints.addresses}
    assert f"{endpoint[0]}:{endpoint[1]}" == dev.grpc
    assert {q.broker.name for q in route.message_queues} == {"broker-a"}
    assert [list(q.accept_message_types) for q in route.message_queues] == [[pb.MessageType.FIFO]] * 3
    missing = (await client.call("QueryRoute", pb.QueryRouteRequest(topic=pb.Resource(name="NoSuchTopic")))
               ).parse(pb.QueryRouteResponse)
    assert missing.status.code == Code.TOPIC_NOT_FOUND and "NoSuchTopic" in missing.status.message
    bad = (await client.call("QueryRoute", pb.QueryRouteRequest(topic=pb.Resource(name="bad topic!")))
           ).parse(pb.QueryRouteResponse)
    assert bad.status.code == Code.ILLEGAL_TOPIC and "bad topic!" in bad.status.message


async def test_a_call_without_client_id_is_answered_client_id_required(grpc_dev, raw):
    dev = await grpc_dev()
    client = await raw(dev.grpc)
    answer = await client.call("QueryRoute", pb.QueryRouteRequest(topic=pb.Resource(name="TBW102")),
                               metadata={"x-mq-client-id": None})
    assert answer.grpc_status == 0
    assert answer.parse(pb.QueryRouteResponse).status.code == Code.CLIENT_ID_REQUIRED


async def test_sends_are_checked_as_5x_checks_them_with_codes_and_texts_naming_the_field(grpc_dev, raw):
    dev = await grpc_dev()
    await dev.create_topic("Checked", 2)
    await dev.create_topic("CheckedFifo", 2, message_type="FIFO")
    client = await raw(dev.grpc)
    now = int(time.time() * 1000)
    cases = [
        (message("Checked", b""), Code.MESSAGE_BODY_EMPTY, "body"),
        (message("Checked", user={"UNIQ_KEY": "x"}), Code.ILLEGAL_MESSAGE_PROPERTY_KEY, "UNIQ_KEY"),
        (message("Checked", user={"a\x01": "x"}), Code.ILLEGAL_MESSAGE_PROPERTY_KEY, "control"),
        (message("Checked", tag="a|b"), Code.ILLEGAL_MESSAGE_TAG, "a|b"),
        (message("Checked", message_id=""), Code.ILLEGAL_MESSAGE_ID, "message id"),
        (message("Checked", delivery_ms=now + 2 * 86_400_000), Code.ILLEGAL_DELIVERY_TIME, "86400000"),
        (message("Checked", message_group="g" * 64), Code.ILLEGAL_MESSAGE_GROUP, "64"),
        (message("Checked", message_group="g1"), Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "NORMAL"),
        (message("CheckedFifo"), Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "FIFO"),
        (message("Missing"), Code.TOPIC_NOT_FOUND, "Missing"),
        (message("%RETRY%g"), Code.ILLEGAL_TOPIC, "%RETRY%g"),
        # 5.x's TopicValidator.isSystemTopic: its set, the rmq_sys_ prefix, the broker's cluster name
        (message("SELF_TEST_TOPIC"), Code.ILLEGAL_TOPIC, "cannot access system topic SELF_TEST_TOPIC"),
        (message("TBW102"), Code.ILLEGAL_TOPIC, "cannot access system topic TBW102"),
        (message("rmq_sys_wheel_timer"), Code.ILLEGAL_TOPIC, "cannot access system topic rmq_sys_wheel_timer"),
        (message("DefaultCluster"), Code.ILLEGAL_TOPIC, "cannot access system topic DefaultCluster"),
    ]
    for msg, code, text in cases:
        response = await send(client, msg)
        assert (response.status.code, text in response.status.message) == (code, True), (msg, response.status)
    empty = await send(client)
    assert empty.status.code == Code.MESSAGE_CORRUPTED
    mixed = await send(client, message("Checked"), message("CheckedFifo"))
    assert mixed.status.code == Code.MESSAGE_CORRUPTED and "not same" in mixed.status.message
    # nothing refused reached the store
    assert await pull_all(dev, "Checked", 2) == []


async def test_a_sent_message_reads_back_over_remoting_with_4x_properties(grpc_dev, raw):
    dev = await grpc_dev()
    await dev.create_topic("ReadBack", 1)
    client = await raw(dev.grpc)
    msg = message("ReadBack", b"payload", message_id="MSGID1", user={"color": "red"})
    msg.system_properties.keys.extend(["k1", "k2"])
    response = await send(client, msg)
    assert response.status.code == Code.OK
    (entry,) = response.entries
    assert (entry.message_id, entry.offset) == ("MSGID1", 0)
    (got,) = await pull_all(dev, "ReadBack", 1)
    props = got.properties
    assert (got.body, props["TAGS"], props["KEYS"], props["UNIQ_KEY"], props["color"]) == (
        b"payload", "TagA", "k1 k2", "MSGID1", "red")


async def test_fifo_messages_of_one_group_share_a_queue_in_send_order(grpc_dev, raw):
    dev = await grpc_dev()
    await dev.create_topic("Ordered", 4, message_type="FIFO")
    client = await raw(dev.grpc)
    for i in range(6):
        response = await send(client, message("Ordered", f"m{i}".encode(), message_id=f"ID{i}", message_group="orderA"))
        assert response.status.code == Code.OK
    got = await pull_all(dev, "Ordered", 4)
    assert len({m.queue_id for m in got}) == 1
    assert [m.body for m in got] == [f"m{i}".encode() for i in range(6)]
    assert {m.properties["__SHARDINGKEY"] for m in got} == {"orderA"}


async def test_unimplemented_methods_answer_grpc_unimplemented(grpc_dev, raw):
    dev = await grpc_dev()
    client = await raw(dev.grpc)
    for rpc in ("PullMessage", "UpdateOffset", "GetOffset", "QueryOffset", "RecallMessage"):
        answer = await client.call(rpc, b"")
        assert answer.grpc_status == 12, (rpc, answer.trailers)
    unknown = await client.call("/apache.rocketmq.v2.MessagingService/NoSuchRpc", b"")
    assert unknown.grpc_status == 12 and "NoSuchRpc" in unknown.grpc_message


async def test_telemetry_settings_are_answered_and_heartbeat_needs_them(grpc_dev, raw):
    dev = await grpc_dev()
    await dev.create_topic("TelemetryTopic", 2)
    client = await raw(dev.grpc)
    md = {"x-mq-client-id": "tele@1"}
    early = (await client.call("Heartbeat", pb.HeartbeatRequest(client_type=pb.ClientType.PRODUCER), metadata=md)
             ).parse(pb.HeartbeatResponse)
    assert early.status.code == Code.UNRECOGNIZED_CLIENT_TYPE
    stream = await client.open("Telemetry", metadata=md)
    settings = pb.Settings(client_type=pb.ClientType.PRODUCER)
    settings.publishing.topics.add(name="TelemetryTopic")
    await client.send(stream, pb.TelemetryCommand(settings=settings).SerializeToString())
    answer = pb.TelemetryCommand.FromString(await client.next_message(stream, 0))
    assert answer.status.code == Code.OK
    assert answer.settings.backoff_policy.max_attempts == 3
    assert answer.settings.publishing.max_body_size == 4 * 1024 * 1024
    assert answer.settings.publishing.validate_message_type
    ok = (await client.call("Heartbeat", pb.HeartbeatRequest(client_type=pb.ClientType.PRODUCER), metadata=md)
          ).parse(pb.HeartbeatResponse)
    assert ok.status.code == Code.OK
    # a consumer's settings: batch size, long polling, the group's retry policy; the group is created
    stream2 = await client.open("Telemetry", metadata={"x-mq-client-id": "tele@2"})
    sub = pb.Settings(client_type=pb.ClientType.SIMPLE_CONSUMER)
    sub.subscription.group.name = "NewGroup"
    sub.subscription.subscriptions.add(topic=pb.Resource(name="TelemetryTopic"))
    await client.send(stream2, pb.TelemetryCommand(settings=sub).SerializeToString())
    answer2 = pb.TelemetryCommand.FromString(await client.next_message(stream2, 0))
    assert answer2.status.code == Code.OK
    assert answer2.settings.subscription.receive_batch_size == 32
    assert answer2.settings.subscription.long_polling_timeout.seconds == 20
    assert answer2.settings.backoff_policy.max_attempts == 17
    assert len(answer2.settings.backoff_policy.customized_backoff.next) == 18
    assert "NewGroup" in dev.kernel.plugin("grpc").ctx.groups.table
    # no pub_sub: the stream fails with INVALID_ARGUMENT, the connection lives on
    stream3 = await client.open("Telemetry", metadata={"x-mq-client-id": "tele@3"})
    await client.send(stream3, pb.TelemetryCommand(settings=pb.Settings()).SerializeToString())
    with trio.fail_after(10):
        await client.answers[stream3].done.wait()
    assert client.answers[stream3].grpc_status == 3
    assert "no publishing or subscription" in client.answers[stream3].grpc_message
    bye = (await client.call("NotifyClientTermination", pb.NotifyClientTerminationRequest(), metadata=md)
           ).parse(pb.NotifyClientTerminationResponse)
    assert bye.status.code == Code.OK


async def test_thread_stack_and_verify_message_commands_are_answered_by_nonce(grpc_dev, raw):
    dev = await grpc_dev()
    await dev.create_topic("Cmds", 1)
    client = await raw(dev.grpc)
    md = {"x-mq-client-id": "cmd@1"}
    stream = await client.open("Telemetry", metadata=md)
    settings = pb.Settings(client_type=pb.ClientType.PRODUCER)
    settings.publishing.topics.add(name="Cmds")
    await client.send(stream, pb.TelemetryCommand(settings=settings).SerializeToString())
    await client.next_message(stream, 0)
    session = dev.endpoint.service.sessions["cmd@1"]
    results = {}

    async def ask(kind, command):
        results[kind] = await session.ask(command, kind, timeout=10)

    async with trio.open_nursery() as nursery:
        command = pb.TelemetryCommand()
        command.print_thread_stack_trace_command.SetInParent()
        nursery.start_soon(ask, "print_thread_stack_trace_command", command)
        pushed = pb.TelemetryCommand.FromString(await client.next_message(stream, 1))
        nonce = pushed.print_thread_stack_trace_command.nonce
        assert nonce
        reply = pb.TelemetryCommand(status=pb.Status(code=Code.OK))
        reply.thread_stack_trace.nonce = nonce
        reply.thread_stack_trace.thread_stack_trace = "main: running"
        await client.send(stream, reply.SerializeToString())
    assert results["print_thread_stack_trace_command"].thread_stack_trace.thread_stack_trace == "main: running"


async def test_acl_refusals_are_unauthorized_for_who_and_forbidden_for_what(grpc_dev, raw, tmp_path, monkeypatch):
    import hashlib
    import hmac

    home = tmp_path / "rocketmq"
    (home / "conf").mkdir(parents=True)
    (home / "conf" / "plain_acl.yml").write_text(
        "accounts:\n  - accessKey: grpcUser\n    secretKey: grpcSecret1\n    defaultTopicPerm: DENY\n"
        "    topicPerms: [Allowed=PUB]\n")
    monkeypatch.setenv("ROCKETMQ_HOME", str(home))
    dev = await grpc_dev(aclEnable=True)
    dev.endpoint.ctx.topics.update(TopicConfig("Allowed", 1, 1))
    client = await raw(dev.grpc)

    def signed(secret: str, ak: str = "grpcUser", date: str = "20261127T120000Z") -> dict:
        sig = hmac.new(secret.encode(), date.encode(), hashlib.sha1).hexdigest()
        return {"x-mq-date-time": date,
                "authorization": f"MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders=x-mq-date-time, Signature={sig}"}

    async def code(topic: str, md: dict) -> tuple[int, str]:
        response = await send(client, message(topic), metadata=md)
        return response.status.code, response.status.message

    assert (await code("Allowed", signed("grpcSecret1")))[0] == Code.OK
    wrong = await code("Allowed", signed("wrong-secret"))
    assert wrong[0] == Code.UNAUTHORIZED and "signature" in wrong[1].lower()
    unknown = await code("Allowed", signed("grpcSecret1", ak="nobody"))
    assert unknown[0] == Code.UNAUTHORIZED and "nobody" in unknown[1]
    anonymous = await code("Allowed", {"authorization": "MQv2-HMAC-SHA1 Credential=, SignedHeaders=x-mq-date-time, Signature="})
    assert anonymous[0] == Code.UNAUTHORIZED
    forbidden = await code("Other", signed("grpcSecret1"))
    assert forbidden[0] == Code.FORBIDDEN and "Other" in forbidden[1]


async def test_metrics_count_calls_sends_refusals_and_clients(grpc_dev, raw):
    dev = await grpc_dev()
    await dev.create_topic("Metered", 1)
    client = await raw(dev.grpc)
    assert (await send(client, message("Metered"))).status.code == Code.OK
    assert (await send(client, message("Metered", b""))).status.code == Code.MESSAGE_BODY_EMPTY
    (collector,) = dev.endpoint.pyrmq_register_metric_collectors("broker")
    values = {f.name: f.samples[0].value for f in collector.collect()}
    assert values["rocketmq_grpc_messages_sent"] == 1 and values["rocketmq_grpc_refused"] == 1
    assert values["rocketmq_grpc_calls"] >= 2 and values["rocketmq_grpc_clients"] == 0
    assert dev.endpoint.pyrmq_register_metric_collectors("namesrv") is None
