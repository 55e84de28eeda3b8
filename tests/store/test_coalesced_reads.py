"""``get_message(..., coalesce=True)``, the read behind every pull answer: the same records, limits and statuses as
the per-record read, the views one per run of records adjacent in the commit log."""

from pyrmq.store import GetMessageStatus, MessageRecord, MessageStore, decode_messages
from pyrmq.store.dispatch import TagsCodeFilter
from pyrmq.store.format import java_string_hash

from .conftest import record, small_config

EVERYTHING = TagsCodeFilter(None)


def same_reads(store, topic, queue_id, max_nums=32, message_filter=EVERYTHING):
    """Compare both reads at every offset of the queue (and one past it); the number of records the coalesced read
    returned in total."""
    high = store.get_max_offset_in_queue(topic, queue_id)
    seen = 0
    for offset in range(0, high + 2):
        plain = store.get_message("g", topic, queue_id, offset, max_nums, message_filter)
        runs = store.get_message("g", topic, queue_id, offset, max_nums, message_filter, coalesce=True)
        assert runs.status is plain.status, offset
        assert (runs.next_begin_offset, runs.min_offset, runs.max_offset) == (
            plain.next_begin_offset, plain.min_offset, plain.max_offset), offset
        assert runs.message_count == plain.message_count, offset
        assert runs.buffer_total_size == plain.buffer_total_size, offset
        assert runs.body() == plain.body(), offset
        assert len(runs.buffers) <= len(plain.buffers)
        seen += runs.message_count
    return seen


def test_a_batch_reads_back_as_one_view_with_the_same_bytes(store):
    store.put_messages([record(body=b"m%03d" % i + b"x" * 300) for i in range(40)])
    result = store.get_message("g", "TopicTest", 0, 0, 32, EVERYTHING, coalesce=True)
    assert result.status is GetMessageStatus.FOUND
    assert result.message_count == 32 and len(result.buffers) == 1
    assert [m.body[:4] for m in decode_messages(result.body())] == [b"m%03d" % i for i in range(32)]
    assert result.next_begin_offset == 32
    assert same_reads(store, "TopicTest", 0) > 0


def test_records_of_two_queues_interleaved_read_as_a_view_each(store):
    for i in range(50):
        store.put_message(record(queue_id=i % 2, body=b"%d" % i))
    result = store.get_message("g", "TopicTest", 1, 0, 32, EVERYTHING, coalesce=True)
    assert result.message_count == 25 and len(result.buffers) == 25
    assert [m.body for m in decode_messages(result.body())] == [b"%d" % i for i in range(1, 50, 2)]
    same_reads(store, "TopicTest", 0)
    same_reads(store, "TopicTest", 1)


def test_segment_rollover_and_the_transfer_limits_read_the_same(tmp_path):
    store = MessageStore(small_config(tmp_path / "s", max_transfer_bytes_on_message_in_memory=20_000,
                                      max_transfer_count_on_message_in_memory=7))
    store.load()
    try:
        # 64 KiB segments and ~3 KiB records: the queue crosses several segment ends (blank padding between them)
        for i in range(30):
            store.put_messages([record(body=bytes([65 + i % 26]) * 3000) for _ in range(3)])
            store.put_message(record(queue_id=1, body=b"other"))
        assert len(store.commit_log.queue.files) > 2
        first = store.get_message("g", "TopicTest", 0, 0, 32, EVERYTHING, coalesce=True)
        assert first.message_count == 6  # 20,000 bytes hold six of them, under the count limit of 7
        assert same_reads(store, "TopicTest", 0) >= 90
        assert same_reads(store, "TopicTest", 0, max_nums=1) == store.get_max_offset_in_queue("TopicTest", 0)
    finally:
        store.close()


def test_the_read_bound_stops_a_coalesced_read_as_it_stops_the_plain_one(store):
    ends = []
    for i in range(10):
        store.put_message(record(body=b"%d" % i))
        ends.append(store.commit_log.max_offset)
    store.set_read_bound(ends[3])
    result = store.get_message("g", "TopicTest", 0, 0, 32, EVERYTHING, coalesce=True)
    assert result.message_count == 4 and result.next_begin_offset == 4
    hidden = store.get_message("g", "TopicTest", 0, 4, 32, EVERYTHING, coalesce=True)
    assert hidden.status is GetMessageStatus.OFFSET_OVERFLOW_ONE and hidden.message_count == 0
    same_reads(store, "TopicTest", 0)
    store.set_read_bound(None)
    assert store.get_message("g", "TopicTest", 0, 0, 32, EVERYTHING, coalesce=True).message_count == 10


def test_a_tag_filter_still_filters_a_coalesced_read(store):
    for i in range(20):
        store.put_message(MessageRecord("TopicTest", 0, b"%d" % i, properties={"TAGS": "a" if i % 3 else "b"},
                                        born_timestamp=1, born_host=("10.0.0.7", 1), store_host=("127.0.0.1", 2)))
    only_b = TagsCodeFilter(frozenset({java_string_hash("b")}))
    result = store.get_message("g", "TopicTest", 0, 0, 32, only_b, coalesce=True)
    assert [m.body for m in decode_messages(result.body())] == [b"%d" % i for i in range(0, 20, 3)]
    same_reads(store, "TopicTest", 0, message_filter=only_b)
    same_reads(store, "TopicTest", 0, message_filter=None)
