"""Probation's judgements, pure: which kind a check is, and whether a link's probes meet the
pinned baseline at the SLO fraction.

No I/O and no clock: the activity looks the baselines up and the workflow decides what a
verdict means (re-isolate and the next rung, or a human when a check could not be judged).
A verdict is one of ``passed``, ``failed`` (the link measured below the SLO) or
``unconfigured`` (nothing to compare: no command, no pinned baseline, or only a baseline
learned on this very cable): the last never passes (fail closed).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ledger.baselines import PinnedBaseline
from schemas import Counters
from schemas.policy import Policy

CheckKind = Literal["ib_write_bw", "nccl_allreduce", "counters", "other"]
Verdict = Literal["passed", "failed", "unconfigured"]
PROBE_KINDS = frozenset({"ib_write_bw", "nccl_allreduce"})
# How the runbook's ``probation`` records begin, for readers of the ledger (the report)
PASSED_NOTE = "passed:"
FAILED_NOTE = "failed in probation:"
HOLD_NOTE = "could not be judged:"


def probation_outcomes(rows: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Per runbook, from its ``probation`` records (workflow_id, ts_ms, outcome, note):
    ``passed`` probation, ``failed`` it at least once (``failures`` in all), and
    ``waiting_on_human`` (its last record is a check that could not be judged)."""
    by_wf: dict[str, list[Mapping[str, Any]]] = {}
    for row in sorted(rows, key=lambda r: (str(r["workflow_id"]), int(r["ts_ms"]))):
        by_wf.setdefault(str(row["workflow_id"]), []).append(row)
    out = {"passed": 0, "failed": 0, "failures": 0, "waiting_on_human": 0}
    for records in by_wf.values():
        notes = [(str(r["outcome"]), str(r.get("note") or "")) for r in records]
        fails = sum(1 for o, n in notes if o == "failed" and FAILED_NOTE in n)
        out["failures"] += fails
        out["failed"] += bool(fails)
        if any(o == "done" and n.startswith(PASSED_NOTE) for o, n in notes):
            out["passed"] += 1
        elif notes and HOLD_NOTE in notes[-1][1]:
            out["waiting_on_human"] += 1
    return out


def check_kind(check: str) -> CheckKind:
    """``ib_write_bw-per-rail`` -> ib_write_bw, ``nccl-allreduce-baseline`` -> nccl_allreduce,
    ``counters-clean-24h`` -> counters (the soak); anything else runs as a plain command."""
    if check.startswith("counters-clean"):
        return "counters"
    if check.startswith("ib_write_bw"):
        return "ib_write_bw"
    if check.startswith("nccl"):
        return "nccl_allreduce"
    return "other"


@dataclass(frozen=True, slots=True)
class ProbeJudgement:
    verdict: Verdict
    detail: str
    measured: dict[str, Any] = field(default_factory=dict)


BaselineLookup = Callable[[int, str, int, int], PinnedBaseline | None]


def judge_probes(check: str, probes: Iterable[Mapping[str, Any]], *, rail: int,
                 lookup: BaselineLookup, fraction: float, cable: Iterable[str],
                 scale: int, size: int | None = None) -> ProbeJudgement:
    """Every run (a direction, or the one all-reduce) at ``size`` (default: the largest
    size each measured) against the pinned baseline; the slowest run decides.

    A baseline whose runs crossed one of ``cable``'s ends was learned from the link under
    repair and is refused: a bad link must not be its own yardstick.
    """
    ends = set(cable)
    runs: list[dict[str, Any]] = []
    rows = [dict(p) for p in probes]
    if not rows:
        return ProbeJudgement("unconfigured", f"{check}: the tool reported no measurement")
    by_run: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_run.setdefault(str(row.get("run", "")), []).append(row)
    for run, measured in sorted(by_run.items()):
        want = size if size is not None else max(int(r["size_bytes"]) for r in measured)
        hit = [r for r in measured if int(r["size_bytes"]) == want]
        if not hit:
            sizes = sorted({int(r["size_bytes"]) for r in measured})
            return ProbeJudgement("unconfigured", f"{check}: no result at {want} B "
                                                  f"(measured {sizes})")
        row = hit[0]
        probe = str(row["probe"])
        base = lookup(rail, probe, want, scale)
        if base is None:
            return ProbeJudgement("unconfigured", (
                f"{check}: no pinned baseline for rail {rail} {probe} {want} B scale {scale}"
                f" (fabricwatch baseline pin)"), {"runs": runs})
        crossed = sorted(ends & set(base.links))
        if crossed:
            return ProbeJudgement("unconfigured", (
                f"{check}: the pinned baseline for rail {rail} {probe} {want} B was measured "
                f"across {', '.join(crossed)}, the cable under repair; pin one from another "
                f"link"), {"runs": runs})
        gbps = float(row["bw_gbps"])
        ratio = gbps / base.gbps if base.gbps > 0 else 0.0
        runs.append({"run": run, "probe": probe, "size_bytes": want, "scale": scale,
                     "bw_gbps": round(gbps, 3), "baseline_gbps": base.gbps,
                     "fraction": round(ratio, 4), "slo_fraction": fraction,
                     "baseline_pinned_by": base.pinned_by, "src": row.get("src"),
                     "dst": row.get("dst"), "passed": ratio >= fraction})
    worst = min(runs, key=lambda r: r["fraction"])
    measured_out = {"runs": runs, "worst_fraction": worst["fraction"],
                    "slo_fraction": fraction}
    text = ", ".join(f"{r['run'] or r['probe']} {r['bw_gbps']:.1f}/{r['baseline_gbps']:.1f} "
                     f"Gb/s ({r['fraction']:.0%})" for r in runs)
    if all(r["passed"] for r in runs):
        return ProbeJudgement("passed", f"{check}: {text}, at least {fraction:.0%} of the "
                                        f"pinned baseline", measured_out)
    return ProbeJudgement("failed", f"{check}: {text}; below {fraction:.0%} of the pinned "
                                    f"baseline", measured_out)


# Detections of the counter detector that mean the link is not clean (saturation, congestion
# and the plan's width/speed are judged elsewhere).
SOAK_FAILS = frozenset({"error_rate", "ber", "drop_rate", "flap"})


def hysteresis_policy(policy: Policy, normal: Mapping[str, float]) -> Policy:
    """The stream's policy with the *normal* thresholds in place of the error thresholds:
    what the counter detector must not fire on for the whole soak. The port's own baseline
    excuses nothing here (factor 1): a link that was bad does not set its own floor."""
    fh = policy.fabric_health
    er = fh.error_rates.model_copy(update={
        "symbol_errors_per_hour": normal["symbol_errors_per_hour"],
        "link_error_recovery_per_hour": normal["link_error_recovery_per_hour"],
        "rcv_errors_per_hour": normal["rcv_errors_per_hour"],
        "xmit_discards_per_hour": normal["xmit_discards_per_hour"], "baseline_factor": 1.0})
    ber = fh.ber.model_copy(update={"fire_at": "normal"})  # the table's normal levels
    return policy.model_copy(update={"fabric_health": fh.model_copy(
        update={"error_rates": er, "ber": ber})})


def judge_soak(samples: Sequence[Counters], normal: Mapping[str, float], *,
               policy: Policy | None = None) -> tuple[bool, str, dict[str, Any]]:
    """Replay the soak's counter samples of one port (oldest first) through the stream's own
    counter detector with the normal thresholds; any error-rate or BER episode, or more
    link-downs than ``max_link_downs``, fails it. No sample is no evidence: fails."""
    from streams.counters.logic import CountersDetector

    if not samples:
        return False, "no counter sample during the soak (nobody measured the link)", {}
    detector = CountersDetector(hysteresis_policy(policy or Policy(), normal))
    state = None
    fired: list[str] = []
    downs = 0
    for event in samples:
        state, detections, link_downs = detector.step(state, event)
        fired += [f"{d.detection}" for d in detections if str(d.detection) in SOAK_FAILS]
        downs += sum(c.increase for c in link_downs)
    allowed = int(normal.get("max_link_downs", 0))
    measured = {"samples": len(samples), "episodes": sorted(set(fired)), "link_downs": downs,
                "max_link_downs": allowed}
    if fired or downs > allowed:
        why = ", ".join(sorted(set(fired))) or "no episode"
        return False, (f"above the normal thresholds during the soak: {why}; {downs} "
                       f"link-down(s) (at most {allowed})"), measured
    return True, (f"below the normal thresholds for the whole soak ({len(samples)} samples, "
                  f"{downs} link-down(s))"), measured
