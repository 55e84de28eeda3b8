from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio
from trio.testing import MockClock

from pyrmq.remoting.server import RemotingServer

#: test vectors kept in the repository (tests/data/captures/README.md says where each frame came from)
DATA = Path(__file__).resolve().parents[1] / "data"
CAPTURES = DATA / "captures"


def load_captures(prefix: str = "") -> list[tuple[str, bytes, dict]]:
    out = []
    assert CAPTURES.is_dir(), f"{CAPTURES} is missing"
    for bin_path in sorted(CAPTURES.glob(f"{prefix}*.bin")):
        meta = json.loads(bin_path.with_suffix(".json").read_text())
        out.append((bin_path.stem, bin_path.read_bytes(), meta))
    return out


@pytest.fixture
def slow_autojump_clock() -> MockClock:
    """Autojump for tests with real sockets: virtual time only jumps after 50 ms of real idleness, so a frame in
    flight in the kernel is not mistaken for "everyone is blocked forever"."""
    return MockClock(autojump_threshold=0.05)


@pytest.fixture
def serve(nursery: trio.Nursery):
    """``server, addr = await serve(processors, **options)``: a RemotingServer on 127.0.0.1, port 0."""

    async def _serve(processors, **kw):
        server = RemotingServer(processors, **kw)
        port = await nursery.start(server.run)
        return server, f"127.0.0.1:{port}"

    return _serve
