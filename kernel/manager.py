"""Plugin loading: essential plugins, then the bundle's plugins, then third-party entry points, then checks.

Order matters for pluggy's call order (last registered is called first among equals): built-in plugins mark their
hook implementations ``trylast`` so that a user's plugin answers first whatever the order of registration.

Third-party packages register in the entry-point group ``pyrmq.plugins``. Loading them can be switched off per
bundle (``entry_points = false``) and for a whole process with the environment variable
``PYRMQ_DISABLE_PLUGIN_AUTOLOAD=1``. Names in the bundle's ``block`` list (module paths or entry-point names) are
never registered.

After loading, ``check_pending()`` makes a misspelled hook fail at start-up, and every implementation's colour
(``async def`` or ``def``) is checked against its spec.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import os
from collections.abc import Iterable
from importlib.metadata import entry_points

import pluggy

from pyrmq.kernel import hookspecs
from pyrmq.kernel.bundles import Bundle
from pyrmq.kernel.errors import PluginError
from pyrmq.kernel.hooks import HookRelay

log = logging.getLogger("pyrmq.kernel.manager")

ENTRY_POINT_GROUP = "pyrmq.plugins"
DISABLE_AUTOLOAD_ENV = "PYRMQ_DISABLE_PLUGIN_AUTOLOAD"

#: plugins every role loads whatever its bundle says
ESSENTIAL_PLUGINS: tuple[str, ...] = ("pyrmq.plugins.builtin.essentials",)


def _import_plugin(module_path: str, *, source: str) -> object:
    try:
        return importlib.import_module(module_path)
    except ModuleNotFoundError as exc:
        if exc.name and module_path.startswith(exc.name):
            raise PluginError(f"{source}: plugin {module_path!r} not found (no module named {exc.name!r})") from None
        raise PluginError(f"{source}: plugin {module_path!r} failed to import: {exc}") from exc
    except Exception as exc:
        raise PluginError(f"{source}: plugin {module_path!r} failed to import: {exc!r}") from exc


def new_plugin_manager() -> pluggy.PluginManager:
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    return pm


def load_plugins(
    bundle: Bundle,
    *,
    extra: Iterable[object] = (),
    entry_points_enabled: bool | None = None,
) -> pluggy.PluginManager:
    """Build the plugin manager of ``bundle``; ``extra`` plugin objects (tests, embedding code) come last."""
    pm = new_plugin_manager()
    for name in bundle.block:
        pm.set_blocked(name)

    def register(plugin: object, name: str) -> None:
        if pm.is_blocked(name):
            log.info("plugin %s is blocked by bundle %s", name, bundle.name)
            return
        if pm.get_plugin(name) is not None:
            return
        try:
            pm.register(plugin, name=name)
        except pluggy.PluginValidationError as exc:
            raise PluginError(f"{bundle.file}: plugin {name!r}: {exc}") from None

    for module_path in ESSENTIAL_PLUGINS:
        register(_import_plugin(module_path, source="essential plugins"), module_path)
    for module_path in bundle.plugins:
        register(_import_plugin(module_path, source=f"{bundle.file}: bundle.plugins"), module_path)

    autoload = bundle.entry_points if entry_points_enabled is None else entry_points_enabled
    if os.environ.get(DISABLE_AUTOLOAD_ENV, "").strip() not in ("", "0", "false", "no"):
        autoload = False
    if autoload:
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            if pm.is_blocked(ep.name) or pm.is_blocked(ep.value):
                log.info("entry point %s is blocked by bundle %s", ep.name, bundle.name)
                continue
            try:
                plugin = ep.load()
            except Exception as exc:
                raise PluginError(
                    f"entry point {ep.name!r} = {ep.value!r} (group {ENTRY_POINT_GROUP}) failed to load: {exc!r}"
                ) from exc
            register(plugin, ep.name)

    for plugin in extra:
        register(plugin, pm.get_canonical_name(plugin) or repr(plugin))

    pm.hook.pyrmq_addhooks.call_historic(kwargs={"pluginmanager": pm})
    check_plugins(pm, source=bundle.file)
    return pm


def check_plugins(pm: pluggy.PluginManager, *, source: str) -> None:
    """Fail with a clear message for a misspelled hook or an implementation of the wrong colour."""
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        known = ", ".join(sorted(hookspecs.ALL_HOOKS))
        raise PluginError(f"{source}: {exc}. Known hooks: {known}") from None
    for name in dir(pm.hook):
        if not name.startswith("pyrmq_"):
            continue
        caller = getattr(pm.hook, name)
        if caller.spec is None:
            continue
        spec_async = inspect.iscoroutinefunction(caller.spec.function)
        for impl in caller.get_hookimpls():
            impl_async = inspect.iscoroutinefunction(impl.function)
            if impl_async != spec_async:
                want = "async def" if spec_async else "def"
                raise PluginError(
                    f"{source}: plugin {impl.plugin_name!r} implements {name} with the wrong colour: "
                    f"the spec is '{want}', the implementation is not"
                )
            if spec_async and (impl.wrapper or impl.hookwrapper):
                raise PluginError(f"{source}: plugin {impl.plugin_name!r}: hook wrappers are not allowed on async hook {name}")


def build_relay(pm: pluggy.PluginManager) -> HookRelay:
    return HookRelay(pm)


def describe(pm: pluggy.PluginManager) -> list[tuple[str, list[str]]]:
    """(plugin name, hooks it implements) for every registered plugin, for ``pyrmq plugins``."""
    rows = []
    for name, plugin in sorted(pm.list_name_plugin(), key=lambda item: item[0]):
        hooks = sorted(
            caller.name for caller in (pm.get_hookcallers(plugin) or []) if caller.name.startswith("pyrmq_")
        )
        rows.append((name, hooks))
    return rows
