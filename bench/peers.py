"""pyrmq beside its peers in one run: the Apache RocketMQ Java broker, and Redis 7 Streams (issues 12 and 18).

    .venv/bin/python bench/peers.py [--count 1000000] [--repeat 3] [--py-count 200000]     (or: make peers)

Part 1, broker against broker: `pyrmq namesrv` + `pyrmq broker` and the Apache RocketMQ 4.9.7 name server + broker
(Maven Central, run by tests/e2e/java/javabroker.py), each with a fresh store, driven by the same load generator,
bench/java/PeersLoad.java on the official Java client 4.9.8, so the broker is what is measured. 1 KiB bodies:
sync send with one in flight, 64 async sends in flight, batches of 100 (these store the ``--count`` messages), push
consumption of those ``--count`` stored messages (default 1,000,000, as the issue asks).

``--with-pop`` adds one run of bench/pop_peers.py: POP consumption (raw pop + batch ack, the push consumer's POP mode)
and pull consumption beside Apache RocketMQ 5.5.0, driven by the official 5.5.0 Java client.

``--with-grpc`` adds one run of bench/grpc_bench.py's peers rows: the official RocketMQ 5.x Python client over gRPC
against pyrmq and against Apache RocketMQ 5.5.0's proxy (local mode, its broker in the same JVM): send with 1 and 64
in flight, SimpleConsumer receive + ack, with the broker's CPU a message.

Part 2, what a Python user weighs us against: pyrmq's own client (``Producer`` / ``PushConsumer``) against pyrmq
beside redis-py + hiredis against ``redis-server`` 7 (AOF, appendfsync everysec): sync send one in flight (``Producer``
and, from a plain thread, ``BlockingProducer``), batches
of 100 (``send_batch`` vs a pipelined XADD), consumption of the ``--py-count`` stored messages (listener callback
and ``async for`` vs XREAD COUNT 1000).

``--before REV`` runs pyrmq as of a git revision too (its broker, and its Python client in a subprocess that imports
that tree; the current client then runs in a subprocess too), taking turns with the others, and prints a second
table: before and after side by side, each against the peer of the same run.

Per workload: messages/s (timed inside the client, after a warm-up), the server's CPU seconds over the workload
(utime + stime from /proc/<pid>/stat, every thread) and its RSS afterwards: VmRSS, which includes the mapped store
pages each server touched, and in brackets RssAnon, the process's own memory (the JVM's includes its heap). The
Python rows also give the client's CPU a message (process time of the process running the client; the before/after
table shows it): on a shared machine it is steadier than the rates. Medians of ``--repeat`` runs, the systems
alternating first and second. Figures are
printed, never asserted. Needs Java 17 + Maven (the jars are fetched once into ~/.cache/pyrmq), ``redis-server``
(apt-get install redis-server) and ``pip install redis hiredis`` in the venv.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "e2e" / "java"))

from javabroker import JavaRocketMQ, free_port  # noqa: E402
from javapeers import JavaPeerError, classpath, compile_sources, java_command  # noqa: E402

from pyrmq.client import Admin, BlockingProducer, Message, Producer, PushConsumer  # noqa: E402
from pyrmq.client.plugins import allocate_strategies  # noqa: E402

CLK = os.sysconf("SC_CLK_TCK")
#: the Python part's consume rows run twice: at the client's defaults (RocketMQ's pullBatchSize of 32; from issue 29
#: on, pyrmq's client grows its pulls with the backlog up to 256, flagged largePull, docs/decisions.md), and with
#: pulls of PULL_TUNED, for which its broker gets these caps (RocketMQ's maxTransferCountOnMessageInMemory; a client
#: asking 32 gets 32 either way)
PULL_TUNED = 256
PULL_TUNED_SETS = (f"maxTransferCountOnMessageInMemory={PULL_TUNED}", "maxTransferBytesOnMessageInMemory=4194304")
BODY = b"x" * 1024
T0 = time.monotonic()


def progress(text: str) -> None:
    print(f"[{time.monotonic() - T0:7.1f} s] {text}", file=sys.stderr, flush=True)


def proc_cpu(pid: int) -> float:
    """utime + stime of a process (all its threads), seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK


def proc_rss_mib(pid: int) -> tuple[float, float]:
    """(VmRSS, RssAnon) in MiB: resident in total (with the mapped store pages) and the process's own memory."""
    values = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "RssAnon"):
                values[key] = int(rest.split()[0]) / 1024
    return values.get("VmRSS", 0.0), values.get("RssAnon", 0.0)


def stop_process(proc: subprocess.Popen) -> None:
    """SIGTERM, up to 60 s for a clean exit (a broker's final flush), then SIGKILL."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)


# ---- the servers ----------------------------------------------------------------------------------------------------


class PyrmqServer:
    """`pyrmq namesrv` + `pyrmq broker` subprocesses on a fresh store; ``pid`` is the broker's."""

    name = "pyrmq"

    def __init__(self, work: Path, source: Path | None = None, sets: tuple[str, ...] = ()) -> None:
        """``source``: a directory holding another ``pyrmq`` tree (``--before``) to run instead of this one;
        ``sets``: broker.conf overrides (``--set KEY=VALUE``)."""
        if source is not None:
            self.name = "pyrmq_before"
        self.store = work / f"{self.name}-store"
        self.log = open(work / f"{self.name}.log", "ab")
        env = dict(os.environ, PYRMQ_DISABLE_PLUGIN_AUTOLOAD="1")
        if source is not None:
            env["PYTHONPATH"] = str(source)
        self.procs: list[subprocess.Popen] = []
        self.namesrv_addr = self._start(["namesrv", "--listen", "127.0.0.1:0"], env)
        self.broker_addr = self._start(["broker", "-c", "broker", "--namesrv", self.namesrv_addr, "--listen",
                                        f"127.0.0.1:{free_port()}", "--store-dir", str(self.store),
                                        *(arg for kv in sets for arg in ("--set", kv))], env)
        self.pid = self.procs[-1].pid

    def _start(self, args: list[str], env: dict[str, str]) -> str:
        proc = subprocess.Popen([sys.executable, "-m", "pyrmq", *args], stdout=subprocess.PIPE, stderr=self.log,
                                env=env, cwd=str(ROOT))
        self.procs.append(proc)
        line = proc.stdout.readline().decode()  # the ready line: "pyrmq <role>: <role> on <addr>, ... (started ...)"
        if " on " not in line:
            self.stop()
            raise SystemExit(f"pyrmq {args[0]} did not start: {line!r}; see {self.log.name}")
        return line.split(" on ", 1)[1].split(",")[0].split(" ")[0].strip()

    def stop(self) -> None:
        for proc in reversed(self.procs):
            stop_process(proc)
        self.log.close()
        shutil.rmtree(self.store, ignore_errors=True)


class JavaServer:
    """The Apache RocketMQ 4.9.7 name server + broker on a fresh store; ``pid`` is the broker JVM's."""

    name = "java"

    def __init__(self, work: Path) -> None:
        self.store = work / "java-store"
        self.rmq = JavaRocketMQ(work / "java-home", self.store, broker_heap="1g").start()
        self.namesrv_addr, self.broker_addr = self.rmq.namesrv_addr, self.rmq.broker_addr
        self.pid = self.rmq.broker.pid

    def stop(self) -> None:
        self.rmq.stop()
        shutil.rmtree(self.store, ignore_errors=True)


class RedisServer:
    """``redis-server`` 7 on a free loopback port, AOF with appendfsync everysec, its own dir; stopped by pid."""

    name = "redis"

    def __init__(self, work: Path) -> None:
        self.dir = work / "redis"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.proc = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.dir),
             "--appendonly", "yes", "--appendfsync", "everysec", "--save", "", "--daemonize", "no",
             "--logfile", str(self.dir / "redis.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
        )
        self.pid = self.proc.pid
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise SystemExit(f"redis-server did not start; see {self.dir / 'redis.log'}") from None
                time.sleep(0.05)

    def stop(self) -> None:
        stop_process(self.proc)
        shutil.rmtree(self.dir, ignore_errors=True)


class RawEchoServer:
    """The floor of a Python server here: a subprocess (``peers.py --raw-server blocking|trio``) that reads
    RocketMQ frames (4-byte length prefix) and answers each with the same bytes pyrmq's broker answers a
    SEND_MESSAGE_V2 with, doing nothing else: no decode, no store. ``blocking``: one thread on a blocking socket;
    ``trio``: a trio task on a non-blocking one, as pyrmq's broker reads (``remoting/connection.py``)."""

    def __init__(self, work: Path, kind: str, answer: bytes) -> None:
        self.name = f"raw_{kind}"
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--raw-server", kind, answer.hex()],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        )
        self.pid = self.proc.pid
        line = self.proc.stdout.readline().decode().strip()
        if not line.isdigit():
            self.stop()
            raise SystemExit(f"the raw {kind} echo server did not start: {line!r}")
        self.port = int(line)

    def stop(self) -> None:
        stop_process(self.proc)


def raw_server_main(kind: str, answer: bytes) -> None:
    """``--raw-server``: listen on a free loopback port, print it, answer every frame on one connection with
    ``answer`` (its opaque patched to the request's, so a client could match it) until the peer closes."""
    import struct

    head = struct.Struct(">i")
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(1)
    print(lst.getsockname()[1], flush=True)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))

    def frames(buf: bytearray):
        while len(buf) >= 4:
            n = head.unpack_from(buf)[0] + 4
            if len(buf) < n:
                return
            del buf[:n]
            yield answer

    if kind == "blocking":
        conn, _ = lst.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = bytearray()
        while data := conn.recv(65536):
            buf += data
            for out in frames(buf):
                conn.sendall(out)
        return

    async def serve() -> None:
        tlst = trio.socket.from_stdlib_socket(lst)
        conn, _ = await tlst.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = bytearray()
        while data := await conn.recv(65536):
            buf += data
            for out in frames(buf):
                await conn.send(out)

    trio.run(serve)


def send_frames() -> tuple[bytes, bytes]:
    """(request, answer): the bytes of a SEND_MESSAGE_V2 of a 1 KiB body as ``Producer`` encodes it, and of the
    SEND_OK answer pyrmq's broker gives (its header fields, with values of the same length)."""
    from pyrmq.client.message import MessageQueue

    producer = Producer("127.0.0.1:9876", "peers_py_raw")
    p = producer._prepare(Message("PySend", BODY))
    request = producer._request(p, MessageQueue("PySend", "broker-a", 0), int(time.time() * 1000))
    parts: list = []
    request.encode_into(parts)
    answer = request.make_response(0, None, {
        "MSG_REGION": "DefaultRegion", "TRACE_ON": "true", "msgId": "7F00000100002A9F00000000000F4240",
        "queueId": "0", "queueOffset": "123456",
    })
    answer.flag |= 1  # RPC_RESPONSE
    out: list = []
    answer.encode_into(out)
    return b"".join(parts), b"".join(out)


def consume_floor(rounds: int = 2_000) -> dict[str, float]:
    """Client CPU a message for the least a Python consumer does with pulled bytes, in this process, warm: 32
    stored 1 KiB records (what one pull answers) decoded by ``decode_messages`` (pyrmq's client, lazy fields) and
    by a bare loop (one struct unpack and the body slice a record), each message then handed to a no-op
    callback. pyrmq's consumer pays this plus its pulls, process queue and offsets; redis-py + hiredis decode XREAD
    in C."""
    from pyrmq.client.message import decode_messages
    from pyrmq.remoting.message import HEADER_STRUCTS, encode_record

    now = int(time.time() * 1000)
    body = b"".join(
        encode_record(
            queue_id=0, flag=0, queue_offset=i, commit_log_offset=i * 1200, sys_flag=0, born_timestamp=now,
            born_host=("127.0.0.1", 50000), store_timestamp=now, store_host=("127.0.0.1", 10911), reconsume_times=0,
            prepared_transaction_offset=0, body=BODY, topic=b"PyStore",
            properties=b"UNIQ_KEY\x017F0000010001B4AAC6DC1A2E2C0000" + b"%04d" % i + b"\x02",
        )
        for i in range(32)
    )
    unpack = HEADER_STRUCTS[0].unpack_from
    head = HEADER_STRUCTS[0].size

    def noop(msg: object) -> None:
        pass

    def bare(buf: bytes) -> None:
        pos, n = 0, len(buf)
        while pos < n:
            h = unpack(buf, pos)
            noop(buf[pos + head:pos + head + h[16]])
            pos += h[0]

    out = {}
    for name, fn in (("decode_messages", lambda: [noop(m) for m in decode_messages(body)]), ("bare", lambda: bare(body))):
        fn()
        c0 = time.process_time()
        for _ in range(rounds):
            fn()
        out[name] = (time.process_time() - c0) / (rounds * 32) * 1e6
    return out


def part2_raw(server: RawEchoServer, request: bytes, sizes: dict[str, int]) -> dict[str, dict]:
    """One request in flight over a blocking socket, as ``BlockingProducer`` sends: the same bytes each way."""
    n_sync = sizes["py_sync"]
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        want = len(bytes.fromhex(server.proc.args[-1]))

        def round_trip() -> None:
            sock.sendall(request)
            got = 0
            while got < want:
                chunk = sock.recv(65536)
                if not chunk:
                    raise SystemExit(f"{server.name} closed the connection")
                got += len(chunk)

        for _ in range(200):
            round_trip()
        with Timed(server.pid) as t:
            for _ in range(n_sync):
                round_trip()
    return {"py_sync": t.row(n_sync)}


# ---- part 1: the Java load generator against either broker ----------------------------------------------------------


def java_load(classes: Path, server, work: Path, *args: object, limit: float = 3600) -> dict:
    """Run PeersLoad; the server's CPU is sampled at its ``start`` line and at its result line."""
    return java_load_with("client", "PeersLoad", classes, server, work, *args, limit=limit)


def java_load_with(kind: str, main_class: str, classes: Path, server, work: Path, *args: object,
                   limit: float = 3600) -> dict:
    """Run a load generator of ``kind``'s classpath (PeersLoad, bench/pop_peers.py's PopLoad) that prints
    ``{"phase":"start"}`` and a result line; the server's CPU is sampled at the two."""
    argv = java_command(kind, main_class, *map(str, args), extra_classpath=[classes], heap="1g",
                        props={"user.home": str(work / "java-client")})
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killer = threading.Timer(limit, proc.kill)
    killer.start()
    cpu0 = proc_cpu(server.pid)
    result = None
    try:
        for line in proc.stdout:
            if not line.startswith("{"):
                continue
            data = json.loads(line)
            if data.get("phase") == "start":
                cpu0 = proc_cpu(server.pid)
            elif "mode" in data:
                result = data
                result["cpu"] = proc_cpu(server.pid) - cpu0
                result["rss"], result["anon"] = proc_rss_mib(server.pid)
        code = proc.wait()
    finally:
        killer.cancel()
    if code != 0 or result is None:
        raise SystemExit(f"{main_class} {args[0]} against {server.name} failed ({code}):\n{proc.stderr.read()[-3000:]}")
    return result


def part1(server, classes: Path, work: Path, sizes: dict[str, int]) -> dict[str, dict]:
    java_load(classes, server, work, "topics", server.namesrv_addr, server.broker_addr, 8, "PeersSend", "PeersStore")
    out = {}
    for workload, args in (
        ("sync", ("sync", server.namesrv_addr, "PeersSend", sizes["sync"])),
        ("async64", ("async", server.namesrv_addr, "PeersSend", sizes["async"], 64)),
        ("batch100", ("batch", server.namesrv_addr, "PeersStore", sizes["count"], 100)),
        ("consume", ("consume", server.namesrv_addr, "peers_consumer", "PeersStore", sizes["count"])),
    ):
        r = java_load(classes, server, work, *args)
        out[workload] = {"rate": r["count"] / r["seconds"], "cpu": r["cpu"], "rss": r["rss"], "anon": r["anon"],
                         "errors": r["errors"]}
        progress(f"  {server.name:5s} {workload:9s} {r['count']:>9,} msgs  {out[workload]['rate']:>10,.0f} msgs/s  "
                 f"cpu {r['cpu']:6.1f} s  rss {r['rss']:6.0f} MiB (anon {r['anon']:.0f})" + (f"  {r['errors']} FAILED" if r["errors"] else ""))
    return out


# ---- part 2: pyrmq's Python client against pyrmq, redis-py against Redis Streams -------------------------------


class Timed:
    def __init__(self, pid: int) -> None:
        self.pid = pid

    def __enter__(self) -> Timed:
        self.cpu0, self.t0, self.own0 = proc_cpu(self.pid), time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.t0
        self.own = time.process_time() - self.own0  # the client's CPU: this process runs the client and nothing else
        self.cpu = proc_cpu(self.pid) - self.cpu0
        self.rss, self.anon = proc_rss_mib(self.pid)

    def row(self, n: int) -> dict:
        return {"rate": n / self.seconds, "cpu": self.cpu, "rss": self.rss, "anon": self.anon,
                "client_us": self.own / n * 1e6}


def part2_pyrmq(server: PyrmqServer, sizes: dict[str, int]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    n_sync, n = sizes["py_sync"], sizes["py_count"]

    async def main() -> None:
        async with Admin(server.namesrv_addr) as admin:
            for topic in ("PySend", "PyStore"):
                await admin.create_topic(topic, 8, broker_addr=server.broker_addr)
        async with Producer(server.namesrv_addr, "peers_py_producer") as producer:
            for _ in range(200):  # warm-up: routes, connections
                await producer.send(Message("PySend", BODY))
            with Timed(server.pid) as t:
                for _ in range(n_sync):
                    await producer.send(Message("PySend", BODY))
            out["py_sync"] = t.row(n_sync)
            with Timed(server.pid) as t:
                for start in range(0, n, 100):
                    await producer.send_batch([Message("PyStore", BODY) for _ in range(min(100, n - start))])
            out["py_batch100"] = t.row(n)

        # the first consumer of a process imports the kernel's plugin loader for its allocation strategies
        # (~70 ms, once); redis-py's imports are done before its timing too
        allocate_strategies()
        for pull, suffix in ((32, ""), (PULL_TUNED, str(PULL_TUNED))):
            count = [0]
            finished = trio.Event()

            async def on_message(msg) -> None:
                count[0] += 1
                if count[0] >= n:
                    finished.set()

            with Timed(server.pid) as t:
                async with PushConsumer(server.namesrv_addr, f"peers_py_listener{suffix}", subscribe={"PyStore": "*"},
                                        listener=on_message, consume_from="first", pull_batch_size=pull):
                    with trio.fail_after(1800):
                        await finished.wait()
            out[f"py_consume_listener{suffix}"] = t.row(n)

            with Timed(server.pid) as t:
                async with PushConsumer(server.namesrv_addr, f"peers_py_iter{suffix}", subscribe={"PyStore": "*"},
                                        consume_from="first", pull_batch_size=pull) as consumer:
                    got = 0
                    with trio.fail_after(1800):
                        async for _msg in consumer:
                            got += 1
                            if got >= n:
                                break
            out[f"py_consume_iter{suffix}"] = t.row(n)

    trio.run(main)

    # plain threads: BlockingProducer, one thread, one send in flight (outside the trio run: it has its own loop)
    with BlockingProducer(server.namesrv_addr, "peers_py_blocking") as blocking:
        for _ in range(200):
            blocking.send(Message("PySend", BODY))
        with Timed(server.pid) as t:
            for _ in range(n_sync):
                blocking.send(Message("PySend", BODY))
        out["py_sync_blocking"] = t.row(n_sync)
    return out


def part2_pyrmq_process(server: PyrmqServer, sizes: dict[str, int], source: Path | None) -> dict[str, dict]:
    """:func:`part2_pyrmq` in a fresh subprocess; with ``source`` (``--before``) it imports that tree's client.
    With ``--before`` both pyrmq clients run this way, so neither inherits this long-lived process's heap."""
    spec = {"namesrv": server.namesrv_addr, "broker": server.broker_addr, "pid": server.pid, "sizes": sizes}
    env = dict(os.environ)
    if source is not None:
        env["PYTHONPATH"] = str(source)
    out = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--client-part", json.dumps(spec)],
        env=env, cwd=str(ROOT), capture_output=True, timeout=3600,
    )
    if out.returncode != 0:
        raise SystemExit(f"the pyrmq client part failed:\n{out.stderr.decode()[-3000:]}")
    return json.loads(out.stdout.decode().strip().splitlines()[-1])


class _Addresses:
    """A running server's addresses, for :func:`part2_pyrmq` in the ``--client-part`` subprocess."""

    def __init__(self, spec: dict) -> None:
        self.namesrv_addr, self.broker_addr, self.pid = spec["namesrv"], spec["broker"], spec["pid"]


def checkout(rev: str, into: Path) -> Path:
    """``git archive`` of ``rev`` unpacked as ``into/pyrmq``: a tree to put first on PYTHONPATH."""
    (into / "pyrmq").mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True, timeout=120)
    subprocess.run(["tar", "-x", "-C", str(into / "pyrmq")], input=archive.stdout, check=True, timeout=120)
    return into


def part2_redis(server: RedisServer, sizes: dict[str, int]) -> dict[str, dict]:
    import redis

    out: dict[str, dict] = {}
    n_sync, n = sizes["py_sync"], sizes["py_count"]
    r = redis.Redis(host="127.0.0.1", port=server.port)
    for _ in range(200):
        r.xadd("warm", {"body": BODY})
    with Timed(server.pid) as t:
        for _ in range(n_sync):
            r.xadd("send", {"body": BODY})
    out["py_sync"] = t.row(n_sync)
    with Timed(server.pid) as t:
        for start in range(0, n, 100):
            pipe = r.pipeline(transaction=False)
            for _ in range(min(100, n - start)):
                pipe.xadd("store", {"body": BODY})
            pipe.execute()
    out["py_batch100"] = t.row(n)
    with Timed(server.pid) as t:
        last, got = "0-0", 0
        while got < n:
            reply = r.xread({"store": last}, count=1000, block=5000)
            if not reply:
                raise SystemExit(f"XREAD found nothing after {got} of {n} entries")
            entries = reply[0][1]
            got += len(entries)
            last = entries[-1][0]
    out["py_consume"] = t.row(n)
    r.close()
    return out


# ---- driver ---------------------------------------------------------------------------------------------------------


def check_setup() -> None:
    missing = []
    if shutil.which("redis-server") is None:
        missing.append("redis-server: apt-get install redis-server")
    try:
        import hiredis  # noqa: F401
        import redis  # noqa: F401
    except ImportError:
        missing.append(f"redis-py + hiredis: {sys.executable} -m pip install redis hiredis")
    if missing:
        raise SystemExit("bench/peers.py needs " + "; ".join(missing))


def median(rows: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def table(results: dict[str, dict[str, list[dict]]], sizes: dict[str, int]) -> str:
    rows = [
        ("Java client: sync send, 1 in flight", "pyrmq", "java", "sync", "sync", f"{sizes['sync']:,}"),
        ("Java client: async send, 64 in flight", "pyrmq", "java", "async64", "async64", f"{sizes['async']:,}"),
        ("Java client: batches of 100", "pyrmq", "java", "batch100", "batch100", f"{sizes['count']:,}"),
        ("Java client: push consume stored", "pyrmq", "java", "consume", "consume", f"{sizes['count']:,}"),
        ("Python: sync send, 1 in flight", "pyrmq_py", "redis", "py_sync", "py_sync", f"{sizes['py_sync']:,}"),
        ("Python: BlockingProducer sync send, 1 in flight", "pyrmq_py", "redis", "py_sync_blocking", "py_sync",
         f"{sizes['py_sync']:,}"),
        ("Python: batches of 100 (pipelined XADD)", "pyrmq_py", "redis", "py_batch100", "py_batch100",
         f"{sizes['py_count']:,}"),
        ("Python: consume stored, listener (XREAD 1000)", "pyrmq_py", "redis", "py_consume_listener", "py_consume",
         f"{sizes['py_count']:,}"),
        ("Python: consume stored, async for (XREAD 1000)", "pyrmq_py", "redis", "py_consume_iter", "py_consume",
         f"{sizes['py_count']:,}"),
        (f"Python: consume stored, listener, pulls of {PULL_TUNED} (XREAD 1000)", "pyrmq_py", "redis",
         f"py_consume_listener{PULL_TUNED}", "py_consume", f"{sizes['py_count']:,}"),
        (f"Python: consume stored, async for, pulls of {PULL_TUNED} (XREAD 1000)", "pyrmq_py", "redis",
         f"py_consume_iter{PULL_TUNED}", "py_consume", f"{sizes['py_count']:,}"),
    ]
    peer_name = {"java": "RocketMQ 4.9.7", "redis": "Redis 7 Streams"}
    lines = [
        "| workload (1 KiB bodies) | msgs | peer | pyrmq msgs/s | peer msgs/s | pyrmq / peer | pyrmq CPU s | peer CPU s "
        "| pyrmq RSS MiB (anon) | peer RSS MiB (anon) |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, ours, peer, our_key, peer_key, msgs in rows:
        a = results.get(ours, {}).get(our_key)
        b = results.get(peer, {}).get(peer_key)
        if not a or not b:
            continue
        ra, rb = median(a, "rate"), median(b, "rate")
        lines.append(
            f"| {label} | {msgs} | {peer_name[peer]} | {ra:,.0f} | {rb:,.0f} | {ra / rb:.2f}x | {median(a, 'cpu'):.1f} "
            f"| {median(b, 'cpu'):.1f} | {median(a, 'rss'):.0f} ({median(a, 'anon'):.0f}) "
            f"| {median(b, 'rss'):.0f} ({median(b, 'anon'):.0f}) |"
        )
    failed = [f"{system} {workload}: {sum(r.get('errors', 0) for r in runs)}"
              for system, by_workload in results.items() for workload, runs in by_workload.items()
              if any(r.get("errors") for r in runs)]
    if failed:
        lines.append("")
        lines.append("sends that failed (counted in the rates): " + ", ".join(failed))
    return "\n".join(lines)


def table_floor(results: dict[str, dict[str, list[dict]]], sizes: dict[str, int]) -> str:
    """One request in flight: pyrmq and Redis beside Python servers that only answer (:class:`RawEchoServer`)."""
    rows = [
        ("redis-py XADD -> Redis 7", "redis", "py_sync"),
        ("blocking socket -> raw Python server, blocking socket (answers, nothing else)", "raw_blocking", "py_sync"),
        ("blocking socket -> raw Python server, trio (answers, nothing else)", "raw_trio", "py_sync"),
        ("BlockingProducer -> pyrmq broker", "pyrmq_py", "py_sync_blocking"),
        ("Producer (trio) -> pyrmq broker", "pyrmq_py", "py_sync"),
    ]
    redis = results.get("redis", {}).get("py_sync")
    lines = [
        f"One request in flight, {sizes['py_sync']:,} round trips: the raw servers get the bytes of a 1 KiB "
        "SEND_MESSAGE_V2 and send back the bytes of pyrmq's SEND_OK answer",
        "",
        "| client -> server | msgs/s | / Redis | server CPU us a request | client CPU us a request |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, system, key in rows:
        runs = results.get(system, {}).get(key)
        if not runs:
            continue
        rate = median(runs, "rate")
        vs = f"{rate / median(redis, 'rate'):.2f}x" if redis else "-"
        lines.append(f"| {label} | {rate:,.0f} | {vs} | {median(runs, 'cpu') / sizes['py_sync'] * 1e6:.1f} "
                     f"| {median(runs, 'client_us'):.1f} |")
    return "\n".join(lines)


def table_before(results: dict[str, dict[str, list[dict]]], sizes: dict[str, int], rev: str) -> str:
    """pyrmq before (``--before REV``) and after (this tree) side by side, each against its peer of the same run."""
    rows = [
        ("Java client: sync send, 1 in flight", "pyrmq", "java", "sync", "sync"),
        ("Java client: async send, 64 in flight", "pyrmq", "java", "async64", "async64"),
        ("Java client: batches of 100", "pyrmq", "java", "batch100", "batch100"),
        ("Java client: push consume stored", "pyrmq", "java", "consume", "consume"),
        ("Python: sync send, 1 in flight", "pyrmq_py", "redis", "py_sync", "py_sync"),
        ("Python: BlockingProducer sync send, 1 in flight", "pyrmq_py", "redis", "py_sync_blocking", "py_sync"),
        ("Python: batches of 100 (pipelined XADD)", "pyrmq_py", "redis", "py_batch100", "py_batch100"),
        ("Python: consume stored, listener (XREAD 1000)", "pyrmq_py", "redis", "py_consume_listener", "py_consume"),
        ("Python: consume stored, async for (XREAD 1000)", "pyrmq_py", "redis", "py_consume_iter", "py_consume"),
        (f"Python: consume stored, listener, pulls of {PULL_TUNED} (XREAD 1000)", "pyrmq_py", "redis",
         f"py_consume_listener{PULL_TUNED}", "py_consume"),
        (f"Python: consume stored, async for, pulls of {PULL_TUNED} (XREAD 1000)", "pyrmq_py", "redis",
         f"py_consume_iter{PULL_TUNED}", "py_consume"),
    ]
    lines = [
        f"| workload (1 KiB bodies) | before ({rev}) msgs/s | after msgs/s | after / before | peer msgs/s "
        "| before / peer | after / peer | before CPU s | after CPU s "
        "| server CPU us/msg before / after / peer | client CPU us/msg before / after / peer |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    #: messages a workload moves (what its server CPU is divided by)
    msgs = {"sync": sizes["sync"], "async64": sizes["async"], "batch100": sizes["count"], "consume": sizes["count"],
            "py_sync": sizes["py_sync"], "py_sync_blocking": sizes["py_sync"]}

    def server_us(key: str, *runs: list[dict]) -> str:
        n = msgs.get(key, sizes["py_count"])
        return " / ".join(f"{median(r, 'cpu') / n * 1e6:.1f}" for r in runs)

    def client_us(*runs: list[dict]) -> str:
        if not all(r and "client_us" in r[0] for r in runs):
            return "-"  # the Java load generator's CPU is not measured
        return " / ".join(f"{median(r, 'client_us'):.1f}" for r in runs)

    for label, ours, peer, our_key, peer_key in rows:
        a = results.get(ours, {}).get(our_key)
        b = results.get(ours + "_before", {}).get(our_key)
        c = results.get(peer, {}).get(peer_key)
        if not a or not b or not c:
            continue
        ra, rb, rc = median(a, "rate"), median(b, "rate"), median(c, "rate")
        lines.append(
            f"| {label} | {rb:,.0f} | {ra:,.0f} | {ra / rb:.2f}x | {rc:,.0f} | {rb / rc:.2f}x | {ra / rc:.2f}x "
            f"| {median(b, 'cpu'):.1f} | {median(a, 'cpu'):.1f} | {server_us(our_key, b, a, c)} | {client_us(b, a, c)} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=1_000_000,
                    help="messages stored by the batch workload and push-consumed (default 1,000,000)")
    ap.add_argument("--sync-count", type=int, default=None, help="sync sends (default count/50, at least 2,000)")
    ap.add_argument("--async-count", type=int, default=None, help="async sends (default count/10, at least 10,000)")
    ap.add_argument("--py-count", type=int, default=200_000, help="Python part: messages stored and consumed")
    ap.add_argument("--py-sync-count", type=int, default=20_000, help="Python part: sync sends")
    ap.add_argument("--repeat", type=int, default=3, help="runs per system; the table shows medians")
    ap.add_argument("--skip", default="", help="comma list of parts to leave out: java,python")
    ap.add_argument("--with-pop", action="store_true",
                    help="also run bench/pop_peers.py once (POP consumption beside Apache RocketMQ 5.5.0, with the "
                         "5.5.0 Java client) with --pop-count messages")
    ap.add_argument("--pop-count", type=int, default=200_000, help="--with-pop: messages timed per POP workload")
    ap.add_argument("--with-grpc", action="store_true",
                    help="also run bench/grpc_bench.py's peers rows once (the official Python 5.x client over gRPC, "
                         "pyrmq beside Apache RocketMQ 5.5.0's proxy) with --grpc-count messages a row")
    ap.add_argument("--grpc-count", type=int, default=3_000, help="--with-grpc: messages a row")
    ap.add_argument("--before", metavar="REV", default=None,
                    help="also run pyrmq as of this git revision (broker and Python client), alternating with the "
                         "others, and print a before/after table")
    ap.add_argument("--client-part", default=None, help=argparse.SUPPRESS)  # internal: the --before client
    ap.add_argument("--raw-server", nargs=2, default=None, help=argparse.SUPPRESS)  # internal: RawEchoServer
    args = ap.parse_args()
    if args.raw_server:
        raw_server_main(args.raw_server[0], bytes.fromhex(args.raw_server[1]))
        return
    if args.client_part:
        spec = json.loads(args.client_part)
        print(json.dumps(part2_pyrmq(_Addresses(spec), spec["sizes"])))
        return
    skip = {s for s in args.skip.split(",") if s}
    sizes = {
        "count": args.count,
        "sync": args.sync_count or max(2_000, args.count // 50),
        "async": args.async_count or max(10_000, args.count // 10),
        "py_count": args.py_count,
        "py_sync": args.py_sync_count,
    }
    if "python" not in skip:
        check_setup()
    classes = None
    try:
        if "java" not in skip:
            classes = compile_sources(ROOT / "bench" / "java", "client")
            classpath("server")
    except JavaPeerError as exc:
        raise SystemExit(str(exc)) from None

    results: dict[str, dict[str, list[dict]]] = {}

    def keep(system: str, figures: dict[str, dict]) -> None:
        for workload, row in figures.items():
            results.setdefault(system, {}).setdefault(workload, []).append(row)

    progress(f"sizes {sizes}, {args.repeat} run(s) each, {os.cpu_count()} CPUs, load average {os.getloadavg()}")
    before_dir = Path(tempfile.mkdtemp(prefix="pyrmq-before-")) if args.before else None
    before = checkout(args.before, before_dir) if before_dir else None
    raw_request, raw_answer = send_frames()

    def rotate(names: tuple[str, ...], run: int) -> tuple[str, ...]:
        k = run % len(names)
        return names[k:] + names[:k]

    for run in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="pyrmq-peers-") as tmp:
            work = Path(tmp)
            if "java" not in skip:
                for name in rotate(("pyrmq", "java", "pyrmq_before") if before else ("pyrmq", "java"), run):
                    progress(f"run {run + 1}/{args.repeat}: {name} broker, Java client load")
                    server = JavaServer(work) if name == "java" else PyrmqServer(
                        work, before if name == "pyrmq_before" else None)
                    try:
                        keep(name, part1(server, classes, work, sizes))
                    finally:
                        server.stop()
            if "python" not in skip:
                names = ("pyrmq_py", "redis", "raw_blocking", "raw_trio") + (("pyrmq_py_before",) if before else ())
                for name in rotate(names, run):
                    progress(f"run {run + 1}/{args.repeat}: {name} (load average {os.getloadavg()[0]:.1f})")
                    if name.startswith("raw_"):
                        server = RawEchoServer(work, name[4:], raw_answer)
                        try:
                            figures = part2_raw(server, raw_request, sizes)
                        finally:
                            server.stop()
                    elif name == "redis":
                        server = RedisServer(work)
                        try:
                            figures = part2_redis(server, sizes)
                        finally:
                            server.stop()
                    else:
                        server = PyrmqServer(work, before if name == "pyrmq_py_before" else None, PULL_TUNED_SETS)
                        try:
                            if before:
                                figures = part2_pyrmq_process(server, sizes, before if name == "pyrmq_py_before" else None)
                            else:
                                figures = part2_pyrmq(server, sizes)
                        finally:
                            server.stop()
                    for workload, row in figures.items():
                        progress(f"  {name:8s} {workload:20s} {row['rate']:>10,.0f} msgs/s  cpu {row['cpu']:6.1f} s  "
                                 f"rss {row['rss']:6.0f} MiB (anon {row['anon']:.0f})")
                    keep(name, figures)
    if before_dir is not None:
        shutil.rmtree(before_dir, ignore_errors=True)
    pop_table = None
    if args.with_pop:
        import pop_peers

        with tempfile.TemporaryDirectory(prefix="pyrmq-pop-peers-") as tmp:
            pop_table = pop_peers.table(pop_peers.run(Path(tmp), args.pop_count, 8), args.pop_count, 8)
    grpc_table = None
    if args.with_grpc:
        import grpc_bench

        grpc_table = grpc_bench.peers_table(args.grpc_count)
    print(table(results, sizes))
    if pop_table:
        print()
        print(pop_table)
    if grpc_table:
        print()
        print(grpc_table)
    if "python" not in skip:
        print()
        print(table_floor(results, sizes))
        floor = consume_floor()
        redis_us = results.get("redis", {}).get("py_consume")
        print()
        print(f"Consume floor (client CPU a message, warm, in this process): decode_messages + a no-op callback "
              f"{floor['decode_messages']:.2f} us, a bare struct-unpack loop + callback {floor['bare']:.2f} us; "
              f"redis-py + hiredis XREAD {median(redis_us, 'client_us'):.2f} us"
              if redis_us else f"Consume floor: decode_messages {floor['decode_messages']:.2f} us, bare {floor['bare']:.2f} us")
    if before:
        print()
        print(table_before(results, sizes, args.before))


if __name__ == "__main__":
    main()
