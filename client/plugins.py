"""The client loads plugins too: allocation strategies come from the kernel's ``pyrmq_register_allocate_strategies``
hook, through the ``client`` bundle (configs/client.toml) plus third-party entry points and the consumer's own
plugin objects.

Each consumer loads its own table when it is created (a few milliseconds, once per consumer): nothing is cached per
process, so two consumers in one process may use different plugins, and a plugin object given to one consumer is
invisible to the others.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pyrmq.client.errors import ClientError

__all__ = ["allocate_strategies", "resolve_strategy"]


def allocate_strategies(plugins: Iterable[object] = ()) -> dict[str, Any]:
    """Every registered strategy by name (the first plugin in pluggy's order wins a name); ``plugins`` are extra
    plugin objects registered after the bundle's, so they answer first."""
    from pyrmq.kernel.bundles import load_bundle, packaged_bundle_path
    from pyrmq.kernel.hooks import HookRelay
    from pyrmq.kernel.manager import load_plugins

    # by path: a bare "client" would find the client/ folder when run from the repository root
    pm = load_plugins(load_bundle(packaged_bundle_path("client")), extra=list(plugins))
    return HookRelay(pm).register_allocate_strategies()


def resolve_strategy(
    strategy: str | Any, options: Mapping[str, Any] | None = None, *, plugins: Iterable[object] = ()
) -> Any:
    """A strategy callable from a registered name (optionally configured with ``options``) or a callable."""
    if callable(strategy) and not isinstance(strategy, str):
        return strategy.with_options(**options) if options else strategy
    table = allocate_strategies(plugins)
    found = table.get(str(strategy).upper())
    if found is None:
        raise ClientError(f"no allocation strategy named {strategy!r}; registered: {', '.join(sorted(table))}")
    if options:
        configure = getattr(found, "with_options", None)
        if configure is None:
            raise ClientError(f"allocation strategy {strategy!r} takes no options")
        return configure(**options)
    return found
