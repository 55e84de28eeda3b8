"""The official rocketmq-python-client sending as fast as it can (runs in its own venv; imports nothing of pyrmq).

    send_bench.py ENDPOINT TOPIC COUNT INFLIGHT...

For each INFLIGHT value: waits for a line on stdin (the bench samples the broker's CPU), sends COUNT messages of
128 bytes with at most INFLIGHT in flight (1: ``send``; more: ``send_async`` futures), prints one JSON line
{"inflight": n, "count": COUNT, "seconds": s, "errors": e}.
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
    inflights = [int(x) for x in sys.argv[4:]]
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
