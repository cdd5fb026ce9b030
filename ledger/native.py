"""ClickHouse's Native format in the layout of a client's protocol revision (pure logic).

The engine writes Native output for revision 0: no block info, no per-column serialization
marker. A server answering ``client_protocol_version=N`` writes what ``NativeWriter`` writes
for revision N, and drivers decode by that revision (clickhouse-go sends 54460 and reads a
serialization-kind byte after each column's type; clickhouse-connect sends 54405 and reads
block info). ``relayout(data, revision)`` rewrites engine output into that layout without
decoding values: it walks each column's bytes by its type only to find where the column ends.

Per block, for revision N (ClickHouse ``src/Formats/NativeWriter.cpp``):
- N > 0: block info first (field 1 ``is_overflows`` UInt8, field 2 ``bucket_num`` Int32,
  field 0 end);
- varint columns, varint rows; per column: name, type (``DateTime('tz')`` is sent as plain
  ``DateTime`` below 54337), then, from 54454, one byte "has custom serialization" (always 0
  here: the engine's revision-0 output is in the default serialization), then the data.

Below 54405 LowCardinality must not be sent at all; the endpoint asks the engine for plain
types then (``low_cardinality_allow_in_native_format = 0``), see ``engine_settings``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

REVISION_WITH_TIMEZONE_IN_DATETIME = 54337
REVISION_WITH_LOW_CARDINALITY = 54405
REVISION_WITH_CUSTOM_SERIALIZATION = 54454
# The block info of a whole (not two-level-aggregated) block: is_overflows=0, bucket_num=-1.
BLOCK_INFO = b"\x01\x00\x02\xff\xff\xff\xff\x00"

_FIXED = {
    "UInt8": 1, "UInt16": 2, "UInt32": 4, "UInt64": 8, "UInt128": 16, "UInt256": 32,
    "Int8": 1, "Int16": 2, "Int32": 4, "Int64": 8, "Int128": 16, "Int256": 32,
    "Float32": 4, "Float64": 8, "BFloat16": 2, "Bool": 1, "Date": 2, "Date32": 4,
    "DateTime": 4, "DateTime64": 8, "UUID": 16, "IPv4": 4, "IPv6": 16, "Enum8": 1,
    "Enum16": 2, "Decimal32": 4, "Decimal64": 8, "Decimal128": 16, "Decimal256": 32,
    "Time": 4, "Time64": 8, "Nothing": 1,
}
_INTERVAL = re.compile(r"^Interval[A-Za-z]+$")
# LowCardinality index flags (SerializationLowCardinality): the low byte is the index width.
_LC_NEED_DICTIONARY = 1 << 10
_LC_INDEX_WIDTH = {0: 1, 1: 2, 2: 4, 3: 8}


class NativeError(ValueError):
    """Native data this module cannot walk (truncated, or a type it does not know)."""


@dataclass(frozen=True)
class TypeNode:
    name: str
    args: tuple[TypeNode, ...] = ()
    text: str = ""  # the argument's raw text (numbers, quoted time zones, enum values)


def parse_type(text: str) -> TypeNode:
    """``Map(String, Array(Nullable(UInt8)))`` as a tree. Tuple elements may be named."""
    node, rest = _parse(text.strip())
    if rest.strip():
        raise NativeError(f"unexpected text after type: {rest[:40]!r}")
    return node


def _parse(text: str) -> tuple[TypeNode, str]:
    match = re.match(r"[A-Za-z_][A-Za-z0-9_]*", text)
    if not match:
        raise NativeError(f"not a type: {text[:40]!r}")
    name = match.group(0)
    rest = text[match.end():].lstrip()
    if not rest.startswith("("):
        return TypeNode(name), rest
    args: list[TypeNode] = []
    rest = rest[1:]
    while True:
        rest = rest.lstrip()
        if rest.startswith(")"):
            return TypeNode(name, tuple(args)), rest[1:]
        arg, rest = _parse_arg(rest)
        args.append(arg)
        rest = rest.lstrip()
        if rest.startswith(","):
            rest = rest[1:]
        elif not rest.startswith(")"):
            raise NativeError(f"expected ',' or ')' in type arguments: {rest[:40]!r}")


def _parse_arg(text: str) -> tuple[TypeNode, str]:
    """One argument: a type, ``name Type`` (a named tuple element) or a literal."""
    if text[:1] in "'-0123456789" or text.startswith("`"):
        if text.startswith("`"):  # a quoted element name, then the type
            end = text.index("`", 1)
            return _parse(text[end + 1:].lstrip())
        end = _literal_end(text)
        return TypeNode("", text=text[:end]), text[end:]
    match = re.match(r"[A-Za-z_][A-Za-z0-9_]*\s+(?=[A-Za-z_])", text)
    if match:  # a type name is never followed by an identifier: "elem Type"
        return _parse(text[match.end():])
    return _parse(text)


def _literal_end(text: str) -> int:
    """Where a literal argument ends (at the ',' or ')' that follows it)."""
    i, quoted = 0, False
    while i < len(text):
        ch = text[i]
        if quoted:
            if ch == "\\":
                i += 1
            elif ch == "'":
                quoted = False
        elif ch == "'":
            quoted = True
        elif ch in ",)":
            return i
        i += 1
    raise NativeError("unterminated type argument")


def _types(node: TypeNode) -> list[TypeNode]:
    return [a for a in node.args if a.name]


class _Reader:
    def __init__(self, data: bytes | memoryview) -> None:
        self.data = memoryview(data)
        self.pos = 0

    def take(self, n: int) -> memoryview:
        end = self.pos + n
        if n < 0 or end > len(self.data):
            raise NativeError("Native data ends inside a value")
        out = self.data[self.pos:end]
        self.pos = end
        return out

    def varint(self) -> int:
        shift = result = 0
        while True:
            if self.pos >= len(self.data):
                raise NativeError("Native data ends inside a varint")
            byte = self.data[self.pos]
            self.pos += 1
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7
            if shift > 63:
                raise NativeError("varint longer than 64 bits")

    def uint64(self) -> int:
        return int.from_bytes(self.take(8), "little")

    def string(self) -> str:
        return bytes(self.take(self.varint())).decode("utf-8", errors="replace")


def _fixed_width(node: TypeNode) -> int | None:
    name = node.name
    if name in _FIXED:
        return _FIXED[name]
    if name == "Decimal":
        precision = int(node.args[0].text) if node.args else 10
        return 4 if precision <= 9 else 8 if precision <= 18 else 16 if precision <= 38 else 32
    if name == "FixedString":
        return int(node.args[0].text)
    if _INTERVAL.match(name):
        return 8
    return None


def _skip_prefix(node: TypeNode, r: _Reader) -> None:
    """The serialization state prefixes, written before any data of the column."""
    name = node.name
    if name == "LowCardinality":
        if r.uint64() != 1:
            raise NativeError("unknown LowCardinality serialization version")
    elif name in ("Array", "Nullable", "Map", "Tuple", "Nested", "SimpleAggregateFunction"):
        for sub in _element_types(node):
            _skip_prefix(sub, r)


def _element_types(node: TypeNode) -> list[TypeNode]:
    if node.name == "Map":
        return _types(node)
    if node.name == "SimpleAggregateFunction":
        return _types(node)[-1:]
    return _types(node)


def _skip_data(node: TypeNode, rows: int, r: _Reader) -> None:
    if rows == 0:
        return
    width = _fixed_width(node)
    if width is not None:
        r.take(width * rows)
        return
    name = node.name
    if name == "String":
        for _ in range(rows):
            r.take(r.varint())
    elif name == "Nullable":
        r.take(rows)
        _skip_data(_types(node)[0], rows, r)
    elif name in ("Array", "Map", "Nested"):
        offsets = r.take(8 * rows)
        total = int.from_bytes(offsets[-8:], "little")
        if name == "Array":
            _skip_data(_types(node)[0], total, r)
        else:
            for sub in _types(node):
                _skip_data(sub, total, r)
    elif name == "Tuple":
        for sub in _types(node):
            _skip_data(sub, rows, r)
    elif name == "SimpleAggregateFunction":
        _skip_data(_types(node)[-1], rows, r)
    elif name == "LowCardinality":
        inner = _types(node)[0]
        keys = _types(inner)[0] if inner.name == "Nullable" else inner
        left = rows
        while left > 0:
            flags = r.uint64()
            if flags & _LC_NEED_DICTIONARY:
                _skip_data(keys, r.uint64(), r)
            count = r.uint64()
            width = _LC_INDEX_WIDTH.get(flags & 0xFF)
            if width is None or count == 0 or count > left:
                raise NativeError("bad LowCardinality granule")
            r.take(width * count)
            left -= count
    else:
        raise NativeError(f"type {name} cannot be sent in this protocol layout; "
                          "ask for another output format (JSON, RowBinary, ...)")


def _skip_column(type_text: str, rows: int, r: _Reader) -> None:
    if rows == 0:  # zero rows are zero bytes of data, prefix included (a server's NativeWriter)
        return
    node = parse_type(type_text)
    _skip_prefix(node, r)
    _skip_data(node, rows, r)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _string(text: str) -> bytes:
    raw = text.encode("utf-8")
    return _varint(len(raw)) + raw


_DATETIME_TZ = re.compile(r"\bDateTime\('[^']*'\)")


def relayout(data: bytes, revision: int,
             header: Callable[[], list[str]] | None = None) -> bytes:
    """Revision-0 Native ``data`` (one or more blocks) in the layout of ``revision``.

    Revision 0 sends a top-level ``DateTime('tz')`` as plain ``DateTime``; from 54337 the
    time zone belongs in the type, so ``header()`` (the result's full column types, asked
    for only when such a column occurs) gives it back."""
    if revision <= 0:
        return data
    r = _Reader(data)
    out: list[bytes | memoryview] = []
    full_types: list[str] | None = None
    while r.pos < len(r.data):
        out.append(BLOCK_INFO)
        columns = r.varint()
        rows = r.varint()
        out.append(_varint(columns) + _varint(rows))
        for i in range(columns):
            name = r.string()
            type_text = r.string()
            start = r.pos
            _skip_column(type_text, rows, r)
            sent = type_text
            if revision < REVISION_WITH_TIMEZONE_IN_DATETIME:
                sent = _DATETIME_TZ.sub("DateTime", sent)
            elif type_text == "DateTime" and header is not None:
                if full_types is None:
                    full_types = header()
                if i < len(full_types) and full_types[i].startswith("DateTime("):
                    sent = full_types[i]
            out.append(_string(name) + _string(sent))
            if revision >= REVISION_WITH_CUSTOM_SERIALIZATION:
                out.append(b"\x00")
            out.append(r.data[start:r.pos])
    return b"".join(out)


def header_block(columns: list[tuple[str, str]]) -> bytes:
    """A revision-0 block of no rows that names the result's columns and types.

    A server answers an empty result with this block (zero rows carry zero bytes of data),
    so a driver still learns the columns; the embedded engine sends nothing at all."""
    out = [_varint(len(columns)), _varint(0)]
    for name, type_text in columns:
        out.append(_string(name) + _string(type_text))
    return b"".join(out)


def engine_settings(revision: int) -> dict[str, str]:
    """Settings the engine needs to produce output this revision may receive."""
    if 0 < revision < REVISION_WITH_LOW_CARDINALITY:
        return {"low_cardinality_allow_in_native_format": "0"}
    return {}
