"""Our wire codes against the numbers of Apache RocketMQ 4.9.8, recorded in tests/data/wire_codes.json: every
code the protocol needs exists with its number, and no member of our enums has a number RocketMQ gives another."""

from __future__ import annotations

import json
from enum import IntEnum

import pytest

from pyrmq.remoting.codes import LanguageCode, RequestCode, ResponseCode

from .conftest import DATA, load_captures

CODES = json.loads((DATA / "wire_codes.json").read_text())
ENUMS = {"request": RequestCode, "response": ResponseCode, "language": LanguageCode}


@pytest.mark.parametrize("kind", sorted(ENUMS))
def test_every_code_the_protocol_needs_has_rocketmqs_number(kind: str):
    enum: type[IntEnum] = ENUMS[kind]
    recorded = CODES[kind]
    needed = CODES["must_have"][kind]
    assert len(needed) >= {"request": 40, "response": 37, "language": 13}[kind]
    missing = [name for name in needed if name not in enum.__members__]
    assert not missing, f"{enum.__name__} lacks {missing}"
    wrong = {name: (int(enum[name]), recorded[name]) for name in needed if enum[name] != recorded[name]}
    assert not wrong, f"{enum.__name__}: (ours, RocketMQ's) {wrong}"


@pytest.mark.parametrize("kind", sorted(ENUMS))
def test_no_member_of_our_enums_has_a_number_of_its_own(kind: str):
    enum: type[IntEnum] = ENUMS[kind]
    recorded = CODES[kind]
    unknown = [m.name for m in enum if m.name not in recorded]
    assert not unknown, f"{enum.__name__} has codes RocketMQ does not define: {unknown}"
    wrong = {m.name: (int(m), recorded[m.name]) for m in enum if m != recorded[m.name]}
    assert not wrong, f"{enum.__name__}: (ours, RocketMQ's) {wrong}"


def test_captured_frames_carry_codes_we_know():
    # the real clients' frames (tests/data/captures) use only request codes our enum names
    codes = {meta["header"]["code"] for name, _, meta in load_captures("alions-")}
    assert codes and codes <= {int(c) for c in RequestCode}
