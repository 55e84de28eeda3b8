"""Errors of the kernel: configuration, bundles and plugins. Each carries what a user needs to fix it."""

from __future__ import annotations


class PyrmqError(Exception):
    """Base class of every pyrmq error."""


class ConfigError(PyrmqError):
    """A setting is missing, unknown or has a bad value. Names the file, the key and what was expected."""

    def __init__(self, message: str, *, file: str | None = None, key: str | None = None) -> None:
        self.file = file
        self.key = key
        where = []
        if file:
            where.append(str(file))
        if key:
            where.append(f"key {key!r}")
        super().__init__(f"{': '.join(where)}: {message}" if where else message)


class PluginError(PyrmqError):
    """A plugin could not be loaded, names an unknown hook, or implements a hook with the wrong colour."""


class FilterExpressionError(PyrmqError):
    """A subscription expression does not parse (the broker answers SUBSCRIPTION_PARSE_FAILED)."""
