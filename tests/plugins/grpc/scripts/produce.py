"""The official rocketmq-python-client producing against an endpoint: one JSON line per message sent.

    produce.py ENDPOINT SPEC_JSON

SPEC: {"topic": "T", "kind": "normal|fifo|delay|transaction", "count": 3, "tag": "TagA", "keys": ["k"],
       "group": "g1" (fifo), "groups": ["a", "b"] (fifo: message i gets group i mod n, its body "<group>-<i>"),
       "delay_s": 3 (delay), "resolution": "commit|rollback|none" (transaction; "commit,rollback,none": message i
       gets the (i mod n)th),
       "ak": "", "sk": "", "properties": {"a": "b"}, "check": "commit|rollback" (checker's answer),
       "tls": false (TLS to the endpoint), "wait_check_s": 0 (stay alive at most that long for check-backs), "checks": 1 (until that many came)}
Prints {"sent": i, "message_id": ..., "transaction_id": ...} per message, {"error": text, "code": ...} when a send
fails, {"checked": message_id, "topic": ...} per check-back. Imports nothing of pyrmq.
"""

import json
import sys
import time

from rocketmq import ClientConfiguration, Credentials, Message, Producer, TransactionChecker, TransactionResolution


def main() -> int:
    endpoint, spec = sys.argv[1], json.loads(sys.argv[2])
    topic, kind = spec["topic"], spec.get("kind", "normal")
    credentials = Credentials(spec.get("ak", ""), spec.get("sk", "")) if spec.get("ak") else Credentials()
    config = ClientConfiguration(endpoint, credentials, request_timeout=spec.get("timeout", 10))

    checks = []

    class Checker(TransactionChecker):
        def check(self, message):
            checks.append(message.message_id)
            print(json.dumps({"checked": message.message_id, "topic": message.topic,
                              "body": message.body.decode(errors="replace")}), flush=True)
            return TransactionResolution.COMMIT if spec.get("check", "commit") == "commit" else TransactionResolution.ROLLBACK

    tls = bool(spec.get("tls"))  # GRPC_DEFAULT_SSL_ROOTS_FILE_PATH names the CA the server's certificate chains to
    producer = (Producer(config, (topic,), Checker(), tls_enable=tls) if kind == "transaction"
                else Producer(config, (topic,), tls_enable=tls))
    producer.startup()
    groups = spec.get("groups")
    resolutions = spec.get("resolution", "commit").split(",")
    try:
        for i in range(spec.get("count", 1)):
            group = groups[i % len(groups)] if groups else spec.get("group", "g1")
            m = Message()
            m.topic = topic
            m.body = ((group if groups else spec.get("body", "body")) + f"-{i}").encode()
            if spec.get("tag"):
                m.tag = spec["tag"]
            if spec.get("keys"):
                m.keys = spec["keys"][0] if len(spec["keys"]) == 1 else spec["keys"]
            for k, v in (spec.get("properties") or {}).items():
                m.add_property(k, v)
            if kind == "fifo":
                m.message_group = group
            if kind == "delay":
                m.delivery_timestamp = int(time.time()) + spec.get("delay_s", 3)
            try:
                if kind == "transaction":
                    tx = producer.begin_transaction()
                    receipt = producer.send(m, tx)
                    resolution = resolutions[i % len(resolutions)]
                    if resolution == "commit":
                        tx.commit()
                    elif resolution == "rollback":
                        tx.rollback()
                    print(json.dumps({"sent": i, "message_id": receipt.message_id,
                                      "transaction_id": receipt.transaction_id, "resolution": resolution}), flush=True)
                else:
                    receipt = producer.send(m)
                    sent = {"sent": i, "message_id": receipt.message_id, "offset": receipt.offset}
                    print(json.dumps({**sent, "group": group} if kind == "fifo" else sent), flush=True)
            except Exception as exc:  # the test reads what the client says
                print(json.dumps({"error": str(exc), "type": type(exc).__name__,
                                  "code": getattr(exc, "code", None)}), flush=True)
        # stay for check-backs: until "checks" arrived, at most wait_check_s
        deadline = time.time() + spec.get("wait_check_s", 0)
        while time.time() < deadline and len(checks) < spec.get("checks", 1):
            time.sleep(0.1)
        time.sleep(0.5 if checks else 0)  # the checker's EndTransaction goes out after check() returns
    finally:
        producer.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
