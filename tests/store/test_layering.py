"""store/ stands alone: it imports nothing from pyrmq.kernel or pyrmq.plugins (the kernel hands it callables)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pyrmq.store

STORE = Path(pyrmq.store.__file__).parent
FORBIDDEN = ("pyrmq.kernel", "pyrmq.plugins")


def test_no_store_module_names_the_kernel_or_the_plugins():
    offenders = []
    for path in sorted(STORE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                # a relative import that climbs out of store/ ("from ..kernel import x") counts as well
                names = [("pyrmq." if node.level > 1 else "pyrmq.store.") + (node.module or "")] if node.level else [
                    node.module or ""
                ]
            else:
                continue
            offenders += [f"{path.name}:{node.lineno} {n}" for n in names if n.startswith(FORBIDDEN)]
    assert offenders == []


def test_importing_every_store_module_loads_neither_the_kernel_nor_the_plugins():
    code = (
        "import pkgutil, sys, importlib, pyrmq.store\n"
        "for m in pkgutil.iter_modules(pyrmq.store.__path__, 'pyrmq.store.'):\n"
        "    importlib.import_module(m.name)\n"
        f"print(sorted(n for n in sys.modules if n.startswith({FORBIDDEN!r})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"
