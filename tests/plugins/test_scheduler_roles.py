"""The delay schedulers and the broker's role (issue 25, defect 1): delivery only while master, the delivery time read
from the record, progress taken over from the replicated store, truncations.

Real stores on pytest-trio's autojump clock (the stores' clock follows trio's virtual time), replicated the way the
HA slave does it (``append_raw`` of the master's commit-log bytes), each with the broker's tags-code resolver and the
schedulers' copy watchers as its dispatchers, as the broker core sets a store up.
"""

from __future__ import annotations

import logging

import trio

from pyrmq.plugins.broker.core import tags_code_resolver
from pyrmq.plugins.broker.delay_levels import DelayLevelService
from pyrmq.plugins.broker.delay_levels.replica import CopyWatcher as DelayCopyWatcher
from pyrmq.plugins.broker.timer import TIMER_TOPIC, TimerService
from pyrmq.plugins.broker.timer.replica import CopyWatcher as TimerCopyWatcher
from pyrmq.remoting.vocabulary import SCHEDULE_TOPIC
from pyrmq.store import GetMessageStatus, MessageRecord, MessageStore, StoreConfig, decode_messages

BASE_MS = 1_700_000_000_000
LEVELS = (10_000, 30_000)


def virtual_clock() -> int:
    return BASE_MS + round(trio.current_time() * 1000)


class Replica:
    """A store with its timer and delay levels, as a broker sets them up (resolver and copy watchers)."""

    def __init__(self, root, *, master: bool, resolver: bool = True) -> None:
        config = StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=4 << 20,
                             mapped_file_size_consume_queue=20 * 4096, warm_mapped_file_enable=False)
        self.store = MessageStore(config, clock=virtual_clock)
        self.timer = TimerService(self.store, str(root / "timerwheel"), deliver=master)
        self.delay = DelayLevelService(self.store, LEVELS, str(root / "config"), deliver=master)
        if resolver:
            self.store.set_tags_code_resolver(tags_code_resolver([self.delay, self.timer]))
        self.store.add_dispatcher(TimerCopyWatcher(self.timer))
        self.store.add_dispatcher(DelayCopyWatcher(self.delay))
        self.store.load()

    async def start(self, nursery) -> None:
        await nursery.start(self.timer.run)
        await nursery.start(self.delay.run)

    def set_role(self, master: bool) -> None:
        self.timer.set_role(master)
        self.delay.set_role(master)

    def send(self, topic, body, **props) -> MessageRecord:
        record = MessageRecord(topic, 0, body, properties={"UNIQ_KEY": f"U-{body.decode()}", **props},
                               born_timestamp=virtual_clock())
        service = self.delay if "DELAY" in props else self.timer
        parked = service.redirect(record) or record
        assert self.store.put_message(parked).status.is_ok
        return parked

    def replicate_to(self, other: Replica) -> None:
        """What the HA slave does: the master's commit-log bytes appended at the same offsets, then dispatched."""
        src, dst = self.store, other.store
        while dst.commit_log.max_offset < src.commit_log.max_offset:
            data = src.get_commit_log_data(dst.commit_log.max_offset, 1 << 20)
            assert dst.append_raw(dst.commit_log.max_offset, bytes(data))

    def close(self) -> None:
        self.timer.close()
        self.delay.close()
        self.store.close()


def read_all(store, topic, queue_id=0):
    out, offset = [], 0
    while True:
        r = store.get_message("g", topic, queue_id, offset, 32)
        if r.status is not GetMessageStatus.FOUND:
            return out
        out.extend(decode_messages(r.body()))
        offset = r.next_begin_offset


def due_of(store, copy) -> int:
    """When a delivered copy was due: TIMER_DELIVER_MS, or its parked record's store time + its level's delay."""
    if "TIMER_PARKED_OFFSET" in copy.properties:
        return int(copy.properties["TIMER_DELIVER_MS"])
    parked = store.look_message_by_offset(int(copy.properties["DELAY_PARKED_OFFSET"]))
    return parked.store_timestamp + LEVELS[parked.queue_id]


def assert_each_once_none_early(store, topic, bodies):
    got = read_all(store, topic)
    assert sorted(m.body for m in got) == sorted(bodies)
    for m in got:
        assert m.store_timestamp >= due_of(store, m), (m.body, m.store_timestamp - due_of(store, m))


async def test_delivery_stops_when_the_broker_stops_being_master_and_resumes_without_a_new_message(
        nursery, tmp_path, autojump_clock, caplog):
    broker = Replica(tmp_path / "b", master=True)
    await broker.start(nursery)
    broker.send("T", b"t1", TIMER_DELAY_SEC="10")
    broker.send("T", b"d1", DELAY="1")
    # deposed: its store refuses writes (a failover replica's is read-only) and the schedulers stop
    broker.store.set_read_only("not the master")
    broker.set_role(False)
    with caplog.at_level(logging.WARNING):
        await trio.sleep(60)
    assert read_all(broker.store, "T") == []
    assert broker.timer.delivered == broker.delay.delivered == 0
    # no delivery was even tried against the read-only store (no retry loop)
    assert not [r for r in caplog.records if "failed" in r.getMessage()]
    # elected again: what fell due meanwhile is delivered at once, with no new message to wake anything
    broker.store.set_read_only(None)
    broker.set_role(True)
    await trio.sleep(1.5)
    assert_each_once_none_early(broker.store, "T", [b"t1", b"d1"])
    broker.close()


async def test_the_timer_reads_the_delivery_time_from_the_record(nursery, tmp_path, autojump_clock):
    """A store whose timer-queue units hold the hash of TAGS (dispatched without the resolver: an older pyrmq, or
    another broker's store): the timer still delivers at TIMER_DELIVER_MS, never early."""
    broker = Replica(tmp_path / "b", master=True, resolver=False)
    now = virtual_clock()
    for body, tags, delay_s in ((b"x", "A", 30), (b"y", "zzz", 90)):
        record = MessageRecord(TIMER_TOPIC, 0, body, properties={
            "TAGS": tags, "TIMER_DELIVER_MS": str(now + delay_s * 1000), "REAL_TOPIC": "T", "REAL_QID": "0"})
        assert broker.store.put_message(record).status.is_ok  # no preset tags code: the unit is hash(TAGS)
    assert broker.store.consume_queues.get(TIMER_TOPIC, 0).get_unit(0)[2] == 65  # (Java's "A".hashCode())
    await broker.start(nursery)
    await trio.sleep(29)
    assert read_all(broker.store, "T") == []
    await trio.sleep(62)
    got = read_all(broker.store, "T")
    assert [m.body for m in got] == [b"x", b"y"]
    for m in got:
        assert 0 <= m.store_timestamp - int(m.properties["TIMER_DELIVER_MS"]) < 1000
    broker.close()


async def test_a_promoted_replica_delivers_what_its_master_had_not_each_once(nursery, tmp_path, autojump_clock):
    """The master delivers the first of two batches (timer and delay levels) and dies; its replica, elected,
    delivers the second batch when due, and not the first again: it saw the master's copies replicated."""
    master = Replica(tmp_path / "m", master=True)
    replica = Replica(tmp_path / "r", master=False)
    async with trio.open_nursery() as on_master:
        await master.start(on_master)
        await replica.start(nursery)
        first = [(b"t10-%d" % i, {"TIMER_DELAY_SEC": "10"}) for i in range(3)] + [(b"d10-%d" % i, {"DELAY": "1"}) for i in range(2)]
        second = [(b"t30-%d" % i, {"TIMER_DELAY_SEC": "30"}) for i in range(3)] + [(b"d30-%d" % i, {"DELAY": "2"}) for i in range(2)]
        for body, props in first + second:
            master.send("T", body, **props)
        master.replicate_to(replica)
        # the replica's units of the parked records are the master's (the same resolver at the append and replicated)
        for topic, queue_id in ((TIMER_TOPIC, 0), (SCHEDULE_TOPIC, 0), (SCHEDULE_TOPIC, 1)):
            cq_m, cq_r = master.store.consume_queues.get(topic, queue_id), replica.store.consume_queues.get(topic, queue_id)
            assert [cq_r.get_unit(i) for i in range(cq_r.max_offset)] == [cq_m.get_unit(i) for i in range(cq_m.max_offset)]
        await trio.sleep(15)
        assert len(read_all(master.store, "T")) == 5
        master.replicate_to(replica)
        assert replica.timer.delivered == replica.delay.delivered == 0
        on_master.cancel_scope.cancel()  # the master dies
    replica.set_role(True)
    await trio.sleep(20)
    assert_each_once_none_early(replica.store, "T", [body for body, _ in first + second])
    assert (replica.timer.delivered, replica.delay.delivered) == (3, 2)
    # its progress: nothing left to deliver, nothing repeated later
    await trio.sleep(60)
    assert len(read_all(replica.store, "T")) == 10
    replica.close()
    master.store.close()


async def test_a_replica_that_loses_copies_to_a_truncation_delivers_them_once_elected(nursery, tmp_path, autojump_clock):
    """The master's copies reached this replica but no other; another replica was elected and this one truncated
    its log to the new master's history: the parked records whose copies were cut are due again here."""
    master = Replica(tmp_path / "m", master=True)
    replica = Replica(tmp_path / "r", master=False)
    async with trio.open_nursery() as on_master:
        await master.start(on_master)
        await replica.start(nursery)
        for i in range(3):
            master.send("T", b"t-%d" % i, TIMER_DELAY_SEC="10")
            master.send("T", b"d-%d" % i, DELAY="1")
        master.replicate_to(replica)
        cut = replica.store.commit_log.max_offset  # the new master's history ends here
        await trio.sleep(12)
        assert len(read_all(master.store, "T")) == 6
        master.replicate_to(replica)
        await trio.sleep(1)
        on_master.cancel_scope.cancel()
    assert len(read_all(replica.store, "T")) == 6  # the master's copies, replicated
    assert replica.store.truncate_replica(cut) > 0
    assert read_all(replica.store, "T") == []
    replica.set_role(True)
    await trio.sleep(2)
    assert_each_once_none_early(replica.store, "T", [b"t-%d" % i for i in range(3)] + [b"d-%d" % i for i in range(3)])
    replica.close()
    master.store.close()
