"""The client library decodes messages with the remoting layer's codec: importing it loads neither the store nor the
broker's or name server's plugins."""

from __future__ import annotations

import subprocess
import sys

# Every module of pyrmq.client imported in a fresh interpreter; prints the pyrmq modules that got loaded.
_PROBE = """
import pkgutil, importlib, sys
import pyrmq.client
for info in pkgutil.iter_modules(pyrmq.client.__path__, "pyrmq.client."):
    importlib.import_module(info.name)
print("\\n".join(sorted(m for m in sys.modules if m.startswith("pyrmq."))))
"""


def test_client_does_not_load_the_store_or_the_broker():
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120, check=True).stdout
    loaded = out.split()
    assert "pyrmq.client.producer" in loaded and "pyrmq.remoting.message" in loaded  # the probe did import them
    assert [m for m in loaded if m.startswith(("pyrmq.store", "pyrmq.plugins.broker", "pyrmq.plugins.namesrv"))] == []
