"""Time bins for the report's series: a round width that gives a readable count for any window.

A 3-minute demo and a 24 h day both get some 30 to 60 bins: the width is the smallest of a
ladder of round widths (1 s ... 1 d, then whole days) that needs at most ``MAX_BINS`` bins.
Bins start at multiples of the width (UTC), so the same event falls in the same bin in
every report of a day. Pure functions, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

MAX_BINS = 60
ROUND_WIDTHS_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600,
                  43200, 86400)
DAY_S = 86400


def bin_width_s(span_s: float) -> int:
    """The round width (seconds) for a window of ``span_s`` seconds."""
    span = max(float(span_s), 1.0)
    for width in ROUND_WIDTHS_S:
        if math.ceil(span / width) <= MAX_BINS:
            return width
    return math.ceil(span / (MAX_BINS * DAY_S)) * DAY_S


def bin_starts(since_ms: int, until_ms: int, width_s: int) -> list[int]:
    """Start (epoch ms) of every bin that overlaps ``[since_ms, until_ms)``."""
    width_ms = width_s * 1000
    first = since_ms // width_ms * width_ms
    return list(range(first, max(until_ms, since_ms + 1), width_ms))


def filled(counts: Mapping[int, float], starts: list[int]) -> list[tuple[float, float]]:
    """(bin start in epoch seconds, value) for every bin, zero where nothing happened."""
    return [(start / 1000, float(counts.get(start, 0.0))) for start in starts]


def width_label(width_s: int) -> str:
    """``5 s``, ``2 min``, ``30 min``, ``1 h``, ``1 d``."""
    if width_s % DAY_S == 0:
        return f"{width_s // DAY_S} d"
    if width_s % 3600 == 0:
        return f"{width_s // 3600} h"
    if width_s % 60 == 0:
        return f"{width_s // 60} min"
    return f"{width_s} s"
