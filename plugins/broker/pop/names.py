"""The names POP owns in the store and on the wire (5.5.0's ``PopAckConstants``, ``KeyBuilder``, ``MessageConst``).

The revive topic's record tags: ``ck`` (a checkpoint: the messages of one pop of one queue), ``ack`` and ``bAck``
(acks of some of them) are 5.x's, with 5.x's JSON bodies; ``ord`` (a FIFO queue's order state) and ``rof`` (a revive
queue's first live offset) are pyrmq's (docs/decisions.md, "POP's delivery state").
"""

from __future__ import annotations

from pyrmq.remoting.message import java_string_hash

REVIVE_TOPIC_PREFIX = "rmq_sys_REVIVE_LOG_"
#: the consumer group whose offsets on the revive topic show how far the live records start (5.x's revive group)
REVIVE_GROUP = "CID_RMQ_SYS_REVIVE_GROUP"
CK_TAG = "ck"
ACK_TAG = "ack"
BATCH_ACK_TAG = "bAck"
ORDER_TAG = "ord"
REVIVE_OFFSET_TAG = "rof"
#: consume-queue tags codes of the tags above (what recovery tests without reading a record)
REVIVE_OFFSET_TAGS_CODE = java_string_hash(REVIVE_OFFSET_TAG)
#: the revive topic's and a POP retry topic's permission: read and write
PERM_RW = 6
#: queues of a POP retry topic (``PopAckConstants.retryQueueNum``)
RETRY_QUEUE_NUMS = 1


def revive_topic(cluster: str) -> str:
    """``PopAckConstants.buildClusterReviveTopic``."""
    return REVIVE_TOPIC_PREFIX + cluster
