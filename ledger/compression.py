"""The compressions of ClickHouse's HTTP interface (pure logic).

Two layers, as in ClickHouse:

- ``compress=1`` / ``decompress=1``: ClickHouse's own compressed blocks (the Native protocol's
  framing). Each block is a 16-byte CityHash128 (v1.0.2, ClickHouse's variant) of what
  follows, a method byte (0x82 LZ4, 0x90 ZSTD, 0x02 none), the compressed size (header of 9
  bytes included) and the uncompressed size, both UInt32 little-endian, then the payload.
  ``network_compression_method`` chooses LZ4 (default) or ZSTD for responses.
- HTTP ``Content-Encoding``: responses honour ``Accept-Encoding`` (zstd, lz4, gzip, deflate,
  in ClickHouse's order of preference) when ``enable_http_compression=1``; request bodies may
  come as gzip, deflate, zstd or lz4 (a sequence of LZ4 frames, as clickhouse-connect sends).
"""

from __future__ import annotations

import gzip
import importlib
import zlib
from typing import Any

_lz4_block: Any = importlib.import_module("lz4.block")  # lz4 ships no type information
_lz4_frame: Any = importlib.import_module("lz4.frame")
_cityhash: Any = importlib.import_module("clickhouse_cityhash.cityhash")
_zstd: Any = importlib.import_module("zstandard")

METHOD_NONE = 0x02
METHOD_LZ4 = 0x82
METHOD_ZSTD = 0x90
HEADER = 9  # method byte + compressed size + uncompressed size
CHECKSUM = 16
BLOCK_SIZE = 1 << 20  # ClickHouse's max_compress_block_size
MAX_BLOCK = 1 << 30  # a size past this is corrupt input, not a block to allocate for
_METHODS = {"lz4": METHOD_LZ4, "lz4hc": METHOD_LZ4, "zstd": METHOD_ZSTD, "none": METHOD_NONE}
# ClickHouse's chooseHTTPCompressionMethod order, among the encodings served here.
HTTP_ENCODINGS = ("zstd", "lz4", "gzip", "deflate")


class CompressionError(ValueError):
    """Corrupt or unsupported compressed data; ``code`` is ClickHouse's error code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def checksum(data: bytes | memoryview) -> bytes:
    """CityHash128 v1.0.2 of ``data`` as ClickHouse writes it (first, second UInt64 LE)."""
    value = int(_cityhash.CityHash128(bytes(data)))
    return (value >> 64).to_bytes(8, "little") + (value & (1 << 64) - 1).to_bytes(8, "little")


def method_byte(name: str | None) -> int:
    """The method byte for a ``network_compression_method`` value (default LZ4)."""
    key = (name or "lz4").strip().lower()
    if key not in _METHODS:
        raise CompressionError(89, f"Unknown compression method: {name}. "
                                   "(UNKNOWN_COMPRESSION_METHOD)")
    return _METHODS[key]


def compress_block(data: bytes | memoryview, method: int = METHOD_LZ4,
                   zstd_level: int = 1) -> bytes:
    """One compressed block (header and checksum included)."""
    raw = bytes(data)
    if method == METHOD_LZ4:
        payload = bytes(_lz4_block.compress(raw, store_size=False))
    elif method == METHOD_ZSTD:
        payload = bytes(_zstd.ZstdCompressor(level=zstd_level).compress(raw))
    elif method == METHOD_NONE:
        payload = raw
    else:
        raise CompressionError(89, f"Unknown compression method byte 0x{method:02x}")
    body = (bytes([method]) + (len(payload) + HEADER).to_bytes(4, "little")
            + len(raw).to_bytes(4, "little") + payload)
    return checksum(body) + body


def compress_blocks(data: bytes, method: int = METHOD_LZ4, zstd_level: int = 1,
                    block_size: int = BLOCK_SIZE) -> bytes:
    """``data`` as a sequence of compressed blocks of at most ``block_size`` bytes each."""
    view = memoryview(data)
    return b"".join(compress_block(view[i:i + block_size], method, zstd_level)
                    for i in range(0, len(view), block_size))


def decompress_blocks(data: bytes) -> bytes:
    """Undo ``compress_blocks``: every block's checksum is verified."""
    view = memoryview(data)
    out: list[bytes] = []
    pos = 0
    while pos < len(view):
        if len(view) - pos < CHECKSUM + HEADER:
            raise CompressionError(271, "Cannot decompress: the compressed block header "
                                        "is truncated. (CANNOT_DECOMPRESS)")
        method = view[pos + CHECKSUM]
        size = int.from_bytes(view[pos + CHECKSUM + 1:pos + CHECKSUM + 5], "little")
        raw_size = int.from_bytes(view[pos + CHECKSUM + 5:pos + CHECKSUM + HEADER], "little")
        end = pos + CHECKSUM + size
        if size < HEADER or size > MAX_BLOCK or raw_size > MAX_BLOCK or end > len(view):
            raise CompressionError(271, "Cannot decompress: bad compressed block size "
                                        f"{size}. (CANNOT_DECOMPRESS)")
        body = view[pos + CHECKSUM:end]
        if checksum(body) != bytes(view[pos:pos + CHECKSUM]):
            raise CompressionError(40, "Checksum doesn't match: corrupted data. "
                                       "(CHECKSUM_DOESNT_MATCH)")
        payload = bytes(body[HEADER:])
        try:
            if method == METHOD_LZ4:
                raw = _lz4_block.decompress(payload, uncompressed_size=raw_size)
            elif method == METHOD_ZSTD:
                raw = _zstd.ZstdDecompressor().decompress(payload, max_output_size=raw_size)
            elif method == METHOD_NONE:
                raw = payload
            else:
                raise CompressionError(89, f"Unknown codec family code: 0x{method:02x}. "
                                           "(UNKNOWN_COMPRESSION_METHOD)")
        except CompressionError:
            raise
        except Exception as exc:  # lz4 / zstandard raise their own error types
            raise CompressionError(271, f"Cannot decompress: {exc}. (CANNOT_DECOMPRESS)"
                                   ) from None
        if len(raw) != raw_size:
            raise CompressionError(271, "Cannot decompress: the block's size does not match "
                                        "its header. (CANNOT_DECOMPRESS)")
        out.append(raw)
        pos = end
    return b"".join(out)


def choose_encoding(accept: str | None) -> str | None:
    """The response Content-Encoding for an ``Accept-Encoding`` header, or None."""
    offered = {part.split(";")[0].strip().lower() for part in (accept or "").split(",")}
    return next((enc for enc in HTTP_ENCODINGS if enc in offered), None)


def encode_body(data: bytes, encoding: str, level: int | None = None) -> bytes:
    if encoding == "gzip":
        return gzip.compress(data, compresslevel=3 if level is None else level)
    if encoding == "deflate":
        return zlib.compress(data, 3 if level is None else level)
    if encoding == "zstd":
        return bytes(_zstd.ZstdCompressor(level=3 if level is None else level).compress(data))
    if encoding == "lz4":
        return bytes(_lz4_frame.compress(data))
    raise CompressionError(89, f"Content-Encoding {encoding!r} is not served")


def decode_body(body: bytes, encoding: str | None) -> bytes:
    """Undo a request's ``Content-Encoding``. lz4 bodies may hold several frames."""
    enc = (encoding or "").strip().lower()
    try:
        if not enc or enc == "identity":
            return body
        if enc == "lz4":
            out: list[bytes] = []
            rest = body
            while rest:
                decompressor = _lz4_frame.LZ4FrameDecompressor()
                out.append(decompressor.decompress(rest))
                if not decompressor.eof:
                    raise CompressionError(271, "truncated lz4 frame in the request body")
                rest = decompressor.unused_data
            return b"".join(out)
        if enc == "gzip":
            return gzip.decompress(body)
        if enc == "deflate":
            return zlib.decompress(body)
        if enc == "zstd":
            return b"".join(_zstd_frames(body))
    except CompressionError:
        raise
    except Exception as exc:  # gzip, zlib, lz4, zstandard: each its own error type
        raise CompressionError(271, f"Cannot decompress the request body ({enc}): {exc}. "
                                    "(CANNOT_DECOMPRESS)") from None
    raise CompressionError(89, f"Content-Encoding {enc!r} is not supported here (use zstd, "
                               "lz4, gzip or deflate, or none). (UNKNOWN_COMPRESSION_METHOD)")


def _zstd_frames(body: bytes) -> list[bytes]:
    reader = _zstd.ZstdDecompressor().stream_reader(body, read_across_frames=True)
    chunks: list[bytes] = []
    while chunk := reader.read(1 << 20):
        chunks.append(chunk)
    return chunks
