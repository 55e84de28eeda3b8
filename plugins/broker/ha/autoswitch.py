"""RocketMQ 5.x's AutoSwitch HA framing (store/ha/autoswitch/AutoSwitchHAClient + AutoSwitchHAConnection, the same
bytes from 5.1.1 to 5.3.3), spoken by the replicas of a failover group; classic groups keep the 4.x wire of
master.py / slave.py. Sans-IO: bytes in, frames out; the sockets live in HAMaster.serve_autoswitch and
slave.AutoSwitchSession.

Every integer is big-endian; ``state`` is HAConnectionState's ordinal (READY 0, HANDSHAKE 1, TRANSFER 2, SUSPEND 3,
SHUTDOWN 4).

slave -> master::

    HANDSHAKE (16)  state=1 i32 | isSyncFromLastFile i16 | isAsyncLearner i16 | slaveBrokerId i64
    ACK       (12)  state=2 i32 | slave's max commit-log offset i64

master -> slave::

    HANDSHAKE (20 + 12 n)  state=1 i32 | bodySize i32 | master's max offset i64 | master's epoch i32
                           | n x (epoch i32 | startOffset i64)
    TRANSFER  (36 + size)  state=2 i32 | bodySize i32 | offset i64 | epoch i32 | epochStartOffset i64
                           | confirmOffset i64 | bodySize bytes of commit log (0: heartbeat)

The slave sends its HANDSHAKE on connecting; the master answers with its epoch entries (the history of its commit
log: where each epoch it holds began); the slave checks where its own log leaves that history (truncating if it must),
then ACKs its max offset, which is where the master starts transferring. A batch never crosses an epoch's end, so
each TRANSFER header names the one epoch its bytes belong to.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Iterable

import attrs

from pyrmq.remoting.errors import ProtocolError

READY, HANDSHAKE, TRANSFER, SUSPEND, SHUTDOWN = range(5)

#: slave -> master
SLAVE_HANDSHAKE = struct.Struct(">ihhq")
SLAVE_ACK = struct.Struct(">iq")
#: master -> slave
MASTER_HANDSHAKE = struct.Struct(">iiqi")
EPOCH_ENTRY = struct.Struct(">iq")
MASTER_TRANSFER = struct.Struct(">iiqiqq")
assert (SLAVE_HANDSHAKE.size, SLAVE_ACK.size, MASTER_HANDSHAKE.size, EPOCH_ENTRY.size, MASTER_TRANSFER.size) == (
    16, 12, 20, 12, 36)

#: a 5.x master keeps at most 1000 entries in its handshake buffer; a 5.x slave reads into 4 MiB
MAX_EPOCH_ENTRIES = 1000
MAX_BODY = 4 * 1024 * 1024 - MASTER_TRANSFER.size
INT32_MAX = (1 << 31) - 1


@attrs.frozen
class SlaveHandshake:
    replica_id: int
    sync_from_last_file: bool
    async_learner: bool


@attrs.frozen
class SlaveAck:
    offset: int


@attrs.frozen
class EpochEntry:
    epoch: int
    start_offset: int


@attrs.frozen
class MasterHandshake:
    max_offset: int
    epoch: int
    entries: tuple[EpochEntry, ...]


@attrs.frozen
class TransferHeader:
    """A TRANSFER frame's header; its body follows in the stream (``size`` bytes)."""

    size: int
    offset: int
    epoch: int
    epoch_start: int
    confirm_offset: int


def pack_slave_handshake(replica_id: int, *, sync_from_last_file: bool, async_learner: bool = False) -> bytes:
    return SLAVE_HANDSHAKE.pack(HANDSHAKE, int(sync_from_last_file), int(async_learner), replica_id)


def pack_ack(offset: int) -> bytes:
    return SLAVE_ACK.pack(TRANSFER, offset)


def pack_master_handshake(max_offset: int, epoch: int, entries: Iterable[EpochEntry]) -> bytes:
    body = b"".join(EPOCH_ENTRY.pack(e.epoch, e.start_offset) for e in entries)
    return MASTER_HANDSHAKE.pack(HANDSHAKE, len(body), max_offset, epoch) + body


def pack_transfer(offset: int, size: int, entry: EpochEntry, confirm_offset: int) -> bytes:
    return MASTER_TRANSFER.pack(TRANSFER, size, offset, entry.epoch, entry.start_offset, confirm_offset)


class SlaveFrameReader:
    """The master's side: the slave's frames out of the bytes received. Anything else (an unknown state, a second
    handshake, an ACK before the handshake, a negative id or offset) raises ProtocolError: the connection closes."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.handshaken = False

    def feed(self, data: bytes) -> list[SlaveHandshake | SlaveAck]:
        buffer = self.buffer
        buffer += data
        frames: list[SlaveHandshake | SlaveAck] = []
        pos = 0
        while len(buffer) - pos >= 4:
            (state,) = struct.unpack_from(">i", buffer, pos)
            if state == HANDSHAKE:
                if len(buffer) - pos < SLAVE_HANDSHAKE.size:
                    break
                _, last_file, learner, replica_id = SLAVE_HANDSHAKE.unpack_from(buffer, pos)
                if self.handshaken:
                    raise ProtocolError("AutoSwitch HA: a second HANDSHAKE from the slave")
                if replica_id < 0 or last_file not in (0, 1) or learner not in (0, 1):
                    raise ProtocolError(f"AutoSwitch HA: malformed HANDSHAKE (slaveBrokerId {replica_id}, "
                                        f"flags {last_file}/{learner})")
                self.handshaken = True
                frames.append(SlaveHandshake(replica_id, bool(last_file), bool(learner)))
                pos += SLAVE_HANDSHAKE.size
            elif state == TRANSFER:
                if len(buffer) - pos < SLAVE_ACK.size:
                    break
                _, offset = SLAVE_ACK.unpack_from(buffer, pos)
                if not self.handshaken:
                    raise ProtocolError("AutoSwitch HA: an ACK before the slave's HANDSHAKE")
                if offset < 0:
                    raise ProtocolError(f"AutoSwitch HA: negative offset {offset} in the slave's ACK")
                frames.append(SlaveAck(offset))
                pos += SLAVE_ACK.size
            else:
                raise ProtocolError(f"AutoSwitch HA: state {state} from the slave (HANDSHAKE 1 or TRANSFER 2 expected)")
        del buffer[:pos]
        return frames


class MasterFrameReader:
    """The slave's side: the master's HANDSHAKE answer, then TRANSFER headers each followed by its body.

    ``next_frame()`` returns None until a whole frame is buffered, else ``(frame, body)`` (body a memoryview of the
    buffer, released at the next ``next_frame()``/``feed()``; empty for handshakes and heartbeats)."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.pos = 0
        self.handshaken = False
        self._view: memoryview | None = None

    def feed(self, data: bytes) -> None:
        self._release()
        if self.pos:
            del self.buffer[: self.pos]
            self.pos = 0
        self.buffer += data

    def _release(self) -> None:
        if self._view is not None:
            self._view.release()
            self._view = None

    def next_frame(self) -> tuple[MasterHandshake | TransferHeader, memoryview] | None:
        self._release()
        buffer, pos = self.buffer, self.pos
        have = len(buffer) - pos
        if have < MASTER_HANDSHAKE.size:
            return None
        state, size, offset, epoch = MASTER_HANDSHAKE.unpack_from(buffer, pos)
        if size < 0:
            raise ProtocolError(f"AutoSwitch HA: negative body size {size} from the master")
        if state == HANDSHAKE:
            if self.handshaken:
                raise ProtocolError("AutoSwitch HA: a second HANDSHAKE from the master")
            if size % EPOCH_ENTRY.size or size > MAX_EPOCH_ENTRIES * EPOCH_ENTRY.size:
                raise ProtocolError(f"AutoSwitch HA: handshake body of {size} bytes is not a list of epoch entries")
            if have < MASTER_HANDSHAKE.size + size:
                return None
            start = pos + MASTER_HANDSHAKE.size
            entries = tuple(EpochEntry(*EPOCH_ENTRY.unpack_from(buffer, start + i))
                            for i in range(0, size, EPOCH_ENTRY.size))
            self.handshaken = True
            self.pos = start + size
            return MasterHandshake(offset, epoch, entries), memoryview(b"")
        if state != TRANSFER:
            raise ProtocolError(f"AutoSwitch HA: state {state} from the master (HANDSHAKE 1 or TRANSFER 2 expected)")
        if not self.handshaken:
            raise ProtocolError("AutoSwitch HA: a TRANSFER before the master's HANDSHAKE")
        if size > MAX_BODY:
            raise ProtocolError(f"AutoSwitch HA: transfer body of {size} bytes (at most {MAX_BODY})")
        if have < MASTER_TRANSFER.size + size:
            return None
        _, _, offset, epoch, epoch_start, confirm = MASTER_TRANSFER.unpack_from(buffer, pos)
        start = pos + MASTER_TRANSFER.size
        self.pos = start + size
        self._view = memoryview(buffer)[start : start + size]
        return TransferHeader(size, offset, epoch, epoch_start, confirm), self._view


class EpochHistory:
    """The epochs a master's commit log went through, each with the offset where it began (EpochFileCache)."""

    def __init__(self, entries: Iterable[EpochEntry]) -> None:
        self.entries = history(entries)
        self._starts = [e.start_offset for e in self.entries]

    @property
    def last(self) -> EpochEntry:
        return self.entries[-1]

    def at(self, offset: int) -> tuple[EpochEntry, int]:
        """The entry whose bytes hold ``offset`` and the offset where the next epoch begins (-1: the last epoch)."""
        i = max(0, bisect.bisect_right(self._starts, offset) - 1)
        end = self._starts[i + 1] if i + 1 < len(self._starts) else -1
        return self.entries[i], end


def history(entries: Iterable[EpochEntry]) -> tuple[EpochEntry, ...]:
    """The chain of epochs ending at the newest one: walking back, an epoch that began after a later epoch did was
    not this log's (an unclean election cut it away) and is left out. Epoch numbers are 5.x's ints."""
    chain: list[EpochEntry] = []
    for entry in sorted(entries, key=lambda e: e.epoch, reverse=True):
        if not 0 <= entry.epoch <= INT32_MAX:
            raise ValueError(f"epoch {entry.epoch} does not fit the AutoSwitch wire's int")
        if not chain or entry.start_offset <= chain[-1].start_offset:
            chain.append(entry)
    chain.reverse()
    return tuple(chain)


def truncation_point(entries: Iterable[EpochEntry], own_epoch: int) -> int | None:
    """Where a log whose last epoch is ``own_epoch`` leaves this history: the start of the first later epoch (None:
    no later epoch, nothing to cut)."""
    later = [e for e in entries if e.epoch > own_epoch]
    return min(later, key=lambda e: e.epoch).start_offset if later else None
