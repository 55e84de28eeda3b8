"""Stored message records (spec 5.1) -> columns -> ``pyarrow.RecordBatch`` in the data source's schema.

The same decoder serves both read paths: pull bodies (records back to back) and records read straight from the
commit-log mmap. It appends to plain lists per column (one ``struct.unpack_from`` per record, slices for the rest)
and hands the lists to Arrow once per batch: building Arrow arrays from lists runs in C, Python tuples per row
would go through Spark's per-value converters instead.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any

from pyrmq.store.format import (
    BORNHOST_V6_FLAG,
    COMPRESSED_FLAG,
    HEADER_STRUCTS,
    MESSAGE_MAGIC_CODE,
    NAME_VALUE_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    STOREHOSTADDRESS_V6_FLAG,
    unpack_ip,
)

#: the columns, in order (Spark DDL); a Kafka-source-like schema for RocketMQ messages
SCHEMA_DDL = (
    "topic string, broker_name string, queue_id int, queue_offset bigint, msg_id string, keys string, tags string, "
    "properties map<string,string>, body binary, born_timestamp timestamp, store_timestamp timestamp, "
    "born_host string, store_host string, reconsume_times int"
)
COLUMNS = (
    "topic", "broker_name", "queue_id", "queue_offset", "msg_id", "keys", "tags", "properties", "body",
    "born_timestamp", "store_timestamp", "born_host", "store_host", "reconsume_times",
)

_I32 = struct.Struct(">i")
_MSGID_TAIL = struct.Struct(">iq")
_V4 = HEADER_STRUCTS[0]


class RecordError(RuntimeError):
    """A record that does not decode, or is not the one the queue unit promised."""


class Columns:
    """Per-column lists for one Arrow batch of messages of one queue."""

    __slots__ = (
        "topic", "broker_name", "queue_id", "queue_offset", "msg_id", "keys", "tags", "prop_offsets", "prop_keys",
        "prop_values", "body", "born_ts", "store_ts", "born_host", "store_host", "reconsume", "body_bytes", "_hosts",
    )

    def __init__(self, topic: str, broker_name: str, queue_id: int) -> None:
        self.topic = topic
        self.broker_name = broker_name
        self.queue_id = queue_id
        self.queue_offset: list[int] = []
        self.msg_id: list[str] = []
        self.keys: list[str | None] = []
        self.tags: list[str | None] = []
        self.prop_offsets: list[int] = [0]
        self.prop_keys: list[str] = []
        self.prop_values: list[str] = []
        self.body: list[bytes] = []
        self.born_ts: list[int] = []
        self.store_ts: list[int] = []
        self.born_host: list[str] = []
        self.store_host: list[str] = []
        self.reconsume: list[int] = []
        self.body_bytes = 0
        self._hosts: dict[bytes, tuple[str, str]] = {}  # raw ip+port -> ("ip:port", msg id prefix hex)

    def __len__(self) -> int:
        return len(self.queue_offset)

    def host(self, raw_ip: bytes, port: int) -> tuple[str, str]:
        key = raw_ip + port.to_bytes(4, "big", signed=True)
        known = self._hosts.get(key)
        if known is None:
            known = self._hosts[key] = (f"{unpack_ip(raw_ip)}:{port}", key.hex().upper())
        return known

    def add(self, buf: Any, pos: int, lo: int, hi: int, tags_filter: frozenset[str] | None) -> tuple[int, int]:
        """Decode the record at ``pos``; keep it when its queue offset is in [lo, hi) and its tag matches.

        Returns ``(position after the record, its queue offset)``."""
        try:
            size, magic = struct.unpack_from(">iI", buf, pos)
            if magic != MESSAGE_MAGIC_CODE or size < 91:
                raise RecordError(f"no message record at position {pos} (magic 0x{magic:08X}, size {size})")
            sys_flag = _I32.unpack_from(buf, pos + 36)[0]
            st = _V4 if not sys_flag & (BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG) else HEADER_STRUCTS[(sys_flag >> 4) & 3]
            (
                size, _magic, _crc, _qid, _flag, qoff, phys, sys_flag, born_ts, born_ip, born_port,
                store_ts, store_ip, store_port, reconsume, _prepared, body_len,
            ) = st.unpack_from(buf, pos)
        except struct.error as exc:
            raise RecordError(f"short record at position {pos}: {exc}") from None
        end = pos + size
        if qoff < lo or qoff >= hi:
            return end, qoff
        p = pos + st.size
        body = bytes(buf[p : p + body_len])
        p += body_len
        topic_len = buf[p]
        p += 1 + topic_len
        props_len = struct.unpack_from(">h", buf, p)[0]
        p += 2
        props = bytes(buf[p : p + props_len]).decode("utf-8", "replace") if props_len > 0 else ""
        if p + props_len != end:
            raise RecordError(f"record at position {pos}: total size {size} does not match its fields")
        keys = tags = None
        pk = self.prop_keys
        pv = self.prop_values
        if props:
            for item in props.split(PROPERTY_SEPARATOR):
                i = item.find(NAME_VALUE_SEPARATOR)
                if i > 0 and len(item) >= 3 and i < len(item) - 1:
                    k = item[:i]
                    v = item[i + 1 :]
                    if k == PROPERTY_TAGS:
                        tags = v
                    elif k == PROPERTY_KEYS:
                        keys = v
                    pk.append(k)
                    pv.append(v)
        if tags_filter is not None and tags not in tags_filter:
            del pk[self.prop_offsets[-1] :]
            del pv[self.prop_offsets[-1] :]
            return end, qoff
        if sys_flag & COMPRESSED_FLAG and ((sys_flag & 0x700) >> 8) in (0, 3):
            body = zlib.decompress(body)  # what a Java consumer hands its listener (spec 5.2, 5.5)
        self.prop_offsets.append(len(pk))
        self.queue_offset.append(qoff)
        born, _ = self.host(born_ip, born_port)
        store, id_prefix = self.host(store_ip, store_port)
        self.msg_id.append(id_prefix + f"{phys:016X}")  # offset message id (spec 5.9)
        self.keys.append(keys)
        self.tags.append(tags)
        self.body.append(body)
        self.body_bytes += len(body)
        self.born_ts.append(born_ts)
        self.store_ts.append(store_ts)
        self.born_host.append(born)
        self.store_host.append(store)
        self.reconsume.append(reconsume)
        return end, qoff

    def add_all(self, buf: Any, lo: int, hi: int, tags_filter: frozenset[str] | None) -> None:
        """Every record of a pull body (records back to back)."""
        pos = 0
        n = len(buf)
        add = self.add
        while pos < n:
            pos, _ = add(buf, pos, lo, hi, tags_filter)

    def to_arrow(self, arrow_schema: Any) -> Any:
        import pyarrow as pa

        n = len(self.queue_offset)
        ts_type = arrow_schema.field("born_timestamp").type
        map_type = arrow_schema.field("properties").type

        def ts(ms: list[int]) -> Any:
            return pa.array([t * 1000 for t in ms], pa.int64()).view(ts_type)

        props = pa.MapArray.from_arrays(
            pa.array(self.prop_offsets, pa.int32()),
            pa.array(self.prop_keys, pa.string()),
            pa.array(self.prop_values, pa.string()),
            type=map_type,
        )
        arrays = [
            pa.array([self.topic] * n, pa.string()) if n else pa.array([], pa.string()),
            pa.array([self.broker_name] * n, pa.string()),
            pa.array([self.queue_id] * n, pa.int32()),
            pa.array(self.queue_offset, pa.int64()),
            pa.array(self.msg_id, pa.string()),
            pa.array(self.keys, pa.string()),
            pa.array(self.tags, pa.string()),
            props,
            pa.array(self.body, pa.binary()),
            ts(self.born_ts),
            ts(self.store_ts),
            pa.array(self.born_host, pa.string()),
            pa.array(self.store_host, pa.string()),
            pa.array(self.reconsume, pa.int32()),
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)
