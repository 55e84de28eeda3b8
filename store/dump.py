"""``pyrmq store dump DIR [--verify]``: print a store directory readably, read-only.

Lists commit-log segments and their records, consume queues and their units, index files and the checkpoint.
``--verify`` checks every record's body CRC and that every consume-queue unit points at a record of its topic,
queue and queue offset with the right size; the exit status is 1 when anything is wrong.
"""

from __future__ import annotations

import mmap
import os
import sys
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from .commitlog import END_OF_FILE, RecordHeader, read_record_header
from .consume_queue import BLANK_SIZE
from .format import (
    BLANK,
    CHECKPOINT,
    CQ_UNIT,
    INDEX_ENTRY,
    INDEX_HEADER,
    decode_properties,
)
from .mapped_file import is_segment_name


def _ts(ms: int) -> str:
    if ms <= 0:
        return str(ms)
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000)) + f".{ms % 1000:03d}"


@contextmanager
def _mapped(path: str) -> Iterator[mmap.mmap | bytes]:
    size = os.path.getsize(path)
    if size == 0:
        yield b""
        return
    with open(path, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            yield mm
        finally:
            mm.close()


class _Dumper:
    def __init__(self, root: str, verify: bool, out: TextIO) -> None:
        self.root = root
        self.verify = verify
        self.out = out
        self.problems = 0
        self.segments: list[tuple[int, str, int]] = []  # (start, path, size)

    def p(self, line: str) -> None:
        self.out.write(line + "\n")

    def problem(self, line: str) -> None:
        self.problems += 1
        self.p("  !! " + line)

    # -- commit log --------------------------------------------------------------------------------------------
    def commit_log(self) -> None:
        d = os.path.join(self.root, "commitlog")
        names = sorted(n for n in os.listdir(d) if is_segment_name(n)) if os.path.isdir(d) else []
        others = sorted(n for n in os.listdir(d) if not is_segment_name(n)) if os.path.isdir(d) else []
        self.p(f"commitlog/ ({len(names)} segments)")
        for name in names:
            path = os.path.join(d, name)
            self.segments.append((int(name), path, os.path.getsize(path)))
        for start, path, size in self.segments:
            self.p(f"segment {os.path.basename(path)}  start={start} size={size}")
            with _mapped(path) as mm:
                self._segment(mm, start, size)
        for name in others:
            self.p(f"  (other file) {name}  {os.path.getsize(os.path.join(d, name))} bytes")

    def _segment(self, mm: mmap.mmap | bytes, start: int, size: int) -> None:
        pos = 0
        records = 0
        while True:
            h = read_record_header(mm, pos, size, start, False)
            if isinstance(h, RecordHeader):
                props = decode_properties(h.properties_bytes)
                line = (
                    f"  @{h.pos} MSG size={h.total_size} topic={h.topic} queueId={h.queue_id} "
                    f"queueOffset={h.queue_offset} sysFlag={h.sys_flag} stored={_ts(h.store_timestamp)} "
                    f"bodyLen={h.body_len} crc={h.body_crc}"
                )
                if props:
                    line += " props={" + ", ".join(f"{k}={v}" for k, v in props.items()) + "}"
                self.p(line)
                if self.verify:
                    crc = zlib.crc32(mm[h.body_pos - start : h.body_pos - start + h.body_len]) & 0x7FFFFFFF
                    if crc != h.body_crc:
                        self.problem(f"record @{h.pos}: body CRC mismatch (stored {h.body_crc}, computed {crc})")
                pos += h.total_size
                records += 1
                continue
            if h == END_OF_FILE:
                left = BLANK.unpack_from(mm, pos)[0]
                self.p(f"  @{start + pos} BLANK {left} bytes (end of segment)")
            elif isinstance(h, str):
                self.problem(f"@{start + pos}: not a record: {h}")
            else:
                tail = len(bytes(mm[pos:size]).rstrip(b"\0")) if pos < size else 0
                if tail:
                    self.problem(f"@{start + pos}: {tail} non-zero bytes after the last record")
            break
        self.p(f"  {records} records, data ends at {start + pos}")

    def _record_at(self, phy: int) -> tuple[RecordHeader | str | int, str]:
        for start, path, size in self.segments:
            if start <= phy < start + size:
                with _mapped(path) as mm:
                    return read_record_header(mm, phy - start, size, start, False), path
        return "no commit-log segment holds this offset", ""

    # -- consume queues ----------------------------------------------------------------------------------------
    def consume_queues(self) -> None:
        d = os.path.join(self.root, "consumequeue")
        if not os.path.isdir(d):
            self.p("consumequeue/ (none)")
            return
        self.p("consumequeue/")
        min_phy = self.segments[0][0] if self.segments else 0
        for topic in sorted(os.listdir(d)):
            tdir = os.path.join(d, topic)
            if not os.path.isdir(tdir):
                continue
            for qid in sorted(os.listdir(tdir), key=lambda q: int(q) if q.lstrip("-").isdigit() else 0):
                qdir = os.path.join(tdir, qid)
                files = sorted(n for n in os.listdir(qdir) if is_segment_name(n))
                self.p(f"queue {topic}/{qid} ({len(files)} files)")
                for name in files:
                    path = os.path.join(qdir, name)
                    base = int(name)
                    with _mapped(path) as mm:
                        n = 0
                        for i in range(len(mm) // CQ_UNIT.size):
                            phy, size, tags = CQ_UNIT.unpack_from(mm, i * CQ_UNIT.size)
                            if phy < 0 or size <= 0:
                                break
                            logical = base // CQ_UNIT.size + i
                            n += 1
                            if size == BLANK_SIZE:
                                self.p(f"  #{logical} (blank filler)")
                                continue
                            self.p(f"  #{logical} phy={phy} size={size} tagsCode={tags}")
                            if self.verify and phy >= min_phy:
                                self._verify_unit(topic, qid, logical, phy, size)
                        self.p(f"  file {name}: {n} units")

    def _verify_unit(self, topic: str, qid: str, logical: int, phy: int, size: int) -> None:
        h, _ = self._record_at(phy)
        where = f"queue {topic}/{qid} #{logical} -> @{phy}"
        if not isinstance(h, RecordHeader):
            self.problem(f"{where}: no record there ({h if isinstance(h, str) else 'end of data'})")
        elif h.total_size != size or h.topic != topic or str(h.queue_id) != qid or h.queue_offset != logical:
            self.problem(
                f"{where}: points at {h.topic}/{h.queue_id} queueOffset={h.queue_offset} size={h.total_size}"
                f" (expected size {size})"
            )

    # -- index / checkpoint ------------------------------------------------------------------------------------
    def index(self) -> None:
        d = os.path.join(self.root, "index")
        names = sorted(n for n in os.listdir(d) if len(n) == 17 and n.isdigit()) if os.path.isdir(d) else []
        self.p(f"index/ ({len(names)} files)")
        for name in names:
            path = os.path.join(d, name)
            with _mapped(path) as mm:
                if len(mm) < INDEX_HEADER.size:
                    self.problem(f"index file {name}: too short")
                    continue
                bts, ets, bphy, ephy, slots_used, count = INDEX_HEADER.unpack_from(mm, 0)
                self.p(
                    f"index {name}: begin={_ts(bts)} end={_ts(ets)} beginPhyOffset={bphy} endPhyOffset={ephy} "
                    f"hashSlotCount={slots_used} indexCount={count} fileSize={len(mm)}"
                )
                # entries start after the slot table; the slot count follows from the file size and the header
                # is not enough on its own, so infer it: size = 40 + slots*4 + entries*20 with entries = 4*slots
                slot_num = (len(mm) - INDEX_HEADER.size) // (4 + 4 * INDEX_ENTRY.size)
                entries_at = INDEX_HEADER.size + slot_num * 4
                if INDEX_HEADER.size + slot_num * 4 + slot_num * 4 * INDEX_ENTRY.size != len(mm):
                    self.p("  (non-default slot/entry ratio: entries not listed)")
                    continue
                for n in range(1, max(count, 1)):
                    h, phy, diff, prev = INDEX_ENTRY.unpack_from(mm, entries_at + n * INDEX_ENTRY.size)
                    self.p(f"  entry {n}: keyHash={h} phy={phy} time={_ts(bts + diff * 1000)} prev={prev}")

    def checkpoint(self) -> None:
        path = os.path.join(self.root, "checkpoint")
        if os.path.exists(path):
            with open(path, "rb") as f:
                phys, logics, index = CHECKPOINT.unpack(f.read(CHECKPOINT.size).ljust(CHECKPOINT.size, b"\0"))
            self.p(f"checkpoint: physicMsgTimestamp={_ts(phys)} logicsMsgTimestamp={_ts(logics)} "
                   f"indexMsgTimestamp={_ts(index)}")
        abort = os.path.exists(os.path.join(self.root, "abort"))
        self.p(f"abort file: {'present (last run did not stop cleanly)' if abort else 'absent'}")


def main_dump(path: str, verify: bool, out: TextIO) -> int:
    """Dump the store at ``path``; returns 0, 1 when ``--verify`` found problems, 2 when ``path`` is no store."""
    if not os.path.isdir(path):
        out.write(f"{path}: not a directory\n")
        return 2
    if not any(os.path.exists(os.path.join(path, n)) for n in ("commitlog", "consumequeue", "index", "checkpoint")):
        out.write(f"{path}: no commitlog/, consumequeue/, index/ or checkpoint here; not a store directory\n")
        return 2
    d = _Dumper(path, verify, out)
    d.checkpoint()
    d.commit_log()
    d.consume_queues()
    d.index()
    if verify:
        out.write(f"verify: {'OK' if d.problems == 0 else f'{d.problems} problem(s) found'}\n")
    return 1 if d.problems else 0


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="pyrmq store dump", description=__doc__.splitlines()[0])
    ap.add_argument("path")
    ap.add_argument("--verify", action="store_true")
    args = ap.parse_args(argv)
    return main_dump(args.path, args.verify, sys.stdout)


if __name__ == "__main__":
    raise SystemExit(main())

