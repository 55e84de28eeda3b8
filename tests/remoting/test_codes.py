"""Our wire codes against the numbers of Apache RocketMQ 4.9.8 and, for the 5.x codes pyrmq serves (POP), 5.5.0,
recorded in tests/data/wire_codes.json: every code the protocol needs exists with its number, and no member of our
enums has a number RocketMQ gives another."""

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


def _recorded(kind: str) -> dict[str, int]:
    """4.9.8's numbers, then 5.5.0's for the codes 5.x added or renumbered (POP)."""
    return {**CODES[kind], **CODES.get(f"{kind}_5x", {})}


@pytest.mark.parametrize("kind", sorted(ENUMS))
def test_no_member_of_our_enums_has_a_number_of_its_own(kind: str):
    enum: type[IntEnum] = ENUMS[kind]
    recorded = _recorded(kind)
    unknown = [m.name for m in enum if m.name not in recorded]
    assert not unknown, f"{enum.__name__} has codes RocketMQ does not define: {unknown}"
    wrong = {m.name: (int(m), recorded[m.name]) for m in enum if m != recorded[m.name]}
    assert not wrong, f"{enum.__name__}: (ours, RocketMQ's) {wrong}"


@pytest.mark.parametrize("kind", ["request", "response"])
def test_every_5x_code_pop_needs_has_the_number_of_5_5_0(kind: str):
    enum: type[IntEnum] = ENUMS[kind]
    wanted = CODES[f"{kind}_5x"]
    assert {name: int(enum[name]) for name in wanted} == wanted


def test_the_4_9_8_acl_names_stay_aliases_of_209_and_210():
    # 5.x reuses the numbers; an ACL 1.0 failure is still answered with the number 4.9.8 clients know
    assert ResponseCode.UPDATE_AND_CREATE_ACL_CONFIG_FAILED == ResponseCode.POLLING_FULL == 209
    assert ResponseCode.DELETE_ACL_CONFIG_FAILED == ResponseCode.POLLING_TIMEOUT == 210


def test_captured_frames_carry_codes_we_know():
    # the real clients' frames (tests/data/captures) use only request codes our enum names
    codes = {meta["header"]["code"] for name, _, meta in load_captures("alions-")}
    assert codes and codes <= {int(c) for c in RequestCode}
