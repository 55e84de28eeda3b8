"""Every feature in its own room: what a feature package owns appears outside it only where a listed exception says why.

A room is a feature's module or package under plugins/. What it owns, read from its source:

- its modules: no product module outside the room imports them;
- its ``broker.conf`` / ``namesrv`` keys (the fields of the settings classes it returns from
  ``pyrmq_register_settings`` for a role section): no product module outside reads them as an attribute or spells
  them as a string (a plugin's own table, ``plugins.<name>``, has short local names such as ``port``: not checked);
- the string constants it defines under a TOPIC / PROPERTY / KEY name that the wire vocabulary
  (remoting/vocabulary.py) does not define: no product module outside spells them.

"Product" is kernel/, store/, remoting/, plugins/, client/, spark_plugin/ (tests, benchmarks and docs may name
anything). Each exception below names the room, the file and why: wire format or RocketMQ fidelity, or a room built
on another's classes.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("kernel", "store", "remoting", "plugins", "client", "spark_plugin")

#: room -> its module or package, relative to the repository root
ROOMS = {
    "transactions": "plugins/broker/transaction",
    "timer": "plugins/broker/timer",
    "delay levels": "plugins/broker/delay_levels",
    "retry and DLQ": "plugins/broker/retry_dlq.py",
    "POP": "plugins/broker/pop",
    "replication": "plugins/broker/ha",
    "automatic failover": "plugins/broker/failover",
    "access control": "plugins/broker/acl",
    "SQL92": "plugins/sql92",
    "name server": "plugins/namesrv",
    "dashboard": "plugins/dashboard",
    "metrics endpoint": "plugins/builtin/metrics.py",
    "flush policy": "plugins/broker/flush.py",
}

#: (room, file outside it) -> why that file may use the room's names
EXCEPTIONS = {
    ("replication", "plugins/broker/failover"): "automatic failover replicates through the HA room's master and slave "
    "classes on 5.x's AutoSwitch frames, and reads the HA settings they take (a room built on another)",
    ("SQL92", "client/message_selector.py"): "the client compiles a SQL92 selector before it subscribes, with the same "
    "parser the broker uses, so a bad expression fails at the call that wrote it",
}


def _files(rel: str) -> list[Path]:
    path = ROOT / rel
    return [path] if path.is_file() else sorted(path.rglob("*.py"))


def _module(rel: str) -> str:
    return "pyrmq." + rel.removesuffix(".py").replace("/", ".")


def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                found.add(id(first.value))
    return found


def _vocabulary() -> set[str]:
    tree = _parse(ROOT / "remoting" / "vocabulary.py")
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def role_keys(rel: str) -> set[str]:
    """The keys of the settings classes the room declares for a role section ("broker", "namesrv")."""
    trees = [_parse(f) for f in _files(rel)]
    declared: set[str] = set()
    for tree in trees:
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.name == "pyrmq_register_settings":
                for ret in ast.walk(fn):
                    if isinstance(ret, ast.Return) and isinstance(ret.value, ast.Dict):
                        for key, value in zip(ret.value.keys, ret.value.values):
                            if isinstance(key, ast.Constant) and key.value in ("broker", "namesrv"):
                                names = value.elts if isinstance(value, (ast.List, ast.Tuple)) else [value]
                                declared.update(n.id for n in names if isinstance(n, ast.Name))
    keys: set[str] = set()
    for tree in trees:
        for cls in ast.walk(tree):
            if isinstance(cls, ast.ClassDef) and cls.name in declared:
                keys.update(st.target.id for st in cls.body
                            if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name))
    return keys


def owned_literals(rel: str) -> set[str]:
    vocabulary = _vocabulary()
    found: set[str] = set()
    for path in _files(rel):
        for node in _parse(path).body:
            if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                    and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
                name, value = node.targets[0].id, node.value.value
                if name.isupper() and any(w in name for w in ("TOPIC", "PROPERTY", "KEY")) and " " not in value:
                    if value not in vocabulary and len(value) > 3:
                        found.add(value)
    return found


@functools.cache
def _product() -> tuple[tuple[str, Path, ast.Module, frozenset[int]], ...]:
    """Every product file parsed once: (path as written, resolved path, tree, ids of its docstring nodes)."""
    out = []
    for top in PRODUCT:
        for path in sorted((ROOT / top).rglob("*.py")):
            tree = _parse(path)
            out.append((str(path.relative_to(ROOT)), path.resolve(), tree, frozenset(_docstrings(tree))))
    return tuple(out)


def uses_outside(room: str, extra: dict[str, str] | None = None) -> list[str]:
    """Every use of the room's names outside it that no exception covers, as ``file:line what``. ``extra``: more
    sources to scan as if they were product files (path -> text), for the self-test."""
    rel = ROOMS[room]
    module = _module(rel)
    keys = role_keys(rel)
    literals = owned_literals(rel)
    inside = {p.resolve() for p in _files(rel)}
    allowed = [outside for (r, outside) in EXCEPTIONS if r == room]
    found = []
    probes = []
    for where, text in (extra or {}).items():
        tree = ast.parse(text, filename=where)
        probes.append((where, None, tree, frozenset(_docstrings(tree))))
    for where, resolved, tree, docs in [*_product(), *probes]:
        if resolved in inside or any(where == a or where.startswith(a.rstrip("/") + "/") for a in allowed):
            continue
        for node in ast.walk(tree):
            line = getattr(node, "lineno", 0)
            if isinstance(node, ast.ImportFrom) and node.module and (
                    node.module == module or node.module.startswith(module + ".")):
                found.append(f"{where}:{line} imports {node.module}")
            elif isinstance(node, ast.Import):
                found += [f"{where}:{line} imports {a.name}" for a in node.names
                          if a.name == module or a.name.startswith(module + ".")]
            elif isinstance(node, ast.Attribute) and node.attr in keys:
                found.append(f"{where}:{line} reads setting {node.attr}")
            elif (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
                  and (node.value in keys or node.value in literals)):
                found.append(f"{where}:{line} spells {node.value!r}")
    return found


@pytest.mark.parametrize("room", sorted(ROOMS))
def test_a_rooms_names_stay_in_the_room(room):
    assert (ROOT / ROOMS[room]).exists(), f"{room}: {ROOMS[room]} is gone: update ROOMS"
    leaks = uses_outside(room)
    assert not leaks, f"{room} ({ROOMS[room]}) is used outside its room without a listed reason:\n" + "\n".join(leaks)


def test_every_exception_is_still_needed():
    """An exception nobody needs any more is removed (a room's names left that file), so the list stays true."""
    stale = []
    for (room, outside), why in EXCEPTIONS.items():
        saved = dict(EXCEPTIONS)
        try:
            del EXCEPTIONS[(room, outside)]
            if not uses_outside(room):
                stale.append(f"{room} / {outside}: {why}")
        finally:
            EXCEPTIONS.clear()
            EXCEPTIONS.update(saved)
    assert not stale, "exceptions no file needs any more:\n" + "\n".join(stale)


def test_the_check_finds_a_leak():
    """The scan sees an import of a room, a read of its broker.conf key and its own topic name (a test that cannot fail
    is no test)."""
    probe = ("from pyrmq.plugins.broker.delay_levels import settings\n"
             "def f(s):\n    return s.messageDelayLevel, 'messageDelayLevel'\n")
    found = uses_outside("delay levels", {"plugins/builtin/_rooms_probe.py": probe})
    assert any("_rooms_probe.py:1 imports pyrmq.plugins.broker.delay_levels" in f for f in found)
    assert any("_rooms_probe.py:3 reads setting messageDelayLevel" in f for f in found)
    assert any("_rooms_probe.py:3 spells 'messageDelayLevel'" in f for f in found)
