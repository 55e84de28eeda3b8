"""``pyrmq export``: a topic to Parquet or JSON files through Spark (batch, or ``--follow`` as a streaming query).

Shipped through the ``pyrmq_add_commands`` hook from the ``cli`` bundle (configs/cli.toml). This module imports
neither pyspark nor pyarrow: without the extra, the command says how to install it.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from typing import Any, TextIO

from pyrmq.kernel.hookspecs import hookimpl

FORMATS = ("parquet", "json")


@hookimpl
def pyrmq_add_commands(subparsers: argparse._SubParsersAction, kernel_cli: Any) -> None:
    p = subparsers.add_parser(
        "export",
        help="export a topic to Parquet/JSON files with Spark (needs the extra: pip install 'pyrmq[spark]')",
        description="Export a topic's messages to files with Spark: a batch export, or with --follow a streaming "
        "export that keeps a checkpoint and resumes where it stopped (every message exactly once in the output).",
    )
    p.add_argument("--namesrv", required=True, metavar="ADDR[;ADDR]", help="name server address(es)")
    p.add_argument("--topic", required=True, help="topic to export")
    p.add_argument("--to", required=True, metavar="PATH", help="output directory")
    p.add_argument("--format", default="parquet", choices=FORMATS, help="file format (default parquet)")
    p.add_argument("--from", dest="start", metavar="OFFSETS", help="earliest (default), latest, a JSON map broker/queue -> offset, or a timestamp (ms or ISO-8601)")
    p.add_argument("--until", dest="end", metavar="OFFSETS", help="latest (default), a JSON map, or a timestamp: where a batch export stops (exclusive)")
    p.add_argument("--follow", action="store_true", help="keep exporting new messages (a streaming query) until Ctrl-C")
    p.add_argument("--once", action="store_true", help="with --follow: export what is there now, then stop (Trigger.AvailableNow)")
    p.add_argument("--checkpoint", metavar="DIR", help="streaming checkpoint directory (default: PATH + '.checkpoint')")
    p.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    p.add_argument("--subscription", default="*", help="tag expression, e.g. 'TagA || TagB' (default *)")
    p.add_argument("--store-path", metavar="DIR", help="the broker's store directory, read directly when co-located")
    p.add_argument("--max-per-trigger", type=int, metavar="N", help="with --follow: at most N messages per micro-batch")
    p.add_argument("--mode", default="errorifexists", choices=("errorifexists", "overwrite", "append"), help="batch: what to do when PATH exists (default errorifexists)")
    p.add_argument("--quiet", action="store_true", help="no progress display")
    p.set_defaults(func=cmd_export)


def _reader_options(args: argparse.Namespace) -> dict[str, str]:
    opts = {"namesrv": args.namesrv, "topic": args.topic, "subscription": args.subscription}
    if args.start:
        opts["startingOffsets"] = args.start
    elif args.follow:
        opts["startingOffsets"] = "earliest"  # an export starts from the beginning, unlike a plain stream
    if args.end:
        opts["endingOffsets"] = args.end
    if args.store_path:
        opts["storePath"] = os.path.abspath(args.store_path)
    if args.max_per_trigger:
        opts["maxMessagesPerTrigger"] = str(args.max_per_trigger)
    return opts


def cmd_export(args: argparse.Namespace) -> int:
    from .options import OptionError, ReadOptions
    from .session import SparkSetupError, require_pyspark

    try:
        require_pyspark()
    except SparkSetupError as exc:
        print(f"pyrmq export: {exc}", file=sys.stderr)
        return 2
    if args.follow and args.end:
        print("pyrmq export: --until is for a batch export; --follow runs until stopped (or use --once)", file=sys.stderr)
        return 2
    if args.once and not args.follow:
        print("pyrmq export: --once goes with --follow", file=sys.stderr)
        return 2
    opts = _reader_options(args)
    try:
        ReadOptions.parse(opts, streaming=args.follow)  # fail before starting a JVM
    except OptionError as exc:
        print(f"pyrmq export: {_flag_names(str(exc))}", file=sys.stderr)
        return 2
    from .session import spark_session

    try:
        from pyspark.sql import SparkSession

        embedded = SparkSession.getActiveSession() is not None  # called from a program that has a session: keep it
        spark = spark_session(args.master, "pyrmq export", {"spark.ui.enabled": "false", "spark.executor.heartbeatInterval": "2s"})
    except SparkSetupError as exc:
        print(f"pyrmq export: {exc}", file=sys.stderr)
        return 2
    if not embedded:
        spark.sparkContext.setLogLevel("ERROR")
    out = None if args.quiet else sys.stderr
    try:
        if args.follow:
            return _follow(spark, args, opts, out)
        return _batch(spark, args, opts, out)
    finally:
        if not embedded:
            spark.stop()


def _flag_names(text: str) -> str:
    names = {"'startingOffsets'": "--from ('startingOffsets')", "'endingOffsets'": "--until ('endingOffsets')",
             "'storePath'": "--store-path ('storePath')", "'subscription'": "--subscription"}
    for k, v in names.items():
        text = text.replace(k, v)
    return text


class Progress:
    """One status line: messages, MB written and their rates, from Spark's stage metrics (per finished task)."""

    def __init__(self, out: TextIO | None) -> None:
        self.out = out
        self.t0 = time.monotonic()
        self.last_len = 0
        self.tty = bool(out is not None and out.isatty())
        self.last_print = 0.0

    def show(self, messages: int, nbytes: int, final: bool = False) -> None:
        if self.out is None:
            return
        dt = max(time.monotonic() - self.t0, 1e-6)
        line = (f"exported {messages:,} messages, {nbytes / 1e6:,.1f} MB written in {dt:,.1f} s "
                f"({messages / dt:,.0f} msg/s, {nbytes / 1e6 / dt:,.1f} MB/s)")
        if not self.tty:  # a log file gets a line every 5 s, not carriage returns
            if final or time.monotonic() - self.last_print >= 5:
                self.out.write(line + "\n")
                self.out.flush()
                self.last_print = time.monotonic()
            return
        pad = " " * max(0, self.last_len - len(line))
        self.out.write("\r" + line + pad + ("\n" if final else ""))
        self.out.flush()
        self.last_len = len(line)


def _stage_totals(spark: Any, seen: dict[int, tuple[int, int]]) -> tuple[int, int]:
    """Records and bytes written by the job's stages (active ones now, finished ones as last seen)."""
    try:
        it = spark.sparkContext._jsc.sc().statusStore().activeStages().iterator()
        while it.hasNext():
            s = it.next()
            seen[s.stageId()] = (s.outputRecords(), s.outputBytes())
    except Exception:  # noqa: BLE001 - progress only; Spark internals may change
        pass
    return sum(r for r, _ in seen.values()), sum(b for _, b in seen.values())


def _batch(spark: Any, args: argparse.Namespace, opts: dict[str, str], out: TextIO | None) -> int:
    reader = spark.read.format("pyrmq")
    for k, v in opts.items():
        reader = reader.option(k, v)
    df = reader.load()
    progress = Progress(out)
    error: list[BaseException] = []

    def run() -> None:
        try:
            df.write.mode(args.mode).format(args.format).save(args.to)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            error.append(exc)

    worker = threading.Thread(target=run, name="pyrmq-export", daemon=True)
    worker.start()
    seen: dict[int, tuple[int, int]] = {}
    while worker.is_alive():
        worker.join(0.5)
        progress.show(*_stage_totals(spark, seen))
    if error:
        progress.show(*_stage_totals(spark, seen), final=True)
        print(f"pyrmq export: {_short_error(error[0])}", file=sys.stderr)
        return 1
    written = spark.read.format(args.format).load(args.to) if args.format == "parquet" else None
    count = written.count() if written is not None else _stage_totals(spark, seen)[0]
    progress.show(count, _dir_bytes(args.to), final=True)
    if out is None:
        print(f"exported {count} messages to {args.to}")
    return 0


def _follow(spark: Any, args: argparse.Namespace, opts: dict[str, str], out: TextIO | None) -> int:
    checkpoint = args.checkpoint or args.to.rstrip("/") + ".checkpoint"
    reader = spark.readStream.format("pyrmq")
    for k, v in opts.items():
        reader = reader.option(k, v)
    writer = reader.load().writeStream.format(args.format).option("path", args.to).option("checkpointLocation", checkpoint)
    writer = writer.trigger(availableNow=True) if args.once else writer.trigger(processingTime="1 second")
    query = writer.start()
    if out is not None:
        out.write(f"following {args.topic} into {args.to} (checkpoint {checkpoint}); Ctrl-C stops\n")
    progress = Progress(out)
    messages = 0
    last_batch = -1
    try:
        while query.isActive:
            query.awaitTermination(0.5)
            for p in query.recentProgress:
                if p["batchId"] > last_batch:
                    messages += int(p.get("numInputRows") or 0)
                    last_batch = p["batchId"]
            progress.show(messages, _dir_bytes(args.to))
    except KeyboardInterrupt:
        query.stop()
    progress.show(messages, _dir_bytes(args.to), final=True)
    if query.exception() is not None:
        print(f"pyrmq export: {_short_error(query.exception())}", file=sys.stderr)
        return 1
    return 0


def _dir_bytes(path: str) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        if "_spark_metadata" in root:
            continue
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


def _short_error(exc: BaseException) -> str:
    text = str(exc)
    # a Python data source error arrives wrapped in JVM text: keep the last line of the Python traceback
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line and ("Error:" in line or "Exception:" in line) and not line.startswith("at "):
            return line
    return text.splitlines()[0] if text else repr(exc)
