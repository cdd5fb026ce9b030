"""One message stamped ahead of its arrival cannot move a detector's "newest": the worker
hands detectors every event no later than its broker receive time plus the policy's
``arrivalSlack`` (10 s; ``at_arrival``).

The poisoning of issue 21 within the 5-minute skew acceptance allows: an ``up`` stamped
4 min 50 s ahead, then a real flap; counters stamped as far ahead, then real samples."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from schemas import Counters, PortEvent, PortSample
from schemas.acceptance import DEFAULT_BOUNDS, at_arrival
from schemas.policy import Policy
from streams.engine import Engine
from streams.flap.logic import FlapState

T0 = 1_795_971_600_000
AHEAD = 4 * 60_000 + 50_000
SLACK = DEFAULT_BOUNDS.arrival_slack_ms


def event(ts: int, n: int, state: str = "down") -> PortEvent:
    return PortEvent(id=f"e{n}", ts=ts, fabric="f", source="opensm", device="leaf-su01-r1",
                     port=7, state=state)


def flap_after_poison(cap: bool) -> list[str]:
    engine, state = Engine(Policy()), FlapState()
    # (event, broker receive time): the poison, then a real four-bounce flap a second later
    arrivals = [(event(T0 + AHEAD, 0, "up"), T0)]
    arrivals += [(event(T0 + 1_000 + i * 2_000, i + 1), T0 + 1_200 + i * 2_000)
                 for i in range(4)]
    fired: list[str] = []
    for ev, received in arrivals:
        state, dets = engine.apply_flap(state, at_arrival(ev, received) if cap else ev)
        fired += [d.id for d in dets]
    return fired


def test_a_flap_after_an_up_stamped_minutes_ahead_is_detected() -> None:
    assert len(flap_after_poison(cap=True)) == 1
    assert flap_after_poison(cap=False) == []  # what the poison did to the detector


def sample(ts: int, n: int, width: str) -> Counters:
    return Counters(id=f"c{n}", ts=ts, fabric="f", source="ufm", device="leaf-su01-r2",
                    ports=[PortSample(port=5, width=width, speed="NDR", symbol_errors=0)])


def test_counters_stamped_ahead_hold_real_samples_back_for_the_slack_only() -> None:
    engine = Engine(Policy())
    value, dets, _, _ = engine.apply_counters(None, at_arrival(sample(T0 + AHEAD, 0, "4X"), T0))
    assert dets == []
    # within the slack a real sample is not newer than the capped one (skipped: cumulative
    # counters lose nothing); the first after it is judged
    value, dets, _, _ = engine.apply_counters(value, at_arrival(sample(T0 + 5_000, 1, "1X"),
                                                                T0 + 5_100))
    assert dets == []
    value, dets, _, _ = engine.apply_counters(value, at_arrival(
        sample(T0 + SLACK + 5_000, 2, "1X"), T0 + SLACK + 5_100))
    assert [str(d.detection) for d in dets] == ["degraded_link"]


def test_an_event_within_the_slack_is_unchanged() -> None:
    ev = event(T0, 1)
    assert at_arrival(ev, T0) is ev and at_arrival(ev, T0 + 5) is ev and at_arrival(ev, None) is ev
    assert at_arrival(ev, T0 - SLACK) is ev  # a clock a few seconds ahead: taken as written
    capped = at_arrival(event(T0 + 30_000, 1), T0)
    assert (capped.ts, capped.id) == (T0 + SLACK, "e1")


@given(st.lists(st.tuples(st.integers(-300_000, 300_000), st.integers(0, 10_000)),
                min_size=1, max_size=30))
def test_no_event_reaches_a_detector_after_its_arrival(offsets: list[tuple[int, int]]) -> None:
    received = T0
    for n, (skew, gap) in enumerate(offsets):
        received += gap
        seen = at_arrival(event(received + skew, n), received)
        assert seen.ts == min(received + skew, received + SLACK)


def test_the_ledger_stores_an_event_stamped_ahead_at_its_arrival() -> None:
    """The ledger's counter deltas and port state have a "newest" too: its ingest takes
    events as the detectors do."""
    from ledger.ingest import decode_record
    from schemas import encode

    raw = encode(event(T0 + AHEAD, 9, "up"))
    stored = decode_record("fabric.port-events", raw, T0)
    assert isinstance(stored, PortEvent) and (stored.ts, stored.id) == (T0 + SLACK, "e9")
    assert decode_record("fabric.port-events", encode(event(T0 - 5, 8)), T0).ts == T0 - 5  # type: ignore[union-attr]
    assert decode_record("fabric.port-events", raw, None).ts == T0 + AHEAD  # type: ignore[union-attr]


def test_a_slack_beyond_the_lateness_is_refused() -> None:
    import pytest

    from schemas import ContractError

    assert Policy.from_yaml("fabricHealth: {stream: {arrivalSlack: 0s}}")
    with pytest.raises((ContractError, ValueError), match="arrivalSlack"):
        Policy.from_yaml("fabricHealth: {stream: {arrivalSlack: 2m, allowedLateness: 60s}}")
