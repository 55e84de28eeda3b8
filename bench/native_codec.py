"""What a native codec would buy the sync send row (issue 29): a C prototype measured beside pure-Python pyrmq.

    .venv/bin/python bench/native_codec.py [--count 20000] [--repeat 3] [--pull-rounds 2000]      (about a minute)

A PROTOTYPE KEPT OUT OF THE PRODUCT. pyrmq's rule is pure Python; the issue asks, for a Python row that stays below
Redis Streams in pure Python, what an optional native codec (an extension with the pure-Python path as fallback, as
redis-py has hiredis) would buy, measured. ``bench/native/sendcodec.c`` is that codec: it encodes a SEND_MESSAGE_V2
request frame (byte-identical to ``Producer._request`` + ``RemotingCommand.encode_into``), decodes the broker's
SEND_OK answer with a minimal scanner of the header shape the broker writes (anything else: pyrmq's own
``FrameDecoder``, i.e. Python's ``json``), and decodes a pull body's records into pyrmq's ``MessageExt``. Nothing in
pyrmq imports it; it is not in pyproject's packages; it is compiled at run time into a temporary directory with
``gcc -shared -fPIC -O2`` and the interpreter's include path (gcc and Python.h are needed, nothing else).

Before measuring, the script asserts the codec's output equals pyrmq's for a set of messages (quotes, backslashes,
control characters and non-ASCII in properties, compressed and 1-byte bodies, negative flags), its answer decoding
equals ``FrameDecoder`` + ``Producer._result`` (also on the real broker's first answers), and its record decoding
equals ``decode_messages`` (IPv6 hosts, compressed bodies, two topics, every lazy field).

Then, per run (``--repeat``, turns rotated), one ``pyrmq namesrv`` + ``pyrmq broker`` and one ``redis-server``
(bench/peers.py's servers), one send in flight, 1 KiB bodies, ``--count`` sends a row:

- ``BlockingProducer.send``: pure Python, as bench/peers.py drives it;
- the prototype: a ``BlockingProducer`` whose direct sender (``client/blocking.py``'s ``_DirectSender``) keeps in
  Python what a native build would keep there (validation, UNIQ_KEY, properties text, queue round robin,
  fault-latency bookkeeping, the ``SendResult``) and uses the C codec for the frame and the answer; these two take
  turns in four blocks a run (A, B, A, B, ...), in the same minutes;
- a raw client sending pre-encoded request frames (``--count`` distinct messages encoded by pyrmq before the clock
  starts) to the same broker and reading the answer's length only: the ceiling of any codec (one that costs nothing);
- redis-py + hiredis XADD against ``redis-server`` (AOF everysec);
- for the broker's share: the same raw client against bench/peers.py's ``RawEchoServer`` (trio), a Python server
  that answers each frame with the bytes of a SEND_OK and does nothing else.

Printed: msgs/s, client CPU a send (``time.process_time`` of this process), broker CPU a send (utime + stime of
its pid), the ratio to Redis; medians of the runs. Then the codec's steps timed in this process (warm, no socket:
``_request`` + ``encode_into`` against ``encode_send``, ``FrameDecoder`` + ``_result`` against the scanner +
``SendResult``), and client CPU a message for decoding a pull answer of 32 x 1 KiB records, native against
``decode_messages``, beside redis-py + hiredis XREAD COUNT 1000. Figures are printed, never asserted. Needs ``redis-server`` and ``pip install redis hiredis`` in the venv, like bench/peers.py.
"""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import os
import socket
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import peers  # noqa: E402
from peers import BODY, PyrmqServer, RawEchoServer, RedisServer, Timed, progress  # noqa: E402

from pyrmq.client import Admin, BlockingProducer, Message, Producer  # noqa: E402
from pyrmq.client.blocking import _DirectSender  # noqa: E402
from pyrmq.client.errors import BrokerError  # noqa: E402
from pyrmq.client.instance import DEFAULT_TOPIC_QUEUE_NUMS  # noqa: E402
from pyrmq.client.message import MessageExt, MessageQueue, SendResult, SendStatus, decode_messages  # noqa: E402
from pyrmq.client.producer import _STATUS, RETRY_CODES  # noqa: E402
from pyrmq.remoting.codes import CURRENT_VERSION  # noqa: E402
from pyrmq.remoting.command import next_opaque  # noqa: E402
from pyrmq.remoting.errors import RemotingClosed, RemotingError  # noqa: E402
from pyrmq.remoting.framing import FrameDecoder  # noqa: E402
from pyrmq.remoting.message import encode_record  # noqa: E402
from pyrmq.remoting.vocabulary import AUTO_CREATE_TOPIC_KEY  # noqa: E402

TOPIC = "PySend"
SOURCE = BENCH / "native" / "sendcodec.c"


# ---- the extension, built at run time ---------------------------------------------------------------------------------


def build(into: Path) -> Any:
    """Compile bench/native/sendcodec.c into ``into`` and import it (under its own name, never as part of pyrmq)."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    target = into / f"sendcodec{suffix}"
    include = sysconfig.get_paths()["include"]
    cmd = ["gcc", "-shared", "-fPIC", "-O2", "-Wall", f"-I{include}", str(SOURCE), "-o", str(target)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise SystemExit(f"building the prototype failed: {' '.join(cmd)}\n{done.stderr}")
    loader = importlib.machinery.ExtensionFileLoader("sendcodec", str(target))
    spec = importlib.util.spec_from_file_location("sendcodec", str(target), loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    module.configure(AUTO_CREATE_TOPIC_KEY, str(DEFAULT_TOPIC_QUEUE_NUMS), CURRENT_VERSION, MessageExt)
    return module


# ---- the prototype sender ---------------------------------------------------------------------------------------------


class NativeDirectSender(_DirectSender):
    """``_DirectSender.send`` with the C codec for the request frame and the answer; everything else is the
    product's code (preparation, queue choice, fault bookkeeping, retries through the loop, ``SendResult``). An
    answer the scanner does not take, or an error code, goes through ``FrameDecoder`` + ``Producer._result``.
    ``verify``: also encode and decode each send the pure-Python way and assert both agree."""

    def __init__(self, producer: Producer, codec: Any) -> None:
        super().__init__(producer)
        self.encode = codec.encode_send
        self.decode = codec.decode_send_answer
        self.verify = 0
        self.fast = self.slow = 0
        self._pending: dict[str, bytes] = {}

    def send(self, msg: Message, loop: Any) -> SendResult:
        producer = self.producer
        instance = producer.instance
        info = instance.publish.get(msg.topic)
        if self.closed or producer.hooks or info is None or not info.ok:
            return loop(producer.send, msg)
        producer._ready()
        p = producer._prepare(msg)
        mq = producer.fault.select(info, None)
        addr = instance.broker_addr(mq.broker_name)
        if (addr is None or p.batch or p.reconsume_times is not None or p.max_reconsume_times is not None
                or instance.remoting.signer is not None):
            return loop(producer._send_prepared, p)
        begin = time.monotonic()
        born = int(time.time() * 1000)
        opaque = next_opaque()
        frame = self.encode(producer.group, p.topic, mq.queue_id, p.sys_flag, born, p.flag, p.properties, p.body,
                            opaque)
        if self.verify:
            request = producer._request(p, mq, born)
            request.opaque = opaque
            assert frame == request.encode(), "native encode differs from RemotingCommand.encode_into"
        decode = self.decode
        mq0 = mq
        try:
            sock, _ = self._connection(addr)
            sock.sendall(frame)
            data = self._pending.pop(addr, b"")
            while True:
                r = decode(data) if data else None
                if r is None:  # less than a frame
                    more = sock.recv(65536)
                    if not more:
                        raise RemotingClosed(addr)
                    data = data + more if data else more
                    continue
                n = r if type(r) is int else r[0]
                raw = data[:n]  # (the same object when data is exactly the frame: the usual case)
                data = data[n:]
                if type(r) is int:  # a header of another shape: pyrmq's own decoder (Python's json)
                    cmds = FrameDecoder().feed(raw)
                    if cmds and cmds[0].flag & 1 and cmds[0].opaque == opaque:
                        answer: Any = cmds[0]
                        break
                    continue
                if r[2] & 1 and r[3] == opaque:
                    answer = r
                    break
            if data:
                self._pending[addr] = data
        except (OSError, RemotingError):
            self._drop(addr)
            self._pending.pop(addr, None)
            producer.fault.update(mq.broker_name, (time.monotonic() - begin) * 1000, True)
            return loop(producer._send_prepared, p)
        status = _STATUS.get(answer[1]) if type(answer) is tuple else None
        if status is not None:
            self.fast += 1
            qid = answer[6]
            if qid is not None and qid != mq.queue_id:
                mq = MessageQueue(mq.topic, mq.broker_name, qid)
            result = SendResult(status, p.uniq_key, answer[5], mq, answer[7], answer[8], answer[9], None)
            if self.verify:
                self.verify -= 1
                (cmd,) = FrameDecoder().feed(raw)
                expected = producer._result(p, mq0, cmd, addr)
                assert result == expected, f"native answer decode {result!r} != pyrmq's {expected!r}"
        else:
            self.slow += 1
            if type(answer) is tuple:  # an error code or a status pyrmq maps itself
                (answer,) = FrameDecoder().feed(raw)
            try:
                result = producer._result(p, mq, answer, addr)
            except BrokerError as exc:
                if exc.code in RETRY_CODES:
                    return loop(producer._send_prepared, p)
                raise
        producer.fault.update(mq.broker_name, (time.monotonic() - begin) * 1000, False)
        if result.status is not SendStatus.SEND_OK and producer.retry_another_broker_when_not_store_ok:
            return loop(producer._send_prepared, p)
        return result


# ---- byte-identity checks, before anything is measured ------------------------------------------------------------


def check_codec(codec: Any) -> int:
    """Assert the prototype encodes and decodes as pyrmq does; returns the number of cases checked."""
    import zlib

    producer = Producer("127.0.0.1:9876", "native_check")
    producer2 = Producer("127.0.0.1:9876", "native_check-2|x%y")
    messages = [
        Message(TOPIC, BODY),
        Message(TOPIC, b"1"),
        Message(TOPIC, b"z" * 9000),  # compressed (sysFlag 1)
        Message(TOPIC, BODY, tags="TagA", keys=["k1", "k2"], flag=-7),
        Message(TOPIC, BODY, tags="t\u00e9", properties={"u\u00e9\u4e2d": "v\U0001F600", "a": 'q"uo\\te'}),
        Message("Other%Topic_1", "text body \u00e9", delay_time_level=3, wait_store_msg_ok=False),
        Message(TOPIC, BODY, flag=2**31 - 1),
    ]
    # properties text the validation would refuse, straight into the prepared message: every JSON escape
    exotic = ['q"uo\\te\x01\x02', "line\nfeed\ttab\r\b\f\x00\x1f\x7f", "\u00e9\u4e2d\U0001F600 /<>&", None]
    cases = 0
    for prod in (producer, producer2):
        for text in exotic:
            p = prod._prepare(messages[0])
            p.properties = text
            request = prod._request(p, MessageQueue(TOPIC, "b", 2), 77)
            got = codec.encode_send(prod.group, TOPIC, 2, 0, 77, 0, text, p.body, request.opaque)
            assert got == request.encode(), f"encode of properties {text!r}: {got[:300]!r}"
            cases += 1
    for prod in (producer, producer2):
        for i, msg in enumerate(messages):
            p = prod._prepare(msg)
            for qid, born in ((0, int(time.time() * 1000)), (7, 0), (123, 2**62)):
                mq = MessageQueue(p.topic, "broker-a", qid)
                request = prod._request(p, mq, born)
                parts: list = []
                request.encode_into(parts)
                expected = b"".join(parts)
                got = codec.encode_send(prod.group, p.topic, qid, p.sys_flag, born, p.flag, p.properties, p.body,
                                        request.opaque)
                assert got == expected, f"encode case {i}: {got[:300]!r} != {expected[:300]!r}"
                cases += 1
        p = prod._prepare(messages[0])
        p.properties = ""  # left out of extFields, as `if p.properties:` does
        request = prod._request(p, MessageQueue(TOPIC, "b", 1), 5)
        assert codec.encode_send(prod.group, TOPIC, 1, 0, 5, 0, "", p.body, request.opaque) == request.encode()
        cases += 1

    # answers: the broker's SEND_OK shape and others; the scanner's tuple must equal FrameDecoder + _result
    p = producer._prepare(messages[0])
    request = producer._request(p, MessageQueue(TOPIC, "broker-a", 3), 1)
    answers = [
        ({"MSG_REGION": "DefaultRegion", "TRACE_ON": "true", "msgId": "7F00000100002A9F00000000000F4240",
          "queueId": "3", "queueOffset": "123456"}, 0, None, True),
        ({"MSG_REGION": "Region", "TRACE_ON": "false", "msgId": "X", "queueId": "5", "queueOffset": "0"}, 0, None, True),
        ({"MSG_REGION": "R\u00e9gion", "msgId": "X", "queueId": "5", "queueOffset": "0"}, 0, None, False),
        ({"msgId": "A", "queueId": "3", "queueOffset": "9"}, 10, None, True),  # FLUSH_DISK_TIMEOUT
        ({"msgId": "A", "queueId": "3", "queueOffset": "9", "transactionId": "T1"}, 0, None, False),
        ({}, 0, "a remark", True),
        ({}, 0, 'with "escapes"', False),
        ({}, 17, "topic not exist", True),  # an error code: BrokerError either way
    ]
    for ext, code, remark, scanned in answers:
        answer = request.make_response(code, remark, dict(ext))
        answer.flag |= 1
        frame = answer.encode()
        r = codec.decode_send_answer(frame + b"tail")
        assert codec.decode_send_answer(frame[:-1]) is None and codec.decode_send_answer(frame[:5]) is None
        (cmd,) = FrameDecoder().feed(frame)
        if not scanned:
            assert r == len(frame), (ext, r)
            cases += 1
            continue
        assert type(r) is tuple and r[0] == len(frame), (ext, r)
        assert (r[1], r[2], r[3], r[4]) == (cmd.code, cmd.flag, cmd.opaque, cmd.remark), (r, cmd)
        mq = MessageQueue(TOPIC, "broker-a", 3)
        try:
            expected: Any = producer._result(p, mq, cmd, "addr")
        except BrokerError as exc:
            expected = exc.code
        status = _STATUS.get(r[1])
        if status is None:
            assert expected == r[1]
        else:
            qmq = mq if r[6] in (None, 3) else MessageQueue(TOPIC, "broker-a", r[6])
            assert SendResult(status, p.uniq_key, r[5], qmq, r[7], r[8], r[9], None) == expected, (r, expected)
        cases += 1

    # pull bodies: the records decoded into MessageExt, every field equal (lazy ones too)
    now = int(time.time() * 1000)
    records = []
    for i in range(40):
        body = BODY if i % 5 else b"compressible " * 400
        sys_flag = 0
        if i % 5 == 0:
            body = zlib.compress(body)
            sys_flag = 1
        records.append(encode_record(
            queue_id=i % 4, flag=i - 3, queue_offset=i * 11, commit_log_offset=i * 1200, sys_flag=sys_flag,
            born_timestamp=now, born_host=("::1", 5000 + i) if i % 7 == 3 else ("127.0.0.1", 50000),
            store_timestamp=now + i, store_host=("fe80::2", 10911) if i % 9 == 4 else ("10.1.2.3", 10911),
            reconsume_times=i % 3, prepared_transaction_offset=i, body=body,
            topic=b"PyStore" if i % 3 else "T\u00e9pic".encode(),
            properties=b"UNIQ_KEY\x017F00000100%04d\x02TAGS\x01t%d" % (i, i % 2) if i % 4 else b"",
        ))
    buf = b"".join(records)
    want = decode_messages(buf, "broker-a", 5, 99)
    got = codec.decode_messages(buf, "broker-a", 5, 99)
    assert len(got) == len(want) == 40
    for a, b in zip(got, want):
        assert type(a) is MessageExt and a == b and a._fields() == b._fields(), (a, b)
        assert a.properties == b.properties and a.born_host == b.born_host and a.store_size == b.store_size
        cases += 1
    return cases


# ---- the workloads ----------------------------------------------------------------------------------------------


def create_topic(server: PyrmqServer) -> None:
    async def main() -> None:
        async with Admin(server.namesrv_addr) as admin:
            await admin.create_topic(TOPIC, 8, broker_addr=server.broker_addr)

    trio.run(main)


def run_ab(server: PyrmqServer, n: int, codec: Any, run: int, chunks: int = 4) -> dict[str, dict]:
    """``BlockingProducer.send`` pure Python (A) and with the C codec (B), two producers of one process taking
    turns in ``chunks`` blocks each (A, B, A, B ...; B first on odd runs), so that both see the same minutes of a
    shared machine. Before timing, B's first 100 answers from the broker are decoded both ways and compared."""
    per = max(1, n // chunks)
    with BlockingProducer(server.namesrv_addr, f"native_bench_pure_{run}") as pure, \
            BlockingProducer(server.namesrv_addr, f"native_bench_native_{run}") as native:
        sender = native._direct = NativeDirectSender(native.producer, codec)
        for producer in (pure, native):
            producer.send(Message(TOPIC, BODY))  # the route
        sender.verify = 100
        for _ in range(200):
            pure.send(Message(TOPIC, BODY))
            native.send(Message(TOPIC, BODY))
        assert sender.verify == 0 and sender.fast >= 100, (sender.verify, sender.fast, sender.slow)
        sender.fast = sender.slow = 0
        totals = {"pure": [0.0, 0.0, 0.0], "native": [0.0, 0.0, 0.0]}  # seconds, client CPU, broker CPU
        order = ("pure", "native") if run % 2 == 0 else ("native", "pure")
        for _ in range(chunks):
            for name in order:
                producer = pure if name == "pure" else native
                with Timed(server.pid) as t:
                    for _ in range(per):
                        producer.send(Message(TOPIC, BODY))
                acc = totals[name]
                acc[0] += t.seconds
                acc[1] += t.own
                acc[2] += t.cpu
    count = per * chunks
    out = {name: {"rate": count / acc[0], "client_us": acc[1] / count * 1e6, "cpu_us": acc[2] / count * 1e6}
           for name, acc in totals.items()}
    out["native"]["fast"], out["native"]["slow"] = sender.fast, sender.slow
    return out


def raw_requests(n: int) -> list[bytes]:
    """``n`` distinct SEND_MESSAGE_V2 frames of a 1 KiB body (each its own UNIQ_KEY, born time and opaque, queues
    0..7 in turn), encoded by pyrmq's producer before the clock starts: what a codec costing nothing would send."""
    producer = Producer("127.0.0.1:9876", "native_bench_raw")
    out = []
    for i in range(n):
        p = producer._prepare(Message(TOPIC, BODY))
        out.append(producer._request(p, MessageQueue(TOPIC, "broker-a", i % 8), int(time.time() * 1000)).encode())
    return out


def run_raw(server: PyrmqServer, requests: list[bytes], same: bool = False) -> dict:
    """The pre-encoded requests to the broker, one in flight; the answer is read up to its length, not decoded.
    ``same``: send the first request every time (as bench/peers.py's raw rows do)."""
    host, _, port = server.broker_addr.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        recv, send = sock.recv, sock.sendall

        def round_trip(request: bytes) -> None:
            send(request)
            data = recv(65536)
            while len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "big"):
                more = recv(65536)
                if not more:
                    raise SystemExit("the broker closed the raw connection")
                data += more

        for request in requests[:200]:
            round_trip(request)
        timed = [requests[0]] * len(requests) if same else requests
        with Timed(server.pid) as t:
            for request in timed:
                round_trip(request)
    return t.row(len(requests))


def run_redis(server: RedisServer, n: int) -> dict[str, dict]:
    import redis

    r = redis.Redis(host="127.0.0.1", port=server.port)
    for _ in range(200):
        r.xadd("warm", {"body": BODY})
    with Timed(server.pid) as t:
        for _ in range(n):
            r.xadd("send", {"body": BODY})
    out = {"sync": t.row(n)}
    rounds = max(1, 50_000 // n)
    with Timed(server.pid) as t:  # reading back the stream, XREAD COUNT 1000 (as bench/peers.py consumes)
        got = 0
        for _ in range(rounds):
            last = "0-0"
            while True:
                reply = r.xread({"send": last}, count=1000)
                if not reply:
                    break
                entries = reply[0][1]
                got += len(entries)
                last = entries[-1][0]
    out["xread"] = t.row(got)
    r.close()
    return out


def pull_decode(codec: Any, rounds: int) -> dict[str, float]:
    """Client CPU a message to decode one pull answer of 32 x 1 KiB records and hand each message to a no-op."""
    now = int(time.time() * 1000)
    body = b"".join(
        encode_record(
            queue_id=0, flag=0, queue_offset=i, commit_log_offset=i * 1200, sys_flag=0, born_timestamp=now,
            born_host=("127.0.0.1", 50000), store_timestamp=now, store_host=("127.0.0.1", 10911), reconsume_times=0,
            prepared_transaction_offset=0, body=BODY, topic=b"PyStore",
            properties=b"UNIQ_KEY\x017F0000010001B4AAC6DC1A2E2C0000" + b"%04d" % i + b"\x02",
        )
        for i in range(32)
    )
    native = codec.decode_messages

    def noop(msg: object) -> None:
        pass

    out: dict[str, float] = {}
    for name, fn in (("python", lambda: decode_messages(body, "broker-a", 0, 32)),
                     ("native", lambda: native(body, "broker-a", 0, 32))):
        for m in fn():
            noop(m)
        c0 = time.process_time()
        for _ in range(rounds):
            for m in fn():
                noop(m)
        out[name] = (time.process_time() - c0) / (rounds * 32) * 1e6
    return out


def codec_micro(codec: Any, rounds: int = 20_000) -> dict[str, float]:
    """In this process, warm, no socket: CPU us of each step of one send, pyrmq's code against the prototype's.
    ``prepare``: Message + Producer._prepare (both keep it); ``encode``: Producer._request + encode_into + join
    against encode_send; ``decode``: FrameDecoder.feed + Producer._result against decode_send_answer + SendResult."""
    producer = Producer("127.0.0.1:9876", "native_micro")
    mq = MessageQueue(TOPIC, "broker-a", 0)
    p = producer._prepare(Message(TOPIC, BODY))
    born = int(time.time() * 1000)
    request = producer._request(p, mq, born)
    answer = request.make_response(0, None, {
        "MSG_REGION": "DefaultRegion", "TRACE_ON": "true", "msgId": "7F00000100002A9F00000000000F4240",
        "queueId": "0", "queueOffset": "123456"})
    answer.flag |= 1
    frame = answer.encode()
    decoder = FrameDecoder()
    encode, decode, group = codec.encode_send, codec.decode_send_answer, producer.group

    def pure_encode() -> None:
        parts: list = []
        producer._request(p, mq, born).encode_into(parts)
        b"".join(parts)

    def native_encode() -> None:
        encode(group, p.topic, mq.queue_id, p.sys_flag, born, p.flag, p.properties, p.body, next_opaque())

    def pure_decode() -> None:
        (cmd,) = decoder.feed(frame)
        producer._result(p, mq, cmd, "addr")

    def native_decode() -> None:
        r = decode(frame)
        SendResult(_STATUS[r[1]], p.uniq_key, r[5], mq, r[7], r[8], r[9], None)

    steps = {
        "prepare": lambda: producer._prepare(Message(TOPIC, BODY)),
        "encode_python": pure_encode, "encode_native": native_encode,
        "decode_python": pure_decode, "decode_native": native_decode,
    }
    out = {}
    for name, fn in steps.items():
        for _ in range(1000):
            fn()
        c0 = time.process_time()
        for _ in range(rounds):
            fn()
        out[name] = (time.process_time() - c0) / rounds * 1e6
    return out


# ---- driver -----------------------------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=20_000, help="sends a row and run (default 20,000)")
    ap.add_argument("--repeat", type=int, default=3, help="runs, turns rotated; the table shows medians")
    ap.add_argument("--pull-rounds", type=int, default=2_000, help="pull answers of 32 records decoded a run")
    args = ap.parse_args()
    peers.check_setup()
    n = args.count
    rows: dict[str, list[dict]] = {}
    pulls: list[dict[str, float]] = []
    micros: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="pyrmq-native-") as tmp:
        work = Path(tmp)
        codec = build(work)
        cases = check_codec(codec)
        progress(f"prototype built ({SOURCE.relative_to(BENCH.parent)}); {cases} cases byte-identical to pyrmq; "
                 f"{os.cpu_count()} CPUs, load average {os.getloadavg()}")
        request, answer = peers.send_frames()
        requests = raw_requests(n)
        names = ("pure+native", "raw", "redis", "floor")
        for run in range(args.repeat):
            k = run % len(names)
            order = names[k:] + names[:k]
            (work / f"run{run}").mkdir()
            pyrmq_server = PyrmqServer(work / f"run{run}")
            try:
                create_topic(pyrmq_server)
                for name in order:
                    progress(f"run {run + 1}/{args.repeat}: {name} (load average {os.getloadavg()[0]:.1f})")
                    if name == "redis":
                        redis_server = RedisServer(work / f"run{run}")
                        try:
                            got = run_redis(redis_server, n)
                        finally:
                            redis_server.stop()
                        got["xread"].pop("cpu")
                        got = {"redis": got["sync"], "xread": got["xread"]}
                    elif name == "floor":
                        echo = RawEchoServer(work / f"run{run}", "trio", answer)
                        try:
                            got = {name: peers.part2_raw(echo, request, {"py_sync": n})["py_sync"]}
                        finally:
                            echo.stop()
                    elif name == "raw":
                        got = {name: run_raw(pyrmq_server, requests)}
                    else:
                        got = run_ab(pyrmq_server, n, codec, run)
                    for key, row in got.items():
                        if "cpu" in row:  # Timed rows: the server's CPU seconds over n sends
                            row["cpu_us"] = row.pop("cpu") / n * 1e6
                        rows.setdefault(key, []).append(row)
                        if key == "xread":
                            continue
                        progress(f"  {key:7s} {row['rate']:>9,.0f} msgs/s  client {row['client_us']:6.1f} us  "
                                 f"server {row['cpu_us']:6.1f} us a send"
                                 + (f"  (native answers {row['fast']}, fallback {row['slow']})" if "fast" in row else ""))
            finally:
                pyrmq_server.stop()
            pulls.append(pull_decode(codec, args.pull_rounds))
            micros.append(codec_micro(codec))
            progress("  codec steps (us): " + ", ".join(f"{k} {v:.2f}" for k, v in micros[-1].items()))
            progress(f"  pull decode: python {pulls[-1]['python']:.2f} us, native {pulls[-1]['native']:.2f} us a message")
    print(table(rows, pulls, micros, n, args.repeat))


def med(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def table(rows: dict[str, list[dict]], pulls: list[dict[str, float]], micros: list[dict[str, float]], n: int,
          repeat: int) -> str:
    labels = (
        ("pure", "BlockingProducer.send, pure Python -> pyrmq broker"),
        ("native", "prototype: BlockingProducer + C codec (encode + answer decode) -> pyrmq broker"),
        ("raw", "raw client, pre-encoded request, answer not decoded -> pyrmq broker (codec costs nothing)"),
        ("redis", "redis-py + hiredis XADD -> Redis 7 Streams"),
        ("floor", "raw client, pre-encoded -> a trio Python server that only answers (bench/peers.py's floor)"),
    )
    redis_rate = med(rows["redis"], "rate") if rows.get("redis") else None
    lines = [
        f"Sync send, one in flight, 1 KiB bodies, {n:,} sends a row, medians of {repeat} run(s)",
        "",
        "| client -> server | msgs/s | / Redis | client CPU us a send | server CPU us a send | client + server us |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for key, label in labels:
        runs = rows.get(key)
        if not runs:
            continue
        rate, client, server = med(runs, "rate"), med(runs, "client_us"), med(runs, "cpu_us")
        vs = f"{rate / redis_rate:.2f}x" if redis_rate else "-"
        lines.append(f"| {label} | {rate:,.0f} | {vs} | {client:.1f} | {server:.1f} | {client + server:.1f} |")
    if rows.get("pure") and rows.get("native") and rows.get("raw"):
        pure, native, raw = (med(rows[k], "client_us") for k in ("pure", "native", "raw"))
        lines += ["", f"Client CPU a send: pure Python {pure:.1f} us, {pure - raw:.1f} us of it above the raw client's "
                      f"socket calls (the codec and everything else in Python); the C codec takes {pure - native:.1f} "
                      f"us off ({(pure - native) / pure * 100:.0f} %), leaving {native - raw:.1f} us of Python above the "
                      "raw client (Message, _prepare with its UNIQ_KEY, queue choice, fault bookkeeping, SendResult, "
                      "the client loop's timers)."]
    if micros:
        m = {k: statistics.median(x[k] for x in micros) for k in micros[0]}
        lines += ["", f"The codec's steps in this process (warm, no socket), CPU us a send: Message + _prepare "
                      f"{m['prepare']:.2f} (kept in Python by both); encode: _request + encode_into "
                      f"{m['encode_python']:.2f}, C {m['encode_native']:.2f}; answer: FrameDecoder + _result "
                      f"{m['decode_python']:.2f}, C + SendResult {m['decode_native']:.2f}"]
    if pulls:
        py, c = statistics.median(p["python"] for p in pulls), statistics.median(p["native"] for p in pulls)
        xr = f"; redis-py + hiredis XREAD COUNT 1000: {med(rows['xread'], 'client_us'):.2f} us" if rows.get("xread") else ""
        lines += ["", f"Pull answer of 32 x 1 KiB records, decoded into MessageExt + a no-op callback, client CPU a "
                      f"message: decode_messages {py:.2f} us, C prototype {c:.2f} us ({py / c:.1f}x){xr}"]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
