"""pyrmq's apache.rocketmq.v2 classes (built from plugins/grpc/schema.py's tables) against the official ones."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import official_client  # noqa: E402  (tests/plugins/grpc, imports nothing of pyrmq)

from pyrmq.plugins.grpc import schema  # noqa: E402
from pyrmq.plugins.grpc.schema import pb  # noqa: E402


def _dump_module():
    spec = importlib.util.spec_from_file_location("dump_descriptors", official_client.SCRIPTS / "dump_descriptors.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_message_enum_and_method_matches_the_official_python_client_field_by_field():
    try:
        official = official_client.run_script("dump_descriptors.py")[0]
    except official_client.ClientVenvError as exc:
        pytest.fail(f"the official client's venv could not be built, so the descriptors cannot be compared: {exc}")
    ours = _dump_module().dump([schema.POOL.FindFileByName(schema.DEFINITION_FILE),
                                schema.POOL.FindFileByName(schema.SERVICE_FILE)])
    assert sorted(ours["enums"]) == sorted(official["enums"])
    for name, enum in official["enums"].items():
        assert ours["enums"][name] == enum, name
    assert sorted(ours["messages"]) == sorted(official["messages"])
    for name, message in official["messages"].items():
        mine = ours["messages"][name]
        assert mine["oneofs"] == message["oneofs"], name
        assert mine["map_entry"] == message["map_entry"], name
        assert len(mine["fields"]) == len(message["fields"]), name
        for a, b in zip(mine["fields"], message["fields"]):
            assert a == b, f"{name}.{b['name']}"
    assert ours["services"] == {k: v for k, v in official["services"].items() if k.endswith(".MessagingService")}
    # 40-odd messages and 13 enums: a table that lost an entry fails above, a test that compared nothing fails here
    assert len(official["messages"]) > 60 and len(official["enums"]) >= 13


def test_bytes_round_trip_with_presence_and_maps():
    m = pb.Message()
    m.topic.name = "T"
    m.body = b"x"
    m.user_properties["k"] = "v"
    m.system_properties.message_group = "g"
    again = pb.Message.FromString(m.SerializeToString())
    assert again.system_properties.HasField("message_group")
    assert not again.system_properties.HasField("tag")
    assert dict(again.user_properties) == {"k": "v"}
    assert pb.Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE == 40014
    assert schema.METHOD_TABLE["/apache.rocketmq.v2.MessagingService/Telemetry"][3:] == (True, True)
