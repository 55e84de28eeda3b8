import os
import time

from pyrmq.store import GetMessageStatus, MessageStore, PutMessageStatus

from .conftest import read_all, record, small_config



def _now_hours() -> str:
    """deleteWhen covering now and the next hour, taken when the test runs (a run may cross an hour boundary)."""
    hour = time.localtime().tm_hour
    return "%02d;%02d" % (hour, (hour + 1) % 24)


def _other_hour() -> str:
    return "%02d" % ((time.localtime().tm_hour + 12) % 24)


def _store(tmp_path, usage, **kw):
    cfg = small_config(tmp_path, mapped_file_size_consume_queue=20 * 16, **kw)
    s = MessageStore(cfg, disk_usage=lambda path: usage[0])
    s.load()
    for i in range(200):
        s.put_message(record(body=b"%d" % i + b"." * 1000))
    s.flush_all()
    return s


def _segments(s):
    return sorted(os.listdir(s.config.commit_log_dir))


def _age(s, paths, hours):
    old = time.time() - hours * 3600
    for p in paths:
        os.utime(p, (old, old))


def test_expired_segments_go_at_delete_time_then_their_queue_files(tmp_path):
    usage = [0.10]
    s = _store(tmp_path, usage, delete_when=_now_hours(), file_reserved_time=72)
    try:
        files = [mf.path for mf in s.commit_log.queue.files]
        assert len(files) == 4
        _age(s, files[:2], 73)
        report = s.retention.run_once()
        assert report.time_up and report.deleted_segments == files[:2]
        assert s.min_phy_offset == 2 * 65536
        min_offset = s.get_min_offset_in_queue("TopicTest", 0)
        assert min_offset > 0
        r = s.get_message("g", "TopicTest", 0, 0, 32)
        assert r.status is GetMessageStatus.OFFSET_TOO_SMALL and r.next_begin_offset == min_offset
        msgs = read_all(s, "TopicTest", 0, min_offset)
        assert msgs[0].commit_log_offset >= s.min_phy_offset and msgs[-1].queue_offset == 199
        assert report.deleted_queue_files > 0
        assert s.get_earliest_message_time("TopicTest", 0) == msgs[0].store_timestamp
    finally:
        s.close()


def test_nothing_is_deleted_outside_delete_time_while_the_disk_is_fine(tmp_path):
    usage = [0.10]
    s = _store(tmp_path, usage, delete_when=_other_hour())
    try:
        _age(s, [mf.path for mf in s.commit_log.queue.files], 100)
        report = s.retention.run_once()
        assert report.deleted_segments == [] and len(_segments(s)) == 4
        usage[0] = 0.80  # past 75 %: expired segments go now, whatever the hour
        report = s.retention.run_once()
        assert len(report.deleted_segments) == 3  # never the segment being written
    finally:
        s.close()


def test_disk_ratio_forces_deletion_of_unexpired_segments_until_under_the_limit(tmp_path):
    usage = [0.10]
    s = _store(tmp_path, usage, delete_when=_other_hour())
    try:
        # unexpired, 80 %: nothing may go (only expired files are cleaned below 85 %)
        usage[0] = 0.80
        assert s.retention.run_once().deleted_segments == []

        def shrinking(path):
            return 0.60 + 0.10 * len(s.commit_log.queue.files)  # 4 segments -> 1.0 ... 1 segment -> 0.70

        s.retention.disk_usage = shrinking
        report = s.retention.run_once()
        assert report.forced and len(report.deleted_segments) == 3
        assert len(_segments(s)) == 1
    finally:
        s.close()


def test_full_disk_refuses_writes_with_a_clear_status_and_keeps_data(tmp_path):
    usage = [0.10]
    s = _store(tmp_path, usage, delete_when=_other_hour())
    try:
        before = s.max_phy_offset
        usage[0] = 0.95
        s.retention.run_once()
        r = s.put_message(record())
        assert r.status is PutMessageStatus.SERVICE_NOT_AVAILABLE and "disk full" in r.remark
        assert s.put_messages([record()]).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
        assert s.max_phy_offset == before
        usage[0] = 0.50
        s.retention.run_once()
        r = s.put_message(record(body=b"after"))
        assert r.status is PutMessageStatus.PUT_OK
        msgs = read_all(s, "TopicTest", 0, s.get_min_offset_in_queue("TopicTest", 0))
        assert msgs[-1].body == b"after" and msgs[-1].queue_offset == 200
        assert all(m.crc_ok() for m in msgs)
    finally:
        s.close()
