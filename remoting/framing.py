"""Sans-IO frame decoder: feed received bytes, get decoded commands (spec 1.2).

Built for big reads: one ``feed`` of a 64 KiB chunk parses every complete frame in it straight out of the received
``bytes``; only an incomplete tail is kept. A partial large frame is accumulated in a ``bytearray`` until its
announced length has arrived, so a 16 MiB body costs O(n), not O(n^2).
"""

from __future__ import annotations

import struct

from .command import MAX_FRAME_SIZE, RemotingCommand, decode_parts
from .errors import ProtocolError

__all__ = ["FrameDecoder", "split_frames"]

_U32 = struct.Struct(">I")
_PREFIX = struct.Struct(">II")


class FrameDecoder:
    """Turns a byte stream into ``RemotingCommand`` objects.

    Raises ``ProtocolError`` for a frame longer than ``max_frame_size``, an inconsistent header length, an unknown
    serialize type or an undecodable header; after that the stream is unusable (the caller closes the connection).
    """

    __slots__ = ("max_frame_size", "_rest", "_need")

    def __init__(self, max_frame_size: int = MAX_FRAME_SIZE) -> None:
        self.max_frame_size = max_frame_size
        self._rest = bytearray()  # unparsed tail
        self._need = 0  # bytes _rest must hold before parsing is worth trying again

    @property
    def buffered(self) -> int:
        """Bytes received but not yet part of a complete frame."""
        return len(self._rest)

    def feed(self, data: bytes | bytearray | memoryview) -> list[RemotingCommand]:
        rest = self._rest
        if rest:
            if len(rest) + len(data) < self._need:
                rest += data
                return []
            data = b"".join((rest, data))  # one copy of each part (not append, then copy the whole again)
            rest.clear()
        elif type(data) is not bytes:
            data = bytes(data)
        out: list[RemotingCommand] = []
        n = len(data)
        pos = 0
        max_frame = self.max_frame_size
        unpack = _PREFIX.unpack_from
        while n - pos >= 8:
            total, word = unpack(data, pos)
            if total > max_frame:
                raise ProtocolError(f"frame length {total} exceeds the maximum {max_frame}")
            hl = word & 0xFFFFFF
            if total < 4 or hl > total - 4:
                raise ProtocolError(f"header length {hl} does not fit frame length {total}")
            end = pos + 4 + total
            if end > n:
                self._need = end - pos
                break
            hstart = pos + 8
            out.append(decode_parts(word >> 24, data[hstart:hstart + hl], data[hstart + hl:end]))
            pos = end
        else:
            self._need = 8
        if pos < n:
            rest += memoryview(data)[pos:]
        return out


def split_frames(data: bytes) -> list[bytes]:
    """Split a buffer holding whole frames into the frames (prefix included); a trailing partial frame is dropped."""
    frames = []
    pos = 0
    while len(data) - pos >= 4:
        (total,) = _U32.unpack_from(data, pos)
        if pos + 4 + total > len(data):
            break
        frames.append(data[pos:pos + 4 + total])
        pos += 4 + total
    return frames
