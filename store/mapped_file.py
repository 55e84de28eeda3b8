"""One fixed-size memory-mapped segment file, named by the 20-digit absolute offset of its first byte.

Writers put bytes straight into ``mm`` (``struct.pack_into`` / slice assignment); ``wrote_position`` is the end of
the valid data. ``flush()`` is a blocking ``fdatasync`` on the file (on Linux that writes the dirty pages of a
shared mapping too) and is meant to run in a worker thread; it releases the GIL, unlike ``mmap.flush`` in 3.11.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import mmap
import os
from collections.abc import Callable

log = logging.getLogger(__name__)

ZERO_CHUNK = bytes(1 << 20)

MADV_DONTNEED = 4
MADV_POPULATE_WRITE = 23  # Linux >= 5.14
_WARM_CHUNK = 2 << 20

#: libc's madvise / msync (address, length, advice or flags) -> 0 or -1, None where ctypes cannot load them
_madvise: Callable[[int, int, int], int] | None
_msync: Callable[[int, int, int], int] | None
try:
    _libc = ctypes.CDLL(None, use_errno=True)
    _madvise = _libc.madvise
    _madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    _madvise.restype = ctypes.c_int
    _msync = _libc.msync
    _msync.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    _msync.restype = ctypes.c_int
except (OSError, AttributeError):  # pragma: no cover - not Linux
    _madvise = _msync = None

MS_SYNC = 4


def _address(mm: mmap.mmap) -> int:
    buf = ctypes.c_char.from_buffer(mm)
    try:
        return ctypes.addressof(buf)
    finally:
        del buf


def offset_to_file_name(offset: int) -> str:
    """``UtilAll.offset2FileName``: 20-digit zero-padded decimal."""
    return f"{offset:020d}"


def allocate_file(fd: int, size: int, preallocate: bool = True) -> None:
    """Grow the file to ``size`` bytes. With ``preallocate`` every byte gets a real disk block
    (``posix_fallocate``), not a sparse hole: a store written through mmap would otherwise take a SIGBUS (and die)
    when a page of the hole is first touched on a file system that filled up behind the broker's disk-ratio check.
    A full disk fails here instead, with ENOSPC, where the caller can refuse the write cleanly. Without it (the
    default, as RocketMQ) the file is sparse and costs disk only as it is written. File systems without fallocate
    get the sparse file either way."""
    if not preallocate:
        os.ftruncate(fd, size)
        return
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            raise
        os.ftruncate(fd, size)


def is_segment_name(name: str) -> bool:
    return len(name) == 20 and name.isdigit()


class MappedFile:
    """A segment of a commit log or consume queue."""

    __slots__ = (
        "path", "file_from_offset", "file_size", "fd", "mm", "view",
        "wrote_position", "flushed_position", "store_timestamp", "_closed", "address", "warmed", "released_to",
    )

    def __init__(self, path: str, file_size: int, *, create: bool = True, preallocate: bool = False) -> None:
        self.path = path
        self.file_size = file_size
        self.file_from_offset = int(os.path.basename(path))
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        existed = os.path.exists(path)
        self.fd = os.open(path, flags, 0o644)
        try:
            if os.fstat(self.fd).st_size != file_size:
                # a fresh segment, or one a crash left short: grow it to the full size, blocks allocated
                allocate_file(self.fd, file_size, preallocate)
            self.mm = mmap.mmap(self.fd, file_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(self.fd)
            if not existed:  # no empty or half-allocated segment left behind (a full disk)
                os.unlink(path)
            raise
        self.view = memoryview(self.mm)
        self.address = _address(self.mm) if _madvise is not None else 0
        #: bytes pre-faulted so far (from the start of the file)
        self.warmed = 0
        #: pages below this position were dropped from the resident set (:meth:`release_behind`)
        self.released_to = 0
        self.wrote_position = 0
        self.flushed_position = 0
        #: store timestamp of the last record written (commit log) / dispatched (consume queue)
        self.store_timestamp = 0
        self._closed = False

    # -- positions ---------------------------------------------------------------------------------------------
    @property
    def end_offset(self) -> int:
        return self.file_from_offset + self.wrote_position

    @property
    def is_full(self) -> bool:
        return self.wrote_position >= self.file_size

    @property
    def remaining(self) -> int:
        return self.file_size - self.wrote_position

    def set_positions(self, position: int) -> None:
        self.wrote_position = position
        self.flushed_position = position

    # -- io ----------------------------------------------------------------------------------------------------
    def append(self, data: bytes | memoryview) -> int:
        """Write ``data`` at the wrote position; return the position it went to."""
        pos = self.wrote_position
        end = pos + len(data)
        if end > self.file_size:
            raise ValueError(f"{self.path}: append of {len(data)} bytes at {pos} exceeds {self.file_size}")
        self.mm[pos:end] = data
        self.wrote_position = end
        return pos

    def slice(self, pos: int, size: int) -> memoryview:
        """A zero-copy view of ``size`` bytes at ``pos`` (relative to the file start)."""
        return self.view[pos : pos + size]

    def dirty_bytes(self) -> int:
        return self.wrote_position - self.flushed_position

    def flush(self) -> int:
        """Blocking: make the bytes up to the current wrote position durable; returns the flushed position."""
        target = self.wrote_position
        if target > self.flushed_position and not self._closed:
            if _msync is not None and self.address:
                self._sync_range(self.flushed_position, target)
            else:
                try:
                    os.fdatasync(self.fd)
                except OSError as exc:  # deleted under our feet by retention; nothing left to make durable
                    if self._closed:
                        return self.flushed_position
                    raise exc
            self.flushed_position = max(self.flushed_position, target)
        return self.flushed_position

    def _sync_range(self, start: int, end: int, page_size: int = 4096) -> None:
        """``msync(MS_SYNC)`` of the written, not yet durable pages only (Linux: ``fdatasync`` of that range).
        An ``fdatasync`` of the whole file would also write back the pages pre-faulted ahead of the writer
        (:meth:`warm`), each of which then takes a write fault again when the writer reaches it."""
        start -= start % page_size
        try:
            hold = memoryview(self.mm)  # holds the mapping while the sync runs (a concurrent close)
        except ValueError:  # closed
            return
        try:
            # flush() calls this only when libc's msync is loaded
            if _msync(self.address + start, end - start, MS_SYNC) != 0:  # type: ignore[misc]
                err = ctypes.get_errno()
                raise OSError(err, f"{self.path}: msync: {os.strerror(err)}")
        finally:
            hold.release()

    def warm(self, until: int | None = None, page_size: int = 4096) -> None:
        """Blocking, for a worker thread: allocate blocks and pre-fault pages from where the last warm stopped up to
        ``until`` (Java ``warmMappedFile``), so appends do not pay for block allocation and page faults (on a
        sparse file those halve the append rate). ``fallocate`` and the ctypes ``madvise`` release the GIL. Done in
        small steps ahead of the writer: one call over a whole 1 GiB segment would hold the file's locks and stall
        the appends' own page faults."""
        start = max(self.warmed, self.wrote_position - self.wrote_position % page_size)
        end = self.file_size if until is None else min(self.file_size, until)
        while start < end and not self._closed:
            n = min(_WARM_CHUNK, end - start)
            try:
                os.posix_fallocate(self.fd, start, n)
            except OSError:
                pass
            if _madvise is not None:
                _madvise(self.address + start, n, MADV_POPULATE_WRITE)
            start += n
            self.warmed = start

    def release_pages(self) -> None:
        """Drop this (flushed, no longer written) segment's pages from the process's resident set; they stay in
        the page cache and fault back in when read."""
        self.release_behind(0)

    def release_behind(self, keep: int, page_size: int = 4096) -> None:
        """Blocking, for a worker thread after a flush: drop the flushed pages more than ``keep`` bytes behind the
        flushed position from the process's resident set (``MADV_DONTNEED`` on the shared mapping: the pages stay
        in the page cache, durable, and a reader faults them back in). Only what was not dropped before is
        advised, so the resident set of a written file stays at the tail being written and read, whatever the
        file's size. Safe against a concurrent :meth:`close`: a buffer export holds the mapping while the
        advice runs (``mmap.close`` then defers the unmap to the export's release)."""
        end = self.flushed_position - keep
        end -= end % page_size
        start = self.released_to
        if _madvise is None or end <= start:
            return
        try:
            hold = memoryview(self.mm)
        except ValueError:  # closed
            return
        try:
            _madvise(self.address + start, end - start, MADV_DONTNEED)
        finally:
            hold.release()
        self.released_to = end

    def zero_from(self, pos: int) -> None:
        """Clear bytes from ``pos`` to the end (used by recovery after moving a torn tail aside)."""
        end = self.last_nonzero_end(pos)
        while pos < end:
            n = min(len(ZERO_CHUNK), end - pos)
            self.mm[pos : pos + n] = ZERO_CHUNK[:n]
            pos += n

    def last_nonzero_end(self, start: int) -> int:
        """Position just after the last non-zero byte at or after ``start`` (``start`` if all zero)."""
        end = start
        pos = start
        mm = self.mm
        size = self.file_size
        while pos < size:
            n = min(len(ZERO_CHUNK), size - pos)
            chunk = mm[pos : pos + n]
            if chunk != ZERO_CHUNK[:n]:
                end = pos + len(chunk.rstrip(b"\0"))
            pos += n
        return end

    # -- lifecycle ---------------------------------------------------------------------------------------------
    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self.view.release()
        except BufferError:
            pass
        try:
            self.mm.close()
        except BufferError:
            # a reader still holds a memoryview of this segment (a pull response in flight); the mapping goes away
            # when the last view is garbage-collected
            log.debug("%s: segment still referenced by readers; unmapping later", self.path)
        os.close(self.fd)

    def destroy(self) -> None:
        """Close and delete the file."""
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    @property
    def closed(self) -> bool:
        return self._closed

    def last_modified(self) -> float:
        try:
            return os.stat(self.path).st_mtime
        except FileNotFoundError:
            return 0.0

    def __repr__(self) -> str:
        return f"MappedFile({self.path!r}, wrote={self.wrote_position}, flushed={self.flushed_position})"
