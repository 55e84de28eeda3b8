"""How the commit log reaches the disk: the flush hook's shipped implementation (``pyrmq_make_flush_policy``).

RocketMQ's two policies, chosen by ``flushDiskType`` as its CommitLog does (store/flush.py has the services):

- ``ASYNC_FLUSH``: a send is answered at once; :class:`~pyrmq.store.flush.AsyncFlushService` flushes every
  ``flushIntervalCommitLog`` ms once ``flushCommitLogLeastPages`` pages are dirty, and whatever is dirty every 10 s
  (Java's FlushRealTimeService);
- ``SYNC_FLUSH``: a send is answered once its bytes are on disk; :class:`~pyrmq.store.flush.GroupCommitService`
  flushes as soon as a send waits, one ``fdatasync`` for every send waiting by then (Java's GroupCommitService).

``trylast``: a plugin of your own that answers ``pyrmq_make_flush_policy`` replaces them (for a store on a device with
its own write cache, say), and ``pyrmq plugins --codes`` shows which policy a role runs.
"""

from __future__ import annotations

from typing import Any

from pyrmq.kernel.hookspecs import hookimpl
from pyrmq.kernel.kernel import Kernel
from pyrmq.store.config import StoreConfig
from pyrmq.store.flush import FlushPolicy, default_flush_policy


@hookimpl(trylast=True)
def pyrmq_make_flush_policy(kernel: Kernel, config: StoreConfig) -> FlushPolicy:
    return default_flush_policy(config)
