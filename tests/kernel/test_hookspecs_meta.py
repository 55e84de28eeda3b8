"""Meta-tests over the hook specifications: documented, tested, and implemented in the right colour."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import pyrmq.plugins
from pyrmq.kernel import hookspecs
from pyrmq.kernel.bundles import load_bundle, packaged_bundle_path
from pyrmq.kernel.hooks import HookRelay
from pyrmq.kernel.manager import check_plugins, load_plugins, new_plugin_manager

TESTS = Path(__file__).resolve().parents[1]


def test_every_hook_is_prefixed_and_listed():
    names = [n for n, obj in vars(hookspecs).items() if callable(obj) and n.startswith("pyrmq_")]
    assert sorted(names) == sorted(hookspecs.ALL_HOOKS)
    assert len(names) >= 16
    assert all(name.startswith("pyrmq_") for name in names)


@pytest.mark.parametrize("name", hookspecs.ALL_HOOKS)
def test_every_hook_is_documented(name):
    doc = inspect.getdoc(getattr(hookspecs, name)) or ""
    assert len(doc) > 120, f"{name}: the docstring must say who calls it, when, and what the result means"
    assert "Called" in doc or "called" in doc, f"{name}: say who calls it and when"
    assert "Return" in doc or "return" in doc or "answer" in doc, f"{name}: say what the result means"


@pytest.mark.parametrize("name", hookspecs.ALL_HOOKS)
def test_every_hook_has_a_test(name):
    me = Path(__file__).resolve()
    mentioned = [p for p in TESTS.rglob("test_*.py") if p.resolve() != me and name in p.read_text(encoding="utf-8")]
    assert mentioned, f"no test exercises {name}"


def test_async_specs_are_not_firstresult_or_historic():
    pm = new_plugin_manager()
    for name in hookspecs.ALL_HOOKS:
        caller = getattr(pm.hook, name)
        if inspect.iscoroutinefunction(caller.spec.function):
            assert not caller.spec.opts.get("firstresult"), name
            assert not caller.spec.opts.get("historic"), name
    assert hookspecs.FIRST_RESULT <= set(hookspecs.ALL_HOOKS)


def test_relay_covers_every_hook():
    source = inspect.getsource(HookRelay)
    missing = [name for name in hookspecs.ALL_HOOKS if name not in source and name != "pyrmq_addhooks"]
    assert not missing, f"HookRelay has no method for {missing}"


def _all_plugin_modules():
    for info in pkgutil.walk_packages(pyrmq.plugins.__path__, prefix="pyrmq.plugins."):
        yield info.name


@pytest.mark.parametrize("module_name", list(_all_plugin_modules()))
def test_every_shipped_plugin_module_has_the_right_colours(module_name):
    module = importlib.import_module(module_name)
    pm = new_plugin_manager()
    pm.register(module, name=module_name)
    check_plugins(pm, source=module_name)  # raises PluginError on a colour mismatch or unknown hook


@pytest.mark.parametrize("bundle_name", sorted(p.stem for p in packaged_bundle_path("dev").parent.glob("*.toml")))
def test_every_packaged_bundle_loads(bundle_name):
    bundle = load_bundle(bundle_name)
    pm = load_plugins(bundle, entry_points_enabled=False)
    for name in bundle.plugins:
        assert pm.get_plugin(name) is not None, f"{bundle_name}: {name} not registered"
