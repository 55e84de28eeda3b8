"""`pyrmq dev --ha`: etcd, a name server and three failover replicas as processes; killing the master shows the
next one elected; SIGTERM stops every process it started."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading

import pytest

from pyrmq.plugins.broker.failover.local_etcd import _free_port


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _read_until(proc: subprocess.Popen, pattern: str, lines: list[str]) -> re.Match:
    while True:
        line = proc.stdout.readline().decode()
        if not line:
            raise AssertionError(f"pyrmq dev --ha ended before {pattern!r}: {''.join(lines)}")
        lines.append(line)
        found = re.search(pattern, line)
        if found:
            return found


@pytest.mark.slow
def test_dev_ha_elects_again_when_the_master_is_killed(tmp_path):
    namesrv_port = _free_port()
    base = next(p for p in iter(_free_port, None) if p < 65000)
    proc = subprocess.Popen([sys.executable, "-m", "pyrmq", "dev", "--ha", "--store-dir", str(tmp_path / "ha"),
                             "--namesrv-port", str(namesrv_port), "--port", str(base)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = threading.Timer(90, proc.kill)  # the reads end when the process does
    deadline.start()
    lines: list[str] = []
    try:
        pids = {}
        for name in ("etcd", "namesrv", "replica 1", "replica 2", "replica 3"):
            pids[name] = int(_read_until(proc, rf"^{name} .* pid (\d+)", lines).group(1))
        first = _read_until(proc, r"^master: replica (\d) \(epoch 1\) at \S+ pid (\d+)", lines)
        os.kill(int(first.group(2)), signal.SIGKILL)
        second = _read_until(proc, r"^master: replica (\d) \(epoch 2\)", lines)
        assert second.group(1) != first.group(1)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        assert "stopped" in proc.stdout.read().decode()
        assert not any(_alive(pid) for pid in pids.values()), pids
    finally:
        deadline.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
