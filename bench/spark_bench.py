"""Spark export benchmark: a topic of N x 1 KiB messages to Parquet with local[2], through remoting and the store.

    .venv/bin/python bench/spark_bench.py                 # 1,000,000 messages (about 1 GiB of commit log)
    .venv/bin/python bench/spark_bench.py --count 100000  # a quick run

Starts ``pyrmq dev`` in a subprocess with a fresh store, fills a 4-queue topic with batched sends, then measures
in the same run:

* store raw read   - one Python process walks the topic's consume queues and decodes every record straight from
                     the store files (the plugin's decoder, no Spark): the most the direct path can do per core;
* export remoting  - spark.read.format("pyrmq") (pipelined pulls) -> Parquet;
* export store     - the same with storePath (co-located mmap reads) -> Parquet;
* parquet -> parquet - Spark reading the exported rows from Parquet and writing them again (Spark's own fast path,
                     the same shape of job: the baseline the exports are compared with).

Prints a table of messages/s and MB/s (bodies) and the ratios. Figures depend on the machine (see
docs/performance.md); nothing here asserts.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

BODY_SIZE = 1024
QUEUES = 4


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_broker(store: str, pull_cap: int | None) -> tuple[subprocess.Popen, str, str]:
    ns, port = free_port(), free_port()
    extra = []
    if pull_cap:
        extra = ["--set", f"broker.maxTransferCountOnMessageInMemory={pull_cap}",
                 "--set", f"broker.maxTransferBytesOnMessageInMemory={pull_cap * 1100}"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "pyrmq", "dev", "--dashboard-port", "0", "--namesrv-port", str(ns), "--port", str(port), "--store-dir", store,
         "--set", "broker.grpcServerPort=0", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=dict(os.environ, PYRMQ_DISABLE_PLUGIN_AUTOLOAD="1"),
    )
    said = []  # log lines (warnings) may come before the ready line
    while proc.stdout is not None:
        said.append(proc.stdout.readline())
        if not said[-1] or "pyrmq dev:" in said[-1]:
            break
    if not said or "pyrmq dev:" not in said[-1]:
        proc.kill()
        sys.exit(f"pyrmq dev did not start: {''.join(said)}")
    return proc, f"127.0.0.1:{ns}", f"127.0.0.1:{port}"


def create_topic(namesrv: str, addr: str, topic: str) -> None:
    from pyrmq.remoting.blocking import BlockingRemotingClient
    from pyrmq.remoting.codes import RequestCode
    from pyrmq.remoting.command import RemotingCommand
    from pyrmq.remoting.headers import CreateTopicRequestHeader

    with BlockingRemotingClient() as c:
        h = CreateTopicRequestHeader(topic=topic, default_topic="TBW102", read_queue_nums=QUEUES, write_queue_nums=QUEUES, perm=6, topic_filter_type="SINGLE_TAG")
        assert c.invoke(addr, RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, h.to_ext_fields())).code == 0
        for _ in range(200):
            if c.invoke(namesrv, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})).code == 0:
                return
            time.sleep(0.05)
    sys.exit("the topic's route never reached the name server")


def fill(namesrv: str, topic: str, count: int) -> float:
    from pyrmq.client import BlockingProducer
    from pyrmq.spark_plugin.options import WriteOptions
    from pyrmq.spark_plugin.sink import BatchSender

    opts = WriteOptions.parse({"namesrv": namesrv, "topic": topic, "batchSize": "256"})
    body = os.urandom(BODY_SIZE // 2).hex().encode()[:BODY_SIZE]
    t = time.perf_counter()
    with BlockingProducer(namesrv, "bench-fill") as producer:
        sender = BatchSender(producer, opts)
        for i in range(count):
            sender.add(topic, body, {"TAGS": "bench", "KEYS": f"k{i}"})
        sender.flush_all()
    return time.perf_counter() - t


def raw_store_read(namesrv: str, store: str, topic: str, count: int) -> None:
    """Decode every record of the topic from the store files in this process (the plugin's decoder, no Spark)."""
    from pyrmq.spark_plugin.planning import open_consumer, read_queues
    from pyrmq.spark_plugin.records import Columns
    from pyrmq.spark_plugin.store_reader import StoreReader

    client = open_consumer(namesrv, "bench-raw-read", 10.0)
    try:
        ends = {mq.queue_id: client.max_offset(mq) for mq in read_queues(client, topic)}
    finally:
        client.shutdown()
    n = 0
    for qid, end in ends.items():
        reader = StoreReader(store, topic, qid)
        for cols in reader.read_into(Columns(topic, "broker-a", qid), 0, end, None, 8192):
            n += len(cols)
        reader.close()
    if n != count:
        print(f"  !! the raw read saw {n} messages, expected {count}")


REPEAT = 1


def timed(label: str, fn) -> float:  # type: ignore[no-untyped-def]
    """The median of REPEAT runs of ``fn``, in seconds."""
    runs = []
    for _ in range(REPEAT):
        t = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t)
    runs.sort()
    dt = runs[len(runs) // 2]
    print(f"  {label}: {' '.join(f'{r:.1f}' for r in runs)} s", flush=True)
    return dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=1_000_000, help="messages of 1 KiB (default 1,000,000)")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ap.add_argument("--pull-cap", type=int, metavar="N", help="start the broker with maxTransferCountOnMessageInMemory=N "
                    "(and room for N x 1 KiB per pull); default: the broker's defaults (32 messages, 256 KiB)")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each measurement; the median is reported")
    args = ap.parse_args()
    global REPEAT
    REPEAT = max(1, args.repeat)

    work = tempfile.mkdtemp(prefix="pyrmq-spark-bench-")
    store = os.path.join(work, "store")
    proc, namesrv, addr = start_broker(store, args.pull_cap)
    topic = "SparkBench"
    try:
        create_topic(namesrv, addr, topic)
        print(f"filling {topic} with {args.count:,} x {BODY_SIZE} B ...", flush=True)
        dt = fill(namesrv, topic, args.count)
        print(f"  filled in {dt:.1f} s ({args.count / dt:,.0f} msg/s batched sends)", flush=True)

        from pyrmq.spark_plugin import spark_session

        spark = spark_session(args.master, "pyrmq-spark-bench", {"spark.ui.enabled": "false", "spark.driver.memory": "2g"})
        spark.sparkContext.setLogLevel("ERROR")

        def export(path: str, **opts: str) -> None:
            r = spark.read.format("pyrmq").option("namesrv", namesrv).option("topic", topic)
            for k, v in opts.items():
                r = r.option(k, v)
            r.load().write.mode("overwrite").parquet(path)

        # warm the JVM and the Python workers once on a small range so neither export pays for it
        export(os.path.join(work, "warm"), endingOffsets='{"broker-a": {"0": 1000, "1": 0, "2": 0, "3": 0}}')

        results: dict[str, float] = {}
        print("measuring ...", flush=True)
        results["store raw read (1 process, no Spark)"] = timed("raw", lambda: raw_store_read(namesrv, store, topic, args.count))
        results["export via remoting (pull) -> Parquet"] = timed("remoting", lambda: export(os.path.join(work, "remoting")))
        results["export via storePath (mmap) -> Parquet"] = timed("store", lambda: export(os.path.join(work, "direct"), storePath=store))
        results["Spark Parquet -> Parquet (baseline)"] = timed(
            "parquet", lambda: spark.read.parquet(os.path.join(work, "remoting")).write.mode("overwrite").parquet(os.path.join(work, "copy"))
        )
        exported = spark.read.parquet(os.path.join(work, "direct")).count()
        if exported != args.count:
            print(f"  !! the direct export holds {exported} rows, expected {args.count}")
        spark.stop()

        mb = args.count * BODY_SIZE / 1e6
        print()
        cap = f"broker pull cap {args.pull_cap} messages" if args.pull_cap else "broker pull cap 32 messages (default)"
        print(f"{args.count:,} messages x {BODY_SIZE} B, {args.master}, {os.cpu_count()} CPUs, {cap}, median of {REPEAT}")
        print(f"| {'measurement':<42} | {'seconds':>8} | {'messages/s':>11} | {'MB/s':>7} |")
        print(f"|{'-' * 44}|{'-' * 10}|{'-' * 13}|{'-' * 9}|")
        for label, dt in results.items():
            print(f"| {label:<42} | {dt:>8.1f} | {args.count / dt:>11,.0f} | {mb / dt:>7.1f} |")
        base = results["Spark Parquet -> Parquet (baseline)"]
        remote = results["export via remoting (pull) -> Parquet"]
        direct = results["export via storePath (mmap) -> Parquet"]
        raw = results["store raw read (1 process, no Spark)"]
        print()
        print("ratios (throughput):")
        print(f"  export remoting / Parquet->Parquet: {base / remote:.2f}")
        print(f"  export store    / Parquet->Parquet: {base / direct:.2f}")
        print(f"  export store    / export remoting : {remote / direct:.2f}")
        print(f"  export store    / store raw read  : {raw / direct:.2f}  (2 Spark cores vs 1 plain process)")
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
