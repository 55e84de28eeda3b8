"""What access control costs: the signature check per request next to the send path, and send throughput with ACL
off and on, measured in the same run.

1. Per request, in a loop: HMAC-SHA1 of a signed SEND_MESSAGE_V2 (1 KiB body), the whole validator (white lists,
   account, signature, resources, permissions), and the guard's wrapper around a processor.
2. End to end: `pyrmq dev` in this process with ``aclEnable = false`` and then ``true`` (alternating, --repeat
   times), a client pipelining --count SEND_MESSAGE_V2 requests (256 in flight) over one connection. The requests are
   built (and, for ACL on, signed) before the clock starts, so the figures are the broker's work plus the remoting
   round trip, not the client's signing.

    python bench/acl_bench.py [--count 20000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import trio

from pyrmq.kernel.bundles import load_bundle
from pyrmq.kernel.service import build_kernel, serve_kernel
from pyrmq.kernel.types import guard_processors
from pyrmq.plugins.broker.acl.rules import load_rules
from pyrmq.plugins.broker.acl.validator import AclValidator
from pyrmq.remoting.client import RemotingClient
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.signing import RequestSigner, signature_of
from pyrmq.store.format import encode_properties

ADMIN = ("AdminKey01", "AdminSecret01")
USER = ("UserKey01", "UserSecret01")
PLAIN_ACL = f"""\
globalWhiteRemoteAddresses: [10.10.103.*, 192.168.0.*]
accounts:
  - accessKey: {ADMIN[0]}
    secretKey: {ADMIN[1]}
    admin: true
  - accessKey: {USER[0]}
    secretKey: {USER[1]}
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms: [BenchTopic=PUB|SUB, topicA=DENY, topicB=SUB]
    groupPerms: [groupA=DENY]
"""
BODY = b"x" * 1024


def send_request(i: int, signed: bool) -> RemotingCommand:
    fields = {
        "a": "bench-producer", "b": "BenchTopic", "c": "TBW102", "d": "4", "e": str(i % 4), "f": "0",
        "g": str(int(time.time() * 1000)), "h": "0", "i": encode_properties({"UNIQ_KEY": f"{i:032X}"}), "j": "0",
        "k": "false", "m": "false",
    }
    request = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, fields, BODY)
    if signed:
        RequestSigner(*USER)(request)
    return request


class _Conn:
    remote_address = ("127.0.0.1", 40000)

    def __init__(self) -> None:
        self.attributes: dict = {}


def micro(home: Path, count: int) -> dict[str, float]:
    validator = AclValidator(load_rules([home / "conf" / "plain_acl.yml"]))
    request = send_request(0, True)
    conn = _Conn()
    out = {}
    begin = time.perf_counter()
    for _ in range(count):
        signature_of(request, USER[1])
    out["HMAC-SHA1 signature of the request"] = (time.perf_counter() - begin) / count
    assert validator(conn, request) is None
    begin = time.perf_counter()
    for _ in range(count):
        validator(conn, request)
    out["validator: whole check, allowed"] = (time.perf_counter() - begin) / count

    async def processor(connection, req):
        return None

    guarded = guard_processors({10: processor}, lambda c, r: None)[10]

    async def loop(fn) -> float:
        begin = time.perf_counter()
        for _ in range(count):
            await fn(conn, request)
        return (time.perf_counter() - begin) / count

    direct = trio.run(loop, processor)
    wrapped = trio.run(loop, guarded)
    out["guard wrapper (no-op guard) over a direct await"] = max(wrapped - direct, 0.0)
    return out


async def send_throughput(home: Path, acl: bool, count: int) -> float:
    store = tempfile.mkdtemp(prefix="acl-bench-store-")
    overrides = {
        "namesrv.listenPort": 0, "namesrv.kvConfigPath": f"{store}/kv.json", "broker.listenPort": 0,
        "broker.storePathRootDir": store, "broker.mappedFileSizeCommitLog": 256 * 1024 * 1024, "broker.aclEnable": acl,
    }
    kernel = build_kernel(load_bundle("dev").with_overrides(overrides), entry_points=False)
    async with trio.open_nursery() as nursery:
        await nursery.start(serve_kernel, kernel)
        broker = kernel.listening["broker"]
        requests = [send_request(i, acl) for i in range(count)]
        async with RemotingClient() as client:
            warm = await client.invoke(broker, send_request(0, acl))  # topic auto-created, connection open
            assert warm.code == ResponseCode.SUCCESS, warm.remark
            conn = await client.connection(broker)
            window = trio.Semaphore(256)
            done = trio.Event()
            answered = 0
            failed: list[str] = []

            def on_response(result) -> None:
                nonlocal answered
                response = result.unwrap()
                if response.code != ResponseCode.SUCCESS:
                    failed.append(f"{response.code} {response.remark}")
                answered += 1
                window.release()
                if answered == count:
                    done.set()

            with trio.fail_after(300):
                begin = time.perf_counter()
                for request in requests:
                    await window.acquire()
                    conn.invoke_callback(request, on_response)
                    if window.value == 0:
                        await conn.flush()
                await conn.flush()
                await done.wait()
                elapsed = time.perf_counter() - begin
            assert not failed, failed[:3]
        kernel.request_stop()
    return count / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=20000, help="sends per end-to-end run (default 20000)")
    parser.add_argument("--repeat", type=int, default=3, help="ACL off/on run pairs (default 3)")
    args = parser.parse_args()

    home = Path(tempfile.mkdtemp(prefix="acl-bench-home-"))
    (home / "conf").mkdir()
    (home / "conf" / "plain_acl.yml").write_text(PLAIN_ACL)
    os.environ["ROCKETMQ_HOME"] = str(home)

    print(f"per request (SEND_MESSAGE_V2, {len(BODY)} B body, 12 header fields), {args.count * 5} iterations:")
    micro_rows = micro(home, args.count * 5)
    for what, seconds in micro_rows.items():
        print(f"  {what:<52} {seconds * 1e6:8.2f} us")

    off: list[float] = []
    on: list[float] = []
    for _ in range(args.repeat):
        off.append(trio.run(send_throughput, home, False, args.count))
        on.append(trio.run(send_throughput, home, True, args.count))
    off_median, on_median = statistics.median(off), statistics.median(on)
    print(f"\nsend throughput, one connection, 256 in flight, {args.count} sends x {args.repeat} runs each (median; all runs):")
    print(f"  ACL off: {off_median:10,.0f} msgs/s  ({1e6 / off_median:6.1f} us per send)   {', '.join(f'{x:,.0f}' for x in off)}")
    print(f"  ACL on:  {on_median:10,.0f} msgs/s  ({1e6 / on_median:6.1f} us per send)   {', '.join(f'{x:,.0f}' for x in on)}")
    print(f"  ratio on/off: {on_median / off_median:.3f}; per send +{1e6 / on_median - 1e6 / off_median:.1f} us")
    check = micro_rows["validator: whole check, allowed"]
    print(f"  the validator alone is {check * off_median * 100:.1f}% of the ACL-off send path's time per send")


if __name__ == "__main__":
    main()
