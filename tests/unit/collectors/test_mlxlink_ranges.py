"""mlxlink's module readings end with the module's own range (``61 [-10..80]``): parsed as
its thresholds, and anything else in the brackets is a clear error, never a wrong number."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from collectors.errors import ParseError
from collectors.telemetry import _mlx_range

finite = st.floats(-100, 100, allow_nan=False).map(lambda x: round(x, 3))


@given(finite, finite, finite)
def test_range_round_trips(value: float, a: float, b: float) -> None:
    low, high = min(a, b), max(a, b)
    assert _mlx_range(f"{value} [{low}..{high}]", "x") == (low, high)
    assert _mlx_range(f"{value},{value} [{low}..{high}]", "x") == (low, high)


@given(st.text(max_size=30))
def test_arbitrary_text_is_a_range_none_or_a_parse_error(text: str) -> None:
    try:
        got = _mlx_range(text, "x")
    except ParseError:
        return
    assert got is None or got[0] <= got[1]


def test_reversed_or_malformed_range_is_refused() -> None:
    with pytest.raises(ParseError):
        _mlx_range("61 [80..-10]", "temperature")
    with pytest.raises(ParseError):
        _mlx_range("61 [1.2.3..4]", "temperature")
    assert _mlx_range("N/A", "temperature") is None
    assert _mlx_range(None, "temperature") is None
