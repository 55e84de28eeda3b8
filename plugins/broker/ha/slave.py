"""Slave side of RocketMQ 4.x HA: the HA client (HAService.HAClient) and the metadata synchroniser
(SlaveSynchronize).

The HA client connects to the master's HA address (``haMasterAddress``, else what the name server answered at
registration), reports its max commit-log offset every ``haSendHeartbeatInterval`` (the first report one interval
after connecting, as 4.x does) and after every append, checks each header's offset against its own end (a mismatch
closes the connection and reconnects) and appends through the store's raw append, which builds the slave's own
consume queues and index. The appends run on the event loop like every other store write: each is at most one
transfer batch (32 KiB) into the memory-mapped file.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import trio

from pyrmq.plugins.broker.ha.master import HEADER, OFFSET
from pyrmq.remoting import fastjson
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.errors import RemotingError
from pyrmq.store.config_files import DelayOffsetFile, config_path

log = logging.getLogger("pyrmq.broker.ha")

CONNECT_TIMEOUT = 3.0
RECONNECT_PAUSE = 5.0  # HAClient waits 5 s after a failed connect


class HASlave:
    def __init__(self, store: Any, settings: Any, master_ha_addr: Callable[[], str], *, replica_id: int | None = None) -> None:
        self.store = store
        #: automatic failover: announced to the master first (as -(id + 1)), then the offset reported at once
        self.replica_id = replica_id
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
                    state = _Session(self, stream, nursery.cancel_scope)
                    if self.replica_id is not None:
                        await stream.send_all(OFFSET.pack(-self.replica_id - 1))
                        await state._report(self.store.commit_log.max_offset)
                    nursery.start_soon(state.report_loop)
                    nursery.start_soon(state.read_loop)
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


class MetadataSync:
    """SlaveSynchronize: topics and subscription groups (replaced when the master's DataVersion differs), consumer
    offsets and delay offsets, from the master's broker address, every ``interval`` seconds (first after ``first`` seconds)."""

    def __init__(self, ctx: Any, master_addr: Callable[[], str], *, interval: float, first: float) -> None:
        self.ctx = ctx
        self.master_addr = master_addr
        self.interval = interval
        self.first = first
        self.rounds = 0
        self.delay_offsets: dict[int, int] | None = None

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
        # delayOffset.json written as the master's, as SlaveSynchronize.syncDelayOffset does (read at start as master)
        delay = await self._get(addr, RequestCode.GET_ALL_DELAY_OFFSET)
        table = {int(k): int(v) for k, v in (delay.get("offsetTable") or {}).items()}
        if table != self.delay_offsets:
            DelayOffsetFile(config_path(str(ctx.settings.store_root), "delayOffset.json")).save_table(table)
            self.delay_offsets = table


