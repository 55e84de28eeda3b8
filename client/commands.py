"""``pyrmq produce``, ``pyrmq consume`` and ``pyrmq admin ...``: console tools on top of the client library, added
to the command line through the ``pyrmq_add_commands`` hook (this module is listed in configs/cli.toml).

Importing this module must stay cheap (every ``pyrmq`` invocation imports it): the client is imported inside the
commands. Every command takes ``--namesrv`` (default ``$NAMESRV_ADDR``, else 127.0.0.1:9876) and exits non-zero
with one clear line when a name server cannot be reached. The admin commands are in :mod:`.admin_commands`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from pyrmq.client.admin_commands import add_admin_parser
from pyrmq.client.console import (
    EXIT_FAILED, EXIT_OK, EXIT_USAGE, credentials, key_value, namesrv_parent, run, timestamp,
)
from pyrmq.kernel.hookspecs import hookimpl

__all__ = ["pyrmq_add_commands", "cmd_produce", "cmd_consume"]


# ---------------------------------------------------------------------------------------------------------------
# produce
# ---------------------------------------------------------------------------------------------------------------


def _bodies(args: argparse.Namespace) -> Any:
    if args.count is not None:
        size = max(args.size, 1)
        for i in range(args.count):
            head = f"message {i} ".encode()
            yield (head + b"x" * max(size - len(head), 0))[:size]
    else:
        for line in sys.stdin.buffer:
            line = line.rstrip(b"\r\n")
            if line:
                yield line


def cmd_produce(args: argparse.Namespace) -> int:
    if args.batch and args.delay:
        print("pyrmq produce: error: --batch cannot carry delayed messages (--delay)", file=sys.stderr)
        return EXIT_USAGE

    async def main() -> int:
        import trio

        from pyrmq.client import Message, Producer
        from pyrmq.client.errors import ClientError

        sent = failed = 0
        errors: list[str] = []
        out = sys.stdout
        summary_to = sys.stderr if args.print else sys.stdout
        began = time.perf_counter()
        async with Producer(args.namesrv, args.group, send_timeout=args.timeout, credentials=credentials(args)) as producer:
            # fail fast, with one line, when no name server answers (and warm the route)
            await producer.instance.update_route(args.topic, for_producer=True)
            window = trio.Semaphore(max(args.window, 1))

            def record(result: Any, error: BaseException | None, n: int = 1) -> None:
                nonlocal sent, failed
                if error is not None:
                    failed += n
                    if len(errors) < 5:
                        errors.append(str(error))
                    return
                sent += n
                if args.print:
                    for r in result if isinstance(result, list) else [result]:
                        out.write(json.dumps(r.to_json()) + "\n")

            def message(i: int, body: bytes) -> Message:
                msg = Message(args.topic, body, tags=args.tag, delay_time_level=args.delay or 0)
                if args.keys is not None:
                    msg.keys = (f"{args.keys}{i}",)
                for k, v in args.property or []:
                    msg.properties[k] = v
                return msg

            async def send_batch(batch: list[Message]) -> None:
                try:
                    record(await producer.send_batch(batch), None, len(batch))
                except ClientError as exc:
                    record(None, exc, len(batch))

            async def send_one(msg: Message) -> None:
                await window.acquire()

                def done(result: Any, error: BaseException | None) -> None:
                    window.release()
                    record(result, error)

                try:
                    await producer.send_async(msg, done)
                except ClientError as exc:
                    window.release()
                    record(None, exc)

            batch: list[Message] = []
            for i, body in enumerate(_bodies(args)):
                msg = message(i, body)
                if args.batch:
                    batch.append(msg)
                    if len(batch) >= args.batch:
                        await send_batch(batch)
                        batch = []
                else:
                    await send_one(msg)
            if batch:
                await send_batch(batch)
            for _ in range(max(args.window, 1)):  # wait for the last answers
                await window.acquire()
        seconds = max(time.perf_counter() - began, 1e-9)
        out.flush()
        for text in errors:
            print(f"pyrmq produce: send failed: {text}", file=sys.stderr)
        print(f"sent {sent}, failed {failed}, {sent / seconds:,.0f} msgs/s ({seconds:.2f} s)", file=summary_to)
        return EXIT_OK if failed == 0 else EXIT_FAILED

    return run("produce", main)


# ---------------------------------------------------------------------------------------------------------------
# consume
# ---------------------------------------------------------------------------------------------------------------


def _message_line(msg: Any) -> str:
    keys = ",".join(msg.keys) or "-"
    body = msg.text().replace("\n", "\\n")
    if len(body) > 160:
        body = f"{body[:160]}... ({len(msg.body)} bytes)"
    return (f"[{msg.topic} {msg.broker_name}/{msg.queue_id}@{msg.queue_offset}] id={msg.msg_id} tags={msg.tags or '-'}"
            f" keys={keys} reconsume={msg.reconsume_times} | {body}")


def cmd_consume(args: argparse.Namespace) -> int:
    async def main() -> int:
        import signal

        import trio

        from pyrmq.client import PushConsumer

        consumer = PushConsumer(
            args.namesrv, args.group, message_model="BROADCASTING" if args.broadcast else "CLUSTERING",
            consume_from=args.start, orderly=args.orderly, credentials=credentials(args),
        )
        consumer.subscribe(args.topic, args.expr, sql=args.sql)
        count = 0
        async with consumer:
            if not consumer.topic_queues.get(args.topic):
                print(f"pyrmq consume: topic {args.topic!r} has no route yet; waiting for it", file=sys.stderr)
            with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals, trio.CancelScope() as scope:

                async def stop_on_signal() -> None:
                    async for _ in signals:
                        scope.cancel()
                        return

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(stop_on_signal)
                    while args.count is None or count < args.count:
                        msg = None
                        with trio.move_on_after(args.timeout if args.timeout is not None else float("inf")):
                            msg = await consumer.__anext__()
                        if msg is None:
                            break
                        count += 1
                        if args.json:
                            print(json.dumps(msg.to_json(), ensure_ascii=False), flush=True)
                        else:
                            print(_message_line(msg), flush=True)
                    nursery.cancel_scope.cancel()
        print(f"consumed {count} message(s)", file=sys.stderr)
        return EXIT_OK

    return run("consume", main)


# ---------------------------------------------------------------------------------------------------------------
# argument parsers
# ---------------------------------------------------------------------------------------------------------------


def _add_produce(sub: Any, parent: argparse.ArgumentParser) -> None:
    p = sub.add_parser("produce", parents=[parent], help="send messages (console producer)",
                       description="Send --count generated messages of --size bytes, or one message per line of stdin.")
    p.add_argument("--topic", "-t", required=True)
    p.add_argument("--group", "-g", default="pyrmq_console_producer", help="producer group")
    p.add_argument("--count", "-c", type=int, help="generate COUNT messages instead of reading stdin")
    p.add_argument("--size", "-s", type=int, default=100, help="body size of generated messages (default 100)")
    p.add_argument("--tag", help="tag of every message")
    p.add_argument("--keys", metavar="PREFIX", help="give message i the key PREFIX<i>")
    p.add_argument("--batch", type=int, metavar="N", help="send batches of N messages (SEND_BATCH_MESSAGE)")
    p.add_argument("--delay", type=int, metavar="LEVEL", help="delay level 1..18 (1s 5s 10s 30s 1m ... 2h)")
    p.add_argument("--property", type=key_value, action="append", metavar="K=V", help="user property (repeatable)")
    p.add_argument("--print", action="store_true", help="print each send result as a JSON line (summary goes to stderr)")
    p.add_argument("--window", type=int, default=64, help="sends in flight at once (default 64; 1 = one by one)")
    p.add_argument("--timeout", type=float, default=3.0, help="send timeout in seconds (default 3)")
    p.set_defaults(func=cmd_produce)


def _from(text: str) -> Any:
    if text.lower() in ("first", "last"):
        return text.lower()
    return timestamp(text)


def _add_consume(sub: Any, parent: argparse.ArgumentParser) -> None:
    p = sub.add_parser("consume", parents=[parent], help="receive messages (console consumer)",
                       description="Print messages as they arrive; stops after --count messages, after --timeout "
                                   "seconds without a message, or on Ctrl-C (offsets are committed either way).")
    p.add_argument("--topic", "-t", required=True)
    p.add_argument("--group", "-g", required=True, help="consumer group")
    filters = p.add_mutually_exclusive_group()
    filters.add_argument("--expr", default="*", help="tag expression, e.g. 'TagA || TagB' (default *)")
    filters.add_argument("--sql", metavar="EXPRESSION",
                         help="SQL92 filter over message properties, e.g. \"region = 'eu' AND amount > 100\" "
                              "(the broker needs enablePropertyFilter=true)")
    p.add_argument("--broadcast", action="store_true", help="broadcasting instead of clustering")
    p.add_argument("--orderly", action="store_true", help="orderly consumption (queue locks)")
    p.add_argument("--from", dest="start", type=_from, default="last", metavar="first|last|TIMESTAMP",
                   help="where a queue without a committed offset starts (default last; TIMESTAMP: ms, "
                        "yyyyMMddHHmmss or ISO 8601)")
    p.add_argument("--count", type=int, help="stop after N messages")
    p.add_argument("--timeout", type=float, metavar="SECONDS", help="stop after SECONDS without a message")
    p.add_argument("--json", action="store_true", help="one JSON object per message")
    p.set_defaults(func=cmd_consume)


@hookimpl
def pyrmq_add_commands(subparsers: argparse._SubParsersAction, kernel_cli: Any) -> None:
    parent = namesrv_parent()
    _add_produce(subparsers, parent)
    _add_consume(subparsers, parent)
    add_admin_parser(subparsers, parent)
