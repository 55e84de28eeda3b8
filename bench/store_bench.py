"""Store benchmark: append (single, 32 records per call, and the broker's SEND_BATCH_MESSAGE path: 100 entries per
call) and read back through the consume queue.

Prints msgs/s, MB/s and msgs per CPU-second (process CPU time, worker threads included: the steadier figure on a
busy shared machine) next to a raw Python mmap append of records of the same length (header packed with its body
CRC, body, tail) into a pre-faulted mapping, measured in the same run right before and right after each append
phase (the faster of the two is that phase's baseline, so a load spike during one of them does not flatter the
ratio), the ratio of each mode to it (issue 18's target: >= 0.25 for 1 KiB records with index entries), a sparse
(not pre-faulted) raw append for reference, and resident memory from /proc/self/status. Never asserted anywhere.

    python bench/store_bench.py [--count N] [--sizes 100,1024]

The store under test is a running broker's: the bench starts the broker bundle (configs/broker.toml: every broker
plugin, on a free port, no name server) and appends to its store directly, so each message goes through the
dispatchers a broker has (consume queue, index, long-polling wake-up ...; printed in the header) and the broker's
services (flush every 500 ms, segment warm-up, the idle pull-hold and delay services) run alongside.
Messages carry TAGS, KEYS (one business key, "order-<n>") and a 32-hex-digit UNIQ_KEY like a Java producer's
(consecutive counters), as a pre-encoded properties string (what the broker receives in the send header), so every
message also gets a consume-queue unit and two index entries.
The loop appends and yields to the broker's tasks every 1000 messages.
"""

from __future__ import annotations

import argparse
import logging
import mmap
import os
import shutil
import struct
import sys
import tempfile
import time
import zlib

import trio

from pyrmq.kernel.bundles import load_bundle
from pyrmq.kernel.service import build_kernel, serve_kernel
from pyrmq.plugins.broker.core import BROKER
from pyrmq.store import MessageRecord, encode_properties
from pyrmq.store.format import HEADER

SEGMENT = 1024 * 1024 * 1024


def mem() -> dict[str, int]:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                out[key] = int(value.split()[0]) // 1024  # MiB
    return out


def fmt_mem(m: dict[str, int]) -> str:
    return " ".join(f"{k}={v}MiB" for k, v in m.items())


def records(size: int, topic: str = "BenchTopic", n: int = 1024, queue_id=None) -> list[MessageRecord]:
    body = os.urandom(size)
    out = []
    for i in range(n):
        props = {"TAGS": "TagA", "KEYS": "order-%d" % (100_000 + i), "UNIQ_KEY": "7F0000010FA318B4AAC2%012X" % i,
                 "WAIT": "true"}
        out.append(MessageRecord(topic, i % 8 if queue_id is None else queue_id, body, properties=props,
                                 properties_bytes=encode_properties(props).encode(), born_timestamp=1,
                                 born_host=("10.0.0.2", 50000), store_host=("10.0.0.1", 10911)))
    return out


def raw_mmap_rate(dirpath: str, size: int, rec_len: int, count: int, prefault: bool) -> float:
    """Records/s of records of ``rec_len`` bytes (header packed with the body's CRC + body + tail) appended into a
    bare mmap."""
    return raw_mmap_rates(dirpath, size, rec_len, count, prefault)[0]


def raw_mmap_rates(dirpath: str, size: int, rec_len: int, count: int, prefault: bool) -> tuple[float, float]:
    """:func:`raw_mmap_rate` and the records per CPU-second of the same loop."""
    total = min(rec_len * count, SEGMENT)
    path = os.path.join(dirpath, "raw")
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    os.ftruncate(fd, total)
    mm = mmap.mmap(fd, total)
    if prefault:
        os.posix_fallocate(fd, 0, total)
        try:
            mm.madvise(23)  # MADV_POPULATE_WRITE
        except OSError:
            pass
    body = os.urandom(size)
    tail = bytes(rec_len - HEADER.size - size)
    pos = 0
    n = 0
    pack = HEADER.pack_into
    t0, c0 = time.perf_counter(), time.process_time()
    while pos + rec_len <= total:
        pack(mm, pos, rec_len, 0xDAA320A7, zlib.crc32(body) & 0x7FFFFFFF, 0, 0, n, pos, 0, 1, b"\n\0\0\2", 1,
             2, b"\n\0\0\1", 2, 0, 0, size)
        p = pos + HEADER.size
        mm[p : p + size] = body
        mm[p + size : p + size + len(tail)] = tail
        pos += rec_len
        n += 1
    dt, dc = time.perf_counter() - t0, time.process_time() - c0
    mm.close()
    os.close(fd)
    os.unlink(path)
    return n / dt, n / max(dc, 1e-9)


class Stopwatch:
    """Wall and CPU time of one phase: msgs/s, and msgs per CPU-second of this process (worker threads included),
    which a shared, busy machine disturbs far less than wall time."""

    def __init__(self) -> None:
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def rates(self, n: int) -> tuple[float, float]:
        return n / (time.perf_counter() - self.wall), n / max(time.process_time() - self.cpu, 1e-9)


class Progress:
    def __init__(self, label: str, total: int) -> None:
        self.label, self.total, self.next, self.t0 = label, total, total // 10, time.perf_counter()

    def update(self, done: int) -> None:
        if done >= self.next and sys.stderr.isatty() or done >= self.next and self.total >= 500_000:
            rate = done / max(time.perf_counter() - self.t0, 1e-9)
            sys.stderr.write(f"\r  {self.label}: {done:,}/{self.total:,} ({rate:,.0f}/s)   ")
            sys.stderr.flush()
            self.next += self.total // 10
        if done >= self.total:
            sys.stderr.write("\r" + " " * 70 + "\r")


def broker_kernel(root: str):
    """An unstarted broker kernel over ``root``: the shipped broker bundle, a free port, no name server."""
    bundle = load_bundle("broker").with_overrides(
        {"listenPort": 0, "storePathRootDir": root, "mappedFileSizeCommitLog": SEGMENT, "namesrvAddr": ""},
        source="store_bench",
    )
    return build_kernel(bundle, entry_points=False)


async def run_size(size: int, count: int, rows: list, dispatchers: list) -> None:
    root = tempfile.mkdtemp(prefix="pyrmq-bench-", dir=os.environ.get("BENCH_DIR"))
    kernel = broker_kernel(root)
    first = records(size, n=1)[0]
    rec_len = HEADER.size + size + 1 + len(first.topic) + 2 + len(first.properties_bytes)  # what put_message stores
    raw_count = min(count, 300_000)
    raws: list[tuple[float, float]] = []  # pre-faulted raw (wall, CPU) rates: before each append phase and after the last
    m0 = mem()
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(serve_kernel, kernel)
            store = kernel.state.get(BROKER).store
            dispatchers[:] = [f"{d.name} ({d.order})" for d in store.dispatchers]
            await trio.sleep(0.2)  # let the warm-up service prepare the first segment
            recs = records(size)
            rec_bytes = store.put_message(recs[0]).append.wrote_bytes
            put = store.put_message
            raws.append(raw_mmap_rates(root, size, rec_len, raw_count, prefault=True))
            prog = Progress(f"{size} B single", count)
            watch = Stopwatch()
            for i in range(count):
                put(recs[i & 1023])
                if i % 1000 == 999:
                    await trio.sleep(0)
                    prog.update(i + 1)
            single = watch.rates(count)
            prog.update(count)

            batch_recs = records(size, queue_id=8)
            batches = [batch_recs[j : j + 32] for j in range(0, 1024, 32)]
            put_batch = store.put_messages
            raws.append(raw_mmap_rates(root, size, rec_len, raw_count, prefault=True))
            prog = Progress(f"{size} B batch", count)
            watch = Stopwatch()
            n = 0
            i = 0
            while n < count:
                put_batch(batches[i & 31])
                n += 32
                i += 1
                if i % 32 == 0:
                    await trio.sleep(0)
                    prog.update(n)
            batch = watch.rates(n)
            prog.update(count)

            # the broker's SEND_BATCH_MESSAGE path: (flag, body, stored properties) entries, 100 per call
            entry_recs = records(size, queue_id=9)
            entries = [(r.flag, r.body, r.properties_bytes.replace(b"\x02WAIT\x01true", b"")) for r in entry_recs]
            chunks = [entries[j : j + 100] for j in range(0, 1000, 100)]
            put_entries = store.put_entries
            born, here = ("10.0.0.2", 50000), ("10.0.0.1", 10911)
            raws.append(raw_mmap_rates(root, size, rec_len, raw_count, prefault=True))
            prog = Progress(f"{size} B entries", count)
            watch = Stopwatch()
            n = 0
            i = 0
            while n < count:
                put_entries("BenchTopic", 9, chunks[i % 10], 0, 1, born, here)
                n += 100
                i += 1
                if i % 10 == 0:
                    await trio.sleep(0)
                    prog.update(n)
            bulk = watch.rates(n)
            prog.update(count)
            raws.append(raw_mmap_rates(root, size, rec_len, raw_count, prefault=True))

            prog = Progress(f"{size} B read", count)
            watch = Stopwatch()
            read = 0
            for q in range(8):
                offset = 0
                while True:
                    r = store.get_message("bench", "BenchTopic", q, offset, 32)
                    if not r.buffers:
                        break
                    read += len(r.buffers)
                    offset = r.next_begin_offset
                    if read % 3200 == 0:
                        await trio.sleep(0)
                        prog.update(read)
            read_rate = watch.rates(read)
            prog.update(count)
            m1 = mem()
            kernel.request_stop()  # the broker's own stop: offsets persisted, store flushed and closed
        m2 = mem()
        raw_sparse = raw_mmap_rate(root, size, rec_len, raw_count, prefault=False)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    mb = rec_bytes / 1e6
    rows.append((size, rec_bytes, single, batch, bulk, read_rate, read, raw_sparse, raws, m0, m1, m2, mb))


def main() -> None:
    logging.getLogger("pyrmq").setLevel(logging.ERROR)  # the broker warns that it has no name server: intended
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=1_000_000, help="messages per size and mode (default 1,000,000)")
    ap.add_argument("--sizes", default="100,1024")
    args = ap.parse_args()
    rows: list = []
    dispatchers: list = []
    print(f"pyrmq store bench: {args.count:,} messages per size and mode, 1 GiB segments, ASYNC_FLUSH, "
          f"index on (TAGS, KEYS and UNIQ_KEY per message: two index entries), python {sys.version.split()[0]}")
    print(f"memory at start: {fmt_mem(mem())}")
    for size in (int(s) for s in args.sizes.split(",")):
        trio.run(run_size, size, args.count, rows, dispatchers)
    print(f"store of a running broker (configs/broker.toml); its dispatchers, in order: {', '.join(dispatchers)}")
    print()
    print("| body | record | mode | msgs/s | MB/s | msgs per CPU-s | raw pre-faulted mmap msgs/s (before / after) "
          "| ratio vs raw pre-faulted | ratio per CPU-s | raw sparse msgs/s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for size, rb, single, batch, bulk, read, _nread, raw_s, raws, _m0, _m1, _m2, mb in rows:
        modes = (("append (put_message)", single), ("batch x32 (put_messages)", batch),
                 ("batch x100 (put_entries)", bulk), ("read via CQ", read))
        ratios = []
        cpu_ratios = []
        for i, (mode, (rate, cpu_rate)) in enumerate(modes):
            around = raws[i : i + 2] if i < 3 else raws[-1:]
            base = max(r[0] for r in around)
            cpu_base = max(r[1] for r in around)
            ratios.append(rate / base)
            cpu_ratios.append(cpu_rate / cpu_base)
            print(f"| {size} B | {rb} B | {mode} | {rate:,.0f} | {rate * mb:,.1f} | {cpu_rate:,.0f} | "
                  f"{' / '.join(f'{r[0]:,.0f}' for r in around)} | {rate / base:.3f} | "
                  f"{cpu_rate / cpu_base:.3f} | {raw_s:,.0f} |")
        print()
        print(f"{size} B records with index entries vs the raw pre-faulted mmap append of {rb}-byte records, same run: "
              f"put_message {ratios[0]:.1%}, put_messages x32 {ratios[1]:.1%}, put_entries x100 {ratios[2]:.1%} "
              f"(issue 18's target: 25 %)")
        print(f"the same per CPU-second (the store's worker threads included; steadier under load): "
              f"put_message {cpu_ratios[0]:.1%}, put_messages x32 {cpu_ratios[1]:.1%}, "
              f"put_entries x100 {cpu_ratios[2]:.1%}")
    print()
    for size, *_rest, m0, m1, m2, _mb in rows:
        print(f"{size} B memory: before {fmt_mem(m0)} | after writes+reads {fmt_mem(m1)} | after close {fmt_mem(m2)}")
    print("(RssFile = mapped store pages; flushed pages more than 16 MiB behind the commit-log writer (256 KiB for "
          "the consume queues and index entries) leave the resident set with MADV_DONTNEED. RssAnon = Python heap.)")


if __name__ == "__main__":
    main()
