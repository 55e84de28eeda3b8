"""The trio etcd client (plugins/broker/failover/etcd.py) against a real etcd (Debian etcd-server)."""

from __future__ import annotations

import json
import signal
import socket

import pytest
import trio

from pyrmq.plugins.broker.failover.etcd import (
    Compare,
    EtcdClient,
    EtcdError,
    EtcdUnavailable,
    LeaseExpired,
    delete_op,
    get_op,
    put_op,
)


async def test_put_get_range_delete(etcd):
    async with EtcdClient([etcd.endpoint]) as client:
        assert await client.get("/t/missing") is None
        first = await client.put("/t/a", json.dumps({"n": 1}))
        second = await client.put("/t/b", b"\x00\xffbinary")
        await client.put("/u/other", "x")
        assert second > first
        a = await client.get("/t/a")
        assert a.json() == {"n": 1} and a.version == 1 and a.mod_revision == first
        assert [kv.key for kv in await client.range("/t/")] == ["/t/a", "/t/b"]
        assert (await client.get("/t/b")).value == b"\x00\xffbinary"
        assert await client.delete("/t/", prefix=True) == 2
        assert await client.range("/t/") == []
        assert (await client.get("/u/other")).value == b"x"


async def test_txn_compares_and_branches(etcd):
    async with EtcdClient([etcd.endpoint]) as client:
        won = await client.txn([Compare.absent("/g/master")], [put_op("/g/master", "r1"), put_op("/g/epoch", "1")],
                               [get_op("/g/master")])
        assert won.succeeded
        lost = await client.txn([Compare.absent("/g/master")], [put_op("/g/master", "r2")], [get_op("/g/master")])
        assert not lost.succeeded and lost.responses[0][0].value == b"r1"
        epoch = await client.get("/g/epoch")
        # compare-and-swap on the revision: the second writer with the same stale revision fails
        assert (await client.txn([Compare.mod_revision("/g/epoch", epoch.mod_revision)], [put_op("/g/epoch", "2")])).succeeded
        assert not (await client.txn([Compare.mod_revision("/g/epoch", epoch.mod_revision)], [put_op("/g/epoch", "3")])).succeeded
        assert (await client.txn([Compare.value("/g/epoch", "2")], [delete_op("/g/master")])).succeeded
        assert await client.get("/g/master") is None
        everything = await client.txn([], [get_op("/g/", prefix=True)])
        assert [kv.key for kv in everything.responses[0]] == ["/g/epoch"]


async def test_lease_binds_keys_expiry_and_revoke(etcd):
    async with EtcdClient([etcd.endpoint]) as client:
        lease = await client.grant(1)
        await client.put("/l/held", "x", lease=lease)
        for _ in range(4):  # kept alive past its TTL
            assert await client.keepalive_once(lease) >= 1
            await trio.sleep(0.5)
        assert (await client.get("/l/held")).lease == lease
        # left alone, the lease expires within TTL (+ etcd's own slack) and its key goes with it
        gone = await client.wait_until("/l/held", lambda kv: kv is None, timeout=5)
        assert gone is None
        with pytest.raises(LeaseExpired) as info:
            await client.keepalive_once(lease)
        assert f"lease={lease:x}" in str(info.value)
        other = await client.grant(30)
        await client.put("/l/other", "y", lease=other)
        await client.revoke(other)
        assert await client.get("/l/other") is None
        with pytest.raises(LeaseExpired, match="/l/bound"):
            await client.put("/l/bound", "z", lease=other)


async def test_errors_name_the_key(etcd):
    async with EtcdClient([etcd.endpoint]) as client:
        with pytest.raises(EtcdError, match="'/w/never'.*within 0.3 s"):
            await client.wait_until("/w/never", lambda kv: kv is not None, timeout=0.3)
        with pytest.raises(EtcdError, match=r"etcd put ''.*key is not provided"):
            await client.put("", "x")


async def test_unreachable_and_back(etcd):
    async with EtcdClient([etcd.endpoint], timeout=0.5) as client:
        await client.put("/x/k", "1")
        etcd.signal(signal.SIGSTOP)
        try:
            with pytest.raises(EtcdUnavailable, match=r"etcd get '/x/k': no etcd endpoint answered .*TooSlowError"):
                await client.get("/x/k")
        finally:
            etcd.signal(signal.SIGCONT)
        assert (await client.get("/x/k")).value == b"1"
        etcd.kill()
        with pytest.raises(EtcdUnavailable, match=r"etcd put '/x/k'.*no etcd endpoint answered"):
            await client.put("/x/k", "2")


async def test_a_cluster_member_down_the_client_uses_the_next_endpoint(etcd_cluster):
    # a timeout longer than etcd's election timeout (1 s): the member killed may have been the leader
    async with EtcdClient(etcd_cluster.endpoints, timeout=3) as client:
        await client.put("/c/k", "1")
        first = etcd_cluster.members[0]
        first.kill()
        lease = await client.grant(5)
        assert await client.put("/c/k", "2", lease=lease) > 0
        assert (await client.get("/c/k")).value == b"2"
        first.start()
        etcd_cluster.members[1].kill()
        etcd_cluster.members[2].kill()
        with pytest.raises(EtcdUnavailable, match="'/c/k'"):  # one of three: no quorum, no answer
            await client.put("/c/k", "3")


async def test_a_local_etcd_whose_port_was_taken_picks_others_and_never_talks_to_the_taker(etcd, tmp_path):
    from pyrmq.plugins.broker.failover.local_etcd import LocalEtcd

    with socket.socket() as squatter:  # a plain listener took one picked port, the running etcd the other
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        for taken in (squatter.getsockname()[1], etcd.client_port):
            second = LocalEtcd(tmp_path / f"second-{taken}", log_path=tmp_path / f"second-{taken}.log")
            second.client_port = taken  # as if the port went to someone else between the pick and etcd's bind
            second.start()
            try:
                assert second.client_port != taken
                async with EtcdClient([second.endpoint]) as client:
                    await client.put("/mine", str(taken))
                async with EtcdClient([etcd.endpoint]) as client:
                    assert await client.get("/mine") is None  # nothing went to the etcd that held the port
            finally:
                second.kill()
