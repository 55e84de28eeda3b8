"""The reliability suite's summary table, printed at the end of every session that ran a chaos scenario."""

from __future__ import annotations

from .harness import FULL, RESULTS


def pytest_terminal_summary(terminalreporter):
    if not RESULTS:
        return
    tr = terminalreporter
    tr.section(f"reliability suite ({'full' if FULL else 'short'} run)")
    for scenario, figures in RESULTS:
        tr.write_line(f"{scenario}")
        for k, v in figures.items():
            tr.write_line(f"    {k:<28} {v}")
