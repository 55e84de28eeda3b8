"""The official rocketmq-python-client sending as fast as it can (runs in its own venv; imports nothing of pyrmq).

    send_bench.py ENDPOINT TOPIC COUNT INFLIGHT... [receive=GROUP]

For each INFLIGHT value: waits for a line on stdin (the bench samples the broker's CPU), sends COUNT messages of
128 bytes with at most INFLIGHT in flight (1: ``send``; more: ``send_async`` futures), prints one JSON line
{"inflight": n, "count": COUNT, "seconds": s, "errors": e}. With ``receive=GROUP`` last: a SimpleConsumer of GROUP
(started, then 2 s for its settings: 5.5.0 fails a receive that overtakes them) waits for a line, receives (32 at
a time, 30 s invisible) and acks one by one until COUNT messages are acked, and prints {"inflight": "receive+ack",
...}.
"""

import json
import sys
import time
from concurrent.futures import FIRST_COMPLETED, wait

from rocketmq import ClientConfiguration, Credentials, Message, Producer


def message(topic: str, i: int) -> Message:
    m = Message()
    m.topic = topic
    m.body = b"x" * 120 + str(i).zfill(8).encode()
    m.tag = "bench"
    return m


def main() -> int:
    endpoint, topic, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    inflights = [int(x) for x in sys.argv[4:] if not x.startswith("receive=")]
    groups = [x.partition("=")[2] for x in sys.argv[4:] if x.startswith("receive=")]
    producer = Producer(ClientConfiguration(endpoint, Credentials(), request_timeout=30), (topic,))
    producer.startup()
    for i in range(300):  # warm-up: connections, routes, the broker's code paths
        producer.send(message(topic, i))
    print(json.dumps({"warm": 300}), flush=True)
    for inflight in inflights:
        sys.stdin.readline()
        errors = 0
        began = time.perf_counter()
        if inflight == 1:
            for i in range(count):
                try:
                    producer.send(message(topic, i))
                except Exception:
                    errors += 1
        else:
            pending = set()
            for i in range(count):
                if len(pending) >= inflight:
                    done, pending = wait(pending, return_when=FIRST_COMPLETED)
                    errors += sum(1 for f in done if f.exception() is not None)
                pending.add(producer.send_async(message(topic, i)))
            done, _ = wait(pending)
            errors += sum(1 for f in done if f.exception() is not None)
        seconds = time.perf_counter() - began
        print(json.dumps({"inflight": inflight, "count": count, "seconds": seconds, "errors": errors}), flush=True)
    producer.shutdown()
    for group in groups:
        from rocketmq import FilterExpression, SimpleConsumer

        consumer = SimpleConsumer(ClientConfiguration(endpoint, Credentials(), request_timeout=30), group,
                                  {topic: FilterExpression("*")}, await_duration=5)
        consumer.startup()
        time.sleep(2)
        print(json.dumps({"ready": group}), flush=True)
        sys.stdin.readline()
        acked = errors = 0
        began = time.perf_counter()
        while acked < count:
            try:
                got = consumer.receive(32, 30)
            except Exception:
                errors += 1
                continue
            for m in got:
                try:
                    consumer.ack(m)
                    acked += 1
                except Exception:
                    errors += 1
        seconds = time.perf_counter() - began
        print(json.dumps({"inflight": "receive+ack", "count": acked, "seconds": seconds, "errors": errors}), flush=True)
        consumer.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
