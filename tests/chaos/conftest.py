"""The reliability suite's summary table, printed at the end of every session that ran a chaos scenario, and the
broker port picker of its clusters."""

from __future__ import annotations

import pytest

from . import harness
from .harness import FULL, RESULTS


@pytest.fixture(autouse=True, scope="session")
def _broker_port_picker(broker_port):
    """Cluster brokers take their port from the shared picker (tests/conftest.py); session-wide, so that
    module-scoped fixtures building a Cluster have it too."""
    harness.broker_port_picker = broker_port
    yield
    harness.broker_port_picker = None


def pytest_terminal_summary(terminalreporter):
    if not RESULTS:
        return
    tr = terminalreporter
    tr.section(f"reliability suite ({'full' if FULL else 'short'} run)")
    for scenario, figures in RESULTS:
        tr.write_line(f"{scenario}")
        for k, v in figures.items():
            tr.write_line(f"    {k:<28} {v}")
