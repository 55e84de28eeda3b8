"""``RemotingCommand``: one request or response, and its JSON / ROCKETMQ header codecs (spec 1.2-1.7). No IO.

Frame (spec 1.2)::

    +----------------+------------------------+----------------------+----------------+
    | int32 totalLen | int32 headerLenAndType | header (headerLen B) | body (rest)    |
    +----------------+------------------------+----------------------+----------------+
    totalLen = 4 + headerLen + bodyLen; headerLenAndType = serializeType << 24 | headerLen

This module is on every request's path, so the JSON header is written with one f-string (fields in Java's
alphabetical order, nulls omitted) instead of ``json.dumps``, and read with the C scanner of ``json`` directly.
"""

from __future__ import annotations

import itertools
import json
import re
import struct
from collections.abc import Callable, Sequence
from json.encoder import encode_basestring as _esc  # the C version: quotes and escapes, keeps non-ASCII
from typing import TypeVar, Union, cast

import attrs

from .codes import CURRENT_VERSION, LANGUAGE_BY_NAME, LANGUAGE_NAMES, RPC_ONEWAY, RPC_RESPONSE
from .errors import ProtocolError

__all__ = ["RemotingCommand", "Body", "Buffer", "MAX_FRAME_SIZE", "FRAME_PREFIX", "ext_value_text", "body_length",
           "json_text"]

# A body is bytes-like, or a sequence of bytes-like pieces written one after the other without joining
# (a pull response is the concatenation of stored records).
Buffer = Union[bytes, bytearray, memoryview]
Body = Union[bytes, bytearray, memoryview, Sequence[Buffer]]

_V = TypeVar("_V")

MAX_FRAME_SIZE = 16 * 1024 * 1024  # Java's com.rocketmq.remoting.frameMaxLength default (spec 1.2)

# totalLen, headerLenAndType
FRAME_PREFIX = struct.Struct(">II")
assert FRAME_PREFIX.size == 8

# ROCKETMQ binary header, fixed part (spec 1.4):
# +-----------+---------------+--------------+-------------+-----------+----------------+
# | code (h)  | language (B)  | version (h)  | opaque (i)  | flag (i)  | remarkLen (i)  |  = 17 bytes
# +-----------+---------------+--------------+-------------+-----------+----------------+
# then remark, int32 extLen, extLen bytes of (int16 keyLen, key, int32 valLen, value)*
_BIN_FIXED = struct.Struct(">hBhiii")
assert _BIN_FIXED.size == 17
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")

# Bodies up to this size are copied into the same buffer as the header (one small allocation beats an extra
# iovec); bigger ones are handed to the socket as separate buffers.
_JOIN_LIMIT = 64 * 1024

_opaque_counter = itertools.count(1)


def next_opaque() -> int:
    """Process-wide request id, kept within a Java int (Go unmarshals ``opaque`` into an int32)."""
    return next(_opaque_counter) & 0x7FFFFFFF


def json_text(value: object) -> str:
    """``value``'s extFields text (:func:`ext_value_text`) as a JSON string literal, as the JSON encoder writes it:
    for templates that fill :attr:`RemotingCommand.ext_json`."""
    return _esc(ext_value_text(value))


def ext_value_text(value: object) -> str:
    """fastjson's coercion of an extFields value to text (spec 1.6): numbers -> decimal, booleans -> true/false."""
    if type(value) is str:
        return value
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return str(value)


def body_length(body: Body) -> int:
    if isinstance(body, (bytes, bytearray)):
        return len(body)
    if isinstance(body, memoryview):
        return body.nbytes
    if isinstance(body, str):
        return len(body.encode())
    return sum(len(b) if isinstance(b, (bytes, bytearray)) else memoryview(b).nbytes for b in body)


_LANG_JSON = {name: f'"{name}"' for name in LANGUAGE_BY_NAME}


@attrs.define(slots=True, repr=False, eq=True)
class RemotingCommand:
    """One remoting frame. Mutable and cheap: created per request on the hot path.

    ``code`` is a request code (request) or response code (response). ``language`` is the LanguageCode *name*.
    ``ext_fields`` holds the custom header as text (decoded values are always ``str``; a command built here may hold
    other values, :meth:`request` and :meth:`make_response` take any, and encoding coerces non-text values by the
    fastjson rule). ``serialize_type`` is 0 (JSON) or 1 (ROCKETMQ); a response uses its request's.
    """

    code: int
    language: str = "PYTHON"
    version: int = CURRENT_VERSION
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: dict[str, str] = attrs.Factory(dict)
    body: Body = b""
    serialize_type: int = 0
    #: ``ext_fields`` already written as JSON object members (``"k":"v",...``, in ``ext_fields``' order, None values
    #: left out): what the JSON encoder writes instead of walking the dict. Set by a hot-path processor that renders
    #: its response from a template (the send response); ``ext_fields`` must hold the same fields, which the
    #: ROCKETMQ encoder and every reader use. Not part of equality.
    ext_json: str | None = attrs.field(default=None, eq=False)

    # ---- construction helpers -------------------------------------------------------------------------------

    @classmethod
    def request(
        cls,
        code: int,
        ext_fields: dict[str, _V] | None = None,
        body: Body = b"",
        oneway: bool = False,
        *,
        remark: str | None = None,
        serialize_type: int = 0,
    ) -> RemotingCommand:
        """A new request with a fresh opaque. ``ext_fields`` is used as given (not copied)."""
        return cls(
            code,
            "PYTHON",
            CURRENT_VERSION,
            next_opaque(),
            RPC_ONEWAY if oneway else 0,
            remark,
            {} if ext_fields is None else ext_fields,  # type: ignore[arg-type]  # values made text when encoded
            body,
            serialize_type,
        )

    def make_response(
        self,
        code: int = 0,
        remark: str | None = None,
        ext_fields: dict[str, _V] | None = None,
        body: Body = b"",
    ) -> RemotingCommand:
        """The response to this request: same opaque and serialize type, response flag set, language JAVA."""
        return RemotingCommand(
            code,
            "JAVA",
            CURRENT_VERSION,
            self.opaque,
            RPC_RESPONSE,
            remark,
            {} if ext_fields is None else ext_fields,  # type: ignore[arg-type]  # values made text when encoded
            body,
            self.serialize_type,
        )

    @property
    def is_response(self) -> bool:
        return bool(self.flag & RPC_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & RPC_ONEWAY)

    def mark_oneway(self) -> RemotingCommand:
        self.flag |= RPC_ONEWAY
        return self

    def body_bytes(self) -> bytes:
        """The body as one ``bytes`` (joins a list body)."""
        body = self.body
        if type(body) is bytes:
            return body
        if isinstance(body, (bytearray, memoryview)):
            return bytes(body)
        return b"".join(cast("Sequence[Buffer]", body))  # bytes was returned above

    def __repr__(self) -> str:
        n = body_length(self.body)
        kind = "response" if self.flag & RPC_RESPONSE else "request"
        extra = f" remark={self.remark!r}" if self.remark is not None else ""
        return (
            f"<RemotingCommand {kind} code={int(self.code)} opaque={self.opaque} flag={self.flag}"
            f" lang={self.language} v={self.version} ser={self.serialize_type}{extra}"
            f" ext={self.ext_fields!r} body={n}B>"
        )

    # ---- encoding -------------------------------------------------------------------------------------------

    def encode_header(self) -> bytes:
        if self.serialize_type == 1:
            return self._rocketmq_header()
        return self._json_header()

    def _json_header(self) -> bytes:
        lang = _LANG_JSON.get(self.language) or _esc(ext_value_text(self.language))
        ext_s = self.ext_json
        if ext_s is None and self.ext_fields:
            ext_s = ",".join([f"{_esc(k)}:{_esc(v if type(v) is str else ext_value_text(v))}"
                              for k, v in self.ext_fields.items() if v is not None])
        if ext_s is not None:
            head = (f'{{"code":{self.code:d},"extFields":{{{ext_s}}},"flag":{self.flag:d},'
                    f'"language":{lang},"opaque":{self.opaque:d}')
        else:
            head = f'{{"code":{self.code:d},"flag":{self.flag:d},"language":{lang},"opaque":{self.opaque:d}'
        remark = self.remark
        if remark is not None:
            head = f'{head},"remark":{_esc(remark)}'
        return f'{head},"serializeTypeCurrentRPC":"JSON","version":{self.version:d}}}'.encode()

    def _rocketmq_header(self) -> bytes:
        remark = self.remark.encode() if self.remark else b""
        parts = []
        for k, v in self.ext_fields.items():
            if k is None or v is None:
                continue
            kb = k.encode()
            vb = ext_value_text(v).encode()
            parts.append(_I16.pack(len(kb)))
            parts.append(kb)
            parts.append(_I32.pack(len(vb)))
            parts.append(vb)
        ext = b"".join(parts)
        lang = LANGUAGE_BY_NAME.get(self.language, 7)  # unknown -> OTHER
        try:
            fixed = _BIN_FIXED.pack(self.code, lang, self.version, self.opaque, self.flag, len(remark))
        except struct.error as exc:
            raise ProtocolError(f"field out of range for a ROCKETMQ header: {exc}") from None
        return b"".join((fixed, remark, _I32.pack(len(ext)), ext))

    def encode_into(self, out: list[Buffer]) -> int:
        """Append the frame to ``out`` as one or more buffers (a big or list body is not copied); return its size."""
        header = self._rocketmq_header() if self.serialize_type == 1 else self._json_header()
        hl = len(header)
        if hl > 0xFFFFFF:
            raise ProtocolError(f"header of {hl} bytes exceeds the 24-bit header length")
        body = self.body
        if type(body) is bytes or type(body) is bytearray:
            bl = len(body)
            prefix = FRAME_PREFIX.pack(4 + hl + bl, (self.serialize_type << 24) | hl)
            if bl <= _JOIN_LIMIT:
                out.append(b"".join((prefix, header, body)))
            else:
                out.append(prefix + header)
                out.append(body)
            return 8 + hl + bl
        if isinstance(body, memoryview):
            bl = body.nbytes
            out.append(FRAME_PREFIX.pack(4 + hl + bl, (self.serialize_type << 24) | hl) + header)
            if bl:
                out.append(body)
            return 8 + hl + bl
        if isinstance(body, str):  # lenient: a text body is sent as UTF-8
            body = body.encode()
            out.append(FRAME_PREFIX.pack(4 + hl + len(body), (self.serialize_type << 24) | hl) + header + body)
            return 8 + hl + len(body)
        # a list body (a pull answer: one view per message): sized and queued in one pass
        pieces: list[Buffer] = []
        bl = 0
        p: Buffer
        for p in body:  # type: ignore[assignment]  # not bytes or bytearray: those were written above
            n = p.nbytes if type(p) is memoryview else len(p) if type(p) is bytes else body_length([p])
            if n:
                bl += n
                pieces.append(p)
        out.append(FRAME_PREFIX.pack(4 + hl + bl, (self.serialize_type << 24) | hl) + header)
        out.extend(pieces)
        return 8 + hl + bl

    def encode(self) -> bytes:
        """The whole frame (4-byte length included) as one ``bytes``."""
        out: list[Buffer] = []
        self.encode_into(out)
        # a lone buffer is always the bytes encode_into joined (a body of its own makes a second one)
        return cast(bytes, out[0]) if len(out) == 1 else b"".join(out)

    # ---- decoding -------------------------------------------------------------------------------------------

    @classmethod
    def decode(cls, frame: bytes | bytearray | memoryview) -> RemotingCommand:
        """Decode exactly one frame, 4-byte length prefix included."""
        frame = bytes(frame)
        if len(frame) < 8:
            raise ProtocolError(f"frame of {len(frame)} bytes is shorter than its 8-byte prefix")
        total, word = FRAME_PREFIX.unpack_from(frame, 0)
        if total + 4 != len(frame):
            raise ProtocolError(f"length field says {total} + 4 bytes, frame has {len(frame)}")
        hl = word & 0xFFFFFF
        if hl > total - 4:
            raise ProtocolError(f"header length {hl} exceeds frame length {total}")
        return decode_parts(word >> 24, frame[8:8 + hl], frame[8 + hl:])


# ---- header decoders (used by framing.FrameDecoder too) -------------------------------------------------------

class _JsonFloat(str):
    """A JSON number with a fraction or an exponent, kept as its text ("1.50" stays "1.50" in extFields) but told
    apart from a JSON string where fastjson reads them differently (:func:`_header_int`)."""

    __slots__ = ()


# (scan_once, the C scanner, is missing from typeshed's JSONDecoder)
_scan: Callable[[str, int], tuple[object, int]]
_scan = json.JSONDecoder(parse_float=_JsonFloat).scan_once  # type: ignore[attr-defined]
_TRAILING_ZEROS = re.compile(r"\.0+$")


def _header_int(value: object, name: str) -> int:
    """A JSON header's ``code`` / ``opaque`` / ``flag`` / ``version`` that is not a JSON integer, read as RocketMQ's
    fastjson reads it into an ``int`` field: absent or null -> 0, a boolean -> 1 or 0, a number with a fraction ->
    truncated, text -> its number (``"310"``, ``"+310"``, ``"310.00"``, ``"1,000"``; ``""`` / ``"null"`` -> 0);
    anything else (``" 310"``, ``"3_10"``, ``"310.7"``, an object, out of the int range) is a ProtocolError, on
    which fastjson fails too and the Java broker closes the connection."""
    if value is None:
        return 0
    if value is True or value is False:
        return int(value)
    number: int | None = None
    if type(value) is _JsonFloat:
        try:
            number = int(float(value))
        except (ValueError, OverflowError):
            number = None
    elif type(value) is str:
        text = value.replace(",", "")
        if text in ("", "null", "NULL"):
            return 0
        text = _TRAILING_ZEROS.sub("", text)
        digits = text[1:] if text[:1] in ("-", "+") else text
        number = int(text) if digits.isdecimal() else None
    elif type(value) is int:
        number = value
    if number is None or not -0x80000000 <= number <= 0x7FFFFFFF:
        raise ProtocolError(f"JSON header {name} is not an integer: {value!r:.50}")
    return number


def _coerce_ext(ext: dict[str, object]) -> dict[str, str]:
    return {str(k): ext_value_text(v) for k, v in ext.items() if v is not None}


def decode_parts(serialize_type: int, header: bytes, body: bytes) -> RemotingCommand:
    if serialize_type == 0:
        return _decode_json(header, body)
    if serialize_type == 1:
        return _decode_rocketmq(header, body)
    raise ProtocolError(f"unknown serialize type {serialize_type}")


def _decode_json(header: bytes, body: bytes) -> RemotingCommand:
    try:
        text = header.decode()
        try:
            h, end = _scan(text, 0)
        except StopIteration:
            text = text.strip()
            h, end = _scan(text, 0)
    except (UnicodeDecodeError, ValueError, StopIteration, RecursionError) as exc:
        raise ProtocolError(f"invalid JSON header: {exc!s:.200}") from None
    # cpp's jsoncpp FastWriter appends "\n" (spec 1.6); anything but whitespace after the object is an error.
    if end != len(text) and not text[end:].isspace():
        raise ProtocolError("trailing data after the JSON header")
    if type(h) is not dict:
        raise ProtocolError("JSON header is not an object")
    code = h.get("code")
    if type(code) is not int:
        code = _header_int(code, "code")
    language = h.get("language", "JAVA")
    version = h.get("version", 0)
    opaque = h.get("opaque", 0)
    flag = h.get("flag", 0)
    if type(version) is not int or type(opaque) is not int or type(flag) is not int:
        version = version if type(version) is int else _header_int(version, "version")
        opaque = opaque if type(opaque) is int else _header_int(opaque, "opaque")
        flag = flag if type(flag) is int else _header_int(flag, "flag")
    if type(language) is not str:
        language = LANGUAGE_NAMES.get(language, "OTHER") if type(language) is int else "OTHER"
    remark = h.get("remark")
    if remark is not None and type(remark) is not str:
        remark = ext_value_text(remark)
    ext = h.get("extFields")
    if ext is not None:
        if type(ext) is not dict:
            raise ProtocolError("JSON header extFields is not an object")
        for v in ext.values():
            if type(v) is not str:
                ext = _coerce_ext(ext)
                break
    else:
        ext = {}
    return RemotingCommand(code, language, version, opaque, flag, remark, ext, body, 0)


def _decode_rocketmq(h: bytes, body: bytes) -> RemotingCommand:
    n = len(h)
    if n < 21:
        raise ProtocolError(f"ROCKETMQ header of {n} bytes is shorter than 21")
    code, lang, version, opaque, flag, rlen = _BIN_FIXED.unpack_from(h, 0)
    pos = 17
    if rlen < 0 or pos + rlen + 4 > n:
        raise ProtocolError(f"ROCKETMQ header remark length {rlen} out of range")
    try:
        remark = h[pos:pos + rlen].decode() if rlen else None
        pos += rlen
        (elen,) = _I32.unpack_from(h, pos)
        pos += 4
        end = pos + elen
        if elen < 0 or end > n:
            raise ProtocolError(f"ROCKETMQ header ext length {elen} out of range")
        ext: dict[str, str] = {}
        while pos < end:
            if pos + 2 > end:
                raise ProtocolError("truncated ext entry")
            (klen,) = _I16.unpack_from(h, pos)
            pos += 2
            if klen < 0 or pos + klen + 4 > end:
                raise ProtocolError("ext key length out of range")
            key = h[pos:pos + klen].decode()
            pos += klen
            (vlen,) = _I32.unpack_from(h, pos)
            pos += 4
            if vlen < 0 or pos + vlen > end:
                raise ProtocolError("ext value length out of range")
            ext[key] = h[pos:pos + vlen].decode()
            pos += vlen
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"invalid UTF-8 in ROCKETMQ header: {exc}") from None
    return RemotingCommand(code, LANGUAGE_NAMES.get(lang, "OTHER"), version, opaque, flag, remark, ext, body, 1)
