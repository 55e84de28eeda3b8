"""Rules every test file keeps: no skips (a missing tool or extra is a failure that says what to install), and no
import of ``tests`` as a top-level package (it only resolves when the repository root happens to be on sys.path)."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
SKIPS = re.compile(r"\b(importorskip|pytest\.skip|mark\.skip(if)?|mark\.xfail|pytest\.xfail)\b")
TOP_LEVEL_TESTS = re.compile(r"^\s*(from|import)\s+tests(\.|\s|$)")


def _lines():
    for path in sorted(TESTS.rglob("*.py")):
        if path == Path(__file__).resolve():
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            yield f"{path.relative_to(TESTS.parent)}:{n}: {line.strip()}", line


def test_no_test_skips_or_expects_failure():
    offenders = [where for where, line in _lines() if SKIPS.search(line)]
    assert not offenders, "fail with what to install instead of skipping:\n" + "\n".join(offenders)


def test_no_test_imports_tests_as_a_top_level_package():
    offenders = [where for where, line in _lines() if TOP_LEVEL_TESTS.match(line)]
    assert not offenders, "use a fixture or a relative import instead:\n" + "\n".join(offenders)
