"""The message classes of ``apache.rocketmq.v2`` (rocketmq-apis v2.1.2), built at import time from a table.

No generated code and no protoc: the tables below say each message's fields (name, number, type, label) and each
enum's values; :func:`build_pool` turns them into ``FileDescriptorProto`` objects in a private
``DescriptorPool`` and ``message_factory`` makes the classes. Runtime needs only the ``protobuf`` package.
tests/plugins/grpc/test_schema.py compares every descriptor, field by field, with the ones the official
``rocketmq-python-client`` wheel ships.

Field spec: ``(name, number, type)`` plus optional flags:

- type: a scalar (``string``, ``bytes``, ``int32``, ``int64``, ``bool``, ``float``), ``Duration`` / ``Timestamp``
  (the google.protobuf well-known types), ``map`` (``map<string, string>``), or a name of this package (a message or
  an enum, told apart by the tables);
- ``"repeated"``; ``"optional"`` (proto3 ``optional``: has presence, a synthetic oneof); ``"oneof:<name>"``.

Usage: ``from pyrmq.plugins.grpc.schema import pb``; ``pb.SendMessageRequest()``, ``pb.Code.OK``.
"""

from __future__ import annotations

import enum
import types
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, duration_pb2, message_factory, timestamp_pb2

PACKAGE = "apache.rocketmq.v2"
DEFINITION_FILE = "pyrmq/grpc/definition.proto"
SERVICE_FILE = "pyrmq/grpc/service.proto"
SERVICE = "MessagingService"

Field = tuple[Any, ...]

# -- definition.proto ----------------------------------------------------------------------------------------

DEFINITION_ENUMS: dict[str, list[tuple[str, int]]] = {
    "TransactionResolution": [("TRANSACTION_RESOLUTION_UNSPECIFIED", 0), ("COMMIT", 1), ("ROLLBACK", 2)],
    "TransactionSource": [("SOURCE_UNSPECIFIED", 0), ("SOURCE_CLIENT", 1), ("SOURCE_SERVER_CHECK", 2)],
    "Permission": [("PERMISSION_UNSPECIFIED", 0), ("NONE", 1), ("READ", 2), ("WRITE", 3), ("READ_WRITE", 4)],
    "FilterType": [("FILTER_TYPE_UNSPECIFIED", 0), ("TAG", 1), ("SQL", 2)],
    "AddressScheme": [("ADDRESS_SCHEME_UNSPECIFIED", 0), ("IPv4", 1), ("IPv6", 2), ("DOMAIN_NAME", 3)],
    "MessageType": [("MESSAGE_TYPE_UNSPECIFIED", 0), ("NORMAL", 1), ("FIFO", 2), ("DELAY", 3), ("TRANSACTION", 4),
                    ("LITE", 5), ("PRIORITY", 6)],
    "DigestType": [("DIGEST_TYPE_UNSPECIFIED", 0), ("CRC32", 1), ("MD5", 2), ("SHA1", 3)],
    "ClientType": [("CLIENT_TYPE_UNSPECIFIED", 0), ("PRODUCER", 1), ("PUSH_CONSUMER", 2), ("SIMPLE_CONSUMER", 3),
                   ("PULL_CONSUMER", 4), ("LITE_PUSH_CONSUMER", 5), ("LITE_SIMPLE_CONSUMER", 6)],
    "Encoding": [("ENCODING_UNSPECIFIED", 0), ("IDENTITY", 1), ("GZIP", 2)],
    "Code": [
        ("CODE_UNSPECIFIED", 0), ("OK", 20000), ("MULTIPLE_RESULTS", 30000), ("BAD_REQUEST", 40000),
        ("ILLEGAL_ACCESS_POINT", 40001), ("ILLEGAL_TOPIC", 40002), ("ILLEGAL_CONSUMER_GROUP", 40003),
        ("ILLEGAL_MESSAGE_TAG", 40004), ("ILLEGAL_MESSAGE_KEY", 40005), ("ILLEGAL_MESSAGE_GROUP", 40006),
        ("ILLEGAL_MESSAGE_PROPERTY_KEY", 40007), ("INVALID_TRANSACTION_ID", 40008), ("ILLEGAL_MESSAGE_ID", 40009),
        ("ILLEGAL_FILTER_EXPRESSION", 40010), ("ILLEGAL_INVISIBLE_TIME", 40011), ("ILLEGAL_DELIVERY_TIME", 40012),
        ("INVALID_RECEIPT_HANDLE", 40013), ("MESSAGE_PROPERTY_CONFLICT_WITH_TYPE", 40014),
        ("UNRECOGNIZED_CLIENT_TYPE", 40015), ("MESSAGE_CORRUPTED", 40016), ("CLIENT_ID_REQUIRED", 40017),
        ("ILLEGAL_POLLING_TIME", 40018), ("ILLEGAL_OFFSET", 40019), ("ILLEGAL_LITE_TOPIC", 40020),
        ("UNAUTHORIZED", 40100), ("PAYMENT_REQUIRED", 40200), ("FORBIDDEN", 40300), ("NOT_FOUND", 40400),
        ("MESSAGE_NOT_FOUND", 40401), ("TOPIC_NOT_FOUND", 40402), ("CONSUMER_GROUP_NOT_FOUND", 40403),
        ("OFFSET_NOT_FOUND", 40404), ("REQUEST_TIMEOUT", 40800), ("PAYLOAD_TOO_LARGE", 41300),
        ("MESSAGE_BODY_TOO_LARGE", 41301), ("MESSAGE_BODY_EMPTY", 41302), ("PRECONDITION_FAILED", 42800),
        ("TOO_MANY_REQUESTS", 42900), ("LITE_TOPIC_QUOTA_EXCEEDED", 42901), ("LITE_SUBSCRIPTION_QUOTA_EXCEEDED", 42902),
        ("REQUEST_HEADER_FIELDS_TOO_LARGE", 43100), ("MESSAGE_PROPERTIES_TOO_LARGE", 43101),
        ("INTERNAL_ERROR", 50000), ("INTERNAL_SERVER_ERROR", 50001), ("HA_NOT_AVAILABLE", 50002),
        ("NOT_IMPLEMENTED", 50100), ("PROXY_TIMEOUT", 50400), ("MASTER_PERSISTENCE_TIMEOUT", 50401),
        ("SLAVE_PERSISTENCE_TIMEOUT", 50402), ("UNSUPPORTED", 50500), ("VERSION_UNSUPPORTED", 50501),
        ("VERIFY_FIFO_MESSAGE_UNSUPPORTED", 50502), ("FAILED_TO_CONSUME_MESSAGE", 60000),
    ],
    "Language": [("LANGUAGE_UNSPECIFIED", 0), ("JAVA", 1), ("CPP", 2), ("DOT_NET", 3), ("GOLANG", 4), ("RUST", 5),
                 ("PYTHON", 6), ("PHP", 7), ("NODE_JS", 8), ("RUBY", 9), ("OBJECTIVE_C", 10), ("DART", 11),
                 ("KOTLIN", 12)],
    "LiteSubscriptionAction": [("PARTIAL_ADD", 0), ("PARTIAL_REMOVE", 1), ("COMPLETE_ADD", 2), ("COMPLETE_REMOVE", 3)],
    "QueryOffsetPolicy": [("BEGINNING", 0), ("END", 1), ("TIMESTAMP", 2)],
}

#: enums declared inside a message: {message: {enum: values}}
NESTED_ENUMS: dict[str, dict[str, list[tuple[str, int]]]] = {
    "OffsetOption": {"Policy": [("LAST", 0), ("MIN", 1), ("MAX", 2)]},
}

DEFINITION_MESSAGES: dict[str, list[Field]] = {
    "FilterExpression": [("type", 1, "FilterType"), ("expression", 2, "string")],
    "RetryPolicy": [("max_attempts", 1, "int32"), ("exponential_backoff", 2, "ExponentialBackoff", "oneof:strategy"),
                    ("customized_backoff", 3, "CustomizedBackoff", "oneof:strategy")],
    "ExponentialBackoff": [("initial", 1, "Duration"), ("max", 2, "Duration"), ("multiplier", 3, "float")],
    "CustomizedBackoff": [("next", 1, "Duration", "repeated")],
    "Resource": [("resource_namespace", 1, "string"), ("name", 2, "string")],
    "SubscriptionEntry": [("topic", 1, "Resource"), ("expression", 2, "FilterExpression")],
    "Address": [("host", 1, "string"), ("port", 2, "int32")],
    "Endpoints": [("scheme", 1, "AddressScheme"), ("addresses", 2, "Address", "repeated")],
    "Broker": [("name", 1, "string"), ("id", 2, "int32"), ("endpoints", 3, "Endpoints")],
    "MessageQueue": [("topic", 1, "Resource"), ("id", 2, "int32"), ("permission", 3, "Permission"),
                     ("broker", 4, "Broker"), ("accept_message_types", 5, "MessageType", "repeated")],
    "Digest": [("type", 1, "DigestType"), ("checksum", 2, "string")],
    "SystemProperties": [
        ("tag", 1, "string", "optional"), ("keys", 2, "string", "repeated"), ("message_id", 3, "string"),
        ("body_digest", 4, "Digest"), ("body_encoding", 5, "Encoding"), ("message_type", 6, "MessageType"),
        ("born_timestamp", 7, "Timestamp"), ("born_host", 8, "string"),
        ("store_timestamp", 9, "Timestamp", "optional"), ("store_host", 10, "string"),
        ("delivery_timestamp", 11, "Timestamp", "optional"), ("receipt_handle", 12, "string", "optional"),
        ("queue_id", 13, "int32"), ("queue_offset", 14, "int64", "optional"),
        ("invisible_duration", 15, "Duration", "optional"), ("delivery_attempt", 16, "int32", "optional"),
        ("message_group", 17, "string", "optional"), ("trace_context", 18, "string", "optional"),
        ("orphaned_transaction_recovery_duration", 19, "Duration", "optional"),
        ("dead_letter_queue", 20, "DeadLetterQueue", "optional"), ("lite_topic", 21, "string", "optional"),
        ("priority", 22, "int32", "optional"),
    ],
    "DeadLetterQueue": [("topic", 1, "string"), ("message_id", 2, "string")],
    "Message": [("topic", 1, "Resource"), ("user_properties", 2, "map"), ("system_properties", 3, "SystemProperties"),
                ("body", 4, "bytes")],
    "Assignment": [("message_queue", 1, "MessageQueue")],
    "Status": [("code", 1, "Code"), ("message", 2, "string")],
    "UA": [("language", 1, "Language"), ("version", 2, "string"), ("platform", 3, "string"), ("hostname", 4, "string")],
    "Settings": [
        ("client_type", 1, "ClientType", "optional"), ("access_point", 2, "Endpoints", "optional"),
        ("backoff_policy", 3, "RetryPolicy", "optional"), ("request_timeout", 4, "Duration", "optional"),
        ("publishing", 5, "Publishing", "oneof:pub_sub"), ("subscription", 6, "Subscription", "oneof:pub_sub"),
        ("user_agent", 7, "UA"), ("metric", 8, "Metric"),
    ],
    "Publishing": [("topics", 1, "Resource", "repeated"), ("max_body_size", 2, "int32"),
                   ("validate_message_type", 3, "bool")],
    "Subscription": [
        ("group", 1, "Resource", "optional"), ("subscriptions", 2, "SubscriptionEntry", "repeated"),
        ("fifo", 3, "bool", "optional"), ("receive_batch_size", 4, "int32", "optional"),
        ("long_polling_timeout", 5, "Duration", "optional"), ("lite_subscription_quota", 6, "int32", "optional"),
        ("max_lite_topic_size", 7, "int32", "optional"),
    ],
    "Metric": [("on", 1, "bool"), ("endpoints", 2, "Endpoints", "optional")],
    "OffsetOption": [("policy", 1, "OffsetOption.Policy", "oneof:offset_type"), ("offset", 2, "int64", "oneof:offset_type"),
                     ("tail_n", 3, "int64", "oneof:offset_type"), ("timestamp", 4, "int64", "oneof:offset_type")],
}

# -- service.proto ---------------------------------------------------------------------------------------------

_STATUS_ONLY: list[Field] = [("status", 1, "Status")]

SERVICE_MESSAGES: dict[str, list[Field]] = {
    "QueryRouteRequest": [("topic", 1, "Resource"), ("endpoints", 2, "Endpoints")],
    "QueryRouteResponse": [("status", 1, "Status"), ("message_queues", 2, "MessageQueue", "repeated")],
    "SendMessageRequest": [("messages", 1, "Message", "repeated")],
    "SendResultEntry": [("status", 1, "Status"), ("message_id", 2, "string"), ("transaction_id", 3, "string"),
                        ("offset", 4, "int64"), ("recall_handle", 5, "string")],
    "SendMessageResponse": [("status", 1, "Status"), ("entries", 2, "SendResultEntry", "repeated")],
    "QueryAssignmentRequest": [("topic", 1, "Resource"), ("group", 2, "Resource"), ("endpoints", 3, "Endpoints")],
    "QueryAssignmentResponse": [("status", 1, "Status"), ("assignments", 2, "Assignment", "repeated")],
    "ReceiveMessageRequest": [
        ("group", 1, "Resource"), ("message_queue", 2, "MessageQueue"), ("filter_expression", 3, "FilterExpression"),
        ("batch_size", 4, "int32"), ("invisible_duration", 5, "Duration", "optional"), ("auto_renew", 6, "bool"),
        ("long_polling_timeout", 7, "Duration", "optional"), ("attempt_id", 8, "string", "optional"),
    ],
    "ReceiveMessageResponse": [("status", 1, "Status", "oneof:content"), ("message", 2, "Message", "oneof:content"),
                               ("delivery_timestamp", 3, "Timestamp", "oneof:content")],
    "AckMessageEntry": [("message_id", 1, "string"), ("receipt_handle", 2, "string"),
                        ("lite_topic", 3, "string", "optional")],
    "AckMessageRequest": [("group", 1, "Resource"), ("topic", 2, "Resource"), ("entries", 3, "AckMessageEntry", "repeated")],
    "AckMessageResultEntry": [("message_id", 1, "string"), ("receipt_handle", 2, "string"), ("status", 3, "Status")],
    "AckMessageResponse": [("status", 1, "Status"), ("entries", 2, "AckMessageResultEntry", "repeated")],
    "ForwardMessageToDeadLetterQueueRequest": [
        ("group", 1, "Resource"), ("topic", 2, "Resource"), ("receipt_handle", 3, "string"), ("message_id", 4, "string"),
        ("delivery_attempt", 5, "int32"), ("max_delivery_attempts", 6, "int32"), ("lite_topic", 7, "string", "optional"),
    ],
    "ForwardMessageToDeadLetterQueueResponse": _STATUS_ONLY,
    "HeartbeatRequest": [("group", 1, "Resource", "optional"), ("client_type", 2, "ClientType")],
    "HeartbeatResponse": _STATUS_ONLY,
    "EndTransactionRequest": [
        ("topic", 1, "Resource"), ("message_id", 2, "string"), ("transaction_id", 3, "string"),
        ("resolution", 4, "TransactionResolution"), ("source", 5, "TransactionSource"), ("trace_context", 6, "string"),
    ],
    "EndTransactionResponse": _STATUS_ONLY,
    "PrintThreadStackTraceCommand": [("nonce", 1, "string")],
    "ReconnectEndpointsCommand": [("nonce", 1, "string")],
    "ThreadStackTrace": [("nonce", 1, "string"), ("thread_stack_trace", 2, "string", "optional")],
    "VerifyMessageCommand": [("nonce", 1, "string"), ("message", 2, "Message")],
    "VerifyMessageResult": [("nonce", 1, "string")],
    "RecoverOrphanedTransactionCommand": [("message", 1, "Message"), ("transaction_id", 2, "string")],
    "NotifyUnsubscribeLiteCommand": [("lite_topic", 1, "string")],
    "TelemetryCommand": [
        ("status", 1, "Status", "optional"),
        ("settings", 2, "Settings", "oneof:command"),
        ("thread_stack_trace", 3, "ThreadStackTrace", "oneof:command"),
        ("verify_message_result", 4, "VerifyMessageResult", "oneof:command"),
        ("recover_orphaned_transaction_command", 5, "RecoverOrphanedTransactionCommand", "oneof:command"),
        ("print_thread_stack_trace_command", 6, "PrintThreadStackTraceCommand", "oneof:command"),
        ("verify_message_command", 7, "VerifyMessageCommand", "oneof:command"),
        ("reconnect_endpoints_command", 8, "ReconnectEndpointsCommand", "oneof:command"),
        ("notify_unsubscribe_lite_command", 9, "NotifyUnsubscribeLiteCommand", "oneof:command"),
    ],
    "NotifyClientTerminationRequest": [("group", 1, "Resource", "optional")],
    "NotifyClientTerminationResponse": _STATUS_ONLY,
    "ChangeInvisibleDurationRequest": [
        ("group", 1, "Resource"), ("topic", 2, "Resource"), ("receipt_handle", 3, "string"),
        ("invisible_duration", 4, "Duration"), ("message_id", 5, "string"), ("lite_topic", 6, "string", "optional"),
        ("suspend", 7, "bool", "optional"),
    ],
    "ChangeInvisibleDurationResponse": [("status", 1, "Status"), ("receipt_handle", 2, "string")],
    "PullMessageRequest": [
        ("group", 1, "Resource"), ("message_queue", 2, "MessageQueue"), ("offset", 3, "int64"), ("batch_size", 4, "int32"),
        ("filter_expression", 5, "FilterExpression"), ("long_polling_timeout", 6, "Duration"),
    ],
    "PullMessageResponse": [("status", 1, "Status", "oneof:content"), ("message", 2, "Message", "oneof:content"),
                            ("next_offset", 3, "int64", "oneof:content")],
    "UpdateOffsetRequest": [("group", 1, "Resource"), ("message_queue", 2, "MessageQueue"), ("offset", 3, "int64")],
    "UpdateOffsetResponse": _STATUS_ONLY,
    "GetOffsetRequest": [("group", 1, "Resource"), ("message_queue", 2, "MessageQueue")],
    "GetOffsetResponse": [("status", 1, "Status"), ("offset", 2, "int64")],
    "QueryOffsetRequest": [("message_queue", 1, "MessageQueue"), ("query_offset_policy", 2, "QueryOffsetPolicy"),
                           ("timestamp", 3, "Timestamp", "optional")],
    "QueryOffsetResponse": [("status", 1, "Status"), ("offset", 2, "int64")],
    "RecallMessageRequest": [("topic", 1, "Resource"), ("recall_handle", 2, "string")],
    "RecallMessageResponse": [("status", 1, "Status"), ("message_id", 2, "string")],
    "SyncLiteSubscriptionRequest": [
        ("action", 1, "LiteSubscriptionAction"), ("topic", 2, "Resource"), ("group", 3, "Resource"),
        ("lite_topic_set", 4, "string", "repeated"), ("version", 5, "int64", "optional"),
        ("offset_option", 6, "OffsetOption", "optional"),
    ],
    "SyncLiteSubscriptionResponse": _STATUS_ONLY,
}

#: (rpc name, request, response, client streaming, server streaming), in the service's order
METHODS: list[tuple[str, str, str, bool, bool]] = [
    ("QueryRoute", "QueryRouteRequest", "QueryRouteResponse", False, False),
    ("Heartbeat", "HeartbeatRequest", "HeartbeatResponse", False, False),
    ("SendMessage", "SendMessageRequest", "SendMessageResponse", False, False),
    ("QueryAssignment", "QueryAssignmentRequest", "QueryAssignmentResponse", False, False),
    ("ReceiveMessage", "ReceiveMessageRequest", "ReceiveMessageResponse", False, True),
    ("AckMessage", "AckMessageRequest", "AckMessageResponse", False, False),
    ("ForwardMessageToDeadLetterQueue", "ForwardMessageToDeadLetterQueueRequest",
     "ForwardMessageToDeadLetterQueueResponse", False, False),
    ("PullMessage", "PullMessageRequest", "PullMessageResponse", False, True),
    ("UpdateOffset", "UpdateOffsetRequest", "UpdateOffsetResponse", False, False),
    ("GetOffset", "GetOffsetRequest", "GetOffsetResponse", False, False),
    ("QueryOffset", "QueryOffsetRequest", "QueryOffsetResponse", False, False),
    ("EndTransaction", "EndTransactionRequest", "EndTransactionResponse", False, False),
    ("Telemetry", "TelemetryCommand", "TelemetryCommand", True, True),
    ("NotifyClientTermination", "NotifyClientTerminationRequest", "NotifyClientTerminationResponse", False, False),
    ("ChangeInvisibleDuration", "ChangeInvisibleDurationRequest", "ChangeInvisibleDurationResponse", False, False),
    ("RecallMessage", "RecallMessageRequest", "RecallMessageResponse", False, False),
    ("SyncLiteSubscription", "SyncLiteSubscriptionRequest", "SyncLiteSubscriptionResponse", False, False),
]

# -- building ----------------------------------------------------------------------------------------------------

_F = descriptor_pb2.FieldDescriptorProto
_SCALARS = {
    "string": _F.TYPE_STRING, "bytes": _F.TYPE_BYTES, "int32": _F.TYPE_INT32, "int64": _F.TYPE_INT64,
    "bool": _F.TYPE_BOOL, "float": _F.TYPE_FLOAT,
}
_WELL_KNOWN = {"Duration": ".google.protobuf.Duration", "Timestamp": ".google.protobuf.Timestamp"}
_ALL_ENUMS = set(DEFINITION_ENUMS) | {f"{m}.{e}" for m, nested in NESTED_ENUMS.items() for e in nested}


def _camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


def _json_name(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _message(name: str, fields: list[Field]) -> descriptor_pb2.DescriptorProto:
    msg = descriptor_pb2.DescriptorProto(name=name)
    for enum_name, values in NESTED_ENUMS.get(name, {}).items():
        nested = msg.enum_type.add(name=enum_name)
        for value_name, number in values:
            nested.value.add(name=value_name, number=number)
    real_oneofs: list[str] = []
    synthetic: list[tuple[Any, str]] = []
    for spec in fields:
        fname, number, kind, *flags = spec
        field = msg.field.add(name=fname, number=number, json_name=_json_name(fname), label=_F.LABEL_OPTIONAL)
        if kind == "map":
            entry_name = _camel(fname) + "Entry"
            entry = msg.nested_type.add(name=entry_name)
            entry.options.map_entry = True
            entry.field.add(name="key", number=1, json_name="key", label=_F.LABEL_OPTIONAL, type=_F.TYPE_STRING)
            entry.field.add(name="value", number=2, json_name="value", label=_F.LABEL_OPTIONAL, type=_F.TYPE_STRING)
            field.label = _F.LABEL_REPEATED
            field.type = _F.TYPE_MESSAGE
            field.type_name = f".{PACKAGE}.{name}.{entry_name}"
        elif kind in _SCALARS:
            field.type = _SCALARS[kind]
        elif kind in _WELL_KNOWN:
            field.type = _F.TYPE_MESSAGE
            field.type_name = _WELL_KNOWN[kind]
        elif kind in _ALL_ENUMS:
            field.type = _F.TYPE_ENUM
            field.type_name = f".{PACKAGE}.{kind}"
        else:
            field.type = _F.TYPE_MESSAGE
            field.type_name = f".{PACKAGE}.{kind}"
        for flag in flags:
            if flag == "repeated":
                field.label = _F.LABEL_REPEATED
            elif flag == "optional":
                field.proto3_optional = True
                synthetic.append((field, "_" + fname))
            elif flag.startswith("oneof:"):
                oneof = flag[len("oneof:"):]
                if oneof not in real_oneofs:
                    real_oneofs.append(oneof)
                field.oneof_index = real_oneofs.index(oneof)
            else:  # pragma: no cover - a typo in the tables
                raise ValueError(f"{name}.{fname}: unknown flag {flag!r}")
    # proto3 optional fields each get a synthetic oneof, declared after the real ones (protoc's layout)
    for oneof in real_oneofs:
        msg.oneof_decl.add(name=oneof)
    for field, oneof in synthetic:
        field.oneof_index = len(msg.oneof_decl)
        msg.oneof_decl.add(name=oneof)
    return msg


def _file(name: str, dependencies: list[str]) -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto(name=name, package=PACKAGE, syntax="proto3")
    proto.dependency.extend(dependencies)
    return proto


def file_protos() -> list[descriptor_pb2.FileDescriptorProto]:
    """definition.proto and service.proto as ``FileDescriptorProto`` objects, built from the tables."""
    definition = _file(DEFINITION_FILE, ["google/protobuf/timestamp.proto", "google/protobuf/duration.proto"])
    for enum_name, values in DEFINITION_ENUMS.items():
        enum_proto = definition.enum_type.add(name=enum_name)
        for value_name, number in values:
            enum_proto.value.add(name=value_name, number=number)
    for name, fields in DEFINITION_MESSAGES.items():
        definition.message_type.append(_message(name, fields))
    service = _file(SERVICE_FILE, ["google/protobuf/duration.proto", "google/protobuf/timestamp.proto", DEFINITION_FILE])
    for name, fields in SERVICE_MESSAGES.items():
        service.message_type.append(_message(name, fields))
    svc = service.service.add(name=SERVICE)
    for method, request, response, client_streaming, server_streaming in METHODS:
        m = svc.method.add(name=method, input_type=f".{PACKAGE}.{request}", output_type=f".{PACKAGE}.{response}")
        if client_streaming:
            m.client_streaming = True
        if server_streaming:
            m.server_streaming = True
    return [definition, service]


def build_pool() -> descriptor_pool.DescriptorPool:
    """A private descriptor pool holding the well-known types and our two files (nothing in protobuf's default pool
    is touched: the official client's classes can live in the same process)."""
    pool = descriptor_pool.DescriptorPool()
    for module in (duration_pb2, timestamp_pb2):
        proto = descriptor_pb2.FileDescriptorProto()
        module.DESCRIPTOR.CopyToProto(proto)
        pool.Add(proto)
    for proto in file_protos():
        pool.Add(proto)
    return pool


POOL = build_pool()


def _int_enum(name: str, values: list[tuple[str, int]]) -> type[enum.IntEnum]:
    return enum.IntEnum(name, values)  # type: ignore[return-value]


def _namespace() -> types.SimpleNamespace:
    ns = types.SimpleNamespace()
    for name in [*DEFINITION_MESSAGES, *SERVICE_MESSAGES]:
        setattr(ns, name, message_factory.GetMessageClass(POOL.FindMessageTypeByName(f"{PACKAGE}.{name}")))
    for name, values in DEFINITION_ENUMS.items():
        setattr(ns, name, _int_enum(name, values))
    ns.Duration = message_factory.GetMessageClass(POOL.FindMessageTypeByName("google.protobuf.Duration"))
    ns.Timestamp = message_factory.GetMessageClass(POOL.FindMessageTypeByName("google.protobuf.Timestamp"))
    return ns


#: the message classes and enums (as IntEnums) by their proto names
pb: Any = _namespace()

#: the service's methods: ``/apache.rocketmq.v2.MessagingService/<rpc>`` -> (rpc, request class, response class,
#: client streaming, server streaming)
METHOD_TABLE: dict[str, tuple[str, Any, Any, bool, bool]] = {
    f"/{PACKAGE}.{SERVICE}/{rpc}": (rpc, getattr(pb, request), getattr(pb, response), cs, ss)
    for rpc, request, response, cs, ss in METHODS
}
