"""A third-party plugin package found through the `pyrmq.plugins` entry point: the kernel calls its hooks and its
request processor over a real socket (tests/plugin_example is the README's example)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pyrmq.remoting.command import RemotingCommand

EXAMPLE = Path(__file__).resolve().parents[1] / "plugin_example"


@pytest.fixture
def hello_entry_point(tmp_path, monkeypatch):
    """Make the example package discoverable exactly as `pip install` would: a dist-info with entry_points.txt."""
    dist = tmp_path / "pyrmq_hello-0.1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: pyrmq-hello\nVersion: 0.1.0\n")
    (dist / "entry_points.txt").write_text("[pyrmq.plugins]\nhello = pyrmq_hello\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.delenv("PYRMQ_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    yield
    sys.modules.pop("pyrmq_hello", None)


async def test_entry_point_plugin_answers_its_request_code(hello_entry_point, nursery, tmp_path, remoting_client):
    from pyrmq.kernel.bundles import load_bundle
    from pyrmq.kernel.service import build_kernel, serve_kernel

    bundle = load_bundle("namesrv").with_overrides({"namesrv.listenPort": 0, "namesrv.kvConfigPath": str(tmp_path / "kv.json")})
    kernel = build_kernel(bundle)  # entry points on, as the bundle says
    assert kernel.pluginmanager.get_plugin("hello") is not None
    await nursery.start(serve_kernel, kernel)
    addr = kernel.listening["namesrv"]
    response = await remoting_client.invoke(addr, RemotingCommand.request(9001, {"name": "pyrmq"}))
    assert response.code == 0 and response.remark == "hello, pyrmq (connection #1)"
    kernel.request_stop()


def test_a_bundle_can_refuse_or_block_the_plugin(hello_entry_point):
    from pyrmq.kernel.bundles import load_bundle
    from pyrmq.kernel.manager import load_plugins

    bundle = load_bundle("namesrv")
    assert load_plugins(bundle).get_plugin("hello") is not None
    import attrs

    assert load_plugins(attrs.evolve(bundle, block=("hello",))).get_plugin("hello") is None
    assert load_plugins(attrs.evolve(bundle, entry_points=False)).get_plugin("hello") is None


def test_the_readme_shows_the_example_as_it_is():
    """README's "Writing a plugin" is tests/plugin_example/pyrmq_hello.py, the package these tests install."""
    import re

    readme = (EXAMPLE.parents[1] / "README.md").read_text(encoding="utf-8")
    shown = [c for c in re.findall(r"```python\n(.*?)```", readme, re.S) if "pyrmq-hello" in c]
    assert shown == [(EXAMPLE / "pyrmq_hello.py").read_text(encoding="utf-8")]
