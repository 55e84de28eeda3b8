"""The distribution installs as one `pyrmq` namespace, and a third-party plugin package is found by entry point.

Builds the wheel, installs it with the example plugin package (tests/plugin_example) into a fresh venv, and runs
the installed `pyrmq` from outside the repository.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def sh(*args, cwd=None, env=None, timeout=600) -> str:
    out = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"{args}\n{out.stdout}\n{out.stderr}"
    return out.stdout


def test_every_package_in_the_tree_is_declared_in_pyproject():
    declared = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    skip = {"tests", "bench", ".venv", "build", "docs", ".git", "node_modules"}
    found = {"pyrmq"}
    for init in ROOT.rglob("__init__.py"):
        rel = init.parent.relative_to(ROOT)
        if rel.parts and (rel.parts[0] in skip or rel.parts[0].startswith(".")):
            continue
        found.add(".".join(("pyrmq", *rel.parts)))
    assert found == declared, f"pyproject packages differ: missing {found - declared}, stale {declared - found}"


def test_tests_and_bench_are_not_parts_of_pyrmq_in_the_editable_install(tmp_path):
    # the interpreter running the tests is .venv's, where `make` installed pyrmq in editable strict mode
    probe = (
        "import importlib, json\n"
        "out = {}\n"
        "for name in ('pyrmq.kernel', 'pyrmq.configs', 'pyrmq.tests', 'pyrmq.bench', 'pyrmq.tests.conftest', 'tests'):\n"
        "    try:\n"
        "        importlib.import_module(name); out[name] = True\n"
        "    except ModuleNotFoundError:\n"
        "        out[name] = False\n"
        "print(json.dumps(out))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    found = json.loads(sh(sys.executable, "-c", probe, cwd=tmp_path, env=env))
    assert found == {"pyrmq.kernel": True, "pyrmq.configs": True, "pyrmq.tests": False, "pyrmq.bench": False,
                     "pyrmq.tests.conftest": False, "tests": False}


@pytest.mark.slow
def test_wheel_installs_under_one_namespace_with_a_third_party_plugin(tmp_path):
    dist = tmp_path / "dist"
    sh(sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(dist), str(ROOT))
    wheels = list(dist.glob("pyrmq-*.whl"))
    assert len(wheels) == 1
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = env_dir / "bin" / "python"
    sh(str(py), "-m", "pip", "install", "--quiet", str(wheels[0]))
    sh(str(py), "-m", "pip", "install", "--quiet", "--no-deps", str(ROOT / "tests" / "plugin_example"))

    site = Path(sh(str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").strip())
    top = {p.name for p in site.iterdir() if not p.name.endswith((".dist-info", ".pth")) and p.name != "__pycache__"}
    assert "pyrmq" in top
    for generic in ("kernel", "plugins", "store", "remoting", "client", "configs", "spark_plugin", "tests"):
        assert generic not in top, f"{generic} must not land at the top of site-packages"

    # the dashboard's stylesheet ships in the wheel (nothing is fetched at run time)
    assert (site / "pyrmq" / "plugins" / "dashboard" / "static" / "dashboard.css").is_file()
    clean_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYRMQ_DISABLE_PLUGIN_AUTOLOAD")}
    out = sh(str(py), "-c", "import pyrmq.kernel, pyrmq.store, pyrmq.configs; print(pyrmq.kernel.__file__)", cwd=tmp_path, env=clean_env)
    assert str(site) in out
    listing = sh(str(env_dir / "bin" / "pyrmq"), "plugins", "-c", "broker", cwd=tmp_path, env=clean_env)
    assert "hello" in listing and "pyrmq_register_processors [sync]: hello" in listing
    blocked = sh(str(env_dir / "bin" / "pyrmq"), "--no-entry-points", "plugins", "-c", "broker", cwd=tmp_path, env=clean_env)
    assert "hello" not in blocked
