"""Coverage-guided fuzzing of the decoders that read bytes from the network or the disk, with atheris (libFuzzer).

``python fuzz_targets.py TARGET [libFuzzer flags, e.g. -runs=100000 CORPUS_DIR]``. Each target feeds the fuzzer's
bytes to one decoder; the only exceptions it may raise are our own (the ProtocolError family of the remoting layer,
HeaderError for a bad custom header, CorruptRecordError for store bytes, FastjsonDecodeError / ValueError subclasses
of our JSON readers). Anything else (IndexError, struct.error, UnicodeDecodeError, RecursionError, ...) escapes,
and atheris reports it with the input that caused it and exits with a non-zero status.
"""

from __future__ import annotations

import sys

import atheris

with atheris.instrument_imports(include=["pyrmq"]):
    from pyrmq.remoting import headers as wire_headers
    from pyrmq.remoting.command import RemotingCommand
    from pyrmq.remoting.errors import HeaderError, ProtocolError
    from pyrmq.remoting.fastjson import FastjsonDecodeError, loads
    from pyrmq.remoting.framing import FrameDecoder
    from pyrmq.store.config_files import fastjson_loads
    from pyrmq.store.errors import CorruptRecordError
    from pyrmq.store.format import decode_batch_body, decode_messages, decode_properties

HEADER_CLASSES = [getattr(wire_headers, n) for n in dir(wire_headers)
                  if n.endswith("Header") and hasattr(getattr(wire_headers, n), "from_ext_fields")]


def frame(data: bytes) -> None:
    """The frame decoder, fed in two pieces (a frame split across reads)."""
    d = FrameDecoder()
    cut = data[0] % (len(data) + 1) if data else 0
    try:
        d.feed(data[:cut])
        d.feed(data[cut:])
    except ProtocolError:
        pass
    try:
        RemotingCommand.decode(data)
    except ProtocolError:
        pass


def header(data: bytes) -> None:
    """A whole frame decoded, then its extFields read as every custom header the broker and clients know."""
    try:
        cmd = RemotingCommand.decode(data)
    except ProtocolError:
        fdp = atheris.FuzzedDataProvider(data)
        ext = {fdp.ConsumeUnicodeNoSurrogates(8): fdp.ConsumeUnicodeNoSurrogates(16) for _ in range(fdp.ConsumeIntInRange(0, 12))}
    else:
        ext = cmd.ext_fields
    for cls in HEADER_CLASSES:
        try:
            cls.from_ext_fields(ext)
        except HeaderError:
            pass


def batch(data: bytes) -> None:
    """SEND_BATCH_MESSAGE bodies, and pull/query bodies (back-to-back stored records)."""
    try:
        for entry in decode_batch_body(data):
            decode_properties(entry.properties_bytes)
    except CorruptRecordError:
        pass
    try:
        decode_messages(data, check_crc=True)
    except CorruptRecordError:
        pass


def properties(data: bytes) -> None:
    decode_properties(data)
    decode_properties(data.decode("latin-1"))


def fastjson(data: bytes) -> None:
    """The fastjson reader of the wire (route bodies, headers) and the config-file reader of the store."""
    try:
        loads(data)
    except FastjsonDecodeError:
        pass
    try:
        fastjson_loads(data.decode("utf-8", "replace"))
    except ValueError:  # the config reader's documented error (ConfigFile falls back to the .bak on it)
        pass


TARGETS = {"frame": frame, "header": header, "batch": batch, "properties": properties, "fastjson": fastjson}

if __name__ == "__main__":
    target = TARGETS[sys.argv[1]]
    sys.setrecursionlimit(10_000)
    atheris.Setup([sys.argv[0], *sys.argv[2:]], target)
    atheris.Fuzz()
