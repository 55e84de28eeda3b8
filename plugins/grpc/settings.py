"""The gRPC endpoint's broker.conf keys: Apache RocketMQ 5.x proxy's names and defaults (``ProxyConfig``)."""

from __future__ import annotations

import attrs

from pyrmq.kernel.settings import at_least, one_of, port, setting


@attrs.frozen
class GrpcSettings:
    """Keys of ``[broker]`` (a broker.conf) read by the gRPC endpoint; RocketMQ 5.x's proxy spells them the same."""

    grpcServerPort: int = setting(8081, check=port, help="the port serving apache.rocketmq.v2.MessagingService "
                                                         "for RocketMQ 5.x clients (0 = any free port)")
    grpcMaxInboundMessageSize: int = setting(130 * 1024 * 1024, check=at_least(1024),
                                             help="largest gRPC message taken, bytes (a SendMessage of a few messages)")
    grpcTlsCertPath: str = setting("", help="PEM certificate (chain) of the gRPC port; with grpcTlsKeyPath the port "
                                             "also speaks TLS (the Java client's default); empty = plaintext only")
    grpcTlsKeyPath: str = setting("", help="PEM private key of grpcTlsCertPath")
    grpcTlsMode: str = setting("permissive", check=one_of("permissive", "enforcing", "disabled"),
                               help="with a certificate: permissive (TLS and plaintext on one port, the proxy's "
                                    "default), enforcing (TLS only) or disabled")
    grpcClientIdleTimeMills: int = setting(120_000, check=at_least(0),
                                           help="a gRPC connection without calls this long is closed (GOAWAY), ms")
    enableTopicMessageTypeCheck: bool = setting(True, runtime=True,
                                                help="a gRPC send must match its topic's message.type attribute")
    maxDelayTimeMills: int = setting(86_400_000, check=at_least(0),
                                     help="farthest delivery_timestamp a gRPC send may ask for, ms ahead")
    maxMessageGroupSize: int = setting(64, check=at_least(1), help="a message group must be shorter, bytes")
    userPropertyMaxNum: int = setting(128, check=at_least(0), help="user properties a gRPC message may carry")
    maxUserPropertySize: int = setting(16 * 1024, check=at_least(1),
                                       help="user properties + tag + keys of a gRPC message, bytes")
    maxTransactionRecoverySecond: int = setting(3600, check=at_least(0),
                                                help="longest orphaned_transaction_recovery_duration, s")
    enableMessageBodyEmptyCheck: bool = setting(True, help="refuse gRPC messages with an empty body")
    grpcClientProducerMaxAttempts: int = setting(3, check=at_least(1), help="producers' send attempts (settings answer)")
    grpcClientProducerBackoffInitialMillis: int = setting(10, check=at_least(1))
    grpcClientProducerBackoffMaxMillis: int = setting(1000, check=at_least(1))
    grpcClientProducerBackoffMultiplier: int = setting(2, check=at_least(1))
    grpcClientConsumerLongPollingBatchSize: int = setting(32, check=at_least(1),
                                                          help="consumers' receive batch size (settings answer)")
    grpcClientConsumerMaxLongPollingTimeoutMillis: int = setting(20_000, check=at_least(1),
                                                                 help="longest long polling of a ReceiveMessage, ms")
    grpcClientConsumerMinLongPollingTimeoutMillis: int = setting(5_000, check=at_least(0),
                                                                 help="shortest long polling of a ReceiveMessage, ms; a "
                                                                      "call whose deadline leaves less is refused "
                                                                      "ILLEGAL_POLLING_TIME")
    minInvisibleTimeMillsForRecv: int = setting(10_000, check=at_least(0),
                                                help="shortest invisible_duration a ReceiveMessage may ask, ms")
    maxInvisibleTimeMills: int = setting(12 * 3600 * 1000, check=at_least(1),
                                         help="longest invisible time a ReceiveMessage or ChangeInvisibleDuration may "
                                              "ask, ms")
    defaultInvisibleTimeMills: int = setting(60_000, check=at_least(1),
                                             help="invisible time of messages received with auto_renew (push "
                                                  "consumers), ms")
    enableProxyAutoRenew: bool = setting(True, help="keep push consumers' (auto_renew) messages invisible while "
                                                    "they hold them")
    renewAheadTimeMillis: int = setting(10_000, check=at_least(0),
                                        help="auto renew: renew a message this long before it would come back, ms")
    renewSchedulePeriodMillis: int = setting(5_000, check=at_least(10), help="auto renew: how often to look, ms")
    renewMaxTimeMillis: int = setting(3 * 3600 * 1000, check=at_least(0),
                                      help="auto renew: stop renewing a message held this long (it comes back after "
                                           "the group's retry delay), ms")
    invisibleTimeMillisWhenClear: int = setting(1_000, check=at_least(0),
                                                help="a push consumer gone: its held messages come back after this, ms")
