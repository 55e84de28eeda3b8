"""The life cycle every client object shares: ``async with``, ``start()/shutdown()``, or ``nursery.start(obj.run)``.

Background work (route refresh, heartbeats, pulls, offset commits) lives in a nursery the object opens when it
starts and closes when it shuts down. ``start()`` and ``shutdown()`` must be called from the same task (trio's
rule for a nursery); ``async with`` does that for you, and ``run()`` serves until ``close()`` or cancellation.
"""

from __future__ import annotations

import logging
from typing import Any

import attrs
import trio

from pyrmq.client.config import ClientConfig
from pyrmq.client.errors import ClientStateError
from pyrmq.client.instance import ClientInstance

__all__ = ["ClientService"]

log = logging.getLogger("pyrmq.client")

#: how long a graceful shutdown (final offset commit, unlock, unregister) may take
SHUTDOWN_TIMEOUT = 10.0


class ClientService:
    def __init__(
        self, instance: ClientInstance | None, config: ClientConfig | None, credentials: tuple[str, str] | None = None
    ) -> None:
        if credentials is not None:
            if instance is not None:
                raise ValueError("credentials go with the shared instance's config, not with an object built on it")
            config = attrs.evolve(config or ClientConfig(), credentials=credentials)
        self._own_instance = instance is None
        self.instance = instance if instance is not None else ClientInstance(config or ClientConfig())
        self._nursery_cm: Any = None
        self.nursery: trio.Nursery | None = None
        self.started = False
        self._closed = False
        self._stop_requested: trio.Event | None = None

    @property
    def client_id(self) -> str:
        return self.instance.client_id

    # -- hooks for subclasses --------------------------------------------------------------------------------

    async def _on_start(self, nursery: trio.Nursery) -> None:
        """Start the object's own background tasks (the instance is already started)."""

    async def _on_shutdown(self) -> None:
        """Graceful part of the shutdown, before the nursery is cancelled."""

    # -- life cycle ------------------------------------------------------------------------------------------

    async def start(self) -> None:
        if self.started:
            return
        if self._closed:
            raise ClientStateError(f"{type(self).__name__} was shut down; create a new one")
        cm = trio.open_nursery()
        nursery = await cm.__aenter__()
        try:
            if self._own_instance:
                await self.instance.start(nursery)
            elif not self.instance.started:
                raise ClientStateError("the shared client instance is not started")
            self.nursery = nursery
            await self._on_start(nursery)
        except BaseException as exc:
            nursery.cancel_scope.cancel()
            try:
                await cm.__aexit__(None, None, None)
            except BaseException:  # noqa: BLE001 - the start failure is the error worth reporting
                log.debug("background tasks failed while a start was aborted", exc_info=True)
            self.nursery = None
            raise exc
        self._nursery_cm = cm
        self.started = True

    async def shutdown(self, exc: BaseException | None = None) -> None:
        if not self.started:
            self._closed = True
            return
        self.started = False
        self._closed = True
        cm, self._nursery_cm = self._nursery_cm, None
        nursery = self.nursery
        try:
            with trio.CancelScope(shield=True) as scope:
                scope.deadline = trio.current_time() + SHUTDOWN_TIMEOUT
                try:
                    await self._on_shutdown()
                finally:
                    if self._own_instance:
                        await self.instance.close()
        finally:
            if nursery is not None:
                nursery.cancel_scope.cancel()
            self.nursery = None
            # only a cancellation is handed to the nursery (its own cancel scope may be the one to catch it); any
            # other error of the body propagates as itself, not wrapped in an ExceptionGroup
            if isinstance(exc, trio.Cancelled):
                await cm.__aexit__(type(exc), exc, exc.__traceback__)
            else:
                await cm.__aexit__(None, None, None)

    async def __aenter__(self) -> Any:
        await self.start()
        return self

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        await self.shutdown(exc)

    async def run(self, *, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None:
        """Start, serve until :meth:`close` (or cancellation), then shut down gracefully."""
        self._stop_requested = trio.Event()
        await self.start()
        try:
            task_status.started(self)
            await self._stop_requested.wait()
        finally:
            await self.shutdown()

    def close(self) -> None:
        """Ask a :meth:`run` to shut down (from the same trio run)."""
        if self._stop_requested is not None:
            self._stop_requested.set()

    def _check_started(self) -> None:
        if not self.started:
            raise ClientStateError(f"{type(self).__name__} is not started (use `async with` or `await obj.start()`)")
