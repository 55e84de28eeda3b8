"""The broker's send fast paths against their general counterparts, over generated requests (hypothesis).

* single sends: ``SendProcessor.send`` (the one-pass ``_send_one`` for V2 names, whatever it leaves to the general
  path) on broker A against ``SendProcessor.send_general`` (header object, ``check``, record, put chain,
  ``put_message``) on broker B;
* batch sends: A's bulk path (``put_entries`` of the entries' bytes) against B's per-record path (records through
  the put chain, ``put_messages``): B has one more put interceptor, a pass-through one without triggers, so that its
  chain wants every message (what any plugin without triggers does);
* the store's two batch puts, ``put_entries`` (A's store) and ``put_messages`` (B's store).

Each pair of brokers is started alike (real stores in temporary directories, the shipped ``broker`` bundle); the
processors are called in-process with one real server-side ``Connection`` (a real TCP socket on 127.0.0.1), both
with the same request and the same random seed. Compared: response code, remark, the response header's bytes
(the message id and queue offset replaced, as they name each broker's own host and place), or the exception; the
stored records (store timestamp, store host, offsets masked; for a batch through the records path the properties
compared decoded, since that path re-encodes them) and each record's consume-queue unit (tags code, size).

Generated: V1 and V2 header names, the send codes, every header field valid, missing or not a number, queue ids in
and out of range and negative, flags, sysFlag transaction types, properties with duplicates and empty values,
TAGS / KEYS / UNIQ_KEY or not, the DELAY / TIMER_* / TRAN_MSG triggers (values that never come due during the
test, so nothing is appended behind its back), topics existing (any permission, order or not) / unknown / retry /
forbidden / malformed, auto-creation on and off, and the broker's permission and rejectTransactionMessage
(UPDATE_BROKER_CONFIG).
"""

from __future__ import annotations

import itertools
import socket
import time
from typing import Any

import attrs
import outcome
import pytest
import trio
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from pyrmq.kernel.hookspecs import hookimpl
from pyrmq.plugins.broker.core import BROKER
from pyrmq.plugins.broker.send import SEND, SendProcessor
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.connection import Connection
from pyrmq.remoting.headers import SendMessageRequestHeader, SendMessageResponseHeader
from pyrmq.remoting.message import (
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
    BatchEntry,
    decode_message,
    decode_message_id,
    decode_properties,
    encode_batch_body,
    pack_host,
)
from pyrmq.store.format import MessageRecord
from pyrmq.store.results import AppendMessageResult, PutMessageResult, PutMessageStatus

#: a few seconds a test: the known cases (``@example``) and about a hundred generated ones
SETTINGS = settings(
    max_examples=100, deadline=None, database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

V1 = SendMessageRequestHeader.WIRE_NAMES
V2 = SendMessageRequestHeader.WIRE_NAMES_V2
FIELDS = list(V1)
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
#: in an hour: a timed message parked for then stays parked while the test runs
LATER_MS = int(time.time() * 1000) + 3_600_000


class PassThrough:
    """A put interceptor without triggers (so the chain wants every message) that changes nothing."""

    name = "pass-through"
    order = 1000

    def intercept(self, record: Any, context: Any) -> Any:
        return record


class GeneralPlugin:
    @hookimpl
    def pyrmq_register_put_interceptors(self, kernel: Any) -> list[Any]:
        return [PassThrough()]


@attrs.define
class Side:
    kernel: Any
    processor: SendProcessor
    settings_applied: tuple[int, bool] = (6, False)

    @property
    def store(self) -> Any:
        return self.kernel.state.get(BROKER).store

    async def admin(self, connection: Any, code: int, ext: dict[str, str], body: bytes = b"") -> RemotingCommand:
        return await self.kernel.processors["broker"][code](connection, RemotingCommand.request(code, ext, body))


@attrs.define
class Pair:
    fast: Side
    general: Side
    auto_create: bool


async def start_pairs(start_role: Any, nursery: trio.Nursery, autos: tuple[bool, ...]) -> Any:
    """Broker pairs (auto-creation on and/or off), and a real server-side connection to call their processors
    with (the peer's socket is kept open by the returned tuple's last member)."""
    made = {}
    for auto in autos:
        sides = []
        for extra in ((), (GeneralPlugin(),)):
            kernel = await start_role("broker", {
                "broker.namesrvAddr": "", "broker.autoCreateTopicEnable": auto,
                "broker.transactionCheckInterval": 3_600_000,  # no half message is checked (re-put) meanwhile
            }, extra_plugins=extra)
            sides.append(Side(kernel, kernel.state.get(SEND)))
        made[auto] = Pair(sides[0], sides[1], auto)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    peer = socket.create_connection(listener.getsockname())
    server, _ = listener.accept()
    listener.close()
    return made, Connection(server, None, nursery, server_side=True), peer


@pytest.fixture
async def pairs(start_role, nursery):
    made, connection, peer = await start_pairs(start_role, nursery, (True, False))
    yield made, connection
    connection.close()
    peer.close()


@pytest.fixture
async def one_pair(start_role, nursery):
    made, connection, peer = await start_pairs(start_role, nursery, (True,))
    yield made, connection
    connection.close()
    peer.close()


# -- generated requests -------------------------------------------------------------------------------------------

_garbage = st.sampled_from(["", "x", "1.5", "0x10", "2147483648999999999999", "--1", "１"])
_names = st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "WAIT", "CLUSTER", "a", "PGROUP", "XTAGS", "TAGSX", "REAL_TOPIC"])
_values = st.sampled_from(["", "A", "B", "a b", "true", "false", "x\x01y", "é\u4e2d", "7F0000010001"])
_triggers = st.one_of(
    # DELAY levels of a minute or more (or refused): nothing comes due while the test runs
    st.tuples(st.just("DELAY"), st.sampled_from(["", "0", "5", "18", "99", "-1", "x"])),
    st.tuples(st.just("TIMER_DELIVER_MS"), st.sampled_from(["", "1", "-5", "abc", str(LATER_MS), str(2**62)])),
    st.tuples(st.just("TIMER_DELAY_SEC"), st.sampled_from(["", "-5", "0", "abc", "99999999999"])),
    st.tuples(st.just("TRAN_MSG"), st.sampled_from(["", "true", "false"])),
)
_item = st.one_of(
    st.tuples(_names, _values).map("\x01".join),
    _triggers.map("\x01".join),
    st.sampled_from(["", "noseparator", "\x01v", "TAGS\x01"]),
)
_properties = st.lists(_item, max_size=7).map("\x02".join)


@st.composite
def topics(draw: Any) -> tuple[str, dict[str, Any] | None]:
    """(a topic name template with {n} for a per-example suffix, the config to create it with or None)."""
    kind = draw(st.sampled_from(["existing"] * 6 + ["unknown", "retry", "TBW102", "forbidden", "bad"]))
    if kind == "existing":
        queues = draw(st.integers(1, 6))
        config = {
            "readQueueNums": str(draw(st.sampled_from([queues, queues, 1, 6]))), "writeQueueNums": str(queues),
            "perm": str(draw(st.sampled_from([6, 6, 6, 7, 4, 2, 3, 0]))),
            "order": draw(st.sampled_from(["false", "false", "true"])),
        }
        return "T{n}", config
    return {"unknown": "U{n}", "retry": "%RETRY%G{n}", "TBW102": "TBW102", "forbidden": SCHEDULE_TOPIC,
            "bad": draw(st.sampled_from(["bad topic{n}", "", " ", "x" * 128, "é{n}"]))}[kind], None


@st.composite
def header_fields(draw: Any, topic: str, batch: bool) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "producer_group": draw(st.sampled_from(["pg", "", "p\"g"])),
        "topic": topic,
        "default_topic": draw(st.sampled_from(["TBW102", "TBW102", "Nope", topic])),
        "default_topic_queue_nums": draw(st.integers(-1, 8)),
        "queue_id": draw(st.one_of(st.integers(0, 1), st.integers(-3, 8))),
        "sys_flag": draw(st.sampled_from([0] * 6 + [4, 8, 12, 2, 1, 0x30, 0x7FFFFFFF, -1])),
        "born_timestamp": draw(st.integers(0, 2**62)),
        "flag": draw(st.integers(-(2**31), 2**31 - 1)),
        "properties": draw(st.none() | _properties),
        "reconsume_times": draw(st.none() | st.integers(0, 20)),
        "unit_mode": draw(st.none() | st.sampled_from(["false", "true", "x"])),
        "max_reconsume_times": draw(st.none() | st.integers(-1, 20)),
        "batch": draw(st.sampled_from([None] * 4 + ["false", "False", "true"])) if not batch else "true",
        "bname": draw(st.none() | st.just("broker-a")),
    }
    if draw(st.sampled_from([False, False, True])):  # a field missing or not a number
        fields[draw(st.sampled_from(FIELDS))] = draw(st.none() | _garbage)
    return {k: v if v is None or type(v) is str else str(v) for k, v in fields.items()}


@st.composite
def cases(draw: Any, batch: bool = False) -> dict[str, Any]:
    topic, config = draw(topics())
    body: Any
    if batch:
        entries = draw(st.lists(
            st.tuples(st.integers(-(2**31), 2**31 - 1), st.binary(max_size=8), _properties), min_size=1, max_size=4))
        body = encode_batch_body([BatchEntry(flag, data, props.encode()) for flag, data, props in entries])
    else:
        body = draw(st.binary(max_size=16))
    return {
        "auto_create": draw(st.booleans()),
        "broker_permission": draw(st.sampled_from([6] * 8 + [4, 2])),
        "reject_transactions": draw(st.sampled_from([False, False, True])),
        "topic": topic,
        "config": config,
        "fields": draw(header_fields(topic, batch)),
        "v2": draw(st.booleans()),
        "code": RequestCode.SEND_BATCH_MESSAGE if batch else draw(st.sampled_from(
            [RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_MESSAGE])),
        "body": body,
        "seed": draw(st.integers(0, 2**32)),
    }


# -- running a case on both sides ---------------------------------------------------------------------------------

_example = itertools.count()


async def prepare(pair: Pair, connection: Any, case: dict[str, Any], topic: str) -> None:
    for side in (pair.fast, pair.general):
        wanted = (case["broker_permission"], case["reject_transactions"])
        if side.settings_applied != wanted:
            body = f"brokerPermission={wanted[0]}\nrejectTransactionMessage={str(wanted[1]).lower()}\n".encode()
            answer = await side.admin(connection, RequestCode.UPDATE_BROKER_CONFIG, {}, body)
            assert answer.code == ResponseCode.SUCCESS
            side.settings_applied = wanted
        if case["config"] is not None:
            ext = dict(case["config"], topic=topic, defaultTopic="TBW102", topicFilterType="SINGLE_TAG")
            assert (await side.admin(connection, RequestCode.UPDATE_AND_CREATE_TOPIC, ext)).code == ResponseCode.SUCCESS


def request_of(case: dict[str, Any], opaque: int) -> RemotingCommand:
    names = V2 if case["v2"] else V1
    ext = {names[k]: v for k, v in case["fields"].items() if v is not None}
    request = RemotingCommand.request(case["code"], ext, case["body"])
    request.opaque = opaque
    return request


def appended(store: Any, start: int) -> list[Any]:
    """The records appended to ``store``'s commit log from ``start`` on."""
    log = store.commit_log
    out = []
    offset, end = start, log.max_offset
    while offset < end:
        size = log.record_size_at(offset)
        if size is None:  # the blank end of a segment
            offset = (offset // log.file_size + 1) * log.file_size
            continue
        out.append(decode_message(bytes(log.get_data(offset, size)))[0])
        offset += size
    return out


def unit_of(store: Any, record: Any) -> tuple[int, int, int] | None:
    if record.sys_flag & TRANSACTION_TYPE_MASK in (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE):
        return None  # a prepared or rolled-back record takes no queue offset and gets no unit
    queue = store.consume_queues.get(record.topic, record.queue_id)
    return None if queue is None else queue.get_unit(record.queue_offset)


def comparable(record: Any, unit: Any, decode_props: bool) -> dict[str, Any]:
    """A stored record and its consume-queue unit without what legitimately differs between two brokers."""
    fields = attrs.asdict(record)
    fields.update(store_timestamp=0, store_host=None, commit_log_offset=None, queue_offset=None)
    if decode_props:  # re-encoded properties: the same decoded, another order and size
        fields.update(properties_bytes=decode_properties(record.properties_bytes), total_size=None)
    tags_code = size = None
    if unit is not None:
        assert unit[0] == record.commit_log_offset
        size, tags_code = unit[1], unit[2]
        if record.topic == SCHEDULE_TOPIC:
            tags_code = None  # the delivery time: when the append happened
        if decode_props:
            size = None
    fields["unit"] = (unit is not None, size, tags_code)
    return fields


def response_view(result: outcome.Outcome) -> Any:
    """What a client sees of a response (or the exception the connection turns into SYSTEM_ERROR)."""
    if isinstance(result, outcome.Error):
        return ("raised", type(result.error).__name__, str(result.error))
    response = result.unwrap()
    if response is None:
        return None
    header = response.encode_header().decode()
    ext = dict(response.ext_fields)
    for key in ("msgId", "queueOffset"):
        if key in ext:
            header = header.replace(f'"{key}":"{ext[key]}"', f'"{key}":"*"')
            ext[key] = "*"
    return (response.code, response.remark, ext, header, response.body_bytes())


async def run_case(pairs: Any, case: dict[str, Any]) -> str:
    made, connection = pairs
    pair = made[case["auto_create"]]
    n = next(_example)
    topic = case["topic"].replace("{n}", str(n))
    case = dict(case, fields=dict(case["fields"], topic=topic if case["fields"]["topic"] is not None else None))
    if case["fields"]["default_topic"] == case["topic"]:
        case["fields"]["default_topic"] = topic
    await prepare(pair, connection, case, topic)
    results, stored = [], []
    for side, send in ((pair.fast, pair.fast.processor.send), (pair.general, pair.general.processor.send_general)):
        side.processor.rng.seed(case["seed"])
        start = side.store.commit_log.max_offset
        result = await outcome.acapture(send, connection, request_of(case, n))
        records = appended(side.store, start)
        stored.append([comparable(r, unit_of(side.store, r), case["code"] == RequestCode.SEND_BATCH_MESSAGE)
                       for r in records])
        results.append(result)
        if not isinstance(result, outcome.Error) and result.value is not None and "msgId" in result.value.ext_fields:
            response = result.value  # its message id and queue offset name the records stored
            ids = response.ext_fields["msgId"].split(",")
            assert [decode_message_id(i)[2] for i in ids] == [r.commit_log_offset for r in records]
            if case["code"] != RequestCode.SEND_BATCH_MESSAGE:
                assert int(response.ext_fields["queueOffset"]) == records[0].queue_offset
    fast, general = (response_view(r) for r in results)
    assert fast == general
    assert stored[0] == stored[1]
    return f"answered {fast[0] if fast else fast}, {len(stored[0])} record(s) stored"


def case_of(*, batch: bool = False, properties: str | None = None, entries: Any = (), **fields: Any) -> dict[str, Any]:
    """A send to an existing writable topic (queue 0, V2 names), with ``fields`` replaced: an explicit example."""
    header = {
        "producer_group": "pg", "topic": "T{n}", "default_topic": "TBW102", "default_topic_queue_nums": "4",
        "queue_id": "0", "sys_flag": "0", "born_timestamp": "1700000000000", "flag": "0", "properties": properties,
        "reconsume_times": None, "unit_mode": None, "max_reconsume_times": None, "batch": "true" if batch else None,
        "bname": None,
    }
    header.update(fields)
    body = encode_batch_body([BatchEntry(0, b"b", p.encode()) for p in entries]) if batch else b"body"
    return {
        "auto_create": True, "broker_permission": 6, "reject_transactions": False, "topic": "T{n}",
        "config": {"readQueueNums": "2", "writeQueueNums": "2", "perm": "6", "order": "false"},
        "fields": header, "v2": True,
        "code": RequestCode.SEND_BATCH_MESSAGE if batch else RequestCode.SEND_MESSAGE_V2, "body": body, "seed": 1,
    }


#: known differences of the past, always run (then hypothesis' own cases)
SINGLE_EXAMPLES = [
    case_of(max_reconsume_times="x"),  # the one-pass path took a send the header class refuses
    case_of(reconsume_times="1.5"),
    case_of(properties="TAGS\x01A\x02TAGS\x01\x02KEYS\x01k\x02WAIT\x01false"),
    case_of(queue_id="-1"),
    case_of(queue_id="2"),
    case_of(sys_flag="4", properties="TRAN_MSG\x01true"),
    case_of(properties="DELAY\x015"),
    case_of(properties="TIMER_DELIVER_MS\x01" + str(LATER_MS)),
]
BATCH_EXAMPLES = [
    case_of(batch=True, entries=["TAGS\x01A\x02TAGS\x01", "TAGS\x01B"]),  # the bulk path stored tags code 0
    case_of(batch=True, entries=["WAIT\x01true", "", "KEYS\x01k\x02WAIT\x01true\x02UNIQ_KEY\x01u"],
            properties="TAGS\x01T\x02WAIT\x01false"),
    case_of(batch=True, entries=["DELAY\x010"]),
    case_of(batch=True, entries=["TRAN_MSG\x01true"]),
]


def run_examples(pairs: Any, strategy: Any, examples: list[dict[str, Any]], max_examples: int = 100) -> Any:
    """Run ``strategy``'s cases on the loop's thread (the brokers' own), hypothesis driving from a worker thread."""

    @settings(SETTINGS, max_examples=max_examples)
    @given(strategy)
    def check(case: dict[str, Any]) -> None:
        event(trio.from_thread.run(run_case, pairs, case))  # the spread: pytest --hypothesis-show-statistics

    for case in examples:
        check = example(case)(check)
    return check


@pytest.mark.hook("pyrmq_register_put_interceptors")
async def test_one_pass_single_send_answers_and_stores_as_the_general_path(pairs):
    await trio.to_thread.run_sync(run_examples(pairs, cases(), SINGLE_EXAMPLES))


@pytest.mark.hook("pyrmq_register_put_interceptors")
async def test_bulk_batch_send_answers_and_stores_as_the_per_record_path(pairs):
    await trio.to_thread.run_sync(run_examples(pairs, cases(batch=True), BATCH_EXAMPLES, max_examples=60))


# -- the store's two batch puts -----------------------------------------------------------------------------------


@st.composite
def store_batches(draw: Any) -> dict[str, Any]:
    entries = draw(st.lists(st.tuples(st.integers(-(2**31), 2**31 - 1), st.binary(max_size=8), _properties),
                            min_size=0, max_size=5))
    return {
        "entries": [(flag, data, props.encode()) for flag, data, props in entries],
        "sys_flag": draw(st.sampled_from([0, 0, 4, 8, 12, 2, 0x30])),
        "born_timestamp": draw(st.integers(0, 2**62)),
        "born_host": draw(st.sampled_from([("10.0.0.2", 5000), ("::1", 6000)])),
        "reconsume_times": draw(st.integers(0, 3)),
        "queue_id": draw(st.integers(0, 3)),
    }


async def run_store_batch(pairs: Any, case: dict[str, Any]) -> None:
    made, _ = pairs
    pair = made[True]
    topic = f"S{next(_example)}"
    here = ("10.0.0.1", 10911)
    stores = (pair.fast.store, pair.general.store)
    starts = [store.commit_log.max_offset for store in stores]
    entries_result = stores[0].put_entries(
        topic, case["queue_id"], case["entries"], case["sys_flag"], case["born_timestamp"], case["born_host"], here,
        case["reconsume_times"],
    )
    records = [
        MessageRecord(topic, case["queue_id"], data, flag, properties_bytes=props, sys_flag=case["sys_flag"],
                      born_timestamp=case["born_timestamp"], born_host=case["born_host"], store_host=here,
                      reconsume_times=case["reconsume_times"])
        for flag, data, props in case["entries"]
    ]
    messages_result = stores[1].put_messages(records)
    views = []
    for result, store, start in zip((entries_result, messages_result), stores, starts):
        append = result.append
        views.append((
            result.status, result.remark, None if append is None else (append.msg_num, append.wrote_bytes),
            None if append is None else [o - start for o in append.offsets],
            [comparable(r, unit_of(store, r), False) | {"commit_log_offset": r.commit_log_offset - start,
                                                               "queue_offset": r.queue_offset}
             for r in appended(store, start)],
        ))
    assert views[0] == views[1]


async def test_put_entries_stores_and_dispatches_as_put_messages(one_pair):
    @SETTINGS
    @given(store_batches())
    def check(case: dict[str, Any]) -> None:
        trio.from_thread.run(run_store_batch, one_pair, case)

    await trio.to_thread.run_sync(check)


# -- the send response template -----------------------------------------------------------------------------------

_odd = st.sampled_from(['"', "\\", "\x00", "\x1f", "\u2028", "é", "\u4e2d", "\U0001f600", "\n"])
_text = st.lists(st.one_of(_odd, st.text(max_size=4)), max_size=5).map("".join)


def response_template_check(ctx: Any) -> Any:
    @SETTINGS
    @given(
        region=_text,
        hosts=st.lists(st.tuples(st.sampled_from(["10.0.0.1", "127.0.0.1", "::1", "fe80::1", "255.255.255.255"]),
                                 st.integers(0, 65535)), min_size=1, max_size=3),
        wrote_offset=st.integers(0, 2**63 - 1), queue_offset=st.integers(0, 2**63 - 1),
        queue_id=st.integers(0, 2**31 - 1), status=st.sampled_from(list(PutMessageStatus)),
    )
    def check(region, hosts, wrote_offset, queue_offset, queue_id, status):
        shipped = ctx.settings
        ctx.settings = attrs.evolve(shipped, regionId=region)  # what the processor renders its template from
        try:
            processor = SendProcessor(ctx)
        finally:
            ctx.settings = shipped
        request = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {})
        for host in hosts:  # the store host remembered, then another one
            ip, port = pack_host(host)[:2]
            append = AppendMessageResult(wrote_offset, 100, queue_offset, 0, ip, port)
            response = processor._response(request, PutMessageResult(status, append), queue_id)
            assert (response.ext_json is not None) == status.is_ok
            generic = attrs.evolve(response, ext_json=None)
            assert response.encode_header() == generic.encode_header()
            if status.is_ok:  # the fields of SendMessageResponseHeader, as the general path writes them
                assert response.ext_fields == {
                    "MSG_REGION": region, "TRACE_ON": "true",
                    **SendMessageResponseHeader(append.msg_id, queue_id, queue_offset).to_ext_fields(),
                }

    return check


async def test_send_response_template_writes_the_generic_encoders_bytes(start_role):
    """``SendProcessor._response`` renders a single send's extFields from a template (``ext_json``), for any
    region name (quotes, backslashes, control characters, non-ASCII), store host and numbers: the same bytes as
    the generic encoder over its ``ext_fields``, which hold what SendMessageResponseHeader gives."""
    kernel = await start_role("broker", {"broker.namesrvAddr": ""})
    ctx = kernel.state.get(BROKER)
    response_template_check(ctx)()  # on the loop's thread: nothing else reads the settings meanwhile
