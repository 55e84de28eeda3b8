"""A transaction producer process for the crash scenario: ``python txn_proc.py NAMESRV TOPIC NAME LOG INFLIGHT``.

``INFLIGHT`` tasks each run one transaction after another with the real client library
(``pyrmq.client.TransactionProducer``): a half message, the local transaction's answer, END_TRANSACTION (oneway, as
Java). Each message's ``cid`` (property and key) ends with its fate, which is also its tag:

* ``txc``: the local transaction commits; ``txr``: it rolls back;
* ``txuc`` / ``txur``: it answers UNKNOWN, and the broker's check-back gets COMMIT / ROLLBACK.

A check-back (of any half: an END_TRANSACTION lost to a kill leaves a committed one pending too) is answered from
the cid alone and logged ``K <cid>``. Once the broker acknowledged the half (SEND_OK), ``A <cid> <fate> <attempts>``
is logged; a half that failed is sent again with the same cid (``retry_times=0``), so a half the broker stored but
whose answer was lost is stored twice and resolved twice, counted apart as a client retry. On SIGUSR1 it stops
starting transactions, logs ``S`` once those under way are done, and goes on answering check-backs until killed.
"""

from __future__ import annotations

import signal
import sys

import trio

from pyrmq.client import ClientConfig, ClientError, LocalTransactionState, Message, SendStatus, TransactionProducer

FATES = ("txc", "txr", "txuc", "txur")
COMMITTED = ("txc", "txuc")


def fate_of(cid: str) -> str:
    return cid.rsplit("-", 1)[1]


async def main(namesrv: str, topic: str, name: str, log_path: str, inflight: int) -> None:
    log = open(log_path, "a", buffering=1)
    stopping = trio.Event()

    def check_local(msg) -> LocalTransactionState:
        cid = msg.properties.get("cid", "")
        log.write(f"K {cid}\n")
        return LocalTransactionState.COMMIT if fate_of(cid) in COMMITTED else LocalTransactionState.ROLLBACK

    def execute_local(msg: Message, fate: str) -> LocalTransactionState:
        return {"txc": LocalTransactionState.COMMIT,
                "txr": LocalTransactionState.ROLLBACK}.get(fate, LocalTransactionState.UNKNOWN)

    async def worker(producer: TransactionProducer, w: int) -> None:
        seq = 0
        while not stopping.is_set():
            seq += 1
            fate = FATES[seq % len(FATES)]
            cid = f"{name}-{w}-{seq}-{fate}"
            attempts = 0
            while True:
                attempts += 1
                m = Message(topic, f"{cid} ".encode() * 8, tags=fate, keys=[cid], properties={"cid": cid})
                try:
                    r = await producer.send_in_transaction(m, execute_local, fate, timeout=5)
                    ok = r.send_result.status is SendStatus.SEND_OK
                except ClientError:
                    ok = False
                if ok:
                    log.write(f"A {cid} {fate} {attempts}\n")
                    break
                await trio.sleep(0.2)

    async def on_signal() -> None:
        with trio.open_signal_receiver(signal.SIGUSR1) as signals:
            async for _ in signals:
                stopping.set()
                return

    config = ClientConfig(namesrv_addr=namesrv, heartbeat_broker_interval=1.0)
    async with TransactionProducer(config=config, group=f"chaos_{name}", retry_times=0,
                                   check_local=check_local) as producer:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(on_signal)
            async with trio.open_nursery() as workers:
                for w in range(inflight):
                    workers.start_soon(worker, producer, w)
            log.write("S\n")
            await trio.sleep_forever()


if __name__ == "__main__":
    ns, topic, name, log_path, inflight = sys.argv[1:6]
    trio.run(main, ns, topic, name, log_path, int(inflight))
