"""The kernel object a role's plugins share: bundle, hook relay, typed state, and what was collected at start."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

import attrs

from pyrmq.kernel.errors import PluginError
from pyrmq.kernel.settings import Settings
from pyrmq.kernel.types import FlushPolicy, PutChain, Scheduler, guard_processors

if TYPE_CHECKING:  # pragma: no cover
    import pluggy
    import trio

    from pyrmq.kernel.bundles import Bundle
    from pyrmq.kernel.hooks import HookRelay
    from pyrmq.kernel.types import Processor, StoreDispatcher

T = TypeVar("T")
log = logging.getLogger("pyrmq.kernel")


@attrs.frozen
class StateKey(Generic[T]):
    """A typed key for plugin state on the kernel (pytest's StashKey): ``STORE = StateKey[MessageStore]("store")``."""

    name: str


class State:
    """Plugin state under typed keys instead of attributes bolted onto the kernel."""

    def __init__(self) -> None:
        self._values: dict[StateKey[Any], Any] = {}

    def put(self, key: StateKey[T], value: T) -> T:
        self._values[key] = value
        return value

    def get(self, key: StateKey[T]) -> T:
        try:
            return cast(T, self._values[key])
        except KeyError:
            raise LookupError(f"no plugin has provided {key.name!r} (is the plugin that provides it in the bundle?)") from None

    def find(self, key: StateKey[T]) -> T | None:
        return self._values.get(key)

    def __contains__(self, key: StateKey[Any]) -> bool:
        return key in self._values

    def items(self) -> list[tuple[StateKey[Any], Any]]:
        """Every key and object (``pyrmq plugins``-style listings and the plugin-order meta-test)."""
        return list(self._values.items())


class Kernel:
    """One running role (name server, broker, or both in ``pyrmq dev``).

    Built by :func:`pyrmq.kernel.service.build_kernel`; plugins receive it in every hook. ``settings`` are parsed
    when it is built (``kernel.settings(MySettings)``). ``processors``, ``store_dispatchers``, ``schedulers`` and
    ``put_chain`` are filled once at start from the dispatch hooks and then used directly on hot paths.
    """

    def __init__(
        self, bundle: Bundle, pluginmanager: pluggy.PluginManager, hooks: HookRelay, settings: Settings | None = None
    ) -> None:
        self.bundle = bundle
        self.pluginmanager = pluginmanager
        self.hooks = hooks
        #: every plugin's declared settings, parsed (``pyrmq_register_settings``)
        self.settings: Settings = settings if settings is not None else Settings({}, ())
        self.state = State()
        #: per role ("namesrv", "broker"): the request-code table that role's server calls directly
        self.processors: dict[str, dict[int, Processor]] = {}
        #: per role: which plugin serves each request code (``pyrmq plugins --codes``)
        self.processor_owners: dict[str, dict[int, str]] = {}
        self.store_dispatchers: list[StoreDispatcher] = []
        #: the delay schedulers in order (``pyrmq_register_schedulers``); they are in ``put_chain`` too
        self.schedulers: tuple[Scheduler, ...] = ()
        #: the flush policy the broker's store runs (``pyrmq_make_flush_policy``), once asked
        self.flush_policy: FlushPolicy | None = None
        #: the put interceptors in order; one object for the kernel's life, so processors built in
        #: ``pyrmq_configure`` may keep it and see what :meth:`collect` puts in it
        self.put_chain = PutChain()
        self.nursery: trio.Nursery | None = None
        self.stop_timeout: float = 10.0
        #: where each role listens once started: {"namesrv": "127.0.0.1:9876", "broker": ...}
        self.listening: dict[str, str] = {}
        #: names besides the roles that will be marked listening once started (a plugin's own listener, such as the
        #: dashboard); the CLI's ready line waits for them too
        self.expected_listeners: list[str] = []
        self._listening_events: dict[str, Any] = {}
        self._stop_event: Any = None

    def plugin_settings(self, name: str) -> Mapping[str, Any]:
        """Settings of one plugin from the bundle's ``[plugins."<name>"]`` table as written (empty when absent); a
        plugin that declares its table (``pyrmq_register_settings``) reads it parsed through :attr:`settings`."""
        return self.bundle.plugin_settings.get(name, {})

    def register(self, plugin: object, name: str) -> object:
        """Register an object as a plugin: its ``@hookimpl`` methods answer hooks from now on (pytest's
        ``config.pluginmanager.register(TerminalReporter(config), "terminalreporter")``).

        A module plugin makes its feature object in ``pyrmq_configure`` and registers it here, so the object's own
        methods are the hook implementations (``pyrmq_register_processors``, ``pyrmq_serve``, ``pyrmq_role_changed``,
        ...) and no state-key lookup is needed. Hooks already under way (this ``pyrmq_configure``) do not call it;
        every later one does. Its hook implementations are checked like a module's.
        """
        from pyrmq.kernel.manager import check_plugins

        if self.pluginmanager.has_plugin(name):
            raise PluginError(f"a plugin named {name!r} is registered already")
        self.pluginmanager.register(plugin, name=name)
        check_plugins(self.pluginmanager, source=f"plugin object {name!r}")
        return plugin

    def plugin(self, name: str) -> object | None:
        """The plugin registered under ``name`` (a module path, or a feature object's name), or None."""
        return self.pluginmanager.get_plugin(name)

    def mark_listening(self, role: str, address: str) -> None:
        """Called by the plugin that put ``role`` on the network, with the real ``host:port``."""
        self.listening[role] = address
        self._listening_event(role).set()

    def expect_listening(self, name: str) -> None:
        """Say (in ``pyrmq_configure``) that this plugin will call :meth:`mark_listening` for ``name`` once served."""
        if name not in self.expected_listeners:
            self.expected_listeners.append(name)

    async def wait_listening(self, role: str) -> str:
        """Wait until ``role`` listens; returns its ``host:port`` (the real port when 0 was configured)."""
        await self._listening_event(role).wait()
        return self.listening[role]

    def _listening_event(self, role: str) -> Any:
        import trio

        event = self._listening_events.get(role)
        if event is None:
            event = self._listening_events[role] = trio.Event()
        return event

    def request_stop(self) -> None:
        """Ask the role to stop gracefully (what SIGINT/SIGTERM do)."""
        if self._stop_event is not None:
            self._stop_event.set()

    def collect(self) -> None:
        """Collect processors, store dispatchers, put interceptors and schedulers (once per start; hot paths use the
        results)."""
        self.processors = {}
        for role in self.bundle.roles:
            table, owners = self.hooks.register_processors(self, role)
            self.processors[role] = table
            self.processor_owners[role] = owners
        for role, table in self.processors.items():
            guard = self.hooks.make_request_guard(self, role)
            if guard is not None:
                self.processors[role] = guard_processors(table, guard)
        self.store_dispatchers = self.hooks.register_store_dispatchers(self)
        self.schedulers = tuple(self.hooks.register_schedulers(self))
        self.put_chain.set([*self.hooks.register_put_interceptors(self), *self.schedulers])
