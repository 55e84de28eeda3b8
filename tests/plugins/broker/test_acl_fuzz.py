"""Bad requests at a broker with ACL on: random bad signatures and random mutations of signed headers and bodies
are all refused, none is stored, and a good client sending at the same time is served throughout (issue 17).

``PYRMQ_ACL_FUZZ_COUNT`` sets how many (default 20,000 in `make test`; the issue's 100,000 is run by hand:
``PYRMQ_ACL_FUZZ_COUNT=100000 .venv/bin/python -m pytest tests/plugins/broker/test_acl_fuzz.py``).

Mutations keep to what the signature covers (extFields values and the body). RocketMQ's signature does not cover
the request code, and concatenates values without keys: a field added with an empty value, or text moved between
two neighbouring values, signs the same (docs/acl.md); the mutations here always change the signed text.
"""

from __future__ import annotations

import base64
import os
import random
import time

import outcome
import trio

from pyrmq.client import Admin, Message, Producer, PullConsumer
from pyrmq.client.message import MessageQueue
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.signing import RequestSigner
from pyrmq.store.format import encode_properties

ADMIN = ("AdminKey01", "AdminSecret01")
USER = ("UserKey01", "UserSecret01")
PLAIN_ACL = f"""\
accounts:
  - accessKey: {ADMIN[0]}
    secretKey: {ADMIN[1]}
    admin: true
  - accessKey: {USER[0]}
    secretKey: {USER[1]}
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms: [Orders=PUB|SUB]
"""
COUNT = int(os.environ.get("PYRMQ_ACL_FUZZ_COUNT", "20000"))


def good_send(rng: random.Random) -> RemotingCommand:
    fields = {
        "a": "fuzz-producer", "b": "Orders", "c": "TBW102", "d": "4", "e": str(rng.randrange(2)), "f": "0", "g": str(int(time.time() * 1000)),
        "h": "0", "i": encode_properties({"UNIQ_KEY": f"{rng.getrandbits(64):032X}"}), "j": "0", "k": "false", "m": "false",
    }
    request = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, fields, rng.randbytes(rng.randrange(1, 64)))
    RequestSigner(*USER)(request)
    return request


def other_text(rng: random.Random, old: str) -> str:
    while True:
        new = rng.choice([
            old + rng.choice("xyz1"), old[:-1], old[::-1], "", str(rng.getrandbits(32)), "%RETRY%x", "\u00e9" + old,
            base64.b64encode(rng.randbytes(20)).decode(),
        ])
        if new != old:
            return new


def mutate(rng: random.Random, request: RemotingCommand) -> str:
    """Change the request so that its signature no longer fits; returns what was done."""
    ext = request.ext_fields
    kind = rng.randrange(7)
    if kind == 0:
        ext["Signature"] = base64.b64encode(rng.randbytes(20)).decode()
        return "random signature"
    if kind == 1:
        sig = list(ext["Signature"])
        i = rng.randrange(len(sig) - 1)  # the last char is padding
        sig[i] = "A" if sig[i] != "A" else "B"
        ext["Signature"] = "".join(sig)
        return "one signature character"
    if kind == 2:
        del ext["Signature"]
        return "no signature"
    if kind == 3:
        key = rng.choice([k for k in ext if k not in ("Signature", "AccessKey") and ext[k]])
        ext[key] = other_text(rng, ext[key])
        return f"value of {key}"
    if kind == 4:
        ext[f"z{rng.randrange(1000)}"] = "x" * rng.randrange(1, 5)
        return "field added"
    if kind == 5:
        key = rng.choice([k for k in ext if k not in ("Signature", "AccessKey") and ext[k]])
        del ext[key]
        return f"{key} removed"
    body = bytearray(request.body)
    if body and rng.random() < 0.5:
        body[rng.randrange(len(body))] ^= 1 << rng.randrange(8)
    else:
        body += b"!"
    request.body = bytes(body)
    return "body"


async def test_bad_signatures_and_mutated_headers_are_all_refused_while_a_good_client_is_served(start_role, tmp_path, monkeypatch):
    home = tmp_path / "rocketmq"
    (home / "conf").mkdir(parents=True)
    (home / "conf" / "plain_acl.yml").write_text(PLAIN_ACL)
    monkeypatch.setenv("ROCKETMQ_HOME", str(home))
    kernel = await start_role("dev", {"broker.aclEnable": True})
    namesrv, broker = kernel.listening["namesrv"], kernel.listening["broker"]
    async with Admin(namesrv, credentials=ADMIN) as admin:
        with trio.fail_after(10):
            while not (await admin.cluster_info()).brokers:
                await trio.sleep(0.02)
        await admin.create_topic("Orders", 2)

    rng = random.Random(17)
    # the signed request itself passes (so every refusal below is the mutation's doing)
    from pyrmq.remoting.client import RemotingClient

    async with RemotingClient() as raw:
        response = await raw.invoke(broker, good_send(rng))
        assert response.code == ResponseCode.SUCCESS, response.remark
        conn = await raw.connection(broker)

        wrong: list[tuple[str, int, str | None]] = []
        answered = 0
        kinds: dict[str, int] = {}
        good_sent = 0
        done = trio.Event()

        async def good_client() -> None:
            nonlocal good_sent
            async with Producer(namesrv, "good-producer", credentials=USER, retry_times=0) as producer:
                while not done.is_set():
                    result = await producer.send(Message("Orders", b"good"))
                    assert result.status.name == "SEND_OK"
                    good_sent += 1
                    await trio.sleep(0.005)

        with trio.fail_after(60 + COUNT / 500):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(good_client)
                window = trio.Semaphore(256)
                all_answered = trio.Event()

                def make_callback(what: str):
                    def on_response(result: outcome.Outcome) -> None:
                        nonlocal answered
                        response = result.unwrap()
                        answered += 1
                        window.release()
                        if response.code != ResponseCode.NO_PERMISSION or "ACL refused" not in (response.remark or ""):
                            wrong.append((what, response.code, response.remark))
                        if answered == COUNT:
                            all_answered.set()
                    return on_response

                for _ in range(COUNT):
                    await window.acquire()
                    request = good_send(rng)
                    what = mutate(rng, request)
                    kind = "field removed" if what.endswith(" removed") else what.split(" of ")[0]
                    kinds[kind] = kinds.get(kind, 0) + 1
                    # bypass the client's signer: the frame goes out as mutated
                    conn.invoke_callback(request, make_callback(what))
                    if window.value == 0:
                        await conn.flush()
                await conn.flush()
                await all_answered.wait()
                done.set()

    assert not wrong, wrong[:5]
    assert answered == COUNT and len(kinds) == 7
    assert good_sent > 0
    # nothing but the one good raw send and the good client's messages was stored
    async with PullConsumer(namesrv, "fuzz-check", credentials=USER) as puller:
        stored = sum([await puller.max_offset(MessageQueue("Orders", "broker-a", q)) for q in range(2)])
    assert stored == good_sent + 1
