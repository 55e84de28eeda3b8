"""Delay-level progress: per level, the consume-queue offset of the next entry to deliver.

Java's ``config/delayOffset.json`` (``{"offsetTable":{<level>:<offset>}}``) is written every
``flushDelayOffsetInterval`` and at shutdown, so a Java broker can take the store over. Because a process crash
would otherwise replay up to 10 s of deliveries, every delivery also advances the level's slot in
``config/delayOffset.progress`` (a 4 KiB memory-mapped file: the write lands in the page cache like the commit-log
append it follows, so it survives kill -9). On start each level resumes from the larger of the two (spec 6.6).
"""

from __future__ import annotations

import collections
import logging
import mmap
import os
import struct
import threading
from typing import Any

from pyrmq.remoting import fastjson
from pyrmq.remoting.codes import ResponseCode
from pyrmq.store.config_files import DelayOffsetFile

log = logging.getLogger("pyrmq.delay_levels")

#: progress changes remembered per level, for a truncation that cuts the copies behind them
HISTORY = 4096


class ProgressFile:
    """Per-level progress, memory-mapped so that each delivery's update survives a process crash.

    Layout (big-endian): ``b"PYRMQDLY"`` then 511 longs, slot ``level - 1`` = next consume-queue offset of that
    level (-1 = never written).
    """

    MAGIC = b"PYRMQDLY"
    SIZE = 4096
    SLOT = struct.Struct(">q")
    MAX_LEVELS = (SIZE - len(MAGIC)) // 8

    def __init__(self, path: str) -> None:
        self.path = path
        fresh = not os.path.exists(path) or os.path.getsize(path) != self.SIZE
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if fresh:
                os.ftruncate(fd, self.SIZE)
            self._map = mmap.mmap(fd, self.SIZE)
        finally:
            os.close(fd)
        if fresh or self._map[: len(self.MAGIC)] != self.MAGIC:
            self._map[:] = self.MAGIC + b"\xff" * (self.SIZE - len(self.MAGIC))

    def read(self) -> dict[int, int]:
        out = {}
        for i in range(self.MAX_LEVELS):
            (value,) = self.SLOT.unpack_from(self._map, len(self.MAGIC) + 8 * i)
            if value >= 0:
                out[i + 1] = value
        return out

    def set(self, level: int, offset: int) -> None:
        self.SLOT.pack_into(self._map, len(self.MAGIC) + 8 * (level - 1), offset)

    def close(self) -> None:
        if not self._map.closed:
            self._map.flush()
            self._map.close()


class DelayProgress:
    """Mixed into :class:`~.service.DelayLevelService`: the progress table, its two files, and the master's
    table (GET_ALL_DELAY_OFFSET) on both sides of the metadata sync."""

    store: Any
    config_dir: str
    offset_file: DelayOffsetFile
    progress: ProgressFile | None
    offsets: dict[int, int]
    _dirty: bool
    _persist_lock: threading.Lock
    #: per level: (commit-log offset of the copy that moved the progress, the progress before): the newest last
    _history: dict[int, collections.deque[tuple[int, int]]]
    #: levels whose history lost entries to its bound (a truncation beyond them is checked against the index)
    _history_overflowed: set[int]

    def load(self) -> None:
        os.makedirs(self.config_dir, exist_ok=True)
        table = self.offset_file.load_table()
        self.progress = ProgressFile(os.path.join(self.config_dir, "delayOffset.progress"))
        mapped = self.progress.read()
        # a Java broker may have run on this store since (its json ahead); or we crashed (the mapped file ahead)
        merged = {level: max(table.get(level, 0), mapped.get(level, 0)) for level in set(table) | set(mapped)}
        for level, offset in self.offsets.items():  # (copies replicated before the load)
            merged[level] = max(merged.get(level, 0), offset)
        self.offsets = merged
        for level, offset in merged.items():
            self.progress.set(level, offset)
        if self.offsets:
            log.info("delay levels resume at %s", dict(sorted(self.offsets.items())))

    def persist(self) -> None:
        """Write delayOffset.json (every flushDelayOffsetInterval and at shutdown)."""
        with self._persist_lock:
            self._dirty = False
            self.offset_file.save_table(dict(sorted(self.offsets.items())))

    def close(self) -> None:
        if self.progress is not None:
            self.persist()
            self.progress.close()
            self.progress = None

    def _advance(self, level: int, offset: int, copy_at: int | None = None) -> None:
        """The level's next offset is ``offset`` (a delivery's copy at ``copy_at`` moved it, when given)."""
        if copy_at is not None:
            history = self._history.get(level)
            if history is None:
                history = self._history[level] = collections.deque(maxlen=HISTORY)
            if len(history) == HISTORY:
                self._history_overflowed.add(level)
            history.append((copy_at, self.offsets.get(level, 0)))
        self.offsets[level] = offset
        if self.progress is not None:
            self.progress.set(level, offset)
        self._dirty = True

    # -- the master's table ----------------------------------------------------------------------------------------

    async def all_delay_offset(self, connection: Any, request: Any) -> Any:
        """GET_ALL_DELAY_OFFSET (45): delayOffset.json's document, what a slave's metadata sync copies; with pyrmq's
        ``commitLogMaxOffset`` (Java's readers ignore it): every copy this progress counts lies before it."""
        document = {"offsetTable": dict(sorted(self.offsets.items())), "commitLogMaxOffset": self.store.max_phy_offset}
        return request.make_response(ResponseCode.SUCCESS, body=fastjson.dumps(document, style=fastjson.FASTJSON))

    def adopt_master_table(self, table: dict[int, int], master_offset: int | None) -> bool:
        """A slave takes its master's table where it is ahead (what SlaveSynchronize.syncDelayOffset gives a Java
        slave): needed when the master's copies do not name their parked record (a Java master). A pyrmq master's
        table says up to which commit-log offset its copies lie: taken only once this replica holds that much, so
        no copy it counts is missing here. Returns whether the progress moved."""
        own_end = self.store.max_phy_offset
        if master_offset is not None and own_end < master_offset:
            return False
        moved = False
        for level, offset in table.items():
            if offset > self.offsets.get(level, 0):
                self._advance(level, offset, master_offset if master_offset is not None else own_end)
                moved = True
        return moved
