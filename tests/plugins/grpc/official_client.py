"""The official RocketMQ 5.x Python client (``rocketmq-python-client`` from PyPI) in a venv of its own.

Its pins (grpcio, grpcio-tools, protobuf >= 6.33.5, opentelemetry) are not pyrmq's, so it lives in
``$PYRMQ_CACHE_DIR/rocketmq-python-client-<version>`` (default ``~/.cache/pyrmq``), built on first use with the
system's ``python3 -m venv`` and pip, like the Java artifacts and ali-ons. Scripts run there as subprocesses and
print JSON lines; nothing of pyrmq is imported on that side.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

VERSION = os.environ.get("PYRMQ_ROCKETMQ_PYTHON_CLIENT", "5.1.2")
SCRIPTS = Path(__file__).parent / "scripts"


def cache_dir() -> Path:
    return Path(os.environ.get("PYRMQ_CACHE_DIR", Path.home() / ".cache" / "pyrmq"))


class ClientVenvError(Exception):
    """The venv could not be built: the message says why (shown by the test that needed it)."""


def venv_python() -> Path:
    """The venv's interpreter, with ``rocketmq-python-client==VERSION`` installed (built on first use)."""
    venv = cache_dir() / f"rocketmq-python-client-{VERSION}"
    python = venv / "bin" / "python"
    stamp = venv / ".installed"
    if stamp.exists() and python.exists():
        return python
    base = os.environ.get("PYRMQ_CLIENT_VENV_PYTHON", "python3")
    try:
        if not python.exists():
            out = subprocess.run([base, "-m", "venv", str(venv)], capture_output=True, text=True, timeout=300)
            if out.returncode != 0:
                raise ClientVenvError(f"{base} -m venv {venv} failed ({out.returncode}): {out.stderr[-2000:]} "
                                      "(Debian: apt-get install python3-venv)")
        out = subprocess.run([str(python), "-m", "pip", "install", "--quiet", f"rocketmq-python-client=={VERSION}"],
                             capture_output=True, text=True, timeout=900)
        if out.returncode != 0:
            raise ClientVenvError(f"pip install rocketmq-python-client=={VERSION} into {venv} failed "
                                  f"({out.returncode}): {out.stdout[-2000:]} {out.stderr[-2000:]}")
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ClientVenvError(f"building the venv {venv} failed: {exc}") from None
    stamp.write_text(VERSION)
    return python


def run_script(script: str, *args: str, timeout: float = 120, env: dict[str, str] | None = None) -> list[dict]:
    """Run ``scripts/<script>`` in the client's venv; its JSON lines (asserts it exited 0)."""
    python = venv_python()
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    full_env.update(env or {})
    out = subprocess.run([str(python), str(SCRIPTS / script), *map(str, args)], capture_output=True, text=True,
                         timeout=timeout, env=full_env)
    assert out.returncode == 0, f"{script} {args} failed ({out.returncode}):\n{out.stdout[-4000:]}\n{out.stderr[-4000:]}"
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def start_script(script: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start ``scripts/<script>`` in the venv with pipes (a long-lived client the test drives through stdin)."""
    python = venv_python()
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    full_env.update(env or {})
    return subprocess.Popen([str(python), str(SCRIPTS / script), *map(str, args)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full_env)


if __name__ == "__main__":  # pragma: no cover - `python tests/plugins/grpc/official_client.py` builds the venv
    print(venv_python())
    sys.exit(0)
