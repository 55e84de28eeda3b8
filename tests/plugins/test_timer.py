"""Arbitrary-time delivery: the persistent timing wheel and the timer service on the autojump clock.

The store's clock follows trio's virtual time, so a day (or 30 days) of timers runs in a moment; delivered
records carry the virtual store time at which they arrived.
"""

from __future__ import annotations

import random

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from pyrmq.plugins.broker.timer import TIMER_TOPIC, TimerService
from pyrmq.plugins.broker.timer.wheel import SEGMENT_SIZE, TimingWheel, ceil_sec
from pyrmq.store import GetMessageStatus, MessageRecord, MessageStore, StoreConfig, decode_messages

BASE_MS = 1_700_000_000_000
DAY_S = 86_400


def virtual_clock() -> int:
    return BASE_MS + round(trio.current_time() * 1000)


def open_store(root, clock=virtual_clock) -> MessageStore:
    config = StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=4 << 20,
                         mapped_file_size_consume_queue=20 * 4096, warm_mapped_file_enable=False)
    store = MessageStore(config, clock=clock)
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


def schedule(store, timer, topic, body, **props):
    record = MessageRecord(topic, 0, body, properties=props, born_timestamp=BASE_MS)
    parked = timer.redirect(record) or record
    assert store.put_message(parked).status.is_ok
    return parked


# -- the wheel on its own -----------------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    start=st.integers(0, 1 << 34),
    offsets=st.lists(st.integers(-5, 3 * 65536 + 1000), min_size=1, max_size=60),
    hops=st.lists(st.integers(1, 100_000), min_size=1, max_size=30),
)
def test_every_entry_comes_out_once_at_its_second_in_order(tmp_path_factory, start, offsets, hops):
    wheel = TimingWheel(str(tmp_path_factory.mktemp("wheel")), start)
    for i, off in enumerate(offsets):
        wheel.insert(phy=i, size=100 + i, deliver_ms=(start + off) * 1000 - (i % 3) * 7)
    out = []
    now = start
    for hop in hops + [4 * 65536]:
        now += hop
        while (due := wheel.advance(now)) is not None:
            out.extend((wheel.cur - 1, e) for e in due)
    assert sorted(e[1] for _, e in out) == list(range(len(offsets)))
    for second, (deliver_ms, phy, size, flags) in out:
        assert size == 100 + phy and flags == 0
        assert second == max(ceil_sec(deliver_ms), start)  # never early; overdue ones at once
    assert [e[0] for _, e in out] == sorted(e[0] for _, e in out)
    assert wheel.size == 0 and wheel.next_work() is None
    wheel.close()


def test_snapshot_restores_the_wheel_and_dead_segments_go(tmp_path):
    wheel = TimingWheel(str(tmp_path / "w"), 1000)
    per_segment = SEGMENT_SIZE // 32
    for i in range(per_segment + 10):  # two segments
        wheel.insert(i, 1, (1000 + 1 + i % 2) * 1000)
    wheel.insert(-1, 1, (1000 + 70_000) * 1000)  # level 2, lives in segment 1
    data = wheel.snapshot(enqueue_offset=77, extra=3)
    again = TimingWheel(str(tmp_path / "w"), 0)
    assert again.restore(data, "snap") == (77, 3)
    assert (again.cur, again.size, again.log_end) == (1000, per_segment + 11, wheel.log_end)
    assert len(again.advance(1001)) == (per_segment + 10 + 1) // 2
    assert len(again.advance(1002)) == (per_segment + 10) // 2
    assert again.dead_segments() == [0]
    again.delete_segments(again.dead_segments())
    assert list(again.segment_files()) == [f"{SEGMENT_SIZE:020d}"]
    rest = []
    while (due := again.advance(1000 + 70_000)) is not None:
        rest.extend(due)  # (cascades at window starts return nothing due)
    assert [e[1] for e in rest] == [-1] and again.size == 0
    wheel.close()
    again.close()


# -- the service --------------------------------------------------------------------------------------------------


@pytest.fixture
async def timer(nursery, tmp_path):
    store = open_store(tmp_path / "store")
    service = TimerService(store, str(tmp_path / "store" / "timerwheel"))
    await nursery.start(service.run)
    yield store, service
    service.close()
    store.close()


async def test_random_times_over_a_day_arrive_in_order_each_within_a_second(timer, autojump_clock):
    store, service = timer
    rng = random.Random(8)
    now = virtual_clock()
    times = [now + rng.randrange(1, DAY_S * 1000) for _ in range(300)]
    for i, t in enumerate(times):
        if i % 2:
            schedule(store, service, "T", b"%d" % i, TIMER_DELIVER_MS=str(t), KEYS=f"k{i}")
        else:
            delay_s = (t - now) // 1000 + 1
            times[i] = now + delay_s * 1000
            schedule(store, service, "T", b"%d" % i, TIMER_DELAY_SEC=str(delay_s), KEYS=f"k{i}")
    assert len(read_all(store, TIMER_TOPIC)) == 300
    await trio.sleep(DAY_S / 2)
    half = read_all(store, "T")
    assert 0 < len(half) < 300
    await trio.sleep(DAY_S / 2 + 2)
    got = read_all(store, "T")
    assert sorted(m.body for m in got) == sorted(b"%d" % i for i in range(300))
    due = [int(m.properties["TIMER_DELIVER_MS"]) for m in got]
    assert due == sorted(due)
    for m, t in zip(got, due):
        assert t == times[int(m.body)]
        assert 0 <= m.store_timestamp - t < 1000, (m.body, m.store_timestamp - t)
        assert m.properties["KEYS"] == f"k{int(m.body)}"
        assert not {"REAL_TOPIC", "REAL_QID", "TIMER_DELAY_SEC"} & set(m.properties)
    assert service.delivered == 300


async def test_thirty_days_with_retention_refreshes(nursery, tmp_path, autojump_clock):
    store = open_store(tmp_path / "store")
    service = TimerService(store, str(tmp_path / "tw"), retention_hours=72)
    await nursery.start(service.run)
    now = virtual_clock()
    schedule(store, service, "T", b"month", TIMER_DELIVER_MS=str(now + 30 * DAY_S * 1000 + 123))
    schedule(store, service, "T", b"hour", TIMER_DELAY_SEC="3600")
    await trio.sleep(3601)
    assert [m.body for m in read_all(store, "T")] == [b"hour"]
    await trio.sleep(30 * DAY_S - 3601 - 5)
    assert [m.body for m in read_all(store, "T")] == [b"hour"]
    await trio.sleep(7)
    month = read_all(store, "T")[1]
    assert month.body == b"month" and 0 <= month.store_timestamp - (now + 30 * DAY_S * 1000 + 123) < 1000
    # parked records were re-appended every half retention (36 h), so none was ever older than that
    assert service.rolled == 30 * 24 // 36
    parked = read_all(store, TIMER_TOPIC)
    assert len(parked) == 2 + service.rolled
    ages = [b.store_timestamp - a.store_timestamp for a, b in zip(parked[1:], parked[2:])]
    assert max(ages) <= 36 * 3600 * 1000 + 1000
    service.close()
    store.close()


async def test_bad_values_and_past_times(timer, autojump_clock):
    store, service = timer
    with pytest.raises(ValueError, match="TIMER_DELIVER_MS must be an absolute time"):
        service.redirect(MessageRecord("T", 0, b"x", properties={"TIMER_DELIVER_MS": "tomorrow"}))
    with pytest.raises(ValueError, match="TIMER_DELAY_SEC must be an integer"):
        service.redirect(MessageRecord("T", 0, b"x", properties={"TIMER_DELAY_SEC": "1.5"}))
    with pytest.raises(ValueError, match="at most 400 days"):
        service.redirect(MessageRecord("T", 0, b"x", properties={"TIMER_DELAY_SEC": str(500 * DAY_S)}))
    assert service.redirect(MessageRecord("T", 0, b"x", properties={"TIMER_DELIVER_MS": str(virtual_clock() - 5)})) is None
    assert service.redirect(MessageRecord("T", 0, b"x", properties={"TIMER_DELAY_SEC": "0"})) is None


async def test_restart_after_downtime_delivers_overdue_ones_once_right_after_start(nursery, tmp_path, autojump_clock):
    root = tmp_path / "store"
    wheel_dir = str(root / "timerwheel")
    store = open_store(root)
    first = TimerService(store, wheel_dir, flush_interval_s=100)
    now = virtual_clock()
    async with trio.open_nursery() as inner:
        await inner.start(first.run)
        for i in range(40):
            schedule(store, first, "T", b"%d" % i, TIMER_DELIVER_MS=str(now + 1000 * (i + 1) * 30))
        await trio.sleep(5 * 30 + 7)  # 5 delivered, a snapshot at 100 s
        await trio.sleep(30 * 2 + 1)  # 2 more: one before the snapshot at 200 s, one (at 210 s) after it
        assert len(read_all(store, "T")) == 7
        inner.cancel_scope.cancel()
    # "kill -9": no close(); the wheel's done log has the delivery made after the last snapshot
    await trio.sleep(600)  # down for 10 minutes: 20 fall due meanwhile
    second = TimerService(store, wheel_dir)
    second.load()
    assert second._skip  # (which deliveries came after the snapshot depends on when its write thread ran)
    await nursery.start(second.run)
    await trio.sleep(0.5)
    got = read_all(store, "T")
    assert [m.body for m in got] == [b"%d" % i for i in range(len(got))]
    assert len(got) == 27
    late = [m.store_timestamp - int(m.properties["TIMER_DELIVER_MS"]) for m in got[7:]]
    assert min(late) > 0 and all(m.store_timestamp == got[7].store_timestamp for m in got[7:])
    await trio.sleep(40 * 30)
    assert [m.body for m in read_all(store, "T")] == [b"%d" % i for i in range(40)]
    second.close()
    # clean restart: nothing pending, nothing repeated
    third = TimerService(store, wheel_dir)
    await nursery.start(third.run)
    await trio.sleep(60)
    assert len(read_all(store, "T")) == 40 and third.wheel.size == 0
    third.close()
    store.close()


def _send(topic, body, props):
    import time

    from pyrmq.remoting.codes import RequestCode
    from pyrmq.remoting.command import RemotingCommand
    from pyrmq.store.format import encode_properties

    fields = {"a": "pg", "b": topic, "c": "TBW102", "d": 4, "e": 0, "f": 0, "g": int(time.time() * 1000),
              "h": 0, "i": encode_properties(props), "j": 0, "k": False}
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, fields, body)


async def test_the_limit_is_timerMaxDelaySec_or_the_plugin_tables_older_key(start_role, remoting_client, tmp_path):
    from pyrmq.kernel.bundles import packaged_bundle_path
    from pyrmq.remoting.codes import ResponseCode

    kernel = await start_role("broker", {"broker.timerMaxDelaySec": 3600})
    addr = kernel.listening["broker"]
    refused = await remoting_client.invoke(addr, _send("TL", b"x", {"TIMER_DELAY_SEC": "7200"}))
    assert refused.code == ResponseCode.MESSAGE_ILLEGAL and "at most 0.0416667 days" in refused.remark
    assert (await remoting_client.invoke(addr, _send("TL", b"x", {"TIMER_DELAY_SEC": "600"}))).code == ResponseCode.SUCCESS
    # [plugins."pyrmq.plugins.broker.timer"] max_delay_days, the key from before, wins when set
    bundle = tmp_path / "older-key.toml"
    bundle.write_text(packaged_bundle_path("broker").read_text()
                      + '\n[plugins."pyrmq.plugins.broker.timer"]\nmax_delay_days = 2\n')
    older = await start_role(str(bundle), {"broker.timerMaxDelaySec": 3600})
    addr = older.listening["broker"]
    assert (await remoting_client.invoke(addr, _send("TL", b"x", {"TIMER_DELAY_SEC": "7200"}))).code == ResponseCode.SUCCESS
    refused = await remoting_client.invoke(addr, _send("TL", b"x", {"TIMER_DELAY_SEC": str(3 * DAY_S)}))
    assert refused.code == ResponseCode.MESSAGE_ILLEGAL and "at most 2 days" in refused.remark
