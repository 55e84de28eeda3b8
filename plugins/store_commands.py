"""`pyrmq store dump DIR [--verify]`: a store directory in readable form (segments, consume queues, index files),
with ``--verify`` checking every record's CRC and every consume-queue entry's target. Exit 1 when verification
finds problems, 2 when DIR is not a store.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pyrmq.kernel.hookspecs import hookimpl


def _dump(args: argparse.Namespace) -> int:
    from pyrmq.store.dump import main_dump

    return main_dump(args.dir, args.verify, sys.stdout)


@hookimpl(trylast=True)
def pyrmq_add_commands(subparsers: Any, kernel_cli: Any) -> None:
    store = subparsers.add_parser("store", help="inspect a broker's store directory")
    sub = store.add_subparsers(dest="store_command", metavar="STORE_COMMAND", required=True)
    dump = sub.add_parser("dump", help="print commit-log segments, consume queues and index files of DIR")
    dump.add_argument("dir", metavar="DIR", help="the store root (storePathRootDir)")
    dump.add_argument("--verify", action="store_true", help="check every record CRC and every consume-queue entry")
    dump.set_defaults(func=_dump)
