"""The kernel's trio root: configure -> collect -> serve -> stop -> shielded unconfigure."""

from __future__ import annotations

import trio

from pyrmq.kernel.bundles import Bundle
from pyrmq.kernel.hookspecs import hookimpl
from pyrmq.kernel.kernel import StateKey
from pyrmq.kernel.service import build_kernel, serve_kernel

COUNTER = StateKey[list]("test.counter")


def bundle() -> Bundle:
    return Bundle(name="svc", file="svc.toml", roles=("broker",), plugins=(), entry_points=False)


class Ticker:
    """A stateful feature: configure puts state, serve starts a service, unconfigure flushes it."""

    def __init__(self) -> None:
        self.flushed: list[int] = []
        self.flush_was_cancelled = False

    @hookimpl
    def pyrmq_configure(self, kernel):
        kernel.state.put(COUNTER, [])

    @hookimpl
    def pyrmq_register_processors(self, kernel, role):
        async def count(connection, request):
            kernel.state.get(COUNTER).append(request)
            return len(kernel.state.get(COUNTER))

        return {7001: count}

    @hookimpl
    async def pyrmq_serve(self, kernel, nursery):
        async def tick(*, task_status=trio.TASK_STATUS_IGNORED):
            task_status.started()
            while True:
                await trio.sleep(1)
                kernel.state.get(COUNTER).append("tick")

        await nursery.start(tick)

    @hookimpl
    async def pyrmq_unconfigure(self, kernel):
        # a final flush that takes time: it must run to the end although the role is being cancelled
        try:
            await trio.sleep(0.5)
        except trio.Cancelled:
            self.flush_was_cancelled = True
            raise
        self.flushed.append(len(kernel.state.get(COUNTER)))


async def test_role_starts_serves_and_stops_with_a_shielded_final_flush(autojump_clock):
    ticker = Ticker()
    kernel = build_kernel(bundle(), extra_plugins=[ticker])
    async with trio.open_nursery() as nursery:
        started = await nursery.start(serve_kernel, kernel)
        assert started is kernel
        # the processor table was collected once at start and is called directly
        assert await kernel.processors["broker"][7001](None, "req-1") == 1
        await trio.sleep(3.5)
        kernel.request_stop()
    assert kernel.state.get(COUNTER)[:1] == ["req-1"] and kernel.state.get(COUNTER).count("tick") == 3
    assert ticker.flushed == [4] and not ticker.flush_was_cancelled


async def test_cancelling_the_role_still_runs_the_final_flush(autojump_clock):
    ticker = Ticker()
    kernel = build_kernel(bundle(), extra_plugins=[ticker])
    with trio.move_on_after(2.5):
        await serve_kernel(kernel)
    assert ticker.flushed == [2] and not ticker.flush_was_cancelled


async def test_a_flush_slower_than_the_stop_deadline_is_cut_off(autojump_clock):
    class Slow:
        done = False

        @hookimpl
        async def pyrmq_unconfigure(self, kernel):
            await trio.sleep(60)
            Slow.done = True

    kernel = build_kernel(bundle(), extra_plugins=[Slow()])
    kernel.stop_timeout = 5
    with trio.move_on_after(1):
        await serve_kernel(kernel)
    assert not Slow.done
