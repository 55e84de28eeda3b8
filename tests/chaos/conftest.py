"""The reliability suite's summary table, printed at the end of every session that ran a chaos scenario, and the
broker port picker of its clusters."""

from __future__ import annotations

import pytest

from . import harness
from .harness import FULL, RESULTS


@pytest.fixture(autouse=True)
def _broker_port_picker(broker_port, monkeypatch):
    """Cluster brokers take their port from the shared picker (tests/conftest.py)."""
    monkeypatch.setattr(harness, "broker_port_picker", broker_port)


def pytest_terminal_summary(terminalreporter):
    if not RESULTS:
        return
    tr = terminalreporter
    tr.section(f"reliability suite ({'full' if FULL else 'short'} run)")
    for scenario, figures in RESULTS:
        tr.write_line(f"{scenario}")
        for k, v in figures.items():
            tr.write_line(f"    {k:<28} {v}")
