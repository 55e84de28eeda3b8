"""StoreConfig: the knobs of RocketMQ's ``MessageStoreConfig`` that pyrmq honours, in snake_case.

Defaults are the Java 4.9.8 defaults (spec section 6); tests shrink the segment, queue and index sizes.
"""

from __future__ import annotations

import enum
import os

import attrs

CQ_STORE_UNIT_SIZE = 20


class FlushDiskType(enum.Enum):
    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"


def _flush_type(value: FlushDiskType | str) -> FlushDiskType:
    if isinstance(value, FlushDiskType):
        return value
    return FlushDiskType(str(value).upper())


def _positive(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value <= 0:
        raise ValueError(f"{attribute.name} must be > 0, got {value!r}")


def _cq_size(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value <= 0 or value % CQ_STORE_UNIT_SIZE:
        raise ValueError(f"{attribute.name} must be a positive multiple of {CQ_STORE_UNIT_SIZE}, got {value!r}")


def _ratio(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if not 10 <= value <= 95:
        raise ValueError(f"{attribute.name} must be a percentage in [10, 95], got {value!r}")


def _delete_when(instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    try:
        hours = [int(h) for h in value.split(";") if h.strip()]
    except ValueError:
        raise ValueError(f"{attribute.name} must be hours like '04' or '04;16', got {value!r}") from None
    if not hours or any(not 0 <= h <= 23 for h in hours):
        raise ValueError(f"{attribute.name} must be hours like '04' or '04;16', got {value!r}")


@attrs.frozen
class StoreConfig:
    store_path_root_dir: str = attrs.field(
        default=os.path.join(os.path.expanduser("~"), "store"), converter=os.fspath
    )
    #: defaults to ``<root>/commitlog``
    store_path_commit_log: str | None = None
    mapped_file_size_commit_log: int = attrs.field(default=1024 * 1024 * 1024, validator=_positive)
    mapped_file_size_consume_queue: int = attrs.field(default=300_000 * CQ_STORE_UNIT_SIZE, validator=_cq_size)
    #: largest message body; properties are capped at 32767 bytes and topics at 127 bytes by the format
    max_message_size: int = attrs.field(default=4 * 1024 * 1024, validator=_positive)
    flush_disk_type: FlushDiskType = attrs.field(default=FlushDiskType.ASYNC_FLUSH, converter=_flush_type)
    flush_interval_commit_log: int = attrs.field(default=500, validator=_positive)  # ms
    flush_commit_log_least_pages: int = 4
    flush_commit_log_thorough_interval: int = 10_000  # ms
    flush_interval_consume_queue: int = attrs.field(default=1000, validator=_positive)  # ms
    flush_consume_queue_least_pages: int = 2
    sync_flush_timeout: int = attrs.field(default=5000, validator=_positive)  # ms
    file_reserved_time: int = 72  # hours
    delete_when: str = attrs.field(default="04", validator=_delete_when)
    disk_max_used_space_ratio: int = attrs.field(default=75, validator=_ratio)
    disk_space_clean_forcibly_ratio: int = attrs.field(default=85, validator=_ratio)
    disk_space_warning_level_ratio: int = attrs.field(default=90, validator=_ratio)
    clean_file_forcibly_enable: bool = True
    clean_resource_interval: int = 10_000  # ms
    delete_files_batch_max: int = 10
    max_hash_slot_num: int = attrs.field(default=5_000_000, validator=_positive)
    max_index_num: int = attrs.field(default=5_000_000 * 4, validator=_positive)
    message_index_enable: bool = True
    check_crc_on_recover: bool = True
    #: after the Java-style recovery, walk every record header of the whole commit log and re-dispatch what a
    #: consume queue lacks (this is what rebuilds a deleted consume-queue directory); ~1 us per record
    verify_dispatch_on_load: bool = True
    max_transfer_count_on_message_in_memory: int = 32
    max_transfer_bytes_on_message_in_memory: int = 256 * 1024
    #: a pull this far (percent of physical memory) behind the commit log's end is told to read from a slave
    access_message_in_memory_max_ratio: int = 40
    #: CQ bytes scanned per pull: max(16000, max_msg_nums * 20) in Java
    max_filter_message_count: int = 16_000
    #: allocate and pre-fault the commit-log segment being written and create the next one ahead (worker
    #: threads). Java defaults to false; on a sparse file first-touch page faults halve the append rate
    warm_mapped_file_enable: bool = True
    #: give commit-log segments, consume-queue files and index files all their disk blocks when created, so that
    #: a file system filled up behind the disk-ratio check refuses writes (ENOSPC) instead of killing the broker
    #: with SIGBUS on a page of a sparse hole. Costs the files' full size at once (a 1 GiB segment, a 420 MB index
    #: file), so it is off by default, like RocketMQ, whose files are sparse too (docs/decisions.md)
    preallocate_store_files: bool = False
    os_page_size: int = 4096

    @property
    def commit_log_dir(self) -> str:
        return self.store_path_commit_log or os.path.join(self.store_path_root_dir, "commitlog")

    @property
    def consume_queue_dir(self) -> str:
        return os.path.join(self.store_path_root_dir, "consumequeue")

    @property
    def index_dir(self) -> str:
        return os.path.join(self.store_path_root_dir, "index")

    @property
    def checkpoint_path(self) -> str:
        return os.path.join(self.store_path_root_dir, "checkpoint")

    @property
    def abort_path(self) -> str:
        return os.path.join(self.store_path_root_dir, "abort")

    @property
    def lock_path(self) -> str:
        return os.path.join(self.store_path_root_dir, "lock")

    @property
    def config_dir(self) -> str:
        return os.path.join(self.store_path_root_dir, "config")
