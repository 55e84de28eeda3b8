"""Commit-log recovery (Java ``CommitLog.recoverNormally`` / ``recoverAbnormally``).

After a clean stop the last three segments are checked; after a crash (the ``abort`` file is still there) the scan
starts at the newest segment whose first record is older than the checkpoint. Each record's magic, size and
(optionally) body CRC are verified. Everything after the last good record is a torn tail: those bytes are copied
next to their segment as ``<segment>.torn.<offset>`` (later whole segments are renamed so) before the commit log
is cut, and the log says how many bytes went where. Nothing is dropped silently.
"""

from __future__ import annotations

import logging
import os

import attrs

from .checkpoint import StoreCheckpoint
from .commitlog import END_OF_DATA, END_OF_FILE, CommitLog, RecordHeader, read_record_header
from .mapped_file import MappedFile

log = logging.getLogger(__name__)

NORMAL_RECOVERY_FILES = 3


@attrs.frozen
class TornTail:
    path: str  # where the bytes were moved
    offset: int  # absolute commit-log offset of the first moved byte
    size: int
    reason: str


@attrs.frozen
class RecoveryReport:
    abnormal: bool
    #: absolute offset where the verifying scan started
    scan_start: int
    #: end of the recovered commit log
    max_offset: int
    records_checked: int
    torn: tuple[TornTail, ...] = ()


def _first_record_timestamp(cl: CommitLog, mf: MappedFile) -> int | None:
    h = read_record_header(mf.mm, 0, mf.file_size, mf.file_from_offset, False)
    return h.store_timestamp if isinstance(h, RecordHeader) else None


def _start_index(cl: CommitLog, abnormal: bool, checkpoint: StoreCheckpoint, index_safe: bool) -> int:
    files = cl.queue.files
    if not abnormal:
        return max(0, len(files) - NORMAL_RECOVERY_FILES)
    min_ts = checkpoint.min_timestamp(index_safe)
    for i in range(len(files) - 1, -1, -1):
        ts = _first_record_timestamp(cl, files[i])
        if ts is not None and ts <= min_ts:
            return i
    return 0


def _torn_path(mf: MappedFile, offset: int) -> str:
    base = f"{mf.path}.torn.{offset}"
    path, n = base, 1
    while os.path.exists(path):
        path = f"{base}.{n}"
        n += 1
    return path


def recover_commit_log(
    cl: CommitLog, *, abnormal: bool, checkpoint: StoreCheckpoint, check_crc: bool, index_safe: bool = False
) -> RecoveryReport:
    files = cl.queue.files
    if not files:
        return RecoveryReport(abnormal, 0, 0, 0)
    start = _start_index(cl, abnormal, checkpoint, index_safe)
    scan_start = files[start].file_from_offset
    good_end = scan_start
    checked = 0
    reason = ""
    i = start
    while i < len(files):
        mf = files[i]
        pos = 0
        while True:
            h = read_record_header(mf.mm, pos, mf.file_size, mf.file_from_offset, check_crc)
            if isinstance(h, RecordHeader):
                pos += h.total_size
                good_end = mf.file_from_offset + pos
                checked += 1
                continue
            break
        if h == END_OF_FILE:
            good_end = mf.file_from_offset + mf.file_size
            i += 1
            continue
        if isinstance(h, str):
            reason = h
            log.warning("commit log %s: record at %d is not valid: %s", mf.path, pos, h)
        break
    torn = _move_torn_tail(cl, good_end, reason or "bytes after the last complete record")
    cl.queue.truncate(good_end)
    for mf in cl.queue.files:
        if mf.file_from_offset + mf.file_size <= good_end:
            mf.set_positions(mf.file_size)
    cl._current = cl.queue.last
    return RecoveryReport(abnormal, scan_start, cl.max_offset, checked, tuple(torn))


def _move_torn_tail(cl: CommitLog, good_end: int, reason: str) -> list[TornTail]:
    moved: list[TornTail] = []
    keep: list[MappedFile] = []
    for mf in cl.queue.files:
        end = mf.file_from_offset + mf.file_size
        if end <= good_end:
            keep.append(mf)
            continue
        pos = max(0, good_end - mf.file_from_offset)
        data_end = mf.last_nonzero_end(pos)
        if pos == 0 and mf.file_from_offset >= good_end:
            # a whole later segment: rename it aside if it holds anything, else just drop it
            if data_end > 0:
                path = _torn_path(mf, mf.file_from_offset)
                mf.close()
                os.rename(mf.path, path)
                moved.append(TornTail(path, mf.file_from_offset, data_end, reason))
                log.warning(
                    "commit log recovery: moved segment %s (%d bytes of data) after the last good record to %s",
                    os.path.basename(mf.path), data_end, path,
                )
            else:
                mf.destroy()
            continue
        if data_end > pos:
            path = _torn_path(mf, mf.file_from_offset + pos)
            with open(path, "wb") as f:
                f.write(mf.mm[pos:data_end])
                f.flush()
                os.fsync(f.fileno())
            moved.append(TornTail(path, mf.file_from_offset + pos, data_end - pos, reason))
            log.warning(
                "commit log recovery: moved %d torn bytes at offset %d (%s) to %s",
                data_end - pos, mf.file_from_offset + pos, reason, path,
            )
        keep.append(mf)
    cl.queue.files = keep
    cl.queue._starts = [mf.file_from_offset for mf in keep]
    return moved


__all__ = ["RecoveryReport", "TornTail", "recover_commit_log", "END_OF_DATA"]
