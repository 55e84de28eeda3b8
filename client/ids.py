"""Identities: the client's IP and id (``ip@instance``), and UNIQ_KEY message ids (spec 4.2, 5.10).

UNIQ_KEY (Java ``MessageClientIDSetter``) is uppercase hex of a fixed prefix - client IP (4 bytes, 16 for IPv6),
low 16 bits of the PID, a 4-byte per-process hash (Java's class-loader hash) - then 4 bytes of milliseconds since
the start of the current month (local time) and a 2-byte counter: 32 hex characters for IPv4.
"""

from __future__ import annotations

import datetime
import itertools
import os
import random
import socket
import struct
import threading
import time

__all__ = ["local_ip", "UniqIdGenerator", "new_uniq_id", "default_instance_name"]

_instance_counter = itertools.count(1)


def local_ip() -> str:
    """The address other hosts would see (first non-loopback IPv4), falling back to 127.0.0.1."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))  # no packet is sent; only picks the outgoing interface
            ip = s.getsockname()[0]
            if ip and not ip.startswith("0."):
                return ip
    except OSError:
        pass
    try:
        ip = socket.gethostbyname(socket.gethostname())
        if ip:
            return ip
    except OSError:
        pass
    return "127.0.0.1"


def default_instance_name() -> str:
    """Java changes the instance name "DEFAULT" to ``pid#nanotime``; we add a counter so that several clients in
    one process (tests, a producer beside a consumer) get distinct client ids."""
    return f"{os.getpid()}#{time.monotonic_ns()}#{next(_instance_counter)}"


def _month_start_ms(now_ms: int) -> int:
    now = datetime.datetime.fromtimestamp(now_ms / 1000)
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return int(start.timestamp() * 1000)


class UniqIdGenerator:
    """Thread-safe generator of UNIQ_KEY strings (spec 5.10)."""

    def __init__(self, ip: str | None = None) -> None:
        ip = ip or local_ip()
        try:
            raw_ip = socket.inet_pton(socket.AF_INET6, ip) if ":" in ip else socket.inet_aton(ip)
        except OSError:
            raw_ip = socket.inet_aton("127.0.0.1")
        self.prefix = (raw_ip + struct.pack(">hi", os.getpid() & 0x7FFF, random.getrandbits(31))).hex().upper()
        self._lock = threading.Lock()
        self._counter = random.getrandbits(15)
        self._month_start = 0
        self._next_month = 0

    def _roll_month(self, now: int) -> None:
        self._month_start = _month_start_ms(now)
        dt = datetime.datetime.fromtimestamp(self._month_start / 1000)
        nxt = (dt.replace(day=28) + datetime.timedelta(days=4)).replace(day=1)
        self._next_month = int(nxt.timestamp() * 1000)

    def next(self) -> str:
        now = int(time.time() * 1000)
        with self._lock:
            if now >= self._next_month:
                self._roll_month(now)
            self._counter = (self._counter + 1) & 0xFFFF
            counter = self._counter
        return f"{self.prefix}{(now - self._month_start) & 0xFFFFFFFF:08X}{counter:04X}"

    def next_many(self, n: int) -> list[str]:
        """``n`` ids at once (a batch): one clock read, consecutive counters."""
        now = int(time.time() * 1000)
        with self._lock:
            if now >= self._next_month:
                self._roll_month(now)
            first = self._counter + 1
            self._counter = (self._counter + n) & 0xFFFF
        head = f"{self.prefix}{(now - self._month_start) & 0xFFFFFFFF:08X}"
        # the counters' hex in one pass (packed big-endian shorts), then one slice per id: 0.14 against 0.24 us an
        # id for a format each
        counters = range(first, first + n) if first + n <= 0x10000 else [(first + i) & 0xFFFF for i in range(n)]
        digits = struct.pack(f">{n}H", *counters).hex().upper()
        return [head + digits[j:j + 4] for j in range(0, 4 * n, 4)]


_default: UniqIdGenerator | None = None


def new_uniq_id() -> str:
    global _default
    if _default is None:
        _default = UniqIdGenerator()
    return _default.next()
