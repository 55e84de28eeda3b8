"""An ordered list of equally sized segments in one directory, addressed by absolute offset (Java
``MappedFileQueue``). Files whose names are not 20 digits (``*.torn.*``, ``*.tmp``) are ignored."""

from __future__ import annotations

import bisect
import logging
import os

from .mapped_file import MappedFile, is_segment_name, offset_to_file_name

log = logging.getLogger(__name__)


class MappedFileQueue:
    def __init__(self, directory: str, file_size: int, *, preallocate: bool = False) -> None:
        self.directory = directory
        self.file_size = file_size
        #: new segments get real disk blocks up front (StoreConfig.preallocate_store_files)
        self.preallocate = preallocate
        self.files: list[MappedFile] = []
        self._starts: list[int] = []
        #: the next segment, created (and warmed) ahead of need; not part of ``files`` until used
        self.spare: MappedFile | None = None
        self._spare_failed = False

    # -- loading -----------------------------------------------------------------------------------------------
    def load(self) -> None:
        """Map every segment of the directory; each is assumed full until recovery sets the real end."""
        if not os.path.isdir(self.directory):
            return
        names = sorted(n for n in os.listdir(self.directory) if is_segment_name(n))
        for name in names:
            path = os.path.join(self.directory, name)
            size = os.path.getsize(path)
            if size != self.file_size:
                # Java refuses to start here; a short file is the remnant of a crash while creating a segment
                if size > self.file_size:
                    raise ValueError(f"{path}: size {size} larger than the configured segment size {self.file_size}")
                log.warning("%s: size %d differs from the configured %d; extending", path, size, self.file_size)
            mf = MappedFile(path, self.file_size, create=False)
            mf.set_positions(self.file_size)
            self._add(mf)

    def _add(self, mf: MappedFile) -> None:
        if self.files and mf.file_from_offset != self.files[-1].file_from_offset + self.file_size:
            log.warning("%s: gap before segment %s", self.directory, os.path.basename(mf.path))
        self.files.append(mf)
        self._starts.append(mf.file_from_offset)

    # -- lookup ------------------------------------------------------------------------------------------------
    @property
    def last(self) -> MappedFile | None:
        return self.files[-1] if self.files else None

    @property
    def first(self) -> MappedFile | None:
        return self.files[0] if self.files else None

    def create_file(self, start_offset: int) -> MappedFile:
        spare = self.spare
        if spare is not None:
            self.spare = None
            if spare.file_from_offset == start_offset and not spare.closed:
                self._add(spare)
                return spare
            spare.destroy()
        os.makedirs(self.directory, exist_ok=True)
        mf = MappedFile(os.path.join(self.directory, offset_to_file_name(start_offset)), self.file_size,
                        preallocate=self.preallocate)
        self._add(mf)
        return mf

    def prepare_next(self) -> MappedFile | None:
        """Create the segment after the last one ahead of time (Java ``AllocateMappedFileService``)."""
        last = self.last
        if last is None or self.spare is not None:
            return None
        start = last.file_from_offset + self.file_size
        try:
            self.spare = MappedFile(os.path.join(self.directory, offset_to_file_name(start)), self.file_size,
                                    preallocate=self.preallocate)
        except OSError as exc:  # a full disk: the append that needs it refuses the write with CREATE_MAPEDFILE_FAILED
            if not self._spare_failed:
                log.warning("cannot create the next segment ahead of need in %s: %s", self.directory, exc)
            self._spare_failed = True
            return None
        self._spare_failed = False
        return self.spare

    def drop_spare(self) -> None:
        if self.spare is not None:
            self.spare.destroy()
            self.spare = None

    def last_file_for_append(self, start_offset: int = 0) -> MappedFile:
        """The segment to append into, creating the next one when the last is full (or none exists)."""
        last = self.files[-1] if self.files else None
        if last is None:
            return self.create_file(start_offset - start_offset % self.file_size)
        if last.wrote_position >= self.file_size:
            return self.create_file(last.file_from_offset + self.file_size)
        return last

    def find(self, offset: int) -> MappedFile | None:
        """The segment that holds absolute ``offset`` (None when deleted or not yet written)."""
        i = bisect.bisect_right(self._starts, offset) - 1
        if i < 0:
            return None
        mf = self.files[i]
        if offset >= mf.file_from_offset + self.file_size:
            return None
        return mf

    @property
    def min_offset(self) -> int:
        return self.files[0].file_from_offset if self.files else 0

    @property
    def max_offset(self) -> int:
        last = self.files[-1] if self.files else None
        return last.file_from_offset + last.wrote_position if last else 0

    @property
    def flushed_offset(self) -> int:
        for mf in reversed(self.files):
            if mf.flushed_position:
                return mf.file_from_offset + mf.flushed_position
        return self.files[0].file_from_offset if self.files else 0

    # -- flush -------------------------------------------------------------------------------------------------
    def dirty_bytes(self) -> int:
        return self.max_offset - self.flushed_offset

    def flush(self) -> int:
        """Blocking; flush every segment with unflushed bytes. Returns the flushed absolute offset."""
        for mf in list(self.files):
            if mf.flushed_position < mf.wrote_position:
                mf.flush()
        return self.flushed_offset

    def release_flushed(self, keep: int) -> None:
        """Blocking (after :meth:`flush`, in the same worker thread): drop the flushed pages of every segment from
        the process's resident set, but the last ``keep`` flushed bytes of the newest segment (the tail that
        readers follow): see :meth:`MappedFile.release_behind`."""
        files = list(self.files)
        for mf in files[:-1]:
            if mf.released_to < mf.flushed_position:
                mf.release_behind(0)
        if files:
            files[-1].release_behind(keep)

    # -- truncation / deletion ---------------------------------------------------------------------------------
    def truncate(self, offset: int) -> None:
        """Drop everything at and after ``offset``: later segments are deleted, the one holding it is cleared."""
        self.drop_spare()
        keep: list[MappedFile] = []
        for mf in self.files:
            if mf.file_from_offset + self.file_size <= offset:
                keep.append(mf)
            elif mf.file_from_offset <= offset:
                pos = offset - mf.file_from_offset
                mf.zero_from(pos)
                os.fdatasync(mf.fd)  # the cleared tail lies past the written range a flush syncs
                mf.set_positions(pos)
                keep.append(mf)
            else:
                mf.destroy()
        self.files = keep
        self._starts = [mf.file_from_offset for mf in keep]

    def remove_first(self, count: int) -> list[MappedFile]:
        removed = self.files[:count]
        for mf in removed:
            mf.destroy()
        self.files = self.files[count:]
        self._starts = self._starts[count:]
        return removed

    def destroy(self) -> None:
        self.drop_spare()
        for mf in self.files:
            mf.destroy()
        self.files = []
        self._starts = []
        try:
            os.rmdir(self.directory)
        except OSError:
            pass

    def close(self) -> None:
        self.drop_spare()  # an unused spare would only be an empty segment for the next recovery to remove
        for mf in self.files:
            mf.close()
