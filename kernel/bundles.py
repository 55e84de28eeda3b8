"""Plugin bundles: a TOML file in configs/ naming a role's plugins and their settings, parsed into frozen attrs.

A bundle looks like::

    [bundle]
    name = "broker"
    roles = ["broker"]
    plugins = ["pyrmq.plugins.builtin.store", ...]   # module paths, registered in this order
    entry_points = true                               # also load third-party plugins (group "pyrmq.plugins")
    block = []                                        # plugin names never to register

    [broker]                                          # RocketMQ broker.conf key names (camelCase)
    brokerName = "broker-a"

    [plugins."pyrmq.plugins.builtin.store"]           # a plugin's own settings, read with kernel.plugin_settings()

Broker settings use RocketMQ's ``broker.conf`` key names so a RocketMQ user recognises them, and
:func:`load_broker_conf` reads an existing ``broker.conf`` (Java properties) on top of the packaged broker bundle.
Every error names the file, the key and what was expected.
"""

from __future__ import annotations

import difflib
import logging
import os
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import attrs

from pyrmq.kernel.errors import ConfigError

log = logging.getLogger("pyrmq.kernel.bundles")

KNOWN_ROLES = ("namesrv", "broker")

# ---------------------------------------------------------------------------------------------------------------
# Typed settings: each field says its type, and optionally a check returning an error text (or None when fine).
# ---------------------------------------------------------------------------------------------------------------


def _setting(default: Any, check: Callable[[Any], str | None] | None = None) -> Any:
    return attrs.field(default=default, metadata={"check": check})


def _one_of(*choices: str) -> Callable[[Any], str | None]:
    return lambda v: None if v in choices else f"one of {', '.join(choices)}"


def _at_least(low: int) -> Callable[[Any], str | None]:
    return lambda v: None if v >= low else f"an integer >= {low}"


def _between(low: int, high: int) -> Callable[[Any], str | None]:
    return lambda v: None if low <= v <= high else f"an integer from {low} to {high}"


def _port(v: int) -> str | None:
    return None if 0 <= v <= 65535 else "a TCP port from 0 to 65535 (0 = any free port)"


_DELAY_TOKEN = re.compile(r"^(\d+)([smhd])$")


def parse_delay_levels(text: str) -> tuple[int, ...]:
    """``"1s 5s 10s ... 2h"`` -> delays in milliseconds, level i (1-based) at index i-1 (spec 7.6)."""
    unit_ms = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
    out = []
    for token in text.split():
        m = _DELAY_TOKEN.match(token)
        if not m:
            raise ValueError(f"bad delay level token {token!r} (expected <int><s|m|h|d>, e.g. 5s)")
        out.append(int(m.group(1)) * unit_ms[m.group(2)])
    if not out:
        raise ValueError("no delay levels")
    return tuple(out)


def _delay_levels(v: str) -> str | None:
    try:
        parse_delay_levels(v)
    except ValueError as exc:
        return f"space-separated <int><s|m|h|d> tokens ({exc})"
    return None


def _delete_when(v: str) -> str | None:
    hours = v.split(";")
    if all(h.isdigit() and 0 <= int(h) <= 23 for h in hours):
        return None
    return "hours of the day 00-23 separated by ';' (e.g. 04 or 04;16)"


def _namesrv_addr(v: str) -> str | None:
    for addr in filter(None, v.split(";")):
        host, _, port = addr.rpartition(":")
        if not host or not port.isdigit():
            return "name server addresses host:port separated by ';' (e.g. 127.0.0.1:9876)"
    return None


@attrs.frozen
class NamesrvSettings:
    """Name server settings (RocketMQ's namesrv.conf names where they exist)."""

    listenHost: str = _setting("127.0.0.1")
    listenPort: int = _setting(9876, _port)
    #: scan for silent brokers every N ms; brokers silent for brokerChannelExpiredTime ms are removed (spec 7.1)
    scanNotActiveBrokerInterval: int = _setting(10_000, _at_least(1))
    brokerChannelExpiredTime: int = _setting(120_000, _at_least(1))
    orderMessageEnable: bool = _setting(False)
    kvConfigPath: str = _setting("~/namesrv/kvConfig.json")
    #: Prometheus /metrics (RocketMQ 5.x names; plugins/builtin/metrics.py): "PROM" switches it on
    metricsExporterType: str = _setting("DISABLE", _one_of("DISABLE", "PROM"))
    metricsPromExporterHost: str = _setting("")
    metricsPromExporterPort: int = _setting(5557, _port)


@attrs.frozen
class BrokerSettings:
    """Broker settings under RocketMQ's broker.conf key names; defaults are RocketMQ 4.9.8's (spec section 7).

    pyrmq additions: ``listenHost`` (the interface to bind; RocketMQ binds all interfaces). ``brokerIP1`` defaults to
    127.0.0.1 instead of the first non-loopback address (see docs/decisions.md).
    """

    brokerClusterName: str = _setting("DefaultCluster")
    brokerName: str = _setting("broker-a")
    brokerId: int = _setting(0, _at_least(0))
    namesrvAddr: str = _setting("", _namesrv_addr)
    listenHost: str = _setting("127.0.0.1")
    listenPort: int = _setting(10911, _port)
    #: also listen on the VIP port listenPort - 2 (pyrmq setting; RocketMQ always does)
    fastListenEnable: bool = _setting(True)
    brokerIP1: str = _setting("127.0.0.1")
    brokerIP2: str = _setting("")
    haListenPort: int = _setting(10912, _port)
    haMasterAddress: str = _setting("")
    brokerRole: str = _setting("ASYNC_MASTER", _one_of("ASYNC_MASTER", "SYNC_MASTER", "SLAVE"))
    brokerPermission: int = _setting(6, _between(0, 15))
    #: access control (plain_acl.yml, pyrmq.plugins.broker.acl; docs/acl.md)
    aclEnable: bool = _setting(False)
    regionId: str = _setting("DefaultRegion")
    # store
    storePathRootDir: str = _setting("~/store")
    storePathCommitLog: str = _setting("")
    mappedFileSizeCommitLog: int = _setting(1024 * 1024 * 1024, _at_least(4096))
    mappedFileSizeConsumeQueue: int = _setting(300_000 * 20, _at_least(20))
    maxMessageSize: int = _setting(4 * 1024 * 1024, _at_least(1))
    flushDiskType: str = _setting("ASYNC_FLUSH", _one_of("ASYNC_FLUSH", "SYNC_FLUSH"))
    flushIntervalCommitLog: int = _setting(500, _at_least(1))
    flushCommitLogLeastPages: int = _setting(4, _at_least(0))
    syncFlushTimeout: int = _setting(5000, _at_least(1))
    checkCRCOnRecover: bool = _setting(True)
    # pyrmq's own: store files get all their disk blocks when created (StoreConfig.preallocate_store_files)
    preallocateStoreFiles: bool = _setting(False)
    maxHashSlotNum: int = _setting(5_000_000, _at_least(1))
    maxIndexNum: int = _setting(20_000_000, _at_least(1))
    fileReservedTime: int = _setting(72, _at_least(0))
    deleteWhen: str = _setting("04", _delete_when)
    diskMaxUsedSpaceRatio: int = _setting(75, _between(10, 95))
    diskSpaceCleanForciblyRatio: int = _setting(85, _between(10, 99))
    diskSpaceWarningLevelRatio: int = _setting(90, _between(10, 99))
    maxTransferCountOnMessageInMemory: int = _setting(32, _at_least(1))
    maxTransferBytesOnMessageInMemory: int = _setting(256 * 1024, _at_least(1))
    defaultQueryMaxNum: int = _setting(32, _at_least(1))
    # topics and groups
    autoCreateTopicEnable: bool = _setting(True)
    autoCreateSubscriptionGroup: bool = _setting(True)
    defaultTopicQueueNums: int = _setting(8, _between(1, 1024))
    clusterTopicEnable: bool = _setting(True)
    brokerTopicEnable: bool = _setting(True)
    traceTopicEnable: bool = _setting(False)
    # name server registration, clients, offsets
    registerNameServerPeriod: int = _setting(30_000, _between(10_000, 60_000))
    registerBrokerTimeoutMills: int = _setting(6000, _at_least(1))
    channelExpiredTimeout: int = _setting(120_000, _at_least(1))
    notifyConsumerIdsChangedEnable: bool = _setting(True)
    flushConsumerOffsetInterval: int = _setting(5000, _at_least(1))
    # pulls
    longPollingEnable: bool = _setting(True)
    shortPollingTimeMills: int = _setting(1000, _at_least(1))
    slaveReadEnable: bool = _setting(False)
    accessMessageInMemoryMaxRatio: int = _setting(40, _between(0, 100))
    enablePropertyFilter: bool = _setting(False)
    filterSupportRetry: bool = _setting(False)
    filterDataCleanTimeSpan: int = _setting(24 * 3600 * 1000, _at_least(0))
    # the bloom-filter path (consume-queue ext bitmaps): accepted for broker.conf compatibility, ignored with a warning
    enableCalcFilterBitMap: bool = _setting(False)
    enableConsumeQueueExt: bool = _setting(False)
    expectConsumerNumUseFilter: int = _setting(32, _at_least(1))
    maxErrorRateOfBloomFilter: int = _setting(20, _between(1, 100))
    # delay, retry, transactions
    messageDelayLevel: str = _setting("1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h", _delay_levels)
    flushDelayOffsetInterval: int = _setting(10_000, _at_least(1))
    rejectTransactionMessage: bool = _setting(False)
    transactionCheckInterval: int = _setting(60_000, _at_least(1))
    transactionTimeOut: int = _setting(6000, _at_least(0))
    transactionCheckMax: int = _setting(15, _at_least(1))
    # HA
    haSendHeartbeatInterval: int = _setting(5000, _at_least(1))
    haHousekeepingInterval: int = _setting(20_000, _at_least(1))
    haTransferBatchSize: int = _setting(32 * 1024, _at_least(1))
    haSlaveFallbehindMax: int = _setting(256 * 1024 * 1024, _at_least(0))
    slaveTimeout: int = _setting(3000, _at_least(1))
    #: Prometheus /metrics (RocketMQ 5.x names; plugins/builtin/metrics.py): "PROM" switches it on
    metricsExporterType: str = _setting("DISABLE", _one_of("DISABLE", "PROM"))
    metricsPromExporterHost: str = _setting("")
    metricsPromExporterPort: int = _setting(5557, _port)

    @property
    def store_root(self) -> Path:
        return Path(os.path.expanduser(self.storePathRootDir))

    @property
    def namesrv_addresses(self) -> list[str]:
        return [a.strip() for a in self.namesrvAddr.split(";") if a.strip()]

    @property
    def broker_addr(self) -> str:
        """The address registered with name servers (``brokerIP1:listenPort``, spec 7.2)."""
        return f"{self.brokerIP1}:{self.listenPort}"

    @property
    def delay_levels_ms(self) -> tuple[int, ...]:
        return parse_delay_levels(self.messageDelayLevel)


def _coerce(value: Any, kind: type, *, file: str, key: str, expected: str) -> Any:
    """Convert a TOML value or a broker.conf string to the field's type; raise ConfigError naming the key."""
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        raise ConfigError(f"expected true or false, got {value!r}", file=file, key=key)
    if kind is int:
        if isinstance(value, bool):
            raise ConfigError(f"expected an integer, got {value!r}", file=file, key=key)
        if isinstance(value, int):
            return value
        if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
            return int(value)
        raise ConfigError(f"expected an integer, got {value!r}", file=file, key=key)
    if kind is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        raise ConfigError(f"expected text, got {value!r}", file=file, key=key)
    raise AssertionError(kind)  # pragma: no cover


def parse_settings(cls: type, values: Mapping[str, Any], *, file: str, section: str, strict: bool = True) -> Any:
    """Build settings class ``cls`` from ``values``; unknown keys are errors when ``strict`` (else logged)."""
    fields = {f.name: f for f in attrs.fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, raw in values.items():
        field = fields.get(key)
        if field is None:
            hint = difflib.get_close_matches(key, fields, n=1)
            message = f"unknown setting in [{section}]" + (f"; did you mean {hint[0]!r}?" if hint else "")
            if strict:
                raise ConfigError(message, file=file, key=key)
            log.warning("%s: key %r: %s (ignored)", file, key, message)
            continue
        kind = field.type if isinstance(field.type, type) else {"int": int, "str": str, "bool": bool}[field.type]
        value = _coerce(raw, kind, file=file, key=key, expected="")
        check = field.metadata.get("check")
        problem = check(value) if check else None
        if problem:
            raise ConfigError(f"expected {problem}, got {raw!r}", file=file, key=key)
        kwargs[key] = value
    return cls(**kwargs)


# ---------------------------------------------------------------------------------------------------------------
# Bundles
# ---------------------------------------------------------------------------------------------------------------


@attrs.frozen
class Bundle:
    """A parsed bundle: which plugins a role loads, and their settings."""

    name: str
    file: str
    roles: tuple[str, ...]
    plugins: tuple[str, ...]
    entry_points: bool = True
    block: tuple[str, ...] = ()
    namesrv: NamesrvSettings | None = None
    broker: BrokerSettings | None = None
    plugin_settings: Mapping[str, Mapping[str, Any]] = attrs.field(factory=dict)
    description: str = ""

    def with_overrides(self, overrides: Mapping[str, Any], *, source: str = "command line") -> Bundle:
        """Apply ``key=value`` overrides: ``brokerName=x`` (broker) or ``namesrv.listenPort=9877``."""
        broker_values: dict[str, Any] = {}
        namesrv_values: dict[str, Any] = {}
        for key, value in overrides.items():
            section, _, name = key.rpartition(".")
            if section == "namesrv" or (not section and self.broker is None and self.namesrv is not None):
                namesrv_values[name] = value
            elif section in ("", "broker"):
                broker_values[name] = value
            else:
                raise ConfigError("expected broker.<key> or namesrv.<key>", file=source, key=key)
        broker = self.broker
        namesrv = self.namesrv
        if broker_values:
            if broker is None:
                raise ConfigError(f"bundle {self.name!r} has no broker role", file=source, key=next(iter(broker_values)))
            broker = _evolve_settings(broker, broker_values, source, "broker")
        if namesrv_values:
            if namesrv is None:
                raise ConfigError(f"bundle {self.name!r} has no namesrv role", file=source, key=next(iter(namesrv_values)))
            namesrv = _evolve_settings(namesrv, namesrv_values, source, "namesrv")
        return attrs.evolve(self, broker=broker, namesrv=namesrv)


def _evolve_settings(current: Any, values: Mapping[str, Any], file: str, section: str) -> Any:
    merged = attrs.asdict(current)
    parsed = parse_settings(type(current), values, file=file, section=section)
    merged.update({k: getattr(parsed, k) for k in values})
    return type(current)(**merged)


def _str_list(value: Any, *, file: str, key: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"expected a list of strings, got {value!r}", file=file, key=key)
    return tuple(value)


def parse_bundle(data: Mapping[str, Any], *, file: str) -> Bundle:
    """Validate a bundle's TOML document (already parsed) into a :class:`Bundle`."""
    allowed = {"bundle", "namesrv", "broker", "plugins"}
    for key in data:
        if key not in allowed:
            raise ConfigError(f"unknown table [{key}]; expected one of {sorted(allowed)}", file=file, key=key)
    head = data.get("bundle")
    if not isinstance(head, dict):
        raise ConfigError("missing [bundle] table (name, roles, plugins)", file=file, key="bundle")
    known = {"name", "roles", "plugins", "entry_points", "block", "description"}
    for key in head:
        if key not in known:
            hint = difflib.get_close_matches(key, known, n=1)
            raise ConfigError(
                "unknown key in [bundle]" + (f"; did you mean {hint[0]!r}?" if hint else ""), file=file, key=f"bundle.{key}"
            )
    name = head.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError("expected a non-empty bundle name", file=file, key="bundle.name")
    roles = _str_list(head.get("roles", []), file=file, key="bundle.roles")
    for role in roles:
        if role not in KNOWN_ROLES:
            raise ConfigError(f"unknown role {role!r}; expected some of {KNOWN_ROLES}", file=file, key="bundle.roles")
    plugins = _str_list(head.get("plugins", []), file=file, key="bundle.plugins")
    block = _str_list(head.get("block", []), file=file, key="bundle.block")
    entry_points = head.get("entry_points", True)
    if not isinstance(entry_points, bool):
        raise ConfigError(f"expected true or false, got {entry_points!r}", file=file, key="bundle.entry_points")
    namesrv = broker = None
    if "namesrv" in roles or "namesrv" in data:
        namesrv = parse_settings(NamesrvSettings, data.get("namesrv", {}), file=file, section="namesrv")
    if "broker" in roles or "broker" in data:
        broker = parse_settings(BrokerSettings, data.get("broker", {}), file=file, section="broker")
    plugin_settings = data.get("plugins", {})
    if not isinstance(plugin_settings, dict) or not all(isinstance(v, dict) for v in plugin_settings.values()):
        raise ConfigError('expected [plugins."<plugin name>"] tables', file=file, key="plugins")
    for plugin_name in plugin_settings:
        if plugin_name not in plugins:
            raise ConfigError(
                f"settings for plugin {plugin_name!r}, which is not in bundle.plugins", file=file, key=f"plugins.{plugin_name}"
            )
    return Bundle(
        name=name,
        file=file,
        roles=roles,
        plugins=plugins,
        entry_points=entry_points,
        block=block,
        namesrv=namesrv,
        broker=broker,
        plugin_settings=plugin_settings,
        description=str(head.get("description", "")),
    )


def packaged_bundle_path(name: str) -> Path:
    """Path of a bundle shipped in pyrmq.configs (``dev`` -> .../configs/dev.toml)."""
    return Path(str(resources.files("pyrmq.configs").joinpath(f"{name}.toml")))


def load_bundle(path_or_name: str | os.PathLike[str]) -> Bundle:
    """Load a bundle from a TOML path, a RocketMQ ``broker.conf``, or the name of a packaged bundle (``dev``)."""
    text = str(path_or_name)
    path = Path(text)
    # is_file, not exists: a bundle name such as "client" must not pick up the client/ folder of the current directory
    if not path.is_file() and not any(sep in text for sep in "/\\") and not text.endswith((".toml", ".conf")):
        path = packaged_bundle_path(text)
        if not path.exists():
            shipped = sorted(p.stem for p in path.parent.glob("*.toml"))
            raise ConfigError(f"no such bundle file or packaged bundle; packaged bundles: {', '.join(shipped)}", file=text)
    if not path.exists():
        raise ConfigError("no such file", file=text)
    if path.suffix != ".toml":
        return load_broker_conf(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"not valid TOML: {exc}", file=str(path)) from None
    return parse_bundle(data, file=str(path))


def parse_java_properties(lines: Iterable[str]) -> dict[str, str]:
    """Read Java ``.properties`` text (``key=value``, ``key: value`` or ``key value``; ``#``/``!`` comments)."""
    out: dict[str, str] = {}
    pending = ""
    for raw in lines:
        line = raw.rstrip("\r\n")
        stripped = line.lstrip()
        if not pending and (not stripped or stripped[0] in "#!"):
            continue
        if stripped.endswith("\\") and not stripped.endswith("\\\\"):
            pending += stripped[:-1]
            continue
        logical = pending + stripped
        pending = ""
        m = re.match(r"([^=:\s]+)\s*[=:\s]\s*(.*)$", logical)
        if m:
            out[m.group(1)] = m.group(2).strip()
        else:
            out[logical.strip()] = ""
    return out


def format_java_properties(settings: Any, **overrides: Any) -> str:
    """Settings (with ``overrides``, e.g. the real port of ``listenPort = 0``) as Java ``.properties`` text
    (``key=value`` lines, booleans as ``true``/``false``): the body of GET_BROKER_CONFIG / GET_NAMESRV_CONFIG."""
    out = []
    for key, value in sorted({**attrs.asdict(settings), **overrides}.items()):
        text = ("true" if value else "false") if isinstance(value, bool) else str(value)
        out.append(f"{key}={text}\n")
    return "".join(out)


def load_broker_conf(path: str | os.PathLike[str]) -> Bundle:
    """An existing RocketMQ ``broker.conf`` on top of the packaged broker bundle.

    Keys pyrmq does not know are logged and ignored (RocketMQ's broker.conf carries many tuning keys that make no
    sense here); a known key with a bad value is an error naming the file and key.
    """
    path = Path(path)
    try:
        values = parse_java_properties(path.read_text(encoding="utf-8").splitlines())
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror}", file=str(path)) from None
    base = load_bundle(packaged_bundle_path("broker"))
    broker = parse_settings(BrokerSettings, values, file=str(path), section="broker.conf", strict=False)
    return attrs.evolve(base, file=str(path), broker=broker)
