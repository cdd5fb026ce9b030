"""All detectors over in-memory, per-key state: what ``replay`` runs, key for key like the worker.

The worker keeps the same states in changelogged tables keyed exactly as here (port key for
flap, device for counters, rail for probes, fabric for topology, SU for the breaker) and
calls the same ``step`` functions; only the storage and the transport differ.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from schemas import ActionRecord, Counters, Detection, Event, PortEvent, Probe, Topology
from schemas.policy import Policy
from streams.breaker import logic as breaker
from streams.counters.logic import CountersDetector
from streams.degraded_link.logic import Expectation, step_topology
from streams.flap.logic import CounterDowns, FlapState
from streams.flap.logic import step as flap_step
from streams.probes import logic as probes


@dataclass
class Context:
    """What the fabric's plan and topology tell the detectors (all optional)."""

    expectation: Callable[[str, int], Expectation | None] | None = None
    paths: probes.PathFn | None = None
    su_of: Callable[[str], str | None] = breaker.su_from_name
    ports_per_su: Mapping[str, int] = field(default_factory=dict)


class Engine:
    """Feed contract events one by one; get the detections they cause, in order."""

    def __init__(self, policy: Policy, context: Context | None = None) -> None:
        self.policy = policy
        self.context = context or Context()
        self.counters = CountersDetector(policy, self.context.expectation)
        self.flap: dict[str, FlapState] = {}
        self.devices: dict[str, Any] = {}
        self.rails: dict[str, Any] = {}
        self.fabrics: dict[str, dict[str, str]] = {}
        self.sus: dict[str, Any] = {}

    def feed(self, event: Event | CounterDowns) -> list[Detection]:
        out: list[Detection] = []
        if isinstance(event, PortEvent | CounterDowns):
            out += self.feed_flap(event)
        elif isinstance(event, Counters):
            state, dets, downs = self.counters.step(self.devices.get(event.device), event)
            self.devices[event.device] = state
            out += dets
            for d in downs:
                out += self.feed_flap(d)
        elif isinstance(event, Probe):
            key = str(event.rail)
            self.rails[key], dets = probes.step(self.rails.get(key), event, self.policy,
                                                self.context.paths)
            out += dets
        elif isinstance(event, Topology):
            self.fabrics[event.fabric], dets = step_topology(
                self.fabrics.get(event.fabric), event, self.policy, self.context.expectation)
            out += dets
        elif isinstance(event, Detection | ActionRecord):
            return self.feed_breaker(event)
        for det in list(out):
            out += self.feed_breaker(det)
        return out

    def feed_flap(self, event: PortEvent | CounterDowns) -> list[Detection]:
        key = f"{event.device}:{event.port}"
        state, dets = flap_step(self.flap.get(key) or FlapState(), event, self.policy)
        self.flap[key] = state
        return dets

    def feed_breaker(self, event: Detection | ActionRecord) -> list[Detection]:
        su = self.context.su_of(event.device)
        if su is None:
            return []
        self.sus[su], dets = breaker.step(
            self.sus.get(su), event, self.policy, su=su,
            ports_in_su=self.context.ports_per_su.get(su, breaker.DEFAULT_PORTS_PER_SU))
        return dets
