"""Shared parts of the reliability suite: real name server / broker subprocesses on 127.0.0.1, and the independent
checker that reads a store directory with nothing but the store's on-disk format readers.

Sizes: ``CHAOS_FULL=1`` (``make chaos``) runs every scenario at its full size; without it the same scenarios run a
short round inside ``make test``. Every scenario adds a row to the summary table printed at the end of the session
(tests/chaos/conftest.py) and written to ``$CHAOS_REPORT`` when that is set.
"""

from __future__ import annotations

import collections
import json
import mmap
import os
import signal
import socket
import subprocess
import sys
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from importlib.resources import files
from pathlib import Path
from typing import Any

import attrs
import trio

from pyrmq.store.commitlog import END_OF_FILE, RecordHeader, read_record_header
from pyrmq.store.format import (
    CQ_UNIT,
    INDEX_ENTRY,
    INDEX_HEADER,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
    decode_properties,
    index_key_hash,
    unsigned_hash,
)
from pyrmq.store.mapped_file import is_segment_name

FULL = os.environ.get("CHAOS_FULL", "") not in ("", "0")

#: rows for the summary table: (scenario, {column: value})
RESULTS: list[tuple[str, dict[str, Any]]] = []


def report(scenario: str, **figures: Any) -> None:
    RESULTS.append((scenario, figures))
    out = os.environ.get("CHAOS_REPORT")
    if out:
        with open(out, "a") as f:
            f.write(json.dumps({"scenario": scenario, **figures}) + "\n")


#: test-only broker plugins (tests/chaos/probe), importable with this folder on the broker's PYTHONPATH
PROBE_DIR = Path(__file__).with_name("probe")


def probe_bundle(path: Path, *plugins: str) -> Path:
    """Write the packaged broker bundle plus ``plugins`` (modules of :data:`PROBE_DIR`) to ``path``."""
    text = files("pyrmq.configs").joinpath("broker.toml").read_text()
    assert "plugins = [" in text
    path.write_text(text.replace("plugins = [", "plugins = [\n" + "".join(f'    "{p}",\n' for p in plugins), 1))
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: the one broker port picker of the tests (tests/conftest.py ``broker_port``: P, P - 2 for the VIP channel and
#: P + 1 for HA all free), installed by tests/chaos/conftest.py for every chaos test
broker_port_picker: Callable[[], int] | None = None


def broker_port() -> int:
    assert broker_port_picker is not None, "tests/chaos/conftest.py installs the broker port picker"
    return broker_port_picker()


def pyrmq_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "pyrmq", "--no-entry-points", "--log-level", "INFO", *args]


def spawn(cmd: list[str], log_path: Path, **kw: Any) -> subprocess.Popen:
    log = open(log_path, "ab")
    kw.setdefault("env", dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, **kw)
    finally:
        log.close()


def stop(proc: subprocess.Popen | None, sig: int = signal.SIGTERM, wait: float = 20) -> None:
    """Stop a process we started, by its pid; SIGKILL when it does not exit in ``wait`` seconds."""
    if proc is None or proc.poll() is not None:
        return
    try:
        proc.send_signal(sig)
        proc.wait(wait)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def wait_port(port: int, proc: subprocess.Popen, deadline_s: float = 60) -> float:
    """Wait until ``127.0.0.1:port`` accepts connections; returns the seconds it took. Fails if ``proc`` exits."""
    t0 = time.monotonic()
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"process {proc.args} exited with {proc.returncode} before serving")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return time.monotonic() - t0
        except OSError:
            pass
        if time.monotonic() - t0 > deadline_s:
            raise AssertionError(f"nothing listens on 127.0.0.1:{port} after {deadline_s} s")
        time.sleep(0.05)


@attrs.define
class Cluster:
    """A ``pyrmq namesrv`` and a ``pyrmq broker`` subprocess over one store directory."""

    root: Path
    broker_settings: dict[str, str] = attrs.Factory(dict)
    namesrv_port: int = attrs.Factory(free_port)
    broker_port: int = attrs.Factory(broker_port)
    namesrv: subprocess.Popen | None = None
    broker: subprocess.Popen | None = None
    #: the store directory (default ``root/store``)
    store_path: Path | None = None
    #: the broker's bundle (a packaged name or a TOML path) and extra environment for its process
    bundle: str = "broker"
    broker_env: dict[str, str] = attrs.Factory(dict)

    @property
    def store_dir(self) -> Path:
        return self.store_path or self.root / "store"

    @property
    def broker_log(self) -> Path:
        return self.root / "broker.log"

    @property
    def namesrv_addr(self) -> str:
        return f"127.0.0.1:{self.namesrv_port}"

    @property
    def broker_addr(self) -> str:
        return f"127.0.0.1:{self.broker_port}"

    def start_namesrv(self) -> None:
        self.namesrv = spawn(pyrmq_cmd("namesrv", "--listen", self.namesrv_addr,
                                       "--set", f"namesrv.kvConfigPath={self.root / 'kv.json'}"),
                             self.root / "namesrv.log")
        wait_port(self.namesrv_port, self.namesrv)

    def start_broker(self) -> float:
        """Start the broker; returns the seconds from spawn until it accepts connections (process start + store
        load and recovery)."""
        settings = {
            "brokerName": "chaos-broker", "mappedFileSizeCommitLog": str(4 * 1024 * 1024),
            "maxHashSlotNum": "50000", "maxIndexNum": "200000", **self.broker_settings,
        }
        args = ["broker", "-c", self.bundle, "--namesrv", self.namesrv_addr, "--listen", self.broker_addr,
                "--store-dir", str(self.store_dir)]
        for k, v in settings.items():
            args += ["--set", f"{k}={v}"]
        self.broker = spawn(pyrmq_cmd(*args), self.broker_log, env=dict(os.environ, PYTHONUNBUFFERED="1", **self.broker_env))
        return wait_port(self.broker_port, self.broker)

    async def registered(self, topic: str = "TBW102", deadline_s: float = 30) -> None:
        """Until the name server routes ``topic`` to this broker as its master. The broker accepts connections
        before its first registration reaches the name server: a client sending to a topic that does not exist yet
        (created from TBW102's route) in between finds no route at all."""
        from pyrmq.client import Admin
        from pyrmq.client.errors import TopicNotFoundError

        async with Admin(self.namesrv_addr) as admin:
            with trio.move_on_after(deadline_s):
                while True:
                    try:
                        route = await admin.topic_route(topic)
                        if any(b.master == self.broker_addr for b in route.broker_datas):
                            return
                    except TopicNotFoundError:
                        pass
                    await trio.sleep(0.05)
        raise AssertionError(f"the name server {self.namesrv_addr} does not route {topic} to {self.broker_addr} "
                             f"after {deadline_s} s")

    def kill_broker(self) -> None:
        assert self.broker is not None
        self.broker.send_signal(signal.SIGKILL)
        self.broker.wait(10)

    def close(self) -> None:
        stop(self.broker)
        stop(self.namesrv)


# ---------------------------------------------------------------------------------------------------------------
# The independent checker: reads the files, trusts nothing the broker says
# ---------------------------------------------------------------------------------------------------------------

@attrs.define
class Record:
    phy: int
    size: int
    topic: str
    queue_id: int
    queue_offset: int
    store_timestamp: int
    properties: dict[str, str]
    body_pos: int = 0
    body_len: int = 0
    sys_flag: int = 0
    prepared_transaction_offset: int = 0
    #: the body, kept only for the topics in :data:`KEEP_BODY` (small bookkeeping records)
    body: bytes = b""

    @property
    def in_queue(self) -> bool:
        """A prepared or rolled-back transactional half message takes no queue offset (RocketMQ stores 0)."""
        return self.sys_flag & TRANSACTION_TYPE_MASK not in (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE)


@attrs.define
class StoreImage:
    records: list[Record] = attrs.Factory(list)
    bad_crc: list[int] = attrs.Factory(list)
    problems: list[str] = attrs.Factory(list)
    #: (topic, queue id) -> [(logical offset, phy, size)]
    units: dict[tuple[str, int], list[tuple[int, int, int]]] = attrs.Factory(dict)
    #: (key hash, phy) of every index entry
    index_entries: set[tuple[int, int]] = attrs.Factory(set)
    min_phy: int = 0
    #: end of the last record read: the broker may still append while the files are read (due delayed and timer
    #: messages are delivered after a restart), so consume-queue units read later can point past this snapshot
    end_phy: int = 0

    def by_property(self, name: str) -> dict[str, list[Record]]:
        out: dict[str, list[Record]] = collections.defaultdict(list)
        for r in self.records:
            v = r.properties.get(name)
            if v is not None:
                out[v].append(r)
        return out


#: topics whose record bodies read_store keeps: the transaction op records (body = resolved half queue offsets)
KEEP_BODY = frozenset({"RMQ_SYS_TRANS_OP_HALF_TOPIC"})


def _mapped(path: str) -> mmap.mmap | bytes:
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return b""
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


def _segments(d: Path) -> list[Path]:
    return sorted(p for p in d.iterdir() if is_segment_name(p.name)) if d.is_dir() else []


def read_store(root: Path) -> StoreImage:
    """Walk the commit log, every consume queue and every index file of the store at ``root`` (read-only)."""
    img = StoreImage()
    segs = _segments(root / "commitlog")
    if segs:
        img.min_phy = int(segs[0].name)
    for seg in segs:
        start = int(seg.name)
        mm = _mapped(str(seg))
        size = len(mm)
        pos = 0
        while True:
            h = read_record_header(mm, pos, size, start, False)
            if isinstance(h, RecordHeader):
                body = mm[h.body_pos - start: h.body_pos - start + h.body_len]
                if zlib.crc32(body) & 0x7FFFFFFF != h.body_crc:
                    img.bad_crc.append(h.pos)
                img.records.append(Record(h.pos, h.total_size, h.topic, h.queue_id, h.queue_offset,
                                          h.store_timestamp, decode_properties(h.properties_bytes), h.body_pos,
                                          h.body_len, h.sys_flag, h.prepared_transaction_offset,
                                          bytes(body) if h.topic in KEEP_BODY else b""))
                pos += h.total_size
                img.end_phy = start + pos
                continue
            if isinstance(h, str):
                img.problems.append(f"{seg.name} @{start + pos}: {h}")
            elif h != END_OF_FILE and pos < size and any(mm[pos:size]):
                img.problems.append(f"{seg.name} @{start + pos}: non-zero bytes after the last record")
            break
        if isinstance(mm, mmap.mmap):
            mm.close()
    cq_root = root / "consumequeue"
    for tdir in sorted(cq_root.iterdir()) if cq_root.is_dir() else []:
        for qdir in sorted(tdir.iterdir()):
            units = img.units.setdefault((tdir.name, int(qdir.name)), [])
            for f in _segments(qdir):
                data = f.read_bytes()
                base = int(f.name) // CQ_UNIT.size
                for i in range(len(data) // CQ_UNIT.size):
                    phy, size, _tags = CQ_UNIT.unpack_from(data, i * CQ_UNIT.size)
                    if phy == 0 and size == 0:
                        break
                    units.append((base + i, phy, size))
    idx = root / "index"
    for f in sorted(idx.iterdir()) if idx.is_dir() else []:
        if not (len(f.name) == 17 and f.name.isdigit()):
            continue
        data = f.read_bytes()
        slots = (len(data) - INDEX_HEADER.size) // (4 + 4 * INDEX_ENTRY.size)
        at = INDEX_HEADER.size + slots * 4
        for n in range(1, (len(data) - at) // INDEX_ENTRY.size):
            key_hash, phy, diff, _prev = INDEX_ENTRY.unpack_from(data, at + n * INDEX_ENTRY.size)
            if key_hash == 0 and phy == 0 and diff == 0:
                break
            img.index_entries.add((key_hash, phy))
    return img


def key_hash(topic: str, key: str) -> int:
    return index_key_hash(unsigned_hash(f"{topic}#{key}"))


def check_consistency(img: StoreImage) -> dict[str, int]:
    """Structural checks: queue offsets of the records per queue without gaps or repeats, every consume-queue
    unit pointing at the record of its queue and offset, every record of a queue in its consume queue."""
    per_queue: dict[tuple[str, int], list[Record]] = collections.defaultdict(list)
    for r in img.records:
        if r.in_queue:
            per_queue[(r.topic, r.queue_id)].append(r)
    by_phy = {r.phy: r for r in img.records if r.in_queue}
    gaps = repeats = bad_units = missing_units = 0
    for key, recs in per_queue.items():
        offsets = [r.queue_offset for r in recs]
        for a, b in zip(offsets, offsets[1:]):
            if b == a:
                repeats += 1
            elif b != a + 1:
                gaps += 1
                img.problems.append(f"queue {key}: queue offset jumps from {a} to {b}")
        units = {u[0]: u for u in img.units.get(key, [])}
        for r in recs:
            u = units.get(r.queue_offset)
            if u is None:
                missing_units += 1
                if missing_units < 5:
                    img.problems.append(f"queue {key}: no consume-queue unit for offset {r.queue_offset}")
            elif u[1] != r.phy or u[2] != r.size:
                bad_units += 1
                img.problems.append(f"queue {key} #{r.queue_offset}: unit -> @{u[1]}/{u[2]}, record @{r.phy}/{r.size}")
    for key, units in img.units.items():
        logical = [u[0] for u in units]
        if logical and logical != list(range(logical[0], logical[0] + len(logical))):
            gaps += 1
            img.problems.append(f"consume queue {key}: logical offsets not contiguous")
        for off, phy, size in units:
            if phy < img.min_phy or phy >= img.end_phy:
                continue  # retention removed it, or appended after the commit log was read
            r = by_phy.get(phy)
            if r is None or r.topic != key[0] or r.queue_id != key[1] or r.queue_offset != off:
                bad_units += 1
                if bad_units < 5:
                    img.problems.append(f"consume queue {key} #{off}: points at @{phy}, no such record of this queue")
    return {"offset_gaps": gaps, "offset_repeats": repeats, "bad_units": bad_units,
            "missing_units": missing_units, "bad_crc": len(img.bad_crc)}


# ---------------------------------------------------------------------------------------------------------------
# Clients' logs
# ---------------------------------------------------------------------------------------------------------------

@attrs.define
class Ack:
    cid: str
    kind: str  # plain | batch | delay | timer | txc | txr | txuc | txur (tests/chaos/txn_proc.py)
    attempts: int


def read_acks(paths: Iterable[Path]) -> tuple[dict[str, Ack], int]:
    """Acknowledged messages from the producers' logs (``A cid kind attempts`` lines; a torn last line is ignored),
    and how many messages the producers gave up on (``F`` lines)."""
    acks: dict[str, Ack] = {}
    failed = 0
    for p in paths:
        if not p.exists():
            continue
        for line in p.read_text().splitlines():
            parts = line.split()
            if len(parts) == 4 and parts[0] == "A" and parts[3].isdigit():
                acks[parts[1]] = Ack(parts[1], parts[2], int(parts[3]))
            elif len(parts) == 2 and parts[0] == "F":
                failed += 1
    return acks, failed


def read_checks(paths: Iterable[Path]) -> set[str]:
    """The cids whose transaction the broker checked back, from the transaction producers' logs (``K cid`` lines)."""
    out: set[str] = set()
    for p in paths:
        for line in iter_lines(p):
            parts = line.split()
            if len(parts) == 2 and parts[0] == "K":
                out.add(parts[1])
    return out


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def fd_breakdown(pid: int, store_root: Path) -> dict[str, int]:
    """The process's descriptors: on the store's segment/queue/index files (two per mapped file: the file's and
    the mmap's own duplicate), on files deleted but still held open (a leak, and disk space not given back), and
    the rest (sockets, logs, config files)."""
    out = {"store": 0, "deleted": 0, "other": 0}
    prefixes = tuple(str(store_root / d) + os.sep for d in ("commitlog", "consumequeue", "index"))
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.endswith(" (deleted)"):
            out["deleted"] += 1
        elif target.startswith(prefixes):
            out["store"] += 1
        else:
            out["other"] += 1
    return out


def store_file_count(root: Path) -> int:
    """Commit-log segments, consume-queue files and index files: each is held open (mapped) while it exists."""
    n = len(_segments(root / "commitlog"))
    cq = root / "consumequeue"
    for qdir in cq.glob("*/*") if cq.is_dir() else []:
        n += len(_segments(qdir))
    idx = root / "index"
    return n + (len([f for f in idx.iterdir() if len(f.name) == 17]) if idx.is_dir() else 0)


def iter_lines(path: Path) -> Iterator[str]:
    if path.exists():
        yield from path.read_text(errors="replace").splitlines()
