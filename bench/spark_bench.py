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

Every Spark job runs once untimed over the whole topic first (``--warm-rounds``): the JVM compiles the Arrow, Parquet
reader and Parquet writer paths during the first large pass of each (2-4 CPU-seconds at 200k messages), so without it
whichever job ran first paid for the others (the remoting export, measured first, showed 0.53x and the store export
after it 0.96x; warm, they are within 15 % of each other). The timed runs then alternate (remoting, store, Parquet,
remoting, ...) and each row reports the median run with its CPU per message: this process with Spark's JVM and
Python workers, and the broker (on a shared machine the CPU figures move much less than the rates).

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


def process_cpu(pid: int) -> float:
    """User + system CPU seconds of a process (``/proc/<pid>/stat``); 0 where there is no /proc."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_cpu(root: int, skip: int) -> float:
    """CPU seconds of ``root`` and its descendants (here: this process, Spark's JVM and its Python workers), without
    the subtree of ``skip`` (the broker); those that exited are counted by their parent only once reaped."""
    children: dict[int, list[int]] = {}
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(pid)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        if pid == skip:
            continue
        total += process_cpu(pid)
        todo.extend(children.get(pid, []))
    return total


def alternate(jobs: dict[str, object], rounds: int, broker_pid: int) -> dict[str, tuple[float, float, float]]:
    """Run the jobs in turn ``rounds`` times; per job the run of median seconds: (seconds, broker CPU seconds,
    CPU seconds of this process tree: Spark's JVM and Python workers)."""
    runs: dict[str, list[tuple[float, float, float]]] = {label: [] for label in jobs}
    me = os.getpid()
    for _ in range(rounds):
        for label, fn in jobs.items():
            cpu, spark = process_cpu(broker_pid), tree_cpu(me, broker_pid)
            t = time.perf_counter()
            fn()  # type: ignore[operator]
            runs[label].append((time.perf_counter() - t, process_cpu(broker_pid) - cpu, tree_cpu(me, broker_pid) - spark))
    out = {}
    for label, got in runs.items():
        print(f"  {label}: {' '.join(f'{r:.1f}' for r, _, _ in got)} s", flush=True)
        out[label] = sorted(got)[(len(got) - 1) // 2]  # the lower median of an even count
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=1_000_000, help="messages of 1 KiB (default 1,000,000)")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ap.add_argument("--pull-cap", type=int, metavar="N", help="start the broker with maxTransferCountOnMessageInMemory=N "
                    "(and room for N x 1 KiB per pull); default: the broker's defaults (32 messages, 256 KiB)")
    ap.add_argument("--repeat", type=int, default=1, help="timed runs of each measurement (alternating); the median is reported")
    ap.add_argument("--warm-rounds", type=int, default=1, metavar="N",
                    help="untimed runs of every Spark job over the whole topic before the timed ones (default 1)")
    args = ap.parse_args()
    repeat = max(1, args.repeat)

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

        # start both Python workers (one partition per queue) before anything is timed
        export(os.path.join(work, "warm"), endingOffsets='{"broker-a": {"0": 1000, "1": 1000, "2": 1000, "3": 1000}}')

        labels = {
            "raw": "store raw read (1 process, no Spark)",
            "remoting": "export via remoting (pull) -> Parquet",
            "store": "export via storePath (mmap) -> Parquet",
            "parquet": "Spark Parquet -> Parquet (baseline)",
        }
        jobs = {
            "remoting": lambda: export(os.path.join(work, "remoting")),
            "store": lambda: export(os.path.join(work, "direct"), storePath=store),
            "parquet": lambda: spark.read.parquet(os.path.join(work, "remoting")).write.mode("overwrite").parquet(os.path.join(work, "copy")),
        }
        if args.warm_rounds > 0:
            t = time.perf_counter()
            alternate(jobs, args.warm_rounds, proc.pid)
            print(f"  (warm rounds, not counted: {time.perf_counter() - t:.1f} s)", flush=True)
        print("measuring ...", flush=True)
        timed = alternate({"raw": lambda: raw_store_read(namesrv, store, topic, args.count)}, repeat, proc.pid)
        timed.update(alternate(jobs, repeat, proc.pid))
        results = {labels[k]: v[0] for k, v in timed.items()}
        broker_cpu = {labels[k]: v[1] for k, v in timed.items()}
        spark_cpu = {labels[k]: v[2] for k, v in timed.items()}
        exported = spark.read.parquet(os.path.join(work, "direct")).count()
        if exported != args.count:
            print(f"  !! the direct export holds {exported} rows, expected {args.count}")
        spark.stop()

        mb = args.count * BODY_SIZE / 1e6
        print()
        # the data source's pulls carry largePull: a pyrmq broker caps them by largePullMaxCount (1024) and
        # largePullMaxBytes (4 MiB) unless the RocketMQ caps set here are larger
        cap = (f"broker pull caps raised to {args.pull_cap} messages" if args.pull_cap
               else "largePull pulls: broker caps 1024 messages / 4 MiB (its defaults)")
        warm = f"{args.warm_rounds} warm round(s)"
        print(f"{args.count:,} messages x {BODY_SIZE} B, {args.master}, {os.cpu_count()} CPUs, {cap}, {warm}, median of {repeat}")
        print(f"| {'measurement':<42} | {'seconds':>8} | {'messages/s':>11} | {'MB/s':>7} | {'CPU us/msg: Spark+Python':>24} | {'broker':>6} |")
        print(f"|{'-' * 44}|{'-' * 10}|{'-' * 13}|{'-' * 9}|{'-' * 26}|{'-' * 8}|")
        for label, dt in results.items():
            bcpu, scpu = broker_cpu[label] / args.count * 1e6, spark_cpu[label] / args.count * 1e6
            print(f"| {label:<42} | {dt:>8.1f} | {args.count / dt:>11,.0f} | {mb / dt:>7.1f} | {scpu:>24.1f} | {bcpu:>6.1f} |")
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
        print("CPU per message (all processes: Spark, Python workers, broker), Parquet->Parquet / export:")
        cpu = {k: spark_cpu[k] + broker_cpu[k] for k in results}
        base_cpu = cpu["Spark Parquet -> Parquet (baseline)"]
        for label, short in (("export via remoting (pull) -> Parquet", "remoting"), ("export via storePath (mmap) -> Parquet", "store   ")):
            if cpu[label] > 0:
                print(f"  export {short}: {base_cpu / cpu[label]:.2f}")
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
