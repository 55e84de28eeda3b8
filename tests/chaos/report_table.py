"""``python tests/chaos/report_table.py chaos-report.jsonl``: the rows `make chaos` wrote, as a Markdown table for
docs/reliability.md (the last row of each scenario wins)."""

from __future__ import annotations

import json
import sys


def main(path: str) -> None:
    rows: dict[str, dict] = {}
    for line in open(path):
        if line.strip():
            row = json.loads(line)
            rows[row.pop("scenario")] = row
    print("| scenario | figures |")
    print("|---|---|")
    for scenario, figures in rows.items():
        cells = "; ".join(f"{k.replace('_', ' ')}: {v}" for k, v in figures.items())
        print(f"| {scenario} | {cells} |")


if __name__ == "__main__":
    main(sys.argv[1])
