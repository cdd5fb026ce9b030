"""NVIDIA's field BER table: the shipped copy, its reader, and link-type lookups."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemas.ber_table import (
    HEADER,
    BerRow,
    Levels,
    TableError,
    default_table,
    fec_opcodes,
    lookup,
    media_group,
    parse_table,
)

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "ufm" / "pdr-field-ber-thresholds-v05.csv"


def test_shipped_table_is_nvidias_rows() -> None:
    text = FIXTURE.read_bytes().decode("utf-8")
    assert "\r\n" in text  # the fixture is byte-exact (CRLF), and so is the shipped copy
    assert tuple(parse_table(text)) == default_table()
    rows = list(csv.reader(io.StringIO(text, newline="")))[1:]
    assert len(default_table()) == len(rows) == 68
    for row, cells in zip(default_table(), rows, strict=True):
        assert (row.asic, row.speed, row.fec_type, row.fec_opcode) == (
            cells[0], cells[2], cells[3], int(cells[4]))
        assert row.pre_fec == Levels(*(float(c) for c in cells[6:9]))
        assert row.post_fec == Levels(*(float(c) for c in cells[9:12]))
        assert row.symbol == Levels(*(float(c) for c in cells[12:15]))


def test_ndr_plr_active_is_pdrs_row() -> None:
    link = lookup("NDR", "PLR", "active")
    assert link.pre_fec == Levels(1e-5, 5e-6, 1e-6)
    assert link.post_fec == Levels(1e-11, 5e-12, 1e-12)
    assert link.symbol == Levels(1e-14, 5e-15, 1e-15)
    # both NDR PLR modes (opcodes 12 and 14) agree, so PLR resolves
    assert {r.fec_opcode for r in link.rows} == {12, 14}
    assert lookup("NDR", "PLR", "copper").pre_fec == Levels(1e-6, 5e-7, 1e-7)
    assert lookup("NDR", "KP4", "optic").post_fec.error == 1e-13
    assert lookup("HDR", "PLR", "dac", asic="16nm").pre_fec.error == 1e-5


@pytest.mark.parametrize(("speed", "fec", "media", "says"), [
    ("QDR", "PLR", "active", "speed 'QDR'"),
    ("NDR", "turbo", "active", "unknown FEC mode 'turbo'"),
    ("NDR", "RS", "active", "no 7nm NDR row for FEC 'RS'"),
    ("NDR", "PLR", "wet-string", "unknown media 'wet-string'"),
])
def test_unknown_link_types_say_what(speed: str, fec: str, media: str, says: str) -> None:
    with pytest.raises(TableError, match=says.replace("(", r"\(")):
        lookup(speed, fec, media)


def test_names_the_tools_print() -> None:
    assert fec_opcodes("Standard_RS-FEC - (544,514)") == {7}  # mlxlink's "FEC" (fixture)
    assert fec_opcodes("14") == {14} and fec_opcodes("plr") == {12, 13, 14}
    for row in default_table():
        assert fec_opcodes(row.fec_type) == {row.fec_opcode}
        assert row.media in (media_group(row.media) or ())
    assert media_group("ACCs") == {"acc"} and media_group("Active_DiD") == {"active_did"}
    assert media_group("copper") == {"dac", "acc"} and media_group("fibre?") is None


def test_a_name_covering_rows_that_differ_must_be_named_exactly() -> None:
    a = default_table()[0]
    b = BerRow(**{**a.__dict__, "fec_opcode": 12, "fec_type": "KP4 (12)",
                  "pre_fec": Levels(1e-4, 5e-5, 1e-5)})
    with pytest.raises(TableError, match="different levels"):
        lookup("NDR", "PLR", "dac", rows=(a, b))
    assert lookup("NDR", "12", "dac", rows=(a, b)).pre_fec.error == 1e-4


def test_bad_tables_name_the_line() -> None:
    header = ",".join(HEADER)
    row = "7nm,IB,NDR,X (14),14,DACs," + ",".join(["1e-6"] * 9) + ",V05"
    assert len(parse_table(f"{header}\n{row}\n")) == 1
    with pytest.raises(TableError, match="line 1"):
        parse_table("a,b\n")
    with pytest.raises(TableError, match="line 2: unknown Media Type 'Fibre'"):
        parse_table(f"{header}\n{row.replace('DACs', 'Fibre')}\n")
    with pytest.raises(TableError, match="line 3: .* not a number"):
        parse_table(f"{header}\n{row}\n{row.replace('1e-6', 'high', 1)}\n")
    with pytest.raises(TableError, match="error >= warning >= normal"):
        parse_table(f"{header}\n{row.replace('1e-6,1e-6', '1e-7,1e-6', 1)}\n")
    with pytest.raises(TableError, match="no rows"):
        parse_table(header + "\n")


_ber = st.floats(min_value=1e-18, max_value=0.5, allow_nan=False)
_levels = st.lists(_ber, min_size=3, max_size=3).map(lambda v: sorted(v, reverse=True))


@given(st.lists(st.tuples(st.sampled_from(["7nm", "16nm"]), st.sampled_from(["NDR", "HDR"]),
                          st.integers(0, 19), st.sampled_from(["DACs", "ACC", "Active"]),
                          _levels, _levels, _levels), min_size=1, max_size=8))
def test_written_tables_read_back(rows: list[tuple]) -> None:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(HEADER)
    for asic, speed, op, media, pre, post, sym in rows:
        writer.writerow([asic, "IB", speed, f"mode, {op} ({op})", op, media,
                         *(repr(v) for v in (*pre, *post, *sym)), "V05"])
    parsed = parse_table(out.getvalue())
    assert [(r.asic, r.speed, r.fec_opcode, r.pre_fec, r.post_fec, r.symbol) for r in parsed] == [
        (a, s, op, Levels(*pre), Levels(*post), Levels(*sym))
        for a, s, op, _m, pre, post, sym in rows]


@given(st.text(max_size=400))
def test_any_text_is_a_table_or_a_table_error(text: str) -> None:
    try:
        rows = parse_table(",".join(HEADER) + "\n" + text)
    except TableError:
        return
    for row in rows:
        for levels in row.levels():
            assert 0 < levels.normal <= levels.warning <= levels.error < 1
