"""NVIDIA's field BER thresholds, keyed by link type: the policy's BER defaults.

The table is NVIDIA's ``Field_BER_Thresholds.csv`` (version V05), shipped beside this module
byte-exact as ``data/field_ber_thresholds_v05.csv``; it is the one UFM's port-health (PDR)
plugin judges ports with (Mellanox/ufm_sdk_3.0, plugins/pdr_deterministic_plugin). A row is
an ASIC generation (``7nm``: Quantum-2 / ConnectX-7; ``16nm``: Quantum / ConnectX-6), a
speed, a FEC mode (the PRM's ``fec_mode_active`` opcode) and a media type, with pre-FEC,
post-FEC and symbol BER at three levels: *error* (the link is bad), *warning*, *normal*.

A link type is named the way operators and tools name it: the FEC as an opcode, a short
alias (``PLR``, ``KP4``, ``LL``, ``RS``, ``NONE``), the table's or mlxlink's text; the media
as ``dac``, ``acc``, ``active``, ``active_did``, or ``copper`` (DAC and ACC) / ``optic``
(active and active-DiD). A name that covers several rows resolves only if their levels
agree (at NDR the two PLR modes do); otherwise the lookup says which to choose.
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

TABLE_FILE = "field_ber_thresholds_v05.csv"
HEADER: tuple[str, ...] = (
    "ASIC", "Protocol", "Speed", "FEC TYPE", "FEC OPCODE", "Media Type",
    "Pre-FEC BER Error", "Pre-FEC BER Warning", "Pre-FEC BER Normal",
    "Post-FEC BER Error", "Post-FEC BER Warning", "Post-FEC BER Normal",
    "Symbol BER Error", "Symbol BER Warning", "Symbol BER Normal", "Version",
)
METRICS: tuple[str, ...] = ("pre_fec", "post_fec", "symbol")

# The table's media spellings (it has both ACC and ACCs) -> one name each.
_MEDIA_CANON = {"dac": "dac", "dacs": "dac", "acc": "acc", "accs": "acc",
                "active": "active", "activedid": "active_did"}
MEDIA_GROUPS: dict[str, frozenset[str]] = {
    "dac": frozenset({"dac"}), "acc": frozenset({"acc"}), "active": frozenset({"active"}),
    "active_did": frozenset({"active_did"}),
    "copper": frozenset({"dac", "acc"}), "optic": frozenset({"active", "active_did"}),
}
_MEDIA_ALIASES = {"dacs": "dac", "accs": "acc", "activedid": "active_did",
                  "optical": "optic", "optics": "optic", "aoc": "active"}

# FEC opcodes (PRM fec_mode_active; the names UFM's PDR plugin's fec_mode_lookup.json and
# mlxlink print for them).
_FEC_NAMES: dict[str, frozenset[int]] = {
    "none": frozenset({0}), "nofec": frozenset({0}), "firecodefec": frozenset({1}),
    "rs": frozenset({2}), "stdrs": frozenset({2}), "stdrsfecrs528514": frozenset({2}),
    "standardrsfecrs528514": frozenset({2}),
    "ll": frozenset({3}), "stdllrs": frozenset({3}), "stdllrsfecrs271257": frozenset({3}),
    "standardllrsfecrs271257": frozenset({3}),
    "kp4": frozenset({7}), "stdrsfecrs544514": frozenset({7}),
    "standardrsfec544514": frozenset({7}),
    "plr": frozenset({12, 13, 14}), "kp4plr": frozenset({12}), "llplr": frozenset({13}),
    "ll50gplr": frozenset({14}), "rsfec544514plr": frozenset({12}),
    "llfec271257plr": frozenset({13}), "ethconsortiumll50grsfecplr2722571": frozenset({14}),
    "ethernetconsortiumll50grsfecplr": frozenset({14}),
}
_OPCODE_SUFFIX = re.compile(r"\((\d{1,3})\)\s*$")


class TableError(ValueError):
    """A BER table that does not read, or a link type it has no row for."""


@dataclass(frozen=True)
class Levels:
    """One metric's thresholds: above ``error`` the link is bad, above ``warning`` worth a
    ticket, below ``normal`` clean again."""

    error: float
    warning: float
    normal: float


@dataclass(frozen=True)
class BerRow:
    asic: str
    protocol: str
    speed: str
    fec_type: str
    fec_opcode: int
    media: str  # canonical: dac, acc, active, active_did
    pre_fec: Levels
    post_fec: Levels
    symbol: Levels
    version: str

    def levels(self) -> tuple[Levels, Levels, Levels]:
        return (self.pre_fec, self.post_fec, self.symbol)


@dataclass(frozen=True)
class LinkBer:
    """The thresholds of one link type, and the table rows they came from."""

    asic: str
    speed: str
    fec: str  # as asked
    media: str  # as asked
    pre_fec: Levels
    post_fec: Levels
    symbol: Levels
    rows: tuple[BerRow, ...]


def _key(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def _ber(text: str, line: int, column: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise TableError(f"line {line}: {column} {text!r} is not a number") from None
    if not math.isfinite(value) or not 0 < value < 1:
        raise TableError(f"line {line}: {column} {text!r} is not a BER between 0 and 1")
    return value


def parse_table(text: str) -> list[BerRow]:
    """The rows of a field BER table in NVIDIA's CSV shape; ``TableError`` names the line."""
    try:
        return _parse(text)
    except csv.Error as exc:
        raise TableError(f"not CSV: {exc}") from None


def _parse(text: str) -> list[BerRow]:
    reader = csv.reader(io.StringIO(text, newline=""))
    rows: list[BerRow] = []
    header = next(reader, None)
    if header is None or tuple(h.strip() for h in header) != HEADER:
        raise TableError(f"line 1: not a field BER table (expected the columns {', '.join(HEADER)})")
    for cells in reader:
        line = reader.line_num
        if not any(c.strip() for c in cells):
            continue
        if len(cells) != len(HEADER):
            raise TableError(f"line {line}: {len(cells)} columns, expected {len(HEADER)}")
        asic, protocol, speed, fec_type, opcode, media = (c.strip() for c in cells[:6])
        if not (asic and protocol and speed and fec_type):
            raise TableError(f"line {line}: ASIC, Protocol, Speed and FEC TYPE must be given")
        if not opcode.isdigit():
            raise TableError(f"line {line}: FEC OPCODE {opcode!r} is not a number")
        canon = _MEDIA_CANON.get(_key(media))
        if canon is None:
            raise TableError(f"line {line}: unknown Media Type {media!r} "
                             f"(known: DACs, ACC, ACCs, Active, Active_DiD)")
        levels = []
        for m, first in zip(METRICS, (6, 9, 12), strict=True):
            err, warn, norm = (_ber(cells[first + k].strip(), line, HEADER[first + k])
                               for k in range(3))
            if not err >= warn >= norm:
                raise TableError(f"line {line}: {m} levels must be error >= warning >= normal")
            levels.append(Levels(err, warn, norm))
        rows.append(BerRow(asic=asic, protocol=protocol, speed=speed.upper(),
                           fec_type=fec_type, fec_opcode=int(opcode), media=canon,
                           pre_fec=levels[0], post_fec=levels[1], symbol=levels[2],
                           version=cells[15].strip()))
    if not rows:
        raise TableError("the field BER table has no rows")
    return rows


@lru_cache(maxsize=1)
def default_table() -> tuple[BerRow, ...]:
    """The shipped table (NVIDIA's V05)."""
    text = resources.files("schemas").joinpath("data", TABLE_FILE).read_text(encoding="utf-8")
    return tuple(parse_table(text))


def media_group(text: str) -> frozenset[str] | None:
    """The table media a name covers (``copper`` -> DAC and ACC), or None if unknown."""
    key = _key(text)
    key = _MEDIA_ALIASES.get(key, key)
    return MEDIA_GROUPS.get(key) or MEDIA_GROUPS.get(_MEDIA_CANON.get(key, ""))


def fec_opcodes(text: str, rows: tuple[BerRow, ...] | None = None) -> frozenset[int] | None:
    """The FEC opcodes a name covers: an opcode, an alias, the table's or mlxlink's text."""
    stripped = text.strip()
    if stripped.isdigit():
        return frozenset({int(stripped)})
    suffix = _OPCODE_SUFFIX.search(stripped)
    if suffix:  # the table's own "KP4 Standard_RS-FEC_PLR (12)"
        return frozenset({int(suffix.group(1))})
    key = _key(stripped)
    if key in _FEC_NAMES:
        return _FEC_NAMES[key]
    for row in rows if rows is not None else default_table():
        if _key(_OPCODE_SUFFIX.sub("", row.fec_type)) == key:
            return frozenset({row.fec_opcode})
    return None


def lookup(speed: str, fec: str, media: str, asic: str = "7nm",
           rows: tuple[BerRow, ...] | None = None) -> LinkBer:
    """The levels of one link type; ``TableError`` says plainly what is unknown."""
    table = rows if rows is not None else default_table()
    asics = sorted({r.asic for r in table})
    if asic not in asics:
        raise TableError(f"unknown ASIC {asic!r} (the table has {', '.join(asics)})")
    by_asic = [r for r in table if r.asic == asic]
    speeds = sorted({r.speed for r in by_asic})
    if speed.upper() not in speeds:
        raise TableError(f"no {asic} row for speed {speed!r} (the table has {', '.join(speeds)})")
    by_speed = [r for r in by_asic if r.speed == speed.upper()]
    opcodes = fec_opcodes(fec, table)
    fecs = sorted({f"{r.fec_type}" for r in by_speed})
    if opcodes is None:
        raise TableError(f"unknown FEC mode {fec!r} (at {speed.upper()} the table has "
                         f"{'; '.join(fecs)}; or an opcode, or PLR, KP4, LL, RS, NONE)")
    by_fec = [r for r in by_speed if r.fec_opcode in opcodes]
    if not by_fec:
        raise TableError(f"no {asic} {speed.upper()} row for FEC {fec!r} (the table has "
                         f"{'; '.join(fecs)})")
    group = media_group(media)
    if group is None:
        raise TableError(f"unknown media {media!r} (dac, acc, active, active_did, copper, "
                         f"optic)")
    matched = tuple(r for r in by_fec if r.media in group)
    if not matched:
        raise TableError(f"no {asic} {speed.upper()} {fec} row for media {media!r}")
    if len({r.levels() for r in matched}) > 1:
        names = "; ".join(sorted({f"{r.fec_type} {r.media}" for r in matched}))
        raise TableError(f"{speed.upper()} {fec} {media} covers rows with different levels "
                         f"({names}): name the FEC opcode and the media")
    first = matched[0]
    return LinkBer(asic=asic, speed=first.speed, fec=fec, media=media, pre_fec=first.pre_fec,
                   post_fec=first.post_fec, symbol=first.symbol, rows=matched)
