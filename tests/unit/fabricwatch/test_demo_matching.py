"""The demo matches every detection against its scenario, however many arrive at once."""

from __future__ import annotations

from fabricwatch.demo.view import LiveState
from schemas import DetectionKind
from streams.common import make_detection


def test_a_burst_larger_than_the_shown_list_reaches_the_matcher_whole() -> None:
    live = LiveState()
    burst = [make_detection(kind=DetectionKind.SLOW_PROBE, fabric="f", device="leaf-1",
                            port=p, ts=1_700_000_000_000, action="ticket",
                            episode=f"e{p}", evidence={}) for p in range(1, 40)]
    for det in burst:
        live.add_detection(det)
    assert len(live.detections) == 12  # what the screen shows
    taken, live.unmatched = live.unmatched, []
    assert taken == burst  # what the scenario is matched against: all, in order
    live.add_detection(burst[0])
    assert live.unmatched == [burst[0]]
