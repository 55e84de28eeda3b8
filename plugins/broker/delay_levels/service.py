"""The delay-levels feature as one object: scheduler, progress, delivery and replica side mixed into
:class:`DelayLevelService`, with its service (the flush loop and the level tasks)."""

from __future__ import annotations

import collections
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

import trio

from pyrmq.plugins.broker.delay_levels.delivery import DelayDelivery
from pyrmq.plugins.broker.delay_levels.progress import DelayProgress, ProgressFile
from pyrmq.plugins.broker.delay_levels.replica import DelayReplica
from pyrmq.plugins.broker.delay_levels.scheduler import DelayScheduling
from pyrmq.store.config_files import DelayOffsetFile


class DelayLevelService(DelayScheduling, DelayProgress, DelayDelivery, DelayReplica):
    """The ``DELAY`` scheduler (a :class:`~pyrmq.kernel.types.Scheduler`) and its per-level delivery tasks over
    ``store``; progress in ``config_dir``. ``deliver``: whether it starts as the master (the plugin starts it False
    and follows ``pyrmq_role_changed``)."""

    def __init__(
        self,
        store: Any,
        levels_ms: Sequence[int],
        config_dir: str,
        *,
        flush_interval_s: float = 10.0,
        deliver: bool = True,
    ) -> None:
        if not levels_ms:
            raise ValueError("no delay levels")
        if len(levels_ms) > ProgressFile.MAX_LEVELS:
            raise ValueError(f"at most {ProgressFile.MAX_LEVELS} delay levels")
        self.store = store
        self.levels_ms = tuple(int(v) for v in levels_ms)
        self.config_dir = config_dir
        self.flush_interval_s = flush_interval_s
        self.master = deliver
        self.offset_file = DelayOffsetFile(os.path.join(config_dir, "delayOffset.json"))
        self.progress: ProgressFile | None = None
        self.offsets: dict[int, int] = {}
        self._wake: dict[int, trio.Event] = {}
        self._role_event = trio.Event()
        self._dirty = False
        self._persist_lock = threading.Lock()  # the flush thread and a shutdown may overlap
        self._history: dict[int, collections.deque[tuple[int, int]]] = {}
        self._history_overflowed: set[int] = set()
        self.last_copy: int | None = None
        #: deliveries made since start (for tools and tests)
        self.delivered = 0

    @property
    def clock(self) -> Callable[[], int]:
        return self.store.clock  # type: ignore[no-any-return]

    @property
    def deliver_enabled(self) -> bool:
        return self.master

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Deliver due messages of every level while master and flush delayOffset.json until cancelled."""
        if self.progress is None:
            self.load()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._flush_loop)
            nursery.start_soon(self._deliver_while_master)
            task_status.started()

    async def _flush_loop(self) -> None:
        while True:
            await trio.sleep(self.flush_interval_s)
            if self._dirty:
                await trio.to_thread.run_sync(self.persist)
