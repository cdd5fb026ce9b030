"""Pieces of the HTTP endpoint that need no engine."""

from __future__ import annotations

import gzip

import lz4.frame
import pytest

from ledger.compression import CompressionError, decode_body
from ledger.http import (
    first_verb,
    single_statement,
    with_settings,
)


def test_lz4_body_with_a_frame_per_block() -> None:
    blocks = [b"a" * 1000, b"b" * 70000, b"c"]
    body = b"".join(lz4.frame.compress(b) for b in blocks)
    assert decode_body(body, "lz4") == b"".join(blocks)
    assert decode_body(gzip.compress(b"xyz"), "gzip") == b"xyz"
    with pytest.raises(CompressionError):
        decode_body(lz4.frame.compress(b"x" * 100)[:-4], "lz4")
    with pytest.raises(CompressionError):
        decode_body(b"x", "br")


def test_statement_checks() -> None:
    assert first_verb("-- c\n  (select 1)") == "SELECT"
    assert first_verb("with x as (select 1) select * from x") == "WITH"
    assert single_statement("SELECT 1;  ")
    assert not single_statement("SELECT 1; DROP TABLE t")


def test_settings_clause() -> None:
    assert with_settings("SELECT name FROM system.settings LIMIT 5", {"readonly": "1"}) == (
        "SELECT name FROM system.settings LIMIT 5\nSETTINGS readonly = 1")
    assert with_settings("SELECT 1 SETTINGS max_threads = 2", {"readonly": "1"}).endswith(
        "max_threads = 2\n, readonly = 1")
    assert "'it\\'s'" in with_settings("SELECT 1", {"x": "it's"})
