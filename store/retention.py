"""Retention (Java ``CleanCommitLogService`` / ``CleanConsumeQueueService``).

Commit-log segments older than ``file_reserved_time`` hours are deleted at the ``delete_when`` hours, or at once when
the disk holding the commit log passes ``disk_max_used_space_ratio`` (75 %). Past
``disk_space_clean_forcibly_ratio`` (85 %) segments go even if they are not expired; past
``disk_space_warning_level_ratio`` (90 %) the store refuses writes (SERVICE_NOT_AVAILABLE, with the reason) until
the ratio falls again. The active segment is never deleted, so refusing writes never corrupts data. Consume-queue
and index files that only point into deleted segments go next.

pyrmq deviation: a forced clean re-measures the disk after each deleted segment and stops once it is back under
``disk_max_used_space_ratio`` instead of always deleting a batch of 10.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import attrs
import trio

if TYPE_CHECKING:
    from .message_store import MessageStore

log = logging.getLogger(__name__)

#: ``path -> used fraction of its file system in [0, 1]``
DiskUsage = Callable[[str], float]


def disk_usage_ratio(path: str) -> float:
    """Used fraction of the file system holding ``path`` (Java ``UtilAll.getDiskPartitionSpaceUsedPercent``)."""
    usage = shutil.disk_usage(path)
    if usage.total <= 0:
        return -1.0
    return (usage.total - usage.free) / usage.total


@attrs.define
class RetentionReport:
    disk_ratio: float
    time_up: bool
    forced: bool
    disk_full: bool
    deleted_segments: list[str] = attrs.field(factory=list)
    deleted_queue_files: int = 0
    deleted_index_files: int = 0


class RetentionService:
    def __init__(
        self,
        store: MessageStore,
        *,
        disk_usage: DiskUsage | None = None,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.config = store.config
        self.disk_usage = disk_usage or disk_usage_ratio
        self.now = now

    def is_time_to_delete(self, now_s: float) -> bool:
        hour = time.localtime(now_s).tm_hour
        return any(int(h) == hour for h in self.config.delete_when.split(";") if h.strip())

    def check_disk(self) -> float:
        """Measure the disk and switch write refusal on or off; returns the used fraction."""
        cfg = self.config
        ratio = self.disk_usage(cfg.commit_log_dir)
        if ratio >= cfg.disk_space_warning_level_ratio / 100:
            self.store._set_disk_full(
                f"disk full: {ratio * 100:.1f}% of the commit-log file system is used "
                f"(refusing writes at >= {cfg.disk_space_warning_level_ratio}%)"
            )
        else:
            self.store._set_disk_full(None)
        return ratio

    def run_once(self, now_s: float | None = None) -> RetentionReport:
        cfg = self.config
        now_s = self.now() if now_s is None else now_s
        ratio = self.check_disk()
        full = ratio >= cfg.disk_space_warning_level_ratio / 100
        clean_now = ratio >= cfg.disk_space_clean_forcibly_ratio / 100 or ratio < 0
        space_to_delete = ratio >= cfg.disk_max_used_space_ratio / 100 or ratio < 0
        time_up = self.is_time_to_delete(now_s)
        forced = clean_now and cfg.clean_file_forcibly_enable
        report = RetentionReport(ratio, time_up, forced, full)
        if time_up or space_to_delete:
            report.deleted_segments = self._delete_segments(now_s, forced)
        cl = self.store.commit_log
        min_phy = cl.min_offset
        for cq in list(self.store.consume_queues.table.values()):
            report.deleted_queue_files += cq.delete_expired_files(min_phy)
        report.deleted_index_files = self.store.index.delete_expired(min_phy)
        if report.deleted_segments:
            report.disk_full = self.check_disk() >= cfg.disk_space_warning_level_ratio / 100
            log.info(
                "retention: deleted %d commit-log segments (%s), %d consume-queue files, %d index files; "
                "disk %.1f%% used",
                len(report.deleted_segments), ", ".join(report.deleted_segments), report.deleted_queue_files,
                report.deleted_index_files, ratio * 100,
            )
        return report

    def _delete_segments(self, now_s: float, forced: bool) -> list[str]:
        cfg = self.config
        queue = self.store.commit_log.queue
        expired_before = now_s - cfg.file_reserved_time * 3600
        deleted: list[str] = []
        while len(queue.files) > 1 and len(deleted) < cfg.delete_files_batch_max:
            mf = queue.files[0]
            if mf.flushed_position < mf.wrote_position:
                break  # never delete bytes that are not even durable yet
            if not (forced or mf.last_modified() <= expired_before):
                break  # files are deleted oldest first, never from the middle
            deleted.append(mf.path)
            queue.remove_first(1)
            if forced and self.disk_usage(cfg.commit_log_dir) < cfg.disk_max_used_space_ratio / 100:
                break
        return deleted

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        interval = self.config.clean_resource_interval / 1000
        while True:
            await trio.sleep(interval)
            try:
                self.run_once()
            except OSError:
                log.exception("retention run failed")
