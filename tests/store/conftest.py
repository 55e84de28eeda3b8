from __future__ import annotations

import pytest

from pyrmq.store import MessageRecord, MessageStore, StoreConfig

SEGMENT = 64 * 1024


def small_config(root, **overrides) -> StoreConfig:
    values = dict(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=SEGMENT,
        mapped_file_size_consume_queue=20 * 64,
        max_hash_slot_num=64,
        max_index_num=256,
        warm_mapped_file_enable=False,
    )
    values.update(overrides)
    return StoreConfig(**values)


def record(topic="TopicTest", queue_id=0, body=b"hello", **props) -> MessageRecord:
    return MessageRecord(topic, queue_id, body, properties=props, born_timestamp=1700000000000,
                         born_host=("10.0.0.7", 50123), store_host=("127.0.0.1", 10911))


@pytest.fixture
def config(tmp_path):
    return small_config(tmp_path / "store")


@pytest.fixture
def store(config):
    s = MessageStore(config)
    s.load()
    yield s
    s.close()


def read_all(store, topic, queue_id, start=0):
    """Every record of a queue from ``start``, decoded, following nextBeginOffset."""
    from pyrmq.store import GetMessageStatus, decode_messages

    out = []
    offset = start
    while True:
        r = store.get_message("g", topic, queue_id, offset, 32)
        if r.status is not GetMessageStatus.FOUND:
            return out
        out.extend(decode_messages(r.body()))
        offset = r.next_begin_offset
