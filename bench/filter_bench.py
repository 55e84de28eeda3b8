"""Filter benchmark: SQL92 expressions compiled/s and evaluations/s, and the broker's pull-path CPU per delivered
message for a 10 %-selective SQL92 group vs a 10 %-selective tag group vs no filter on the same stored messages.

    python bench/filter_bench.py [--count 1000000] [--queues 8]

Baselines measured in the same run: Python's own ``compile()`` of the equivalent Python expression, and a
hand-written Python function over the same property dict (what a perfect compiler would give). The pull part
writes ``--count`` messages into a real MessageStore (1 GiB segments, in a temp dir; ``BENCH_DIR`` picks where)
and, for each group, pulls every queue from offset 0 to its end 32 messages at a time through
``MessageStore.get_message`` with the filter the broker's plugins compile (TAG: tags-code check on the consume
queue; SQL92 of a group not registered: the named properties read from the record and the expression evaluated;
SQL92 of a group registered before the messages arrived: the answers its filter got at dispatch) and measures
process CPU time (``time.process_time``). That is the broker's filter work per pull; request decoding and response
writing are the same for every group and are not included. The dispatch-time evaluation is measured on its own
(CPU per stored message). The over-the-wire part does the same against a ``pyrmq dev`` subprocess, its CPU read from
/proc. Never asserted anywhere.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from pyrmq.plugins.broker.consumer_filter import ConsumerFilterManager, FilterResultsDispatcher
from pyrmq.plugins.sql92 import compile_sql92
from pyrmq.plugins.sql92.message_filter import Sql92MessageFilter, record_properties
from pyrmq.plugins.broker.tag_filter import compile_tag_expression
from pyrmq.remoting.blocking import BlockingRemotingClient
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.store import MessageRecord, MessageStore, StoreConfig, encode_properties
from pyrmq.store.dispatch import DispatchRequest
from pyrmq.store.format import BatchEntry, encode_batch_body

SQL = "region = 'eu' AND amount BETWEEN 100 AND 499"  # 1/4 x 4/10 = 10 % of the stream below
TAG = "T3"  # one tag of ten
REGIONS = ("eu", "us", "apac", "latam")


def props_for(i: int, rng: random.Random) -> dict[str, str]:
    """What a Java producer's message carries: TAGS, KEYS, UNIQ_KEY, WAIT, plus four user properties."""
    return {
        "TAGS": f"T{i % 10}", "KEYS": f"order-{i}", "UNIQ_KEY": "7F0000010FA318B4AAC2%012X" % i, "WAIT": "true",
        "region": REGIONS[rng.randrange(4)], "amount": str(rng.randrange(1000)), "price": f"{rng.uniform(0, 100):.2f}",
        "vip": rng.choice(("true", "false")),
    }


def rate(fn, n: int) -> float:
    t0 = time.perf_counter()
    fn(n)
    return n / (time.perf_counter() - t0)


def bench_compile(n: int) -> tuple[float, float]:
    texts = [f"region = 'eu' AND amount BETWEEN {i} AND {i + 400} AND (vip = TRUE OR price > 50.5)" for i in range(n)]
    py = [f"p.get('region') == 'eu' and {i} <= int(p['amount']) <= {i + 400} and (p.get('vip') == 'true' or "
          f"float(p['price']) > 50.5)" for i in range(n)]

    def ours(k: int) -> None:
        for t in texts[:k]:
            compile_sql92(t)

    def python(k: int) -> None:
        for t in py[:k]:
            compile(t, "<expr>", "eval")

    return rate(ours, n), rate(python, n)


def bench_evaluate(n: int) -> dict[str, float]:
    rng = random.Random(7)
    dicts = [props_for(i, rng) for i in range(1024)]
    expr = compile_sql92(SQL)
    ev = expr._ev

    def hand(p: dict[str, str]) -> bool:
        region = p.get("region")
        amount = p.get("amount")
        return region == "eu" and amount is not None and 100 <= int(amount) <= 499

    def ours(k: int) -> None:
        for i in range(k):
            ev(dicts[i & 1023])

    def baseline(k: int) -> None:
        for i in range(k):
            hand(dicts[i & 1023])

    # the full commit-log check: the named properties read from a stored record, then the expression
    root = tempfile.mkdtemp(prefix="pyrmq-fbench-", dir=os.environ.get("BENCH_DIR"))
    try:
        store = MessageStore(StoreConfig(store_path_root_dir=root, message_index_enable=False))
        store.load()
        for i, p in enumerate(dicts):
            store.put_message(record("E", 0, p))
        r = store.get_message("g", "E", 0, 0, 32)
        views = [bytes(v) for v in r.buffers]
        r.release()
        store.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    f = Sql92MessageFilter(expr)
    mv = [memoryview(v) for v in views]

    def records(k: int) -> None:
        check = f.is_matched_by_commit_log
        for i in range(k):
            check(mv[i & 31])

    def decode_only(k: int) -> None:
        for i in range(k):
            record_properties(mv[i & 31])

    return {"expression on a dict": rate(ours, n), "hand-written Python on a dict": rate(baseline, n),
            "record -> named properties -> expression": rate(records, n),
            "record -> whole property map (not used)": rate(decode_only, n)}


def record(topic: str, queue_id: int, props: dict[str, str], body: bytes = b"x" * 100) -> MessageRecord:
    return MessageRecord(topic, queue_id, body, properties=props, properties_bytes=encode_properties(props).encode(),
                         born_timestamp=1, born_host=("10.0.0.2", 50000), store_host=("10.0.0.1", 10911))


def registered_filters(group: str, topic: str, expression: str) -> ConsumerFilterManager:
    """A group's SQL92 filter data as a heartbeat registers it (the broker's ConsumerFilterManager)."""
    filters = ConsumerFilterManager(compile_filter=lambda kind, text: Sql92MessageFilter(compile_sql92(text)),
                                    persist=lambda data: None)
    filters._register_one(topic, group, expression, "SQL92", 1)
    return filters


def bench_dispatch(n: int) -> float:
    """CPU seconds per stored message of evaluating one registered SQL92 filter at dispatch."""
    rng = random.Random(3)
    requests = []
    for i in range(n):
        req = DispatchRequest("F", 0, 0, 0, 0, 0, i, None, None, 0, 0, props_for(i, rng))
        requests.append(req)
    dispatcher = FilterResultsDispatcher(registered_filters("g", "F", SQL))
    dispatch = dispatcher.dispatch
    c0 = time.process_time()
    for req in requests:
        dispatch(req)
    return (time.process_time() - c0) / n


def bench_pull(count: int, queues: int) -> list[tuple[str, int, int, float, float]]:
    root = tempfile.mkdtemp(prefix="pyrmq-fbench-", dir=os.environ.get("BENCH_DIR"))
    rows = []
    try:
        # a consumer group whose SQL92 filter data was registered (heartbeat) before the messages arrived
        filters = registered_filters("g_registered", "F", SQL)
        store = MessageStore(StoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=1 << 30,
                                         message_index_enable=False), dispatchers=[FilterResultsDispatcher(filters)])
        store.load()
        registered = filters.get("F", "g_registered")
        assert registered is not None
        rng = random.Random(14)
        t0 = time.perf_counter()
        for i in range(count):
            store.put_message(record("F", i % queues, props_for(i, rng)))
        print(f"stored {count:,} messages in {queues} queues in {time.perf_counter() - t0:.1f} s")
        groups = [
            ("no filter", None),
            (f"TAG {TAG!r}", compile_tag_expression(TAG)),
            (f"SQL92 {SQL!r}, evaluated at pull time", Sql92MessageFilter(compile_sql92(SQL))),
            ("SQL92 (same), registered: answers kept at dispatch", registered.pull_filter),
        ]
        for name, message_filter in groups:
            delivered = scanned = 0
            c0, w0 = time.process_time(), time.perf_counter()
            for q in range(queues):
                offset = 0
                # what the pull path hands the store: per queue for registered filter data
                f = message_filter(q) if callable(message_filter) and not hasattr(message_filter, "is_matched_by_consume_queue") else message_filter
                while True:
                    r = store.get_message("g", "F", q, offset, 32, f)
                    if r.next_begin_offset == offset:
                        break
                    delivered += len(r.buffers)
                    scanned += r.next_begin_offset - offset
                    offset = r.next_begin_offset
                    r.release()
            cpu, wall = time.process_time() - c0, time.perf_counter() - w0
            rows.append((name, scanned, delivered, cpu, wall))
        store.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return rows


# -- over the wire: a `pyrmq dev` subprocess, its CPU from /proc ----------------------------------------------------

CLK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def proc_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK


def count_records(body: bytes) -> int:
    n = pos = 0
    while pos < len(body):
        pos += int.from_bytes(body[pos : pos + 4], "big")
        n += 1
    return n


def heartbeat(group: str, topic: str, expression: str) -> RemotingCommand:
    """A consumer's heartbeat registering its SQL92 subscription (version 1), as a running consumer sends it."""
    body = {"clientID": "127.0.0.1@filter_bench", "producerDataSet": [], "consumerDataSet": [{
        "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "unitMode": False, "subscriptionDataSet": [{
            "topic": topic, "subString": expression, "expressionType": "SQL92", "tagsSet": [], "codeSet": [],
            "subVersion": 1, "classFilterMode": False}]}]}
    return RemotingCommand.request(RequestCode.HEART_BEAT, {}, json.dumps(body).encode())


def bench_wire(count: int, queues: int) -> list[tuple[str, int, float, float]]:
    store = tempfile.mkdtemp(prefix="pyrmq-fbench-", dir=os.environ.get("BENCH_DIR"))
    ns_port, port = free_port(), free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pyrmq", "dev", "--dashboard-port", "0", "--namesrv-port", str(ns_port), "--port", str(port), "--store-dir", store,
         "--set", "broker.enablePropertyFilter=true"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )
    rows = []
    try:
        line = proc.stdout.readline().decode()  # type: ignore[union-attr]
        if "started" not in line:
            raise SystemExit(f"pyrmq dev did not start: {line}")
        addr = f"127.0.0.1:{port}"
        with BlockingRemotingClient() as client:
            create = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
                "topic": "W", "defaultTopic": "TBW102", "readQueueNums": str(queues), "writeQueueNums": str(queues),
                "perm": "6", "topicFilterType": "SINGLE_TAG"})
            assert client.invoke(addr, create).code == ResponseCode.SUCCESS
            # a running SQL92 consumer: registered before the messages arrive, heartbeats every 10 s (as Java's 30 s)
            beat = heartbeat("g_registered", "W", SQL)
            assert client.invoke(addr, beat).code == ResponseCode.SUCCESS
            last_beat = time.monotonic()
            rng = random.Random(14)
            t0 = time.perf_counter()
            c0 = proc_cpu(proc.pid)
            for start in range(0, count, 256):
                if time.monotonic() - last_beat > 10:
                    assert client.invoke(addr, beat).code == ResponseCode.SUCCESS
                    last_beat = time.monotonic()
                entries = [BatchEntry(0, b"x" * 100, encode_properties(props_for(i, rng)).encode())
                           for i in range(start, min(start + 256, count))]
                req = RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE, {
                    "a": "pg", "b": "W", "c": "TBW102", "d": queues, "e": (start // 256) % queues, "f": 0,
                    "g": int(time.time() * 1000), "h": 0, "i": "", "j": 0, "k": False, "m": True}, encode_batch_body(entries))
                resp = client.invoke(addr, req, timeout=30)
                assert resp.code == ResponseCode.SUCCESS, resp.remark
            print(f"sent {count:,} messages to a pyrmq dev subprocess in {time.perf_counter() - t0:.1f} s, broker CPU "
                  f"{(proc_cpu(proc.pid) - c0) / count * 1e6:.1f} us per message (one SQL92 group registered)")
            groups = [
                ("no filter", "TAG", "*", None), (f"TAG {TAG!r}", "TAG", TAG, None),
                ("SQL92 (10 %), group not registered: evaluated at pull time", "SQL92", SQL, None),
                ("SQL92 (10 %), registered group, subscription in the pull (ali-ons)", "SQL92", SQL, "g_registered"),
                ("SQL92 (10 %), registered group, no subscription in the pull (Java)", "SQL92", None, "g_registered"),
            ]
            for name, kind, expression, group in groups:
                delivered = 0
                b0, w0 = proc_cpu(proc.pid), time.perf_counter()
                fields = {"consumerGroup": group or f"g_{kind}_{len(rows)}", "topic": "W", "maxMsgNums": "32",
                          "sysFlag": "4" if expression else "0", "commitOffset": "0", "suspendTimeoutMillis": "0",
                          "subVersion": "1" if group else "0", "expressionType": kind}
                if expression:
                    fields["subscription"] = expression
                for q in range(queues):
                    offset = 0
                    while True:
                        if time.monotonic() - last_beat > 10:
                            assert client.invoke(addr, beat).code == ResponseCode.SUCCESS
                            last_beat = time.monotonic()
                        resp = client.invoke(addr, RemotingCommand.request(RequestCode.PULL_MESSAGE, {
                            **fields, "queueId": str(q), "queueOffset": str(offset)}), timeout=30)
                        if resp.code == ResponseCode.SUCCESS:
                            delivered += count_records(resp.body_bytes())
                        elif resp.code == ResponseCode.PULL_NOT_FOUND:
                            break
                        elif resp.code != ResponseCode.PULL_RETRY_IMMEDIATELY:
                            raise SystemExit(f"{name}: pull answered {resp.code} {resp.remark}")
                        offset = int(resp.ext_fields["nextBeginOffset"])
                rows.append((name, delivered, proc_cpu(proc.pid) - b0, time.perf_counter() - w0))
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(store, ignore_errors=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=1_000_000, help="stored messages for the pull part (default 1,000,000)")
    ap.add_argument("--queues", type=int, default=8)
    ap.add_argument("--compile", type=int, default=20_000, help="expressions compiled (default 20,000)")
    ap.add_argument("--evaluate", type=int, default=1_000_000, help="evaluations per variant (default 1,000,000)")
    ap.add_argument("--wire-count", type=int, help="messages for the over-the-wire part (default: --count)")
    args = ap.parse_args()
    print(f"pyrmq filter bench, python {sys.version.split()[0]}")
    ours, python = bench_compile(args.compile)
    print(f"\ncompile ({args.compile:,} distinct expressions of 4 conditions): {ours:,.0f}/s; "
          f"Python's compile() of the equivalent Python expression: {python:,.0f}/s (ratio {ours / python:.2f})")
    print(f"\nevaluate {SQL!r} ({args.evaluate:,} times, 8 properties per message):")
    for name, r in bench_evaluate(args.evaluate).items():
        print(f"  {name:40s} {r:12,.0f}/s  {1e6 / r:6.2f} us")
    print(f"\npull all of {args.count:,} stored messages, 32 per pull, per group:")
    per = bench_dispatch(min(args.count, 200_000))
    print(f"evaluating a registered SQL92 filter at dispatch: {per * 1e6:.2f} us CPU per stored message "
          f"({per * 1e7:.1f} us per delivered message at 10 % selectivity)")
    rows = bench_pull(args.count, args.queues)
    print("| group | scanned | delivered | CPU s | delivered/s | CPU us per delivered | vs TAG |")
    print("|---|---|---|---|---|---|---|")
    tag_cost = next(cpu / max(d, 1) for name, _, d, cpu, _ in rows if name.startswith("TAG"))
    for name, scanned, delivered, cpu, wall in rows:
        per = cpu / max(delivered, 1)
        print(f"| {name} | {scanned:,} | {delivered:,} | {cpu:.2f} | {delivered / wall:,.0f} | {per * 1e6:.2f} | "
              f"{per / tag_cost:.2f}x |")
    wire_count = args.wire_count or args.count
    print(f"\nover the wire: pyrmq dev subprocess, {wire_count:,} messages, PULL_MESSAGE with the subscription in the "
          "header, 32 per pull, one client; broker CPU from /proc/<pid>/stat:")
    rows = bench_wire(wire_count, args.queues)
    print("| group | delivered | broker CPU s | delivered/s | broker CPU us per delivered | vs TAG |")
    print("|---|---|---|---|---|---|")
    tag_cost = next(cpu / max(d, 1) for name, d, cpu, _ in rows if name.startswith("TAG"))
    for name, delivered, cpu, wall in rows:
        per = cpu / max(delivered, 1)
        print(f"| {name} | {delivered:,} | {cpu:.2f} | {delivered / wall:,.0f} | {per * 1e6:.2f} | {per / tag_cost:.2f}x |")


if __name__ == "__main__":
    main()

