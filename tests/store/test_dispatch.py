"""The store's one dispatcher list: order, what each dispatcher sees, failures, recovery and HA raw appends."""

from __future__ import annotations

import logging
import os

import pytest

from pyrmq.plugins.broker.offsets import ConsumerOffsetManager
from pyrmq.store import MessageRecord, MessageStore, StoreError
from pyrmq.store.format import TRANSACTION_COMMIT_TYPE, encode_properties, TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE

from .conftest import read_all, record, small_config


class Recorder:
    """A feature's dispatcher: remembers what it saw and what the consume queue held at that moment."""

    def __init__(self, name, order, log, store=None):
        self.name, self.order, self.log, self.store = name, order, log, store

    def dispatch(self, request):
        readable = None
        if self.store is not None:
            readable = self.store.get_max_offset_in_queue(request.topic, request.queue_id) > request.queue_offset
        self.log.append((self.name, request.commit_log_offset, request.queue_offset, request.sys_flag, readable))


def test_the_stores_own_dispatchers_come_first_and_features_follow_by_order(tmp_path):
    log = []
    late, early, tie = Recorder("late", 20, log), Recorder("early", 5, log), Recorder("tie", 10, log)
    store = MessageStore(small_config(tmp_path), dispatchers=[late, early, tie])
    assert [d.name for d in store.dispatchers] == ["consume_queue", "early", "index", "tie", "late"]
    no_index = MessageStore(small_config(tmp_path / "b", message_index_enable=False))
    assert [d.name for d in no_index.dispatchers] == ["consume_queue"]
    with pytest.raises(ValueError, match="already added"):
        store.add_dispatcher(late)
    with pytest.raises(TypeError, match="name and an int order"):
        store.add_dispatcher(object())


def test_put_message_and_put_messages_dispatch_each_record_once_in_order(tmp_path):
    log = []
    store = MessageStore(small_config(tmp_path))
    store.add_dispatcher(Recorder("second", 30, log))
    store.add_dispatcher(Recorder("first", 20, log, store))
    store.load()
    try:
        one = store.put_message(record(queue_id=1, body=b"a"))
        batch = store.put_messages([record(queue_id=1, body=b"b"), record(queue_id=1, body=b"c")])
        offsets = [one.append.wrote_offset, *batch.append.offsets]
        # each record once, both dispatchers in order, after the consume queue made it readable; a batch goes to
        # each dispatcher whole (Dispatchers.dispatch_batch), so "first" sees both records before "second" does
        seen = [(name, offset, queue_offset, 0, True if name == "first" else None)
                for queue_offset, offset in enumerate(offsets) for name in ("first", "second")]
        assert log == [seen[0], seen[1], seen[2], seen[4], seen[3], seen[5]]
        assert [m.body for m in read_all(store, "TopicTest", 1)] == [b"a", b"b", b"c"]
    finally:
        store.close()


class Requests:
    """A feature's dispatcher that takes records: keeps every request it is handed."""

    def __init__(self, name, order):
        self.name, self.order, self.requests = name, order, []

    def dispatch(self, request):
        self.requests.append(request)


def test_a_batch_put_reaches_a_dispatcher_that_takes_records_as_one_request_a_record(tmp_path):
    # the batch puts hand the store's own dispatchers columns (DispatchBatch); a feature's dispatcher without
    # dispatch_columns still gets one request per record, with what put_message would have given it
    single, entries = Requests("single", 20), Requests("entries", 20)
    stores = [MessageStore(small_config(tmp_path / name), dispatchers=[d]) for name, d in (("a", single), ("b", entries))]
    for store in stores:
        store.load()
    try:
        props = [{"TAGS": "TagA", "KEYS": "order-1 order-2", "UNIQ_KEY": "7F0000010FA318B4AAC200000000000A"},
                 {"UNIQ_KEY": "7F0000010FA318B4AAC200000000000B", "color": "red"}, {"TAGS": "TagB", "KEYS": "order-3"}]
        records = [MessageRecord("T", 3, b"body%d" % i, properties=p, born_timestamp=1, born_host=("10.0.0.2", 1),
                                 store_host=("10.0.0.1", 2)) for i, p in enumerate(props)]
        for r in records:
            assert stores[0].put_message(r).is_ok
        entry_list = [(0, r.body, r.properties_bytes or encode_properties(r.properties).encode()) for r in records]
        result = stores[1].put_entries("T", 3, entry_list, 0, 1, ("10.0.0.2", 1), ("10.0.0.1", 2))
        assert result.is_ok
        assert len(entries.requests) == 3
        for a, b in zip(single.requests, entries.requests):
            assert (a.topic, a.queue_id, a.commit_log_offset, a.msg_size, a.tags_code, a.queue_offset, a.keys or None,
                    a.uniq_key, a.sys_flag, a.properties) == (
                    b.topic, b.queue_id, b.commit_log_offset, b.msg_size, b.tags_code, b.queue_offset, b.keys,
                    b.uniq_key, b.sys_flag, b.properties)
        assert {b.store_timestamp for b in entries.requests} == {result.append.store_timestamp}
        # and the store's own dispatchers indexed and queued the batch
        everything = (0, 2**62)
        assert len(stores[1].query_message("T", "order-2", 32, *everything).buffers) == 1
        assert len(stores[1].query_message("T", "7F0000010FA318B4AAC200000000000B", 32, *everything).buffers) == 1
        assert [m.body for m in read_all(stores[1], "T", 3)] == [b"body0", b"body1", b"body2"]
    finally:
        for store in stores:
            store.close()


def test_only_the_consume_queue_skips_prepared_and_rolled_back_records(tmp_path):
    log = []
    store = MessageStore(small_config(tmp_path), dispatchers=[Recorder("feature", 20, log)])
    store.load()
    try:
        for flag, body in ((TRANSACTION_PREPARED_TYPE, b"half"), (TRANSACTION_ROLLBACK_TYPE, b"rolled back"),
                           (TRANSACTION_COMMIT_TYPE, b"committed"), (0, b"plain")):
            assert store.put_message(MessageRecord("T", 0, body, sys_flag=flag)).is_ok
        # a feature sees every record (a transaction plugin needs the half messages); consumers see two
        assert [entry[3] for entry in log] == [TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE,
                                               TRANSACTION_COMMIT_TYPE, 0]
        assert [m.body for m in read_all(store, "T", 0)] == [b"committed", b"plain"]
    finally:
        store.close()


def test_a_failing_feature_dispatcher_is_logged_and_the_put_still_succeeds(tmp_path, caplog):
    log = []

    class Broken:
        name, order = "broken", 15

        def dispatch(self, request):
            raise RuntimeError("boom")

    store = MessageStore(small_config(tmp_path), dispatchers=[Broken(), Recorder("after", 20, log)])
    store.load()
    try:
        with caplog.at_level(logging.ERROR):
            result = store.put_message(record(body=b"x"))
        assert result.is_ok and [m.body for m in read_all(store, "TopicTest", 0)] == [b"x"]
        assert len(log) == 1  # the dispatcher after the broken one still ran
        assert "dispatcher broken failed on the record at 0" in caplog.text
    finally:
        store.close()


def test_a_dispatcher_added_after_load_is_refused(store):
    with pytest.raises(StoreError, match="after the store was loaded"):
        store.add_dispatcher(Recorder("late", 20, []))


def test_recovery_re_dispatches_what_a_feature_lacks_with_the_recovering_flag(tmp_path):
    cfg = small_config(tmp_path)
    with MessageStore(cfg) as store:
        for i in range(3):
            store.put_message(record(body=b"%d" % i))

    class Catching(Recorder):
        def __init__(self, log):
            super().__init__("catching-up", 20, log)
            self.flags = []

        def has_dispatched(self, topic, queue_id, queue_offset, commit_log_offset, sys_flag):
            return queue_offset < 1  # it had persisted the first record only

        def dispatch(self, request):
            self.flags.append(request.recovering)
            super().dispatch(request)

    log = []
    feature = Catching(log)
    store = MessageStore(cfg, dispatchers=[feature])
    store.load()
    try:
        assert [entry[2] for entry in log] == [1, 2] and feature.flags == [True, True]
        assert store.put_message(record(body=b"3")).append.queue_offset == 3
        assert feature.flags[-1] is False
    finally:
        store.close()


def test_a_slave_appends_raw_bytes_and_dispatches_the_records_they_complete(tmp_path):
    master = MessageStore(small_config(tmp_path / "master"))
    log = []
    slave = MessageStore(small_config(tmp_path / "slave"), dispatchers=[Recorder("feature", 20, log)])
    master.load()
    slave.load()
    try:
        for i in range(40):  # more than one 64 KiB segment
            master.put_message(record(queue_id=i % 2, body=bytes(3000), KEYS=f"k{i}"))
        assert not slave.append_raw(100, b"x")  # not the slave's end: refused
        offset = 0
        while offset < master.max_phy_offset:
            data = master.get_commit_log_data(offset, 5000)  # chunks that split records
            assert slave.append_raw(offset, data)
            offset += len(data)
        assert slave.max_phy_offset == master.max_phy_offset and len(log) == 40
        for queue_id in (0, 1):
            assert read_all(slave, "TopicTest", queue_id) == read_all(master, "TopicTest", queue_id)
        assert len(slave.query_message("TopicTest", "k7", 32, 0, 2**62).buffers) == 1
        # the slave's next queue offsets follow what it replicated (what it would assign as master)
        assert slave.put_message(record(queue_id=1, body=b"next")).append.queue_offset == 20
    finally:
        master.close()
        slave.close()


def test_a_failing_consume_queue_fails_the_put_and_later_dispatchers_do_not_see_the_record(tmp_path):
    log = []
    cfg = small_config(tmp_path)
    store = MessageStore(cfg, dispatchers=[Recorder("feature", 20, log)])
    store.load()
    try:
        os.makedirs(cfg.consume_queue_dir, exist_ok=True)
        with open(os.path.join(cfg.consume_queue_dir, "Blocked"), "wb") as f:
            f.write(b"a file where the queue directory goes")
        with pytest.raises(OSError):
            store.put_message(record(topic="Blocked", body=b"x"))
        assert log == []
        assert store.put_message(record(body=b"fine")).is_ok and len(log) == 1
    finally:
        store.close()


def test_a_failover_replica_is_read_only_cuts_a_half_record_and_truncates_to_an_epoch_start(tmp_path):
    master = MessageStore(small_config(tmp_path / "master"))
    replica = MessageStore(small_config(tmp_path / "replica"))
    master.load()
    replica.load()
    try:
        ends = [master.put_message(record(queue_id=0, body=bytes(3000), KEYS=f"k{i}")).append.end_offset
                for i in range(30)]
        replica.set_read_only("replica 2 of broker-a is not the elected master")
        refused = replica.put_message(record(body=b"x"))
        assert refused.status.name == "SERVICE_NOT_AVAILABLE" and "replica 2" in refused.remark
        refused = replica.put_entries("TopicTest", 0, [(0, b"y", b"")], 0, 0, ("127.0.0.1", 1), ("127.0.0.1", 2))
        assert refused.status.name == "SERVICE_NOT_AVAILABLE" and "replica 2" in refused.remark
        offset = 0
        stop = ends[9] + 100  # the replica got 10 whole records and the first 100 bytes of the 11th (same segment)
        while offset < stop:
            data = master.get_commit_log_data(offset, min(5000, stop - offset))
            assert replica.append_raw(offset, data)
            offset += len(data)
        assert replica.max_phy_offset == stop
        assert replica.cut_partial_tail() == 100 and replica.max_phy_offset == ends[9]
        assert len(read_all(replica, "TopicTest", 0)) == 10
        # an election decided that the history after record 5 is not the group's: the replica drops it
        assert replica.truncate_replica(ends[5]) == ends[9] - ends[5]
        assert replica.max_phy_offset == ends[5]
        assert len(read_all(replica, "TopicTest", 0)) == 6
        assert replica.query_message("TopicTest", "k8", 32, 0, 2**62).buffers == []
        assert len(replica.query_message("TopicTest", "k5", 32, 0, 2**62).buffers) == 1
        # consumer offsets committed past the cut point at the new end; the others stay (issue 16: "clamped")
        offsets = ConsumerOffsetManager()
        offsets.commit("shop", "TopicTest", 0, 9)
        offsets.commit("audit", "TopicTest", 0, 4)
        assert offsets.clamp(replica.get_max_offset_in_queue) == 1
        assert (offsets.query("shop", "TopicTest", 0), offsets.query("audit", "TopicTest", 0)) == (6, 4)
        # it follows the elected master from there, byte for byte
        offset = ends[5]
        while offset < master.max_phy_offset:
            data = master.get_commit_log_data(offset, 5000)
            assert replica.append_raw(offset, data)
            offset += len(data)
        assert read_all(replica, "TopicTest", 0) == read_all(master, "TopicTest", 0)
        replica.set_read_only(None)
        assert replica.put_message(record(queue_id=0, body=b"as master")).append.queue_offset == 30
    finally:
        master.close()
        replica.close()


def test_a_read_bound_hides_the_records_that_end_beyond_it(store):
    """Automatic failover's confirm offset: a unit whose record ends beyond the read bound is not readable yet (as at
    the end of the queue), the ones before it are; every stored message is still counted by the queue's max offset."""
    from pyrmq.store import GetMessageStatus

    ends = [store.put_message(record(queue_id=0, body=bytes(100), KEYS=f"k{i}")).append.end_offset for i in range(5)]
    confirm = ends[1]
    store.set_read_bound(confirm)
    result = store.get_message("g", "TopicTest", 0, 0, 32)
    assert (result.status, result.message_count, result.next_begin_offset) == (GetMessageStatus.FOUND, 2, 2)
    result = store.get_message("g", "TopicTest", 0, 2, 32)
    assert (result.status, result.message_count, result.next_begin_offset) == (GetMessageStatus.OFFSET_OVERFLOW_ONE, 0, 2)
    assert store.get_max_offset_in_queue("TopicTest", 0) == 5
    confirm = ends[3] - 1  # the 4th record not whole below the bound
    store.advance_read_bound(confirm)
    assert store.get_message("g", "TopicTest", 0, 2, 32).queue_offsets == [2]
    store.set_read_bound(None)
    assert store.get_message("g", "TopicTest", 0, 2, 32).queue_offsets == [2, 3, 4]


class Watcher(Recorder):
    """A dispatcher that also wants to know when the read bound changes (the broker's long-polling wake-up does)."""

    def visible(self, bound):
        self.log.append(("visible", bound))


def test_the_read_bound_is_the_stores_own_and_it_tells_dispatchers_when_it_moves(tmp_path):
    from pyrmq.store import NotVisibleError

    log = []
    store = MessageStore(small_config(tmp_path), dispatchers=[Watcher("watcher", 20, log)])
    store.load()
    try:
        ends = [store.put_message(record(queue_id=0, body=bytes(100), KEYS=f"k{i}")).append.end_offset for i in range(4)]
        assert store.read_bound is None and all(entry[0] == "watcher" for entry in log)  # appends: no visible event
        log.clear()
        store.advance_read_bound(ends[2])  # no bound: nothing to advance
        assert store.read_bound is None and log == []
        store.set_read_bound(ends[0])
        store.advance_read_bound(ends[2])
        store.advance_read_bound(ends[1])  # never back
        store.advance_read_bound(ends[2])  # unchanged: no event
        assert store.read_bound == ends[2] and log == [("visible", ends[0]), ("visible", ends[2])]
        # a client's query or read by offset (visible_only) stops at the bound, the broker's own lookups do not
        assert len(store.query_message("TopicTest", "k2", 32, 0, 2**62, visible_only=True).buffers) == 1
        assert store.query_message("TopicTest", "k3", 32, 0, 2**62, visible_only=True).buffers == []
        assert len(store.query_message("TopicTest", "k3", 32, 0, 2**62).buffers) == 1
        with pytest.raises(NotVisibleError, match="not confirmed by every in-sync replica yet"):
            store.look_message_bytes_by_offset(ends[2], visible_only=True)
        assert store.look_message_bytes_by_offset(ends[2]) is not None
        assert store.look_message_bytes_by_offset(ends[1], visible_only=True) is not None
        # a truncated replica's bound is never beyond its end
        store.truncate_replica(ends[1])
        assert store.read_bound == ends[1] and log[-1] == ("visible", ends[1])
        store.set_read_bound(None)
        assert log[-1] == ("visible", None) and store.look_message_bytes_by_offset(ends[0], visible_only=True) is not None
    finally:
        store.close()
