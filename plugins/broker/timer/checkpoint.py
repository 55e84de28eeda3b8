"""The timer's progress on disk (``<store>/timerwheel/``): the wheel's snapshot and the ``done`` files.

* ``snapshot`` (``snapshot.bak`` the one before): the wheel's slot table, its time, the timer-log end and the
  consume-queue offset enqueued so far, written atomically (tmp, fsync, rename) every ``timerFlushIntervalMs`` when
  anything changed, and at shutdown;
* ``done.<gen>``: since snapshot ``gen - 1``, the commit-log offsets of parked records not to deliver again: delivered
  or refreshed here, or delivered by the master (a replica sees the copy), one write syscall each, so they survive
  kill -9. Before each copy is appended an *intent* entry is written the same way: the parked record's offset,
  negated minus one, then the commit-log offset its copy is about to take.

Recovery = the snapshot, then what was enqueued after it, minus what the ``done`` files list (the service decides
about an intent without its ``done`` entry: it looks for the copy). A snapshot carries over the entries not yet
matched against the wheel, so no ``done`` entry is lost when older files are removed.
"""

from __future__ import annotations

import glob
import logging
import os
import struct
import threading
from collections.abc import Iterable

from pyrmq.plugins.broker.timer.wheel import TimingWheel, WheelCorruptError

log = logging.getLogger("pyrmq.timer")

_OFFSET = struct.Struct(">q")
#: a ``done`` file's intent entry: ``-(parked offset + 1)``, then the commit-log offset its copy is about to take
_INTENT = struct.Struct(">qq")


class TimerCheckpoint:
    def __init__(self, directory: str) -> None:
        self.directory = directory
        #: the generation of the ``done`` file being written
        self.gen = 0
        self._fd = -1
        self._write_lock = threading.Lock()  # a snapshot thread and a shutdown may overlap
        self._written_gen = -1

    @property
    def snapshot_path(self) -> str:
        return os.path.join(self.directory, "snapshot")

    # -- load ----------------------------------------------------------------------------------------------------

    def load(self, wheel: TimingWheel) -> tuple[int, set[int], dict[int, int], bool]:
        """Restore ``wheel`` from the newest usable snapshot and read the ``done`` files written since; returns the
        enqueue offset, the offsets done since, the intents without their ``done`` entry (parked offset -> where its
        copy was to go) and whether a snapshot was restored. Opens the next ``done`` file."""
        enqueue_offset, restored = 0, False
        for candidate in (self.snapshot_path, self.snapshot_path + ".bak"):
            try:
                with open(candidate, "rb") as f:
                    data = f.read()
                enqueue_offset, self.gen = wheel.restore(data, candidate)
                restored = True
                break
            except FileNotFoundError:
                continue
            except WheelCorruptError as exc:
                log.error("timer snapshot unusable: %s", exc)
        done: set[int] = set()
        under_way: dict[int, int] = {}
        for path in self._done_files():
            if self._gen_of(path) >= self.gen:
                with open(path, "rb") as f:
                    self._read_done(f.read(), done, under_way)
        self.gen += 1
        self._open()
        return enqueue_offset, done, under_way, restored

    def _done_files(self) -> list[str]:
        return sorted(glob.glob(os.path.join(self.directory, "done.*")), key=self._gen_of)

    @staticmethod
    def _gen_of(path: str) -> int:
        try:
            return int(path.rsplit(".", 1)[1])
        except ValueError:
            return -1

    def _open(self) -> None:
        path = os.path.join(self.directory, f"done.{self.gen}")
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    @staticmethod
    def _read_done(data: bytes, done: set[int], under_way: dict[int, int]) -> None:
        n = len(data) // 8
        values = [v for (v,) in _OFFSET.iter_unpack(data[: n * 8])]
        i = 0
        while i < n:
            v = values[i]
            if v >= 0:
                done.add(v)
                under_way.pop(v, None)
                i += 1
            elif i + 1 < n:
                under_way[-v - 1] = values[i + 1]
                i += 2
            else:
                break  # an intent without its offset: the write did not complete, nor did the append after it

    # -- entries -------------------------------------------------------------------------------------------------

    def intent(self, phy: int, copy_at: int) -> None:
        os.write(self._fd, _INTENT.pack(-phy - 1, copy_at))

    def done(self, phy: int) -> None:
        os.write(self._fd, _OFFSET.pack(phy))

    # -- snapshots -----------------------------------------------------------------------------------------------

    def prepare(self, wheel: TimingWheel, enqueue_offset: int, carry: Iterable[int]) -> tuple[bytes, int, list[int]]:
        """Synchronous part: the wheel as of now, and a fresh ``done`` file for what happens from here on, starting
        with ``carry`` (entries not matched against the wheel yet: the older files they are in go with the next
        snapshot)."""
        data = wheel.snapshot(enqueue_offset, self.gen + 1)
        dead = wheel.dead_segments()
        os.close(self._fd)
        self.gen += 1
        self._open()
        pending = b"".join(_OFFSET.pack(phy) for phy in carry)
        if pending:
            os.write(self._fd, pending)
        return data, self.gen, dead

    def write(self, data: bytes, gen: int, wheel: TimingWheel) -> None:
        """Blocking: timer log durable, then the snapshot atomically, then older ``done`` files removed."""
        with self._write_lock:
            if gen <= self._written_gen:
                return  # a newer one (the shutdown's) is already durable
            wheel.fsync()
            path = self.snapshot_path
            tmp = path + ".tmp"
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            if os.path.exists(path):
                os.replace(path, path + ".bak")
            os.replace(tmp, path)
            dir_fd = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
            for old in self._done_files():
                if self._gen_of(old) < gen:
                    os.unlink(old)
            self._written_gen = gen

    def close(self, wheel: TimingWheel, dead: list[int]) -> None:
        """After the final :meth:`write`: dead segments deleted, the wheel and the ``done`` file closed."""
        with self._write_lock:
            wheel.delete_segments(dead)
            wheel.close()
            os.close(self._fd)
            self._fd = -1
