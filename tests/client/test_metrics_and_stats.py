"""The broker's traffic counters as operators see them: Prometheus text at /metrics (parsed with
prometheus_client.parser), VIEW_BROKER_STATS_DATA, GET_ALL_PRODUCER_INFO, UPDATE_BROKER_CONFIG, through real sockets."""

from __future__ import annotations

import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

from pyrmq.client import api
from pyrmq.client import (
    Admin, BrokerError, LocalTransactionState, Message, MessageQueue, Producer, PullConsumer, PullStatus,
    TransactionProducer,
)
from pyrmq.plugins.builtin.metrics import ENDPOINTS
from pyrmq.plugins.builtin.remoting_server import SERVERS
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand

METRICS_ON = {
    "broker.metricsExporterType": "PROM", "broker.metricsPromExporterPort": 0,
    "namesrv.metricsExporterType": "PROM", "namesrv.metricsPromExporterPort": 0,
}


async def http_get(port: int, path: str) -> tuple[str, str]:
    with trio.fail_after(10):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
            data = b""
            while chunk := await stream.receive_some(65536):
                data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return head.split(b"\r\n")[0].decode(), body.decode()


def samples(text: str) -> dict[tuple[str, frozenset], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(table: dict, name: str, **labels: str) -> float:
    """The one sample called ``name`` whose labels include ``labels``."""
    found = [v for (n, ls), v in table.items() if n == name and set(labels.items()) <= ls]
    assert len(found) == 1, f"{name} {labels}: {found} in {sorted(n for n, _ in table)}"
    return found[0]


@pytest.fixture
async def dev_metrics(start_role):
    kernel = await start_role("dev", METRICS_ON)
    namesrv = kernel.listening["namesrv"]
    async with Admin(namesrv) as admin:
        with trio.fail_after(10):
            while not (await admin.cluster_info()).brokers:
                await trio.sleep(0.02)
    return kernel


async def test_metrics_counters_agree_with_what_was_sent_and_consumed(dev_metrics, name):
    kernel = dev_metrics
    namesrv, broker = kernel.listening["namesrv"], kernel.listening["broker"]
    endpoints = kernel.state.get(ENDPOINTS)
    assert set(endpoints) == {"namesrv", "broker"} and endpoints["namesrv"] is not endpoints["broker"]
    topic, group = name("T"), name("G")
    async with Admin(namesrv) as admin:
        await admin.create_topic(topic, 2)
    bodies = [b"x" * 10, b"y" * 2000, b"z" * 3500, b"w" * 100, b"v" * 3000]
    producer_group = name("P")
    async with Producer(namesrv, producer_group) as producer:
        for i, body in enumerate(bodies):
            await producer.send(Message(topic, body), queue=MessageQueue(topic, "broker-a", i % 2))
        # queue 0 holds 3 messages, queue 1 two; the group pulls all of queue 0 and commits 2 of them
        async with PullConsumer(namesrv, group) as consumer:
            q0 = MessageQueue(topic, "broker-a", 0)
            pulled = await consumer.pull(q0, "*", 0, 32)
            assert pulled.status is PullStatus.FOUND and len(pulled.messages) == 3
            await consumer.commit_offset(q0, 2)
            await consumer.commit_offset(MessageQueue(topic, "broker-a", 1), 0)
            # one straight to the dead-letter queue, one back for a retry
            await api.send_back(consumer.instance, broker, pulled.messages[0], group, delay_level=-1)
            await api.send_back(consumer.instance, broker, pulled.messages[1], group)
        stored_sizes = [m.store_size for m in pulled.messages]
        await producer.instance.send_heartbeat()  # the broker knows producers from their heartbeats

        status, text = await http_get(endpoints["broker"].port, "/metrics")
        assert status == "HTTP/1.1 200 OK"
        table = samples(text)
        common = {"cluster": "DefaultCluster", "node_type": "broker", "node_id": "broker-a"}
        assert value(table, "rocketmq_messages_in_total", topic=topic, **common) == 5
        bytes_in = value(table, "rocketmq_throughput_in_total", topic=topic)
        assert bytes_in > sum(map(len, bodies))  # stored records: bodies plus headers and properties
        assert value(table, "rocketmq_messages_out_total", topic=topic, consumer_group=group, is_retry="false") == 3
        assert value(table, "rocketmq_throughput_out_total", topic=topic, consumer_group=group) == sum(stored_sizes)
        # histogram: the 1 KiB bucket holds the 10- and 100-byte bodies' records, 4 KiB all (bodies under the client's 4 KiB compression)
        assert value(table, "rocketmq_message_size_count", topic=topic) == 5
        assert value(table, "rocketmq_message_size_sum", topic=topic) == bytes_in
        assert value(table, "rocketmq_message_size_bucket", topic=topic, le="1024.0") == 2
        assert value(table, "rocketmq_message_size_bucket", topic=topic, le="4096.0") == 5
        assert value(table, "rocketmq_message_size_bucket", topic=topic, le="+Inf") == 5
        # lag: queue 0 committed at 2 of 3, queue 1 at 0 of 2
        assert value(table, "rocketmq_consumer_lag_messages", topic=topic, consumer_group=group) == 3
        assert value(table, "rocketmq_consumer_lag_latency", topic=topic, consumer_group=group) >= 0
        assert value(table, "rocketmq_send_to_dlq_messages_total", consumer_group=group) == 1
        assert value(table, "rocketmq_messages_in_total", topic=f"%RETRY%{group}") == 1
        assert value(table, "rocketmq_producer_connections", language="PYTHON") >= 1
        assert value(table, "rocketmq_storage_size") > 0
        assert value(table, "rocketmq_storage_flush_behind_bytes") >= 0

        # the same counters through RocketMQ's admin requests (mqadmin statsAll, the dashboard)
        async with Admin(namesrv) as admin:
            put = await admin.broker_stats(broker, "TOPIC_PUT_NUMS", topic)
            assert put["statsMinute"]["sum"] == 5 and put["statsDay"]["sum"] == 5 and put["statsHour"]["avgpt"] == 1.0
            size = await admin.broker_stats(broker, "TOPIC_PUT_SIZE", topic)
            assert size["statsMinute"]["sum"] == bytes_in
            got = await admin.broker_stats(broker, "GROUP_GET_NUMS", f"{topic}@{group}")
            assert got["statsMinute"]["sum"] == 3 and got["statsMinute"]["tps"] > 0
            assert await admin.broker_stats(broker, "TOPIC_PUT_NUMS", "NoSuchTopic") is None
            back = await admin.broker_stats(broker, "SNDBCK_PUT_NUMS", f"{topic}@{group}")
            assert back["statsMinute"]["sum"] == 2
            producers = (await admin._broker(broker, RequestCode.GET_ALL_PRODUCER_INFO)).body_bytes()
            assert b'"PYTHON"' in producers and producer_group.encode() in producers

    status, text = await http_get(endpoints["namesrv"].port, "/metrics")
    assert status == "HTTP/1.1 200 OK"
    assert value(samples(text), "rocketmq_namesrv_brokers", cluster="DefaultCluster") == 1
    assert (await http_get(endpoints["broker"].port, "/nope"))[0] == "HTTP/1.1 404 Not Found"


async def scrape(port: int) -> dict:
    status, text = await http_get(port, "/metrics")
    assert status == "HTTP/1.1 200 OK"
    return samples(text)


async def test_transaction_timer_and_rpc_latency_series_agree_with_what_was_done(dev_metrics, name):
    kernel = dev_metrics
    namesrv = kernel.listening["namesrv"]
    port = kernel.state.get(ENDPOINTS)["broker"].port
    topic, timed = name("Tx"), name("Timed")
    async with Admin(namesrv) as admin:
        await admin.create_topic(topic, 1)
        await admin.create_topic(timed, 1)
    states = [LocalTransactionState.COMMIT, LocalTransactionState.COMMIT, LocalTransactionState.ROLLBACK,
              LocalTransactionState.UNKNOWN]

    async def local(msg, state):
        return state

    # the check-back answers UNKNOWN too: the last half stays pending (first check after transactionTimeOut anyway)
    async with TransactionProducer(namesrv, name("TP"), check_local=lambda m: LocalTransactionState.UNKNOWN) as tp:
        for i, state in enumerate(states):
            result = await tp.send_in_transaction(Message(topic, b"t%d" % i), local, state)
            assert result.local_state is state
    async with Producer(namesrv, name("P")) as producer:
        await producer.send(Message(timed, b"soon", properties={"TIMER_DELAY_SEC": "1"}))
        await producer.send(Message(timed, b"later", properties={"TIMER_DELAY_SEC": "3600"}))
        await producer.send(Message(topic, b"plain"))
    sends = len(states) + 3

    common = {"cluster": "DefaultCluster", "node_type": "broker", "node_id": "broker-a"}
    with trio.fail_after(15):  # END_TRANSACTION is one-way and the wheel delivers within about a second
        while True:
            table = await scrape(port)
            done = [v for (n, _), v in table.items() if n == "rocketmq_timer_dequeue_total"]
            commits = [v for (n, ls), v in table.items() if n == "rocketmq_commit_messages_total"]
            if done == [1] and sum(commits) == 2:
                break
            await trio.sleep(0.05)
    assert value(table, "rocketmq_commit_messages_total", topic=topic, **common) == 2
    assert value(table, "rocketmq_rollback_messages_total", topic=topic, **common) == 1
    assert value(table, "rocketmq_half_messages", **common) == 1
    assert value(table, "rocketmq_timer_enqueue_total", **common) == 2
    assert value(table, "rocketmq_timer_dequeue_total", **common) == 1
    assert value(table, "rocketmq_timing_messages", **common) == 1
    rpc = dict(common, protocol_type="remoting", request_code="send_message_v2", response_code="success")
    assert value(table, "rocketmq_rpc_latency_count", **rpc) == sends
    assert value(table, "rocketmq_rpc_latency_bucket", le="+Inf", **rpc) == sends
    assert value(table, "rocketmq_rpc_latency_sum", **rpc) > 0
    # the name server's requests are timed on its own endpoint (routes asked by the producers)
    ns = await scrape(kernel.state.get(ENDPOINTS)["namesrv"].port)
    assert value(ns, "rocketmq_rpc_latency_count", node_type="namesrv", request_code="get_routeinfo_by_topic",
                 response_code="success") >= 1


async def test_with_metrics_off_the_processors_are_not_wrapped(start_role):
    kernel = await start_role("dev", {})
    assert ENDPOINTS not in kernel.state
    for table in kernel.processors.values():
        assert not any("timed(" in getattr(p, "__qualname__", "") for p in table.values())
    # nor timed by their connections: no listener has a request timer
    assert {name: server.request_timer for name, server in kernel.state.get(SERVERS).items()} == {
        "namesrv": None, "broker": None}


async def test_with_metrics_on_every_listener_of_a_role_times_its_requests(dev_metrics):
    servers = dev_metrics.state.get(SERVERS)
    assert set(servers) == {"namesrv", "broker"}  # dev binds port 0: no VIP listener
    assert all(server.request_timer is not None for server in servers.values())
    assert servers["namesrv"].request_timer is not servers["broker"].request_timer  # node_type differs


async def test_update_broker_config_changes_runtime_settings_and_refuses_the_rest(dev_metrics, name):
    kernel = dev_metrics
    namesrv, broker = kernel.listening["namesrv"], kernel.listening["broker"]
    async with Admin(namesrv) as admin:
        topic = name("T")
        await admin.create_topic(topic, 1)
        assert (await admin.broker_config(broker))["brokerPermission"] == "6"
        async with Producer(namesrv, name("P")) as producer:
            await producer.send(Message(topic, b"before"))
            # read-only (4): re-registered at once, so the name server routes the topic read-only
            assert await admin.update_broker_config({"brokerPermission": 4}, broker_addr=broker) == ["broker-a"]
            assert (await admin.broker_config(broker))["brokerPermission"] == "4"
            assert [q.perm for q in (await admin.topic_route(topic)).queue_datas] == [4]
            await admin.update_broker_config({"brokerPermission": 6}, broker_addr=broker)
            assert [q.perm for q in (await admin.topic_route(topic)).queue_datas] == [6]
            await producer.send(Message(topic, b"after"))
        with pytest.raises(BrokerError) as refused:
            await admin.update_broker_config({"listenPort": 1}, broker_addr=broker)
        assert refused.value.code == ResponseCode.SYSTEM_ERROR and "listenPort cannot be changed" in str(refused.value)
        with pytest.raises(BrokerError, match="brokerPermission"):
            await admin.update_broker_config({"brokerPermission": 99}, broker_addr=broker)
        request = RemotingCommand.request(RequestCode.UPDATE_BROKER_CONFIG, {}, b"")
        empty = await admin.instance.invoke_broker(broker, request, ok=(0, 1))
        assert empty.code == ResponseCode.SYSTEM_ERROR and "no properties" in empty.remark


async def test_roles_naming_one_port_share_one_endpoint(start_role, free_port):
    port = free_port()
    settings = {f"{role}.{key}": value for role in ("broker", "namesrv")
                for key, value in (("metricsExporterType", "PROM"), ("metricsPromExporterPort", port))}
    kernel = await start_role("dev", settings)
    endpoints = kernel.state.get(ENDPOINTS)
    assert endpoints["broker"] is endpoints["namesrv"] and endpoints["broker"].port == port
    async with Admin(kernel.listening["namesrv"]) as admin:
        with trio.fail_after(10):
            while not (await admin.cluster_info()).brokers:
                await trio.sleep(0.02)
    status, text = await http_get(port, "/metrics")
    table = samples(text)
    assert status == "HTTP/1.1 200 OK"
    assert value(table, "rocketmq_namesrv_brokers", cluster="DefaultCluster") == 1
    assert value(table, "rocketmq_topic_number", node_id="broker-a") > 0


async def raw_request(port: int, head: str) -> tuple[str, str]:
    """Send ``head`` (request line and headers, as written) to 127.0.0.1:port; (status line, body)."""
    with trio.fail_after(10):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(head.encode("latin-1") + b"\r\n")
            data = b""
            while chunk := await stream.receive_some(65536):
                data += chunk
    status, _, body = data.partition(b"\r\n\r\n")
    return status.split(b"\r\n")[0].decode(), body.decode()


async def test_metrics_answer_only_the_hosts_they_are_known_by(start_role):
    """A DNS-rebinding page (evil.example re-pointed at 127.0.0.1) sends ``Host: evil.example:PORT``: refused with 421;
    a request without Host 400; the names in metricsPromExporterAllowedHosts are answered as well as loopback's."""
    kernel = await start_role("dev", {**METRICS_ON, "broker.metricsPromExporterAllowedHosts": "metrics.example, Scrape-1."})
    endpoints = kernel.state.get(ENDPOINTS)
    broker, namesrv = endpoints["broker"].port, endpoints["namesrv"].port
    for host in ("127.0.0.1", f"127.0.0.1:{broker}", f"localhost:{broker}", f"[::1]:{broker}", "LOCALHOST",
                 f"metrics.example:{broker}", "scrape-1"):
        status, body = await raw_request(broker, f"GET /metrics HTTP/1.1\r\nHost: {host}\r\n")
        assert status == "HTTP/1.1 200 OK", host
        assert "rocketmq_" in body
    status, body = await raw_request(broker, f"GET /metrics HTTP/1.1\r\nHost: evil.example:{broker}\r\n")
    assert status == "HTTP/1.1 421 Misdirected Request"
    assert "'evil.example'" in body and "metricsPromExporterAllowedHosts" in body and "rocketmq_" not in body
    # the name server's endpoint has its own list: the broker's names are not among them
    status, _ = await raw_request(namesrv, f"GET /metrics HTTP/1.1\r\nHost: metrics.example:{namesrv}\r\n")
    assert status == "HTTP/1.1 421 Misdirected Request"
    status, body = await raw_request(broker, "GET /metrics HTTP/1.0\r\n")
    assert status == "HTTP/1.1 400 Bad Request" and "no Host header" in body
    status, _ = await raw_request(broker, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.example\r\n")
    assert status == "HTTP/1.1 400 Bad Request"
    status, _ = await raw_request(broker, "GET /metrics HTTP/1.1\r\nHost: evil.example/x\r\n")
    assert status == "HTTP/1.1 400 Bad Request"


async def test_metrics_allowed_hosts_are_checked_when_the_role_starts(start_role):
    from pyrmq.kernel.errors import ConfigError

    with pytest.raises(ConfigError, match="metricsPromExporterAllowedHosts.*host names or addresses.*'bad host'"):
        await start_role("dev", {**METRICS_ON, "broker.metricsPromExporterAllowedHosts": "ok.example,bad host"})


async def test_half_and_timing_gauges_by_topic_and_the_timer_lag_when_deliveries_stall(dev_metrics, name):
    kernel = dev_metrics
    namesrv = kernel.listening["namesrv"]
    port = kernel.state.get(ENDPOINTS)["broker"].port
    tx_a, tx_b, timed_a, timed_b = name("TxA"), name("TxB"), name("TimedA"), name("TimedB")
    async with Admin(namesrv) as admin:
        for topic in (tx_a, tx_b, timed_a, timed_b):
            await admin.create_topic(topic, 1)

    async def local(msg, state):
        return state

    # pending halves: one of tx_a (the other committed), two of tx_b (the third rolled back)
    async with TransactionProducer(namesrv, name("TP"), check_local=lambda m: LocalTransactionState.UNKNOWN) as tp:
        for topic, state in ((tx_a, LocalTransactionState.COMMIT), (tx_a, LocalTransactionState.UNKNOWN),
                             (tx_b, LocalTransactionState.UNKNOWN), (tx_b, LocalTransactionState.UNKNOWN),
                             (tx_b, LocalTransactionState.ROLLBACK)):
            await tp.send_in_transaction(Message(topic, b"t"), local, state)
    async with Producer(namesrv, name("P")) as producer:
        await producer.send(Message(timed_a, b"later", properties={"TIMER_DELAY_SEC": "3600"}))
        for _ in range(2):
            await producer.send(Message(timed_b, b"later", properties={"TIMER_DELAY_SEC": "3600"}))
        await producer.send(Message(timed_b, b"soon", properties={"TIMER_DELAY_SEC": "1"}))

        common = {"cluster": "DefaultCluster", "node_type": "broker", "node_id": "broker-a"}
        with trio.fail_after(15):
            while True:
                table = await scrape(port)
                resolved = [v for (n, _), v in table.items() if n in ("rocketmq_commit_messages_total",
                                                                    "rocketmq_rollback_messages_total")]
                if [v for (n, _), v in table.items() if n == "rocketmq_timer_dequeue_total"] == [1] and sum(resolved) == 2:
                    break
                await trio.sleep(0.05)
        assert value(table, "rocketmq_half_messages", topic=tx_a, **common) == 1
        assert value(table, "rocketmq_half_messages", topic=tx_b, **common) == 2
        assert value(table, "rocketmq_commit_messages_total", topic=tx_a) == 1
        assert value(table, "rocketmq_rollback_messages_total", topic=tx_b) == 1
        assert value(table, "rocketmq_timing_messages", topic=timed_a, **common) == 1
        assert value(table, "rocketmq_timing_messages", topic=timed_b, **common) == 2
        assert value(table, "rocketmq_timer_enqueue_total", topic=timed_a) == 1
        assert value(table, "rocketmq_timer_enqueue_total", topic=timed_b) == 3
        assert value(table, "rocketmq_timer_dequeue_total", topic=timed_b) == 1
        for gauge in ("rocketmq_timer_enqueue_lag", "rocketmq_timer_enqueue_latency", "rocketmq_timer_dequeue_lag",
                      "rocketmq_timer_dequeue_latency"):
            assert value(table, gauge, **common) == 0  # caught up

        # the disk fills (the store's own refusal, fed a 99 % measure): a message falling due cannot be delivered
        from pyrmq.plugins.broker.core import BROKER

        retention = kernel.state.get(BROKER).store.retention
        measure = retention.disk_usage
        await producer.send(Message(timed_a, b"stalled", properties={"TIMER_DELAY_SEC": "2"}))
        retention.disk_usage = lambda path: 0.99
        try:
            retention.check_disk()
            with trio.fail_after(15):
                while True:
                    table = await scrape(port)
                    if value(table, "rocketmq_timer_dequeue_latency", **common) > 0:
                        break
                    await trio.sleep(0.1)
            assert value(table, "rocketmq_timer_dequeue_lag", **common) == 1
            assert value(table, "rocketmq_timing_messages", topic=timed_a) == 2
            assert value(table, "rocketmq_timer_dequeue_total", topic=timed_b) == 1
            assert [v for (n, ls), v in table.items() if n == "rocketmq_timer_dequeue_total"
                    and ("topic", timed_a) in ls] == []
        finally:
            retention.disk_usage = measure
            retention.check_disk()
        # room again: the retry delivers it and the lag is gone
        with trio.fail_after(15):
            while True:
                table = await scrape(port)
                if [v for (n, ls), v in table.items() if n == "rocketmq_timer_dequeue_total" and ("topic", timed_a) in ls] == [1]:
                    break
                await trio.sleep(0.1)
        assert value(table, "rocketmq_timer_dequeue_lag", **common) == 0
        assert value(table, "rocketmq_timer_dequeue_latency", **common) == 0
        assert value(table, "rocketmq_timing_messages", topic=timed_a) == 1


async def test_timing_messages_by_topic_after_a_restart(start_role, tmp_path, name):
    settings = dict(METRICS_ON, **{"broker.storePathRootDir": str(tmp_path / "store-kept")})
    topic_a, topic_b = name("TimedA"), name("TimedB")
    common = {"cluster": "DefaultCluster", "node_type": "broker", "node_id": "broker-a"}
    first = await start_role("dev", settings)
    async with Admin(first.listening["namesrv"]) as admin:
        with trio.fail_after(10):
            while not (await admin.cluster_info()).brokers:
                await trio.sleep(0.02)
        for topic in (topic_a, topic_b):
            await admin.create_topic(topic, 1)
    async with Producer(first.listening["namesrv"], name("P")) as producer:
        for topic in (topic_a, topic_b, topic_b):
            await producer.send(Message(topic, b"later", properties={"TIMER_DELAY_SEC": "3600"}))
    port = first.state.get(ENDPOINTS)["broker"].port
    with trio.fail_after(10):
        while value(await scrape(port), "rocketmq_timer_enqueue_total", topic=topic_b) != 2:
            await trio.sleep(0.05)
    first.request_stop()
    with trio.fail_after(15):  # stopped: the wheel's snapshot written, the store closed
        while first.nursery is not None:
            await trio.sleep(0.05)

    second = await start_role("dev", settings)
    table = await scrape(second.state.get(ENDPOINTS)["broker"].port)
    # the wheel came back from its snapshot; its entries are counted by their records' topics
    assert value(table, "rocketmq_timing_messages", topic=topic_a, **common) == 1
    assert value(table, "rocketmq_timing_messages", topic=topic_b, **common) == 2
    assert [n for (n, _), v in table.items() if n == "rocketmq_timer_enqueue_total"] == []  # counters start again
