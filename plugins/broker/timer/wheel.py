"""A persistent hierarchical timing wheel with one-second ticks (the timer's index; no trio, no hooks, no store).

Four levels of 256 slots: level 0 holds seconds ``cur .. cur+255``, level k (1..3) holds whole windows of 256**k
seconds (level 3 reaches ~136 years). A slot is a singly linked list threaded backwards through the *timer log*, an
append-only sequence of 32-byte entries in 8 MiB segment files, so an insert is one append plus two array updates
(O(1)) and memory holds only the 1024 slot heads and counts, never one object per message::

    0        8        16       24   28   32
    +--------+--------+--------+----+----+
    |  prev  |  phy   |deliver | sz |flag|      prev = log position of the previous entry of the slot (-1: none)
    +--------+--------+--------+----+----+      phy/sz = the parked record in the commit log, deliver = epoch ms

Processing second ``s`` cascades, top level first, every level-k slot whose window starts at ``s`` (its entries are
re-appended one level down), then takes level-0 slot ``s`` (all due). :meth:`next_work` finds the next second that
has anything to do, so idle stretches (or a broker that was down for days) are skipped in O(levels x 256).

Durability: :meth:`snapshot` returns the slot table plus (cur, log end, enqueue offset) after writing the buffered
entries out; the owner stores it atomically together with its own progress and calls :meth:`fsync` first. Segments
whose entries were all taken are deleted only after a snapshot that no longer references them is durable
(:meth:`dead_segments`). Recovery = the last snapshot + re-inserting what was enqueued after it.
"""

from __future__ import annotations

import os
import struct
import zlib
from array import array
from collections.abc import Iterator

LEVELS = 4
BITS = 8
SLOTS = 1 << BITS
MASK = SLOTS - 1

# prev, phy, deliver_ms, size, flags
ENTRY = struct.Struct(">qqqii")
assert ENTRY.size == 32
SEGMENT_SIZE = 8 * 1024 * 1024
assert SEGMENT_SIZE % ENTRY.size == 0
#: buffered entries are written out (to the page cache) at this size, so memory stays flat however many are inserted
WRITE_BUFFER = 256 * 1024

#: entry flag: not a delivery but a refresh point (re-append the record before commit-log retention removes it)
FLAG_ROLL = 0x1

# snapshot: magic, version, cur, log_end, enqueue_offset, extra (owner's), number of live segments
SNAP_HEAD = struct.Struct(">8siqqqqi")
SNAP_MAGIC = b"PYRMQTW1"
SLOT_TABLE = struct.Struct(f">{LEVELS * SLOTS}q{LEVELS * SLOTS}q")
SEG_LIVE = struct.Struct(">qq")
CRC = struct.Struct(">I")


class WheelCorruptError(Exception):
    """The wheel's snapshot does not decode (names the file)."""


def ceil_sec(ms: int) -> int:
    """Delivery second: never early, at most one second late."""
    return -(-ms // 1000)


class TimingWheel:
    def __init__(self, directory: str, cur: int) -> None:
        self.directory = directory
        os.makedirs(directory, exist_ok=True)
        #: next second to process (everything before it is done)
        self.cur = cur
        self.heads = array("q", [-1]) * (LEVELS * SLOTS)
        self.counts = array("q", [0]) * (LEVELS * SLOTS)
        self.size = 0  # entries in the wheel
        self.log_end = 0
        #: live entries per segment index
        self.live: dict[int, int] = {}
        self._buf = bytearray()
        self._buf_start = 0
        self._fds: dict[int, int] = {}

    # -- placement ---------------------------------------------------------------------------------------------

    def _slot(self, t: int) -> int:
        cur = self.cur
        if t - cur < SLOTS:
            return max(t, cur) & MASK  # overdue entries go to the slot processed next
        for k in range(1, LEVELS):
            shift = BITS * k
            if (t >> shift) - (cur >> shift) < SLOTS:
                return k * SLOTS + ((t >> shift) & MASK)
        raise ValueError(f"delivery second {t} is beyond the wheel's range")

    def insert(self, phy: int, size: int, deliver_ms: int, flags: int = 0) -> None:
        """O(1): one 32-byte append and a slot-head update."""
        idx = self._slot(ceil_sec(deliver_ms))
        pos = self.log_end
        self._buf += ENTRY.pack(self.heads[idx], phy, deliver_ms, size, flags)
        self.heads[idx] = pos
        self.counts[idx] += 1
        self.size += 1
        self.log_end = pos + ENTRY.size
        seg = pos // SEGMENT_SIZE
        self.live[seg] = self.live.get(seg, 0) + 1
        if len(self._buf) >= WRITE_BUFFER:
            self.write_out()

    # -- log files ---------------------------------------------------------------------------------------------

    def _fd(self, seg: int) -> int:
        fd = self._fds.get(seg)
        if fd is None:
            path = os.path.join(self.directory, f"{seg * SEGMENT_SIZE:020d}")
            fd = self._fds[seg] = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        return fd

    def write_out(self) -> None:
        """Write buffered entries to their segment files (page cache; :meth:`fsync` makes them durable)."""
        buf = self._buf
        if not buf:
            return
        pos = self._buf_start
        view = memoryview(buf)
        while view:
            seg, off = divmod(pos, SEGMENT_SIZE)
            n = min(len(view), SEGMENT_SIZE - off)
            os.pwrite(self._fd(seg), view[:n], off)
            view = view[n:]
            pos += n
        view.release()
        self._buf = bytearray()
        self._buf_start = self.log_end

    def fsync(self) -> None:
        for fd in list(self._fds.values()):
            os.fsync(fd)

    def _read(self, pos: int) -> tuple[int, int, int, int, int]:
        seg, off = divmod(pos, SEGMENT_SIZE)
        data = os.pread(self._fd(seg), ENTRY.size, off)
        if len(data) != ENTRY.size:
            raise WheelCorruptError(f"{self.directory}: timer log entry at {pos} is missing")
        return ENTRY.unpack(data)

    def take(self, idx: int) -> list[tuple[int, int, int, int]]:
        """Empty slot ``idx``; its entries as (deliver_ms, phy, size, flags), oldest insert first."""
        count = self.counts[idx]
        if not count:
            return []
        if self._buf:
            self.write_out()
        out = []
        pos = self.heads[idx]
        live = self.live
        while pos >= 0:
            prev, phy, deliver_ms, size, flags = self._read(pos)
            out.append((deliver_ms, phy, size, flags))
            seg = pos // SEGMENT_SIZE
            live[seg] -= 1
            pos = prev
        self.heads[idx] = -1
        self.counts[idx] = 0
        self.size -= len(out)
        out.reverse()
        return out

    # -- time --------------------------------------------------------------------------------------------------

    def next_work(self) -> int | None:
        """The first second >= cur at which a slot must be processed or cascaded; None when the wheel is empty."""
        if not self.size:
            return None
        cur = self.cur
        counts = self.counts
        best = None
        for i in range(SLOTS):
            if counts[(cur + i) & MASK]:
                best = cur + i
                break
        for k in range(1, LEVELS):
            shift = BITS * k
            w0 = -(-cur >> shift)  # first window starting at or after cur
            if best is not None and (w0 << shift) >= best:
                break  # higher levels start even later
            base = k * SLOTS
            for w in range(w0, w0 + SLOTS):
                if best is not None and (w << shift) >= best:
                    break
                if counts[base + (w & MASK)]:
                    best = w << shift
                    break
        return best

    def advance(self, now_sec: int) -> list[tuple[int, int, int, int]] | None:
        """Process the next second with work if it is <= ``now_sec``: cascade, then return its level-0 entries
        (due, sorted by delivery time). None (and ``cur`` moved past ``now_sec``) when nothing is due yet."""
        s = self.next_work()
        if s is None or s > now_sec:
            if now_sec + 1 > self.cur:
                self.cur = now_sec + 1  # nothing to do in between: the wheel stays valid (see next_work)
            return None
        self.cur = s
        for k in range(LEVELS - 1, 0, -1):
            shift = BITS * k
            if s & ((1 << shift) - 1) == 0:
                idx = k * SLOTS + ((s >> shift) & MASK)
                for deliver_ms, phy, size, flags in self.take(idx):
                    self.insert(phy, size, deliver_ms, flags)
        due = self.take(s & MASK)
        self.cur = s + 1
        due.sort()
        return due

    # -- reading (metrics) ---------------------------------------------------------------------------------------

    def entries(self) -> Iterator[tuple[int, int, int, int]]:
        """Every entry in the wheel as (deliver_ms, phy, size, flags), slot by slot; the wheel is not changed."""
        if self._buf:
            self.write_out()
        for idx in range(LEVELS * SLOTS):
            pos = self.heads[idx]
            while pos >= 0:
                prev, phy, deliver_ms, size, flags = self._read(pos)
                yield deliver_ms, phy, size, flags
                pos = prev

    def due(self, now_sec: int) -> tuple[int, int | None]:
        """(entries due at or before ``now_sec`` and not taken yet, the first second they fall in or None): what
        processing is behind. Counts whole slots: level 0 up to ``now_sec``, higher-level windows that have ended."""
        cur = self.cur
        counts = self.counts
        total, first = 0, None
        for s in range(cur, min(now_sec, cur + SLOTS - 1) + 1):
            n = counts[s & MASK]
            if n:
                total += n
                first = s if first is None else first
        for k in range(1, LEVELS):
            shift = BITS * k
            w = -(-cur >> shift)
            for w in range(w, w + SLOTS):
                if ((w + 1) << shift) - 1 > now_sec:
                    break
                n = counts[k * SLOTS + (w & MASK)]
                if n:
                    total += n
                    first = w << shift if first is None else min(first, w << shift)
        return total, first

    # -- persistence -------------------------------------------------------------------------------------------

    def snapshot(self, enqueue_offset: int, extra: int = 0) -> bytes:
        """The wheel's state (after writing buffered entries out), to store atomically."""
        self.write_out()
        live = {seg: n for seg, n in self.live.items() if n}
        head = SNAP_HEAD.pack(SNAP_MAGIC, 1, self.cur, self.log_end, enqueue_offset, extra, len(live))
        body = b"".join([head, SLOT_TABLE.pack(*self.heads, *self.counts)] +
                        [SEG_LIVE.pack(seg, n) for seg, n in sorted(live.items())])
        return body + CRC.pack(zlib.crc32(body))

    def restore(self, data: bytes, source: str) -> tuple[int, int]:
        """Load a snapshot; returns (enqueue_offset, extra)."""
        try:
            body, (crc,) = data[:-4], CRC.unpack(data[-4:])
            if zlib.crc32(body) != crc:
                raise ValueError("checksum mismatch")
            magic, version, cur, log_end, enqueue_offset, extra, nseg = SNAP_HEAD.unpack_from(body)
            if magic != SNAP_MAGIC or version != 1:
                raise ValueError(f"not a timing-wheel snapshot (magic {magic!r}, version {version})")
            table = SLOT_TABLE.unpack_from(body, SNAP_HEAD.size)
            pos = SNAP_HEAD.size + SLOT_TABLE.size
            live = dict(SEG_LIVE.unpack_from(body, pos + i * SEG_LIVE.size) for i in range(nseg))
        except (struct.error, ValueError) as exc:
            raise WheelCorruptError(f"{source}: {exc}") from None
        n = LEVELS * SLOTS
        self.cur = cur
        self.heads = array("q", table[:n])
        self.counts = array("q", table[n:])
        self.size = sum(self.counts)
        self.log_end = self._buf_start = log_end
        self._buf = bytearray()
        self.live = live
        return enqueue_offset, extra

    def dead_segments(self) -> list[int]:
        """Segments (below the one being written) without live entries."""
        current = self.log_end // SEGMENT_SIZE
        return [seg for seg, n in self.live.items() if n == 0 and seg < current]

    def delete_segments(self, segments: list[int]) -> None:
        for seg in segments:
            if self.live.get(seg, 0) != 0:
                continue
            self.live.pop(seg, None)
            fd = self._fds.pop(seg, None)
            if fd is not None:
                os.close(fd)
            try:
                os.unlink(os.path.join(self.directory, f"{seg * SEGMENT_SIZE:020d}"))
            except FileNotFoundError:
                pass

    def clear(self) -> None:
        """Empty the wheel and delete its log (``cur`` kept): what a rebuild starts from."""
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        for name in list(self.segment_files()):
            os.unlink(os.path.join(self.directory, name))
        self.heads = array("q", [-1]) * (LEVELS * SLOTS)
        self.counts = array("q", [0]) * (LEVELS * SLOTS)
        self.size = 0
        self.log_end = self._buf_start = 0
        self._buf = bytearray()
        self.live = {}

    def segment_files(self) -> Iterator[str]:
        return (name for name in sorted(os.listdir(self.directory)) if name.isdigit())

    def close(self) -> None:
        self.write_out()
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
