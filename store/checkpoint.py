"""The ``checkpoint`` file (spec 6.5) and the ``abort`` marker (spec 6.1).

The checkpoint records the store time of the last durable commit-log record, consume-queue unit and index entry;
crash recovery starts scanning at the newest commit-log segment that begins before the oldest of them.
"""

from __future__ import annotations

import logging
import os

from .format import CHECKPOINT, CHECKPOINT_FILE_SIZE

#: Java's ``StoreCheckpoint.getMinTimestamp`` subtracts 3 s so a record written right at the checkpoint is re-checked
MIN_TIMESTAMP_SLACK_MS = 3000

log = logging.getLogger(__name__)


class StoreCheckpoint:
    def __init__(self, path: str) -> None:
        self.path = path
        self.physic_msg_timestamp = 0
        self.logics_msg_timestamp = 0
        self.index_msg_timestamp = 0
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        size = os.fstat(self.fd).st_size
        if size < CHECKPOINT_FILE_SIZE:
            # written, not ftruncate'd: a sparse page would need space at every later flush (ENOSPC on a full disk)
            os.pwrite(self.fd, bytes(CHECKPOINT_FILE_SIZE - size), size)
        data = os.pread(self.fd, CHECKPOINT.size, 0)
        self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp = CHECKPOINT.unpack(data)

    def min_timestamp(self, index_safe: bool = False) -> int:
        ts = min(self.physic_msg_timestamp, self.logics_msg_timestamp)
        if index_safe:
            ts = min(ts, self.index_msg_timestamp)
        return max(0, ts - MIN_TIMESTAMP_SLACK_MS)

    def flush(self) -> bool:
        """Blocking: write and fsync the three timestamps. False (logged) when the disk refused: an older
        checkpoint only makes the next crash recovery scan further back, so the store goes on."""
        if self.fd < 0:
            return False
        try:
            os.pwrite(
                self.fd,
                CHECKPOINT.pack(self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp),
                0,
            )
            os.fdatasync(self.fd)
        except OSError as exc:
            log.error("checkpoint %s not written: %s", self.path, exc)
            return False
        return True

    def close(self) -> None:
        if self.fd >= 0:
            self.flush()
            os.close(self.fd)
            self.fd = -1


class AbortFile:
    """Created once the store is up, removed on clean shutdown: present at start = the last run crashed."""

    def __init__(self, path: str) -> None:
        self.path = path

    def exists(self) -> bool:
        return os.path.exists(self.path)

    def create(self) -> None:
        with open(self.path, "wb") as f:
            f.flush()
            os.fsync(f.fileno())
        _fsync_dir(os.path.dirname(self.path))

    def remove(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            return
        _fsync_dir(os.path.dirname(self.path))


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path or ".", os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
