"""Exceptions of the client library. Each carries what a user needs: the topic, the broker, the response code.

    ClientError
    +-- InvalidMessageError      a message or name the client refuses before sending (also a ValueError)
    |   +-- InvalidSubscriptionError  a subscription expression that does not parse (``line``, ``column``)
    +-- NameServerUnreachable    no name server answered
    +-- TopicNotFoundError       no route for the topic, and no TBW102 route to auto-create it from
    +-- BrokerError              a broker answered with an error code (``code``, ``remark``, ``broker``)
    +-- SendFailedError          every attempt of a send failed (``attempts`` lists why)
    +-- ClientStateError         the object is not started, or already shut down

Remoting failures (connect, timeout, closed) surface as :class:`pyrmq.remoting.RemotingError` inside
``SendFailedError.attempts``; the library never leaks trio's own exceptions.
"""

from __future__ import annotations

from pyrmq.kernel.errors import PyrmqError

__all__ = [
    "ClientError",
    "InvalidMessageError",
    "InvalidSubscriptionError",
    "NameServerUnreachable",
    "TopicNotFoundError",
    "BrokerError",
    "SendFailedError",
    "ClientStateError",
]


class ClientError(PyrmqError):
    """Base class of every error raised by ``pyrmq.client``."""


class InvalidMessageError(ClientError, ValueError):
    """A message, topic or group the client refuses to send (spec 7.9 names, 4 MiB bodies, reserved properties)."""


class InvalidSubscriptionError(InvalidMessageError):
    """A subscription expression (SQL92) that does not parse; ``line`` and ``column`` point at the problem."""

    def __init__(self, message: str, *, line: int, column: int) -> None:
        super().__init__(message)
        self.line = line
        self.column = column


class NameServerUnreachable(ClientError):
    """No name server of the configured list answered."""

    def __init__(self, addresses: list[str], reason: str) -> None:
        super().__init__(f"cannot reach any name server ({';'.join(addresses) or 'none configured'}): {reason}")
        self.addresses = addresses
        self.reason = reason


class TopicNotFoundError(ClientError):
    """The name servers know no route for ``topic`` (and none for the auto-create template)."""

    def __init__(self, topic: str, detail: str = "") -> None:
        super().__init__(f"no route for topic {topic!r}" + (f": {detail}" if detail else ""))
        self.topic = topic


class BrokerError(ClientError):
    """A broker (or name server) answered a request with a non-success code."""

    def __init__(self, code: int, remark: str | None, broker: str = "", request: str = "") -> None:
        where = f" from {broker}" if broker else ""
        what = f"{request}: " if request else ""
        super().__init__(f"{what}response code {code}{where}: {remark or ''}".rstrip(": "))
        self.code = code
        self.remark = remark
        self.broker = broker


class SendFailedError(ClientError):
    """A send failed on every attempt (``1 + retries`` for a sync send); ``attempts`` holds each failure."""

    def __init__(self, topic: str, attempts: list[tuple[str, BaseException]]) -> None:
        detail = "; ".join(f"{where}: {exc}" for where, exc in attempts) or "no queue to send to"
        super().__init__(f"send to topic {topic!r} failed after {len(attempts)} attempt(s): {detail}")
        self.topic = topic
        self.attempts = attempts

    @property
    def last(self) -> BaseException | None:
        return self.attempts[-1][1] if self.attempts else None


class ClientStateError(ClientError):
    """The producer or consumer is not started, or was shut down."""
