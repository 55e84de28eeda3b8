"""Print the apache.rocketmq.v2 descriptors as one JSON object, by full name (independent of file names).

Run in the official client's venv with no argument (its bundled definition/service modules), or imported by the
test, which calls :func:`dump` on pyrmq's pool. Imports nothing of pyrmq.
"""

from __future__ import annotations

import json
import sys

LABELS = {1: "optional", 2: "required", 3: "repeated"}


def _field(f) -> dict:
    oneof = f.containing_oneof
    return {
        "name": f.name, "number": f.number, "type": f.type, "label": LABELS.get(getattr(f, "label", 1), "?"),
        "type_name": (f.message_type.full_name if f.message_type else f.enum_type.full_name if f.enum_type else ""),
        "oneof": oneof.name if oneof is not None else None,
        "has_presence": bool(f.has_presence),
        "json_name": f.json_name,
    }


def _enum(e) -> dict:
    return {"values": [[v.name, v.number] for v in e.values]}


def _message(m, out: dict) -> None:
    out["messages"][m.full_name] = {
        "fields": [_field(f) for f in m.fields],
        "oneofs": [o.name for o in m.oneofs],
        "map_entry": bool(m.GetOptions().map_entry),
    }
    for nested in m.nested_types:
        _message(nested, out)
    for e in m.enum_types:
        out["enums"][e.full_name] = _enum(e)


def dump(files) -> dict:
    out: dict = {"messages": {}, "enums": {}, "services": {}}
    for fd in files:
        for m in fd.message_types_by_name.values():
            _message(m, out)
        for e in fd.enum_types_by_name.values():
            out["enums"][e.full_name] = _enum(e)
        for s in fd.services_by_name.values():
            out["services"][s.full_name] = [
                [m.name, m.input_type.full_name, m.output_type.full_name, bool(m.client_streaming), bool(m.server_streaming)]
                for m in s.methods
            ]
    return out


if __name__ == "__main__":
    from rocketmq.grpc_protocol import definition_pb2, service_pb2

    print(json.dumps(dump([definition_pb2.DESCRIPTOR, service_pb2.DESCRIPTOR]), sort_keys=True))
    sys.exit(0)
