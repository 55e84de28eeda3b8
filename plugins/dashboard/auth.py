"""Dashboard login: a user file of ``name:pbkdf2_sha256$<iterations>$<salt hex>$<hash hex>`` lines (``#`` comments),
made with ``pyrmq dashboard hash-password``; sessions are HMAC-signed cookies with a key made at start."""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import time
from pathlib import Path

ITERATIONS = 200_000
SESSION_SECONDS = 12 * 3600
COOKIE = "pyrmq_dashboard"


class UserFileError(ValueError):
    pass


def hash_password(password: str, *, iterations: int = ITERATIONS, salt: bytes | None = None) -> str:
    salt = salt or os.urandom(16)
    digest = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    return f"pbkdf2_sha256${iterations}${salt.hex()}${digest.hex()}"


def check_password(password: str, stored: str) -> bool:
    try:
        scheme, iterations, salt, digest = stored.split("$")
        if scheme != "pbkdf2_sha256":
            return False
        got = hashlib.pbkdf2_hmac("sha256", password.encode(), bytes.fromhex(salt), int(iterations))
    except ValueError:
        return False
    return hmac.compare_digest(got.hex(), digest)


def load_users(path: str | os.PathLike[str]) -> dict[str, str]:
    users = {}
    for number, line in enumerate(Path(path).read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, stored = line.partition(":")
        if not sep or not name or not stored.startswith("pbkdf2_sha256$") or stored.count("$") != 3:
            raise UserFileError(f"{path}:{number}: expected name:pbkdf2_sha256$iterations$salt$hash "
                                "(make one with `pyrmq dashboard hash-password`)")
        users[name] = stored
    if not users:
        raise UserFileError(f"{path}: no users")
    return users


class Sessions:
    def __init__(self, users: dict[str, str]) -> None:
        self.users = users
        self.key = secrets.token_bytes(32)

    def login(self, name: str, password: str) -> str | None:
        stored = self.users.get(name)
        if stored is None or not check_password(password, stored):
            return None
        payload = f"{name}|{int(time.time()) + SESSION_SECONDS}"
        return payload + "|" + hmac.new(self.key, payload.encode(), "sha256").hexdigest()

    def user_of(self, cookie: str | None) -> str | None:
        if not cookie or cookie.count("|") != 2:
            return None
        name, expires, mac = cookie.split("|")
        good = hmac.new(self.key, f"{name}|{expires}".encode(), "sha256").hexdigest()
        if not hmac.compare_digest(mac, good) or not expires.isdigit() or int(expires) < time.time():
            return None
        return name if name in self.users else None
