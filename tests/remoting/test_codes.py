"""Every code named in the spec (sections 1.3, 2.1, 2.2) has its member with the same number."""

from __future__ import annotations

import re


from pyrmq.remoting.codes import LanguageCode, RequestCode, ResponseCode

from .conftest import SPEC


def spec_text() -> str:
    # the spec is our contract and sits beside the repository (shared/): its absence is a failure, not a skip
    assert SPEC.exists(), f"{SPEC} is missing: clone pyrmq with shared/ beside it"
    return SPEC.read_text()


def _section(text: str, start: str, end: str) -> str:
    return text[text.index(start):text.index(end)]


def test_request_codes_of_table_2_1():
    section = _section(spec_text(), "### 2.1", "### 2.2")
    rows = re.findall(r"^\| (\d+) \| ([A-Z0-9_]+) \|", section, re.M)
    assert len(rows) >= 30
    for number, name in rows:
        assert RequestCode[name] == int(number)
    # the prose after the table names more codes: "RESET_CONSUMER_CLIENT_OFFSET 220, ..."
    for name, number in re.findall(r"\b([A-Z][A-Z0-9_]{5,}) (\d{2,3})\b", section):
        assert RequestCode[name] == int(number)
    for name in ("GET_KV_CONFIG", "PUT_KV_CONFIG", "DELETE_KV_CONFIG"):
        assert name in RequestCode.__members__


def test_response_codes_of_2_2():
    section = _section(spec_text(), "### 2.2", "How the Java client interprets")
    pairs = re.findall(r"\b(\d{1,3}) ([A-Z][A-Z0-9_]+)\b", section)
    assert len(pairs) >= 37
    for number, name in pairs:
        assert ResponseCode[name] == int(number)


def test_language_codes_of_1_3():
    section = _section(spec_text(), "`LanguageCode` values", "### 1.4")
    pairs = re.findall(r"\b([A-Z]{2,}) (\d{1,2})\b", section)
    assert len(pairs) == 13
    for name, number in pairs:
        assert LanguageCode[name] == int(number)
