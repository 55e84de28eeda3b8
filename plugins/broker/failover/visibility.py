"""The read rule: consumers read only up to the confirm offset, so no consumer sees a message a failover could remove.

The store owns the bound (``MessageStore.set_read_bound`` / ``advance_read_bound``; its reads stop there, and it
tells the pulls parked in front of it when it moves); this module says where it is:

- a replica starts with nothing confirmed (bound 0) until it is elected or its master's confirm offset arrives;
- a master alone in its in-sync set commits every append at once: no bound;
- a master with other members reads up to what every member the sends wait for acknowledged (the HA master's
  confirm offset), never moving back (when the first member joins, what was written while alone stays readable);
- a follower reads up to the confirm offset of its master's transfer headers (capped at its own end);
- a replica neither master nor following keeps its last bound (a deposed master alone in its set: its whole log).
"""

from __future__ import annotations

from pyrmq.plugins.broker.ha.master import HAMaster
from pyrmq.store.message_store import MessageStore


class ReadBound:
    """Where this replica's store bound stands, by role."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store

    def starting(self) -> None:
        self.store.set_read_bound(0)

    def master_confirmed(self, ha: HAMaster) -> None:
        """While master: after each advance of ``ha``'s confirm offset (its ``on_confirm``) and each change of the
        set the sends wait for."""
        store = self.store
        members = ha.members
        if members is None:
            return  # deposed: the bound stays
        if not members:
            store.set_read_bound(None)  # alone: everything written is committed
            return
        top = store.commit_log.max_offset
        if store.read_bound is None:
            store.set_read_bound(top)  # the first member joined: what was written while alone stays readable
        confirm = ha.confirm_offset
        store.advance_read_bound(confirm if confirm < top else top)

    def follower_confirmed(self, offset: int) -> None:
        """A transfer header's confirm offset, capped at this replica's end by the HA client."""
        self.store.advance_read_bound(offset)

    def deposed(self) -> None:
        """No longer master: keep what was readable (the whole log of a master that was alone in its set)."""
        if self.store.read_bound is None:
            self.store.set_read_bound(self.store.commit_log.max_offset)

    def for_followers(self) -> int:
        """The confirm offset the master's transfer headers carry: the bound, the log's end while there is none."""
        bound = self.store.read_bound
        return self.store.commit_log.max_offset if bound is None else bound
