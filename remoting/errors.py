"""Exceptions of the remoting layer. trio's own exceptions are translated into these at the remoting edge."""

from __future__ import annotations

__all__ = [
    "RemotingError",
    "ProtocolError",
    "HeaderError",
    "RemotingConnectError",
    "RemotingTimeout",
    "RemotingClosed",
    "RemotingCommandError",
    "CorruptRecordError",
]


class RemotingError(Exception):
    """Base class of every error raised by ``pyrmq.remoting``."""


class ProtocolError(RemotingError):
    """Bytes that are not a valid RocketMQ frame/header; the connection that sent them is closed."""


class HeaderError(RemotingError):
    """A custom header (extFields) lacks a required field or has a value of the wrong type.

    Raised from ``from_ext_fields``; a processor that lets it escape answers SYSTEM_ERROR with this text, as the
    Java broker does for its ``RemotingCommandException``.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class RemotingConnectError(RemotingError):
    """Could not open a connection to ``address`` (refused, unreachable, connect timeout)."""

    def __init__(self, address: str, reason: str) -> None:
        super().__init__(f"connect to {address} failed: {reason}")
        self.address = address
        self.reason = reason


class RemotingTimeout(RemotingError):
    """No response arrived within ``timeout`` seconds."""

    def __init__(self, address: str, timeout: float, code: int | None = None) -> None:
        what = f"request code {code}" if code is not None else "request"
        super().__init__(f"{what} to {address} timed out after {timeout:g} s")
        self.address = address
        self.timeout = timeout
        self.code = code


class RemotingClosed(RemotingError):
    """The connection closed before the response arrived (or was already closed)."""

    def __init__(self, address: str = "", message: str = "connection closed") -> None:
        super().__init__(f"{message}: {address}" if address else message)
        self.address = address


class RemotingCommandError(RemotingError):
    """The peer answered with a non-success response code (raised only by the ``*_checked`` helpers)."""

    def __init__(self, code: int, remark: str | None) -> None:
        super().__init__(f"response code {code}: {remark or ''}".rstrip(": "))
        self.code = code
        self.remark = remark


class CorruptRecordError(ProtocolError):
    """Bytes at ``file``/``pos`` are not a valid message record (bad magic, size, CRC or a short read).

    ``file`` is None for records that came over the wire (a pull or batch-send body); the store passes the
    segment's path. :mod:`pyrmq.store.errors` re-exports this class under the same name.
    """

    def __init__(self, file: str | None, pos: int, reason: str) -> None:
        self.file = file
        self.pos = pos
        self.reason = reason
        where = f"{file}@{pos}" if file else f"@{pos}"
        super().__init__(f"corrupt record at {where}: {reason}")
