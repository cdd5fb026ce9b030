"""The report's data, read from any ledger with SQL: what happened, where, and what was done.

``build_report`` only queries; ``fabricwatch.report.html`` and ``.terminal`` only render.
Every query reads through FINAL so replayed batches never count twice.
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, Field

from fabricwatch.report.bins import bin_starts, bin_width_s, filled
from workflows.remediation.probation import probation_outcomes


class Queryable(Protocol):
    def query(self, sql: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]: ...


# Which clocks detection-to-isolation compares; the report prints it beside the figures.
LATENCY_CLOCK = (
    "UTC wall clock on both sides: the detection's time is the event time of the sample it "
    "fired on (the collector's clock; the simulator's in the demo), the isolation's is the "
    "Temporal server's clock when the runbook recorded its isolate step. They agree to within "
    "the hosts' NTP offset; a negative figure would mean one of them runs ahead, and is shown "
    "as it is.")


class LatencyRow(BaseModel):
    """One runbook run that isolated: from the detection that asked for isolation (the one
    its first record names) to its isolate record."""

    workflow_id: str
    cable: str  # the runbook's cable, ``a ~ b`` (or one port)
    device: str  # the isolated end
    port: int
    detection: str
    detected_on: str  # the end the detection was seen on
    detected_ms: int
    isolated_ms: int
    dry_run: bool = False

    @property
    def latency_s(self) -> float:
        return (self.isolated_ms - self.detected_ms) / 1000


class IncidentRow(BaseModel):
    """An incident open now or during the window, with its detections folded in."""

    fabric: str
    incident: str
    cause: str
    root: str
    state: str
    started_ms: int
    ended_ms: int | None = None
    members: int
    su: str | None = None
    reason: str | None = None
    paged: str = "unknown"  # the latest ticket/page record for it, or "unknown"
    detections: int = 0  # in the window
    episodes: int = 0
    kinds: dict[str, int] = Field(default_factory=dict)
    ports: list[str] = Field(default_factory=list)  # member ports with detections (first 50)
    member_ports: list[str] = Field(default_factory=list, exclude=True)


class WaitingRow(BaseModel):
    """A runbook that waits on a human, and why (its latest record's note)."""

    workflow_id: str
    cable: str
    state: str  # needs a human | breaker: awaiting approval | escalated | ...
    why: str
    since_ms: int
    paged: str = "unknown"


class ProbationRow(BaseModel):
    workflow_id: str
    cable: str
    since_ms: int
    note: str | None = None
    checks: int = 0
    failed: int = 0
    last_check: str | None = None  # "check:<name> done|failed"
    measurement: str | None = None  # the latest check's `after`, as recorded


class StaleRow(BaseModel):
    fabric: str
    device: str
    port: int
    scope: str  # device | port
    since_ms: int


class EpisodeRow(BaseModel):
    fabric: str
    port: str  # device:port the episode is on
    episode: str
    detection: str  # the first detection's kind
    severity: str
    action: str
    first_ms: int
    last_ms: int
    n: int
    kinds: dict[str, int] = Field(default_factory=dict)
    items: list[tuple[int, str, str, str, str]] = Field(default_factory=list)  # ts, kind, sev, action, id
    incident: str | None = None


SEVERITY_RANK = {"critical": 0, "warning": 1, "info": 2}


class CableRow(BaseModel):
    """One cable (or lone port) with its episodes in the window, first seen first."""

    fabric: str
    cable: str
    episodes: list[EpisodeRow] = Field(default_factory=list)
    runbook: str | None = None  # the cable's runbook decision, when one ran

    @property
    def first_ms(self) -> int:
        return min(e.first_ms for e in self.episodes)

    @property
    def detections(self) -> int:
        return sum(e.n for e in self.episodes)

    @property
    def worst(self) -> str:
        return min((e.severity for e in self.episodes), key=lambda s: SEVERITY_RANK.get(s, 9))

    @property
    def worst_rank(self) -> int:
        return SEVERITY_RANK.get(self.worst, 9)


class RunbookRow(BaseModel):
    workflow_id: str
    steps: list[tuple[int, str, str]]  # (ts_ms, step, outcome), in time order

    @property
    def last_step(self) -> str:
        return self.steps[-1][1] if self.steps else ""

    @property
    def decision(self) -> str:
        """Where the runbook stands: returned, escalated, aborted, refused (breaker), in
        probation, or open; of its latest run (a cable's runbook id runs again later).
        A shadow-mode runbook (its actions are dry runs) changed nothing, whatever it
        would have done: it is reported as such."""
        if any(outcome == "dry_run" for _, _, outcome in self.steps):
            return "shadow mode (changed nothing)"
        for i, (_, step, outcome) in enumerate(reversed(self.steps)):
            if step == "outcome" and i > 0:
                break  # an earlier run of the cable ended here: the latest has not decided
            if step == "probation":
                return "in probation"
            if step == "return" and outcome in ("done", "dry_run"):
                return "returned to service"
            if step == "escalate":
                return "escalated to a human"
            if step == "abort":
                return "aborted"
            if step == "budget" and outcome == "refused":
                return "held by the breaker"
        return "in progress"


class JobRow(BaseModel):
    """A job that ran in the window and the episodes on the links it crosses."""

    fabric: str
    job: str
    state: str
    nodes: int
    gpus: int | None
    links: int  # cables on its paths
    off_rail: list[str] = Field(default_factory=list)  # its NICs on another rail's leaf
    impact: list[dict[str, Any]] = Field(default_factory=list)  # streams...ImpactRow.to_dict


class Report(BaseModel):
    since_ms: int
    until_ms: int
    bucket_s: int  # the series' bin width (bins.bin_width_s of the window)
    counts: dict[str, int] = Field(default_factory=dict)
    detections_by_kind: dict[str, int] = Field(default_factory=dict)
    # What needs a human now (not windowed).
    incidents_open: list[IncidentRow] = Field(default_factory=list)
    waiting: list[WaitingRow] = Field(default_factory=list)
    probation: list[ProbationRow] = Field(default_factory=list)
    stale: list[StaleRow] = Field(default_factory=list)
    # What happened in the window: by incident, then by cable and episode.
    incidents: list[IncidentRow] = Field(default_factory=list)
    cables: list[CableRow] = Field(default_factory=list)
    cables_total: int = 0  # before max_rows
    downs_over_time: list[tuple[float, float]] = Field(default_factory=list)
    errors_over_time: list[tuple[float, float]] = Field(default_factory=list)
    detections_over_time: dict[str, list[tuple[float, float]]] = Field(default_factory=dict)
    heat: dict[str, float] = Field(default_factory=dict)  # "su|rail" -> link errors
    heat_isolations: dict[str, float] = Field(default_factory=dict)  # "su|rail" -> isolations
    top_ports: list[tuple[str, float]] = Field(default_factory=list)
    latencies: list[LatencyRow] = Field(default_factory=list)
    latency_unmatched: int = 0  # isolating runs whose starting detection is not in the ledger
    runbooks: list[RunbookRow] = Field(default_factory=list)
    jobs: list[JobRow] = Field(default_factory=list)
    # "fabric|device:port" of each episode -> the jobs running then whose traffic crosses it
    touched: dict[str, list[str]] = Field(default_factory=dict)
    # Port states now (not windowed): ok / down / isolated / unknown (stopped reporting).
    ports_by_status: dict[str, int] = Field(default_factory=dict)
    unknown_ports: list[tuple[str, int]] = Field(default_factory=list)  # ("dev:port", since)
    # probation: every probation record and check result (workflow_id, ts_ms, step, outcome,
    # note), and per runbook passed / failed / waiting on a human
    probation_records: list[dict[str, Any]] = Field(default_factory=list)
    probation_outcomes: dict[str, int] = Field(default_factory=dict)
    temporal_ui: str | None = None
    # the alerts the notifier's file recorded in the window, one row per alert key
    # (``alerts_from_file``); None: no alerts file was read
    alerts: list[dict[str, Any]] | None = None
    alerts_file: str | None = None


def alerts_from_file(path: Path, *, since_ms: int, until_ms: int) -> list[dict[str, Any]]:
    """One row per alert (key) from the alerts file: what it said last, how often it was
    sent, whether it is resolved; newest first."""
    from workflows.adapters.notify import read_alerts_file

    rows: dict[str, dict[str, Any]] = {}
    for a in read_alerts_file(path):
        if not since_ms <= int(a.get("ts_ms", 0)) < until_ms:
            continue
        row = rows.setdefault(a["key"], {"key": a["key"], "kind": a["kind"],
                                         "fabric": a["fabric"], "first_ms": a["ts_ms"],
                                         "messages": 0, "labels": a.get("labels", {})})
        row.update(summary=a["summary"], last=a["action"], last_ms=a["ts_ms"],
                   members=a.get("details", {}).get("member_count"))
        row["messages"] += 1
    return sorted(rows.values(), key=lambda r: -int(r["last_ms"]))


REPORT_SQL = Path(__file__).resolve().parents[2] / "sql" / "report" / "report.sql"


def load_queries(path: Path = REPORT_SQL) -> dict[str, str]:
    """Named queries from a file of ``-- name: x`` sections."""
    queries: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("-- name:"):
            current = queries.setdefault(line.removeprefix("-- name:").strip(), [])
        elif current is not None and not line.startswith("--"):
            current.append(line)
    return {name: "\n".join(body).strip().rstrip(";") for name, body in queries.items()}


def build_report(ledger: Queryable, *, since_ms: int, until_ms: int,
                 temporal_ui: str | None = None, max_rows: int = 200) -> Report:
    """Everything the report shows for events with ``since_ms <= ts < until_ms``, and what
    needs a human now (open incidents, runbooks waiting, cables in probation, stale devices)."""
    width_s = bin_width_s((until_ms - since_ms) / 1000)
    starts = bin_starts(since_ms, until_ms, width_s)
    queries = load_queries()
    params = {"since": int(since_ms), "until": int(until_ms), "bucket_ms": width_s * 1000}
    report = Report(since_ms=since_ms, until_ms=until_ms, bucket_s=width_s,
                    temporal_ui=temporal_ui)

    def rows(name: str) -> list[dict[str, Any]]:
        return ledger.query(queries[name], params)

    for name in ("port_events", "counter_samples", "probes", "detections", "actions",
                 "evidence"):
        found = rows(f"count_{name}")
        report.counts[name] = int(found[0]["n"]) if found else 0
    report.detections_by_kind = {str(r["detection"]): int(r["n"])
                                 for r in rows("detections_by_kind")}

    # the series, binned to the window, zero where nothing happened
    report.downs_over_time = filled({int(r["t"]): float(r["n"]) for r in rows("downs")}, starts)
    report.errors_over_time = filled({int(r["t"]): float(r["n"]) for r in rows("errors")},
                                     starts)
    per_kind: dict[str, dict[int, float]] = defaultdict(dict)
    for r in rows("detections_over_time"):
        per_kind[str(r["kind"])][int(r["t"])] = float(r["n"])
    report.detections_over_time = {kind: filled(counts, starts)
                                   for kind, counts in sorted(per_kind.items())}
    report.heat = {f"{int(r['su'])}|{int(r['rail'])}": float(r["n"]) for r in rows("heat")}
    report.heat_isolations = {f"{int(r['su'])}|{int(r['rail'])}": float(r["n"])
                              for r in rows("heat_isolations")}
    report.top_ports = [(f"{r['device']}:{r['port']}", float(r["n"])) for r in rows("top_ports")]

    steps: dict[str, list[tuple[int, str, str]]] = defaultdict(list)
    for r in rows("runbook_steps"):
        steps[str(r["workflow_id"])].append((int(r["ts_ms"]), str(r["step"]), str(r["outcome"])))
    report.runbooks = [RunbookRow(workflow_id=w, steps=s) for w, s in sorted(steps.items())]

    # what needs a human now
    incidents = [_incident(r) for r in rows("incidents_in_window")]
    latest = rows("runbook_latest")
    # the pages of everything listed, however long it has waited
    oldest = min([i.started_ms for i in incidents] + [since_ms] + [
        int(r["started_ms"]) for r in latest
        if waiting_state(str(r["step"]), str(r["outcome"]), _opt(r["note"])) is not None])
    pages = ledger.query(queries["pages"], {"since": int(oldest)})
    for incident in incidents:
        incident.paged = paged_for_incident(incident, [r for r in pages
                                                       if int(r["ts_ms"]) >= incident.started_ms])
    report.waiting = waiting_runbooks(latest, pages)
    report.probation = [ProbationRow(
        workflow_id=str(r["workflow_id"]), cable=cable_of(str(r["workflow_id"])),
        since_ms=int(r["since_ms"]), note=_opt(r["note"]), checks=int(r["checks"]),
        failed=int(r["failed"]),
        last_check=(f"{r['check_step']} {r['check_outcome']}" if r["check_step"] else None),
        measurement=_opt(r["check_after"])) for r in rows("probation")]
    report.stale = [StaleRow(fabric=str(r["fabric"]), device=str(r["device"]),
                             port=int(r["port"]), scope=str(r["scope"]),
                             since_ms=int(r["since_ms"])) for r in rows("stale_open")]

    # what happened in the window: by incident, then by cable and episode
    episodes = [_episode(r) for r in rows("episodes")]
    peers = {(str(r["fabric"]), f"{r['device']}:{r['port']}"):
             (f"{r['peer_device']}:{r['peer_port']}" if r["peer_device"] else None)
             for r in rows("episodes")}
    loose = fold_into_incidents(episodes, incidents)
    decisions = {rb.workflow_id: rb.decision for rb in report.runbooks}
    cables = group_by_cable(loose, peers, decisions)
    report.cables_total = len(cables)
    report.cables = cables[:max_rows]
    report.incidents = [i for i in incidents if i.detections or i.state != "closed"]
    report.incidents_open = [i for i in incidents if i.state != "closed"]

    report.latencies, report.latency_unmatched = isolation_latencies(
        rows("isolation_runs"), rows("isolation_asks"))
    report.jobs, report.touched = job_section(ledger, since_ms=since_ms, until_ms=until_ms,
                                              max_rows=max_rows)
    records = rows("probation_records")
    report.probation_records = records[:max_rows * 5]
    report.probation_outcomes = probation_outcomes(r for r in records
                                                   if r["step"] == "probation")
    report.ports_by_status = {str(r["status"]): int(r["n"]) for r in rows("ports_by_status")}
    report.unknown_ports = [(f"{r['device']}:{r['port']}", int(r["since_ms"]))
                            for r in rows("unknown_ports")[:max_rows]]
    return report


# --- pure parts: from rows to what the report says -------------------------------------------

def _opt(value: Any) -> str | None:
    return None if value is None or value == "" else str(value)


def cable_of(workflow_id: str) -> str:
    """``remediate/{fabric}/{a}~{b}`` -> ``a ~ b`` (the runbook id names its cable)."""
    parts = workflow_id.split("/", 2)
    tail = parts[2] if len(parts) == 3 and parts[0] == "remediate" else workflow_id
    return " ~ ".join(tail.split("~"))


def cable_key(fabric: str, port: str, peer: str | None) -> str:
    """The runbook id a cable's runbook has (``workflows.dispatch``: both ends sorted)."""
    ends = sorted([port] + ([peer] if peer else []))
    return f"remediate/{fabric}/" + "~".join(ends)


def _incident(r: dict[str, Any]) -> IncidentRow:
    members = [str(m) for m in r["members"] or []]
    return IncidentRow(fabric=str(r["fabric"]), incident=str(r["incident"]),
                       cause=str(r["cause"]), root=str(r["root"]), state=str(r["state"]),
                       started_ms=int(r["started_ms"]),
                       ended_ms=None if r["ended_ms"] is None else int(r["ended_ms"]),
                       members=len(members), su=_opt(r["su"]), reason=_opt(r["reason"]),
                       member_ports=members)


def _episode(r: dict[str, Any]) -> EpisodeRow:
    items = []
    kinds: dict[str, int] = defaultdict(int)
    for item in r["items"]:
        values = list(item.values()) if isinstance(item, dict) else list(item)
        ts, kind, severity, action, det_id = values
        items.append((int(ts), str(kind), str(severity), str(action), str(det_id)))
        kinds[str(kind)] += 1
    incidents = [str(i) for i in r["incidents"] or []]
    return EpisodeRow(fabric=str(r["fabric"]), port=f"{r['device']}:{r['port']}",
                      episode=str(r["episode"]), detection=str(r["detection"]),
                      severity=str(r["severity"]), action=str(r["action"]),
                      first_ms=int(r["first_ms"]), last_ms=int(r["last_ms"]), n=int(r["n"]),
                      kinds=dict(kinds), items=items,
                      incident=incidents[0] if incidents else None)


def fold_into_incidents(episodes: Sequence[EpisodeRow],
                        incidents: Sequence[IncidentRow]) -> list[EpisodeRow]:
    """Count each episode of an incident into it; return the episodes of no incident.

    An episode belongs to an incident when one of its detections names it, or when its
    port is a member and it began while the incident was open (the first members' own
    detections come before the correlator names the incident)."""
    by_id = {(i.fabric, i.incident): i for i in incidents}
    members: dict[tuple[str, str], list[IncidentRow]] = defaultdict(list)
    for incident in incidents:
        for port in incident.member_ports:
            members[(incident.fabric, port)].append(incident)
    loose: list[EpisodeRow] = []
    for ep in episodes:
        owner = by_id.get((ep.fabric, ep.incident)) if ep.incident else None
        if owner is None:
            owner = next((i for i in members.get((ep.fabric, ep.port), [])
                          if i.started_ms <= ep.first_ms
                          and (i.ended_ms is None or ep.first_ms <= i.ended_ms)), None)
        if owner is None:
            loose.append(ep)
            continue
        ep.incident = owner.incident
        owner.episodes += 1
        owner.detections += ep.n
        for kind, n in ep.kinds.items():
            owner.kinds[kind] = owner.kinds.get(kind, 0) + n
        if ep.port not in owner.ports and len(owner.ports) < 50:
            owner.ports.append(ep.port)
    return loose


def group_by_cable(episodes: Sequence[EpisodeRow],
                   peers: dict[tuple[str, str], str | None],
                   decisions: dict[str, str] | None = None) -> list[CableRow]:
    """One row per cable (both ends' episodes together): the worst first (critical before
    warning), then by when it was first seen."""
    cables: dict[str, CableRow] = {}
    for ep in episodes:
        peer = peers.get((ep.fabric, ep.port))
        key = cable_key(ep.fabric, ep.port, peer)
        row = cables.get(key)
        if row is None:
            # a runbook started before the peer was known is named by its one port
            ids = [key] + [f"remediate/{ep.fabric}/{end}" for end in
                           sorted([ep.port] + ([peer] if peer else []))]
            found = next((decisions[i] for i in ids if decisions and i in decisions), None)
            row = cables[key] = CableRow(fabric=ep.fabric, cable=cable_of(key), runbook=found)
        row.episodes.append(ep)
    for row in cables.values():
        row.episodes.sort(key=lambda e: (e.first_ms, e.port))
    return sorted(cables.values(), key=lambda c: (c.worst_rank, c.first_ms, c.cable))


_WAITING = {"breaker": "breaker: awaiting approval", "escalate": "escalated: a human decides",
            "repeat_offender": "repeat offender: a human decides"}


def waiting_state(step: str, outcome: str, note: str | None) -> str | None:
    """Whether a runbook whose latest record is this waits on a human, and on what."""
    if step == "outcome":
        return None
    if outcome == "failed" and (note or "").startswith("needs a human"):
        return "needs a human"
    if outcome == "done" and step in _WAITING:
        return _WAITING[step]
    if step.startswith("ladder:") and outcome == "skipped":
        return f"awaiting a technician ({step.removeprefix('ladder:')})"
    return None


def _page_text(r: dict[str, Any]) -> str:
    """Who was told, as the record says: a ticket's id, or the page/breaker/escalation record."""
    when = time.strftime("%H:%M:%SZ", time.gmtime(int(r["ts_ms"]) / 1000))
    what = f"ticket {r['note']}" if str(r["step"]) == "ticket" and r["note"] else str(r["step"])
    return f"{what} ({r['outcome']}, {r['actor']}, {when})"


def paged_for_incident(incident: IncidentRow, pages: Sequence[dict[str, Any]]) -> str:
    """The latest ticket/page record about the incident (its id as the record's workflow,
    its root, or one of its member ports), or ``unknown``."""
    ports = set(incident.member_ports)
    found = [r for r in pages if str(r["fabric"]) == incident.fabric and (
        str(r["workflow_id"]) == incident.incident or str(r["device"]) == incident.root
        or f"{r['device']}:{r['port']}" in ports)]
    return _page_text(max(found, key=lambda r: int(r["ts_ms"]))) if found else "unknown"


def waiting_runbooks(latest: Sequence[dict[str, Any]],
                     pages: Sequence[dict[str, Any]]) -> list[WaitingRow]:
    """The runbook runs whose latest record leaves them waiting on a human (dry runs never)."""
    by_workflow: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in pages:
        by_workflow[str(r["workflow_id"])].append(r)
    newest: dict[str, dict[str, Any]] = {}
    for r in latest:  # a cable's later run replaces its earlier one
        wid = str(r["workflow_id"])
        if wid not in newest or int(r["ts_ms"]) >= int(newest[wid]["ts_ms"]):
            newest[wid] = r
    out = []
    for wid, r in newest.items():
        if int(r["dry_run"]):
            continue
        state = waiting_state(str(r["step"]), str(r["outcome"]), _opt(r["note"]))
        if state is None:
            continue
        told = [p for p in by_workflow.get(wid, []) if int(p["ts_ms"]) >= int(r["started_ms"])]
        out.append(WaitingRow(workflow_id=wid, cable=cable_of(wid), state=state,
                              why=_opt(r["note"]) or "(no note)", since_ms=int(r["ts_ms"]),
                              paged=_page_text(max(told, key=lambda p: int(p["ts_ms"])))
                              if told else "unknown"))
    return sorted(out, key=lambda w: (w.since_ms, w.workflow_id))


_TOKEN = re.compile(r"[\s;,()]+")


def isolation_latencies(runs: Sequence[dict[str, Any]], asks: Sequence[dict[str, Any]]
                        ) -> tuple[list[LatencyRow], int]:
    """Per isolating run: from the detection its first record names (the one that asked for
    isolation) to its isolate record. Returns the rows and how many runs named a detection
    the ledger does not hold in the window (counted, not guessed)."""
    by_id = {str(a["id"]): a for a in asks}
    out: list[LatencyRow] = []
    unmatched = 0
    for r in runs:
        det = next((by_id[t] for t in _TOKEN.split(str(r["start_note"] or "")) if t in by_id),
                   None)
        if det is None:
            unmatched += 1
            continue
        out.append(LatencyRow(
            workflow_id=str(r["workflow_id"]), cable=cable_of(str(r["workflow_id"])),
            device=str(r["device"]), port=int(r["port"]), detection=str(det["detection"]),
            detected_on=f"{det['device']}:{det['port']}", detected_ms=int(det["ts_ms"]),
            isolated_ms=int(r["isolated_ms"]), dry_run=bool(int(r["dry_run"]))))
    out.sort(key=lambda x: (x.cable, x.detected_ms))
    return out, unmatched


def job_section(ledger: Queryable, *, since_ms: int, until_ms: int,
                max_rows: int = 200) -> tuple[list[JobRow], dict[str, list[str]]]:
    """Per fabric with placements: each job of the window with the episodes on its links,
    and for each episode the jobs it touched (running at its first detection)."""
    from ledger import jobs as ledger_jobs
    from streams.topology.jobpaths import (
        held_window,
        job_impact,
        job_paths,
        latest_placements,
        overlaps,
        running_at,
    )

    fabrics = [str(r["fabric"]) for r in ledger.query(load_queries()["job_fabrics"],
                                                      {"until": int(until_ms)})]
    rows: list[JobRow] = []
    touched: dict[str, list[str]] = {}
    for fabric in fabrics:
        fmap = ledger_jobs.fabric_map(ledger, fabric, since_ms=since_ms, until_ms=until_ms)
        if fmap is None:
            continue
        episodes = ledger_jobs.episodes(ledger, fabric, since_ms=since_ms, until_ms=until_ms)
        current = latest_placements(ledger_jobs.placements(ledger, fabric, until_ms=until_ms))
        for placement in current.values():
            if not overlaps(placement, since_ms, until_ms):
                continue
            paths = job_paths(fmap, placement.nodes)
            found = job_impact(paths, episodes, window=held_window(placement))
            rows.append(JobRow(
                fabric=fabric, job=placement.job, state=placement.state,
                nodes=len(placement.nodes),
                gpus=(placement.gpus_per_node * len(placement.nodes)
                      if placement.gpus_per_node is not None else None),
                links=len(paths.links),
                off_rail=[h for r in paths.rails for h in r.off_rail],
                impact=[r.to_dict() for r in found[:max_rows]]))
            for r in found:
                if running_at(placement, r.episode.last_ms):
                    key = f"{fabric}|{r.episode.device}:{r.episode.port}"
                    names = touched.setdefault(key, [])
                    if placement.job not in names:
                        names.append(placement.job)
    return rows, touched


def runbooks_by_decision(runbooks: Sequence[RunbookRow]) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for runbook in runbooks:
        out[runbook.decision] += 1
    return dict(out)
