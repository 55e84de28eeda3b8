"""Transaction messages against `pyrmq dev` in-process on real sockets: commit, rollback, check-back, duplicates,
bad END_TRANSACTION, the give-up topic, the check hook, the admin listing.

Checks run every 500 ms on halves older than 500 ms, so a check-back comes within about a second.
"""

from __future__ import annotations

import sys
import time

import pytest
import trio

from pyrmq.client import (
    Admin,
    BlockingTransactionProducer,
    ConsumeFrom,
    LocalTransactionState,
    Message,
    PushConsumer,
    TransactionProducer,
)
from pyrmq.client.message import MessageExt
from pyrmq.kernel.hookspecs import hookimpl
from pyrmq.kernel.types import TransactionState
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.headers import EndTransactionRequestHeader
from pyrmq.store.format import TRANSACTION_COMMIT_TYPE, TRANSACTION_TYPE_MASK, decode_message_id

COMMIT, ROLLBACK, UNKNOWN = LocalTransactionState.COMMIT, LocalTransactionState.ROLLBACK, LocalTransactionState.UNKNOWN
FAST = {"broker.transactionCheckInterval": 500, "broker.transactionTimeOut": 500}


async def start_dev(start_role, overrides=None, plugins=()):
    kernel = await start_role("dev", dict(FAST, **(overrides or {})), extra_plugins=list(plugins))
    namesrv = kernel.listening["namesrv"]
    async with Admin(namesrv) as admin:
        with trio.fail_after(10):
            while not (await admin.cluster_info()).brokers:
                await trio.sleep(0.02)
    return kernel, namesrv, kernel.listening["broker"]


class Received:
    def __init__(self, events: list) -> None:
        self.events = events
        self.messages: list[MessageExt] = []

    async def __call__(self, msg: MessageExt) -> None:
        self.messages.append(msg)
        self.events.append(("received", msg.keys[0]))

    def keys(self) -> list[str]:
        return sorted(m.keys[0] for m in self.messages)


async def wait_for(predicate, timeout=15.0, what="condition"):
    with trio.move_on_after(timeout):
        while not predicate():
            await trio.sleep(0.02)
        return
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def end_request(group, result_or_msg, state, *, queue_offset=None, phy=None):
    if phy is None:
        phy = decode_message_id(result_or_msg.offset_msg_id)[2]
    header = EndTransactionRequestHeader(
        producer_group=group, tran_state_table_offset=result_or_msg.queue_offset if queue_offset is None else queue_offset,
        commit_log_offset=phy, commit_or_rollback=state, msg_id="x",
    )
    return RemotingCommand.request(RequestCode.END_TRANSACTION, header.to_ext_fields())


async def test_commit_rollback_and_check_back_deliver_committed_messages_once_and_never_early(start_role, nursery):
    kernel, namesrv, _ = await start_dev(start_role)
    events: list[tuple[str, str]] = []
    decisions = {"C-check-commit": COMMIT, "D-check-rollback": ROLLBACK, "E-local-raises": COMMIT}

    async def execute_local(msg, arg):
        events.append(("local", msg.keys[0]))
        if arg == "raise":
            raise RuntimeError("the database went away")
        return arg

    def check_local(msg: MessageExt):
        events.append(("check", msg.keys[0]))
        return decisions[msg.keys[0]]

    received = Received(events)
    consumer = PushConsumer(namesrv, "txn_consumer", subscribe={"Orders": "*"}, listener=received, consume_from=ConsumeFrom.FIRST_OFFSET)
    producer = TransactionProducer(namesrv, "txn_pg", check_local=check_local)
    async with consumer, producer:
        cases = [("A-commit", COMMIT), ("B-rollback", ROLLBACK), ("C-check-commit", UNKNOWN), ("D-check-rollback", UNKNOWN),
                 ("E-local-raises", "raise")]
        results = {}
        for key, arg in cases:
            msg = Message("Orders", f"body of {key}", tags="created", keys=key, properties={"shop": "17"},
                          delay_time_level=3)
            results[key] = await producer.send_in_transaction(msg, execute_local, arg)
        assert [results[k].local_state for k, _ in cases] == [COMMIT, ROLLBACK, UNKNOWN, UNKNOWN, UNKNOWN]
        await wait_for(lambda: len(received.messages) >= 3, what=f"three committed messages: {events} {kernel.plugin('transaction').bridge.committed}")
        await trio.sleep(1.5)  # more checks passes: nothing else arrives, nothing twice
        assert received.keys() == ["A-commit", "C-check-commit", "E-local-raises"]
        for msg in received.messages:
            assert msg.topic == "Orders" and msg.tags == "created" and msg.properties["shop"] == "17"
            assert msg.body == f"body of {msg.keys[0]}".encode()
            half_offset = decode_message_id(results[msg.keys[0]].send_result.offset_msg_id)[2]
        assert msg.sys_flag & TRANSACTION_TYPE_MASK == TRANSACTION_COMMIT_TYPE
        # preparedTransactionOffset: the half committed (a check copy, later in the log, for a checked transaction)
        if msg.keys[0] == "A-commit":
            assert msg.prepared_transaction_offset == half_offset
        else:
            assert msg.prepared_transaction_offset > half_offset
            assert not {"TRAN_MSG", "REAL_TOPIC", "REAL_QID", "DELAY"} & set(msg.properties)
            assert msg.properties["PGROUP"] == "txn_pg" and msg.msg_id == results[msg.keys[0]].msg_id
        # never before the commit: a checked transaction is received only after its check answered
        for key in ("C-check-commit", "E-local-raises"):
            assert events.index(("check", key)) < events.index(("received", key))
        assert ("check", "A-commit") not in events and ("check", "B-rollback") not in events
        # the undecided transactions, and only those, were checked (each resolved by its answer)
        assert {e[1] for e in events if e[0] == "check"} == {"C-check-commit", "D-check-rollback", "E-local-raises"}


async def test_a_duplicate_or_late_commit_is_answered_success_and_delivers_once(start_role, nursery, remoting_client):
    kernel, namesrv, broker = await start_dev(start_role, {"broker.transactionCheckInterval": 2000})
    received = Received([])
    consumer = PushConsumer(namesrv, "dup_consumer", subscribe={"Dup": "*"}, listener=received, consume_from=ConsumeFrom.FIRST_OFFSET)
    producer = TransactionProducer(namesrv, "dup_pg")
    async with consumer, producer:
        half = await producer.send_half(Message("Dup", b"once", keys="k1"))
        first = await remoting_client.invoke(broker, end_request("dup_pg", half, TransactionState.COMMIT))
        assert first.code == ResponseCode.SUCCESS and first.remark is None
        again = await remoting_client.invoke(broker, end_request("dup_pg", half, TransactionState.COMMIT))
        assert again.code == ResponseCode.SUCCESS and "already resolved" in again.remark
        late_rollback = await remoting_client.invoke(broker, end_request("dup_pg", half, TransactionState.ROLLBACK))
        assert late_rollback.code == ResponseCode.SUCCESS and "already resolved" in late_rollback.remark
        await wait_for(lambda: received.messages, what="the committed message")

        # the late commit of apache/rocketmq#5574: the producer's COMMIT of the original arrives after a check copy
        # was made; the check answers COMMIT for the copy too. One delivery.
        late = await producer.send_half(Message("Dup", b"late", keys="k2"))
        async with Admin(namesrv) as admin:
            with trio.fail_after(10):  # the producer has no check_local: the check goes unanswered
                while not (pending := await admin.pending_transactions("Dup")) or pending[0].check_times < 1:
                    await trio.sleep(0.05)
        [copy] = pending
        assert copy.check_times == 1 and copy.commit_log_offset != decode_message_id(late.offset_msg_id)[2]
        original = await remoting_client.invoke(broker, end_request("dup_pg", late, TransactionState.COMMIT))
        assert original.code == ResponseCode.SUCCESS and original.remark is None
        copy_commit = end_request("dup_pg", None, TransactionState.COMMIT, queue_offset=copy.half_queue_offset,
                                  phy=copy.commit_log_offset)
        answer = await remoting_client.invoke(broker, copy_commit)
        assert answer.code == ResponseCode.SUCCESS and "already resolved" in answer.remark
        await wait_for(lambda: len(received.messages) >= 2, what="the late commit")
        await trio.sleep(1.0)
        assert sorted(m.body for m in received.messages) == [b"late", b"once"]


async def test_a_bad_end_transaction_gets_system_error_naming_what_did_not_match_and_changes_nothing(
    start_role, nursery, remoting_client
):
    kernel, namesrv, broker = await start_dev(start_role, {"broker.transactionTimeOut": 60_000})
    producer = TransactionProducer(namesrv, "bad_pg")
    async with producer:
        half = await producer.send_half(Message("Bad", b"pending", keys="kb"))
        plain = await producer.send(Message("Bad", b"plain"))
        phy = decode_message_id(half.offset_msg_id)[2]

        async def refused(request, *words):
            response = await remoting_client.invoke(broker, request)
            assert response.code == ResponseCode.SYSTEM_ERROR, response.remark
            assert all(w in response.remark for w in words), response.remark

        await refused(end_request("bad_pg", half, TransactionState.COMMIT, phy=phy + 10_000_000), "no message at commit log offset")
        await refused(end_request("other_pg", half, TransactionState.COMMIT), "producer group", "bad_pg", "other_pg")
        await refused(end_request("bad_pg", half, TransactionState.COMMIT, queue_offset=half.queue_offset + 5),
                      "offset", str(half.queue_offset), str(half.queue_offset + 5))
        await refused(end_request("bad_pg", plain, TransactionState.COMMIT), "not a half message", "Bad")
        await refused(end_request("bad_pg", half, 5), "commitOrRollback 5")
        # nothing changed: the half is still pending and the right request commits it
        async with Admin(namesrv) as admin:
            assert [p.keys for p in await admin.pending_transactions("Bad")] == ["kb"]
        ok = await remoting_client.invoke(broker, end_request("bad_pg", half, TransactionState.COMMIT))
        assert ok.code == ResponseCode.SUCCESS and ok.remark is None
        async with Admin(namesrv) as admin:
            assert await admin.pending_transactions("Bad") == []


async def test_a_checker_that_never_knows_sends_the_half_to_the_check_max_topic(start_role, nursery):
    kernel, namesrv, _ = await start_dev(start_role, {"broker.transactionCheckMax": 2})
    checks: list[str] = []

    def never_knows(msg):
        checks.append(msg.properties["TRANSACTION_CHECK_TIMES"])
        return UNKNOWN

    given_up = Received([])
    consumer = PushConsumer(namesrv, "max_consumer", subscribe={"TRANS_CHECK_MAX_TIME_TOPIC": "*"}, listener=given_up,
                            consume_from=ConsumeFrom.FIRST_OFFSET)
    producer = TransactionProducer(namesrv, "max_pg", check_local=never_knows)
    async with consumer, producer:
        result = await producer.send_in_transaction(Message("Undecided", b"limbo", keys="ku"), lambda m, a: UNKNOWN)
        assert result.local_state is UNKNOWN
        await wait_for(lambda: given_up.messages, what="the half in TRANS_CHECK_MAX_TIME_TOPIC")
        [msg] = given_up.messages
        assert msg.body == b"limbo" and msg.properties["REAL_TOPIC"] == "Undecided"
        assert checks == ["1", "2"]
        async with Admin(namesrv) as admin:
            assert await admin.pending_transactions("Undecided") == []


class LedgerChecker:
    """A plugin that decides from its own ledger (a database in real life) and leaves other transactions to the
    producers."""

    def __init__(self) -> None:
        self.ledger = {"paid": TransactionState.COMMIT, "void": TransactionState.ROLLBACK}
        self.asked: list[tuple[str, int]] = []

    @hookimpl
    async def pyrmq_check_transaction(self, kernel, message, check_times):
        key = message.properties.get("KEYS")
        self.asked.append((key, check_times))
        await trio.sleep(0)  # it may await: a database round trip
        return self.ledger.get(key)


@pytest.mark.hook("pyrmq_check_transaction")
async def test_a_check_plugin_decides_before_the_producer_group_is_asked(start_role, nursery):
    ledger = LedgerChecker()
    kernel, namesrv, _ = await start_dev(start_role, plugins=[ledger])
    asked_producer: list[str] = []

    def check_local(msg):
        asked_producer.append(msg.keys[0])
        return COMMIT

    received = Received([])
    consumer = PushConsumer(namesrv, "hook_consumer", subscribe={"Ledger": "*"}, listener=received, consume_from=ConsumeFrom.FIRST_OFFSET)
    producer = TransactionProducer(namesrv, "hook_pg", check_local=check_local)
    async with consumer, producer:
        for key in ("paid", "void", "ask-the-producer"):
            await producer.send_in_transaction(Message("Ledger", key, keys=key), lambda m, a: UNKNOWN)
        await wait_for(lambda: len(received.messages) >= 2, what="two commits")
        await trio.sleep(1.2)
        assert received.keys() == ["ask-the-producer", "paid"]
        assert sorted(ledger.asked) == [("ask-the-producer", 1), ("paid", 1), ("void", 1)]
        assert asked_producer == ["ask-the-producer"]  # the default implementation asked the group only for the rest


async def test_reject_transaction_message_refuses_halves(start_role, nursery):
    kernel, namesrv, _ = await start_dev(start_role, {"broker.rejectTransactionMessage": True})
    from pyrmq.client import SendFailedError

    producer = TransactionProducer(namesrv, "rej_pg")
    async with producer:
        # NO_PERMISSION is one of the codes a producer retries (Java's retryResponseCodes): refused every time
        with pytest.raises(SendFailedError) as refused:
            await producer.send_half(Message("Rejected", b"x"))
        assert f"response code {ResponseCode.NO_PERMISSION}" in str(refused.value)
        assert "sending transaction message is forbidden" in str(refused.value)


async def test_reject_transaction_message_changed_at_runtime_applies_to_the_next_half(start_role, nursery):
    kernel, namesrv, broker = await start_dev(start_role)
    from pyrmq.client import SendFailedError

    producer = TransactionProducer(namesrv, "rt_pg")
    async with producer, Admin(namesrv) as admin:
        await producer.send_half(Message("Runtime", b"before", keys="before"))
        await admin.update_broker_config({"rejectTransactionMessage": True}, broker_addr=broker)
        with pytest.raises(SendFailedError) as refused:
            await producer.send_half(Message("Runtime", b"refused"))
        assert "sending transaction message is forbidden" in str(refused.value)
        await admin.update_broker_config({"rejectTransactionMessage": False}, broker_addr=broker)
        await producer.send_half(Message("Runtime", b"after", keys="after"))
        assert sorted(p.keys for p in await admin.pending_transactions("Runtime")) == ["after", "before"]


async def test_admin_lists_pending_halves_with_their_check_counts(start_role, nursery, tmp_path):
    # checked after 3 s: the first listing sees them unchecked however slow the machine is
    kernel, namesrv, _ = await start_dev(start_role, {"broker.transactionTimeOut": 3000})
    producer = TransactionProducer(namesrv, "adm_pg", check_local=lambda m: UNKNOWN)
    async with producer:
        for i in range(3):
            await producer.send_in_transaction(Message("Pend", f"p{i}", keys=f"k{i}"), lambda m, a: UNKNOWN)
        await producer.send_in_transaction(Message("Other", b"o", keys="ko"), lambda m, a: UNKNOWN)
        async with Admin(namesrv) as admin:
            pending = await admin.pending_transactions("Pend")
            assert [(p.keys, p.check_times) for p in pending] == [("k0", 0), ("k1", 0), ("k2", 0)]
            await wait_for(lambda: producer.checks_answered >= 4, what="a check pass")
            await trio.sleep(0.2)
            pending = await admin.pending_transactions("Pend")
            assert sorted(p.keys for p in pending) == ["k0", "k1", "k2"] and all(p.check_times >= 1 for p in pending)
            assert {p.producer_group for p in pending} == {"adm_pg"}
        # the command line prints the same
        proc = await trio.run_process(
            [sys.executable, "-m", "pyrmq", "admin", "transaction", "pending", "-n", namesrv, "-t", "Pend"],
            capture_stdout=True, capture_stderr=True, check=False)
        out = proc.stdout.decode()
        assert proc.returncode == 0, proc.stderr.decode()
        assert "CHECKS" in out and all(f"k{i}" in out for i in range(3)) and "ko" not in out


async def test_the_blocking_producer_runs_the_local_transaction_in_the_caller_and_answers_checks(start_role, nursery):
    kernel, namesrv, _ = await start_dev(start_role)
    received = Received([])
    consumer = PushConsumer(namesrv, "blk_consumer", subscribe={"Blk": "*"}, listener=received, consume_from=ConsumeFrom.FIRST_OFFSET)
    async with consumer:

        def work():
            with BlockingTransactionProducer(namesrv, "blk_pg", check_local=lambda m: COMMIT) as producer:
                a = producer.send_in_transaction(Message("Blk", b"now", keys="now"), lambda m, a: COMMIT)
                b = producer.send_in_transaction(Message("Blk", b"later", keys="later"), lambda m, a: UNKNOWN)
                deadline = time.monotonic() + 15
                while producer.producer.checks_answered < 1 and time.monotonic() < deadline:
                    time.sleep(0.05)
                return a.local_state, b.local_state

        states = await trio.to_thread.run_sync(work)
        assert states == (COMMIT, UNKNOWN)
        await wait_for(lambda: len(received.messages) >= 2, what="both commits")
        assert received.keys() == ["later", "now"]


async def test_checks_go_round_robin_to_the_live_producers_of_the_group(start_role, nursery):
    kernel, namesrv, _ = await start_dev(start_role)
    answered: dict[str, list[str]] = {"p1": [], "p2": []}

    def checker(who):
        def check_local(msg):
            answered[who].append(msg.keys[0])
            return COMMIT

        return check_local

    received = Received([])
    consumer = PushConsumer(namesrv, "rr_consumer", subscribe={"RoundRobin": "*"}, listener=received,
                            consume_from=ConsumeFrom.FIRST_OFFSET)
    # two producer clients of one group (two connections to the broker), like two processes
    p1 = TransactionProducer(namesrv, "rr_pg", check_local=checker("p1"))
    p2 = TransactionProducer(namesrv, "rr_pg", check_local=checker("p2"))
    async with consumer, p1, p2:
        assert p1.client_id != p2.client_id
        for i in range(6):
            await p1.send_in_transaction(Message("RoundRobin", f"r{i}", keys=f"r{i}"), lambda m, a: UNKNOWN)
        await wait_for(lambda: len(received.messages) >= 6, what="six commits by check-back")
    assert answered["p1"] and answered["p2"], answered  # both producers were asked
    assert set(answered["p1"] + answered["p2"]) == {f"r{i}" for i in range(6)}
    assert received.keys() == [f"r{i}" for i in range(6)]
