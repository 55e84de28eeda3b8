"""A POP consumer process for the crash scenarios, and the checker of what it logged.

    python pop_proc.py NAMESRV TOPIC GROUP LOG INVISIBLE_MS RATE [SKIP_EVERY]

It receives with the real client library (``pyrmq.client.SimpleConsumer``, up to 8 messages a receive, each
invisible ``INVISIBLE_MS``), about ``RATE`` messages a second, and writes (flushed at once) to LOG:

* ``P <key> <attempt> <popTime> <invisibleMs> <now>`` for each message received (``popTime`` is the broker's, from
  the receipt handle; ``now`` the wall clock in ms);
* leaves the first delivery of every ``SKIP_EVERY``-th message unacked (it must come back after its invisible time),
  acks the others: ``a <key> <popTime> <now>`` before the ack is sent, ``A <key> <popTime> <now>`` once the broker
  answered SUCCESS (a broker killed in between leaves the ack in doubt: ``a`` without ``A``).

Errors (a broker killed and restarting, a route changing) are waited out; it runs until killed. :func:`analyse`
reads the logs of any number of these processes (consuming one group) and says what went wrong.
"""

from __future__ import annotations

import sys
import time
import zlib
from collections.abc import Iterable
from pathlib import Path

import attrs


def skipped(key: str, every: int) -> bool:
    """Whether the first delivery of ``key`` is left unacked."""
    return every > 0 and zlib.crc32(key.encode()) % every == 0


async def main(namesrv: str, topic: str, group: str, log_path: str, invisible_ms: int, rate: float,
               skip_every: int) -> None:
    import trio

    from pyrmq.client import ClientConfig, ClientError, SimpleConsumer
    from pyrmq.remoting.errors import RemotingError

    log = open(log_path, "a", buffering=1)
    config = ClientConfig(namesrv_addr=namesrv, poll_name_server_interval=0.5, heartbeat_broker_interval=1.0)
    batch = 8
    async with SimpleConsumer(config=config, group=group, subscribe={topic: "*"}, consume_from="first",
                              await_duration=1.0) as consumer:
        while True:
            started = trio.current_time()
            try:
                msgs = await consumer.receive(batch, invisible_ms / 1000)
            except (ClientError, RemotingError, OSError):
                await trio.sleep(0.2)
                continue
            now = int(time.time() * 1000)
            acks = []
            lines = []
            for m in msgs:
                h = m.receipt_handle
                key = m.keys[0]
                lines.append(f"P {key} {m.delivery_attempt} {h.pop_time} {h.invisible_time} {now}\n")
                if m.delivery_attempt == 1 and skipped(key, skip_every):
                    continue
                acks.append(m)
                lines.append(f"a {key} {h.pop_time} {now}\n")
            log.write("".join(lines))
            for m in acks:
                try:
                    await consumer.ack(m)
                except (ClientError, RemotingError, OSError):
                    continue
                log.write(f"A {m.keys[0]} {m.receipt_handle.pop_time} {int(time.time() * 1000)}\n")
            if msgs:
                await trio.sleep(max(0.0, len(msgs) / rate - (trio.current_time() - started)))


@attrs.define
class Delivery:
    key: str
    attempt: int
    pop_time: int
    invisible: int
    seen: int
    #: the ack's answer time (SUCCESS), or None
    acked: int | None = None
    ack_sent: bool = False

    @property
    def due(self) -> int:
        return self.pop_time + self.invisible


@attrs.define
class Report:
    sent: int
    deliveries: int
    redeliveries: int
    acked: int
    acks_in_doubt: int
    #: keys never delivered, or whose last delivery was left unacked and never came again
    lost: list[str]
    #: keys delivered again after an ack that the broker answered within the invisible time
    acked_again: list[str]
    #: redeliveries before the previous delivery's invisible time ended (a second copy while the first was invisible)
    early: list[str]
    #: keys that came twice in one pop answer (the same pop time): two copies in the retry queue, a revive written
    #: again by the broker's recovery after a kill -9 (at least once), not a redelivery of an invisible message
    copies: list[str] = attrs.field(factory=list)

    def figures(self) -> dict[str, int]:
        return {"sent": self.sent, "deliveries": self.deliveries, "redeliveries": self.redeliveries,
                "acked": self.acked, "acks_in_doubt": self.acks_in_doubt, "lost": len(self.lost),
                "acked_delivered_again": len(self.acked_again), "redelivered_early": len(self.early),
                "copies_in_one_answer": len(self.copies)}


def read(paths: Iterable[Path]) -> dict[str, list[Delivery]]:
    """Every key's deliveries in broker pop-time order, with their acks."""
    by_key: dict[str, list[Delivery]] = {}
    acks: dict[tuple[str, int], int] = {}
    sent: set[tuple[str, int]] = set()
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) < 4:
                continue  # a line cut by a kill of the consumer
            if parts[0] == "P" and len(parts) == 6:
                by_key.setdefault(parts[1], []).append(
                    Delivery(parts[1], int(parts[2]), int(parts[3]), int(parts[4]), int(parts[5])))
            elif parts[0] == "a":
                sent.add((parts[1], int(parts[2])))
            elif parts[0] == "A":
                acks[(parts[1], int(parts[2]))] = int(parts[3])
    for key, deliveries in by_key.items():
        deliveries.sort(key=lambda d: d.pop_time)
        for d in deliveries:
            d.ack_sent = (key, d.pop_time) in sent
            d.acked = acks.get((key, d.pop_time))
    return by_key


def analyse(paths: Iterable[Path], keys: Iterable[str]) -> Report:
    by_key = read(paths)
    keys = list(keys)
    lost, acked_again, early, copies = [], [], [], []
    deliveries = redeliveries = acked = doubt = 0
    for key in keys:
        ds = by_key.get(key, [])
        deliveries += len(ds)
        redeliveries += max(len(ds) - 1, 0)
        if not ds or not ds[-1].ack_sent:
            lost.append(key)  # never delivered, or left unacked and never delivered again
        valid_ack = None
        for prev, d in zip(ds, ds[1:]):
            if d.pop_time == prev.pop_time:
                copies.append(key)
            elif d.pop_time < prev.due:
                early.append(key)
        for d in ds:
            if valid_ack is not None and d.pop_time > valid_ack:
                acked_again.append(key)
                break
            if d.acked is not None and d.acked < d.due and valid_ack is None:
                valid_ack = d.acked
        if any(d.acked is not None for d in ds):
            acked += 1
        elif ds and ds[-1].ack_sent:
            doubt += 1
    return Report(len(keys), deliveries, redeliveries, acked, doubt, lost, acked_again, early, copies)


def settled(paths: Iterable[Path], keys: Iterable[str]) -> bool:
    """Every key delivered and its last delivery acked (or the ack sent)."""
    by_key = read(paths)
    return all(by_key.get(k) and by_key[k][-1].ack_sent for k in keys)


if __name__ == "__main__":
    import trio

    ns, topic, group, log_path, invisible_ms, rate = sys.argv[1:7]
    skip_every = int(sys.argv[7]) if len(sys.argv) > 7 else 5
    trio.run(main, ns, topic, group, log_path, int(invisible_ms), float(rate), skip_every)
