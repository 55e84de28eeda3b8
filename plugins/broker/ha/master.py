"""Master side of RocketMQ 4.x HA (HAService / HAConnection): the HA listener, one transfer per slave, and the
group-transfer wait behind SYNC_MASTER.

Wire (both directions big-endian, no framing beyond this):

- slave -> master: 8 bytes, the slave's max commit-log offset (its ack and, the first time, where to start);
- master -> slave: 12-byte header (``offset`` long, ``size`` int) then ``size`` bytes of raw commit log, at most
  ``haTransferBatchSize`` and never crossing a commit-log file; ``size`` 0 is the idle heartbeat
  (``haSendHeartbeatInterval``).

The master sends nothing before the slave's first report; a slave reporting 0 (an empty store) starts from the
beginning of the master's last commit-log file, as 4.x does. A slave silent for ``haHousekeepingInterval`` (20 s)
is dropped.

A failover group's master serves its slaves on 5.x's AutoSwitch framing instead (:meth:`HAMaster.serve_autoswitch`,
frames in autoswitch.py): the slave's handshake names its replica id, the master answers with its epoch entries,
and every transfer header carries the epoch of its bytes and the confirm offset.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable
from typing import Any

import attrs
import trio

from pyrmq.plugins.broker.ha.settings import HASettings
from pyrmq.plugins.broker.ha import autoswitch
from pyrmq.plugins.broker.ha.autoswitch import EpochHistory, SlaveAck, SlaveFrameReader
from pyrmq.remoting.errors import ProtocolError
from pyrmq.store.results import PutMessageStatus

log = logging.getLogger("pyrmq.broker.ha")

OFFSET = struct.Struct(">q")
HEADER = struct.Struct(">qi")
#: the confirm offset when no other replica must acknowledge (a master alone in its in-sync set)
ALL_ACKED = 1 << 62


@attrs.define(eq=False)
class SlaveConnection:
    """One connected slave, as HAConnection tracks it."""

    peer: str
    #: the replica id a failover slave named in its AutoSwitch handshake; None on the 4.x wire
    replica_id: int | None = None
    #: the handshake's isAsyncLearner flag: such a slave never joins the in-sync set
    learner: bool = False
    #: where the slave asked to start (-1 until its first report)
    request_offset: int = -1
    #: the highest offset the slave reported
    ack_offset: int = 0
    #: next byte to send
    next_offset: int = -1
    last_read: float = 0.0
    connected_at: float = 0.0
    #: the handshake's isSyncFromLastFile flag (where a slave reporting 0 starts)
    sync_from_last_file: bool = True
    #: when the slave's report was newest (for lag in seconds)
    acked_at: float = 0.0
    #: when the slave last reported the master's whole commit log (lag in seconds counts from here, or from the
    #: connection while it never had everything)
    caught_up_at: float = 0.0


class AppendNotifier:
    """Store dispatcher (after the store's own): wakes the idle transfers when a record is appended."""

    name = "ha-transfer-wakeup"
    order = 30

    def __init__(self) -> None:
        self.master: HAMaster | None = None

    def dispatch(self, request: Any) -> None:
        master = self.master
        if master is not None and not master.appended.is_set():
            master.appended.set()

    def dispatch_columns(self, batch: Any) -> None:
        """A batch put: one wake-up for all its records."""
        master = self.master
        if master is not None and not master.appended.is_set():
            master.appended.set()


class HAMaster:
    """HA listener and transfers of a master broker; ``wait_replicated`` is what SYNC_MASTER sends await."""

    def __init__(self, store: Any, settings: HASettings, *, file_size: int, listen_host: str,
                 epochs: EpochHistory | None = None, confirm_source: Callable[[], int] | None = None) -> None:
        self.store = store
        #: a failover master's epoch entries and its confirm offset as followers may read it (AutoSwitch wire)
        self.epochs = epochs
        self.confirm_source = confirm_source
        self.settings = settings
        self.listen_host = listen_host
        self.file_size = file_size
        self.batch = settings.haTransferBatchSize
        self.heartbeat = settings.haSendHeartbeatInterval / 1000
        self.silence = settings.haHousekeepingInterval / 1000
        self.fallbehind = settings.haSlaveFallbehindMax
        self.slave_timeout = settings.slaveTimeout / 1000
        self.slaves: set[SlaveConnection] = set()
        #: the highest offset any slave acknowledged (HAService.push2SlaveMaxOffset)
        self.push_to_slave_max = 0
        #: automatic failover: the replica ids that must acknowledge (None: the 4.x rule, any slave), and the
        #: offset all of them acknowledged
        self.members: frozenset[int] | None = None
        self.confirm_offset = -1
        #: called (no arguments) each time the confirm offset advanced: the failover plugin moves the store's read
        #: bound (the store wakes the pulls parked in front of it)
        self.on_confirm: Callable[[], None] | None = None
        self._acked = trio.Event()
        #: set by :class:`AppendNotifier` when the store appended something (wakes idle transfers)
        self.appended = trio.Event()
        self.port = 0

    # -- SYNC_MASTER -----------------------------------------------------------------------------------------

    def slave_ok(self, end_offset: int) -> bool:
        """HAService.isSlaveOK: a slave is connected and not more than haSlaveFallbehindMax behind."""
        return bool(self.slaves) and end_offset - self.push_to_slave_max < self.fallbehind

    async def wait_replicated(self, end_offset: int) -> PutMessageStatus:
        """PUT_OK once a slave acknowledged ``end_offset``; SLAVE_NOT_AVAILABLE at once without a usable slave;
        FLUSH_SLAVE_TIMEOUT after slaveTimeout."""
        if not self.slave_ok(end_offset):
            return PutMessageStatus.SLAVE_NOT_AVAILABLE
        with trio.move_on_after(self.slave_timeout):
            while self.push_to_slave_max < end_offset:
                await self._acked.wait()
            return PutMessageStatus.PUT_OK
        return PutMessageStatus.FLUSH_SLAVE_TIMEOUT

    def acked_by(self, replica_id: int) -> int:
        """The highest offset the connected slave announced as ``replica_id`` acknowledged, -1 when not connected."""
        return max((s.ack_offset for s in self.slaves if s.replica_id == replica_id and s.request_offset >= 0), default=-1)

    def set_members(self, members: Any) -> None:
        """Automatic failover: the replica ids every acknowledgement waits for (None: deposed, every wait fails).
        The confirm offset (what all of them acknowledged) is recomputed here and at each of their reports, so a
        waiting send compares one number, whatever the number of waiters."""
        self.members = None if members is None else frozenset(members)
        self._recompute_confirm(force_wake=True)

    def _recompute_confirm(self, *, force_wake: bool = False) -> None:
        members = self.members
        if members is None:
            confirm = -1
        else:
            confirm = min((self.acked_by(m) for m in members), default=ALL_ACKED)
        if confirm > self.confirm_offset or force_wake:
            advanced = confirm > self.confirm_offset
            self.confirm_offset = confirm
            self._acked.set()
            self._acked = trio.Event()
            if advanced:
                # the AutoSwitch transfers tell the followers at once (an empty header), not a heartbeat later
                self.appended.set()
                if self.on_confirm is not None:
                    self.on_confirm()
        else:
            self.confirm_offset = confirm

    async def wait_acked(self, end_offset: int, timeout: float) -> bool:
        """Until every replica of :meth:`set_members` acknowledged ``end_offset``; False after ``timeout`` or once
        the members are None. Automatic failover's commit rule (every in-sync replica has the message)."""
        with trio.move_on_after(timeout):
            while self.confirm_offset < end_offset:
                if self.members is None:
                    return False
                await self._acked.wait()
            return True
        return False

    def wake_waiters(self) -> None:
        """Re-check the waits."""
        self._acked.set()
        self._acked = trio.Event()

    def _ack(self, slave: SlaveConnection, offset: int) -> None:
        slave.ack_offset = offset
        slave.acked_at = trio.current_time()
        if offset >= self.store.commit_log.max_offset:
            slave.caught_up_at = slave.acked_at
        if self.members is not None:
            if slave.replica_id in self.members:
                self._recompute_confirm()
            self.push_to_slave_max = max(self.push_to_slave_max, offset)
        elif offset > self.push_to_slave_max:
            self.push_to_slave_max = offset
            self._acked.set()
            self._acked = trio.Event()

    # -- listener --------------------------------------------------------------------------------------------

    async def run(self, port: int, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen on ``port`` (0: any free port) and serve slaves; ``task_status`` gets the real port."""
        listeners = await trio.open_tcp_listeners(port, host=self.listen_host)
        self.port = listeners[0].socket.getsockname()[1]
        log.info("HA service listening on %s:%d", self.listen_host, self.port)
        task_status.started(self.port)
        await trio.serve_listeners(self.serve_slave, listeners)

    async def serve_slave(self, stream: trio.SocketStream) -> None:
        """Serve one connected slave on the 4.x wire until it or the master goes (the listener's handler)."""
        await self._serve(stream, autoswitch=False)

    async def _serve(self, stream: trio.SocketStream, *, autoswitch: bool) -> None:
        host, port = stream.socket.getpeername()[:2]
        now = trio.current_time()
        slave = SlaveConnection(f"{host}:{port}", last_read=now, connected_at=now)
        self.slaves.add(slave)
        log.info("slave %s connected", slave.peer)
        try:
            async with stream, trio.open_nursery() as nursery:
                if autoswitch:
                    handshake = trio.Event()
                    nursery.start_soon(self._read_autoswitch, stream, slave, handshake, nursery.cancel_scope)
                    nursery.start_soon(self._transfer_autoswitch, stream, slave, handshake)
                else:
                    nursery.start_soon(self._read_reports, stream, slave, nursery.cancel_scope)
                    nursery.start_soon(self._transfer, stream, slave)
        except* ProtocolError as group:  # a malformed AutoSwitch frame: this connection only
            log.warning("slave %s: %s: connection closed", slave.peer, group.exceptions[0])
        except* (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as group:
            # the nursery wraps the transfer's or the reader's error (a slave killed mid-transfer resets)
            log.info("slave %s: %s", slave.peer, group.exceptions[0])
        finally:
            self.slaves.discard(slave)
            if self.members is not None and slave.replica_id in self.members:
                self._recompute_confirm()
            log.info("slave %s gone", slave.peer)

    async def _receive(self, stream: trio.SocketStream, slave: SlaveConnection) -> bytes | None:
        """The slave's next bytes (b"": it closed), or None after ``silence`` seconds without any (logged)."""
        with trio.move_on_after(self.silence):
            data = await stream.receive_some(4096)
            slave.last_read = trio.current_time()
            return data
        log.warning("slave %s silent for %.0f s: dropped", slave.peer, self.silence)
        return None

    async def _read_reports(self, stream: trio.SocketStream, slave: SlaveConnection, scope: trio.CancelScope) -> None:
        buffer = bytearray()
        while True:
            data = await self._receive(stream, slave)
            if not data:  # silent or closed
                scope.cancel()
                return
            buffer += data
            usable = len(buffer) - len(buffer) % 8
            if usable:
                # only the newest report counts (HAConnection.ReadSocketService)
                (offset,) = OFFSET.unpack_from(buffer, usable - 8)
                del buffer[:usable]
                if slave.request_offset < 0:
                    slave.request_offset = offset
                    log.info("slave %s asks from offset %d", slave.peer, offset)
                self._ack(slave, offset)

    async def _transfer(self, stream: trio.SocketStream, slave: SlaveConnection) -> None:
        while slave.request_offset < 0:
            await trio.sleep(0.01)
        if slave.request_offset == 0:
            top = self.store.commit_log.max_offset
            slave.next_offset = top - top % self.file_size
        else:
            slave.next_offset = slave.request_offset
        last_write = trio.current_time()
        while True:
            if self.appended.is_set():
                self.appended = trio.Event()
            data = self.store.get_commit_log_data(slave.next_offset, self.batch)
            if data is not None:
                payload = bytes(data)
                await stream.send_all(HEADER.pack(slave.next_offset, len(payload)) + payload)
                slave.next_offset += len(payload)
                last_write = trio.current_time()
                continue
            if self.store.commit_log.max_offset > slave.next_offset and self.store.commit_log.queue.find(slave.next_offset) is None:
                # the end of a file: the next transfer starts at the next file's first byte
                slave.next_offset += self.file_size - slave.next_offset % self.file_size
                continue
            idle = trio.current_time() - last_write
            if idle >= self.heartbeat:
                await stream.send_all(HEADER.pack(slave.next_offset, 0))
                last_write = trio.current_time()
                continue
            with trio.move_on_after(self.heartbeat - idle):
                await self.appended.wait()

    # -- AutoSwitch (failover groups) ------------------------------------------------------------------------

    async def serve_autoswitch(self, stream: trio.SocketStream) -> None:
        """Serve one slave of a failover group on the AutoSwitch wire until it or the master goes. A malformed
        frame closes this connection only."""
        await self._serve(stream, autoswitch=True)

    async def _read_autoswitch(self, stream: trio.SocketStream, slave: SlaveConnection, handshake: trio.Event,
                               scope: trio.CancelScope) -> None:
        reader = SlaveFrameReader()
        while True:
            data = await self._receive(stream, slave)
            if not data:  # silent or closed
                if data is not None and reader.buffer:
                    raise ProtocolError(f"AutoSwitch HA: the slave closed with {len(reader.buffer)} bytes of an "
                                        "unfinished frame")
                scope.cancel()
                return
            newest = -1
            for frame in reader.feed(data):
                if isinstance(frame, SlaveAck):
                    newest = frame.offset
                else:
                    slave.replica_id = frame.replica_id
                    slave.learner = frame.async_learner
                    slave.sync_from_last_file = frame.sync_from_last_file
                    log.info("slave %s is replica %d%s", slave.peer, frame.replica_id,
                             " (async learner)" if frame.async_learner else "")
                    handshake.set()
            if newest >= 0:
                if slave.request_offset < 0:
                    slave.request_offset = newest
                    log.info("slave %s (replica %s) asks from offset %d", slave.peer, slave.replica_id, newest)
                self._ack(slave, newest)

    async def _transfer_autoswitch(self, stream: trio.SocketStream, slave: SlaveConnection, handshake: trio.Event) -> None:
        store = self.store
        epochs = self.epochs
        assert epochs is not None and self.confirm_source is not None
        confirm_source = self.confirm_source
        await handshake.wait()
        last = epochs.last
        await stream.send_all(autoswitch.pack_master_handshake(store.commit_log.max_offset, last.epoch, epochs.entries))
        while slave.request_offset < 0:
            await trio.sleep(0.01)
        if slave.request_offset == 0:
            # 5.x: from the last file's start with isSyncFromLastFile, else from the oldest byte the master holds
            top = store.commit_log.max_offset
            slave.next_offset = top - top % self.file_size if slave.sync_from_last_file else store.commit_log.min_offset
        else:
            slave.next_offset = slave.request_offset
        sent_confirm = -1
        last_write = trio.current_time()
        while True:
            if self.appended.is_set():
                self.appended = trio.Event()
            entry, end = epochs.at(slave.next_offset)
            limit = self.batch if end < 0 else min(self.batch, end - slave.next_offset)
            data = store.get_commit_log_data(slave.next_offset, limit) if limit > 0 else None
            if data is not None:
                payload = bytes(data)
                sent_confirm = confirm_source()
                await stream.send_all(autoswitch.pack_transfer(slave.next_offset, len(payload), entry, sent_confirm) + payload)
                slave.next_offset += len(payload)
                last_write = trio.current_time()
                continue
            if store.commit_log.max_offset > slave.next_offset and store.commit_log.queue.find(slave.next_offset) is None:
                slave.next_offset += self.file_size - slave.next_offset % self.file_size
                continue
            idle = trio.current_time() - last_write
            confirm = confirm_source()
            if idle >= self.heartbeat or confirm != sent_confirm:
                # a heartbeat, or the confirm offset moved with nothing to send
                sent_confirm = confirm
                await stream.send_all(autoswitch.pack_transfer(slave.next_offset, 0, entry, confirm))
                last_write = trio.current_time()
                continue
            with trio.move_on_after(self.heartbeat - idle):
                await self.appended.wait()

    # -- reporting -------------------------------------------------------------------------------------------

    def lag(self) -> list[dict[str, Any]]:
        """Per slave: address, acknowledged offset, bytes behind the master, and seconds behind (since it last had
        everything; 0 when it has everything now)."""
        top = self.store.commit_log.max_offset
        now = trio.current_time()
        out = []
        for s in sorted(self.slaves, key=lambda s: s.peer):
            behind = max(0, top - s.ack_offset)
            since = s.caught_up_at or s.connected_at
            out.append({"slave": s.peer, "ackOffset": s.ack_offset, "behindBytes": behind,
                        "behindSeconds": 0.0 if behind == 0 else round(now - since, 3)})
        return out
