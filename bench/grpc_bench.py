"""SendMessage through the official RocketMQ 5.x Python client against pyrmq's gRPC endpoint: calls/s with 1 and 64
in flight, and the broker process's CPU per call; optionally the same service behind grpcio's C core bridged into
the trio kernel (each call handed to trio), to compare the two transports on the finished service; or (``--server
peers``) pyrmq against Apache RocketMQ 5.5.0's proxy with its broker in the same JVM (local mode, JDK 17, Maven
Central, tests/e2e/java/javaproxy.py), with a third row: a SimpleConsumer receiving and acking what was sent.

    python bench/grpc_bench.py [--count 3000] [--server h2|grpcio|both|peers] [--rounds 2]

The broker (name server + broker + gRPC endpoint, like `pyrmq dev`) runs in a subprocess of this script
(``--serve``); the client runs in the official client's venv ($PYRMQ_CACHE_DIR/rocketmq-python-client-5.1.2, built
on first use). The grpcio server needs ``grpcio`` in pyrmq's venv (``pip install grpcio``; not a pyrmq dependency).
Broker CPU = utime + stime of the server process (/proc/<pid>/stat) over the measured sends, divided by the calls:
pyrmq's one process (name server + broker + gRPC), 5.5.0's proxy JVM (proxy + broker; its name server apart).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).parent
JAVA = HERE.parent / "tests" / "e2e" / "java"
GROUP = "GrpcBenchGroup"
CLIENT_VERSION = "5.1.2"
TOPIC = "GrpcBench"
_KEEP: list = []


def venv_python() -> Path:
    venv = Path(os.environ.get("PYRMQ_CACHE_DIR", Path.home() / ".cache" / "pyrmq")) / f"rocketmq-python-client-{CLIENT_VERSION}"
    python = venv / "bin" / "python"
    if not (venv / ".installed").exists():
        subprocess.run(["python3", "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", f"rocketmq-python-client=={CLIENT_VERSION}"],
                       check=True)
        (venv / ".installed").write_text(CLIENT_VERSION)
    return python


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- the server side (--serve) ---------------------------------------------------------------------------------


def serve(kind: str, store: str) -> None:
    import trio

    from pyrmq.kernel.bundles import load_bundle
    from pyrmq.kernel.service import build_kernel, serve_kernel

    async def main() -> None:
        bundle = load_bundle("dev").with_overrides({
            "namesrv.listenPort": 0, "namesrv.kvConfigPath": os.path.join(store, "kv.json"), "broker.listenPort": 0,
            "broker.storePathRootDir": store, "broker.grpcServerPort": 0,
        })
        kernel = build_kernel(bundle, entry_points=False)
        async with trio.open_nursery() as nursery:
            await nursery.start(serve_kernel, kernel)
            endpoint = await kernel.wait_listening("grpc")
            if kind == "grpcio":
                port = start_grpcio(kernel, trio.lowlevel.current_trio_token())
                endpoint = f"127.0.0.1:{port}"
                kernel.plugin("grpc").routes.own_endpoint = endpoint  # QueryRoute sends clients there
            print(f"READY {endpoint} {await kernel.wait_listening('namesrv')}", flush=True)
            await trio.sleep_forever()

    trio.run(main)


class _Shim:
    """What the service's handlers use of a transport call, for a call that grpcio received."""

    def __init__(self, context, request: bytes | None = None, iterator=None, out: queue.Queue | None = None) -> None:
        self.metadata = {k: v for k, v in context.invocation_metadata() if isinstance(v, str)}
        self.peer = context.peer().partition(":")[2] or "127.0.0.1:0"
        self.deadline = float("inf")
        self.closed = False
        self.attributes: dict = {}
        self._request = request
        self._iterator = iterator
        self._out = out
        self.response: bytes | None = None

    async def recv_one(self) -> bytes:
        return self._request or b""

    async def recv(self) -> bytes | None:
        import trio

        return await trio.to_thread.run_sync(lambda: next(self._iterator, None), abandon_on_cancel=True)

    async def reply(self, payload: bytes) -> None:
        self.response = payload

    async def send(self, payload: bytes) -> None:
        if self._out is not None:
            self._out.put(payload)
        else:
            self.response = payload


def start_grpcio(kernel, token) -> int:
    from concurrent import futures

    import grpc
    import trio

    from pyrmq.plugins.grpc.schema import METHOD_TABLE

    handlers = kernel.plugin("grpc").service.handlers()

    def unary(handler):
        def behavior(request: bytes, context) -> bytes:
            shim = _Shim(context, request=request)
            trio.from_thread.run(handler, shim, trio_token=token)
            return shim.response or b""
        return grpc.unary_unary_rpc_method_handler(behavior)

    def bidi(handler):
        def behavior(iterator, context):
            out: queue.Queue = queue.Queue()
            shim = _Shim(context, iterator=iterator, out=out)

            def run() -> None:
                try:
                    trio.from_thread.run(handler, shim, trio_token=token)
                except Exception:  # noqa: BLE001 - the stream ends
                    pass
                finally:
                    out.put(None)

            threading.Thread(target=run, daemon=True).start()
            while (item := out.get()) is not None:
                yield item
        return grpc.stream_stream_rpc_method_handler(behavior)

    table = {}
    for path, (rpc, _req, _resp, client_streaming, _ss) in METHOD_TABLE.items():
        table[path] = bidi(handlers[path]) if client_streaming else unary(handlers[path])

    class Generic(grpc.GenericRpcHandler):
        def service(self, details):
            return table.get(details.method)

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=96),
                         options=[("grpc.max_receive_message_length", 130 * 1024 * 1024)])
    server.add_generic_rpc_handlers((Generic(),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    _KEEP.append(server)  # a grpc.Server that is garbage collected stops serving
    return port


# -- the driver ------------------------------------------------------------------------------------------------


def wait_broker(namesrv: str, timeout: float = 60) -> None:
    """Until a broker is registered with the name server (a topic created before would have nowhere to go)."""
    import trio

    from pyrmq.client import Admin

    async def main() -> None:
        async with Admin(namesrv) as admin:
            with trio.fail_after(timeout):
                while not (await admin.cluster_info()).brokers:
                    await trio.sleep(0.1)

    trio.run(main)


def run_one(kind: str, count: int, inflights: list[int], receive: bool = False) -> list[dict]:
    with tempfile.TemporaryDirectory(prefix="grpc-bench-") as store:
        rmq = server = None
        try:
            if kind == "rocketmq-5.5.0":
                sys.path.insert(0, str(JAVA))
                from javaproxy import RocketMQ55

                rmq = RocketMQ55(Path(store) / "rmq55").start()
                endpoint, namesrv, pid = rmq.grpc, rmq.namesrv_addr, rmq.broker_pids[0]
            else:
                server = subprocess.Popen([sys.executable, __file__, "--serve", kind, "--store", store],
                                          stdout=subprocess.PIPE, text=True)
                line = server.stdout.readline()
                assert line.startswith("READY"), f"the {kind} server did not start: {line!r}"
                _, endpoint, namesrv = line.split()
                pid = server.pid
            admin = [sys.executable, "-m", "pyrmq", "admin"]
            wait_broker(namesrv)
            subprocess.run([*admin, "topic", "create", "-n", namesrv, "--topic", TOPIC, "-q", "8"], check=True,
                           stdout=subprocess.DEVNULL, timeout=60)
            if receive:
                subprocess.run([*admin, "group", "create", "-n", namesrv, "-g", GROUP], check=True,
                               stdout=subprocess.DEVNULL, timeout=60)
            client = subprocess.Popen([str(venv_python()), str(HERE / "grpc" / "send_bench.py"), endpoint, TOPIC,
                                       str(count), *map(str, inflights), *([f"receive={GROUP}"] if receive else [])],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            results = []
            assert json.loads(client.stdout.readline()).get("warm") == 300
            steps: list = [*inflights, *(["receive+ack"] if receive else [])]
            for step in steps:
                if step == "receive+ack":
                    assert json.loads(client.stdout.readline()).get("ready") == GROUP
                before = cpu_seconds(pid)
                client.stdin.write("go\n")
                client.stdin.flush()
                result = json.loads(client.stdout.readline())
                cpu = cpu_seconds(pid) - before
                result.update(server=kind, calls_per_s=round(result["count"] / result["seconds"]),
                              broker_cpu_us_per_call=round(cpu / result["count"] * 1e6), load=os.getloadavg()[0])
                results.append(result)
                print(json.dumps(result), flush=True)
            client.stdin.close()
            client.wait(60)
            return results
        finally:
            if server is not None:
                server.terminate()
                server.wait(30)
            if rmq is not None:
                rmq.stop()


def peers_table(count: int) -> str:
    """One run of each system (pyrmq, then 5.5.0) as a markdown table: bench/peers.py --with-grpc."""
    rows = {kind: run_one(kind, count, [1, 64], receive=True) for kind in ("h2", "rocketmq-5.5.0")}
    lines = [f"gRPC, the official Python client 5.1.2 ({count:,} messages of 128 B a row, one run)", "",
             "| workload | pyrmq msgs/s | 5.5.0 proxy msgs/s | ratio | pyrmq broker CPU us/msg | 5.5.0 CPU us/msg |",
             "|---|---|---|---|---|---|"]
    for mine, theirs in zip(rows["h2"], rows["rocketmq-5.5.0"]):
        name = {1: "send, 1 in flight", 64: "send, 64 in flight"}.get(mine["inflight"], "SimpleConsumer receive + ack")
        lines.append(f"| {name} | {mine['calls_per_s']:,} | {theirs['calls_per_s']:,} | "
                     f"{mine['calls_per_s'] / theirs['calls_per_s']:.2f}x | {mine['broker_cpu_us_per_call']:,} | "
                     f"{theirs['broker_cpu_us_per_call']:,} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=3000)
    parser.add_argument("--server", choices=("h2", "grpcio", "both", "peers"), default="h2")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--inflight", type=int, nargs="+", default=[1, 64])
    parser.add_argument("--serve", choices=("h2", "grpcio"), help=argparse.SUPPRESS)
    parser.add_argument("--store", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.store)
        return 0
    kinds = {"both": ["h2", "grpcio"], "peers": ["h2", "rocketmq-5.5.0"]}.get(args.server, [args.server])
    rows = []
    for _ in range(args.rounds):
        for kind in kinds:
            rows += run_one(kind, args.count, args.inflight, receive=args.server == "peers")
    print("\nserver          in flight     calls/s  broker CPU us/call  load")
    for r in rows:
        server = "pyrmq" if r["server"] == "h2" and args.server == "peers" else r["server"]
        print(f"{server:<15} {str(r['inflight']):>11} {r['calls_per_s']:>9} {r['broker_cpu_us_per_call']:>19} "
              f"{r['load']:>5.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
