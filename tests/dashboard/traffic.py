"""Real traffic for the dashboard's browser tests, run as a subprocess: ``python traffic.py NAMESRV``.

Creates DashOrders (4 queues) and sends 30 keyed messages; group dash_batch consumes them all and stops (its offsets
committed, lag 0); group dash_failing fails every DashFail message with maxReconsumeTimes 0, so all 5 land in
%DLQ%dash_failing; group dash_live stays online on DashOrders. Prints one JSON line (what was sent) then
"READY", and keeps dash_live running until stdin closes.
"""

from __future__ import annotations

import json
import sys

import trio

from pyrmq.client import Admin, Message, Producer, PushConsumer
from pyrmq.client.consumer import ConsumeFrom, ConsumeResult


async def main(namesrv: str) -> None:
    with trio.fail_after(60):
        async with Admin(namesrv) as admin:
            await admin.create_topic("DashOrders", 4)
            await admin.create_topic("DashFail", 2)
        sent = []
        async with Producer(namesrv, group="dash_producer") as producer:
            for i in range(30):
                r = await producer.send(Message("DashOrders", json.dumps({"order": i, "item": "book"}), tags="created",
                                                keys=[f"order-{i}"]))
                sent.append({"key": f"order-{i}", "msg_id": r.msg_id, "offset_msg_id": r.offset_msg_id})
            for i in range(5):
                await producer.send(Message("DashFail", f"poison {i}", keys=[f"poison-{i}"]))

            got = trio.Semaphore(0)

            async def take(m):
                got.release()

            batch = PushConsumer(namesrv, group="dash_batch", subscribe={"DashOrders": "*"},
                                 consume_from=ConsumeFrom.FIRST_OFFSET, listener=take)
            async with batch:
                for _ in range(30):
                    await got.acquire()

            failed = trio.Semaphore(0)

            async def fail(m):
                failed.release()
                return ConsumeResult.RECONSUME_LATER

            failing = PushConsumer(namesrv, group="dash_failing", subscribe={"DashFail": "*"},
                                   consume_from=ConsumeFrom.FIRST_OFFSET, listener=fail, max_reconsume_times=0)
            async with failing:
                for _ in range(5):
                    await failed.acquire()
                await trio.sleep(0.5)  # the send-backs of the last batch
    print(json.dumps(sent), flush=True)
    async def ignore(m):
        return None

    async with PushConsumer(namesrv, group="dash_live", subscribe={"DashOrders": "*"}, listener=ignore):
        print("READY", flush=True)
        await trio.to_thread.run_sync(sys.stdin.read)  # until the test closes our stdin


if __name__ == "__main__":
    trio.run(main, sys.argv[1])
