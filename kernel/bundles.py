"""Plugin bundles: a TOML file in configs/ naming a role's plugins and their settings, parsed into frozen attrs.

A bundle looks like::

    [bundle]
    name = "failover"
    roles = ["broker"]
    include = ["broker"]                              # another bundle's plugins and settings first (packaged name or path)
    plugins = ["pyrmq.plugins.broker.failover", ...]  # module paths (order carries no meaning)
    entry_points = true                               # also load third-party plugins (group "pyrmq.plugins")
    block = []                                        # plugin names never to register

    [broker]                                          # RocketMQ broker.conf key names (camelCase)
    brokerName = "broker-a"

    [plugins."pyrmq.plugins.broker.failover"]         # a plugin's own table

Broker settings use RocketMQ's ``broker.conf`` key names so a RocketMQ user recognises them, and
:func:`load_broker_conf` reads an existing ``broker.conf`` (Java properties) on top of the packaged broker bundle.
A bundle keeps the values as written: which keys exist, their types and checks are declared by the plugins
(``pyrmq_register_settings``, :mod:`pyrmq.kernel.settings`) and checked when the kernel loads them. Every error names
the file, the key and what was expected.
"""

from __future__ import annotations

import difflib
import logging
import os
import tomllib
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import attrs

from pyrmq.kernel.errors import ConfigError
from pyrmq.kernel.javaprops import parse_java_properties
from pyrmq.kernel.settings import PLUGIN_SECTION_PREFIX, Source

log = logging.getLogger("pyrmq.kernel.bundles")

KNOWN_ROLES = ("namesrv", "broker")

# ---------------------------------------------------------------------------------------------------------------
# Bundles
# ---------------------------------------------------------------------------------------------------------------


@attrs.frozen
class Bundle:
    """A parsed bundle: which plugins a role loads, and the raw values of its settings.

    Values are kept as written (TOML values, broker.conf strings, command-line strings) with where each came from;
    the kernel checks them against what the plugins declare when it loads them (:mod:`pyrmq.kernel.settings`), so a
    plugin's keys are known only to that plugin.
    """

    name: str
    file: str
    roles: tuple[str, ...]
    plugins: tuple[str, ...]
    entry_points: bool = True
    block: tuple[str, ...] = ()
    #: raw values of the role tables, ``{"broker": {...}, "namesrv": {...}}`` (a role's table exists when the role does)
    sections: Mapping[str, Mapping[str, Any]] = attrs.field(factory=dict)
    #: where each of those values came from (the file, or "command line"), for errors
    sources: Mapping[str, Mapping[str, Source]] = attrs.field(factory=dict)
    plugin_settings: Mapping[str, Mapping[str, Any]] = attrs.field(factory=dict)
    description: str = ""
    #: the bundles this one includes (packaged names or paths), already merged into it
    includes: tuple[str, ...] = ()

    @property
    def broker(self) -> Mapping[str, Any] | None:
        """The ``[broker]`` table as written (None without a broker role); parsed values: ``kernel.settings``."""
        return self.sections.get("broker")

    @property
    def namesrv(self) -> Mapping[str, Any] | None:
        return self.sections.get("namesrv")

    def with_overrides(self, overrides: Mapping[str, Any], *, source: str = "command line") -> Bundle:
        """Apply ``key=value`` overrides: ``brokerName=x`` (broker) or ``namesrv.listenPort=9877``. Checked with the
        rest when the kernel loads the plugins (an unknown key or a bad value names ``source``)."""
        sections = {name: dict(values) for name, values in self.sections.items()}
        sources = {name: dict(values) for name, values in self.sources.items()}
        for key, value in overrides.items():
            section, _, name = key.rpartition(".")
            if not section:
                section = "namesrv" if "broker" not in sections and "namesrv" in sections else "broker"
            if section not in KNOWN_ROLES:
                raise ConfigError("expected broker.<key> or namesrv.<key>", file=source, key=key)
            if section not in sections:
                raise ConfigError(f"bundle {self.name!r} has no {section} role", file=source, key=name)
            sections[section][name] = value
            sources.setdefault(section, {})[name] = Source(source)
        return attrs.evolve(self, sections=sections, sources=sources)

    def with_plugin_settings(self, plugin: str, values: Mapping[str, Any]) -> Bundle:
        """The bundle with ``values`` merged into ``[plugins."<plugin>"]``."""
        merged = {**self.plugin_settings.get(plugin, {}), **values}
        return attrs.evolve(self, plugin_settings={**self.plugin_settings, plugin: merged})

    def settings_sections(self) -> tuple[dict[str, Mapping[str, Any]], dict[str, Mapping[str, Source]]]:
        """Every section's raw values and sources, plugin tables as ``plugins.<name>`` (for the kernel's check)."""
        sections: dict[str, Mapping[str, Any]] = {role: self.sections[role] for role in self.roles if role in self.sections}
        sources: dict[str, Mapping[str, Source]] = {role: self.sources.get(role, {}) for role in sections}
        for name, values in self.plugin_settings.items():
            sections[PLUGIN_SECTION_PREFIX + name] = values
            sources[PLUGIN_SECTION_PREFIX + name] = {key: Source(self.file) for key in values}
        for role in self.roles:
            sections.setdefault(role, {})
        return sections, sources


def _str_list(value: Any, *, file: str, key: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"expected a list of strings, got {value!r}", file=file, key=key)
    return tuple(value)


def _table(value: Any, *, file: str, key: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"expected a table, got {value!r}", file=file, key=key)
    return dict(value)


def parse_bundle(data: Mapping[str, Any], *, file: str, _including: tuple[str, ...] = ()) -> Bundle:
    """Validate a bundle's TOML document (already parsed) into a :class:`Bundle`.

    ``include = ["broker"]`` in ``[bundle]`` merges other bundles (packaged names or paths relative to this file)
    first: their plugins come first (each listed once), their ``[broker]`` / ``[namesrv]`` / ``[plugins."..."]``
    values are overridden by this file's. ``roles`` are this file's own.
    """
    allowed = {"bundle", "namesrv", "broker", "plugins"}
    for key in data:
        if key not in allowed:
            raise ConfigError(f"unknown table [{key}]; expected one of {sorted(allowed)}", file=file, key=key)
    head = data.get("bundle")
    if not isinstance(head, dict):
        raise ConfigError("missing [bundle] table (name, roles, plugins)", file=file, key="bundle")
    known = {"name", "roles", "plugins", "entry_points", "block", "description", "include"}
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
    own_plugins = _str_list(head.get("plugins", []), file=file, key="bundle.plugins")
    block = _str_list(head.get("block", []), file=file, key="bundle.block")
    includes = _str_list(head.get("include", []), file=file, key="bundle.include")
    entry_points = head.get("entry_points", True)
    if not isinstance(entry_points, bool):
        raise ConfigError(f"expected true or false, got {entry_points!r}", file=file, key="bundle.entry_points")

    plugins: list[str] = []
    sections: dict[str, dict[str, Any]] = {}
    sources: dict[str, dict[str, Source]] = {}
    plugin_settings: dict[str, dict[str, Any]] = {}
    for included in includes:
        other = _load_included(included, file=file, including=(*_including, file))
        plugins.extend(p for p in other.plugins if p not in plugins)
        for section, values in other.sections.items():
            sections.setdefault(section, {}).update(values)
            sources.setdefault(section, {}).update(other.sources.get(section, {}))
        for plugin, values in other.plugin_settings.items():
            plugin_settings.setdefault(plugin, {}).update(values)
    plugins.extend(p for p in own_plugins if p not in plugins)

    for role in KNOWN_ROLES:
        if role in data:
            values = _table(data[role], file=file, key=role)
            sections.setdefault(role, {}).update(values)
            sources.setdefault(role, {}).update({key: Source(file) for key in values})
    for role in list(sections):
        if role not in roles:
            if role in data:
                raise ConfigError(f"a [{role}] table, but {role!r} is not in bundle.roles", file=file, key=role)
            del sections[role]  # an included bundle's role this bundle does not run
            sources.pop(role, None)
    for role in roles:
        sections.setdefault(role, {})

    own_tables = data.get("plugins", {})
    if not isinstance(own_tables, dict) or not all(isinstance(v, dict) for v in own_tables.values()):
        raise ConfigError('expected [plugins."<plugin name>"] tables', file=file, key="plugins")
    for plugin_name, values in own_tables.items():
        plugin_settings.setdefault(plugin_name, {}).update(values)
    for plugin_name in plugin_settings:
        if plugin_name not in plugins:
            raise ConfigError(
                f"settings for plugin {plugin_name!r}, which is not in bundle.plugins", file=file, key=f"plugins.{plugin_name}"
            )
    return Bundle(
        name=name,
        file=file,
        roles=roles,
        plugins=tuple(plugins),
        entry_points=entry_points,
        block=block,
        sections=sections,
        sources=sources,
        plugin_settings=plugin_settings,
        description=str(head.get("description", "")),
        includes=includes,
    )


def _load_included(name: str, *, file: str, including: tuple[str, ...]) -> Bundle:
    path = Path(name)
    if not name.endswith(".toml") and not any(sep in name for sep in "/\\"):
        path = packaged_bundle_path(name)
    elif not path.is_absolute():
        path = Path(file).parent / path
    if str(path) in including:
        raise ConfigError(f"bundle include cycle: {' -> '.join((*including, str(path)))}", file=file, key="bundle.include")
    if not path.exists():
        raise ConfigError(f"included bundle {name!r} not found ({path})", file=file, key="bundle.include")
    return parse_bundle(_read_toml(path), file=str(path), _including=including)


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"not valid TOML: {exc}", file=str(path)) from None


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
    return parse_bundle(_read_toml(path), file=str(path))


def load_broker_conf(path: str | os.PathLike[str]) -> Bundle:
    """An existing RocketMQ ``broker.conf`` on top of the packaged broker bundle.

    Keys no plugin declares are logged and ignored when the kernel checks the settings (RocketMQ's broker.conf
    carries many tuning keys that make no sense here); a known key with a bad value is an error naming the file and
    key.
    """
    path = Path(path)
    try:
        values = parse_java_properties(path.read_text(encoding="utf-8").splitlines())
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror}", file=str(path)) from None
    base = load_bundle(packaged_bundle_path("broker"))
    source = Source(str(path), strict=False)
    sections = {**base.sections, "broker": {**(base.broker or {}), **values}}
    sources = {**base.sources, "broker": {**base.sources.get("broker", {}), **{key: source for key in values}}}
    return attrs.evolve(base, file=str(path), sections=sections, sources=sources)
