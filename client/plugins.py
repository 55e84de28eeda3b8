"""The client loads plugins too: allocation strategies come from the kernel's ``pyrmq_register_allocate_strategies``
hook, through the ``client`` bundle (configs/client.toml) plus third-party entry points, once per process.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from pyrmq.client.errors import ClientError

__all__ = ["allocate_strategies", "resolve_strategy", "reset"]

_lock = threading.Lock()
_strategies: dict[str, Any] | None = None


def allocate_strategies() -> dict[str, Any]:
    """Every registered strategy by name (the first plugin in pluggy's order wins a name)."""
    global _strategies
    with _lock:
        if _strategies is None:
            from pyrmq.kernel.bundles import load_bundle, packaged_bundle_path
            from pyrmq.kernel.hooks import HookRelay
            from pyrmq.kernel.manager import load_plugins

            # by path: a bare "client" would find the client/ folder when run from the repository root
            pm = load_plugins(load_bundle(packaged_bundle_path("client")))
            _strategies = HookRelay(pm).register_allocate_strategies()
        return _strategies


def reset() -> None:
    """Forget the loaded strategies (tests that install a plugin)."""
    global _strategies
    with _lock:
        _strategies = None


def resolve_strategy(strategy: str | Any, options: Mapping[str, Any] | None = None) -> Any:
    """A strategy callable from a registered name (optionally configured with ``options``) or a callable."""
    if callable(strategy) and not isinstance(strategy, str):
        return strategy.with_options(**options) if options else strategy
    table = allocate_strategies()
    found = table.get(str(strategy).upper())
    if found is None:
        raise ClientError(f"no allocation strategy named {strategy!r}; registered: {', '.join(sorted(table))}")
    if options:
        configure = getattr(found, "with_options", None)
        if configure is None:
            raise ClientError(f"allocation strategy {strategy!r} takes no options")
        return configure(**options)
    return found
