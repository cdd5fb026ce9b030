"""The report's data, read from any ledger with SQL: what happened, where, and what was done.

``build_report`` only queries; ``fabricwatch.report.html`` and ``.terminal`` only render.
Every query reads through FINAL so replayed batches never count twice.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, Field


class Queryable(Protocol):
    def query(self, sql: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]: ...


class LatencyRow(BaseModel):
    device: str
    port: int
    detection: str
    detected_ms: int
    isolated_ms: int

    @property
    def latency_s(self) -> float:
        return (self.isolated_ms - self.detected_ms) / 1000


class RunbookRow(BaseModel):
    workflow_id: str
    steps: list[tuple[int, str, str]]  # (ts_ms, step, outcome), in time order

    @property
    def last_step(self) -> str:
        return self.steps[-1][1] if self.steps else ""

    @property
    def decision(self) -> str:
        """Where the runbook stands: returned, escalated, aborted, refused (breaker), or open.
        A shadow-mode runbook (its actions are dry runs) changed nothing, whatever it
        would have done: it is reported as such."""
        if any(outcome == "dry_run" for _, _, outcome in self.steps):
            return "shadow mode (changed nothing)"
        for _, step, outcome in reversed(self.steps):
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
    bucket_s: int
    counts: dict[str, int] = Field(default_factory=dict)
    detections_by_kind: dict[str, int] = Field(default_factory=dict)
    detections: list[dict[str, Any]] = Field(default_factory=list)
    downs_over_time: list[tuple[float, float]] = Field(default_factory=list)
    errors_over_time: list[tuple[float, float]] = Field(default_factory=list)
    heat: dict[str, float] = Field(default_factory=dict)  # "su|rail" -> link errors
    top_ports: list[tuple[str, float]] = Field(default_factory=list)
    latencies: list[LatencyRow] = Field(default_factory=list)
    runbooks: list[RunbookRow] = Field(default_factory=list)
    jobs: list[JobRow] = Field(default_factory=list)
    # "fabric|device:port" of each episode -> the jobs running then whose traffic crosses it
    touched: dict[str, list[str]] = Field(default_factory=dict)
    # Port states now (not windowed): ok / down / isolated / unknown (stopped reporting).
    ports_by_status: dict[str, int] = Field(default_factory=dict)
    unknown_ports: list[tuple[str, int]] = Field(default_factory=list)  # ("dev:port", since)
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
    """Everything the report shows for events with ``since_ms <= ts < until_ms``."""
    span_s = max(1, (until_ms - since_ms) // 1000)
    bucket_s = max(10, span_s // 60)
    queries = load_queries()
    params = {"since": int(since_ms), "until": int(until_ms), "bucket_ms": bucket_s * 1000}
    report = Report(since_ms=since_ms, until_ms=until_ms, bucket_s=bucket_s,
                    temporal_ui=temporal_ui)

    def rows(name: str) -> list[dict[str, Any]]:
        return ledger.query(queries[name], params)

    for name in ("port_events", "counter_samples", "probes", "detections", "actions",
                 "evidence"):
        found = rows(f"count_{name}")
        report.counts[name] = int(found[0]["n"]) if found else 0
    report.detections_by_kind = {str(r["detection"]): int(r["n"])
                                 for r in rows("detections_by_kind")}
    report.detections = rows("detection_episodes")[:max_rows]
    report.downs_over_time = [(int(r["t"]) / 1000, float(r["n"])) for r in rows("downs")]
    report.errors_over_time = [(int(r["t"]) / 1000, float(r["n"])) for r in rows("errors")]
    report.heat = {f"{int(r['su'])}|{int(r['rail'])}": float(r["n"]) for r in rows("heat")}
    report.top_ports = [(f"{r['device']}:{r['port']}", float(r["n"])) for r in rows("top_ports")]
    report.latencies = [
        LatencyRow(device=str(r["device"]), port=int(r["port"]), detection=str(r["detection"]),
                   detected_ms=int(r["d_ms"]), isolated_ms=int(r["a_ms"]))
        for r in rows("isolation_latency")[:max_rows]]
    steps: dict[str, list[tuple[int, str, str]]] = defaultdict(list)
    for r in rows("runbook_steps"):
        steps[str(r["workflow_id"])].append((int(r["ts_ms"]), str(r["step"]), str(r["outcome"])))
    report.runbooks = [RunbookRow(workflow_id=w, steps=s) for w, s in sorted(steps.items())]
    report.jobs, report.touched = job_section(ledger, since_ms=since_ms, until_ms=until_ms,
                                              max_rows=max_rows)
    report.ports_by_status = {str(r["status"]): int(r["n"]) for r in rows("ports_by_status")}
    report.unknown_ports = [(f"{r['device']}:{r['port']}", int(r["since_ms"]))
                            for r in rows("unknown_ports")[:max_rows]]
    return report


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
