"""Degraded link: width or speed below what the cable plan (or, where silent, the policy) expects.

A port is judged from the ``width``/``speed`` of its counter samples and from the links of
a discovered topology (both ends). It fires ``degraded_link`` once per episode: the episode
opens when the port is first seen below expectation and ends (re-arms) when it trains back
to at least the expectation. Unknown width/speed text is not judged (no guessing).
The episode id is ``degraded_link/{device}:{port}/degraded/{ts it was first seen}``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from schemas import Detection, DetectionKind, Topology
from schemas.policy import SPEED_RANK, WIDTH_RANK, DegradedLink, Policy
from streams.common import episode_id, make_detection

# (width, speed) the plan expects for a port; either may be None (plan silent on it).
Expectation = tuple[str | None, str | None]


def check_link(width: str | None, speed: str | None, expect: Expectation | None,
               policy: DegradedLink) -> dict[str, Any] | None:
    """Evidence when the link is below expectation, else None."""
    want_w = (expect[0] if expect and expect[0] else None) or policy.expect_width
    want_s = (expect[1] if expect and expect[1] else None) or policy.expect_speed
    low: list[str] = []
    if width in WIDTH_RANK and want_w in WIDTH_RANK and WIDTH_RANK[width] < WIDTH_RANK[want_w]:
        low.append("width")
    if speed in SPEED_RANK and want_s in SPEED_RANK and SPEED_RANK[speed] < SPEED_RANK[want_s]:
        low.append("speed")
    if not low:
        return None
    return {"width": width, "speed": speed, "expect_width": want_w, "expect_speed": want_s,
            "below": low, "expected_from": "plan" if expect else "policy"}


MISMATCH_MIN_ENDS = 64
MISMATCH_FRACTION = 0.10


def step_topology(state: dict[str, str] | None, topology: Topology, policy: Policy,
                  expectation: Callable[[str, int], Expectation | None] | None = None
                  ) -> tuple[dict[str, str], list[Detection]]:
    """Judge every link end of a topology snapshot. State: port key -> open episode id."""
    opened: dict[str, str] = dict(state or {})
    section = policy.fabric_health.degraded_link
    detections: list[Detection] = []
    verdicts: list[tuple[str, int, dict[str, Any] | None]] = []
    for link in topology.links:
        for device, port in ((link.a_device, link.a_port), (link.b_device, link.b_port)):
            expect = expectation(device, port) if expectation else None
            verdicts.append((device, port, check_link(link.width, link.speed, expect, section)))
    degraded = sum(1 for _, _, v in verdicts if v is not None)
    # When much of the fabric is "below expectation" at once, the expectation is wrong (an
    # HDR fabric judged by an NDR policy), not the links: ticket it, isolate nothing, or
    # every runbook in the fabric would start together.
    mismatch = degraded > MISMATCH_MIN_ENDS and degraded > MISMATCH_FRACTION * len(verdicts)
    action = "ticket" if mismatch else section.action
    for device, port, verdict in verdicts:
        key = f"{device}:{port}"
        if verdict is None:
            opened.pop(key, None)
        elif key not in opened:
            eid = episode_id(DetectionKind.DEGRADED_LINK, device, port, topology.ts,
                             "degraded")
            opened[key] = eid
            evidence = {**verdict, "source": "topology"}
            if mismatch:
                evidence["fabric_wide"] = (f"{degraded} of {len(verdicts)} link ends below "
                                           "expectation: check the policy or plan")
            detections.append(make_detection(
                kind=DetectionKind.DEGRADED_LINK, fabric=topology.fabric, device=device,
                port=port, ts=topology.ts, action=action, episode=eid, evidence=evidence,
                seen_by="topology"))
    return opened, detections
