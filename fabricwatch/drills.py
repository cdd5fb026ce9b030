"""The drills' plan and their count against the simulator's ground truth (pure, no I/O).

The soak (``benchmarks/soak.py``) and the cluster test inject faults on cables they choose,
kill components at times they choose, and at the end hand what they read back (detections
from ``fabric.detections``, runbooks from Temporal, the simulated controller's command log,
counter samples from the ledger) to ``tally``, which says per injected fault whether it was
detected, in how many episodes, by how many distinct detections, how many runbooks ran for
its cable and how many isolate / un-isolate commands reached the controller.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

# The fault kinds the soak injects and the detection that proves each (sim/README.md).
EXPECTED: dict[str, str] = {
    "flap": "flap",
    "degraded_width": "degraded_link",
    "ber": "ber",
}
# Their spec options: a flap of four downs 15 s apart; a link trained at 2X; a BER ramp.
SPEC_OPTIONS: dict[str, str] = {
    "flap": "count=4,every=15s",
    "degraded_width": "width=2X",
    "ber": "raw=5e-5,ramp=60s",
}
CHAOS_TARGETS: tuple[str, ...] = ("stream-worker", "runbook-worker", "ingest", "broker",
                                  "temporal")


@dataclass(frozen=True, slots=True)
class Cable:
    """Two ends, ``device:port`` each; ``a`` is the end the fault is injected on."""

    a_device: str
    a_port: int
    b_device: str
    b_port: int
    su: int | None = None

    @property
    def ends(self) -> frozenset[str]:
        return frozenset({f"{self.a_device}:{self.a_port}", f"{self.b_device}:{self.b_port}"})

    @property
    def workflow_id(self) -> str:
        ends = sorted(self.ends)
        return f"{ends[0]}~{ends[-1]}"


@dataclass(frozen=True, slots=True)
class PlannedFault:
    at_s: float  # seconds after the run's start
    kind: str
    cable: Cable

    @property
    def spec(self) -> str:
        return f"{self.kind}:{self.cable.a_device}:{self.cable.a_port},{SPEC_OPTIONS[self.kind]}"


@dataclass(frozen=True, slots=True)
class ChaosEvent:
    at_s: float
    target: str  # one of CHAOS_TARGETS
    down_s: float  # how long it stays down before it is started again


def plan_faults(rng: random.Random, cables: Sequence[Cable], *, duration_s: float,
                every_s: float, settle_s: float, kinds: Sequence[str] = tuple(EXPECTED)
                ) -> list[PlannedFault]:
    """Faults every ``every_s`` (jittered by a third) from ``every_s / 2`` until ``settle_s``
    before the end, each on a cable of its own, spread round-robin over the SUs so that no
    SU's isolation budget (the breaker) is what stops a runbook."""
    by_su: dict[int | None, list[Cable]] = defaultdict(list)
    for cable in cables:
        by_su[cable.su].append(cable)
    for group in by_su.values():
        rng.shuffle(group)
    order = sorted(by_su, key=lambda s: (s is None, s or 0))
    out: list[PlannedFault] = []
    t = every_s / 2
    i = 0
    while t <= duration_s - settle_s and any(by_su.values()):
        su = order[i % len(order)]
        i += 1
        if not by_su[su]:
            continue
        out.append(PlannedFault(round(t, 1), kinds[len(out) % len(kinds)], by_su[su].pop()))
        t += every_s * rng.uniform(2 / 3, 4 / 3)
    return out


def plan_chaos(rng: random.Random, *, duration_s: float, start_s: float, settle_s: float,
               targets: Sequence[str] = CHAOS_TARGETS, rounds: int = 1,
               down_s: tuple[float, float] = (5.0, 20.0)) -> list[ChaosEvent]:
    """Each target ``rounds`` times at a random moment in ``[start_s, duration - settle_s]``,
    no two within 20 s of each other (one failure at a time, as the drills are written)."""
    end = duration_s - settle_s
    if end <= start_s:
        return []
    wanted = [t for _ in range(rounds) for t in targets]
    slots = max(len(wanted), 1)
    span = (end - start_s) / slots
    times = [start_s + k * span + rng.uniform(0, max(span - 20.0, 0.0)) for k in range(slots)]
    rng.shuffle(wanted)
    return [ChaosEvent(round(at, 1), target, round(rng.uniform(*down_s), 1))
            for at, target in zip(times, wanted, strict=False)]


@dataclass
class FaultOutcome:
    spec: str
    kind: str
    expected: str
    injected_ms: int
    ends: list[str]
    detected: bool = False
    episodes: int = 0
    detections: int = 0  # distinct detection ids
    extra_per_episode: int = 0  # distinct ids beyond one per episode and source: duplicates
    second_source: int = 0  # episodes reported by a second source as well (see tally)
    first_detection_s: float | None = None  # after the injection
    runbooks: int = 0  # runs of the cable's runbook
    isolates: int = 0  # isolate commands that changed the controller (either end)
    unisolates: int = 0


@dataclass
class Tally:
    faults: list[FaultOutcome] = field(default_factory=list)
    detection_messages: int = 0
    distinct_detections: int = 0
    redelivered: int = 0  # messages whose id was already seen (at-least-once copies)
    by_kind: dict[str, int] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        detected = sum(f.detected for f in self.faults)
        return {
            "faults_injected": len(self.faults),
            "faults_detected": detected,
            "faults_missed": [f.spec for f in self.faults if not f.detected],
            "duplicate_detections": sum(f.extra_per_episode for f in self.faults),
            "episodes_from_two_sources": sum(f.second_source for f in self.faults),
            "episodes_per_fault": _counts(f.episodes for f in self.faults),
            "runbooks_per_fault": _counts(f.runbooks for f in self.faults),
            "isolates_per_cable": _counts(f.isolates for f in self.faults),
            "unisolates_per_cable": _counts(f.unisolates for f in self.faults),
            "detection_messages": self.detection_messages,
            "distinct_detections": self.distinct_detections,
            "redelivered_copies": self.redelivered,
            "detections_by_kind": self.by_kind,
        }

    def as_dict(self) -> dict[str, Any]:
        return {"summary": self.summary(), "faults": [asdict(f) for f in self.faults]}


def tally(injected: Sequence[tuple[PlannedFault, int]], detections: Iterable[Mapping[str, Any]],
          *, fabric: str, runbook_runs: Mapping[str, int] | None = None,
          commands: Iterable[Mapping[str, Any]] = (), slack_ms: int = 1000) -> Tally:
    """Count ``detections`` (decoded ``fabric.detections`` messages) against the faults
    injected (each with the wall-clock ms it was injected at).

    A detection proves a fault when it is of the expected kind, on either end of the fault's
    cable, and not before the injection less ``slack_ms`` (a simulator step is stamped up to
    its end, which can be a sampling interval behind the wall clock it is sent at: give the
    interval). ``runbook_runs`` maps a workflow id to its number of
    runs; ``commands`` is the simulated controller's log (op, key, changed).
    """
    out = Tally()
    seen: dict[str, Mapping[str, Any]] = {}
    for det in detections:
        out.detection_messages += 1
        ident = str(det.get("id", ""))
        if ident in seen:
            out.redelivered += 1
            continue
        seen[ident] = det
    out.distinct_detections = len(seen)
    out.by_kind = dict(Counter(str(d.get("detection")) for d in seen.values()))
    by_end: dict[tuple[str, str], list[Mapping[str, Any]]] = defaultdict(list)
    for det in seen.values():
        if det.get("fabric") != fabric:
            continue
        by_end[(str(det.get("detection")), f"{det.get('device')}:{det.get('port')}")].append(det)
    isolates: Counter[str] = Counter()
    unisolates: Counter[str] = Counter()
    for cmd in commands:
        if not cmd.get("changed"):
            continue
        if cmd.get("op") == "isolate":
            isolates[str(cmd.get("key"))] += 1
        elif cmd.get("op") == "unisolate":
            unisolates[str(cmd.get("key"))] += 1
    runs = runbook_runs or {}
    for planned, injected_ms in injected:
        expected = EXPECTED[planned.kind]
        ends = planned.cable.ends
        matched = [d for end in sorted(ends) for d in by_end.get((expected, end), [])
                   if int(d.get("ts", 0)) >= injected_ms - slack_ms]
        # A duplicate is a second detection of one episode from the same source: the
        # degraded-link detector reports an episode once from the counters path and once
        # from the topology snapshot (evidence.source), by design; those are counted apart.
        episodes: dict[str, set[str]] = defaultdict(set)
        sources: dict[tuple[str, str], set[str]] = defaultdict(set)
        for det in matched:
            episodes[str(det.get("episode"))].add(str(det.get("id")))
            evidence = det.get("evidence")
            source = str(evidence.get("source", "")) if isinstance(evidence, Mapping) else ""
            sources[(str(det.get("episode")), source)].add(str(det.get("id")))
        first = min((int(d.get("ts", 0)) for d in matched), default=None)
        out.faults.append(FaultOutcome(
            spec=planned.spec, kind=planned.kind, expected=expected, injected_ms=injected_ms,
            ends=sorted(ends), detected=bool(matched), episodes=len(episodes),
            detections=sum(len(ids) for ids in episodes.values()),
            extra_per_episode=sum(len(ids) - 1 for ids in sources.values()),
            second_source=len(sources) - len(episodes),
            first_detection_s=None if first is None else round((first - injected_ms) / 1000, 1),
            runbooks=sum(n for wf, n in runs.items() if wf.endswith(planned.cable.workflow_id)),
            isolates=sum(isolates[e] for e in ends), unisolates=sum(unisolates[e] for e in ends)))
    return out


def samples_verdict(published: int, ledger_rows: int, ledger_distinct: int) -> dict[str, Any]:
    """Counter samples the simulator published against the ledger's rows of them."""
    return {"published": published, "ledger_rows": ledger_rows,
            "ledger_distinct": ledger_distinct,
            "lost": max(published - ledger_distinct, 0),
            "doubled": max(ledger_rows - ledger_distinct, 0),
            "unexplained": max(ledger_distinct - published, 0),
            "ok": published == ledger_distinct == ledger_rows}


def _counts(values: Iterable[int]) -> dict[str, int]:
    """How many faults had each value (JSON keys are strings): {"0": 2, "1": 9}."""
    return {str(k): n for k, n in sorted(Counter(values).items())}
