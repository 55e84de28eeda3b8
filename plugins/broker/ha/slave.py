"""Slave side of RocketMQ 4.x HA: the HA client (HAService.HAClient) and the metadata synchroniser
(SlaveSynchronize).

The HA client connects to the master's HA address (``haMasterAddress``, else what the name server answered at
registration), reports its max commit-log offset every ``haSendHeartbeatInterval`` (the first report one interval
after connecting, as 4.x does) and after every append, checks each header's offset against its own end (a mismatch
closes the connection and reconnects) and appends through the store's raw append, which builds the slave's own
consume queues and index. The appends run on the event loop like every other store write: each is at most one
transfer batch (32 KiB) into the memory-mapped file.

A failover group's slave speaks 5.x's AutoSwitch framing instead (:class:`AutoSwitchSession`, frames in
autoswitch.py): its handshake names its replica id, the master's answer (epoch entries) is checked by the failover
plugin before the first ACK, and the confirm offset of every transfer header moves the slave's read bound.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import trio

from pyrmq.plugins.broker.ha import autoswitch
from pyrmq.plugins.broker.ha.autoswitch import MasterFrameReader, MasterHandshake
from pyrmq.plugins.broker.ha.master import HEADER, OFFSET
from pyrmq.remoting import fastjson
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.errors import ProtocolError, RemotingError

log = logging.getLogger("pyrmq.broker.ha")

CONNECT_TIMEOUT = 3.0
RECONNECT_PAUSE = 5.0  # HAClient waits 5 s after a failed connect


@attrs.frozen
class AutoSwitchFollower:
    """What a failover replica gives its HA client: its id (the handshake's slaveBrokerId), a check of the master's
    handshake answer (returns why it cannot follow, or None; it may truncate the store before the first ACK), and
    where each transfer header's confirm offset goes (already capped at the slave's own end)."""

    replica_id: int
    check_handshake: Callable[[MasterHandshake], Awaitable[str | None]]
    confirmed: Callable[[int], None]


class HASlave:
    def __init__(self, store: Any, settings: Any, master_ha_addr: Callable[[], str], *,
                 follower: AutoSwitchFollower | None = None) -> None:
        self.store = store
        #: automatic failover: the AutoSwitch wire instead of the 4.x one
        self.follower = follower
        self.settings = settings
        self.master_ha_addr = master_ha_addr
        self.heartbeat = settings.haSendHeartbeatInterval / 1000
        self.housekeeping = settings.haHousekeepingInterval / 1000
        self.connected_to = ""
        #: the master's offset in its newest header (lag = this minus our own end)
        self.master_offset = 0
        self.sessions = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            addr = self.master_ha_addr()
            if not addr:
                await trio.sleep(1)
                continue
            host, _, port = addr.rpartition(":")
            try:
                with trio.fail_after(CONNECT_TIMEOUT):
                    stream = await trio.open_tcp_stream(host, int(port))
            except (OSError, trio.TooSlowError) as exc:
                log.info("HA master %s not reachable: %s", addr, exc)
                await trio.sleep(RECONNECT_PAUSE)
                continue
            self.connected_to = addr
            self.sessions += 1
            log.info("connected to HA master %s (own max offset %d)", addr, self.store.commit_log.max_offset)
            try:
                async with stream, trio.open_nursery() as nursery:
                    if self.follower is None:
                        state = _Session(self, stream, nursery.cancel_scope)
                    else:
                        state = AutoSwitchSession(self, stream, nursery.cancel_scope, self.follower)
                        if not await state.handshake():
                            raise ProtocolError("AutoSwitch HA: the master's handshake was refused")
                    nursery.start_soon(state.report_loop)
                    nursery.start_soon(state.read_loop)
            except* ProtocolError as group:
                log.warning("HA master %s: %s: connection closed", addr, group.exceptions[0])
            except* (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as group:
                # the nursery wraps the reader's or the reporter's error (a master killed with our reports unread
                # resets the connection)
                log.info("HA connection to %s lost: %s", addr, group.exceptions[0])
            self.connected_to = ""
            await trio.sleep(1)


class _Session:
    """One connection to the master."""

    def __init__(self, slave: HASlave, stream: trio.SocketStream, scope: trio.CancelScope) -> None:
        self.slave = slave
        self.store = slave.store
        self.stream = stream
        self.scope = scope
        self.reported = self.store.commit_log.max_offset
        self.last_write = trio.current_time()
        self._report_now = trio.Event()

    async def _report(self, offset: int) -> None:
        await self.stream.send_all(OFFSET.pack(offset))
        self.reported = offset
        self.last_write = trio.current_time()

    async def report_loop(self) -> None:
        slave = self.slave
        while True:
            wait = self.last_write + slave.heartbeat - trio.current_time()
            if wait > 0:
                with trio.move_on_after(wait):
                    await self._report_now.wait()
                self._report_now = trio.Event()
            now = trio.current_time()
            current = self.store.commit_log.max_offset
            if current > self.reported or now - self.last_write >= slave.heartbeat:
                await self._report(current)
            if trio.current_time() - self.last_write > slave.housekeeping:
                log.warning("HA: no report written for %.0f s: reconnecting", slave.housekeeping)
                self.scope.cancel()
                return

    async def read_loop(self) -> None:
        buffer = bytearray()
        while True:
            data = await self.stream.receive_some(256 * 1024)
            if not data:
                log.info("HA master closed the connection")
                self.scope.cancel()
                return
            buffer += data
            pos = 0
            appended = False
            while len(buffer) - pos >= HEADER.size:
                master_offset, size = HEADER.unpack_from(buffer, pos)
                if len(buffer) - pos - HEADER.size < size:
                    break
                own = self.store.commit_log.max_offset
                if own != 0 and own != master_offset:
                    log.error("HA: master sent offset %d, slave's max offset is %d: reconnecting", master_offset, own)
                    self.scope.cancel()
                    return
                self.slave.master_offset = master_offset + size
                if size:
                    body = memoryview(buffer)[pos + HEADER.size : pos + HEADER.size + size]
                    ok = self.store.append_raw(master_offset, body)
                    body.release()
                    if not ok:
                        log.error("HA: the store refused %d bytes at offset %d (own max %d): reconnecting",
                                  size, master_offset, own)
                        self.scope.cancel()
                        return
                    appended = True
                pos += HEADER.size + size
            del buffer[:pos]
            if appended:
                self._report_now.set()


class AutoSwitchSession(_Session):
    """One connection to a failover group's master on the AutoSwitch wire."""

    def __init__(self, slave: HASlave, stream: trio.SocketStream, scope: trio.CancelScope,
                 follower: AutoSwitchFollower) -> None:
        super().__init__(slave, stream, scope)
        self.follower = follower
        self.reader = MasterFrameReader()

    async def _report(self, offset: int) -> None:
        await self.stream.send_all(autoswitch.pack_ack(offset))
        self.reported = offset
        self.last_write = trio.current_time()

    async def handshake(self) -> bool:
        """Send the handshake, check the master's answer (the follower may truncate), ACK the own max offset.
        False when the follower refuses this master (the connection closes)."""
        follower = self.follower
        # isSyncFromLastFile 0 (5.x's default): an empty replica copies the master's whole log, so that it holds
        # what consumers may still read when it is elected
        await self.stream.send_all(autoswitch.pack_slave_handshake(follower.replica_id, sync_from_last_file=False))
        got = None
        with trio.move_on_after(self.slave.housekeeping):
            while (got := self.reader.next_frame()) is None:
                data = await self.stream.receive_some(64 * 1024)
                if not data:
                    raise ProtocolError("AutoSwitch HA: the master closed before its HANDSHAKE answer")
                self.reader.feed(data)
        if got is None:
            raise ProtocolError(f"AutoSwitch HA: no HANDSHAKE answer within {self.slave.housekeeping:.0f} s")
        frame, _ = got
        if not isinstance(frame, MasterHandshake):
            raise ProtocolError("AutoSwitch HA: the master's first frame is not its HANDSHAKE")
        refusal = await follower.check_handshake(frame)
        if refusal is not None:
            log.error("HA: not following the master at %s: %s", self.slave.connected_to, refusal)
            return False
        self.slave.master_offset = frame.max_offset
        await self._report(self.store.commit_log.max_offset)
        return True

    async def read_loop(self) -> None:
        reader = self.reader
        confirmed = self.follower.confirmed
        store = self.store
        while True:
            appended = False
            while (got := reader.next_frame()) is not None:
                header, body = got
                if not isinstance(header, autoswitch.TransferHeader):
                    raise ProtocolError("AutoSwitch HA: a second HANDSHAKE from the master")
                own = store.commit_log.max_offset
                if own != 0 and own != header.offset:
                    log.error("HA: master sent offset %d, slave's max offset is %d: reconnecting", header.offset, own)
                    self.scope.cancel()
                    return
                self.slave.master_offset = header.offset + header.size
                if header.size:
                    if not store.append_raw(header.offset, body):
                        log.error("HA: the store refused %d bytes at offset %d (own max %d): reconnecting",
                                  header.size, header.offset, own)
                        self.scope.cancel()
                        return
                    appended = True
                # the master's confirm offset, never beyond what this replica holds (AutoSwitchHAClient does the same)
                end = store.commit_log.max_offset
                confirmed(header.confirm_offset if header.confirm_offset < end else end)
            if appended:
                self._report_now.set()
            data = await self.stream.receive_some(256 * 1024)
            if not data:
                log.info("HA master closed the connection")
                self.scope.cancel()
                return
            reader.feed(data)


class MetadataSync:
    """SlaveSynchronize: topics and subscription groups (replaced when the master's DataVersion differs) and consumer
    offsets from the master's broker address, then the steps features contribute (``pyrmq_register_slave_sync``: the
    delay levels' offsets), every ``interval`` seconds (first after ``first`` seconds)."""

    def __init__(self, ctx: Any, master_addr: Callable[[], str], *, interval: float, first: float) -> None:
        self.ctx = ctx
        self.master_addr = master_addr
        self.interval = interval
        self.first = first
        self.rounds = 0
        #: what features copy from the master besides the core's documents, in name order
        self.steps = ctx.kernel.hooks.register_slave_sync(ctx.kernel)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        await trio.sleep(self.first)
        while True:
            addr = self.master_addr()
            if addr:
                try:
                    await self.sync_all(addr)
                    self.rounds += 1
                except (RemotingError, ValueError, KeyError, TypeError) as exc:
                    log.warning("metadata sync from master %s failed: %s", addr, exc)
            await trio.sleep(self.interval)

    async def _get(self, addr: str, code: int) -> Any:
        response = await self.ctx.client.invoke(addr, RemotingCommand.request(code, {}), timeout=3)
        if response.code != ResponseCode.SUCCESS:
            raise ValueError(f"request {code} answered {response.code} {response.remark}")
        return fastjson.loads(response.body_bytes())

    async def sync_all(self, addr: str) -> None:
        ctx = self.ctx
        topics = await self._get(addr, RequestCode.GET_ALL_TOPIC_CONFIG)
        if topics.get("dataVersion") != ctx.topics.data_version.to_json():
            ctx.topics.table.clear()
            ctx.topics.load(topics)
            ctx.topics.persist()
            log.info("topic configs synchronised from master %s (%d topics)", addr, len(ctx.topics.table))
        groups = await self._get(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        if groups.get("dataVersion") != ctx.groups.data_version.to_json():
            ctx.groups.table.clear()
            ctx.groups.load(groups)
            dv = groups.get("dataVersion") or {}
            ctx.groups.data_version.timestamp = int(dv.get("timestamp", 0))
            ctx.groups.data_version.counter = int(dv.get("counter", 0))
            ctx.groups.persist()
        offsets = await self._get(addr, RequestCode.GET_ALL_CONSUMER_OFFSET)
        ctx.offsets.load(offsets)
        ctx.offsets.persist()

        async def fetch(code: int) -> Any:
            return await self._get(addr, code)

        for step in self.steps:
            try:
                await step.sync(fetch)
            except RemotingError:
                raise
            except Exception as exc:  # a feature's failure fails this round, not the slave
                raise ValueError(f"step {step.name}: {exc!r}") from exc


