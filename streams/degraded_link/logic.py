"""Degraded link: width or speed below what the cable plan (or, where silent, the policy) expects.

A port is judged from the ``width``/``speed`` of its counter samples and from the links of
a discovered topology (both ends), with one episode state per port whichever source
reports it: ``link_states`` turns a snapshot into per-device ``LinkStates`` that the
counters detector (``streams.counters.logic``) judges beside the device's samples. It fires
``degraded_link`` once per episode: the episode opens when the port is first seen below
expectation and ends (re-arms) when it trains back to at least the expectation. Unknown
width/speed text is not judged (no guessing). The episode id is
``degraded_link/{device}:{port}/degraded/{ts it was first seen}``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from schemas import Topology
from schemas.policy import SPEED_RANK, WIDTH_RANK, DegradedLink, Policy

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


@dataclass(frozen=True, slots=True)
class LinkStates:
    """How one device's ports trained, as one topology snapshot saw them.

    The counters detector judges these with the same per-port episode state as the
    device's counter samples, so a link seen degraded by both fires once per episode.
    ``id`` is ``{topology id}/{device}`` (a redelivered snapshot repeats it);
    ``fabric_wide`` is set when the snapshot as a whole looks like a wrong expectation.
    """

    id: str
    fabric: str
    device: str
    ts: int
    ports: tuple[tuple[int, str | None, str | None], ...]
    fabric_wide: str | None = None

    def to_wire(self) -> dict[str, Any]:
        return {"id": self.id, "fabric": self.fabric, "device": self.device, "ts": self.ts,
                "ports": [list(p) for p in self.ports], "fabric_wide": self.fabric_wide}

    @classmethod
    def from_wire(cls, obj: dict[str, Any]) -> LinkStates:
        return cls(id=str(obj["id"]), fabric=str(obj["fabric"]), device=str(obj["device"]),
                   ts=int(obj["ts"]),
                   ports=tuple((int(p), w, s) for p, w, s in obj["ports"]),
                   fabric_wide=obj.get("fabric_wide"))


def link_states(topology: Topology, policy: Policy,
                expectation: Callable[[str, int], Expectation | None] | None = None
                ) -> list[LinkStates]:
    """Every link end of a topology snapshot, grouped by device (in order of appearance)."""
    section = policy.fabric_health.degraded_link
    per_device: dict[str, list[tuple[int, str | None, str | None]]] = {}
    ends = 0
    degraded = 0
    for link in topology.links:
        for device, port in ((link.a_device, link.a_port), (link.b_device, link.b_port)):
            per_device.setdefault(device, []).append((port, link.width, link.speed))
            ends += 1
            expect = expectation(device, port) if expectation else None
            degraded += check_link(link.width, link.speed, expect, section) is not None
    # When much of the fabric is "below expectation" at once, the expectation is wrong (an
    # HDR fabric judged by an NDR policy), not the links: ticket it, isolate nothing, or
    # every runbook in the fabric would start together.
    wide = None
    if degraded > MISMATCH_MIN_ENDS and degraded > MISMATCH_FRACTION * ends:
        wide = f"{degraded} of {ends} link ends below expectation: check the policy or plan"
    return [LinkStates(id=f"{topology.id}/{device}", fabric=topology.fabric, device=device,
                       ts=topology.ts, ports=tuple(ports), fabric_wide=wide)
            for device, ports in per_device.items()]
