"""Flush policies (spec 7.12 "SYNC_FLUSH", 6.2): when the commit log's dirty pages reach the disk.

A policy is handed a :class:`FlushTarget` and runs as a trio service; every ``fdatasync`` goes through
``trio.to_thread.run_sync`` so the event loop never blocks on the disk. :func:`default_flush_policy` picks one from
the config's ``flush_disk_type`` (as RocketMQ's CommitLog does); tests may hand the store any :class:`FlushPolicy`.
"""

from __future__ import annotations

import logging
from typing import Protocol

import trio

from .config import FlushDiskType, StoreConfig

log = logging.getLogger(__name__)


class FlushTarget(Protocol):
    """What a policy flushes (the store passes its commit log)."""

    @property
    def flushed_offset(self) -> int: ...

    @property
    def max_offset(self) -> int: ...

    def flush(self) -> int:
        """Blocking (call it from a worker thread): make every appended byte durable; returns the flushed offset."""
        ...


class FlushPolicy(Protocol):
    async def run(self, target: FlushTarget, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled; call ``task_status.started()`` when ready."""
        ...

    async def wait_flushed(self, target: FlushTarget, offset: int, timeout: float) -> bool:
        """Return once ``target.flushed_offset >= offset`` (True) or after ``timeout`` seconds (False)."""
        ...


class _WaitingPolicy:
    """Shared waiter bookkeeping: callers park on an event until a flush passes their offset."""

    def __init__(self) -> None:
        self._waiters: list[tuple[int, trio.Event]] = []
        self._requested = trio.Event()
        self._running = False
        self.flush_count = 0

    def _release(self, flushed: int) -> None:
        if not self._waiters:
            return
        still = []
        for offset, event in self._waiters:
            if offset <= flushed:
                event.set()
            else:
                still.append((offset, event))
        self._waiters = still

    async def _flush(self, target: FlushTarget) -> int:
        flushed = await trio.to_thread.run_sync(target.flush)
        self.flush_count += 1
        self._release(flushed)
        return flushed

    async def wait_flushed(self, target: FlushTarget, offset: int, timeout: float) -> bool:
        if target.flushed_offset >= offset:
            return True
        if not self._running:
            # no service (a tool or a test driving the store directly): flush inline, still off the loop
            with trio.move_on_after(timeout):
                await self._flush(target)
            return target.flushed_offset >= offset
        event = trio.Event()
        entry = (offset, event)
        self._waiters.append(entry)
        self._requested.set()
        with trio.move_on_after(timeout):
            await event.wait()
            return True
        try:
            self._waiters.remove(entry)
        except ValueError:
            pass
        return target.flushed_offset >= offset


class GroupCommitService(_WaitingPolicy):
    """SYNC_FLUSH: appenders wait for their bytes; one ``fdatasync`` serves every waiter that arrived before it
    started (group commit, Java ``GroupCommitService``). Appends that do not wait (``WAIT=false``) are flushed at
    the next group or after ``idle_flush_interval`` seconds."""

    def __init__(self, idle_flush_interval: float = 0.5) -> None:
        super().__init__()
        self.idle_flush_interval = idle_flush_interval

    async def run(self, target: FlushTarget, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self._running = True
        task_status.started()
        try:
            while True:
                with trio.move_on_after(self.idle_flush_interval):
                    await self._requested.wait()
                self._requested = trio.Event()
                if target.max_offset > target.flushed_offset:
                    await self._flush(target)
                else:
                    self._release(target.flushed_offset)
                if self._waiters:
                    self._requested.set()
        finally:
            self._running = False


class AsyncFlushService(_WaitingPolicy):
    """ASYNC_FLUSH (default): every ``interval`` seconds flush when at least ``least_pages`` pages are dirty, and
    whatever is dirty every ``thorough_interval`` seconds (Java ``FlushRealTimeService``)."""

    def __init__(
        self,
        interval: float = 0.5,
        least_pages: int = 4,
        thorough_interval: float = 10.0,
        page_size: int = 4096,
    ) -> None:
        super().__init__()
        self.interval = interval
        self.least_bytes = least_pages * page_size
        self.thorough_interval = thorough_interval

    async def run(self, target: FlushTarget, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self._running = True
        task_status.started()
        last_thorough = trio.current_time()
        try:
            while True:
                with trio.move_on_after(self.interval):
                    await self._requested.wait()
                self._requested = trio.Event()
                dirty = target.max_offset - target.flushed_offset
                now = trio.current_time()
                thorough = now - last_thorough >= self.thorough_interval
                if dirty > 0 and (dirty >= self.least_bytes or thorough or self._waiters):
                    await self._flush(target)
                    if thorough:
                        last_thorough = now
                elif dirty <= 0:
                    self._release(target.flushed_offset)
                if self._waiters:
                    self._requested.set()
        finally:
            self._running = False


def default_flush_policy(config: StoreConfig) -> FlushPolicy:
    if config.flush_disk_type is FlushDiskType.SYNC_FLUSH:
        return GroupCommitService(idle_flush_interval=config.flush_interval_commit_log / 1000)
    return AsyncFlushService(
        interval=config.flush_interval_commit_log / 1000,
        least_pages=config.flush_commit_log_least_pages,
        thorough_interval=config.flush_commit_log_thorough_interval / 1000,
        page_size=config.os_page_size,
    )
