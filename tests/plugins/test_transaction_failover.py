"""Transactions across a role change, in-process on real sockets: a replica whose store holds replicated halves is
promoted the way the failover replicator does it (store writable, then ``pyrmq_role_changed`` MASTER), demoted
(store read-only, then SLAVE) and promoted again.

A master (A, a long transactionTimeOut: it never checks) and a classic slave (B, checks every 300 ms) of one group;
a transaction producer commits c1 and c6, rolls back r2 and leaves p3, p4, p5 unknown. B takes everything over HA;
then A stops and B's log is cut between c6's commit and its op record (what a replica whose replication stopped
between the two holds). B promoted: it checks p3, p4, p5 back with the producer (never c6: it writes c6's missing op
record instead) and commits each committed transaction once; demoted, it checks nothing; promoted again, it reads its
pending set again and goes on.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import trio

from pyrmq.client import Admin, ClientConfig, LocalTransactionState, Message, TransactionProducer
from pyrmq.kernel.bundles import packaged_bundle_path
from pyrmq.kernel.hookspecs import hookimpl
from pyrmq.kernel.types import Role, RoleChange
from pyrmq.plugins.broker.core import BROKER
from pyrmq.plugins.broker.transaction import HALF_TOPIC, OP_TOPIC, SYS_GROUP
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.headers import EndTransactionRequestHeader
from pyrmq.store.format import decode_message_id, decode_messages

TOPIC = "FoTopic"
GROUP = "broker-t"
COMMIT, ROLLBACK, UNKNOWN = LocalTransactionState.COMMIT, LocalTransactionState.ROLLBACK, LocalTransactionState.UNKNOWN


class CheckRecorder:
    """Sees every check a broker makes (the hook is called once per check) and leaves the verdict to the producer."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, int]] = []

    @hookimpl
    async def pyrmq_check_transaction(self, message, check_times):
        self.asked.append((message.properties.get("KEYS", ""), check_times))
        return None


def fast_sync_bundle(tmp_path: Path) -> str:
    """The broker bundle with the slave's metadata sync every 300 ms (topics and offsets reach B quickly)."""
    path = tmp_path / "broker-fast-sync.toml"
    path.write_text(packaged_bundle_path("broker").read_text()
                    + '\n[plugins."pyrmq.plugins.broker.ha.plugin"]\nslaveSyncInterval = 300\nslaveSyncFirstDelay = 100\n')
    return str(path)


async def wait_for(predicate, what: str, timeout: float = 20.0) -> None:
    """Until ``predicate()`` (a bool, or an awaitable of one) is true; fails the test after ``timeout``."""
    with trio.move_on_after(timeout):
        while True:
            value = predicate()
            if inspect.isawaitable(value):
                value = await value
            if value:
                return
            await trio.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


async def read_topic(client, addr: str) -> list[str]:
    """The keys of every message in the topic's 4 queues on ``addr`` (plain pulls from offset 0)."""
    keys = []
    for queue_id in range(4):
        offset = 0
        while True:
            request = RemotingCommand.request(RequestCode.PULL_MESSAGE, {
                "consumerGroup": "fo_reader", "topic": TOPIC, "queueId": str(queue_id), "queueOffset": str(offset),
                "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0",
                "subscription": "*", "subVersion": "0"})
            response = await client.invoke(addr, request)
            if response.code != ResponseCode.SUCCESS:
                break
            keys.extend(m.properties["KEYS"] for m in decode_messages(response.body_bytes()))
            offset = int(response.ext_fields["nextBeginOffset"])
    return sorted(keys)


async def test_a_promoted_replica_checks_the_replicated_halves_back_and_commits_each_once(
    start_role, remoting_client, tmp_path
):
    namesrv = (await start_role("namesrv")).listening["namesrv"]
    common = {"broker.namesrvAddr": namesrv, "broker.brokerName": GROUP, "broker.haSendHeartbeatInterval": 200}
    a = await start_role("broker", {**common, "broker.brokerRole": "ASYNC_MASTER",
                                    "broker.transactionTimeOut": 60_000, "broker.transactionCheckInterval": 60_000})
    recorder = CheckRecorder()
    b = await start_role(fast_sync_bundle(tmp_path), {
        **common, "broker.brokerRole": "SLAVE", "broker.brokerId": 1,
        "broker.transactionTimeOut": 500, "broker.transactionCheckInterval": 300}, extra_plugins=[recorder])
    actx, bctx = a.state.get(BROKER), b.state.get(BROKER)
    b_addr = b.listening["broker"]
    await wait_for(lambda: actx.replicator.ha.slaves, "B following A")

    decide = {"p3": COMMIT, "p4": ROLLBACK, "p5": UNKNOWN}
    checked: list[str] = []

    def check_local(msg):
        checked.append(msg.keys[0])
        return decide[msg.keys[0]]

    config = ClientConfig(namesrv_addr=namesrv, heartbeat_broker_interval=0.5, poll_name_server_interval=0.5)
    async with TransactionProducer(config=config, group="fo_pg", check_local=check_local) as producer:
        results = {}
        for key, local in (("c1", COMMIT), ("r2", ROLLBACK), ("p3", UNKNOWN), ("p4", UNKNOWN), ("p5", UNKNOWN),
                           ("c6", COMMIT)):
            results[key] = await producer.send_in_transaction(Message(TOPIC, key.encode(), keys=key), lambda m, s: s, local)
        async with Admin(namesrv) as admin:
            async def three_pending() -> bool:  # END_TRANSACTION is oneway: until A has taken c1, r2 and c6
                return sorted(p.keys for p in await admin.pending_transactions(TOPIC)) == ["p3", "p4", "p5"]

            await wait_for(three_pending, "A's pending set p3, p4, p5")
        await wait_for(lambda: bctx.store.commit_log.max_offset == actx.store.commit_log.max_offset,
                       "B holding A's whole commit log")
        await wait_for(lambda: bctx.topics.get(TOPIC) is not None, "the topic on B")

        # a slave checks nothing, and refuses END_TRANSACTION
        await trio.sleep(1.0)  # three of B's check intervals, each half older than B's transactionTimeOut
        assert recorder.asked == [] and checked == []
        end = EndTransactionRequestHeader(
            producer_group="fo_pg", tran_state_table_offset=results["p3"].send_result.queue_offset,
            commit_log_offset=decode_message_id(results["p3"].send_result.offset_msg_id)[2],
            commit_or_rollback=COMMIT.value, msg_id="x")
        refused = await remoting_client.invoke(b_addr, RemotingCommand.request(RequestCode.END_TRANSACTION, end.to_ext_fields()))
        assert refused.code == ResponseCode.SLAVE_NOT_AVAILABLE

        # A goes away; B's log ends between c6's commit and its op record
        a.request_stop()
        await wait_for(lambda: a.nursery is None, "A stopped")
        store = bctx.store
        op_queue = store.consume_queues.get(OP_TOPIC, 0)
        op_phy, op_size, _ = op_queue.get_unit(op_queue.max_offset - 1)
        assert op_phy + op_size == store.commit_log.max_offset  # c6's op record is the last record
        store.truncate_replica(op_phy)
        assert await read_topic(remoting_client, b_addr) == ["c1", "c6"]

        # promoted as the failover replicator does: writable first, then the role
        store.set_read_only(None)
        await b.hooks.role_changed(b, RoleChange(Role.MASTER, broker_id=0, epoch=1))
        await wait_for(lambda: {"p3", "p4"} <= set(checked) and checked.count("p5") >= 2,
                       "p3 and p4 checked back, p5 twice")

        async def committed(keys: list[str]) -> bool:
            return await read_topic(remoting_client, b_addr) == keys

        await wait_for(lambda: committed(["c1", "c6", "p3"]), "p3 committed on B")
        assert "c6" not in checked and all(key != "c6" for key, _ in recorder.asked)

        # demoted: the check service stops
        store.set_read_only("replica 1 is not the elected master")
        await b.hooks.role_changed(b, RoleChange(Role.SLAVE, broker_id=1))
        asked = len(recorder.asked)
        await trio.sleep(1.0)  # three check intervals: p5's latest copy is due after 500 ms
        assert len(recorder.asked) == asked
        refused = await remoting_client.invoke(b_addr, RemotingCommand.request(RequestCode.END_TRANSACTION, end.to_ext_fields()))
        assert refused.code == ResponseCode.SLAVE_NOT_AVAILABLE

        # promoted again: the pending set read again from B's store, p5 checked on and committed once
        decide["p5"] = COMMIT
        store.set_read_only(None)
        await b.hooks.role_changed(b, RoleChange(Role.MASTER, broker_id=0, epoch=2))
        async with Admin(namesrv) as admin:
            async def none_pending() -> bool:
                return await admin.pending_transactions(TOPIC) == []

            await wait_for(none_pending, "no pending half on B")
        await wait_for(lambda: committed(["c1", "c6", "p3", "p5"]), "p5 committed on B")
        await trio.sleep(1.0)  # more check passes: nothing is checked or committed again
        assert await read_topic(remoting_client, b_addr) == ["c1", "c6", "p3", "p5"]
        assert sorted(set(checked)) == ["p3", "p4", "p5"] and checked.count("p3") == checked.count("p4") == 1
        assert {key for key, _ in recorder.asked} == {"p3", "p4", "p5"}



async def test_a_master_with_a_read_bound_saves_its_check_positions_only_once_the_bound_covers_them(
    start_role, remoting_client
):
    """A failover master with other in-sync members has a read bound (the confirm offset). Its check service keeps
    checking with the bound in place, and moves CID_RMQ_SYS_TRANS's offsets only once the bound covers the records
    they were computed from (a replica elected next holds them); the broker keeps serving meanwhile."""
    namesrv = (await start_role("namesrv")).listening["namesrv"]
    broker = await start_role("broker", {"broker.namesrvAddr": namesrv, "broker.brokerName": GROUP,
                                         "broker.transactionTimeOut": 500, "broker.transactionCheckInterval": 300})
    ctx, addr = broker.state.get(BROKER), broker.listening["broker"]
    store, offsets = ctx.store, ctx.offsets
    store.set_read_bound(store.commit_log.max_offset)  # what the failover master does when the first member joins
    saved = (offsets.query(SYS_GROUP, HALF_TOPIC, 0), offsets.query(SYS_GROUP, OP_TOPIC, 0))
    checked: list[str] = []

    def check_local(msg):
        checked.append(msg.keys[0])
        return COMMIT

    config = ClientConfig(namesrv_addr=namesrv, heartbeat_broker_interval=0.5, poll_name_server_interval=0.5)
    async with TransactionProducer(config=config, group="bound_pg", check_local=check_local) as producer:
        for key, local in (("c1", COMMIT), ("p2", UNKNOWN)):
            result = await producer.send_in_transaction(Message(TOPIC, key.encode(), keys=key), lambda m, s: s, local)
            assert result.send_result.status.value == "SEND_OK"
        # an op record each: c1 committed, p2 checked back and committed
        await wait_for(lambda: checked == ["p2"] and store.get_max_offset_in_queue(OP_TOPIC, 0) == 2,
                       "c1 committed, p2 checked back and committed")
        await trio.sleep(1.0)  # three check passes with the bound below every record of the transactions
        assert (offsets.query(SYS_GROUP, HALF_TOPIC, 0), offsets.query(SYS_GROUP, OP_TOPIC, 0)) == saved
        pong = await remoting_client.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO, {}))
        assert pong.code == ResponseCode.SUCCESS

        store.advance_read_bound(store.commit_log.max_offset)  # every member acknowledged everything
        ends = (store.get_max_offset_in_queue(HALF_TOPIC, 0), store.get_max_offset_in_queue(OP_TOPIC, 0))
        assert ends[0] >= 2 and ends[1] == 2  # c1, p2 (and p2's check copy); their two op records
        await wait_for(lambda: (offsets.query(SYS_GROUP, HALF_TOPIC, 0), offsets.query(SYS_GROUP, OP_TOPIC, 0)) == ends,
                       "the check positions saved past both transactions")
