"""The report's time bins: round widths, a readable count for a 3-minute demo and a day."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from fabricwatch.report.bins import (
    MAX_BINS,
    ROUND_WIDTHS_S,
    bin_starts,
    bin_width_s,
    filled,
    width_label,
)

T0 = 1_796_132_983_155  # an unaligned start (ms)


def test_a_three_minute_demo() -> None:
    width = bin_width_s(180)
    assert width == 5
    starts = bin_starts(T0, T0 + 180_000, width)
    assert 36 <= len(starts) <= 37  # one more when the window is not on a 5 s boundary
    assert starts[0] <= T0 < starts[0] + 5000 and starts[-1] < T0 + 180_000
    assert all(b - a == 5000 for a, b in zip(starts, starts[1:], strict=False))
    assert all(s % 5000 == 0 for s in starts)


def test_a_day() -> None:
    width = bin_width_s(86_400)
    assert width == 1800 and width_label(width) == "30 min"
    day = 1_796_083_200_000  # midnight UTC
    starts = bin_starts(day, day + 86_400_000, width)
    assert len(starts) == 48 and starts[0] == day


def test_labels_and_long_windows() -> None:
    assert [width_label(w) for w in (5, 120, 3600, 86400)] == ["5 s", "2 min", "1 h", "1 d"]
    assert bin_width_s(7 * 86_400) == 10800  # a week: 3 h bins, 56 of them
    assert bin_width_s(400 * 86_400) % 86_400 == 0  # past the ladder: whole days


def test_empty_bins_are_zero() -> None:
    starts = bin_starts(0, 30_000, 10)
    assert filled({10_000: 4}, starts) == [(0.0, 0.0), (10.0, 4.0), (20.0, 0.0)]


@given(st.integers(min_value=60, max_value=90 * 86_400), st.integers(min_value=0,
                                                                       max_value=10**12))
def test_any_window_gets_a_readable_count_of_round_bins(span_s: int, since_ms: int) -> None:
    width = bin_width_s(span_s)
    n = len(bin_starts(since_ms, since_ms + span_s * 1000, width))
    assert width in ROUND_WIDTHS_S or width % 86_400 == 0
    assert n <= MAX_BINS + 1  # +1: a window that does not start on a bin boundary
    assert n >= 20  # the ladder's steps are at most 2.5 x apart
