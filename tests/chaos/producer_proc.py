"""A producer process for the crash scenario: ``python producer_proc.py NAMESRV TOPIC NAME LOG INFLIGHT``.

``INFLIGHT`` tasks each send one message after another with the real client library (``pyrmq.client.Producer``):
keyed messages, every 16th a batch of 4, every 16th a delayed one (level 1), every 16th a timer one (1 s). Each
message carries its own id in the property ``cid`` and as its key. Once the broker acknowledges it (SEND_OK), the
line ``A <cid> <kind> <attempts>`` is written and flushed to LOG. A message that is refused or times out is sent
again by this loop, never by the library (``retry_times=0``, so every attempt is counted), with the same ``cid``:
a message the broker stored but whose answer was lost is then stored twice, a duplicate from a client retry,
counted apart. It runs until killed.
"""

from __future__ import annotations

import sys

import trio

from pyrmq.client import ClientError, Message, Producer, SendStatus


async def main(namesrv: str, topic: str, name: str, log_path: str, inflight: int) -> None:
    log = open(log_path, "a", buffering=1)

    def message(cid: str, kind: str) -> Message:
        m = Message(topic, f"{cid} {kind} ".encode() * 8, tags=kind, keys=[cid], properties={"cid": cid})
        if kind == "delay":
            m.delay_time_level = 1
        elif kind == "timer":
            m.properties["TIMER_DELAY_SEC"] = "1"
        return m

    async def worker(producer: Producer, w: int) -> None:
        seq = 0
        while True:
            seq += 1
            kind = ("batch", "delay", "timer", "plain")[seq % 16] if seq % 16 < 3 else "plain"
            base = f"{name}-{w}-{seq}"
            attempts = 0
            while True:
                attempts += 1
                try:
                    if kind == "batch":
                        cids = [f"{base}b{i}" for i in range(4)]
                        results = await producer.send_batch([message(c, "batch") for c in cids], timeout=5)
                        ok = all(r.status is SendStatus.SEND_OK for r in results)
                    else:
                        cids = [base]
                        ok = (await producer.send(message(base, kind), timeout=5)).status is SendStatus.SEND_OK
                except ClientError:
                    ok = False
                if ok:
                    log.write("".join(f"A {c} {kind} {attempts}\n" for c in cids))
                    break
                await trio.sleep(0.2)

    async with Producer(namesrv, group=f"chaos_{name}", retry_times=0) as producer:
        async with trio.open_nursery() as nursery:
            for w in range(inflight):
                nursery.start_soon(worker, producer, w)


if __name__ == "__main__":
    ns, topic, name, log_path, inflight = sys.argv[1:6]
    trio.run(main, ns, topic, name, log_path, int(inflight))
