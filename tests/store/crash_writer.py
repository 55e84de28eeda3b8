"""Helper for the crash test: SYNC_FLUSH appends forever, printing one line per acknowledged append."""

import sys

import trio

from pyrmq.store import MessageRecord, MessageStore, PutMessageStatus, StoreConfig


async def main(root: str) -> None:
    cfg = StoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=64 * 1024,
                      mapped_file_size_consume_queue=20 * 64, max_hash_slot_num=64, max_index_num=256,
                      flush_disk_type="SYNC_FLUSH")
    store = MessageStore(cfg)
    store.load()
    start = store.get_max_offset_in_queue("Crash", 0)
    async with trio.open_nursery() as nursery:
        await nursery.start(store.run)
        i = 0
        while True:
            uniq = f"{start}-{i}"
            r = await store.put_message_async(
                MessageRecord("Crash", 0, b"payload-%d" % i * 20, properties={"UNIQ_KEY": uniq, "KEYS": f"k{uniq}"})
            )
            if r.status is PutMessageStatus.PUT_OK:
                sys.stdout.write(f"ack {r.append.queue_offset} {uniq}\n")
                sys.stdout.flush()
            i += 1


if __name__ == "__main__":
    trio.run(main, sys.argv[1])
