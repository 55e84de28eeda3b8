"""ReceiveMessage, AckMessage, ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue over real HTTP/2 on
127.0.0.1, with the raw test client (it sends what the official clients never would: garbage receipt handles, a
call whose deadline is too short for long polling, a receive before any settings)."""

from __future__ import annotations

import pytest
import trio

from pyrmq.client import MessageQueue, PullConsumer, PullStatus
from pyrmq.plugins.grpc.schema import pb
from test_service import message, send

Code = pb.Code
#: long polling shortened for the tests that wait for an empty answer (the clamp itself has its own test)
QUICK = {"grpcClientConsumerMinLongPollingTimeoutMillis": 100, "grpcClientConsumerMaxLongPollingTimeoutMillis": 500}


async def settings(client, client_id: str, group: str, topic: str, kind=pb.ClientType.SIMPLE_CONSUMER):
    """Open a Telemetry stream with a consumer's settings; returns the stream id once they are answered."""
    stream = await client.open("Telemetry", metadata={"x-mq-client-id": client_id})
    s = pb.Settings(client_type=kind)
    s.subscription.group.name = group
    s.subscription.subscriptions.add(topic=pb.Resource(name=topic))
    s.request_timeout.seconds = 3
    await client.send(stream, pb.TelemetryCommand(settings=s).SerializeToString())
    answer = pb.TelemetryCommand.FromString(await client.next_message(stream, 0))
    assert answer.status.code == Code.OK
    return stream


class Received:
    def __init__(self, answer) -> None:
        self.answer = answer
        parts = [pb.ReceiveMessageResponse.FromString(m) for m in answer.messages]
        kinds = [p.WhichOneof("content") for p in parts]
        assert kinds and kinds[0] == "status" and kinds[-1] == "delivery_timestamp", kinds
        assert set(kinds[1:-1]) <= {"message"}, kinds
        self.status = parts[0].status
        self.messages = [p.message for p in parts[1:-1]]

    @property
    def handles(self) -> list[str]:
        return [m.system_properties.receipt_handle for m in self.messages]


async def receive(client, group: str, topic: str, *, client_id: str = "consumer@1", batch: int = 16,
                  invisible_s: float | None = 15, polling_s: float | None = 5, timeout: str = "10S",
                  auto_renew: bool = False, expression: str = "*", version: str = "5.1.2",
                  wait: float = 30) -> Received:
    request = pb.ReceiveMessageRequest(batch_size=batch, auto_renew=auto_renew)
    request.group.name = group
    request.message_queue.topic.name = topic
    request.message_queue.id = -1
    request.message_queue.broker.name = "broker-a"
    request.filter_expression.type = pb.FilterType.TAG
    request.filter_expression.expression = expression
    if invisible_s is not None:
        request.invisible_duration.seconds = int(invisible_s)
    if polling_s is not None:
        request.long_polling_timeout.seconds, ms = divmod(int(polling_s * 1000), 1000)
        request.long_polling_timeout.nanos = ms * 1_000_000
    answer = await client.call("ReceiveMessage", request, timeout=timeout, wait=wait,
                               metadata={"x-mq-client-id": client_id, "x-mq-client-version": version})
    assert answer.grpc_status == 0, (answer.grpc_status, answer.grpc_message)
    return Received(answer)


async def ack(client, group: str, topic: str, *handles: str, client_id: str = "consumer@1"):
    request = pb.AckMessageRequest()
    request.group.name, request.topic.name = group, topic
    for i, handle in enumerate(handles):
        request.entries.add(message_id=f"m{i}", receipt_handle=handle)
    answer = await client.call("AckMessage", request, metadata={"x-mq-client-id": client_id})
    assert answer.grpc_status == 0, answer.grpc_message
    return answer.parse(pb.AckMessageResponse)


async def change(client, group: str, topic: str, handle: str, seconds: int, *, client_id: str = "consumer@1"):
    request = pb.ChangeInvisibleDurationRequest(receipt_handle=handle, message_id="m")
    request.group.name, request.topic.name = group, topic
    request.invisible_duration.seconds = seconds
    answer = await client.call("ChangeInvisibleDuration", request, metadata={"x-mq-client-id": client_id})
    assert answer.grpc_status == 0, answer.grpc_message
    return answer.parse(pb.ChangeInvisibleDurationResponse)


async def to_dlq(client, group: str, topic: str, handle: str, message_id: str = "m", *, client_id: str = "consumer@1"):
    request = pb.ForwardMessageToDeadLetterQueueRequest(receipt_handle=handle, message_id=message_id,
                                                        delivery_attempt=1, max_delivery_attempts=17)
    request.group.name, request.topic.name = group, topic
    answer = await client.call("ForwardMessageToDeadLetterQueue", request, metadata={"x-mq-client-id": client_id})
    assert answer.grpc_status == 0, answer.grpc_message
    return answer.parse(pb.ForwardMessageToDeadLetterQueueResponse)


async def pulled(dev, topic: str, queues: int = 1) -> list:
    got = []
    async with PullConsumer(dev.namesrv, "readback") as consumer:
        for qid in range(queues):
            result = await consumer.pull(MessageQueue(topic, "broker-a", qid), "*", 0, 32)
            if result.status is PullStatus.FOUND:
                got += result.messages
    return got


async def test_receive_gives_each_message_a_handle_with_its_commit_log_offset_and_ack_consumes_it(grpc_dev, raw):
    dev = await grpc_dev(**QUICK)
    await dev.create_topic("Recv", 2)
    client = await raw(dev.grpc)
    for i in range(3):
        assert (await send(client, message("Recv", f"m{i}".encode(), message_id=f"ID{i}", user={"k": "v"}))
                ).status.code == Code.OK
    await settings(client, "consumer@1", "GRecv", "Recv")
    got = await receive(client, "GRecv", "Recv")
    assert got.status.code == Code.OK and got.status.message == "OK"
    assert sorted(m.body for m in got.messages) == [b"m0", b"m1", b"m2"]
    stored = {m.properties["UNIQ_KEY"]: m for m in await pulled(dev, "Recv", 2)}
    for m in got.messages:
        sp = m.system_properties
        fields = sp.receipt_handle.split(" ")
        assert len(fields) == 9 and fields[5] == "broker-a"
        record = stored[sp.message_id]
        assert (int(fields[6]), int(fields[7]), int(fields[8])) == (record.queue_id, record.queue_offset,
                                                                    record.commit_log_offset)
        assert (sp.tag, sp.delivery_attempt, dict(m.user_properties), m.topic.name) == ("TagA", 1, {"k": "v"}, "Recv")
        assert sp.body_digest.type == pb.DigestType.MD5
    answer = await ack(client, "GRecv", "Recv", *got.handles)
    assert answer.status.code == Code.OK and [e.status.code for e in answer.entries] == [Code.OK] * 3
    empty = await receive(client, "GRecv", "Recv")
    assert (empty.status.code, empty.status.message, empty.messages) == (Code.MESSAGE_NOT_FOUND, "no new message", [])


async def test_a_receive_before_the_clients_settings_is_served_not_failed(grpc_dev, raw):
    """5.5.0 answers INTERNAL_SERVER_ERROR (a NullPointerException) when ReceiveMessage overtakes the settings."""
    dev = await grpc_dev(**QUICK)
    await dev.create_topic("Early", 1)
    client = await raw(dev.grpc)
    await send(client, message("Early", b"first"))
    got = await receive(client, "GEarly", "Early", client_id="never-sent-settings@1")
    assert got.status.code == Code.OK and [m.body for m in got.messages] == [b"first"]


async def test_long_polling_is_clamped_and_a_deadline_too_short_is_illegal_polling_time(grpc_dev, raw):
    dev = await grpc_dev(grpcClientConsumerMaxLongPollingTimeoutMillis=500)
    await dev.create_topic("Poll", 1)
    client = await raw(dev.grpc)
    # 60 s asked, 30 s of deadline: polls 0.5 s (the max), answers before the raw client's 15 s wait
    clamped = await receive(client, "GPoll", "Poll", polling_s=60, timeout="30S", wait=15)
    assert clamped.status.code == Code.MESSAGE_NOT_FOUND
    dev2 = await grpc_dev()
    await dev2.create_topic("Poll", 1)
    client2 = await raw(dev2.grpc)
    short = await receive(client2, "GPoll", "Poll", polling_s=20, timeout="3S")
    assert short.status.code == Code.ILLEGAL_POLLING_TIME
    assert "deadline" in short.status.message and "5000" in short.status.message
    old = await receive(client2, "GPoll", "Poll", polling_s=20, timeout="3S", version="5.0.2")
    assert old.status.code == Code.BAD_REQUEST  # clients before 5.0.3 do not know ILLEGAL_POLLING_TIME


async def test_invisible_time_and_batch_size_are_checked(grpc_dev, raw):
    dev = await grpc_dev(**QUICK)
    await dev.create_topic("Inv", 1)
    client = await raw(dev.grpc)
    small = await receive(client, "GInv", "Inv", invisible_s=5)
    assert small.status.code == Code.ILLEGAL_INVISIBLE_TIME and "min is 10000" in small.status.message
    large = await receive(client, "GInv", "Inv", invisible_s=13 * 3600)
    assert large.status.code == Code.ILLEGAL_INVISIBLE_TIME and "max is 43200000" in large.status.message
    zero = await receive(client, "GInv", "Inv", batch=0)
    assert zero.status.code == Code.BAD_REQUEST and "batch_size" in zero.status.message
    sql = pb.ReceiveMessageRequest(batch_size=1)
    sql.group.name, sql.message_queue.topic.name = "GInv", "Inv"
    sql.invisible_duration.seconds = 15
    sql.filter_expression.type = pb.FilterType.SQL
    sql.filter_expression.expression = "a >"
    answer = Received(await client.call("ReceiveMessage", sql, timeout="10S"))
    assert answer.status.code == Code.ILLEGAL_FILTER_EXPRESSION and "a >" in answer.status.message
    missing = await receive(client, "GInv", "NoSuchTopic")
    assert missing.status.code == Code.TOPIC_NOT_FOUND and "NoSuchTopic" in missing.status.message


async def test_garbage_receipt_handles_are_invalid_receipt_handle_with_a_clear_message(grpc_dev, raw):
    dev = await grpc_dev(**QUICK)
    await dev.create_topic("Handles", 1)
    client = await raw(dev.grpc)
    await send(client, message("Handles", b"x"))
    got = await receive(client, "GHandles", "Handles")
    (real,) = got.handles
    other_broker = real.replace("broker-a", "broker-z")
    for handle, words in (("garbage", "1 fields"), ("", "empty"), ("0 x 15000 0 0 broker-a 0 0 0", "popTime"),
                          (other_broker, "broker-z")):
        answer = await ack(client, "GHandles", "Handles", handle)
        (entry,) = answer.entries
        assert entry.status.code == Code.INVALID_RECEIPT_HANDLE and words in entry.status.message, entry.status
        assert answer.status.code == Code.INVALID_RECEIPT_HANDLE and words in answer.status.message
        changed = await change(client, "GHandles", "Handles", handle, 20)
        assert changed.status.code == Code.INVALID_RECEIPT_HANDLE and words in changed.status.message
        dead = await to_dlq(client, "GHandles", "Handles", handle)
        assert dead.status.code == Code.INVALID_RECEIPT_HANDLE and words in dead.status.message
    mixed = await ack(client, "GHandles", "Handles", real, "garbage")
    assert mixed.status.code == Code.MULTIPLE_RESULTS
    assert [e.status.code for e in mixed.entries] == [Code.OK, Code.INVALID_RECEIPT_HANDLE]
    # nothing else was disturbed: the connection and the broker serve on
    assert (await send(client, message("Handles", b"y"))).status.code == Code.OK


async def test_a_handle_after_a_change_keeps_the_commit_log_offset_and_dead_letters_the_right_message(grpc_dev, raw):
    """5.5.0 (local mode) writes 0 in the changed handle's offset field, and the DLQ then gets the commit log's
    first message, of another topic (grpc-design §3.6). Here the DLQ gets B."""
    dev = await grpc_dev(**QUICK)
    await dev.create_topic("Other", 1)
    await dev.create_topic("TDlq", 1)
    client = await raw(dev.grpc)
    await send(client, message("Other", b"normal-0"))  # commit-log offset 0
    await send(client, message("TDlq", b"A", message_id="IDA"))
    await send(client, message("TDlq", b"B", message_id="IDB"))
    got = await receive(client, "GDlq", "TDlq")
    by_body = {m.body: m for m in got.messages}
    old = by_body[b"B"].system_properties.receipt_handle
    changed = await change(client, "GDlq", "TDlq", old, 30)
    assert changed.status.code == Code.OK
    new = changed.receipt_handle
    assert len(new.split(" ")) == 9 and new.split(" ")[8] == old.split(" ")[8] != "0"
    assert new != old
    dead = await to_dlq(client, "GDlq", "TDlq", new, "IDB")
    assert dead.status.code == Code.OK, dead.status
    dlq = await pulled(dev, "%DLQ%GDlq")
    assert [(m.body, m.properties["UNIQ_KEY"]) for m in dlq] == [(b"B", "IDB")]
    # B is consumed for good (forwarded, then acked); A comes back once its 15 s are over, B never
    assert (await ack(client, "GDlq", "TDlq", by_body[b"A"].system_properties.receipt_handle)).status.code == Code.OK
    assert (await receive(client, "GDlq", "TDlq")).messages == []


async def test_a_message_delivered_max_attempts_times_goes_to_the_dlq_at_the_next_receive(grpc_dev, raw, until):
    dev = await grpc_dev(**QUICK)
    await dev.create_topic("Retry", 1)
    await dev.put_group("GRetry", retryMaxTimes=1)  # max_attempts 2 (retryMaxTimes + 1), as the settings answer says
    client = await raw(dev.grpc)
    await send(client, message("Retry", b"poison", message_id="IDP"))
    attempts = []
    for _ in range(2):
        async def redelivered():
            got = await receive(client, "GRetry", "Retry")
            return got if got.messages else None

        got = await until(redelivered, "the message delivered again", timeout=30)
        (m,) = got.messages
        attempts.append(m.system_properties.delivery_attempt)
        assert (await change(client, "GRetry", "Retry", m.system_properties.receipt_handle, 0)).status.code == Code.OK
    assert attempts == [1, 2]

    async def dead():
        got = await receive(client, "GRetry", "Retry")
        assert got.messages == []
        return [m.body for m in await pulled(dev, "%DLQ%GRetry")] or None

    assert await until(dead, "the message in %DLQ%GRetry", timeout=30) == [b"poison"]
    assert dev.endpoint.service.consumption.dead_lettered == 1


async def test_fifo_group_hands_out_a_queues_next_messages_only_after_the_batch_is_acked(grpc_dev, raw):
    dev = await grpc_dev(**QUICK)
    await dev.create_topic("FifoT", 1, message_type="FIFO")
    await dev.put_group("GFifo", consumeMessageOrderly=True)
    client = await raw(dev.grpc)
    for i in range(4):
        await send(client, message("FifoT", f"m{i}".encode(), message_id=f"ID{i}", message_group="g",
                                   message_type=pb.MessageType.FIFO))
    await settings(client, "consumer@1", "GFifo", "FifoT")
    first = await receive(client, "GFifo", "FifoT", batch=2)
    assert [m.body for m in first.messages] == [b"m0", b"m1"]
    assert {h.split(" ")[3] for h in first.handles} == {"999"}  # 5.x's FIFO revive queue id
    assert {m.system_properties.message_group for m in first.messages} == {"g"}
    blocked = await receive(client, "GFifo", "FifoT", batch=2)
    assert blocked.messages == []
    assert (await ack(client, "GFifo", "FifoT", *first.handles)).status.code == Code.OK
    second = await receive(client, "GFifo", "FifoT", batch=2)
    assert [m.body for m in second.messages] == [b"m2", b"m3"]


async def test_auto_renew_keeps_a_push_consumers_message_and_an_ack_with_the_first_handle_ends_it(grpc_dev, raw, until):
    dev = await grpc_dev(**QUICK, renewAheadTimeMillis=59_000, renewSchedulePeriodMillis=50)
    await dev.create_topic("Renew", 1)
    client = await raw(dev.grpc)
    await send(client, message("Renew", b"held"))
    await settings(client, "push@1", "GRenew", "Renew", pb.ClientType.PUSH_CONSUMER)
    got = await receive(client, "GRenew", "Renew", client_id="push@1", auto_renew=True, invisible_s=None)
    (handle,) = got.handles
    assert handle.split(" ")[2] == "60000"  # auto_renew: defaultInvisibleTimeMills, whatever was asked
    consumption = dev.endpoint.service.consumption

    async def renewed():
        held = consumption.held.get(handle)
        return held is not None and held.renewals >= 2

    await until(renewed, "two renewals of the held message", timeout=30)
    assert consumption.held[handle].current.encode() != handle
    pop = dev.kernel.plugin("pop")
    assert pop.inflight("GRenew", "Renew", 0) == 1
    answer = await ack(client, "GRenew", "Renew", handle, client_id="push@1")
    assert answer.status.code == Code.OK
    assert pop.inflight("GRenew", "Renew", 0) == 0 and handle not in consumption.held


async def test_a_push_consumer_gone_returns_its_held_messages(grpc_dev, raw, until):
    dev = await grpc_dev(**QUICK, invisibleTimeMillisWhenClear=0, renewSchedulePeriodMillis=50)
    await dev.create_topic("Gone", 1)
    client = await raw(dev.grpc)
    await send(client, message("Gone", b"held"))
    stream = await settings(client, "push@gone", "GGone", "Gone", pb.ClientType.PUSH_CONSUMER)
    got = await receive(client, "GGone", "Gone", client_id="push@gone", auto_renew=True, invisible_s=None)
    assert [m.body for m in got.messages] == [b"held"]
    client.h2.reset_stream(stream)  # the client goes away: its Telemetry stream ends
    await client.flush()

    async def back():
        again = await receive(client, "GGone", "Gone", client_id="other@1")
        return again.messages or None

    (m,) = await until(back, "the held message handed to another consumer", timeout=30)
    assert m.body == b"held"


@pytest.mark.parametrize("rpc", ["AckMessage", "ChangeInvisibleDuration", "ForwardMessageToDeadLetterQueue"])
async def test_consumer_calls_check_topic_and_group_names(grpc_dev, raw, rpc):
    dev = await grpc_dev(**QUICK)
    client = await raw(dev.grpc)
    request = {"AckMessage": pb.AckMessageRequest, "ChangeInvisibleDuration": pb.ChangeInvisibleDurationRequest,
               "ForwardMessageToDeadLetterQueue": pb.ForwardMessageToDeadLetterQueueRequest}[rpc]()
    request.topic.name, request.group.name = "bad topic!", "G"
    response_cls = {"AckMessage": pb.AckMessageResponse, "ChangeInvisibleDuration": pb.ChangeInvisibleDurationResponse,
                    "ForwardMessageToDeadLetterQueue": pb.ForwardMessageToDeadLetterQueueResponse}[rpc]
    answer = (await client.call(rpc, request)).parse(response_cls)
    assert answer.status.code == Code.ILLEGAL_TOPIC and "bad topic!" in answer.status.message
    request.topic.name, request.group.name = "T", "bad group!"
    answer = (await client.call(rpc, request)).parse(response_cls)
    assert answer.status.code == Code.ILLEGAL_CONSUMER_GROUP and "bad group!" in answer.status.message
