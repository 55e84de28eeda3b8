"""RocketMQ ACL 1.0 request signatures (4.4+ ``AclClientRPCHook`` / ``AclUtils``), shared by client and broker.

The signed content is the values of every extFields entry except ``Signature`` and ``_UNIQUE_KEY_QUERY``, sorted by
key and concatenated without keys or separators (numbers and booleans as fastjson writes them), UTF-8, followed by
the body bytes. The signature is HMAC-SHA1 of that content with the secret key, in standard base64.

    signer = RequestSigner("RocketMQ", "12345678")
    signer(request)                      # adds AccessKey and Signature to request.ext_fields
    verify_signature(request, secret)    # the broker's side
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping
from .command import Body, RemotingCommand, ext_value_text

__all__ = [
    "ACCESS_KEY",
    "SECURITY_TOKEN",
    "SIGNATURE",
    "UNSIGNED_FIELDS",
    "RequestSigner",
    "sign",
    "signature_of",
    "verify_signature",
]

ACCESS_KEY = "AccessKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
#: extFields a signature never covers (Java: SessionCredentials.SIGNATURE, MixAll.UNIQUE_MSG_QUERY_FLAG)
UNSIGNED_FIELDS = frozenset({SIGNATURE, "_UNIQUE_KEY_QUERY"})


def _content_mac(secret_key: str, ext_fields: Mapping[str, object], body: Body | str) -> hmac.HMAC:
    mac = hmac.new(secret_key.encode(), digestmod=hashlib.sha1)
    text = "".join(
        ext_value_text(ext_fields[key]) for key in sorted(ext_fields)
        if key not in UNSIGNED_FIELDS and ext_fields[key] is not None
    )
    mac.update(text.encode())
    if body:
        if isinstance(body, (bytes, bytearray, memoryview)):
            mac.update(body)
        elif isinstance(body, str):
            mac.update(body.encode())
        else:  # a body handed over as a list of buffers
            for part in body:
                mac.update(part)
    return mac


def sign(secret_key: str, ext_fields: Mapping[str, object], body: Body | str = b"") -> str:
    """The base64 HMAC-SHA1 signature of ``ext_fields`` (minus the unsigned fields) and ``body``."""
    return base64.b64encode(_content_mac(secret_key, ext_fields, body).digest()).decode()


def signature_of(request: RemotingCommand, secret_key: str) -> str:
    return sign(secret_key, request.ext_fields, request.body)


def verify_signature(request: RemotingCommand, secret_key: str) -> bool:
    """True when the request's ``Signature`` is the one ``secret_key`` gives (compared in constant time)."""
    claimed = request.ext_fields.get(SIGNATURE)
    if not claimed:
        return False
    expected = signature_of(request, secret_key)
    return hmac.compare_digest(expected.encode(), str(claimed).encode())


class RequestSigner:
    """Signs outgoing requests with one account: sets ``AccessKey`` (and ``SecurityToken``), then ``Signature``.

    Called by :class:`pyrmq.remoting.connection.Connection` for every request it sends on the client side when the
    connection has a signer (``RemotingClient(signer=...)``).
    """

    __slots__ = ("access_key", "_secret_key", "security_token")

    def __init__(self, access_key: str, secret_key: str, security_token: str | None = None) -> None:
        if not access_key or not secret_key:
            raise ValueError("credentials need both an access key and a secret key")
        self.access_key = access_key
        self._secret_key = secret_key
        self.security_token = security_token

    def __repr__(self) -> str:  # never the secret
        return f"RequestSigner(access_key={self.access_key!r})"

    def __call__(self, request: RemotingCommand) -> None:
        ext = request.ext_fields
        ext[ACCESS_KEY] = self.access_key
        if self.security_token:
            ext[SECURITY_TOKEN] = self.security_token
        ext[SIGNATURE] = sign(self._secret_key, ext, request.body)
