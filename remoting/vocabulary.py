"""The wire vocabulary every role shares: flag bits, permission bits, property names and well-known topic names.

One definition each, imported by the client, the broker and name-server plugins, the store and the Spark plugin
(spec 3.3, 4.1, 5.3, 5.4, 7.3). The flag sets are ``IntFlag`` so they print by name; they compare and combine with
plain ints, and what goes on the wire is always their int value.
"""

from __future__ import annotations

import enum

__all__ = [
    "PullSysFlag",
    "Permission",
    "MessageSysFlag",
    "MessageProperty",
    "SYSTEM_PROPERTIES",
    "MASTER_ID",
    "AUTO_CREATE_TOPIC_KEY",
    "SCHEDULE_TOPIC",
    "RETRY_GROUP_TOPIC_PREFIX",
    "DLQ_GROUP_TOPIC_PREFIX",
    "TRANS_HALF_TOPIC",
    "TRANS_OP_HALF_TOPIC",
    "TRANS_CHECK_MAX_TIME_TOPIC",
    "TRACE_TOPIC",
    "SELF_TEST_TOPIC",
    "OFFSET_MOVED_EVENT_TOPIC",
    "BENCHMARK_TOPIC",
    "SYSTEM_TOPIC_PREFIX",
    "REPLY_TOPIC_SUFFIX",
]


class PullSysFlag(enum.IntFlag):
    """``PullSysFlag``: the ``sysFlag`` of a PULL_MESSAGE request header (spec 3.3)."""

    COMMIT_OFFSET = 0x1  # the request carries the consumer's offset to commit
    SUSPEND = 0x2  # park the request (long polling) when nothing is there yet
    SUBSCRIPTION = 0x4  # the request carries its subscription expression
    CLASS_FILTER = 0x8
    LITE_PULL = 0x10  # 4.9.x lite pull consumers


#: the PULL_MESSAGE header field (a pyrmq extension) of a pull that may take more than RocketMQ's per-pull transfer
#: caps: a pyrmq broker caps it by largePullMaxCount / largePullMaxBytes instead (docs/decisions.md); other brokers
#: ignore it
LARGE_PULL_FIELD = "largePull"


class Permission(enum.IntFlag):
    """``PermName``: the ``perm`` of a topic or a broker (spec 4.1); 6 = read and write."""

    INHERIT = 0x1  # a template topic (TBW102) whose configuration auto-created topics inherit
    WRITE = 0x2
    READ = 0x4
    PRIORITY = 0x8


class MessageSysFlag(enum.IntFlag):
    """``MessageSysFlag`` bits of a stored message record (spec 5.4).

    The transaction type is the two-bit value ``flag & TRANSACTION_TYPE_MASK`` (NOT_TYPE 0x0, PREPARED 0x4,
    COMMIT 0x8, ROLLBACK 0xC), the compression type ``(flag & COMPRESSION_TYPE_MASK) >> 8`` (0 or 3 zlib, 1 LZ4,
    2 ZSTD). Hot paths use the plain-int aliases of :mod:`pyrmq.remoting.message`.
    """

    COMPRESSED = 0x1
    MULTI_TAGS = 0x2
    TRANSACTION_PREPARED_TYPE = 0x4
    TRANSACTION_COMMIT_TYPE = 0x8
    TRANSACTION_ROLLBACK_TYPE = 0xC
    BORNHOST_V6 = 0x10
    STOREHOSTADDRESS_V6 = 0x20
    NEED_UNWRAP = 0x40
    INNER_BATCH = 0x80
    COMPRESSION_TYPE_MASK = 0x700

    TRANSACTION_NOT_TYPE = 0x0
    TRANSACTION_TYPE_MASK = 0xC


class MessageProperty:
    """Property names of ``MessageConst`` (spec 5.3), e.g. ``MessageProperty.DELAY == "DELAY"``."""

    KEYS = "KEYS"
    TAGS = "TAGS"
    WAIT_STORE_MSG_OK = "WAIT"
    DELAY_TIME_LEVEL = "DELAY"
    RETRY_TOPIC = "RETRY_TOPIC"
    REAL_TOPIC = "REAL_TOPIC"
    REAL_QUEUE_ID = "REAL_QID"
    TRANSACTION_PREPARED = "TRAN_MSG"
    PRODUCER_GROUP = "PGROUP"
    MIN_OFFSET = "MIN_OFFSET"
    MAX_OFFSET = "MAX_OFFSET"
    ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
    RECONSUME_TIME = "RECONSUME_TIME"
    MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
    UNIQ_CLIENT_MESSAGE_ID_KEYIDX = "UNIQ_KEY"
    CONSUME_START_TIMESTAMP = "CONSUME_START_TIME"
    TRANSACTION_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
    TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
    CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
    MSG_REGION = "MSG_REGION"
    TRACE_SWITCH = "TRACE_ON"
    CLUSTER = "CLUSTER"
    INSTANCE_ID = "INSTANCE_ID"
    CORRELATION_ID = "CORRELATION_ID"
    MESSAGE_REPLY_TO_CLIENT = "REPLY_TO_CLIENT"
    MESSAGE_TTL = "TTL"
    REPLY_MESSAGE_ARRIVE_TIME = "ARRIVE_TIME"
    PUSH_REPLY_TIME = "PUSH_REPLY_TIME"
    MESSAGE_TYPE = "MSG_TYPE"
    BUYER_ID = "BUYER_ID"
    # arbitrary delivery times on the timing wheel (5.x names; pyrmq accepts them on a 4.x wire, docs/delay.md)
    TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
    TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
    # pyrmq's marks on a delivered delayed or timed copy: the commit-log offset of the record it was parked as, so a
    # replica follows its master's deliveries from the replicated store (docs/delay.md)
    DELAY_PARKED_OFFSET = "DELAY_PARKED_OFFSET"
    TIMER_PARKED_OFFSET = "TIMER_PARKED_OFFSET"
    # 5.x: a FIFO message's message group (``MessageConst.PROPERTY_SHARDING_KEY``)
    SHARDING_KEY = "__SHARDINGKEY"


P = MessageProperty

#: names a user may not set as their own properties (Java's ``MessageConst.STRING_HASH_SET``, the ones that matter)
SYSTEM_PROPERTIES = frozenset({
    P.KEYS, P.TAGS, P.WAIT_STORE_MSG_OK, P.DELAY_TIME_LEVEL, P.RETRY_TOPIC, P.REAL_TOPIC, P.REAL_QUEUE_ID,
    P.UNIQ_CLIENT_MESSAGE_ID_KEYIDX, P.MIN_OFFSET, P.MAX_OFFSET, P.ORIGIN_MESSAGE_ID, P.RECONSUME_TIME,
    P.MAX_RECONSUME_TIMES, P.CONSUME_START_TIMESTAMP, P.TRANSACTION_PREPARED, P.PRODUCER_GROUP, P.CLUSTER,
    P.TRANSACTION_PREPARED_QUEUE_OFFSET, P.TRANSACTION_CHECK_TIMES, P.CHECK_IMMUNITY_TIME_IN_SECONDS, P.MSG_REGION,
    P.TRACE_SWITCH, P.INSTANCE_ID, P.CORRELATION_ID, P.MESSAGE_REPLY_TO_CLIENT, P.MESSAGE_TTL,
    P.REPLY_MESSAGE_ARRIVE_TIME, P.PUSH_REPLY_TIME, P.MESSAGE_TYPE, P.BUYER_ID, P.DELAY_PARKED_OFFSET,
    P.TIMER_PARKED_OFFSET,
})
del P

#: broker id of a master in a route's ``brokerAddrs`` (``MixAll.MASTER_ID``)
MASTER_ID = 0

# Well-known topic names (``TopicValidator``, ``MixAll``; spec 7.3, 7.6). Features own what they do with them (the
# transaction plugin its half and op topics), but the names are RocketMQ's wire vocabulary: clients and tools spell
# them too, so they are defined once, here.
AUTO_CREATE_TOPIC_KEY = "TBW102"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
OFFSET_MOVED_EVENT_TOPIC = "OFFSET_MOVED_EVENT"
BENCHMARK_TOPIC = "BenchmarkTest"
#: RocketMQ's prefix of the broker's own topics (``TopicValidator.SYSTEM_TOPIC_PREFIX``: rmq_sys_wheel_timer, ...)
SYSTEM_TOPIC_PREFIX = "rmq_sys_"
#: the suffix of a cluster's request-reply topic, ``<cluster>_REPLY_TOPIC`` (``MixAll.REPLY_TOPIC_POSTFIX``)
REPLY_TOPIC_SUFFIX = "_REPLY_TOPIC"
