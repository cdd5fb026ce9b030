"""ClickHouse's Native revision layouts and compressed blocks (ledger.native,
ledger.compression), and the endpoint's credential rules; no engine needed."""

from __future__ import annotations

import base64
import struct
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import SecretStr

from ledger.compression import (
    METHOD_LZ4,
    METHOD_NONE,
    METHOD_ZSTD,
    CompressionError,
    checksum,
    choose_encoding,
    compress_block,
    compress_blocks,
    decode_body,
    decompress_blocks,
    encode_body,
)
from ledger.http import LedgerEndpoint, LedgerHTTPServer, RequestError, User, credentials
from ledger.native import BLOCK_INFO, NativeError, parse_type, relayout

# -- compressed blocks --------------------------------------------------------------------


def test_checksum_is_clickhouse_cityhash128() -> None:
    # The value clickhouse-go's ch-go (go-faster/city CH128) computes for these bytes.
    digest = checksum(b"hello world")
    assert struct.unpack("<QQ", digest) == (9077940583652301947, 1108014990186742992)


def test_block_header_layout() -> None:
    block = compress_block(b"abc" * 10, METHOD_NONE)
    assert block[16] == 0x02
    assert struct.unpack("<II", block[17:25]) == (9 + 30, 30)
    assert block[25:] == b"abc" * 10
    assert block[:16] == checksum(block[16:])


@given(st.binary(max_size=5000), st.sampled_from([METHOD_LZ4, METHOD_ZSTD, METHOD_NONE]),
       st.integers(min_value=1, max_value=2048))
def test_blocks_round_trip(data: bytes, method: int, block_size: int) -> None:
    framed = compress_blocks(data, method, block_size=block_size)
    assert decompress_blocks(framed) == data
    blocks = -(-len(data) // block_size)
    assert len(framed) >= 25 * blocks and (blocks or framed == b"")


@given(st.binary(min_size=1, max_size=300), st.data())
def test_a_corrupted_block_is_refused(data: bytes, draw: st.DataObject) -> None:
    framed = bytearray(compress_block(data, METHOD_LZ4))
    at = draw.draw(st.integers(min_value=0, max_value=len(framed) - 1))
    framed[at] ^= 0xFF
    with pytest.raises(CompressionError) as err:
        decompress_blocks(bytes(framed))
    assert err.value.code in (40, 89, 271)


@given(st.binary(max_size=64))
def test_garbage_never_crashes(data: bytes) -> None:
    try:
        decompress_blocks(data)
    except CompressionError:
        pass


def test_http_encodings() -> None:
    assert choose_encoding("gzip, deflate, br, zstd") == "zstd"  # ClickHouse's preference
    assert choose_encoding("gzip;q=1.0, deflate") == "gzip"
    assert choose_encoding("br") is None and choose_encoding(None) is None
    for enc in ("gzip", "deflate", "zstd", "lz4"):
        assert decode_body(encode_body(b"x" * 5000, enc), enc) == b"x" * 5000
    with pytest.raises(CompressionError):
        decode_body(b"not zstd", "zstd")


# -- Native layouts -----------------------------------------------------------------------


def _col(name: str, typ: str, data: bytes) -> bytes:
    return bytes([len(name)]) + name.encode() + bytes([len(typ)]) + typ.encode() + data


def _block(rows: int, *cols: bytes) -> bytes:
    return bytes([len(cols), rows]) + b"".join(cols)


LC = (b"\x01" + b"\x00" * 7  # key version
      + struct.pack("<Q", 0x600) + struct.pack("<Q", 2) + b"\x00\x01a"  # dictionary
      + struct.pack("<Q", 2) + b"\x01\x01")  # indices
COLUMNS = [
    _col("n", "UInt32", struct.pack("<II", 1, 2)),
    _col("s", "String", b"\x01a\x02bc"),
    _col("lc", "LowCardinality(String)", LC),
    _col("arr", "Array(Nullable(UInt8))", struct.pack("<QQ", 1, 3) + b"\x00\x01\x00"
         + b"\x07\x00\x09"),
    _col("m", "Map(String, UInt8)", struct.pack("<QQ", 1, 1) + b"\x01k\x01"),
    _col("t", "Tuple(a UInt8, `b c` FixedString(2))", b"\x01\x02xxyy"),
    _col("ts", "DateTime64(3, 'UTC')", struct.pack("<qq", 1, 2)),
    _col("d", "DateTime('UTC')", struct.pack("<II", 1, 2)),
    _col("dec", "Decimal(20, 2)", b"\x00" * 32),
    _col("e", "Enum8('a' = 1, 'b,)' = 2)", b"\x01\x02"),
]


def test_relayout_per_revision() -> None:
    data = _block(2, *COLUMNS) + _block(0, _col("n", "UInt32", b""))
    assert relayout(data, 0) == data
    # 54405 (clickhouse-connect): block info per block, no marker.
    assert relayout(data, 54405) == BLOCK_INFO + _block(2, *COLUMNS) + BLOCK_INFO + _block(
        0, _col("n", "UInt32", b""))
    # 54460 (clickhouse-go): a zero marker byte after each column's type.
    marked = [c[:1 + c[0] + 1 + c[1 + c[0]]] + b"\x00" + c[2 + c[0] + c[1 + c[0]]:]
              for c in COLUMNS]
    assert relayout(data, 54460) == (BLOCK_INFO + _block(2, *marked) + BLOCK_INFO
                                     + _block(0, _col("n", "UInt32", b"") + b"\x00"))
    # Below 54337 DateTime carries no time zone.
    assert b"DateTime('UTC')" not in relayout(data, 54300)


def test_relayout_restores_a_dropped_time_zone() -> None:
    data = _block(1, _col("a", "UInt8", b"\x01"), _col("t", "DateTime", b"\x00" * 4))
    asked: list[int] = []

    def header() -> list[str]:
        asked.append(1)
        return ["UInt8", "DateTime('Europe/Paris')"]

    out = relayout(data, 54460, header)
    assert b"\x18DateTime('Europe/Paris')\x00" in out and asked == [1]
    assert relayout(_block(1, _col("a", "UInt8", b"\x01")), 54460, header) and asked == [1]


def test_relayout_refuses_what_it_cannot_walk() -> None:
    with pytest.raises(NativeError):
        relayout(_block(2, COLUMNS[1][:-1]), 54460)  # truncated string data
    with pytest.raises(NativeError, match="JSON"):
        relayout(_block(1, _col("j", "JSON", b"\x00")), 54460)


@given(st.lists(st.binary(max_size=20), min_size=1, max_size=20))
def test_relayout_walks_any_strings(values: list[bytes]) -> None:
    data = b"".join(bytes([len(v)]) + v for v in values)
    block = bytes([1, len(values)]) + _col("s", "String", data)
    out = relayout(block, 54460)
    assert out == BLOCK_INFO + bytes([1, len(values)]) + b"\x01s\x06String\x00" + data


@given(st.binary(max_size=80))
def test_relayout_garbage_is_a_clear_error(data: bytes) -> None:
    try:
        relayout(data, 54460)
    except NativeError:
        pass


def test_parse_type() -> None:
    node = parse_type("Map(String, Array(LowCardinality(Nullable(String))))")
    assert node.name == "Map" and node.args[1].args[0].args[0].name == "Nullable"
    assert [a.text for a in parse_type("DateTime64(3, 'UTC')").args] == ["3", "'UTC'"]
    with pytest.raises(NativeError):
        parse_type("Array(UInt8")


# -- credentials --------------------------------------------------------------------------


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_credentials_ways() -> None:
    assert credentials({}, {}) is None
    assert credentials({}, {"x-clickhouse-user": "g", "x-clickhouse-key": "k"}) == ("g", "k")
    assert credentials({}, {"authorization": _basic("g", "k:1")}) == ("g", "k:1")
    assert credentials({"user": "g", "password": "k"}, {}) == ("g", "k")
    with pytest.raises(RequestError) as err:
        credentials({"user": "g"}, {"authorization": _basic("g", "k")})
    assert err.value.code == 516
    with pytest.raises(RequestError):
        credentials({}, {"authorization": "Bearer abc"})


def test_authentication() -> None:
    endpoint = LedgerEndpoint(None, users=[  # type: ignore[arg-type]  # no query runs
        User("fabricwatch", SecretStr("w"), writable=True),
        User("grafana", SecretStr("r"), writable=False)])
    user = endpoint.authenticate({}, {"authorization": _basic("grafana", "r")})
    assert user is not None and not user.writable
    for args, headers in (({}, {}), ({"user": "grafana", "password": "w"}, {}),
                          ({}, {"x-clickhouse-user": "nobody", "x-clickhouse-key": "r"})):
        with pytest.raises(RequestError) as err:
            endpoint.authenticate(args, headers)
        assert (err.value.status, err.value.code) == (403, 516)
    # No users: authentication is off (loopback only).
    assert LedgerEndpoint(None).authenticate({}, {}) is None  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        User("x", SecretStr(""), writable=False)


def test_a_non_loopback_bind_needs_users() -> None:
    with pytest.raises(ValueError, match="not loopback"):
        LedgerHTTPServer(None, host="0.0.0.0", port=0)  # type: ignore[arg-type]  # noqa: S104


@given(st.text(min_size=1).filter(lambda u: ":" not in u), st.text())
def test_basic_auth_round_trip(user: str, password: str) -> None:
    assert credentials({}, {"authorization": _basic(user, password)}) == (user, password)


def test_users_from_the_secrets(tmp_path: Path) -> None:
    from ledger.http import users_from
    from runtime.settings import LedgerSettings, SecretsSettings, Settings

    assert users_from(Settings(state_dir=tmp_path)) == []
    ro = tmp_path / "ro"
    ro.write_text("r-pw\n")
    settings = Settings(state_dir=tmp_path, secrets=SecretsSettings(
        ledger_http_password=SecretStr("w-pw"), ledger_http_readonly_password_file=ro))
    users = users_from(settings)
    assert [(u.name, u.password.get_secret_value(), u.writable) for u in users] == [
        ("fabricwatch", "w-pw", True), ("grafana", "r-pw", False)]
    same = settings.model_copy(update={"ledger": LedgerSettings(http_readonly_user="fabricwatch")})
    with pytest.raises(ValueError, match="differ"):
        users_from(same)
