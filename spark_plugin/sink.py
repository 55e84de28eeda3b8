"""Rows -> messages: the sink's task side (no pyspark here; Arrow record batches in, batched sends out).

Columns: ``body`` (binary or string, required), optional ``topic`` (else the option), ``tags``, ``keys``,
``properties`` (map<string,string>). Rows are grouped per topic and sent as SEND_BATCH_MESSAGE (spec 5.8) of at most
``batchSize`` messages / 1 MiB to the topic's writable queues in turn. Every message gets a UNIQ_KEY (spec 5.10).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from pyrmq.client import BlockingProducer, ClientConfig
from pyrmq.client.ids import UniqIdGenerator
from pyrmq.remoting.message import BatchEntry, encode_properties
from pyrmq.remoting.vocabulary import MessageProperty

from .options import WriteOptions

MAX_BATCH_BYTES = 1024 * 1024


def _column(batch: Any, name: str) -> list | None:
    idx = batch.schema.get_field_index(name)
    return None if idx < 0 else batch.column(idx).to_pylist()


def rows(batches: Iterable[Any], default_topic: str | None) -> Iterator[tuple[str, bytes, dict[str, str]]]:
    """``(topic, body, properties)`` for each row of the Arrow record batches."""
    for batch in batches:
        n = batch.num_rows
        bodies = _column(batch, "body") or []
        topics = _column(batch, "topic")
        tags = _column(batch, "tags")
        keys = _column(batch, "keys")
        props = _column(batch, "properties")
        for i in range(n):
            body = bodies[i]
            if body is None:
                raise ValueError("column 'body' is null in a row to send: every message needs a body")
            if isinstance(body, str):
                body = body.encode("utf-8")
            topic = (topics[i] if topics is not None else None) or default_topic
            if not topic:
                raise ValueError("a row has a null 'topic' and the option topic is not set")
            p: dict[str, str] = {}
            if props is not None and props[i]:
                p.update((k, v) for k, v in props[i] if v is not None)
            if tags is not None and tags[i]:
                p[MessageProperty.TAGS] = tags[i]
            if keys is not None and keys[i]:
                p[MessageProperty.KEYS] = keys[i]
            yield topic, body, p


class BatchSender:
    """Accumulates messages per topic as encoded batch entries and sends full batches through the client library's
    producer, which turns over the topic's writable queues (and sends through TBW102 when the topic has no route
    yet, spec 7.3). Entries are built straight from the columns: no per-row ``Message`` objects."""

    def __init__(self, producer: BlockingProducer, options: WriteOptions) -> None:
        self.producer = producer
        self.options = options
        self.ids = UniqIdGenerator()
        self.pending: dict[str, tuple[list[BatchEntry], list[str], list[int]]] = {}
        self.sent = 0

    def add(self, topic: str, body: bytes, properties: dict[str, str]) -> None:
        uniq = properties[MessageProperty.UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = self.ids.next()
        entry = BatchEntry(0, body, encode_properties(properties).encode("utf-8"))
        entries, keys, size = self.pending.setdefault(topic, ([], [], [0]))
        entries.append(entry)
        keys.append(uniq)
        size[0] += len(body) + len(entry.properties_bytes) + 22
        if len(entries) >= self.options.batch_size or size[0] >= MAX_BATCH_BYTES:
            self.flush(topic)

    def flush(self, topic: str) -> None:
        entries, keys, _size = self.pending.pop(topic, ([], [], [0]))
        if not entries:
            return
        self.producer.send_encoded_batch(topic, entries, keys, timeout=self.options.timeout)
        self.sent += len(entries)

    def flush_all(self) -> None:
        for topic in list(self.pending):
            self.flush(topic)


def send_batches(options: WriteOptions, batches: Iterable[Any]) -> int:
    """Send every row of ``batches``; return how many messages were sent."""
    config = ClientConfig(namesrv_addr=options.namesrv, api_timeout=options.timeout)
    with BlockingProducer(options.namesrv, options.producer_group, config=config, send_timeout=options.timeout) as producer:
        sender = BatchSender(producer, options)
        for topic, body, props in rows(batches, options.topic):
            sender.add(topic, body, props)
        sender.flush_all()
        return sender.sent
