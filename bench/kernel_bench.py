"""Per-request cost of the kernel's dispatch, next to a direct function call and a per-request pluggy call.

The kernel collects processors into a dict once at start; the connection loop then does ``table[code](conn, req)``.
This prints the cost of that lookup+await next to awaiting the processor directly (the floor) and next to going
through pluggy on every request (what the design avoids), and the ratios. Then the send path's put-interceptor
chain on a plain message (no interceptor applies): an empty chain, the broker's shipped chain (dead-letter, delay
levels, timer), next to one commit-log append of the same 100-byte record for scale.

    python bench/kernel_bench.py [--count N]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time

import trio

from pyrmq.kernel.bundles import Bundle
from pyrmq.kernel.hookspecs import hookimpl
from pyrmq.kernel.service import build_kernel


async def processor(connection, request):
    return request


class Plugin:
    @hookimpl
    def pyrmq_register_processors(self, kernel, role):
        return {10: processor, 11: processor, 34: processor}


async def measure(count: int) -> None:
    kernel = build_kernel(Bundle(name="bench", file="-", roles=("broker",), plugins=(), entry_points=False), extra_plugins=[Plugin()])
    kernel.collect()
    table = kernel.processors["broker"]
    hook = kernel.pluginmanager.hook
    rows = []

    begin = time.perf_counter()
    for i in range(count):
        await processor(None, i)
    direct = (time.perf_counter() - begin) / count
    rows.append(("direct await of the processor", direct))

    begin = time.perf_counter()
    for i in range(count):
        await table[10](None, i)
    kernel_dispatch = (time.perf_counter() - begin) / count
    rows.append(("kernel dispatch: table[code](conn, req)", kernel_dispatch))

    n = max(count // 10, 1)
    begin = time.perf_counter()
    for i in range(n):
        merged = {}
        for answer in hook.pyrmq_register_processors(kernel=kernel, role="broker"):
            merged.update(answer)
        await merged[10](None, i)
    per_request_pluggy = (time.perf_counter() - begin) / n
    rows.append(("pluggy call per request (avoided)", per_request_pluggy))

    print(f"{'path':45} {'ns/request':>12} {'ratio to direct':>16}")
    for name, seconds in rows:
        print(f"{name:45} {seconds * 1e9:12.0f} {seconds / direct:16.2f}")


def measure_put_chain(count: int) -> None:
    from pyrmq.plugins.broker.delay_levels import DelayLevelSettings
    from pyrmq.kernel.types import PutChain, PutContext, PutKind
    from pyrmq.plugins.broker.delay_levels import DelayLevelService
    from pyrmq.plugins.broker.retry_dlq import DeadLetterInterceptor
    from pyrmq.plugins.broker.timer import TimerService
    from pyrmq.store import MessageRecord, MessageStore, StoreConfig

    root = tempfile.mkdtemp(prefix="pyrmq-kernel-bench-")
    try:
        store = MessageStore(StoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=256 << 20,
                                         warm_mapped_file_enable=False))
        store.load()
        settings = DelayLevelSettings()
        shipped = PutChain([
            DeadLetterInterceptor(topics=None, groups=None),
            DelayLevelService(store, settings.delay_levels_ms, root + "/config"),
            TimerService(store, root + "/timerwheel"),
        ])
        empty = PutChain()
        record = MessageRecord("Orders", 0, b"x" * 100, properties={"TAGS": "a", "KEYS": "k", "UNIQ_KEY": "U1"})
        request, born = object(), ("127.0.0.1", 1)
        rows = []

        begin = time.perf_counter()
        for _ in range(count):
            if empty.applies(record):
                empty(record, PutContext(PutKind.SEND, request, born))
        rows.append(("empty chain", (time.perf_counter() - begin) / count))

        begin = time.perf_counter()
        for _ in range(count):
            if shipped.applies(record):
                shipped(record, PutContext(PutKind.SEND, request, born, 0, None))
        rows.append(("shipped chain, none applies", (time.perf_counter() - begin) / count))

        begin = time.perf_counter()
        for _ in range(count):
            shipped(record, PutContext(PutKind.SEND, request, born, 0, None))
        rows.append(("shipped chain called anyway (no triggers)", (time.perf_counter() - begin) / count))

        delayed = MessageRecord("Orders", 0, b"x" * 100, properties={"TAGS": "a", "DELAY": "0"})
        begin = time.perf_counter()
        for _ in range(count):
            if shipped.applies(delayed):
                shipped(delayed, PutContext(PutKind.SEND, request, born, 0, None))
        rows.append(("shipped chain, DELAY=0 (applies, stays)", (time.perf_counter() - begin) / count))

        n = min(count, 100_000)
        begin = time.perf_counter()
        for _ in range(n):
            store.put_message(record)
        rows.append(("commit-log append of the record (scale)", (time.perf_counter() - begin) / n))
        store.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    append = rows[-1][1]
    print(f"\n{'send path, per message':45} {'ns/message':>12} {'ratio to append':>16}")
    for name, seconds in rows:
        print(f"{name:45} {seconds * 1e9:12.0f} {seconds / append:16.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1_000_000)
    args = parser.parse_args()
    trio.run(measure, args.count)
    trio.run(trio.to_thread.run_sync, measure_put_chain, max(args.count // 5, 1000))


if __name__ == "__main__":
    main()
