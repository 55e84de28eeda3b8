"""Long polling of POP and NOTIFICATION requests (5.5.0's two ``PopLongPollingService``s).

A POP that finds nothing and allows polling (``pollTime > 0``) is parked under ``topic@group@queueId`` (queueId -1
for a pop of every queue: the two kinds never wake each other). It is run again

* when a message arrives on the topic (this object is a store dispatcher: one dict lookup per appended record while
  nothing of the topic is parked): one parked request of each of the group's two keys, the oldest first, whose filter
  matches the message (tags code, and the properties for SQL92);
* when a revived message reaches the group's retry topic, a FIFO queue's batch becomes visible again or is acked, or
  a pop that found messages leaves more behind (``restNum > 0``): one request of the key;
* when the store's read bound moves (automatic failover) and the request could not read its queue's messages yet;
* at its deadline, once more: POLLING_TIMEOUT if it still finds nothing.

A request run again that finds nothing (another pop took the message) waits on until its deadline. At most
``popPollingSize`` requests wait per key and ``maxPopPollingSize`` in all (POLLING_FULL beyond).
NOTIFICATION requests wait the same way in their own table and are answered ``hasMsg`` as soon as a message is
there; the newest waiter is woken first (5.x's ``notifyLast``).
"""

from __future__ import annotations

import heapq
import itertools
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import trio

from pyrmq.remoting.command import RemotingCommand

log = logging.getLogger("pyrmq.pop")

#: park() answers
PARKED = 0
FULL = 1


def polling_key(topic: str, group: str, queue_id: int) -> str:
    return f"{topic}@{group}@{queue_id}"


def _matches_arrival(message_filter: Any, request: Any) -> bool:
    if message_filter is None:
        return True
    if request is None:
        return True
    if not message_filter.is_matched_by_consume_queue(request.tags_code):
        return False
    check = getattr(message_filter, "is_matched_by_properties", None)
    return check is None or bool(check(request.properties))


@attrs.define(eq=False)
class Parked:
    """A POP or NOTIFICATION request waiting for messages."""

    connection: Any
    request: RemotingCommand
    header: Any
    message_filter: Any
    deadline: float  #: trio time
    topic: str
    group: str
    queue_id: int
    notification: bool = False
    #: waiting in its key's queue (False once woken, answered or dropped)
    waiting: bool = True

    @property
    def key(self) -> str:
        return polling_key(self.topic, self.group, self.queue_id)


#: ``run(parked, final)``: run a parked request again and answer it: True once answered, False to keep it waiting
#: (a final run always answers)
Runner = Callable[[Parked, bool], Awaitable[bool]]


class PopLongPolling:
    """Parked POP and NOTIFICATION requests, woken by arrivals (a store dispatcher), notifications and deadlines."""

    name = "pop-long-polling"
    order = 21

    def __init__(self, per_key: int, total: int, run: Runner) -> None:
        self.per_key = per_key
        self.max_total = total
        self.run_parked = run
        self.pops: dict[str, deque[Parked]] = {}
        self.notifications: dict[str, deque[Parked]] = {}
        #: topic -> group -> requests waiting (pops and notifications): what an arrival looks at
        self.topics: dict[str, dict[str, int]] = {}
        self.total = 0
        self._deadlines: list[tuple[float, int, Parked]] = []
        self._seq = itertools.count()
        self._ready: deque[Parked] = deque()
        self._wake = trio.Event()
        self._bounded = False
        #: requests parked while their queue held messages they could not read yet (beyond the store's read bound)
        self._held: set[Parked] = set()

    # -- parking ---------------------------------------------------------------------------------------------------

    def park(self, parked: Parked) -> int:
        table = self.notifications if parked.notification else self.pops
        key = parked.key
        waiting = table.get(key)
        if self.total >= self.max_total or (waiting is not None and len(waiting) >= self.per_key):
            return FULL
        if waiting is None:
            waiting = table[key] = deque()
        waiting.append(parked)
        self._count(parked, 1)
        heapq.heappush(self._deadlines, (parked.deadline, next(self._seq), parked))
        self._wake.set()
        return PARKED

    def count(self, key: str) -> int:
        """Parked POP requests of a key (POLLING_INFO)."""
        waiting = self.pops.get(key)
        return len(waiting) if waiting else 0

    def _unpark(self, parked: Parked) -> None:
        parked.waiting = False
        table = self.notifications if parked.notification else self.pops
        waiting = table.get(parked.key)
        if waiting is not None:
            try:
                waiting.remove(parked)
            except ValueError:
                pass
            if not waiting:
                del table[parked.key]
        self._count(parked, -1)

    def _count(self, parked: Parked, n: int) -> None:
        self.total += n
        groups = self.topics.setdefault(parked.topic, {})
        left = groups.get(parked.group, 0) + n
        if left > 0:
            groups[parked.group] = left
        else:
            groups.pop(parked.group, None)
            if not groups:
                del self.topics[parked.topic]

    # -- waking ------------------------------------------------------------------------------------------------------

    def _wake_one(self, table: dict[str, deque[Parked]], key: str, request: Any, newest_first: bool) -> None:
        waiting = table.get(key)
        if not waiting:
            return
        for parked in (reversed(waiting) if newest_first else waiting):
            if parked.connection.closed:
                continue
            if _matches_arrival(parked.message_filter, request):
                self._unpark(parked)
                self._ready.append(parked)
                self._wake.set()
                return

    def notify(self, topic: str, group: str, queue_id: int, request: Any = None) -> None:
        """Wake one parked POP and one NOTIFICATION of ``topic@group@queueId`` (whose filter matches ``request``,
        the arriving record, when given)."""
        key = polling_key(topic, group, queue_id)
        self._wake_one(self.pops, key, request, False)
        self._wake_one(self.notifications, key, request, True)

    def notify_all_queues(self, topic: str, group: str, queue_id: int, request: Any = None) -> None:
        """An arrival on one queue: the group's pops of every queue (-1) and of that queue."""
        self.notify(topic, group, -1, request)
        self.notify(topic, group, queue_id, request)

    def notify_group(self, topic: str, group: str) -> None:
        """A message of ``group`` reached its retry topic of ``topic``: one pop of each of its keys (every pop reads
        the retry topic, whatever queue it asks for)."""
        prefix = f"{topic}@{group}@"
        for table in (self.pops, self.notifications):
            for key in [k for k in table if k.startswith(prefix)]:
                self._wake_one(table, key, None, table is self.notifications)

    # store dispatcher: every appended record, on the append path: one dict lookup while nothing is parked
    def dispatch(self, request: Any) -> None:
        groups = self.topics.get(request.topic)
        if groups:
            for group in list(groups):
                self.notify_all_queues(request.topic, group, request.queue_id, request)

    def dispatch_columns(self, batch: Any) -> None:
        if batch.topic in self.topics:
            for request in batch.requests():
                self.dispatch(request)

    def hold(self, parked: Parked) -> None:
        """``parked`` waits while its queue holds messages it cannot read yet: run it again when the bound moves."""
        self._held.add(parked)

    def visible(self, bound: int | None) -> None:
        """The store's read bound moved: requests that could not read their queue's messages run again."""
        self._bounded = bound is not None
        held, self._held = self._held, set()
        for parked in held:
            if parked.waiting:
                self._unpark(parked)
                self._ready.append(parked)
                self._wake.set()

    @property
    def bounded(self) -> bool:
        return self._bounded

    # -- the service ---------------------------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            deadlines = self._deadlines
            while deadlines and not deadlines[0][2].waiting:
                heapq.heappop(deadlines)
            if not self._ready:
                until = deadlines[0][0] if deadlines else trio.current_time() + 5.0
                with trio.move_on_at(until):
                    await self._wake.wait()
                self._wake = trio.Event()
            await self._run_ready()

    async def _run_ready(self) -> None:
        now = trio.current_time()
        due: list[Parked] = []
        deadlines = self._deadlines
        while deadlines and deadlines[0][0] <= now:
            parked = heapq.heappop(deadlines)[2]
            if parked.waiting:
                self._unpark(parked)
                due.append(parked)
        ready, self._ready = self._ready, deque()
        for parked, final in [*((p, p.deadline <= now) for p in ready), *((p, True) for p in due)]:
            if parked.connection.closed:
                continue
            try:
                answered = await self.run_parked(parked, final)
            except Exception:
                log.exception("a parked %s request failed", "NOTIFICATION" if parked.notification else "POP")
                await parked.connection.send_response(
                    parked.request.make_response(1, "the broker failed to run the parked request again"))
                continue
            if not answered:
                # nothing for it after all: wait on (at the front: it was first)
                parked.waiting = True
                table = self.notifications if parked.notification else self.pops
                table.setdefault(parked.key, deque()).appendleft(parked)
                self._count(parked, 1)
                heapq.heappush(deadlines, (parked.deadline, next(self._seq), parked))

    def drain(self) -> list[Parked]:
        """Take every waiting request out (the broker stops being master: each is answered by the caller)."""
        out = [p for table in (self.pops, self.notifications) for waiting in table.values() for p in waiting]
        out += list(self._ready)
        for parked in out:
            parked.waiting = False
        self.pops.clear()
        self.notifications.clear()
        self.topics.clear()
        self._ready.clear()
        self._deadlines.clear()
        self._held.clear()
        self.total = 0
        return out
