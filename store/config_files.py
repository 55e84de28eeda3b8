"""The broker's JSON config files under ``<store root>/config`` (spec 6.1, 6.6), in RocketMQ's shapes.

Written like Java's ``MixAll.string2File``: new content to ``<file>.tmp`` (fsynced), the old file copied to
``<file>.bak``, then the tmp renamed over the file and the directory fsynced. Loading falls back to ``.bak`` when the
file is missing or unparsable. The reader tolerates fastjson's output (spec 4.6): bare numeric keys
(``{0:12,1:40}``), object keys, single-quoted strings, unquoted identifier keys; the writer uses fastjson's pretty
format (tab indentation) and writes integer map keys bare, as the Java broker does for ``consumerOffset.json`` and
``delayOffset.json``.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
from collections.abc import Hashable, Mapping
from typing import cast

from .checkpoint import _fsync_dir
from .errors import ConfigFileError

log = logging.getLogger(__name__)

TOPICS_JSON = "topics.json"
CONSUMER_OFFSET_JSON = "consumerOffset.json"
DELAY_OFFSET_JSON = "delayOffset.json"
SUBSCRIPTION_GROUP_JSON = "subscriptionGroup.json"
CONSUMER_FILTER_JSON = "consumerFilter.json"

# ---------------------------------------------------------------------------------------------------------------
# fastjson-tolerant reader
# ---------------------------------------------------------------------------------------------------------------

_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?")
_IDENT = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_WS = " \t\n\r"


class _Parser:
    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0

    def error(self, msg: str) -> ValueError:
        line = self.s.count("\n", 0, self.i) + 1
        return ValueError(f"{msg} at line {line}, position {self.i}")

    def ws(self) -> None:
        s, i, n = self.s, self.i, len(self.s)
        while i < n and s[i] in _WS:
            i += 1
        self.i = i

    def value(self) -> object:
        self.ws()
        if self.i >= len(self.s):
            raise self.error("unexpected end of input")
        c = self.s[self.i]
        if c == "{":
            return self.obj()
        if c == "[":
            return self.arr()
        if c == '"' or c == "'":
            return self.string()
        m = _NUMBER.match(self.s, self.i)
        if m:
            self.i = m.end()
            text = m.group()
            return float(text) if any(ch in text for ch in ".eE") else int(text)
        m = _IDENT.match(self.s, self.i)
        if m:
            self.i = m.end()
            word = m.group()
            if word in ("true", "false", "null"):
                return {"true": True, "false": False, "null": None}[word]
            return word
        raise self.error(f"unexpected character {c!r}")

    def string(self) -> str:
        quote = self.s[self.i]
        if quote == '"':
            value: str
            value, self.i = json.decoder.scanstring(self.s, self.i + 1)  # type: ignore[attr-defined]  # not in typeshed
            return value
        # single-quoted: translate to a double-quoted JSON string
        j = self.i + 1
        out = []
        while j < len(self.s) and self.s[j] != "'":
            if self.s[j] == "\\":
                out.append(self.s[j : j + 2])
                j += 2
                continue
            out.append('\\"' if self.s[j] == '"' else self.s[j])
            j += 1
        if j >= len(self.s):
            raise self.error("unterminated string")
        self.i = j + 1
        text: str = json.loads('"' + "".join(out).replace("\\'", "'") + '"')
        return text

    def key(self) -> Hashable:
        self.ws()
        c = self.s[self.i] if self.i < len(self.s) else ""
        if c == "{":
            # fastjson object key (e.g. a MessageQueue): a hashable tuple of its sorted items
            items = self.obj().items()
            try:
                key: Hashable = tuple(sorted(items))
                hash(key)
            except TypeError:  # keys of mixed types, or array values: no MessageQueue looks like that
                raise self.error("object used as a key holds arrays or mixed key types") from None
            return key
        key = self.value()
        if isinstance(key, (list, dict)):
            raise self.error("an array or object cannot be a key here")
        return key

    def obj(self) -> dict[Hashable, object]:
        self.i += 1
        out: dict[Hashable, object] = {}
        self.ws()
        if self.s.startswith("}", self.i):
            self.i += 1
            return out
        while True:
            k = self.key()
            self.ws()
            if not self.s.startswith(":", self.i):
                raise self.error("expected ':'")
            self.i += 1
            out[k] = self.value()
            self.ws()
            if self.s.startswith(",", self.i):
                self.i += 1
                self.ws()
                if self.s.startswith("}", self.i):  # trailing comma
                    self.i += 1
                    return out
                continue
            if self.s.startswith("}", self.i):
                self.i += 1
                return out
            raise self.error("expected ',' or '}'")

    def arr(self) -> list[object]:
        self.i += 1
        out: list[object] = []
        self.ws()
        if self.s.startswith("]", self.i):
            self.i += 1
            return out
        while True:
            out.append(self.value())
            self.ws()
            if self.s.startswith(",", self.i):
                self.i += 1
                continue
            if self.s.startswith("]", self.i):
                self.i += 1
                return out
            raise self.error("expected ',' or ']'")


def fastjson_loads(text: str) -> object:
    """Parse JSON as fastjson writes it (bare numeric keys become ``int``)."""
    p = _Parser(text)
    value = p.value()
    p.ws()
    if p.i != len(p.s):
        raise p.error("trailing data")
    return value


def fastjson_dumps(value: object, *, pretty: bool = True) -> str:
    """Serialise like fastjson: ``int`` map keys bare, tab-indented when ``pretty``."""
    out: list[str] = []
    _dump(value, out, 0 if pretty else None)
    return "".join(out)


def _dump(v: object, out: list[str], level: int | None) -> None:
    if isinstance(v, dict):
        if not v:
            out.append("{}")
            return
        out.append("{")
        first = True
        for k, item in v.items():
            if not first:
                out.append(",")
            first = False
            if level is not None:
                out.append("\n" + "\t" * (level + 1))
            if isinstance(k, bool) or not isinstance(k, int):
                out.append(json.dumps(str(k) if not isinstance(k, str) else k, ensure_ascii=False))
            else:
                out.append(str(k))
            out.append(":")
            _dump(item, out, None if level is None else level + 1)
        if level is not None:
            out.append("\n" + "\t" * level)
        out.append("}")
    elif isinstance(v, (list, tuple)):
        if not v:
            out.append("[]")
            return
        out.append("[")
        for n, item in enumerate(v):
            if n:
                out.append(",")
            if level is not None:
                out.append("\n" + "\t" * (level + 1))
            _dump(item, out, None if level is None else level + 1)
        if level is not None:
            out.append("\n" + "\t" * level)
        out.append("]")
    else:
        out.append(json.dumps(v, ensure_ascii=False))


# ---------------------------------------------------------------------------------------------------------------
# atomic files
# ---------------------------------------------------------------------------------------------------------------


def write_atomically(path: str, text: str) -> None:
    """``MixAll.string2File``: tmp + fsync, old content to ``.bak``, rename, fsync the directory."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    tmp = path + ".tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        if os.path.isfile(tmp):  # no half-written temporary file left behind
            os.unlink(tmp)
        raise
    if os.path.exists(path):
        bak = path + ".bak"
        shutil.copyfile(path, bak + ".tmp")
        with open(bak + ".tmp", "rb+") as f:
            os.fsync(f.fileno())
        os.replace(bak + ".tmp", bak)
    os.replace(tmp, path)
    _fsync_dir(directory)


class ConfigFile:
    """One config JSON file; ``load()`` returns the parsed content (from ``.bak`` if need be) or None."""

    def __init__(self, path: str) -> None:
        self.path = path
        #: which file the last load() used ("" when neither existed)
        self.loaded_from = ""

    def load(self) -> dict[str, object] | None:
        errors = []
        for candidate in (self.path, self.path + ".bak"):
            try:
                with open(candidate, encoding="utf-8") as f:
                    text = f.read()
            except FileNotFoundError:
                continue
            except UnicodeDecodeError as exc:  # torn or bit-flipped bytes: not UTF-8 any more
                errors.append(f"{candidate}: not UTF-8 ({exc.reason} at byte {exc.start})")
                continue
            if not text.strip():
                errors.append(f"{candidate}: empty")
                continue
            try:
                value = fastjson_loads(text)
            except ValueError as exc:
                errors.append(f"{candidate}: {exc}")
                continue
            if not isinstance(value, dict):  # every RocketMQ config file is one JSON object
                errors.append(f"{candidate}: a JSON {type(value).__name__}, not an object")
                continue
            if errors:
                log.warning("config %s is unreadable (%s); loaded %s instead", self.path, "; ".join(errors), candidate)
            self.loaded_from = candidate
            return value
        self.loaded_from = ""
        if errors:
            raise ConfigFileError(self.path, "; ".join(errors))
        return None

    def save(self, value: object) -> bool:
        """Write the file; False when the disk refused (logged, the old file and its .bak intact). Like RocketMQ's
        ``ConfigManager.persist``, a failed save never fails the request that changed the table: on a full disk a
        consumer's heartbeat or pull must go on."""
        try:
            write_atomically(self.path, fastjson_dumps(value))
        except OSError as exc:
            log.error("config %s not saved: %s", self.path, exc)
            return False
        return True


def data_version(counter: int = 0, timestamp: int | None = None) -> dict[str, int]:
    """RocketMQ ``DataVersion`` shape."""
    return {"counter": counter, "timestamp": int(time.time() * 1000) if timestamp is None else timestamp}


class TopicsFile(ConfigFile):
    """``topics.json``: ``{"dataVersion": {...}, "topicConfigTable": {"<topic>": {TopicConfig}}}``."""

    def load_table(self) -> tuple[dict[str, dict[str, object]], dict[str, object]]:
        value = self.load() or {}
        return (
            dict(cast("dict[str, dict[str, object]]", value.get("topicConfigTable") or {})),
            dict(cast("dict[str, object]", value.get("dataVersion") or data_version())),
        )

    def save_table(self, table: dict[str, dict[str, object]], version: Mapping[str, object]) -> None:
        self.save({"dataVersion": version, "topicConfigTable": table})


class SubscriptionGroupFile(ConfigFile):
    """``subscriptionGroup.json``: ``{"dataVersion": {...}, "subscriptionGroupTable": {"<group>": {...}}}``."""

    def load_table(self) -> tuple[dict[str, dict[str, object]], dict[str, object]]:
        value = self.load() or {}
        return (
            dict(cast("dict[str, dict[str, object]]", value.get("subscriptionGroupTable") or {})),
            dict(cast("dict[str, object]", value.get("dataVersion") or data_version())),
        )

    def save_table(self, table: dict[str, dict[str, object]], version: Mapping[str, object]) -> None:
        self.save({"dataVersion": version, "subscriptionGroupTable": table})


#: a table of numbers read from JSON: keys bare (int) or quoted (str), values numbers (or their text)
_NumberTable = Mapping[int | str, int | str]


def _int_keys(d: _NumberTable) -> dict[int, int]:
    return {int(k): int(v) for k, v in (d or {}).items()}


class ConsumerOffsetFile(ConfigFile):
    """``consumerOffset.json``: ``{"offsetTable": {"<topic>@<group>": {<queueId>: <offset>}}}``, bare int keys."""

    def load_table(self) -> dict[str, dict[int, int]]:
        value = self.load() or {}
        table = cast("dict[str, _NumberTable]", value.get("offsetTable") or {})
        return {str(k): _int_keys(v) for k, v in table.items()}

    def save_table(self, table: dict[str, dict[int, int]]) -> None:
        self.save({"offsetTable": {k: {int(q): int(o) for q, o in v.items()} for k, v in table.items()}})


class DelayOffsetFile(ConfigFile):
    """``delayOffset.json``: ``{"offsetTable": {<delayLevel>: <consumeQueueOffset>}}``, bare int keys."""

    def load_table(self) -> dict[int, int]:
        value = self.load() or {}
        return _int_keys(cast(_NumberTable, value.get("offsetTable") or {}))

    def save_table(self, table: dict[int, int]) -> None:
        self.save({"offsetTable": {int(k): int(v) for k, v in table.items()}})


def config_path(store_root: str, name: str) -> str:
    return os.path.join(store_root, "config", name)
