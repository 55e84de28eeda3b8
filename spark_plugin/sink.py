"""Rows -> messages: the sink's task side (no pyspark here; Arrow record batches in, batched sends out).

Columns: ``body`` (binary or string, required), optional ``topic`` (else the option), ``tags``, ``keys``,
``properties`` (map<string,string>). Rows are grouped per topic and sent as SEND_BATCH_MESSAGE (spec 5.8) of at most
``batchSize`` messages / 1 MiB to the topic's writable queues in turn. Every message gets a UNIQ_KEY (spec 5.10).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import Any

from pyrmq.remoting.headers import SendMessageRequestHeader
from pyrmq.remoting.message import (
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    BatchEntry,
    encode_batch_body,
    encode_properties,
)

from .broker_client import BrokerClient, BrokerError, MessageQueue, TopicNotFound, UniqueIds
from .options import WriteOptions

MAX_BATCH_BYTES = 1024 * 1024
DEFAULT_TOPIC = "TBW102"
DEFAULT_TOPIC_QUEUES = 4  # a Java producer's defaultTopicQueueNums: the queues an auto-created topic gets


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
                p[PROPERTY_TAGS] = tags[i]
            if keys is not None and keys[i]:
                p[PROPERTY_KEYS] = keys[i]
            yield topic, body, p


class BatchSender:
    """Accumulates messages per topic and sends full batches, round-robin over the topic's writable queues."""

    def __init__(self, client: BrokerClient, options: WriteOptions) -> None:
        self.client = client
        self.options = options
        self.ids = UniqueIds()
        self.pending: dict[str, tuple[list[BatchEntry], list[int]]] = {}
        self.queues: dict[str, list[MessageQueue]] = {}
        self.turn: dict[str, int] = {}
        self.sent = 0

    def add(self, topic: str, body: bytes, properties: dict[str, str]) -> None:
        properties[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = self.ids.next()
        entry = BatchEntry(0, body, encode_properties(properties).encode("utf-8"))
        entries, size = self.pending.setdefault(topic, ([], [0]))
        entries.append(entry)
        size[0] += len(body) + len(entry.properties_bytes) + 22
        if len(entries) >= self.options.batch_size or size[0] >= MAX_BATCH_BYTES:
            self.flush(topic)

    def _queue(self, topic: str) -> MessageQueue:
        queues = self.queues.get(topic)
        if queues is None:
            try:
                queues = list(self.client.route(topic).write_queues)
            except TopicNotFound:
                # like a Java producer: send through the default topic's route; the broker creates the topic
                queues = [mq for mq in self.client.route(DEFAULT_TOPIC).write_queues if mq.queue_id < DEFAULT_TOPIC_QUEUES]
            self.queues[topic] = queues
            if not queues:
                raise BrokerError(f"topic {topic!r} has no writable queue")
            self.turn[topic] = hash(self.ids.prefix) % len(queues)
        i = self.turn[topic] = (self.turn[topic] + 1) % len(queues)
        return queues[i]

    def flush(self, topic: str) -> None:
        entries, size = self.pending.pop(topic, ([], [0]))
        if not entries:
            return
        mq = self._queue(topic)
        header = SendMessageRequestHeader(
            producer_group=self.options.producer_group,
            topic=topic,
            default_topic=DEFAULT_TOPIC,
            default_topic_queue_nums=DEFAULT_TOPIC_QUEUES,
            queue_id=mq.queue_id,
            sys_flag=0,
            born_timestamp=int(time.time() * 1000),
            flag=0,
            properties="",
            batch=True,
        )
        self.client.send_batch(mq, header, encode_batch_body(entries))
        self.sent += len(entries)

    def flush_all(self) -> None:
        for topic in list(self.pending):
            self.flush(topic)


def send_batches(options: WriteOptions, batches: Iterable[Any]) -> int:
    """Send every row of ``batches``; return how many messages were sent."""
    with BrokerClient(options.namesrv, timeout=options.timeout) as client:
        sender = BatchSender(client, options)
        for topic, body, props in rows(batches, options.topic):
            sender.add(topic, body, props)
        sender.flush_all()
        return sender.sent
