"""POP across role changes, in-process on real sockets: a replica holding its master's replicated checkpoints and acks
is promoted the way the failover replicator does it (store writable, then ``pyrmq_role_changed`` MASTER), demoted
(store read-only, then SLAVE) and promoted again.

A master (A) and a classic slave (B) of one group; a consumer pops 10 of 20 messages from A and acks 5. B answers
POP SLAVE_NOT_AVAILABLE while it is a slave. A stops; B promoted reads its state from its own store: the 5 unacked
come back after their invisible time with their attempts counted, the 10 never popped are popped, no acked one
comes again. Demoted, B answers every POP code SLAVE_NOT_AVAILABLE, a waiting pop included; promoted again, it reads
its state again and goes on where it was (the messages it handed out still in flight, none popped twice).
"""

from __future__ import annotations

import trio

from pyrmq.kernel.bundles import packaged_bundle_path
from pyrmq.kernel.types import Role, RoleChange
from pyrmq.plugins.broker.core import BROKER
from pyrmq.remoting.codes import ResponseCode

from . import popclient
from .popclient import PopClient

TOPIC = "PopT"
GROUP = "GPOP"


def fast_sync_bundle(tmp_path) -> str:
    """The broker bundle with the slave's metadata sync every 300 ms (topics and offsets reach B quickly)."""
    path = tmp_path / "broker-fast-sync.toml"
    path.write_text(packaged_bundle_path("broker").read_text()
                    + '\n[plugins."pyrmq.plugins.broker.ha.plugin"]\nslaveSyncInterval = 300\nslaveSyncFirstDelay = 100\n')
    return str(path)


async def wait_for(predicate, what: str, timeout: float = 20.0) -> None:
    with trio.move_on_after(timeout):
        while not predicate():
            await trio.sleep(0.05)
        return
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


async def test_a_promoted_replica_serves_pop_from_its_own_store(start_role, remoting_client, tmp_path):
    namesrv = (await start_role("namesrv")).listening["namesrv"]
    common = {"broker.namesrvAddr": namesrv, "broker.brokerName": "pop-ha", "broker.haSendHeartbeatInterval": 200}
    a = await start_role("broker", {**common, "broker.brokerRole": "ASYNC_MASTER"})
    b = await start_role(fast_sync_bundle(tmp_path), {**common, "broker.brokerRole": "SLAVE", "broker.brokerId": 1})
    actx, bctx = a.state.get(BROKER), b.state.get(BROKER)
    a_addr, b_addr = a.listening["broker"], b.listening["broker"]
    await wait_for(lambda: actx.replicator.ha.slaves, "B following A")

    await popclient.create_topic(remoting_client, a_addr, TOPIC, 1)
    keys = [f"k{i}" for i in range(20)]
    await popclient.send(remoting_client, a_addr, TOPIC, keys)
    on_a = PopClient(remoting_client, a_addr, GROUP, TOPIC, "pop-ha")
    popped = (await on_a.pop(10, invisible=3000)).messages
    assert [m.key for m in popped] == keys[:10]
    for m in popped[:5]:
        assert (await on_a.ack(m)).code == ResponseCode.SUCCESS
    on_b = PopClient(remoting_client, b_addr, GROUP, TOPIC, "pop-ha")
    refused = await on_b.pop(10, invisible=3000)
    assert refused.code == ResponseCode.SLAVE_NOT_AVAILABLE and "is not the master" in refused.response.remark
    await wait_for(lambda: bctx.store.commit_log.max_offset == actx.store.commit_log.max_offset, "B holding A's log")
    await wait_for(lambda: bctx.topics.get(TOPIC) is not None, "the topic on B")

    a.request_stop()
    await wait_for(lambda: a.nursery is None, "A stopped")
    store = bctx.store
    store.set_read_only(None)
    await b.hooks.role_changed(b, RoleChange(Role.MASTER, broker_id=0, epoch=1))
    got = []
    while True:
        answer = await on_b.pop(16, invisible=60_000, poll=5000)
        if answer.code != ResponseCode.SUCCESS:
            assert answer.code == ResponseCode.POLLING_TIMEOUT
            break
        got += answer.messages
    assert sorted(m.key for m in got) == sorted(keys[5:])  # no acked one, each other once
    assert {m.key: m.message.reconsume_times for m in got if m.key in keys[5:10]} == {k: 1 for k in keys[5:10]}
    for m in got[:3]:
        assert (await on_b.ack(m)).code == ResponseCode.SUCCESS

    # demoted: every POP code refused, a waiting pop answered at once
    result = {}

    async def waiting() -> None:
        result["answer"] = await on_b.pop(16, invisible=60_000, poll=30_000)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiting)
        pop_b = b.plugin("pop")
        await wait_for(lambda: pop_b.polling.total == 1, "a pop waiting on B")
        store.set_read_only("replica 1 is not the elected master")
        await b.hooks.role_changed(b, RoleChange(Role.SLAVE, broker_id=1))
    assert result["answer"].code == ResponseCode.SLAVE_NOT_AVAILABLE
    assert (await on_b.ack(got[3])).code == ResponseCode.SLAVE_NOT_AVAILABLE
    assert (await on_b.notification()).code == ResponseCode.SLAVE_NOT_AVAILABLE

    # promoted again: acked stay acked, the rest (popped on B, not acked) come back after their invisible time
    store.set_read_only(None)
    await b.hooks.role_changed(b, RoleChange(Role.MASTER, broker_id=0, epoch=2))
    again = await on_b.pop(16, invisible=60_000)
    assert again.code == ResponseCode.POLLING_TIMEOUT  # popped up to where it was: nothing popped before comes again
    assert sum(pop_b.ledger.inflight.values()) == len(got) - 3  # read back from B's store: still in flight
