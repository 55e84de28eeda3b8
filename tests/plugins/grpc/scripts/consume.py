"""The official rocketmq-python-client consuming from an endpoint: one JSON line per message received.

    consume.py ENDPOINT SPEC_JSON

SPEC: {"topic": "T", "group": "G", "kind": "simple|push", "count": 3 (stop after that many distinct messages were
       consumed for good), "deadline_s": 30, "tag": "*" (TAG expression; "sql": "a > 1" for SQL92),
       simple: "max": 16, "invisible_s": 15, "await_s": 5, "ack": true (false: never ack), "change_s": null (change
       the invisible duration of the first delivery of each message to that many seconds instead of acking it),
       "skip": 0 (deliveries up to that attempt are neither acked nor changed: they come back),
       "settle_s": 0 (wait after startup: the client does not wait for its settings answer), "ak"/"sk", "tls": false,
       push: "fail": 0 (the listener answers FAILURE the first that-many times it gets a message: FIFO groups retry
       in the client, the others are delivered again), "threads": 4}
Prints {"received": message_id, "body", "tag", "group", "attempt", "handle", "keys", "properties", "topic",
"deliver_at" (the delivery timestamp, ms), "at" (when it was received, ms)} per delivery, {"changed": message_id, "handle": new} per change, {"acked": message_id} per ack, {"error": text, "type",
"code"} when a call fails, and {"done": n} at the end. Imports nothing of pyrmq.
"""

import json
import sys
import threading
import time

from rocketmq import ClientConfiguration, Credentials, FilterExpression


def line(**fields) -> None:
    print(json.dumps(fields), flush=True)


def describe(m) -> dict:
    return {"received": m.message_id, "body": m.body.decode(errors="replace"), "tag": m.tag, "group": m.message_group,
            "attempt": m.delivery_attempt, "handle": m.receipt_handle, "keys": sorted(m.keys or []),
            "properties": dict(m.properties or {}), "topic": m.topic, "deliver_at": m.delivery_timestamp,
            "at": int(time.time() * 1000)}


def error(exc: Exception) -> None:
    line(error=str(exc), type=type(exc).__name__, code=getattr(exc, "code", None))


def main() -> int:
    endpoint, spec = sys.argv[1], json.loads(sys.argv[2])
    credentials = Credentials(spec["ak"], spec.get("sk", "")) if spec.get("ak") else Credentials()
    config = ClientConfiguration(endpoint, credentials, request_timeout=spec.get("timeout", 10))
    topic, group = spec["topic"], spec["group"]
    if spec.get("sql"):
        from rocketmq.grpc_protocol import FilterType

        expression = FilterExpression(spec["sql"], FilterType.SQL)
    else:
        expression = FilterExpression(spec.get("tag", "*"))
    count, deadline = spec.get("count", 1), time.time() + spec.get("deadline_s", 30)
    done: set = set()
    if spec.get("kind", "simple") == "simple":
        from rocketmq import SimpleConsumer

        consumer = SimpleConsumer(config, group, {topic: expression}, await_duration=spec.get("await_s", 5),
                                  tls_enable=bool(spec.get("tls")))
        consumer.startup()
        time.sleep(spec.get("settle_s", 0))  # 5.5.0 fails a receive that overtakes the settings (a NPE)
        changed: set = set()
        try:
            while len(done) < count and time.time() < deadline:
                try:
                    got = consumer.receive(spec.get("max", 16), spec.get("invisible_s", 15))
                except Exception as exc:  # the test reads what the client says
                    error(exc)
                    if spec.get("stop_on_error", True):
                        break
                    time.sleep(0.2)
                    continue
                for m in got:
                    line(**describe(m))
                    if m.delivery_attempt <= spec.get("skip", 0):
                        continue  # left as it is: delivered again once its invisible time is over
                    if spec.get("change_s") is not None and m.message_id not in changed:
                        changed.add(m.message_id)
                        try:
                            consumer.change_invisible_duration(m, spec["change_s"])
                            line(changed=m.message_id, handle=m.receipt_handle)
                        except Exception as exc:
                            error(exc)
                        continue
                    if spec.get("ack", True):
                        try:
                            consumer.ack(m)
                            line(acked=m.message_id)
                            done.add(m.message_id)
                        except Exception as exc:
                            error(exc)
                    else:
                        done.add(m.message_id)
        finally:
            consumer.shutdown()
    else:
        from rocketmq import ConsumeResult, MessageListener, PushConsumer

        fail = spec.get("fail", 0)
        lock = threading.Lock()
        finished = threading.Event()

        calls: dict = {}

        class Listener(MessageListener):
            def consume(self, message):
                with lock:
                    line(**describe(message))
                    calls[message.message_id] = calls.get(message.message_id, 0) + 1
                    if calls[message.message_id] <= fail:
                        return ConsumeResult.FAILURE
                    done.add(message.message_id)
                    if len(done) >= count:
                        finished.set()
                return ConsumeResult.SUCCESS

        consumer = PushConsumer(config, group, Listener(), {topic: expression},
                                consumption_thread_count=spec.get("threads", 4), tls_enable=bool(spec.get("tls")))
        consumer.startup()
        try:
            finished.wait(max(0.0, deadline - time.time()))
            time.sleep(spec.get("linger_s", 1.0))  # the last acks go out after consume() returns
        finally:
            consumer.shutdown()
    line(done=len(done))
    return 0


if __name__ == "__main__":
    sys.exit(main())
