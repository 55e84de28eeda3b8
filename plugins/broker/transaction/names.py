"""The names transactions use on the wire and in the store (RocketMQ's TransactionalMessageUtil and MessageConst).

The topic and property names are RocketMQ's wire vocabulary (remoting/vocabulary.py): clients and tools spell them
too. What this package owns is what it does with them.
"""

from __future__ import annotations

from pyrmq.remoting.vocabulary import TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC

#: where a half message waits (queue 0), re-addressed by the put interceptor
HALF_TOPIC = TRANS_HALF_TOPIC
#: op records: one per resolved half (tag ``d``, body = the half's queue offset)
OP_TOPIC = TRANS_OP_HALF_TOPIC
#: halves given up after transactionCheckMax checks (1 queue, consumable)
MAX_TIME_TOPIC = TRANS_CHECK_MAX_TIME_TOPIC
#: the consumer group whose offsets are the check service's read positions
SYS_GROUP = "CID_RMQ_SYS_TRANS"
OP_TAG = "d"

TRAN_MSG = "TRAN_MSG"
PGROUP = "PGROUP"
REAL_TOPIC = "REAL_TOPIC"
REAL_QID = "REAL_QID"
CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
CHECK_IMMUNITY = "CHECK_IMMUNITY_TIME_IN_SECONDS"
UNIQ_KEY = "UNIQ_KEY"
TAGS = "TAGS"
#: properties a committed message loses (EndTransactionProcessor#endMessageTransaction)
NOT_COMMITTED = (REAL_TOPIC, REAL_QID, TRAN_MSG)
#: the system topics' permission: read and write
PERM_RW = 6
SYSTEM_TOPICS = (HALF_TOPIC, OP_TOPIC, MAX_TIME_TOPIC)


def is_true(text: str | None) -> bool:
    """Java's Boolean.parseBoolean."""
    return text is not None and text.lower() == "true"
