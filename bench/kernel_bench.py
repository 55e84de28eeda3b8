"""Per-request cost of the kernel's dispatch, next to a direct function call and a per-request pluggy call.

The kernel collects processors into a dict once at start; the connection loop then does ``table[code](conn, req)``.
This prints the cost of that lookup+await next to awaiting the processor directly (the floor) and next to going
through pluggy on every request (what the design avoids), and the ratios.

    python bench/kernel_bench.py [--count N]
"""

from __future__ import annotations

import argparse
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1_000_000)
    args = parser.parse_args()
    trio.run(measure, args.count)


if __name__ == "__main__":
    main()
