"""Dashboard sessions, form tokens, passwords and log-in limits.

**User file**: ``name:scrypt$<n>$<r>$<p>$<salt hex>$<hash hex>`` lines (``#`` comments), made with ``pyrmq dashboard
hash-password`` (``hashlib.scrypt``, OpenSSL's). Lines of the earlier ``name:pbkdf2_sha256$<iterations>$<salt
hex>$<hash hex>`` form still log in; :func:`legacy_users` names them so the dashboard can say, at start, to make them
again.

**Sessions** are signed cookies (HMAC-SHA256 with a key made at start: a restart ends every session): a random
session id, the user ('' before log-in, and always without a user file) and an expiry. Every browser gets one on its
first page. **Form tokens** are HMAC(key, session id): a form is accepted only with the token of the session its
cookie names, which another site cannot read. Logging in starts a new session (new id, new token).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import time
import urllib.parse
from collections import deque
from collections.abc import Callable
from pathlib import Path

import attrs

SESSION_SECONDS = 12 * 3600
COOKIE = "pyrmq_dashboard"  # the session cookie's name is this plus "_<port>" (security.Security.make)
TOKEN_FIELD = "csrf_token"

#: scrypt's cost for new lines: 2**15 blocks of 8 x 128 bytes = 32 MiB and ~0.1 s per check (Django's default is
#: 2**14 with p=5); the line keeps its parameters, so lines made with other costs keep working
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2 ** 15, 8, 1
PBKDF2_ITERATIONS = 200_000  # what the earlier pbkdf2_sha256 lines were made with (still accepted)


class UserFileError(ValueError):
    pass


def _scrypt(password: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    return hashlib.scrypt(password.encode(), salt=salt, n=n, r=r, p=p, maxmem=128 * r * (n + p + 2) + (1 << 20),
                          dklen=32)


def hash_password(password: str, *, n: int = SCRYPT_N, r: int = SCRYPT_R, p: int = SCRYPT_P,
                  salt: bytes | None = None) -> str:
    salt = salt or os.urandom(16)
    return f"scrypt${n}${r}${p}${salt.hex()}${_scrypt(password, salt, n, r, p).hex()}"


def hash_password_pbkdf2(password: str, *, iterations: int = PBKDF2_ITERATIONS, salt: bytes | None = None) -> str:
    """The earlier scheme (lines made before scrypt): kept to check such lines, and for their tests."""
    salt = salt or os.urandom(16)
    digest = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    return f"pbkdf2_sha256${iterations}${salt.hex()}${digest.hex()}"


def _parse(stored: str) -> tuple[str, tuple[int, ...], bytes, bytes] | None:
    """(scheme, cost parameters, salt, hash) of a stored hash, None when it is not one of ours."""
    parts = stored.split("$")
    try:
        if parts[0] == "scrypt" and len(parts) == 6:
            n, r, p = (int(x) for x in parts[1:4])
            if n < 2 or n & (n - 1) or not 1 <= r <= 64 or not 1 <= p <= 16 or n > 2 ** 20:
                return None
            return "scrypt", (n, r, p), bytes.fromhex(parts[4]), bytes.fromhex(parts[5])
        if parts[0] == "pbkdf2_sha256" and len(parts) == 4 and 1 <= int(parts[1]) <= 10_000_000:
            return "pbkdf2_sha256", (int(parts[1]),), bytes.fromhex(parts[2]), bytes.fromhex(parts[3])
    except ValueError:
        return None
    return None


def check_password(password: str, stored: str) -> bool:
    """Whether ``password`` matches a stored ``scrypt$...`` or ``pbkdf2_sha256$...`` hash (CPU-bound: ~0.1 s; the
    dashboard runs it in a worker thread, both hashes release the GIL)."""
    parsed = _parse(stored)
    if parsed is None:
        return False
    scheme, cost, salt, digest = parsed
    if scheme == "scrypt":
        got = _scrypt(password, salt, *cost)
    else:
        got = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, cost[0])
    return hmac.compare_digest(got, digest)


def load_users(path: str | os.PathLike[str]) -> dict[str, str]:
    users = {}
    for number, line in enumerate(Path(path).read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, stored = line.partition(":")
        if not sep or not name or _parse(stored) is None:
            raise UserFileError(f"{path}:{number}: expected name:scrypt$n$r$p$salt$hash "
                                "(make one with `pyrmq dashboard hash-password`)")
        users[name] = stored
    if not users:
        raise UserFileError(f"{path}: no users")
    return users


def legacy_users(users: dict[str, str]) -> list[str]:
    """Users whose line is the earlier PBKDF2 form (accepted; worth making again with scrypt)."""
    return sorted(name for name, stored in users.items() if stored.startswith("pbkdf2_sha256$"))


@attrs.frozen
class Session:
    sid: str
    user: str  # '' before log-in and without a user file
    expires: int


class Sessions:
    """Signs and reads session cookies and form tokens with a key made at start; ``users`` (name -> stored hash) is
    None when no login is asked for."""

    def __init__(self, users: dict[str, str] | None = None, *, clock: Callable[[], float] = time.time) -> None:
        self.users = users
        self.key = secrets.token_bytes(32)
        self.clock = clock
        self._dummy: str | None = None

    @property
    def login_required(self) -> bool:
        return self.users is not None

    def _mac(self, payload: str) -> str:
        return hmac.new(self.key, payload.encode(), "sha256").hexdigest()

    def new(self, user: str = "") -> tuple[Session, str]:
        """A fresh session (new id) and its cookie value."""
        session = Session(secrets.token_hex(16), user, int(self.clock()) + SESSION_SECONDS)
        payload = f"{session.sid}|{urllib.parse.quote(user, safe='')}|{session.expires}"
        return session, payload + "|" + self._mac(payload)

    def read(self, cookie: str | None) -> Session | None:
        """The session a cookie names; None when absent, forged, expired or its user is no longer in the file."""
        if not cookie or cookie.count("|") != 3:
            return None
        sid, user, expires, mac = cookie.split("|")
        if not hmac.compare_digest(mac, self._mac(f"{sid}|{user}|{expires}")):
            return None
        if not expires.isdigit() or int(expires) < self.clock():
            return None
        user = urllib.parse.unquote(user)
        if user and (self.users is None or user not in self.users):
            return None
        return Session(sid, user, int(expires))

    def token(self, session: Session) -> str:
        """The form token of a session."""
        return self._mac(f"form-token|{session.sid}")

    def token_ok(self, session: Session | None, token: str | None) -> bool:
        return session is not None and bool(token) and hmac.compare_digest(str(token), self.token(session))

    def check(self, name: str, password: str) -> bool:
        """Whether ``name`` / ``password`` is a user of the file; an unknown name costs the same as a known one."""
        stored = (self.users or {}).get(name)
        if stored is None:
            if self._dummy is None:
                self._dummy = hash_password(secrets.token_hex(8))
            check_password(password, self._dummy)
            return False
        return check_password(password, stored)


class LoginLimiter:
    """At most ``attempts`` failed log-ins per ``window`` seconds from one client address, and ``user_attempts`` for
    one user name from anywhere; beyond that a log-in is refused without checking the password until the oldest
    failure ages out (the per-name limit is higher, so that one address cannot lock a user out on its own)."""

    def __init__(self, attempts: int = 5, window: float = 300.0, *, user_attempts: int = 20,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = {"address": attempts, "user": user_attempts}
        self.window = window
        self.clock = clock
        self.failures: dict[tuple[str, str], deque[float]] = {}

    def _recent(self, key: tuple[str, str]) -> deque[float]:
        found = self.failures.get(key)
        if found is None:
            return deque()
        cutoff = self.clock() - self.window
        while found and found[0] <= cutoff:
            found.popleft()
        if not found:
            del self.failures[key]
        return found

    def wait(self, address: str, user: str) -> float:
        """Seconds until a log-in from ``address`` as ``user`` is tried again; 0 = now."""
        longest = 0.0
        for key in (("address", address), ("user", user)):
            recent = self._recent(key)
            if len(recent) >= self.limits[key[0]]:
                longest = max(longest, recent[-self.limits[key[0]]] + self.window - self.clock())
        return longest

    def failed(self, address: str, user: str) -> None:
        now = self.clock()
        for key in (("address", address), ("user", user)):
            self.failures.setdefault(key, deque()).append(now)
        if len(self.failures) > 10_000:  # many addresses: forget the ones with no recent failure
            for key in list(self.failures):
                self._recent(key)

    def succeeded(self, address: str, user: str) -> None:
        self.failures.pop(("address", address), None)
        self.failures.pop(("user", user), None)
