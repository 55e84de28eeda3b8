import logging
import os
import shutil
import signal
import subprocess
import sys
import threading

from pyrmq.store import MessageStore, PutMessageStatus

from .conftest import read_all, record, small_config


def _fill(config, n, **props):
    s = MessageStore(config)
    s.load()
    results = [s.put_message(record(body=b"m%d" % i + b"." * 300, KEYS=f"key{i}", **props)) for i in range(n)]
    return s, results


def test_recovery_after_a_clean_stop(config):
    s, results = _fill(config, 200)
    assert os.path.exists(config.abort_path)
    s.close()
    assert not os.path.exists(config.abort_path)
    s = MessageStore(config)
    report = s.load()
    try:
        assert not report.abnormal and report.torn == ()
        msgs = read_all(s, "TopicTest", 0)
        assert [m.body for m in msgs] == [b"m%d" % i + b"." * 300 for i in range(200)]
        assert s.max_phy_offset == results[-1].append.end_offset
        assert s.put_message(record()).append.queue_offset == 200
        assert len(s.query_message("TopicTest", "key7", 32, 0, 2**62).buffers) == 1
    finally:
        s.close()


def _crash(store):
    """Leave the files as a killed process would: mapped data on disk, abort file present, nothing closed."""
    store.flush_all()
    os.close(store._lock_fd)  # the kernel drops a dead process's flock
    store._lock_fd = -1


def test_truncated_tail_is_moved_aside_not_lost(config, caplog):
    s, results = _fill(config, 30)
    last = results[-1].append
    _crash(s)
    seg = os.path.join(config.commit_log_dir, "00000000000000000000")
    os.truncate(seg, last.wrote_offset + 150)  # the file was cut inside the last record's body
    s2 = MessageStore(config)
    with caplog.at_level(logging.WARNING):
        report = s2.load()
    try:
        assert report.abnormal
        [torn] = report.torn
        assert torn.offset == last.wrote_offset and torn.size == 150
        assert torn.path == f"{seg}.torn.{last.wrote_offset}" and os.path.getsize(torn.path) == torn.size
        assert f"moved {torn.size} torn bytes at offset {last.wrote_offset}" in caplog.text
        msgs = read_all(s2, "TopicTest", 0)
        assert [m.body for m in msgs] == [b"m%d" % i + b"." * 300 for i in range(29)]  # CQ unit beyond the log dropped
        assert s2.put_message(record(body=b"again")).append.queue_offset == 29
        assert s2.look_message_by_offset(last.wrote_offset).body == b"again"
    finally:
        s2.close()
        s.commit_log.close()


def test_record_interrupted_before_its_size_was_written_is_moved_aside(config):
    s, results = _fill(config, 10)
    _crash(s)
    last = results[-1].append
    seg = os.path.join(config.commit_log_dir, "00000000000000000000")
    with open(seg, "r+b") as f:  # what SIGKILL mid-append leaves: every byte but the leading TOTALSIZE
        f.seek(last.wrote_offset)
        f.write(b"\0\0\0\0")
        f.seek(last.wrote_offset)
        written = f.read(last.wrote_bytes)
    s2 = MessageStore(config)
    report = s2.load()
    try:
        [torn] = report.torn
        assert torn.offset == last.wrote_offset and torn.size == last.wrote_bytes
        with open(torn.path, "rb") as f:
            assert f.read() == written[: torn.size]
        assert len(read_all(s2, "TopicTest", 0)) == 9
    finally:
        s2.close()
        s.commit_log.close()


def test_bit_flipped_tail_fails_its_crc_and_is_moved_aside(config):
    s, results = _fill(config, 30)
    _crash(s)
    victim = results[25].append
    seg = os.path.join(config.commit_log_dir, "00000000000000000000")
    with open(seg, "r+b") as f:
        f.seek(victim.wrote_offset + 88)  # first body byte
        b = f.read(1)
        f.seek(victim.wrote_offset + 88)
        f.write(bytes([b[0] ^ 0x10]))
    s2 = MessageStore(config)
    report = s2.load()
    try:
        [torn] = report.torn
        assert torn.offset == victim.wrote_offset and "CRC" in torn.reason
        assert torn.size == results[-1].append.end_offset - victim.wrote_offset
        assert len(read_all(s2, "TopicTest", 0)) == 25
    finally:
        s2.close()
        s.commit_log.close()


def test_deleted_consume_queue_is_rebuilt_from_the_commit_log(config):
    s, _ = _fill(config, 150)  # several commit-log segments and CQ files
    s.put_message(record(topic="Other", body=b"o"))
    before = [(m.commit_log_offset, m.queue_offset) for m in read_all(s, "TopicTest", 0)]
    s.close()
    shutil.rmtree(os.path.join(config.consume_queue_dir, "TopicTest"))
    s = MessageStore(config)
    s.load()
    try:
        after = [(m.commit_log_offset, m.queue_offset) for m in read_all(s, "TopicTest", 0)]
        assert after == before
        assert [m.body for m in read_all(s, "Other", 0)] == [b"o"]
        assert s.put_message(record()).append.queue_offset == 150
    finally:
        s.close()


def test_lock_prevents_two_stores_on_one_directory(store, config):
    import pytest

    from pyrmq.store import StoreLockedError

    with pytest.raises(StoreLockedError):
        MessageStore(config).load()


def test_sigkill_during_sync_flush_writes_loses_nothing_acknowledged(tmp_path):
    root = str(tmp_path / "crash")
    helper = os.path.join(os.path.dirname(__file__), "crash_writer.py")
    acked: list[tuple[int, str]] = []
    for _round in range(2):
        proc = subprocess.Popen([sys.executable, helper, root], stdout=subprocess.PIPE, text=True)
        deadline = threading.Timer(60, proc.kill)  # a writer that stalls is killed, which ends the read below
        deadline.start()
        try:
            target = len(acked) + 150
            for line in proc.stdout:
                _, qoff, uniq = line.split()
                acked.append((int(qoff), uniq))
                if len(acked) >= target:
                    break
            assert len(acked) >= target, f"the writer stopped after {len(acked)} acknowledged writes"
        finally:
            deadline.cancel()
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            proc.stdout.close()
    s = MessageStore(small_config(root))
    report = s.load()
    try:
        assert report.abnormal
        msgs = read_all(s, "Crash", 0)
        offsets = [m.queue_offset for m in msgs]
        assert offsets == list(range(len(msgs)))  # no gaps, no duplicates
        by_uniq = {}
        for m in msgs:
            by_uniq.setdefault(m.uniq_key, []).append(m.queue_offset)
        for qoff, uniq in acked:
            assert by_uniq.get(uniq) == [qoff], uniq  # every acknowledged append, exactly once, where acked
        r = s.put_message(record(topic="Crash"))
        assert r.status is PutMessageStatus.PUT_OK and r.append.queue_offset == len(msgs)
        for _, uniq in acked[-3:]:  # the index, rebuilt past the last durable header, finds them once
            assert len(s.query_message("Crash", uniq, 4, 0, 2**62).buffers) == 1
            assert len(s.query_message("Crash", "k" + uniq, 4, 0, 2**62).buffers) == 1
    finally:
        s.close()
