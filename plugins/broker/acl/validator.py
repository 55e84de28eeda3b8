"""The request check of RocketMQ's PlainAccessValidator, run before every processor of the broker.

Order (RocketMQ 4.9.8's PlainPermissionManager.validate): a ``globalWhiteRemoteAddresses`` match lets the request
through; no ``AccessKey`` -> "No accessKey is configured"; an unknown key -> "No acl config for <key>"; the account's
``whiteRemoteAddress`` matches -> through (no signature needed); a wrong signature -> "Check signature failed for
accessKey=<key>"; then the admin flag for admin requests, then the permission of every resource the request touches.

A refusal is answered NO_PERMISSION (16) with RocketMQ's message and what was refused (docs/decisions.md).
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from typing import Any

from pyrmq.remoting import fastjson
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.signing import ACCESS_KEY, SIGNATURE, signature_of
from pyrmq.remoting.vocabulary import TRACE_TOPIC

from .rules import PUB, RETRY_PREFIX, SUB, Account, AclRules, canonical_host, check_permission, perm_text, retry_topic


#: requests only an admin account may make: RocketMQ's five, and (pyrmq) the ACL management RPCs 50-53
ADMIN_CODES = frozenset({
    RequestCode.UPDATE_AND_CREATE_TOPIC,
    RequestCode.UPDATE_BROKER_CONFIG,
    RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
    RequestCode.DELETE_SUBSCRIPTIONGROUP,
    RequestCode.DELETE_TOPIC_IN_BROKER,
    RequestCode.UPDATE_AND_CREATE_ACL_CONFIG,
    RequestCode.DELETE_ACL_CONFIG,
    RequestCode.GET_BROKER_CLUSTER_ACL_INFO,
    RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
})

_SENDS = frozenset({RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE,
                    RequestCode.SEND_REPLY_MESSAGE, RequestCode.SEND_REPLY_MESSAGE_V2})
_CODE_NAMES = {int(code): code.name for code in RequestCode}


class AclDenied(Exception):
    """Why a request is refused (RocketMQ's AclException text)."""


def _add(resources: dict[str, int], resource: str | None, perm: int) -> None:
    if resource:  # RocketMQ skips a missing resource (a header field the request does not carry)
        resources[resource] = resources.get(resource, 0) | perm


def _retry(group: str | None) -> str | None:
    return retry_topic(group) if group else None


def needed_resources(request: RemotingCommand) -> dict[str, int]:
    """Topics and ``%RETRY%<group>`` resources a request touches, with the permission each needs.

    As RocketMQ's PlainAccessValidator.parse, plus the batch and reply sends (RocketMQ 4.9.8 checks neither: a
    batch would get around a DENY; docs/decisions.md).
    """
    code = request.code
    ext = request.ext_fields
    resources: dict[str, int] = {}
    if code in _SENDS:
        v2 = code != RequestCode.SEND_MESSAGE and "b" in ext
        topic = ext.get("b") if v2 else ext.get("topic")
        if topic and topic.startswith(RETRY_PREFIX):
            _add(resources, _retry(ext.get("a") if v2 else ext.get("producerGroup")), SUB)
        else:
            _add(resources, topic, PUB)
    elif code == RequestCode.CONSUMER_SEND_MSG_BACK:
        _add(resources, _retry(ext.get("group")), SUB)
    elif code == RequestCode.PULL_MESSAGE:
        _add(resources, ext.get("topic"), SUB)
        _add(resources, _retry(ext.get("consumerGroup")), SUB)
    elif code == RequestCode.QUERY_MESSAGE:
        _add(resources, ext.get("topic"), SUB)
    elif code == RequestCode.HEART_BEAT:
        try:
            data = fastjson.loads(request.body_bytes())
            for consumer in data.get("consumerDataSet") or ():
                _add(resources, _retry(consumer.get("groupName")), SUB)
                for sub in consumer.get("subscriptionDataSet") or ():
                    _add(resources, sub.get("topic"), SUB)
        except (ValueError, AttributeError, TypeError) as exc:
            raise AclDenied(f"the heartbeat body is not HeartbeatData JSON: {exc}") from None
    elif code in (RequestCode.UNREGISTER_CLIENT, RequestCode.GET_CONSUMER_LIST_BY_GROUP):
        _add(resources, _retry(ext.get("consumerGroup")), SUB)
    elif code == RequestCode.UPDATE_CONSUMER_OFFSET:
        _add(resources, _retry(ext.get("consumerGroup")), SUB)
        _add(resources, ext.get("topic"), SUB)
    return resources


def _resource_text(resource: str) -> str:
    if resource.startswith(RETRY_PREFIX):
        return "group:" + resource[len(RETRY_PREFIX):]
    return "topic:" + resource


_PEER = "acl.peer"


class _Peer:
    """A connection's address against one rule set: global white list, and each account's white address."""

    __slots__ = ("rules", "host", "canonical", "globally_white", "_accounts")

    def __init__(self, rules: AclRules, host: str) -> None:
        self.rules = rules
        self.host = host
        self.canonical = canonical_host(host)
        self.globally_white = any(p.matches_canonical(self.canonical) for p in rules.global_white)
        self._accounts: dict[str, bool] = {}

    def white_for(self, account: Account) -> bool:
        white = self._accounts.get(account.access_key)
        if white is None:
            white = self._accounts[account.access_key] = account.white_address.matches_canonical(self.canonical)
        return white


class AclValidator:
    """The broker's request guard: ``validator(connection, request)`` -> None (through) or the refusal response.

    ``rules`` is replaced as a whole when the files change (one attribute read per request).
    """

    def __init__(self, rules: AclRules) -> None:
        self.rules = rules
        self.refused = 0

    def __call__(self, connection: Any, request: RemotingCommand) -> RemotingCommand | None:
        rules = self.rules
        # what depends on the peer's address alone is worked out once per connection and rule set
        peer = connection.attributes.get(_PEER)
        if peer is None or peer.rules is not rules:
            peer = connection.attributes[_PEER] = _Peer(rules, connection.remote_address[0])
        try:
            self._check(request, rules, peer)
        except AclDenied as exc:
            self.refused += 1
            name = _CODE_NAMES.get(request.code, str(request.code))
            return request.make_response(ResponseCode.NO_PERMISSION, f"{exc} (ACL refused request {name} from {peer.host})")
        return None

    def check(self, request: RemotingCommand, host: str) -> None:
        """Raise AclDenied with RocketMQ's message when ``request`` from ``host`` may not pass."""
        self._check(request, self.rules, _Peer(self.rules, host))

    def _check(self, request: RemotingCommand, rules: AclRules, peer: _Peer) -> None:
        if peer.globally_white:
            return
        ext = request.ext_fields
        access_key = ext.get(ACCESS_KEY)
        if access_key is None:
            raise AclDenied("No accessKey is configured")
        account = rules.accounts.get(access_key)
        if account is None:
            raise AclDenied(f"No acl config for {access_key}")
        if peer.white_for(account):
            return
        claimed = ext.get(SIGNATURE)
        if not claimed or not hmac.compare_digest(signature_of(request, account.secret_key).encode(), claimed.encode()):
            raise AclDenied(f"Check signature failed for accessKey={access_key}")
        code = request.code
        if code in ADMIN_CODES and not account.admin:
            raise AclDenied(f"Need admin permission for request code={code}, but accessKey={access_key} is not")
        needed = needed_resources(request)
        if not needed or (needed.get(TRACE_TOPIC) == PUB):
            return
        if account.admin and not account.resources:
            return
        self._check_resources(needed, account.resources, account.default_topic_perm, account.default_group_perm)

    @staticmethod
    def _check_resources(needed: Mapping[str, int], owned: Mapping[str, int], topic_default: int, group_default: int) -> None:
        for resource, perm in needed.items():
            own = owned.get(resource)
            is_group = resource.startswith(RETRY_PREFIX)
            if own is None:
                own = group_default if is_group else topic_default
                if not check_permission(perm, own):
                    raise AclDenied(
                        f"No default permission for {_resource_text(resource)} (needs {perm_text(perm)}, default is {perm_text(own)})"
                    )
            elif not check_permission(perm, own):
                raise AclDenied(f"No permission for {_resource_text(resource)} (needs {perm_text(perm)}, has {perm_text(own)})")
