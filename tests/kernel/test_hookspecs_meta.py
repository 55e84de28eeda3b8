"""Meta-tests over the hook specifications: documented, implemented by a shipped plugin, exercised by a test that
implements the hook and checks what it does, and implemented in the right colour."""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import pkgutil
import textwrap
from collections.abc import Iterable
from pathlib import Path

import pytest

import pyrmq.plugins
from pyrmq.kernel import hookspecs
from pyrmq.kernel.bundles import load_bundle, packaged_bundle_path
from pyrmq.kernel.hooks import HookRelay
from pyrmq.kernel.manager import check_plugins, load_plugins, new_plugin_manager

TESTS = Path(__file__).resolve().parents[1]
BUNDLES = sorted(p.stem for p in packaged_bundle_path("dev").parent.glob("*.toml"))

#: hooks no shipped plugin needs to implement: the kernel's own extension point for third-party hook specs
EXTENSION_POINTS = frozenset({"pyrmq_addhooks"})


def test_every_hook_is_prefixed_and_listed():
    names = [n for n, obj in vars(hookspecs).items() if callable(obj) and n.startswith("pyrmq_")]
    assert sorted(names) == sorted(hookspecs.ALL_HOOKS)
    assert all(name.startswith("pyrmq_") for name in names)
    assert set(names) == {
        "pyrmq_addhooks", "pyrmq_configure", "pyrmq_serve", "pyrmq_unconfigure", "pyrmq_add_commands",
        "pyrmq_register_processors", "pyrmq_register_store_dispatchers", "pyrmq_register_put_interceptors",
        "pyrmq_connection_opened", "pyrmq_connection_closed", "pyrmq_make_message_filter", "pyrmq_make_request_guard",
        "pyrmq_make_replicator", "pyrmq_register_allocate_strategies", "pyrmq_check_transaction",
        "pyrmq_add_options", "pyrmq_apply_options", "pyrmq_run_instead", "pyrmq_register_settings",
        "pyrmq_role_changed", "pyrmq_make_flush_policy", "pyrmq_register_schedulers", "pyrmq_register_metric_collectors",
        "pyrmq_register_slave_sync",
    }


# -- no hook without an implementation ---------------------------------------------------------------------------


def shipped_implementations() -> set[str]:
    """Hooks implemented by the plugins the packaged bundles load (the essential plugins included), and by the
    feature classes those plugin modules define (a package plugin: its modules): a module registers its feature
    object in ``pyrmq_configure`` (``kernel.register``), whose ``@hookimpl`` methods answer the other hooks."""
    implemented: set[str] = set()
    for bundle_name in BUNDLES:
        pm = load_plugins(load_bundle(bundle_name), entry_points_enabled=False)
        for _, plugin in pm.list_name_plugin():
            implemented.update(c.name for c in pm.get_hookcallers(plugin) or () if c.name.startswith("pyrmq_"))
            for value in list(vars(plugin).values()) if inspect.ismodule(plugin) else ():
                if inspect.isclass(value) and (value.__module__ == plugin.__name__
                                               or value.__module__.startswith(f"{plugin.__name__}.")):
                    implemented.update(
                        name for name, member in vars(value).items()
                        if name.startswith("pyrmq_") and hasattr(member, f"{hookspecs.PROJECT}_impl"))
    return implemented


def unimplemented(hooks: Iterable[str], implemented: set[str]) -> list[str]:
    return sorted(set(hooks) - implemented - EXTENSION_POINTS)


def test_every_hook_has_a_shipped_implementation():
    missing = unimplemented(hookspecs.ALL_HOOKS, shipped_implementations())
    assert not missing, f"no shipped plugin implements {missing}: remove the hook until a feature needs it"


def test_an_unimplemented_hook_is_reported():
    assert unimplemented([*hookspecs.ALL_HOOKS, "pyrmq_make_compaction_policy"], shipped_implementations()) == [
        "pyrmq_make_compaction_policy"
    ]


# -- every hook has a test that implements it and checks its behaviour -------------------------------------------


def _marked_hooks(decorator: ast.expr) -> list[str]:
    """``pytest.mark.hook("a", "b")`` -> ["a", "b"]."""
    if (
        isinstance(decorator, ast.Call)
        and isinstance(decorator.func, ast.Attribute)
        and decorator.func.attr == "hook"
        and isinstance(decorator.func.value, ast.Attribute)
        and decorator.func.value.attr == "mark"
    ):
        return [a.value for a in decorator.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    return []


def _defined_hooks(node: ast.AST) -> set[str]:
    return {
        n.name for n in ast.walk(node)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name.startswith("pyrmq_")
    }


def behaviour_tests(source: str) -> dict[str, list[str]]:
    """hook -> tests of one module marked ``@pytest.mark.hook(hook)`` that implement it: in the test itself or in a
    module-level class or function the test uses. A test that only names the hook does not count."""
    tree = ast.parse(source)
    top = {n.name: n for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))}
    found: dict[str, list[str]] = {}
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or not node.name.startswith("test_"):
            continue
        marked = [h for d in node.decorator_list for h in _marked_hooks(d)]
        if not marked:
            continue
        implemented = _defined_hooks(node)
        for used in {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} & set(top):
            implemented |= _defined_hooks(top[used])
        for hook in marked:
            if hook in implemented:
                found.setdefault(hook, []).append(node.name)
    return found


@functools.cache
def all_behaviour_tests() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in sorted(TESTS.rglob("test_*.py")):
        for hook, tests in behaviour_tests(path.read_text(encoding="utf-8")).items():
            found.setdefault(hook, []).extend(f"{path.relative_to(TESTS)}::{t}" for t in tests)
    return found


@pytest.mark.parametrize("name", hookspecs.ALL_HOOKS)
def test_every_hook_has_a_behaviour_test(name):
    assert all_behaviour_tests().get(name), (
        f"no test exercises {name}: mark one @pytest.mark.hook({name!r}) that implements it in a test plugin and "
        f"asserts what a user observes"
    )


def test_a_test_that_only_names_a_hook_does_not_count():
    source = textwrap.dedent('''
        import pytest

        class Plugin:
            @hookimpl
            def pyrmq_register_put_interceptors(self, kernel):
                return []

        @pytest.mark.hook("pyrmq_register_put_interceptors", "pyrmq_serve")
        def test_real():
            start(Plugin())

        @pytest.mark.hook("pyrmq_configure")
        def test_mentions_only():
            assert "pyrmq_configure" in dir(hookspecs)

        def test_unmarked():
            class P:
                def pyrmq_unconfigure(self, kernel): ...
    ''')
    assert behaviour_tests(source) == {"pyrmq_register_put_interceptors": ["test_real"]}


@pytest.mark.parametrize("name", hookspecs.ALL_HOOKS)
def test_every_hook_is_documented(name):
    doc = inspect.getdoc(getattr(hookspecs, name)) or ""
    assert len(doc) > 120, f"{name}: the docstring must say who calls it, when, and what the result means"
    assert "Called" in doc or "called" in doc, f"{name}: say who calls it and when"
    assert "Return" in doc or "return" in doc or "answer" in doc, f"{name}: say what the result means"


def test_async_specs_are_not_firstresult_or_historic():
    pm = new_plugin_manager()
    for name in hookspecs.ALL_HOOKS:
        caller = getattr(pm.hook, name)
        if inspect.iscoroutinefunction(caller.spec.function):
            assert not caller.spec.opts.get("firstresult"), name
            assert not caller.spec.opts.get("historic"), name


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


@pytest.mark.parametrize("bundle_name", BUNDLES)
def test_every_packaged_bundle_loads(bundle_name):
    bundle = load_bundle(bundle_name)
    pm = load_plugins(bundle, entry_points_enabled=False)
    for name in bundle.plugins:
        assert pm.get_plugin(name) is not None, f"{bundle_name}: {name} not registered"
