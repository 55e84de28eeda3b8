"""Shared by the console tools (``pyrmq produce|consume|admin``): tables, timestamps, running a trio main and
turning client errors into one line on stderr with a non-zero exit status."""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["format_table", "ms_text", "error", "key_value", "timestamp", "run", "namesrv_parent", "credentials",
           "EXIT_OK", "EXIT_FAILED", "EXIT_USAGE"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain text table: numbers right-aligned, everything else left-aligned, two spaces between columns."""
    cells = [[("" if v is None else str(v)) for v in row] for row in rows]
    numeric = [all(isinstance(row[i], (int, float)) and not isinstance(row[i], bool) for row in rows) and bool(rows)
               for i in range(len(headers))]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if numeric[i] else v.ljust(w) for i, (v, w) in enumerate(zip(values, widths))]
        return "  ".join(parts).rstrip()

    out = [line(headers), line(["-" * w for w in widths])]
    out.extend(line(r) for r in cells)
    return "\n".join(out)


def ms_text(ms: int) -> str:
    if not ms or ms <= 0:
        return "-"
    return datetime.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S")


def error(command: str, message: Any) -> int:
    print(f"pyrmq {command}: error: {message}", file=sys.stderr)
    return EXIT_FAILED


def key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def timestamp(text: str) -> int:
    """``now``, ms since the epoch, ``yyyyMMddHHmmss`` or ISO 8601 -> ms."""
    if text.lower() == "now":
        return int(time.time() * 1000)
    from pyrmq.client.consumer import parse_timestamp
    from pyrmq.client.errors import InvalidMessageError

    try:
        return parse_timestamp(text)
    except InvalidMessageError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def run(command: str, main: Callable[[], Any]) -> int:
    """trio.run(main), turning client errors into one line on stderr and a non-zero status."""
    import trio

    from pyrmq.client.errors import ClientError
    from pyrmq.remoting.errors import RemotingError

    try:
        return int(trio.run(main) or 0)
    except (ClientError, RemotingError) as exc:
        return error(command, exc)
    except KeyboardInterrupt:
        return 130


def namesrv_parent() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(
        "--namesrv", "-n", metavar="ADDR[;ADDR]", default=os.environ.get("NAMESRV_ADDR") or "127.0.0.1:9876",
        help="name server address(es) (default: $NAMESRV_ADDR or 127.0.0.1:9876)",
    )
    parent.add_argument(
        "--access-key", metavar="KEY", default=os.environ.get("ROCKETMQ_ACCESS_KEY") or None,
        help="ACL access key: sign every request (default: $ROCKETMQ_ACCESS_KEY)",
    )
    parent.add_argument(
        "--secret-key", metavar="SECRET", default=os.environ.get("ROCKETMQ_SECRET_KEY") or None,
        help="ACL secret key (default: $ROCKETMQ_SECRET_KEY; prefer the variable: a command line is visible to others)",
    )
    return parent


def credentials(args: argparse.Namespace) -> tuple[str, str] | None:
    """``(access_key, secret_key)`` from ``--access-key/--secret-key`` (or their variables); None when neither."""
    access_key = getattr(args, "access_key", None)
    secret_key = getattr(args, "secret_key", None)
    if not access_key and not secret_key:
        return None
    if not access_key or not secret_key:
        raise SystemExit("pyrmq: give both --access-key and --secret-key (or ROCKETMQ_ACCESS_KEY and ROCKETMQ_SECRET_KEY)")
    return access_key, secret_key
