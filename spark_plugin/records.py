"""Stored message records (spec 5.1) -> columns -> ``pyarrow.RecordBatch`` in the data source's schema.

The same decoder serves both read paths: pull bodies (records back to back) and records read straight from the
commit-log mmap. Per record it does one ``struct.unpack_from`` and two slices; columns are built once per batch in
C (``zip`` over the header tuples, Arrow arrays from lists, Arrow compute for the properties map and the tag
filter). Python tuples per row would go through Spark's per-value converters instead.
"""

from __future__ import annotations

import itertools
import struct
import zlib
from typing import Any

from pyrmq.remoting.message import (
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

_V4 = HEADER_STRUCTS[0]
_V6_FLAGS = BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG


def _lenient_properties(text: str) -> list[str]:
    """``MessageDecoder.string2messageProperties`` for odd strings: keys and values alternating."""
    out: list[str] = []
    for item in text.split(PROPERTY_SEPARATOR):
        i = item.find(NAME_VALUE_SEPARATOR)
        if len(item) >= 3 and 0 < i < len(item) - 1:
            out.append(item[:i])
            out.append(item[i + 1 :])
    return out


class RecordError(RuntimeError):
    """A record that does not decode, or is not the one the queue unit promised."""


class Columns:
    """The records of one queue for one Arrow batch: header tuples, bodies and raw properties, turned into columns
    in bulk by :meth:`to_arrow` (``zip`` transposes the headers in C, Arrow compute splits the properties and
    applies the tag filter), so the per-record Python work is one ``unpack_from`` and two slices."""

    __slots__ = ("topic", "broker_name", "queue_id", "headers", "bodies", "props", "body_bytes")

    def __init__(self, topic: str, broker_name: str, queue_id: int) -> None:
        self.topic = topic
        self.broker_name = broker_name
        self.queue_id = queue_id
        self.headers: list[tuple] = []
        self.bodies: list[bytes] = []
        self.props: list[bytes] = []
        self.body_bytes = 0

    def __len__(self) -> int:
        return len(self.headers)

    @staticmethod
    def host(raw_ip: bytes, port: int) -> tuple[str, str]:
        """``("ip:port", msg id prefix)`` of a raw address (spec 5.9: address bytes + int port, upper hex)."""
        return f"{unpack_ip(raw_ip)}:{port}", (raw_ip + port.to_bytes(4, "big", signed=True)).hex().upper()

    def add(self, buf: Any, pos: int, lo: int, hi: int) -> tuple[int, int]:
        """Decode the one record at ``pos``; keep it when its queue offset is in [lo, hi).

        Returns ``(position after the record, its queue offset)``."""
        return self._decode(buf, pos, pos + 1, lo, hi)

    def add_all(self, buf: Any, lo: int, hi: int) -> None:
        """Every record of a pull body (records back to back) whose queue offset is in [lo, hi)."""
        self._decode(buf, 0, len(buf), lo, hi)

    def _decode(self, buf: Any, pos: int, stop: int, lo: int, hi: int) -> tuple[int, int]:
        unpack_v4 = _V4.unpack_from
        add_header, add_body, add_props = self.headers.append, self.bodies.append, self.props.append
        body_bytes = 0
        qoff = -1
        while pos < stop:
            try:
                h = unpack_v4(buf, pos)
                head = 88
                if h[7] & _V6_FLAGS:
                    st = HEADER_STRUCTS[(h[7] >> 4) & 3]
                    h = st.unpack_from(buf, pos)
                    head = st.size
            except struct.error as exc:
                raise RecordError(f"short record at position {pos}: {exc}") from None
            size = h[0]
            if h[1] != MESSAGE_MAGIC_CODE or size < 91:
                raise RecordError(f"no message record at position {pos} (magic 0x{h[1]:08X}, size {size})")
            end = pos + size
            qoff = h[5]
            if lo <= qoff < hi:
                body_end = pos + head + h[16]
                p = body_end + 3 + buf[body_end]
                if p > end or p + ((buf[p - 2] << 8) | buf[p - 1]) != end:
                    raise RecordError(f"record at position {pos}: total size {size} does not match its fields")
                add_header(h)
                add_body(bytes(buf[pos + head : body_end]))
                add_props(bytes(buf[p:end]))
                body_bytes += h[16]
            pos = end
        self.body_bytes += body_bytes
        return pos, qoff

    def to_arrow(self, arrow_schema: Any, tags_filter: frozenset[str] | None = None) -> Any:
        import pyarrow as pa
        import pyarrow.compute as pc

        n = len(self.headers)
        (
            _size, _magic, _crc, _qid, _flag, qoffs, physs, sys_flags, born_ts, born_ips, born_ports,
            store_ts, store_ips, store_ports, reconsume, _prepared, _body_len,
        ) = zip(*self.headers) if n else ((),) * 17
        bodies = self.bodies
        if any(f & COMPRESSED_FLAG for f in sys_flags):
            bodies = [
                zlib.decompress(b) if f & COMPRESSED_FLAG and ((f & 0x700) >> 8) in (0, 3) else b  # spec 5.2, 5.5
                for b, f in zip(bodies, sys_flags)
            ]
        store_hosts = {k: self.host(*k) for k in set(zip(store_ips, store_ports))}
        born_hosts = {k: self.host(*k)[0] for k in set(zip(born_ips, born_ports))}
        if len(store_hosts) == 1:
            (shost, prefix), = store_hosts.values()
            msg_ids = [f"{prefix}{p:016X}" for p in physs]  # offset message id (spec 5.9)
            store_col = pa.array([shost] * n, pa.string())
        else:
            pairs = [store_hosts[k] for k in zip(store_ips, store_ports)]
            msg_ids = [f"{pr}{p:016X}" for (_h, pr), p in zip(pairs, physs)]
            store_col = pa.array([h for h, _ in pairs], pa.string())
        born_col = pa.array([born_hosts[k] for k in zip(born_ips, born_ports)], pa.string())
        props = _properties(self.props, arrow_schema.field("properties").type)
        ts_type = arrow_schema.field("born_timestamp").type

        def ts(ms: Any) -> Any:
            return pc.multiply(pa.array(ms, pa.int64()), 1000).view(ts_type)

        tags = pc.map_lookup(props, pa.scalar(PROPERTY_TAGS), "last")
        arrays = [
            pa.array([self.topic] * n, pa.string()),
            pa.array([self.broker_name] * n, pa.string()),
            pa.array([self.queue_id] * n, pa.int32()),
            pa.array(qoffs, pa.int64()),
            pa.array(msg_ids, pa.string()),
            pc.map_lookup(props, pa.scalar(PROPERTY_KEYS), "last"),
            tags,
            props,
            _binary(bodies),
            ts(born_ts),
            ts(store_ts),
            born_col,
            store_col,
            pa.array(reconsume, pa.int32()),
        ]
        batch = pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)
        if tags_filter is not None:
            batch = batch.filter(pc.fill_null(pc.is_in(tags, value_set=pa.array(sorted(tags_filter), pa.string())), False))
        return batch


def _binary(values: list[bytes]) -> Any:
    """A binary array from one joined buffer (``pa.array`` on a list of 1 KiB bytes is several times slower)."""
    import pyarrow as pa

    offsets = pa.array(list(itertools.accumulate(map(len, values), initial=0)), pa.int32())
    return pa.BinaryArray.from_buffers(pa.binary(), len(values), [None, offsets.buffers()[1], pa.py_buffer(b"".join(values))])


def _properties(raw: list[bytes], map_type: Any) -> Any:
    """Properties strings (spec 5.3) -> ``map<string,string>``, split by Arrow compute; odd ones in Python."""
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        text = pa.array(raw, pa.binary()).cast(pa.string())
    except pa.ArrowInvalid:  # not UTF-8: decode with replacement like the Java client's String constructor
        text = pa.array([b.decode("utf-8", "replace") for b in raw], pa.string())
    entries = pc.split_pattern(text, PROPERTY_SEPARATOR)
    kv = pc.split_pattern(entries.flatten(), NAME_VALUE_SEPARATOR, max_splits=1)
    keys = pc.list_element(kv, 0)
    ok = pc.equal(pc.list_value_length(kv), 2)
    if len(kv) and pc.all(ok).as_py():
        values = pc.list_element(kv, 1)
        if not pc.any(pc.equal(keys, "")).as_py() and not pc.any(pc.equal(values, "")).as_py():
            return pa.MapArray.from_arrays(entries.offsets, keys, values, type=map_type)
    # an empty properties string, or segments without a name or value: MessageDecoder.string2messageProperties
    offsets, ks, vs = [0], [], []
    for s in text.to_pylist():
        pairs = _lenient_properties(s)
        ks.extend(pairs[0::2])
        vs.extend(pairs[1::2])
        offsets.append(len(ks))
    return pa.MapArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(ks, pa.string()), pa.array(vs, pa.string()), type=map_type)
