"""The trio root of a role: configure plugins, collect what they register, start services, stop gracefully.

Start: ``pyrmq_configure`` (objects), then the processor table, store dispatchers and put interceptors are collected
once, then ``pyrmq_serve`` starts each plugin's services in the root nursery (each calls ``task_status.started()``
when ready).
Stop (SIGINT/SIGTERM, :meth:`Kernel.request_stop`, or a crashed service): the nursery is cancelled, then
``pyrmq_unconfigure`` runs shielded under the stop deadline so the final flush is not interrupted.
"""

from __future__ import annotations

import functools
import logging
import signal
import time
from collections.abc import Awaitable, Callable, Iterable

import trio

from pyrmq.kernel.bundles import Bundle
from pyrmq.kernel.kernel import Kernel
from pyrmq.kernel.hooks import HookRelay
from pyrmq.kernel.manager import build_relay, load_plugins
from pyrmq.kernel.settings import Settings, resolve_settings

log = logging.getLogger("pyrmq.kernel.service")


def build_kernel(bundle: Bundle, *, extra_plugins: Iterable[object] = (), entry_points: bool | None = None) -> Kernel:
    """Load the bundle's plugins, check the settings they declare against the bundle's values, and return an
    unstarted kernel (ConfigError naming the file, key and expectation on a bad value)."""
    pm = load_plugins(bundle, extra=extra_plugins, entry_points_enabled=entry_points)
    relay = build_relay(pm)
    return Kernel(bundle, pm, relay, bundle_settings(bundle, relay))


def bundle_settings(bundle: Bundle, relay: HookRelay | None = None) -> Settings:
    """The bundle's settings as its plugins declare them (loads the plugins when no relay is given)."""
    if relay is None:
        relay = build_relay(load_plugins(bundle, entry_points_enabled=False))
    sections, sources = bundle.settings_sections()
    return resolve_settings(relay.register_settings(), sections, sources, present=sections, default_file=bundle.file)


async def serve_kernel(kernel: Kernel, *, task_status: trio.TaskStatus[Kernel] = trio.TASK_STATUS_IGNORED) -> None:
    """Run a kernel until :meth:`Kernel.request_stop` (or cancellation); ``task_status.started(kernel)`` when ready."""
    stop = trio.Event()
    kernel._stop_event = stop
    configured = False
    try:
        async with trio.open_nursery() as nursery:
            kernel.nursery = nursery
            kernel.hooks.configure(kernel)
            configured = True
            kernel.collect()
            await kernel.hooks.serve(kernel, nursery)
            task_status.started(kernel)
            await stop.wait()
            nursery.cancel_scope.cancel()
    finally:
        if configured:
            with trio.CancelScope(shield=True) as scope:
                scope.deadline = trio.current_time() + kernel.stop_timeout
                await kernel.hooks.unconfigure(kernel)
            if scope.cancelled_caught:
                log.error("stopping took longer than %.1f s; some plugins did not finish closing", kernel.stop_timeout)
        kernel.nursery = None


async def _stop_on_signals(kernel: Kernel, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        task_status.started()
        async for signum in signals:
            log.info("received %s, stopping", signal.Signals(signum).name)
            print(f"pyrmq: {signal.Signals(signum).name} received, stopping (final flush)...", flush=True)
            kernel.request_stop()
            return


OnReady = Callable[[Kernel, float], Awaitable[None]]


async def run_until_signal(kernel: Kernel, *, on_ready: OnReady | None = None) -> None:
    """Serve ``kernel`` until SIGINT/SIGTERM or a stop request; ``await on_ready(kernel, seconds)`` once serving."""
    began = time.perf_counter()
    async with trio.open_nursery() as nursery:
        await nursery.start(_stop_on_signals, kernel)

        async def serve_then_stop_all(*, task_status: trio.TaskStatus[Kernel] = trio.TASK_STATUS_IGNORED) -> None:
            try:
                await serve_kernel(kernel, task_status=task_status)
            finally:
                nursery.cancel_scope.cancel()

        await nursery.start(serve_then_stop_all)
        if on_ready is not None:
            await on_ready(kernel, time.perf_counter() - began)


def run(kernel: Kernel, *, on_ready: OnReady | None = None) -> None:
    """Blocking entry point used by the CLI."""
    trio.run(functools.partial(run_until_signal, kernel, on_ready=on_ready))
