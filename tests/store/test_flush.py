import trio

from pyrmq.store import GroupCommitService, MessageStore, PutMessageStatus

from .conftest import record, small_config


async def test_sync_flush_waits_until_the_bytes_are_durable(tmp_path):
    s = MessageStore(small_config(tmp_path, flush_disk_type="SYNC_FLUSH"))
    s.load()
    async with trio.open_nursery() as nursery:
        await nursery.start(s.run)
        r = await s.put_message_async(record())
        assert r.status is PutMessageStatus.PUT_OK
        assert s.flushed_phy_offset >= r.append.end_offset
        nursery.cancel_scope.cancel()
    await s.aclose()


async def test_group_commit_serves_many_waiters_with_few_flushes(tmp_path):
    policy = GroupCommitService()
    s = MessageStore(small_config(tmp_path, flush_disk_type="SYNC_FLUSH"), flush_policy=policy)
    s.load()
    results = []

    async def send(i):
        results.append(await s.put_message_async(record(body=str(i).encode())))

    async with trio.open_nursery() as nursery:
        await nursery.start(s.run)
        async with trio.open_nursery() as senders:
            for i in range(100):
                senders.start_soon(send, i)
        nursery.cancel_scope.cancel()
    await s.aclose()
    assert len(results) == 100 and all(r.status is PutMessageStatus.PUT_OK for r in results)
    assert policy.flush_count < 50


async def test_no_wait_messages_do_not_wait_under_sync_flush(tmp_path):
    class NeverFlushes(GroupCommitService):
        async def _flush(self, target):
            await trio.sleep_forever()

    s = MessageStore(small_config(tmp_path, flush_disk_type="SYNC_FLUSH", sync_flush_timeout=200),
                     flush_policy=NeverFlushes())
    s.load()
    async with trio.open_nursery() as nursery:
        await nursery.start(s.run)
        r = await s.put_message_async(record(WAIT="false"))
        assert r.status is PutMessageStatus.PUT_OK
        r = await s.put_message_async(record())
        assert r.status is PutMessageStatus.FLUSH_DISK_TIMEOUT
        assert r.append is not None and r.append.queue_offset == 1  # stored anyway; the send reports the timeout
        nursery.cancel_scope.cancel()
    s.close()


async def test_async_flush_makes_appends_durable_in_the_background(tmp_path):
    s = MessageStore(small_config(tmp_path, flush_interval_commit_log=20, flush_commit_log_least_pages=0))
    s.load()
    async with trio.open_nursery() as nursery:
        await nursery.start(s.run)
        r = s.put_message(record())
        assert r.status is PutMessageStatus.PUT_OK
        with trio.fail_after(5):
            while s.flushed_phy_offset < r.append.end_offset:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    s.close()
