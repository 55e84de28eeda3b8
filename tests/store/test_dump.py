import io
import os

from pyrmq.store import MessageStore
from pyrmq.store.dump import main_dump

from .conftest import record, small_config


def _store(tmp_path):
    cfg = small_config(tmp_path)
    s = MessageStore(cfg)
    s.load()
    rs = [s.put_message(record(body=b"body-%d" % i + b"." * 900, TAGS="TagA", KEYS=f"k{i}")) for i in range(80)]
    s.close()
    return cfg, rs


def test_dump_prints_segments_queues_and_index(tmp_path):
    cfg, rs = _store(tmp_path)
    out = io.StringIO()
    assert main_dump(cfg.store_path_root_dir, True, out) == 0
    text = out.getvalue()
    assert "segment 00000000000000000000" in text and "segment 00000000000000065536" in text
    assert f"@{rs[1].append.wrote_offset} MSG size={rs[1].append.wrote_bytes} topic=TopicTest queueId=0 queueOffset=1" in text
    assert "BLANK" in text and "TAGS=TagA" in text
    assert "queue TopicTest/0" in text and f"#0 phy=0 size={rs[0].append.wrote_bytes}" in text
    assert "index " in text and "indexCount=81" in text
    assert text.rstrip().endswith("verify: OK")


def test_verify_catches_a_flipped_bit(tmp_path):
    cfg, rs = _store(tmp_path)
    victim = rs[7].append.wrote_offset
    path = os.path.join(cfg.commit_log_dir, "00000000000000000000")
    with open(path, "r+b") as f:
        f.seek(victim + 90)
        b = f.read(1)
        f.seek(victim + 90)
        f.write(bytes([b[0] ^ 1]))
    out = io.StringIO()
    assert main_dump(cfg.store_path_root_dir, True, out) == 1
    assert f"record @{victim}: body CRC mismatch" in out.getvalue()
    assert "1 problem(s) found" in out.getvalue()


def test_verify_catches_a_queue_unit_pointing_nowhere(tmp_path):
    cfg, rs = _store(tmp_path)
    cq = os.path.join(cfg.consume_queue_dir, "TopicTest", "0", "00000000000000000000")
    with open(cq, "r+b") as f:
        f.seek(3 * 20)
        f.write((rs[3].append.wrote_offset + 1).to_bytes(8, "big"))
    out = io.StringIO()
    assert main_dump(cfg.store_path_root_dir, True, out) == 1
    assert "queue TopicTest/0 #3" in out.getvalue()


def test_not_a_store(tmp_path):
    out = io.StringIO()
    assert main_dump(str(tmp_path), False, out) == 2
