"""RocketMQ's ``plain_acl.yml``: accounts, permissions and address patterns, loaded and checked once per file change.

    globalWhiteRemoteAddresses: ["10.10.103.*", "192.168.0.*"]
    accounts:
      - accessKey: RocketMQ            # longer than 6 characters
        secretKey: "12345678"          # longer than 6 characters
        whiteRemoteAddress: ""         # this address gets in with the account's AccessKey and no signature
        admin: false                   # admin requests (create/delete topic or group, broker config, ACL RPCs)
        defaultTopicPerm: DENY         # PUB, SUB, PUB|SUB (SUB|PUB), DENY; anything else or missing = DENY
        defaultGroupPerm: SUB
        topicPerms: ["topicA=DENY", "topicB=PUB|SUB"]
        groupPerms: ["groupA=DENY", "groupB=PUB|SUB"]

Everything a file says is checked when it is read; a mistake raises :class:`pyrmq.kernel.errors.ConfigError` naming
the file and the key (``accounts[1].secretKey``), and the broker keeps the rules it had.

Address patterns (RocketMQ's RemoteAddressStrategyFactory): blank never matches; ``*`` (``*.*.*.*``) matches all;
``192.168.0.{1,2}`` a few hosts; ``1.2.3.4,5.6.7.8`` a list; ``192.168.1-10.*`` / ``192.168.*.*`` ranges (IPv4); any
other text one exact address (IPv4 or IPv6).
"""

from __future__ import annotations

import ipaddress
import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

from pyrmq.kernel.errors import ConfigError

log = logging.getLogger("pyrmq.broker.acl")

# Permission bits (RocketMQ's org.apache.rocketmq.acl.common.Permission)
DENY = 1
ANY = 2
PUB = 4
SUB = 8

PERM_NAMES = {"PUB": PUB, "SUB": SUB, "PUB|SUB": PUB | SUB, "SUB|PUB": PUB | SUB, "DENY": DENY}
RETRY_PREFIX = "%RETRY%"
#: accessKey and secretKey must be longer than this (AclConstants.ACCESS_KEY_MIN_LENGTH)
KEY_MIN_LENGTH = 6


def parse_perm(text: Any) -> int:
    """``PUB``, ``SUB``, ``PUB|SUB``, ``SUB|PUB``, ``DENY``; anything else (or None) is DENY, like RocketMQ."""
    if text is None:
        return DENY
    return PERM_NAMES.get(str(text).strip(), DENY)


def perm_text(perm: int) -> str:
    if perm & DENY:
        return "DENY"
    return {PUB: "PUB", SUB: "SUB", PUB | SUB: "PUB|SUB"}.get(perm & (PUB | SUB), "DENY")


def check_permission(needed: int, owned: int) -> bool:
    if owned & DENY:
        return False
    if needed & ANY:
        return bool(owned & (PUB | SUB))
    return bool(needed & owned)


def retry_topic(group: str) -> str:
    return RETRY_PREFIX + group


# ---------------------------------------------------------------------------------------------------------------
# Address patterns
# ---------------------------------------------------------------------------------------------------------------


def canonical_host(address: str) -> str | None:
    """An IP address as text in one spelling (IPv4-mapped IPv6 as IPv4); None when it is not an IP address."""
    return _canonical(address)


def _canonical(address: str) -> str | None:
    try:
        ip = ipaddress.ip_address(address.strip().strip("[]"))
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return str(ip)


@attrs.frozen
class AddressPattern:
    """One ``whiteRemoteAddress`` / global white-list entry; ``matches(host)`` for a peer's IP text."""

    text: str
    anything: bool = False
    exact: frozenset[str] = frozenset()
    #: IPv4 only: four (low, high) octet ranges
    ranges: tuple[tuple[int, int], ...] = ()

    def matches(self, host: str) -> bool:
        return self.matches_canonical(_canonical(host))

    def matches_canonical(self, canonical: str | None) -> bool:
        """``matches`` for an address already in :func:`canonical_host` form."""
        if self.anything:
            return True
        if self.exact:
            return canonical in self.exact
        if self.ranges:
            if canonical is None or "." not in canonical:
                return False
            octets = canonical.split(".")
            return all(low <= int(o) <= high for o, (low, high) in zip(octets, self.ranges))
        return False

    @classmethod
    def parse(cls, text: Any) -> AddressPattern:
        """Parse one pattern; raises ValueError with what is wrong."""
        if text is None or not str(text).strip():
            return cls("")
        text = str(text).strip()
        if text in ("*", "*.*.*.*", "*:*:*:*:*:*:*:*"):
            return cls(text, anything=True)
        if text.endswith("}"):
            head, brace, tail = text.partition("{")
            if not brace or not (head.endswith(".") or head.endswith(":")):
                raise ValueError(f"{text!r}: expected a prefix and {{a,b,...}} as its last part, e.g. 192.168.0.{{1,2}}")
            return cls(text, exact=_exact(head + part.strip() for part in tail[:-1].split(",")))
        if "," in text:
            return cls(text, exact=_exact(part.strip() for part in text.split(",")))
        if "*" in text or "-" in text:
            parts = text.split(".")
            if len(parts) != 4:
                raise ValueError(f"{text!r}: a range is four IPv4 parts, each a number, a-b or * (IPv6 ranges are not supported)")
            ranges = []
            open_ended = False
            for part in parts:
                part = part.strip()
                if part == "*":
                    ranges.append((0, 255))
                    open_ended = True
                    continue
                if open_ended:
                    raise ValueError(f"{text!r}: after a * only * may follow")
                low, dash, high = part.partition("-")
                try:
                    lo, hi = (int(low), int(high)) if dash else (int(part), int(part))
                except ValueError:
                    raise ValueError(f"{text!r}: {part!r} is not a number, a-b or *") from None
                if not (0 <= lo <= hi <= 255):
                    raise ValueError(f"{text!r}: {part!r} is not a range within 0-255")
                if dash:
                    open_ended = True
                ranges.append((lo, hi))
            return cls(text, ranges=tuple(ranges))
        return cls(text, exact=_exact([text]))


def _exact(addresses: Iterable[str]) -> frozenset[str]:
    out = set()
    for address in addresses:
        canonical = _canonical(address)
        if canonical is None:
            raise ValueError(f"{address!r} is not an IP address")
        out.add(canonical)
    return frozenset(out)


# ---------------------------------------------------------------------------------------------------------------
# Accounts and rules
# ---------------------------------------------------------------------------------------------------------------


@attrs.frozen
class Account:
    """One account of a plain_acl file; ``resources`` maps topics and ``%RETRY%<group>`` to permission bits."""

    access_key: str
    secret_key: str = attrs.field(repr=False)
    white_address: AddressPattern
    admin: bool
    default_topic_perm: int
    default_group_perm: int
    resources: Mapping[str, int]
    file: str
    #: the account as the file says it (for listings and rewriting the file; holds the secret)
    raw: Mapping[str, Any] = attrs.field(repr=False)

    def listing(self) -> dict[str, Any]:
        """What ``pyrmq admin acl list`` shows: everything but the secret."""
        return {
            "accessKey": self.access_key,
            "whiteRemoteAddress": self.white_address.text,
            "admin": self.admin,
            "defaultTopicPerm": perm_text(self.default_topic_perm),
            "defaultGroupPerm": perm_text(self.default_group_perm),
            "topicPerms": list(self.raw.get("topicPerms") or []),
            "groupPerms": list(self.raw.get("groupPerms") or []),
            "file": self.file,
        }


@attrs.frozen
class AclRules:
    """Everything the files say, merged: the global white list and the accounts by access key."""

    global_white: tuple[AddressPattern, ...] = ()
    accounts: Mapping[str, Account] = attrs.field(factory=dict)
    #: file -> the document as read (rewritten by the admin RPCs)
    documents: Mapping[str, Mapping[str, Any]] = attrs.field(factory=dict, repr=False)


def account_from(raw: Any, *, file: str, key: str) -> Account:
    """Check one account mapping and build it; ConfigError names ``file`` and the offending key."""
    if not isinstance(raw, Mapping):
        raise ConfigError("an account is a mapping with accessKey, secretKey, ...", file=file, key=key)

    def text(name: str, required: bool = False) -> str | None:
        value = raw.get(name)
        if value is None:
            if required:
                raise ConfigError("missing", file=file, key=f"{key}.{name}")
            return None
        if isinstance(value, (dict, list, bool)):
            raise ConfigError(f"expected text, got {value!r}", file=file, key=f"{key}.{name}")
        return str(value)

    access_key = text("accessKey", True) or ""
    secret_key = text("secretKey", True) or ""
    for name, value in (("accessKey", access_key), ("secretKey", secret_key)):
        if len(value) <= KEY_MIN_LENGTH:
            raise ConfigError(f"must be longer than {KEY_MIN_LENGTH} characters", file=file, key=f"{key}.{name}")
    try:
        white = AddressPattern.parse(text("whiteRemoteAddress"))
    except ValueError as exc:
        raise ConfigError(str(exc), file=file, key=f"{key}.whiteRemoteAddress") from None
    admin = raw.get("admin", False)
    if isinstance(admin, str) and admin.strip().lower() in ("true", "false"):
        admin = admin.strip().lower() == "true"
    if admin is None:
        admin = False
    if not isinstance(admin, bool):
        raise ConfigError(f"expected true or false, got {admin!r}", file=file, key=f"{key}.admin")
    resources: dict[str, int] = {}
    for list_name, is_topic in (("topicPerms", True), ("groupPerms", False)):
        entries = raw.get(list_name) or []
        if not isinstance(entries, list):
            raise ConfigError("expected a list of name=PERM", file=file, key=f"{key}.{list_name}")
        for i, entry in enumerate(entries):
            name, eq, perm = str(entry).partition("=")
            if not eq or not name.strip() or "=" in perm:
                raise ConfigError(
                    f"expected name=PERM (PUB, SUB, PUB|SUB or DENY), got {entry!r}", file=file, key=f"{key}.{list_name}[{i}]"
                )
            if perm.strip() not in PERM_NAMES:
                log.warning("%s: %s.%s[%d] %r: unknown permission, taken as DENY", file, key, list_name, i, entry)
            resources[name.strip() if is_topic else retry_topic(name.strip())] = parse_perm(perm)
    return Account(
        access_key=access_key,
        secret_key=secret_key,
        white_address=white,
        admin=admin,
        default_topic_perm=parse_perm(raw.get("defaultTopicPerm")),
        default_group_perm=parse_perm(raw.get("defaultGroupPerm")),
        resources=resources,
        file=file,
        raw=dict(raw),
    )


def parse_document(doc: Any, file: str) -> tuple[list[AddressPattern], list[Account]]:
    if doc is None:
        return [], []
    if not isinstance(doc, Mapping):
        raise ConfigError("expected a mapping with globalWhiteRemoteAddresses and accounts", file=file)
    white_raw = doc.get("globalWhiteRemoteAddresses") or []
    if isinstance(white_raw, str):
        white_raw = [white_raw]
    if not isinstance(white_raw, list):
        raise ConfigError("expected a list of address patterns", file=file, key="globalWhiteRemoteAddresses")
    white = []
    for i, entry in enumerate(white_raw):
        try:
            white.append(AddressPattern.parse(entry))
        except ValueError as exc:
            raise ConfigError(str(exc), file=file, key=f"globalWhiteRemoteAddresses[{i}]") from None
    accounts_raw = doc.get("accounts") or []
    if not isinstance(accounts_raw, list):
        raise ConfigError("expected a list of accounts", file=file, key="accounts")
    accounts = [account_from(raw, file=file, key=f"accounts[{i}]") for i, raw in enumerate(accounts_raw)]
    return white, accounts


def read_yaml(path: Path) -> Any:
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror or exc}", file=str(path)) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"not valid YAML{where}: {problem}", file=str(path)) from None


def load_rules(files: Iterable[Path]) -> AclRules:
    """Read and check every file; an account key may appear in one file only."""
    white: list[AddressPattern] = []
    accounts: dict[str, Account] = {}
    documents: dict[str, Mapping[str, Any]] = {}
    for path in files:
        doc = read_yaml(path)
        file_white, file_accounts = parse_document(doc, str(path))
        documents[str(path)] = doc if isinstance(doc, Mapping) else {}
        white.extend(file_white)
        for i, account in enumerate(file_accounts):
            other = accounts.get(account.access_key)
            if other is not None:
                raise ConfigError(
                    f"accessKey {account.access_key!r} is already defined in {other.file}", file=str(path), key=f"accounts[{i}].accessKey"
                )
            accounts[account.access_key] = account
    return AclRules(tuple(white), accounts, documents)


def write_yaml(path: Path, doc: Mapping[str, Any]) -> None:
    """Write ``doc`` to ``path`` atomically (a temporary file renamed over it)."""
    import yaml

    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(yaml.safe_dump(dict(doc), sort_keys=False, allow_unicode=True), encoding="utf-8")
    os.replace(tmp, path)
