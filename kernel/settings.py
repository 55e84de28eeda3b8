"""Settings that plugins declare: each plugin owns the keys it reads, the kernel parses and checks them once at start.

A plugin declares its keys as a frozen attrs class whose fields are made with :func:`setting` (type from the
annotation, default, check, help) and returns it from ``pyrmq_register_settings`` under the section it reads::

    @attrs.frozen
    class TimerSettings:
        timerMaxDelaySec: int = setting(3 * 86400, check=at_least(1), help="the farthest a timer may be set, s")

    @hookimpl
    def pyrmq_register_settings():
        return {"broker": [TimerSettings]}

Sections are the role tables of a bundle (``broker``: RocketMQ's ``broker.conf`` key names, ``namesrv``) and a
plugin's own table (``plugins.<plugin name>``: ``[plugins."<plugin name>"]`` in the bundle). The kernel collects every
declaration when it loads the plugins, parses each section's values into one instance per class
(:func:`resolve_settings`) and plugins read theirs with ``kernel.settings(TimerSettings)``. A key declared twice in a
section is a :class:`~pyrmq.kernel.errors.PluginError`; an unknown key is an error naming the file and the closest
known key (a RocketMQ ``broker.conf`` only warns: it carries many tuning keys that mean nothing here); a bad value
stops the start with the file, the key and what was expected.
"""

from __future__ import annotations

import difflib
import logging
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar, cast

import attrs
from attrs import AttrsInstance

from pyrmq.kernel.errors import ConfigError, PluginError

log = logging.getLogger("pyrmq.kernel.settings")

T = TypeVar("T")

#: ``check(value) -> None`` when fine, else the expectation in words ("an integer >= 1")
Check = Callable[[Any], "str | None"]

#: sections every role table is parsed from; a plugin's own table is ``plugins.<name>``
ROLE_SECTIONS = ("namesrv", "broker")
PLUGIN_SECTION_PREFIX = "plugins."


def setting(default: T, *, check: Check | None = None, help: str = "", runtime: bool = False) -> T:
    """A declared key: its default, an optional check, one line of help (``pyrmq plugins --settings``), and whether
    UPDATE_BROKER_CONFIG may change it while the role runs (``runtime``)."""
    return attrs.field(default=default, metadata={"check": check, "help": help, "runtime": runtime})


def one_of(*choices: str) -> Check:
    return lambda v: None if v in choices else f"one of {', '.join(choices)}"


def at_least(low: int) -> Check:
    return lambda v: None if v >= low else f"an integer >= {low}"


def between(low: int, high: int) -> Check:
    return lambda v: None if low <= v <= high else f"an integer from {low} to {high}"


def port(v: int) -> str | None:
    return None if 0 <= v <= 65535 else "a TCP port from 0 to 65535 (0 = any free port)"


@attrs.frozen
class Source:
    """Where a section's value came from: a file (TOML bundle, broker.conf) or the command line. ``strict``: an
    unknown key there is an error (False for a RocketMQ broker.conf: logged and ignored)."""

    file: str
    strict: bool = True


@attrs.frozen
class Declared:
    """One settings class declared by a plugin for a section."""

    section: str
    cls: type
    plugin: str

    def keys(self) -> list[str]:
        return [f.name for f in attrs.fields(self.cls)]


def _field_kind(field: attrs.Attribute[Any]) -> type:
    kind = field.type
    if isinstance(kind, type):
        return kind
    names: dict[object, type] = {"int": int, "str": str, "bool": bool, "float": float}
    try:
        return names[kind]
    except KeyError:
        raise PluginError(f"setting {field.name!r}: type {kind!r} is not one of int, str, bool, float") from None


def coerce(value: Any, kind: type, *, file: str, key: str) -> Any:
    """A TOML value or a broker.conf / command-line string as the field's type; ConfigError naming the key."""
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
    if kind is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str) and re.fullmatch(r"\s*-?\d+(\.\d*)?\s*", value):
            return float(value)
        raise ConfigError(f"expected a number, got {value!r}", file=file, key=key)
    if kind is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        raise ConfigError(f"expected text, got {value!r}", file=file, key=key)
    raise PluginError(f"setting {key!r}: unsupported type {kind!r}")  # pragma: no cover - checked at declaration


def parse_class(cls: type[T], values: Mapping[str, Any], sources: Mapping[str, Source], *, default_file: str) -> T:
    """One settings class from ``values`` (only its own keys); every bad value names its file and key."""
    kwargs: dict[str, Any] = {}
    for field in attrs.fields(cast("type[AttrsInstance]", cls)):
        if field.name not in values:
            continue
        raw = values[field.name]
        file = sources[field.name].file if field.name in sources else default_file
        value = coerce(raw, _field_kind(field), file=file, key=field.name)
        check = field.metadata.get("check")
        problem = check(value) if check else None
        if problem:
            raise ConfigError(f"expected {problem}, got {raw!r}", file=file, key=field.name)
        kwargs[field.name] = value
    return cls(**kwargs)


class Settings:
    """Every declared settings class of a role's bundle, parsed: ``kernel.settings(TimerSettings)``.

    One instance per (section, class). A class declared for one section is found by the class alone; one declared
    for several (the metrics exporter's keys exist for the name server and the broker) needs ``section=``.
    """

    def __init__(self, instances: Mapping[tuple[str, type], object], declared: Sequence[Declared]) -> None:
        self._instances: dict[tuple[str, type], object] = dict(instances)
        self.declared: tuple[Declared, ...] = tuple(declared)

    def __call__(self, cls: type[T], section: str | None = None) -> T:
        if section is not None:
            try:
                return cast(T, self._instances[(section, cls)])
            except KeyError:
                raise LookupError(f"no settings {cls.__qualname__} for section [{section}] (is its plugin in the bundle, "
                                  f"and the role in its roles?)") from None
        found = [value for (sec, kind), value in self._instances.items() if kind is cls]
        if len(found) != 1:
            where = sorted(sec for sec, kind in self._instances if kind is cls)
            raise LookupError(
                f"settings {cls.__qualname__}: " + (f"declared for sections {where}; name one with section=" if where else
                                                    "not declared by any plugin of this bundle (or its role is absent)"))
        return cast(T, found[0])

    def find(self, cls: type[T], section: str | None = None) -> T | None:
        try:
            return self(cls, section)
        except LookupError:
            return None

    def sections(self) -> list[str]:
        return sorted({section for section, _ in self._instances})

    def section(self, section: str) -> dict[str, Any]:
        """Every key of ``section`` and its value (GET_BROKER_CONFIG, GET_NAMESRV_CONFIG)."""
        out: dict[str, Any] = {}
        for (sec, _), value in self._instances.items():
            if sec == section:
                out.update(attrs.asdict(cast(AttrsInstance, value), recurse=False))
        return out

    def items(self) -> Iterator[tuple[str, type, object]]:
        for (section, cls), value in self._instances.items():
            yield section, cls, value

    def runtime_keys(self, section: str) -> frozenset[str]:
        """Keys of ``section`` declared ``runtime=True`` (what UPDATE_BROKER_CONFIG may change)."""
        return frozenset(
            f.name for d in self.declared if d.section == section for f in attrs.fields(d.cls) if f.metadata.get("runtime")
        )

    def update(self, section: str, values: Mapping[str, Any], *, source: str) -> list[tuple[object, object]]:
        """Apply ``values`` to ``section`` (checked as in a file); returns the (old, new) instances that changed.
        Unknown keys are errors."""
        self._reject_unknown(section, values, Source(source))
        changed: list[tuple[object, object]] = []
        for (sec, cls), old in list(self._instances.items()):
            if sec != section:
                continue
            mine = {k: v for k, v in values.items() if k in attrs.fields_dict(cls)}
            if not mine:
                continue
            merged = {**attrs.asdict(cast(AttrsInstance, old), recurse=False), **mine}
            new: object = parse_class(cls, merged, {k: Source(source) for k in mine}, default_file=source)
            self._instances[(sec, cls)] = new
            changed.append((old, new))
        return changed

    def _reject_unknown(self, section: str, values: Mapping[str, Any], source: Source) -> None:
        known = {f.name for d in self.declared if d.section == section for f in attrs.fields(d.cls)}
        for key in values:
            if key not in known:
                unknown_key(key, known, section=section, source=source)


def unknown_key(key: str, known: Iterable[str], *, section: str, source: Source) -> None:
    known = list(known)
    hint = difflib.get_close_matches(key, known, n=1)
    message = f"unknown setting in [{section}]" + (f"; did you mean {hint[0]!r}?" if hint else "")
    if not known:
        message += f" (no plugin of the bundle declares [{section}] keys: is the role's core plugin in bundle.plugins?)"
    if source.strict:
        raise ConfigError(message, file=source.file, key=key)
    log.warning("%s: key %r: %s (ignored)", source.file, key, message)


def check_declaration(declared: Declared) -> None:
    """A declared class must be an attrs class whose every field has a default and a supported type."""
    if not attrs.has(declared.cls):
        raise PluginError(f"plugin {declared.plugin!r}: settings for [{declared.section}] must be an attrs class, "
                          f"got {declared.cls!r}")
    for field in attrs.fields(declared.cls):
        if field.default is attrs.NOTHING:
            raise PluginError(f"plugin {declared.plugin!r}: setting {field.name!r} of {declared.cls.__qualname__} "
                              "has no default")
        _field_kind(field)


def resolve_settings(
    declared: Sequence[Declared],
    sections: Mapping[str, Mapping[str, Any]],
    sources: Mapping[str, Mapping[str, Source]],
    *,
    present: Iterable[str],
    default_file: str,
) -> Settings:
    """Parse every ``present`` section's values into the classes declared for it.

    ``sections`` maps a section name to its raw values, ``sources`` to each value's origin. A role section is present
    when its role is in the bundle (``broker``, ``namesrv``); a declared plugin table always is (defaults when the
    bundle has no such table).
    """
    present = set(present)
    owner: dict[tuple[str, str], Declared] = {}
    for d in declared:
        check_declaration(d)
        for key in d.keys():
            other = owner.get((d.section, key))
            if other is not None and other.cls is not d.cls:
                raise PluginError(
                    f"setting {key!r} of [{d.section}] is declared twice: by {other.plugin} ({other.cls.__qualname__}) "
                    f"and by {d.plugin} ({d.cls.__qualname__})")
            owner[(d.section, key)] = d
    instances: dict[tuple[str, type], object] = {}
    kept: list[Declared] = []
    for d in declared:
        absent = d.section not in present and not d.section.startswith(PLUGIN_SECTION_PREFIX)
        if absent or (d.section, d.cls) in instances:
            continue
        values = sections.get(d.section, {})
        instances[(d.section, d.cls)] = parse_class(d.cls, values, sources.get(d.section, {}), default_file=default_file)
        kept.append(d)
    for section in present:
        values = sections.get(section, {})
        known = {key for (sec, key) in owner if sec == section}
        if section.startswith(PLUGIN_SECTION_PREFIX) and not known:
            continue  # a plugin that reads its table raw (kernel.plugin_settings): nothing declared to check against
        for key in values:
            if key not in known:
                unknown_key(key, known, section=section, source=sources.get(section, {}).get(key, Source(default_file)))
    return Settings(instances, kept)
