"""Exceptions of the store layer.

Each carries what a user needs to find the problem: the file and the byte position.
"""

from __future__ import annotations

# a record that does not decode: raised by the message codec the store shares with the wire (pyrmq.remoting.message)
from pyrmq.remoting.errors import CorruptRecordError as CorruptRecordError


class StoreError(Exception):
    """Base class of every error raised by :mod:`pyrmq.store`."""


class MessageTooLargeError(StoreError):
    """A message (or its properties / topic) exceeds the store limits (spec 5.1, 6.2)."""


class NotVisibleError(StoreError):
    """A record asked for by a client's read (``visible_only``) exists but ends beyond the store's read bound
    (:meth:`~pyrmq.store.message_store.MessageStore.set_read_bound`: automatic failover's confirm offset)."""

    def __init__(self, offset: int, bound: int) -> None:
        self.offset = offset
        self.bound = bound
        super().__init__("not confirmed by every in-sync replica yet")


class StoreLockedError(StoreError):
    """Another process holds the store directory's ``lock`` file."""

    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(f"store directory is locked by another process: {path}")


class ConfigFileError(StoreError):
    """A config JSON file (and its .bak) could not be parsed."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")
