"""SYNC_MASTER send throughput with automatic failover off and on, in one run.

    .venv/bin/python bench/failover_bench.py [--count 20000] [--size 1024]

Scenarios (subprocesses on 127.0.0.1, temporary stores, ASYNC_FLUSH, like bench/ha_bench.py):

- failover off: a SYNC_MASTER and one SLAVE on the 4.x HA wire (SEND_OK once any slave acked);
- failover on, 2 and 3 replicas: a local etcd and SYNC_MASTER replicas of configs/failover.toml (SEND_OK once every
  member of the in-sync set acked; the set is full before the load starts).

Each sends ``count`` messages of ``size`` bytes as single sends with 64 in flight, then as batches of 100 with 4 in
flight, through pyrmq.client. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).parent))
import ha_bench  # noqa: E402  (bench/, the process and load helpers)

from pyrmq.client import Producer  # noqa: E402
from pyrmq.client.config import ClientConfig  # noqa: E402
from pyrmq.kernel.bundles import packaged_bundle_path  # noqa: E402
from pyrmq.plugins.broker.failover.etcd import EtcdClient  # noqa: E402
from pyrmq.plugins.broker.failover.local_etcd import LocalEtcd  # noqa: E402
from pyrmq.remoting.client import RemotingClient  # noqa: E402
from pyrmq.remoting.codes import RequestCode, ResponseCode  # noqa: E402
from pyrmq.remoting.command import RemotingCommand  # noqa: E402

TOPIC = ha_bench.TOPIC


async def create_topic(addr: str) -> None:
    async with RemotingClient() as rc:
        create = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
            "topic": TOPIC, "defaultTopic": "TBW102", "readQueueNums": "8", "writeQueueNums": "8", "perm": "6",
            "topicFilterType": "SINGLE_TAG"})
        assert (await rc.invoke(addr, create)).code == ResponseCode.SUCCESS


async def measure(name: str, namesrv: str, args: argparse.Namespace) -> None:
    async with Producer(config=ClientConfig(namesrv_addr=namesrv), group="failover_bench", send_timeout=10) as producer:
        await ha_bench.wait_replicating(producer)
        for label, batch, in_flight in (("single, 64 in flight", 1, 64), ("batch 100, 4 in flight", 100, 4)):
            rate, statuses = await ha_bench.load(producer, args.count, args.size, batch, in_flight)
            print(f"{name:<34} {label:<24} {rate:>9.0f} msg/s  {statuses}", flush=True)


async def classic(args: argparse.Namespace, work: Path) -> None:
    procs = []
    try:
        namesrv = ha_bench.Proc(["namesrv", "--listen", "127.0.0.1:0"], work / "classic-namesrv.log")
        procs.append(namesrv)
        ns = namesrv.listening["namesrv"]
        master = ha_bench.broker(ns, work / "classic-master", work / "classic-master.log", "brokerRole=SYNC_MASTER")
        procs.append(master)
        procs.append(ha_bench.broker(ns, work / "classic-slave", work / "classic-slave.log", "brokerRole=SLAVE", "brokerId=1"))
        await create_topic(master.listening["broker"])
        await measure("failover off: SYNC_MASTER + slave", ns, args)
    finally:
        for p in reversed(procs):
            p.stop()


async def failover(replicas: int, args: argparse.Namespace, work: Path) -> None:
    name = f"failover{replicas}"
    procs = []
    etcd = LocalEtcd(work / f"{name}-etcd", log_path=work / f"{name}-etcd.log").start()
    try:
        bundle = work / f"{name}.toml"
        bundle.write_text(packaged_bundle_path("failover").read_text().replace('"127.0.0.1:2379"', f'"{etcd.endpoint}"')
                          + "slaveSyncFirstDelay = 200\n")  # the metadata sync every 10 s, as the 4.x slave
        namesrv = ha_bench.Proc(["namesrv", "--listen", "127.0.0.1:0"], work / f"{name}-namesrv.log")
        procs.append(namesrv)
        ns = namesrv.listening["namesrv"]
        for rid in range(1, replicas + 1):
            port = ha_bench.free_broker_port()
            procs.append(ha_bench.Proc(
                ["broker", "-c", str(bundle), "--namesrv", ns, "--listen", f"127.0.0.1:{port}",
                 "--store-dir", str(work / f"{name}-r{rid}"), "--set", f"brokerId={rid}",
                 "--set", "haSendHeartbeatInterval=1000"], work / f"{name}-r{rid}.log"))
        prefix = "/pyrmq/v1/DefaultCluster/broker-a/"
        async with EtcdClient([etcd.endpoint]) as client:
            with trio.fail_after(60):
                while (master := await client.get(prefix + "master")) is None:
                    await trio.sleep(0.1)
                await create_topic(master.json()["addr"])
                while True:
                    syncset = await client.get(prefix + "syncset")
                    if syncset is not None and len(syncset.json()["members"]) == replicas:
                        break
                    await trio.sleep(0.1)
        await measure(f"failover on: {replicas} replicas", ns, args)
    finally:
        for p in reversed(procs):
            p.stop()
        etcd.kill()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=1024)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pyrmq-failover-bench-"))
    started = time.perf_counter()
    try:
        await classic(args, work)
        await failover(2, args, work)
        await failover(3, args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps({"seconds": round(time.perf_counter() - started, 1)}))


if __name__ == "__main__":
    trio.run(main)
