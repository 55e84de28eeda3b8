"""Delay levels (spec 7.6): parked under SCHEDULE_TOPIC_XXXX, delivered to the real topic when due, progress kept.

Most tests run the real DelayLevelService over a real store on pytest-trio's autojump clock (the store's clock
follows trio's virtual time); one test goes over the wire against `pyrmq dev` in real time with a short level.
"""

from __future__ import annotations

import time

import pytest
import trio

from pyrmq.plugins.broker.delay_levels import DelayLevelSettings, parse_delay_levels
from pyrmq.plugins.broker.delay_levels import SCHEDULE_TOPIC, DelayLevelService
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.store import GetMessageStatus, MessageRecord, MessageStore, StoreConfig, decode_messages
from pyrmq.store.config_files import fastjson_loads
from pyrmq.store.format import encode_properties

BASE_MS = 1_700_000_000_000
DEFAULT_MS = (1000, 5000, 10000, 30000, 60000, 120000, 180000, 240000, 300000, 360000, 420000, 480000, 540000,
              600000, 1200000, 1800000, 3600000, 7200000)


def virtual_clock() -> int:
    return BASE_MS + round(trio.current_time() * 1000)


def open_store(root) -> MessageStore:
    config = StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=1 << 20,
                         mapped_file_size_consume_queue=20 * 1024, warm_mapped_file_enable=False)
    store = MessageStore(config, clock=virtual_clock)
    store.load()
    return store


def read_all(store, topic, queue_id=0):
    out, offset = [], 0
    while True:
        r = store.get_message("g", topic, queue_id, offset, 32)
        if r.status is not GetMessageStatus.FOUND:
            return out
        out.extend(decode_messages(r.body()))
        offset = r.next_begin_offset


def send_delayed(store, service, topic, body, level, queue_id=0, **props):
    record = MessageRecord(topic, queue_id, body, properties={"DELAY": str(level), **props}, flag=7,
                           born_timestamp=BASE_MS - 5, born_host=("10.0.0.9", 4242), reconsume_times=2)
    parked = service.redirect(record) or record
    assert store.put_message(parked).status.is_ok
    return parked


@pytest.fixture
async def delay(nursery, tmp_path):
    store = open_store(tmp_path / "store")
    service = DelayLevelService(store, DEFAULT_MS, str(tmp_path / "store" / "config"))
    await nursery.start(service.run)
    yield store, service
    service.close()
    store.close()


def test_the_18_default_levels_parse():
    assert DelayLevelSettings().delay_levels_ms == DEFAULT_MS
    assert parse_delay_levels("1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h") == DEFAULT_MS
    assert parse_delay_levels("2d 1h") == (172_800_000, 3_600_000)
    with pytest.raises(ValueError, match="bad delay level token"):
        parse_delay_levels("1s 5x")


async def test_level_2_arrives_after_5_s_and_not_before(delay, autojump_clock):
    store, service = delay
    sent_at = virtual_clock()
    parked = send_delayed(store, service, "T", b"five", 2, TAGS="A", KEYS="k1", color="red")
    # parked under SCHEDULE_TOPIC_XXXX queue 1 with the delivery time as the tags code (spec 7.6)
    assert parked.topic == SCHEDULE_TOPIC and parked.queue_id == 1
    cq = store.consume_queues.get(SCHEDULE_TOPIC, 1)
    assert cq.get_unit(0)[2] == sent_at + 5000
    assert read_all(store, "T") == []
    await trio.sleep(4.99)
    assert read_all(store, "T") == []
    await trio.sleep(0.02)
    [msg] = read_all(store, "T")
    assert msg.store_timestamp - sent_at >= 5000
    assert msg.body == b"five" and msg.flag == 7 and msg.reconsume_times == 2
    assert msg.born_timestamp == BASE_MS - 5 and msg.born_host == ("10.0.0.9", 4242)
    props = msg.properties
    assert "DELAY" not in props
    assert props["REAL_TOPIC"] == "T" and props["REAL_QID"] == "0"
    assert (props["TAGS"], props["KEYS"], props["color"]) == ("A", "k1", "red")
    # the real topic's consume queue has the ordinary tags code again (tag filtering keeps working)
    from pyrmq.store.format import java_string_hash

    assert store.consume_queues.get("T", 0).get_unit(0)[2] == java_string_hash("A")


async def test_levels_clamp_and_deliver_in_time_order(delay, autojump_clock):
    store, service = delay
    assert service.redirect(MessageRecord("T", 0, b"x", properties={"DELAY": "0"})) is None
    assert service.redirect(MessageRecord("T", 0, b"x", properties={"DELAY": "-3"})) is None
    assert service.redirect(MessageRecord("T", 0, b"x", properties={"DELAY": "99"})).queue_id == 17
    with pytest.raises(ValueError, match=r"the property <DELAY> is not a number: .soon."):
        service.redirect(MessageRecord("T", 0, b"x", properties={"DELAY": "soon"}))
    for level, body in ((3, b"10s"), (1, b"1s"), (2, b"5s"), (1, b"1s-b"), (4, b"30s")):
        send_delayed(store, service, "T", body, level, queue_id=1)
    await trio.sleep(31)
    assert [m.body for m in read_all(store, "T", 1)] == [b"1s", b"1s-b", b"5s", b"10s", b"30s"]
    assert service.delivered == 5


async def test_progress_survives_a_crash_and_a_clean_restart(nursery, tmp_path, autojump_clock):
    root = tmp_path / "store"
    config_dir = str(root / "config")
    store = open_store(root)
    first = DelayLevelService(store, DEFAULT_MS, config_dir, flush_interval_s=3600)
    async with trio.open_nursery() as inner:
        await inner.start(first.run)
        for i in range(3):
            send_delayed(store, first, "T", b"early-%d" % i, 1)
        for i in range(3):
            send_delayed(store, first, "T", b"late-%d" % i, 3)
        await trio.sleep(2)
        assert len(read_all(store, "T")) == 3
        inner.cancel_scope.cancel()
    # "crash": no close(), delayOffset.json never written (flush interval of an hour); the mapped progress has it
    assert not (root / "config" / "delayOffset.json").exists()
    first.progress._map.close()
    second = DelayLevelService(store, DEFAULT_MS, config_dir)
    second.load()
    assert second.offsets == {1: 3}
    await nursery.start(second.run)
    await trio.sleep(9)
    assert [m.body for m in read_all(store, "T")] == [b"early-0", b"early-1", b"early-2", b"late-0", b"late-1", b"late-2"]
    second.close()
    # clean shutdown: delayOffset.json in Java's shape, bare integer level keys (spec 6.6)
    text = (root / "config" / "delayOffset.json").read_text()
    assert fastjson_loads(text) == {"offsetTable": {1: 3, 3: 3}}
    assert '"offsetTable":{' in text.replace("\t", "").replace("\n", "") and "1:3" in text.replace("\t", "").replace("\n", "")
    third = DelayLevelService(store, DEFAULT_MS, config_dir)
    third.load()
    assert third.offsets == {1: 3, 3: 3}
    third.close()
    store.close()


async def test_a_delivery_a_crash_cut_off_before_its_progress_is_not_repeated(nursery, tmp_path, autojump_clock):
    # found by the reliability suite (tests/chaos/test_crash.py, kill -9 under load): the kill landed between the
    # delivered copy's append and the progress update, and the restarted broker delivered the message again
    root = tmp_path / "store"
    config_dir = str(root / "config")
    store = open_store(root)
    first = DelayLevelService(store, DEFAULT_MS, config_dir, flush_interval_s=3600)
    first.load()
    send_delayed(store, first, "T", b"once", 1, UNIQ_KEY="C0A8000100002A9F0000000000000001")
    send_delayed(store, first, "T", b"next", 1, UNIQ_KEY="C0A8000100002A9F0000000000000002")
    await trio.sleep(1.5)
    phy, size, _ = next(store.consume_queues.get(SCHEDULE_TOPIC, 0).units_from(0, 1))
    assert first.deliver(phy, size, 1)  # delivered; the progress never written: the process died here
    first.progress._map.close()
    store.close()
    (root / "abort").touch()  # as a killed broker leaves it
    store = open_store(root)
    second = DelayLevelService(store, DEFAULT_MS, config_dir)
    await nursery.start(second.run)
    await trio.sleep(2)
    assert [m.body for m in read_all(store, "T")] == [b"once", b"next"]
    second.close()
    store.close()


def _send(topic, body, props, queue_id=0):
    fields = {"a": "pg", "b": topic, "c": "TBW102", "d": 4, "e": queue_id, "f": 0, "g": int(time.time() * 1000),
              "h": 0, "i": encode_properties(props), "j": 0, "k": False}
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, fields, body)


def _pull(topic, queue_id=0, offset=0):
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, {
        "consumerGroup": "g", "topic": topic, "queueId": str(queue_id), "queueOffset": str(offset), "maxMsgNums": "32",
        "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0",
    })


async def test_delayed_send_over_the_wire(start_role, remoting_client):
    kernel = await start_role("dev", {"broker.messageDelayLevel": "1s 2s"})
    addr = kernel.listening["broker"]
    # both schedulers were collected once through pyrmq_register_schedulers, into the put chain
    from pyrmq.plugins.broker.timer import TimerService

    schedulers = [i for i in kernel.put_chain.interceptors if isinstance(i, (DelayLevelService, TimerService))]
    assert sorted(type(s).__name__ for s in schedulers) == ["DelayLevelService", "TimerService"]
    assert next(s for s in schedulers if isinstance(s, DelayLevelService)).levels_ms == (1000, 2000)
    assert any(isinstance(s, TimerService) for s in kernel.hooks.register_schedulers(kernel))
    bad = await remoting_client.invoke(addr, _send("TD", b"x", {"DELAY": "later"}))
    assert bad.code == ResponseCode.SYSTEM_ERROR  # as RocketMQ 4.9.7 (NumberFormatException in its store)
    assert bad.remark == "the property <DELAY> is not a number: 'later' (expected a delay level, 1..2)"
    ok = await remoting_client.invoke(addr, _send("TD", b"delayed", {"DELAY": "1", "KEYS": "k"}))
    assert ok.code == ResponseCode.SUCCESS
    assert (await remoting_client.invoke(addr, _pull("TD"))).code == ResponseCode.PULL_NOT_FOUND
    parked = await remoting_client.invoke(addr, _pull(SCHEDULE_TOPIC, 0))
    [p] = decode_messages(parked.body_bytes())
    with trio.fail_after(10):  # due after 1 s
        while True:
            r = await remoting_client.invoke(addr, _pull("TD"))
            if r.code == ResponseCode.SUCCESS:
                break
            await trio.sleep(0.1)
    [m] = decode_messages(r.body_bytes())
    assert m.body == b"delayed" and m.store_timestamp - p.store_timestamp >= 1000
    assert "DELAY" not in m.properties and m.properties["KEYS"] == "k" and m.properties["REAL_TOPIC"] == "TD"


async def test_recovery_rebuilds_parked_units_with_their_delivery_time(start_role, remoting_client, tmp_path, until):
    """Issue 25, defect 1: a broker whose consume queues are lost rebuilds them from the commit log at start; the
    parked delayed and timed messages' units hold their delivery time again (store time + level delay,
    TIMER_DELIVER_MS), not the hash of their TAGS."""
    import shutil

    from pyrmq.plugins.broker.core import BROKER
    from pyrmq.plugins.broker.timer import TIMER_TOPIC

    overrides = {"broker.storePathRootDir": str(tmp_path / "rebuilt"), "broker.messageDelayLevel": "1h 2h"}
    kernel = await start_role("dev", overrides)
    addr = kernel.listening["broker"]
    due = int(time.time() * 1000) + 3_600_000
    for props in ({"DELAY": "2", "TAGS": "a"}, {"TIMER_DELIVER_MS": str(due), "TAGS": "b"}):
        assert (await remoting_client.invoke(addr, _send("TR", b"parked", props))).code == ResponseCode.SUCCESS
    store = kernel.state.get(BROKER).store
    before = {key: store.consume_queues.get(*key).get_unit(0) for key in ((SCHEDULE_TOPIC, 1), (TIMER_TOPIC, 0))}
    [parked] = decode_messages((await remoting_client.invoke(addr, _pull(SCHEDULE_TOPIC, 1))).body_bytes())
    assert before[(SCHEDULE_TOPIC, 1)][2] == parked.store_timestamp + 2 * 3_600_000
    assert before[(TIMER_TOPIC, 0)][2] == due
    kernel.request_stop()
    remoting_client.close_connection(addr)
    await until(lambda: _closed(store), "the first broker stopped")
    shutil.rmtree(tmp_path / "rebuilt" / "consumequeue")
    again = await start_role("dev", overrides)
    rebuilt = again.state.get(BROKER).store
    assert {key: rebuilt.consume_queues.get(*key).get_unit(0) for key in before} == before


async def _closed(store) -> bool:
    return store._closed
