"""All detectors over in-memory, per-key state: what ``replay`` runs, key for key like the worker.

The worker keeps the same states in changelogged tables keyed exactly as here (port key for
flap, (device, source) for counters, rail for probes, fabric for topology and the SM, SU for
the breaker; the
stale detector's scope is the fabric, of which a worker sees the devices on the counters
partitions it holds) and
calls the same ``step`` functions; only the storage and the transport differ.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from schemas import (
    ActionRecord,
    CounterColumns,
    Counters,
    CountersMessage,
    Detection,
    Event,
    Incident,
    Maintenance,
    PortEvent,
    Probe,
    SmEvent,
    Topology,
)
from schemas.policy import Policy
from streams.breaker import logic as breaker
from streams.common import state_key
from streams.counters import columns
from streams.counters.logic import OLD, CountersDetector, counters_key
from streams.degraded_link.logic import Expectation, step_topology
from streams.flap.logic import CounterDowns, Excuse, FlapState
from streams.flap.logic import step as flap_step
from streams.incidents import logic as incidents
from streams.probes import logic as probes
from streams.probes.paths import RouteBook
from streams.sm import logic as sm
from streams.stale.logic import StaleDetector, StreamReport

# How many recent message ids a keyed state remembers, to recognise a redelivery.
RECENT = 32
_first = itemgetter(0)


def once(value: dict[str, Any] | None, msg_id: str,
         apply: Callable[[Any], tuple[Any, list[Detection], list[CounterDowns]]]
         ) -> tuple[dict[str, Any], list[Detection], list[CounterDowns], bool]:
    """Apply a message to a keyed state at most once; a redelivery repeats its outputs.

    ``value`` is what the table keeps for the key: ``{"s": state, "r": recent}`` where
    ``recent`` lists the last ``RECENT`` message ids with the detections and counter downs
    each produced (as wire dicts). A message id found there is a redelivery (at-least-once
    after a crash, or a duplicate): its outputs are returned again, identical, and the
    state is untouched. Returns (value, detections, counter downs, was it a redelivery).

    A message the state finds older than itself (the counters detector marks it ``OLD``:
    every sample older than its port's last) is applied but not remembered. A worker whose
    state is ahead of where it reads again (a kill -9 with the local store ahead of the
    committed offset by more than ``RECENT`` messages of a device) would otherwise push the
    ids of the messages still ahead out of the list with each old one, and take their
    redeliveries for new ones: outputs never sent before the kill were lost for good.
    """
    box = value if value is not None else {"s": None, "r": []}
    if msg_id in map(_first, box["r"]):  # (the scan in C: most messages are new)
        for rid, dets, downs in box["r"]:
            if rid == msg_id:
                return (box, [Detection.model_validate(d) for d in dets],
                        [CounterDowns.from_wire(d) for d in downs], True)
    box["s"], detections, counter_downs = apply(box["s"])
    if type(box["s"]) is dict and box["s"].pop(OLD, False):
        return box, detections, counter_downs, False  # older than the state: not remembered
    remember(box, [msg_id, [d.to_wire() for d in detections],
                   [d.to_wire() for d in counter_downs]])
    return box, detections, counter_downs, False


def remember(box: dict[str, Any], entry: list[Any]) -> None:
    """A message's entry (its id, then what it produced, as wire data) among the value's
    last ``RECENT``."""
    recent: list[Any] = box["r"]
    recent.append(entry)
    del recent[:-RECENT]


@dataclass
class Context:
    """What the fabric's plan and topology tell the detectors (all optional).

    ``paths``: probe routes where no topology snapshot of the probe's fabric has been seen
    yet (the cable plan's, ``streams.probes.paths.ProbeRoutes``); a snapshot's routes win.
    ``pinned``: a pinned baseline for (probe, scale), ``ledger.baselines``.
    ``fabric``: the fabric the plan describes (the worker's, as the topology diff takes it);
    what comes from the plan (expectations, media, uplinks, routes, SU sizes) applies to its
    events only. Another fabric served by the same worker (a RoCE fabric beside the IB one,
    with the same switch names) is judged by its own topology, or by the policy. None: every
    fabric (a context built for one fabric, as the tests and replay do).
    """

    expectation: Callable[[str, int], Expectation | None] | None = None
    media: Callable[[str, int], str | None] | None = None  # the plan's cable media
    paths: probes.PathFn | None = None
    pinned: probes.PinnedFn | None = None
    su_of: Callable[[str], str | None] = breaker.su_from_name
    # Ports per SU from the cable plan (every worker loads it): first for the budget.
    ports_per_su: Mapping[str, int] = field(default_factory=dict)
    # (device) -> a leaf's uplink ports (its ECMP peers), for the hot-uplink rule
    uplinks: Callable[[str], frozenset[int] | None] | None = None
    fabric: str | None = None

    def planned(self, fabric: str) -> bool:
        """Whether the plan's facts apply to an event of ``fabric``."""
        return self.fabric is None or fabric == self.fabric


class Engine:
    """Feed contract events one by one; get the detections they cause, in order."""

    def __init__(self, policy: Policy, context: Context | None = None) -> None:
        self.policy = policy
        self.context = context or Context()
        self.counters = CountersDetector(policy, self.context.expectation,
                                         self.context.uplinks, media=self.context.media,
                                         planned=self.context.planned)
        self.stale = StaleDetector(policy)
        self.scopes: dict[str, Any] = {}  # stale detector states by scope
        self.flap: dict[str, FlapState] = {}
        self.devices: dict[str, Any] = {}
        self.rails: dict[str, Any] = {}
        self.fabrics: dict[str, Any] = {}
        self.sus: dict[str, Any] = {}
        self.correlation: dict[str, Any] = {}  # incident correlator states by fabric
        self.cabling: dict[str, Any] = {}  # their topology indexes by fabric
        self.sms: dict[str, Any] = {}  # subnet-manager states by fabric
        self.su_ports: dict[str, dict[str, int]] = {}  # by fabric, from the cabling index
        self.routes = RouteBook()  # probe routes from each fabric's newest topology

    def feed(self, event: Event | CounterDowns) -> list[Detection]:
        """The detections ``event`` causes (annotated with incident / maintenance)."""
        return [d for d in self.feed_all(event) if isinstance(d, Detection)]

    def feed_all(self, event: Event | CounterDowns) -> list[Detection | Incident]:
        """Detections and incidents, in the order the worker would publish them.

        The correlator sees a port event before the flap detector does, so the excuses of
        an incident it opens apply to that very down; every detection passes through it
        (for ``incident`` / ``maintenance``), and only one that carries neither reaches the
        breaker's accounting.
        """
        out: list[Detection | Incident] = []
        if isinstance(event, Topology):
            self.cabling[event.fabric] = incidents.index_topology(
                event, self.cabling.get(event.fabric))
            self.learn_cabling(event.fabric, self.cabling[event.fabric])
        if isinstance(event, PortEvent | Maintenance | ActionRecord):
            for item in self.correlate(event):
                out.append(item)
                if isinstance(item, Detection) and breaker.withdraws(item):
                    self.feed_breaker(item)  # an explained flap's request withdrawn
        elif isinstance(event, Counters | Probe | Topology | CounterDowns | SmEvent):
            out += self.correlate(incidents.Tick(f"tick/{event.id}", event.fabric, event.ts))
        for det in self.detect(event):
            for item in self.correlate(det):
                out.append(item)
                if isinstance(item, Detection) and item.incident is None \
                        and item.maintenance is None:
                    for more in self.feed_breaker(item):
                        out += self.correlate(more)
        if isinstance(event, Detection | ActionRecord):
            if not isinstance(event, Detection) or (event.incident is None
                                                    and event.maintenance is None):
                for more in self.feed_breaker(event):
                    out += self.correlate(more)
        return out

    def correlate(self, event: incidents.CorrelatorInput) -> list[Detection | Incident]:
        """One event through the fabric's correlator; its excuses go to the flap states."""
        self.correlation[event.fabric], outs = incidents.step(
            self.correlation.get(event.fabric), self.cabling.get(event.fabric), event,
            self.policy, su_of=self.context.su_of)
        for excuse in outs.excuses:
            self.feed_flap(excuse)
        return [*outs.incidents, *outs.detections, *outs.followups]

    def detect(self, event: Event | CounterDowns) -> list[Detection]:
        """What the detectors (not the breaker) make of ``event``, before correlation."""
        out: list[Detection] = []
        if isinstance(event, PortEvent | CounterDowns):
            out += self.feed_flap(event)
        elif isinstance(event, Counters | CounterColumns):
            if isinstance(event, CounterColumns):  # the same states and outputs as its rows
                event = event.rows()
            parts = event.split()  # a host agent's message: one part per HCA
            for part in parts:
                dkey = counters_key(part.fabric, part.device, part.source)
                self.devices[dkey], dets, downs, _ = self.apply_counters(
                    self.devices.get(dkey), part)
                out += dets
                for d in downs:
                    out += self.feed_flap(d)
            self.scopes[event.fabric], dets, _, _ = self.apply_stale(
                self.scopes.get(event.fabric), event, parts=parts)
            out += dets
        elif isinstance(event, Probe):
            key = state_key(event.fabric, str(event.rail))
            self.rails[key], dets, _, _ = self.apply_probe(self.rails.get(key), event)
            out += dets
        elif isinstance(event, Topology):
            self.fabrics[event.fabric], dets, _, _ = self.apply_topology(
                self.fabrics.get(event.fabric), event)
            out += dets
        elif isinstance(event, SmEvent):
            self.sms[event.fabric], dets, _, _ = self.apply_sm(self.sms.get(event.fabric),
                                                               event)
            out += dets
        return out

    def feed_flap(self, event: PortEvent | CounterDowns | Excuse) -> list[Detection]:
        key = state_key(event.fabric, f"{event.device}:{event.port}")
        self.flap[key], dets = self.apply_flap(self.flap.get(key), event)
        return dets

    def feed_breaker(self, event: Detection | ActionRecord) -> list[Detection]:
        su = self.context.su_of(event.device)
        if su is None:
            return []
        # SU names (su01, ...) repeat across fabrics; each fabric's SU has its own budget.
        key = state_key(event.fabric, su)
        self.sus[key], dets, _, _ = self.apply_breaker(self.sus.get(key), su, event)
        return dets

    def learn_cabling(self, fabric: str, index: Mapping[str, Any] | None) -> None:
        """The SU sizes of ``fabric`` from the correlator's cabling index (its port keys)."""
        if not index:
            return
        ends = (key.rsplit(":", 1) for key in index["peer"])
        self.su_ports[fabric] = breaker.ports_per_su(
            ((device, int(port)) for device, port in ends), self.context.su_of)

    def ports_in_su(self, fabric: str, su: str) -> int:
        """The plan's count, else the fabric's cabling's, else the default."""
        planned = self.context.ports_per_su.get(su) if self.context.planned(fabric) else None
        if planned:
            return planned
        return self.su_ports.get(fabric, {}).get(su) or breaker.DEFAULT_PORTS_PER_SU

    # The keyed steps the worker's agents call with the table's value for the key.

    def apply_counters(self, value: dict[str, Any] | None, event: Counters
                       ) -> tuple[dict[str, Any], list[Detection], list[CounterDowns], bool]:
        return once(value, event.id, lambda st: self.counters.step(st, event))

    def apply_counter_columns(self, value: dict[str, Any] | None, event: CounterColumns,
                              view: columns.View | None
                              ) -> tuple[dict[str, Any], list[Detection], list[CounterDowns],
                                         bool, columns.View | None]:
        """``apply_counters`` of a columnar message (the same state and outputs), with the
        column view the last call returned for this key (``streams.counters.columns``)."""
        views: list[columns.View | None] = [view]

        def run(st: Any) -> tuple[Any, list[Detection], list[CounterDowns]]:
            new, dets, downs, views[0] = self.counters.step_columns(st, event, view)
            return new, dets, downs

        box, dets, downs, redelivered = once(value, event.id, run)
        return box, dets, downs, redelivered, views[0]

    def apply_stale(self, value: dict[str, Any] | None, event: CountersMessage, lane: int = 0,
                    parts: Sequence[StreamReport] | None = None,
                    held: Collection[str] = (), wall_ms: int | None = None
                    ) -> tuple[dict[str, Any], list[Detection], list[CounterDowns], bool]:
        def run(st: Any) -> tuple[Any, list[Detection], list[CounterDowns]]:
            new, dets = self.stale.step(st, event, lane, parts, held, wall_ms)
            return new, dets, []
        return once(value, event.id, run)

    def apply_probe(self, value: dict[str, Any] | None, event: Probe
                    ) -> tuple[dict[str, Any], list[Detection], list[CounterDowns], bool]:
        def run(st: Any) -> tuple[Any, list[Detection], list[CounterDowns]]:
            new, dets = probes.step(st, event, self.policy, self.probe_paths(event),
                                    self.context.pinned)
            return new, dets, []
        return once(value, event.id, run)

    def probe_paths(self, probe: Probe) -> probes.PathFn | None:
        """The routes ``probe`` is localised by: its fabric's newest snapshot before it,
        else the context's (the plan), else none (endpoints only, never isolating)."""
        routes = self.routes.get(probe.fabric, probe.ts)
        if routes is not None:
            return routes
        return self.context.paths if self.context.planned(probe.fabric) else None

    def apply_topology(self, value: dict[str, Any] | None, event: Topology
                       ) -> tuple[dict[str, Any], list[Detection], list[CounterDowns], bool]:
        # The probe routes follow every snapshot seen, a redelivered one too (idempotent).
        self.routes.update(event)
        def run(st: Any) -> tuple[Any, list[Detection], list[CounterDowns]]:
            expectation = (self.context.expectation if self.context.planned(event.fabric)
                           else None)
            new, dets = step_topology(st, event, self.policy, expectation)
            return new, dets, []
        return once(value, event.id, run)

    def apply_sm(self, value: dict[str, Any] | None, event: SmEvent
                 ) -> tuple[dict[str, Any], list[Detection], list[CounterDowns], bool]:
        def run(st: Any) -> tuple[Any, list[Detection], list[CounterDowns]]:
            new, dets = sm.step(st, event, self.policy)
            return new, dets, []
        return once(value, event.id, run)

    def apply_flap(self, value: FlapState | None, event: PortEvent | CounterDowns | Excuse
                   ) -> tuple[FlapState, list[Detection]]:
        return flap_step(value or FlapState(), event, self.policy)

    def apply_correlate(self, value: dict[str, Any] | None, index: dict[str, Any] | None,
                        event: incidents.CorrelatorInput, wall: int | None = None
                        ) -> tuple[dict[str, Any], incidents.Outputs, bool]:
        """The correlator's keyed step, at most once per message id: a redelivery repeats
        its outputs (as ``once`` does for the other detectors), a detection with the very
        annotation it got the first time. What is kept per message is small (the
        annotation, not the detection: the redelivered message is the detection), since
        the whole value is written to the changelog at every message."""
        box = value if value is not None else {"s": None, "r": []}
        for rid, kept in box["r"]:
            if rid == event.id:
                return box, incidents.outputs_from_wire(kept, event), True
        box["s"], outs = incidents.step(box["s"], index, event, self.policy,
                                        su_of=self.context.su_of, wall=wall)
        if not isinstance(event, incidents.Tick):  # ticks are never redelivered as such
            remember(box, [event.id, incidents.outputs_to_wire(outs)])
        return box, outs, False

    def apply_breaker(self, value: dict[str, Any] | None, su: str,
                      event: Detection | ActionRecord
                      ) -> tuple[dict[str, Any], list[Detection], list[CounterDowns], bool]:
        def run(st: Any) -> tuple[Any, list[Detection], list[CounterDowns]]:
            new, dets = breaker.step(st, event, self.policy, su=su,
                                     ports_in_su=self.ports_in_su(event.fabric, su))
            return new, dets, []
        return once(value, event.id, run)
