"""pyrmq.store: the commit log, consume queues, index, flush, recovery and retention in RocketMQ 4.x's formats.

The broker talks to :class:`MessageStore`; consumers decode pull bodies with :func:`decode_messages`.
This package imports nothing from ``pyrmq.kernel`` or ``pyrmq.plugins``: the kernel hands it callables
(dispatchers, a flush policy, a tags-code resolver).
"""

from .config import FlushDiskType, StoreConfig
from .consume_queue import ConsumeQueueDispatcher
from .dispatch import Dispatcher, DispatchRequest, MessageFilter, TagsCodeFilter
from .errors import (
    ConfigFileError,
    CorruptRecordError,
    MessageTooLargeError,
    NotVisibleError,
    StoreError,
    StoreLockedError,
)
from .flush import AsyncFlushService, FlushPolicy, FlushTarget, GroupCommitService, default_flush_policy
from .format import (
    MessageRecord,
    StoredMessage,
    decode_message,
    decode_message_id,
    decode_messages,
    decode_properties,
    encode_message_id,
    encode_properties,
    java_string_hash,
)
from .index_file import IndexDispatcher
from .message_store import MessageStore
from .results import (
    AppendMessageResult,
    GetMessageResult,
    GetMessageStatus,
    PutMessageResult,
    PutMessageStatus,
    QueryMessageResult,
)

__all__ = [
    "AppendMessageResult", "AsyncFlushService", "ConfigFileError", "ConsumeQueueDispatcher", "CorruptRecordError",
    "DispatchRequest", "Dispatcher", "FlushDiskType", "FlushPolicy", "FlushTarget", "GetMessageResult",
    "GetMessageStatus", "GroupCommitService", "IndexDispatcher", "MessageFilter", "MessageRecord", "MessageStore",
    "MessageTooLargeError", "NotVisibleError", "PutMessageResult", "PutMessageStatus", "QueryMessageResult", "StoreConfig",
    "StoreError", "StoreLockedError", "StoredMessage", "TagsCodeFilter", "decode_message", "decode_message_id",
    "decode_messages", "decode_properties", "default_flush_policy", "encode_message_id", "encode_properties",
    "java_string_hash",
]
