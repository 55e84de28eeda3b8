"""POP's broker.conf keys: RocketMQ 5.5.0's ``BrokerConfig`` names and defaults (``pyrmq plugins --settings``)."""

from __future__ import annotations

import attrs

from pyrmq.kernel.settings import at_least, between, one_of, setting


@attrs.frozen
class PopSettings:
    """The POP plugin's broker.conf keys (RocketMQ 5.5.0's names and defaults)."""

    reviveQueueNum: int = setting(
        8, check=between(1, 512), help="queues of the revive topic rmq_sys_REVIVE_LOG_<cluster>, where checkpoints and "
                                      "acks are kept")
    popPollingSize: int = setting(
        1024, check=at_least(1), help="POP requests parked per topic@group@queueId (POLLING_FULL beyond)")
    maxPopPollingSize: int = setting(100_000, check=at_least(1), help="POP requests parked in all (POLLING_FULL beyond)")
    popFromRetryProbability: int = setting(
        20, check=between(0, 100), help="percent of POP requests that read the group's retry topic first")
    enableRetryTopicV2: bool = setting(
        False, help="name POP retry topics %RETRY%<group>+<topic> (false: %RETRY%<group>_<topic>)")
    retrieveMessageFromPopRetryTopicV1: bool = setting(
        True, help="with enableRetryTopicV2, still read the v1 retry topics (messages revived before the switch)")
    popResponseReturnActualRetryTopic: bool = setting(
        False, help="hand out revived messages under their retry topic, as stored (false: under the topic popped, "
                    "with POP_CK)")
    initPopOffsetByCheckMsgInMem: bool = setting(
        True, help="a group popping a queue first with initMode MAX starts at offset 0 when the queue's first message "
                   "is still in memory")
    enablePopMessageThreshold: bool = setting(
        False, help="stop popping a queue while more than popInflightMessageThreshold messages of it are in flight")
    popInflightMessageThreshold: int = setting(
        10_000, check=at_least(1), help="in-flight messages per topic@group@queueId that stop popping, when enabled")
    enableNotifyAfterPopOrderLockRelease: bool = setting(
        True, help="wake parked FIFO pops when a queue's batch becomes visible again")
    defaultMessageRequestMode: str = setting(
        "PULL", check=one_of("PULL", "POP"),
        help="how a group consumes a topic whose request mode was never set (SET_MESSAGE_REQUEST_MODE, mqadmin "
             "setConsumeMode): what QUERY_ASSIGNMENT tells a push consumer without client rebalance")
    defaultPopShareQueueNum: int = setting(
        -1, help="popShareQueueNum of the default POP request mode (<= 0: every consumer pops every queue)")
    serverLoadBalancerEnable: bool = setting(
        True, help="QUERY_ASSIGNMENT splits a topic's queues among the group's consumers (false: all to each)")
