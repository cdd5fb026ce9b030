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


def test_the_flapping_link_is_proved_by_its_flap_or_by_a_probe_verdict_on_its_cable() -> None:
    # the cable may be isolated on the probes' verdict before the fault's third down, and
    # then no flap ever happens: the localised verdict on that cable proves it, nothing else
    from fabricwatch.demo.scenario import build_scenario

    scenario = build_scenario("su", short=True, fabric_name="f")
    flapping = next(e for e in scenario.expectations if e.label == "flapping link")
    device, port = sorted(flapping.ports)[0].rsplit(":", 1)

    def det(kind: DetectionKind, at: str = device, evidence: dict | None = None):  # type: ignore[no-untyped-def,type-arg]
        return make_detection(kind=kind, fabric="f", device=at, port=int(port),
                              ts=1_700_000_000_000, action="isolatePort", episode="e",
                              evidence=evidence or {})

    on_paths = {"localised": True, "by": "paths"}
    assert flapping.matches(det(DetectionKind.FLAP))
    assert flapping.matches(det(DetectionKind.SLOW_PROBE, evidence=on_paths))
    assert not flapping.matches(det(DetectionKind.SLOW_PROBE))  # an endpoint's ticket
    assert not flapping.matches(det(DetectionKind.SLOW_PROBE, at="leaf-su09-r9",
                                    evidence=on_paths))
    assert not flapping.matches(det(DetectionKind.BER, evidence=on_paths))
    others = [e for e in scenario.expectations if e.label != "flapping link"]
    assert all(e.or_localised is None for e in others)
