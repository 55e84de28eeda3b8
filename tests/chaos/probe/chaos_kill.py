"""A broker plugin for the kill-window scenarios (loaded like chaos_probe): a store dispatcher that kills its own
process with SIGKILL at an exact point of the append path.

The scenario writes the name of a window into the file named by ``$CHAOS_KILL_FILE`` before it starts the broker:
``timer`` (the timer wheel's delivered copy of a parked message), ``delay`` (a delay level's delivered copy) or
``commit`` (a transaction's committed message, before its op record). The dispatcher runs inside ``put_message``,
right after that record's append and before the service that appended it records its progress; on the first such
record it removes the file (so the restarted broker runs normally) and kills the process: what a kill -9 landing in
that window leaves behind.
"""

import os
import signal

from pyrmq.kernel.hookspecs import hookimpl

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
TIMER_TOPIC = "rmq_sys_wheel_timer"
#: sysFlag bits of a transaction's type, and the committed type (RocketMQ's MessageSysFlag)
TRANSACTION_TYPE_MASK = 0xC
TRANSACTION_COMMIT_TYPE = 0x8


def window_of(request):
    """Which window a dispatched record closes, or None: a transaction's commit has the committed sysFlag; a copy
    re-written to its real topic keeps the property its scheduler parked it with (a timer copy TIMER_DELIVER_MS, a
    delay-level copy REAL_TOPIC)."""
    props = request.properties
    if request.topic in (SCHEDULE_TOPIC, TIMER_TOPIC):
        return None
    if request.sys_flag & TRANSACTION_TYPE_MASK == TRANSACTION_COMMIT_TYPE:
        return "commit"
    if "TIMER_DELIVER_MS" in props:
        return "timer"
    if "REAL_TOPIC" in props and "DELAY" not in props:
        return "delay"
    return None


class KillSwitch:
    name = "chaos-kill"
    order = 1000  # after the consume queue (0), the index (10) and long polling (20): the copy is fully dispatched

    def __init__(self, path):
        self.path = path

    def dispatch(self, request):
        if request.recovering or not os.path.exists(self.path):
            return
        kind = window_of(request)
        if kind is None:
            return
        with open(self.path) as f:
            armed = f.read().strip()
        if kind == armed:
            os.unlink(self.path)
            os.kill(os.getpid(), signal.SIGKILL)


@hookimpl
def pyrmq_register_store_dispatchers(kernel):
    path = os.environ.get("CHAOS_KILL_FILE")
    return [KillSwitch(path)] if path else None
