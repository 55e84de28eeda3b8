"""JSON bodies the way Java's fastjson writes and reads them (spec 4 and 4.6).

Reader (``loads``): standard JSON goes through ``json`` (C speed); anything ``json`` rejects is re-read by a tolerant
parser that accepts fastjson's quirks:

* bare numeric map keys ``{0:"a"}`` -> key ``"0"`` (the same dict as the quoted ``{"0":"a"}``);
* object-valued keys ``{{"brokerName":"b","queueId":0,"topic":"t"}:12}`` -> an ``ObjectKey`` (hashable, read-only
  mapping; ``key["topic"]``);
* single-quoted strings and bare identifier keys.

Emitter (``dumps`` -> bytes for a body, ``dumps_text`` -> str): compact, map keys sorted. ``style="standard"``
quotes every key and escapes non-ASCII (fastjson ``BrowserCompatible|QuoteFieldNames|MapSortField``, what 4.9.4+
clients ask for); ``style="fastjson"`` writes integer keys bare like Java's default (``{0:"10.0.0.5:10911"}``).
``ObjectKey`` keys are written as object literals in both styles, as fastjson does. Pick the route-data style with ``route_json_style`` (spec 1.7 / 4.1).
"""

from __future__ import annotations

import json
import json.decoder
import re
from collections.abc import Callable, Hashable, Iterator, Mapping
from json.encoder import encode_basestring as _esc, encode_basestring_ascii as _esc_ascii
from typing import Any, cast

from .codes import MQVersion

__all__ = ["loads", "dumps", "dumps_text", "ObjectKey", "FastjsonDecodeError", "route_json_style",
           "STANDARD", "FASTJSON"]

STANDARD = "standard"
FASTJSON = "fastjson"

_MAX_DEPTH = 200

# (text, index after the opening quote, strict) -> (the string, index after the closing quote): json's C scanner,
# missing from typeshed
_scanstring: Callable[[str, int, bool], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]


class FastjsonDecodeError(ValueError):
    def __init__(self, msg: str, pos: int) -> None:
        super().__init__(f"{msg} at offset {pos}")
        self.pos = pos


class ObjectKey(Mapping[Hashable, object]):
    """A JSON object used as a map key (fastjson's ``Map<MessageQueue, Long>``): hashable and read-only. Its keys
    are strings, except in the rare object read from fastjson text whose own keys are objects or arrays."""

    __slots__ = ("_items", "_hash")

    def __init__(self, mapping: Mapping[str, object] | Mapping[Hashable, object] | None = None, **kw: object) -> None:
        d = dict(cast("Mapping[Hashable, object]", mapping or ()), **kw)  # str keys are Hashable keys
        self._items = tuple(sorted(((k, _freeze(v)) for k, v in d.items()), key=_item_order))
        self._hash = hash(self._items)

    def __getitem__(self, key: Hashable) -> object:
        for k, v in self._items:
            if k == key:
                return v
        raise KeyError(key)

    def __iter__(self) -> Iterator[Hashable]:
        return (k for k, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ObjectKey):
            return self._items == other._items
        return NotImplemented

    def __repr__(self) -> str:
        return f"ObjectKey({dict(self._items)!r})"


def _item_order(item: tuple[Hashable, object]) -> tuple[int, str, str]:
    """A canonical order for an ObjectKey's items whatever the key types (fastjson allows object keys in objects
    used as keys; comparing them with strings would raise TypeError)."""
    k = item[0]
    return (0, k, "") if isinstance(k, str) else (1, type(k).__name__, repr(k))


def _freeze(v: object) -> object:
    if isinstance(v, dict):
        return ObjectKey(v)
    if isinstance(v, list):
        return tuple(_freeze(x) for x in v)
    return v


def route_json_style(version: int, accept_standard_json_only: bool = False) -> str:
    """The name server's rule for GET_ROUTEINFO_BY_TOPIC bodies (spec 1.7): standard from 4.9.4 (401) on."""
    return STANDARD if accept_standard_json_only or version >= MQVersion.V4_9_4 else FASTJSON


# ---- reader -------------------------------------------------------------------------------------------------------

_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_IDENT = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_SINGLE = re.compile(r"'((?:[^'\\]|\\.)*)'", re.S)
_SINGLE_ESC = re.compile(r'\\(.)|"', re.S)


def loads(data: str | bytes | bytearray | memoryview) -> Any:  # type: ignore[explicit-any]  # see below
    """Parse standard or fastjson-flavoured JSON. Raises ``FastjsonDecodeError`` (a ValueError).

    Returns whatever the text holds (``Any``, like ``json.loads``): the caller checks the shape it expects."""
    if not isinstance(data, str):
        try:
            data = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FastjsonDecodeError(f"invalid UTF-8: {exc.reason}", exc.start) from None
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        pass
    try:
        return _Parser(data).parse()
    except RecursionError:
        raise FastjsonDecodeError("nesting too deep", 0) from None


class _Parser:
    def __init__(self, text: str) -> None:
        self.s = text
        self.depth = 0

    def fail(self, msg: str, pos: int) -> FastjsonDecodeError:
        return FastjsonDecodeError(msg, pos)

    def ws(self, pos: int) -> int:
        return _WS.match(self.s, pos).end()  # type: ignore[union-attr]

    def parse(self) -> object:
        value, pos = self.value(self.ws(0))
        pos = self.ws(pos)
        if pos != len(self.s):
            raise self.fail("trailing data", pos)
        return value

    def value(self, pos: int) -> tuple[object, int]:
        s = self.s
        if pos >= len(s):
            raise self.fail("unexpected end of input", pos)
        c = s[pos]
        if c == "{":
            return self.obj(pos)
        if c == "[":
            return self.arr(pos)
        if c == '"' or c == "'":
            return self.string(pos)
        m = _NUMBER.match(s, pos)
        if m:
            text = m.group()
            return (float(text) if m.group(1) or m.group(2) else int(text)), m.end()
        for lit, val in (("true", True), ("false", False), ("null", None)):
            if s.startswith(lit, pos):
                return val, pos + len(lit)
        raise self.fail(f"unexpected character {c!r}", pos)

    def string(self, pos: int) -> tuple[str, int]:
        s = self.s
        try:
            if s[pos] == '"':
                return _scanstring(s, pos + 1, False)
            m = _SINGLE.match(s, pos)
            if not m:
                raise self.fail("unterminated single-quoted string", pos)
            # Re-express the body as a double-quoted JSON string and let json unescape it.
            body = _SINGLE_ESC.sub(lambda e: '\\"' if e.group() == '"' else
                                   ("'" if e.group(1) == "'" else e.group()), m.group(1))
            return _scanstring(f'"{body}"', 1, False)[0], m.end()
        except json.JSONDecodeError as exc:
            raise self.fail(f"bad string: {exc.msg}", pos) from None

    def enter(self, pos: int) -> None:
        self.depth += 1
        if self.depth > _MAX_DEPTH:
            raise self.fail("nesting too deep", pos)

    def key(self, pos: int) -> tuple[Hashable, int]:
        s = self.s
        c = s[pos] if pos < len(s) else ""
        if c == '"' or c == "'":
            return self.string(pos)
        if c == "{":
            obj, end = self.obj(pos)
            return ObjectKey(obj), end
        if c == "[":
            arr, end = self.arr(pos)
            return _freeze(arr), end
        m = _NUMBER.match(s, pos) or _IDENT.match(s, pos)
        if m:
            return m.group(), m.end()  # bare 0 -> "0": same dict as the quoted spelling
        raise self.fail("expected a map key", pos)

    def obj(self, pos: int) -> tuple[dict[Hashable, object], int]:
        self.enter(pos)
        s = self.s
        out: dict[Hashable, object] = {}
        pos = self.ws(pos + 1)
        if pos < len(s) and s[pos] == "}":
            self.depth -= 1
            return out, pos + 1
        while True:
            k, pos = self.key(pos)
            pos = self.ws(pos)
            if pos >= len(s) or s[pos] != ":":
                raise self.fail("expected ':'", pos)
            v, pos = self.value(self.ws(pos + 1))
            out[k] = v
            pos = self.ws(pos)
            if pos < len(s) and s[pos] == ",":
                pos = self.ws(pos + 1)
                continue
            if pos < len(s) and s[pos] == "}":
                self.depth -= 1
                return out, pos + 1
            raise self.fail("expected ',' or '}'", pos)

    def arr(self, pos: int) -> tuple[list[object], int]:
        self.enter(pos)
        s = self.s
        out: list[object] = []
        pos = self.ws(pos + 1)
        if pos < len(s) and s[pos] == "]":
            self.depth -= 1
            return out, pos + 1
        while True:
            v, pos = self.value(pos)
            out.append(v)
            pos = self.ws(pos)
            if pos < len(s) and s[pos] == ",":
                pos = self.ws(pos + 1)
                continue
            if pos < len(s) and s[pos] == "]":
                self.depth -= 1
                return out, pos + 1
            raise self.fail("expected ',' or ']'", pos)


# ---- emitter ------------------------------------------------------------------------------------------------------

def _sort_key(k: object) -> tuple[int, int | str]:
    if isinstance(k, bool):
        return (2, str(k).lower())
    if isinstance(k, int):
        return (0, k)
    if isinstance(k, str):
        return (1, k)
    if isinstance(k, ObjectKey):
        return (3, repr(k._items))
    return (4, str(k))


def dumps_text(obj: object, *, style: str | None = None, standard: bool | None = None, sort_keys: bool = True) -> str:
    """Compact JSON text of dicts/lists/scalars (and ``ObjectKey`` keys); see the module doc for ``style``.

    ``standard=True/False`` is shorthand for ``style="standard"/"fastjson"``.
    """
    if style is None:
        style = FASTJSON if standard is False else STANDARD
    if style not in (STANDARD, FASTJSON):
        raise ValueError(f"style must be {STANDARD!r} or {FASTJSON!r}, not {style!r}")
    out: list[str] = []
    _emit(obj, out, style == FASTJSON, sort_keys, 0)
    return "".join(out)


def dumps(obj: object, *, style: str | None = None, standard: bool | None = None, sort_keys: bool = True) -> bytes:
    """``dumps_text`` encoded as UTF-8: ready to be a command body."""
    return dumps_text(obj, style=style, standard=standard, sort_keys=sort_keys).encode("utf-8")


def _emit(v: object, out: list[str], bare: bool, sort_keys: bool, depth: int) -> None:
    if depth > _MAX_DEPTH:
        raise ValueError("structure nested too deep")
    esc = _esc if bare else _esc_ascii
    if isinstance(v, str):
        out.append(esc(v))
    elif v is None:
        out.append("null")
    elif v is True:
        out.append("true")
    elif v is False:
        out.append("false")
    elif isinstance(v, int):
        out.append(int.__repr__(v))
    elif isinstance(v, float):
        out.append(json.dumps(v))
    elif isinstance(v, Mapping):
        items = list(v.items())
        if sort_keys:
            items.sort(key=lambda kv: _sort_key(kv[0]))
        out.append("{")
        first = True
        for k, val in items:
            if not first:
                out.append(",")
            first = False
            if isinstance(k, str):
                out.append(esc(k))
            elif isinstance(k, ObjectKey):
                _emit(dict(k._items), out, bare, sort_keys, depth + 1)
            elif isinstance(k, bool):
                out.append('"true"' if k else '"false"')
            elif isinstance(k, int):
                out.append(int.__repr__(k) if bare else f'"{int.__repr__(k)}"')
            else:
                out.append(esc(str(k)))
            out.append(":")
            _emit(val, out, bare, sort_keys, depth + 1)
        out.append("}")
    elif isinstance(v, (list, tuple, set, frozenset)):
        out.append("[")
        first = True
        for item in v:
            if not first:
                out.append(",")
            first = False
            _emit(item, out, bare, sort_keys, depth + 1)
        out.append("]")
    else:
        raise TypeError(f"cannot write {type(v).__name__} as JSON")
