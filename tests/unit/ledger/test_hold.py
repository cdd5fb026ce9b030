"""The ingest's hold: samples that arrive within the lateness leave in event-time order."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.hold import SampleHold

LATENESS = 5_000


def _released(arrivals: list[tuple[int, int, int]], caught_up_at: int) -> list[int]:
    """Feed (partition, ts, arrived) in arrival order; the ts released, in order."""
    hold: SampleHold[int, int] = SampleHold(LATENESS)
    released: list[int] = []
    for offset, (tp, ts, arrived) in enumerate(arrivals):
        # what one batch writes goes in ts order (ledger.base.sample_generations)
        now = [] if hold.offer(tp, offset, ts, arrived, ts) else [ts]
        released += sorted(now + hold.due())
    hold.advance(0, caught_up_at)  # read to the end: the rest leaves
    return released + hold.due()


# One partition, one port: samples every second, each arriving up to the lateness after
# its ts, in the order their arrivals fall.
@st.composite
def _within(draw: st.DrawFn) -> list[tuple[int, int, int]]:
    n = draw(st.integers(1, 40))
    delays = draw(st.lists(st.integers(0, LATENESS), min_size=n, max_size=n))
    samples = [(0, 1_000_000 + i * 1000, 1_000_000 + i * 1000 + d)
               for i, d in enumerate(delays)]
    return sorted(samples, key=lambda s: (s[2], s[1]))


@settings(max_examples=200, deadline=None)
@given(_within())
def test_samples_within_the_lateness_leave_in_event_time_order(
        arrivals: list[tuple[int, int, int]]) -> None:
    assert _released(arrivals, caught_up_at=10**12) == sorted(ts for _, ts, _ in arrivals)


@settings(max_examples=200, deadline=None)
@given(_within())
def test_the_committed_offset_is_the_first_sample_still_held(
        arrivals: list[tuple[int, int, int]]) -> None:
    hold: SampleHold[int, int] = SampleHold(LATENESS)
    released: set[int] = set()
    for offset, (tp, ts, arrived) in enumerate(arrivals):
        if not hold.offer(tp, offset, ts, arrived, offset):
            released.add(offset)
        released.update(hold.due())
        held = set(range(offset + 1)) - released
        assert len(hold) == len(held)
        assert hold.safe_offsets({0: offset + 1}) == {0: min(held, default=offset + 1)}


def test_a_sample_later_than_the_bound_is_not_held() -> None:
    hold: SampleHold[int, str] = SampleHold(LATENESS)
    assert hold.offer(0, 0, 100_000, 100_000, "fresh")  # held: its lateness is to come
    assert not hold.offer(0, 1, 90_000, 100_000, "ten seconds late")  # written at once
    assert hold.due() == []
    assert hold.safe_offsets({0: 2}) == {0: 0}  # the held one is read again after a crash
    hold.advance(0, 105_000)
    assert hold.due() == ["fresh"]
    assert hold.safe_offsets({0: 2}) == {0: 2}


def test_the_watermark_is_the_partitions_arrivals_not_the_consumers_clock() -> None:
    # A consumer far behind: it reads two samples of a port, out of order, long after they
    # arrived. By arrival they were within the bound, so they leave in order.
    hold: SampleHold[int, int] = SampleHold(LATENESS)
    assert hold.offer(0, 0, 10_000, 10_500, 10_000)
    assert hold.offer(0, 1, 9_000, 11_000, 9_000)
    assert hold.due() == []
    assert not hold.offer(0, 2, 20_000, 30_000, 20_000)  # arrived 10 s late: not held
    assert hold.due() == [9_000, 10_000]


def test_partitions_are_apart() -> None:
    hold: SampleHold[str, str] = SampleHold(LATENESS)
    assert hold.offer("p0", 0, 10_000, 10_000, "a")
    assert hold.offer("p1", 0, 10_000, 10_000, "b")
    hold.advance("p1", 20_000)
    assert hold.due() == ["b"]
    assert hold.safe_offsets({"p0": 1, "p1": 1}) == {"p0": 0, "p1": 1}
    assert hold.drop(["p0"]) == 1
    assert len(hold) == 0
    assert hold.watermark("p0") is None
    assert hold.safe_offsets({"p1": 1}) == {"p1": 1}


def test_the_watermark_never_goes_back() -> None:
    hold: SampleHold[int, int] = SampleHold(LATENESS)
    hold.advance(0, 50_000)
    hold.advance(0, 40_000)
    assert hold.watermark(0) == 50_000
    assert not hold.offer(0, 0, 44_000, 41_000, 1)  # 44 s + 5 s is past the watermark


def test_lateness_must_not_be_negative() -> None:
    with pytest.raises(ValueError, match="lateness"):
        SampleHold(-1)
