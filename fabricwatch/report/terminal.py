"""Render a ``Report`` as a short terminal summary with rich."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from fabricwatch.report.build import Report, runbooks_by_decision


def print_summary(report: Report, console: Console) -> None:
    counts = Table(title="what the ledger holds for this window", show_header=False)
    for key, value in report.counts.items():
        counts.add_row(key.replace("_", " "), f"{value:,}")
    console.print(counts)
    kinds = Table(title="detections")
    kinds.add_column("kind")
    kinds.add_column("count", justify="right")
    for kind, n in sorted(report.detections_by_kind.items(), key=lambda kv: -kv[1]):
        kinds.add_row(kind, str(n))
    console.print(kinds)
    if report.ports_by_status:
        console.print("ports now: " + ", ".join(
            f"{n:,} {status}" for status, n in sorted(report.ports_by_status.items())))
    if report.unknown_ports:
        shown = ", ".join(p for p, _ in report.unknown_ports[:10])
        more = len(report.unknown_ports) - 10
        console.print(f"stopped reporting (unknown): {shown}"
                      + (f" and {more} more" if more > 0 else ""))
    if report.alerts:
        paged = sum(1 for a in report.alerts if a["last"] != "resolve")
        console.print(f"alerts: {len(report.alerts)} ({paged} not resolved), "
                      f"{sum(int(a['messages']) for a in report.alerts)} message(s) in "
                      f"{report.alerts_file}")
    if report.latencies:
        lat = sorted(r.latency_s for r in report.latencies)
        console.print(f"detection to isolation: {len(lat)} ports, p50 {lat[len(lat) // 2]:.2f} s, "
                      f"max {lat[-1]:.2f} s")
    if report.jobs:
        jobs = Table(title="jobs and the episodes on their links")
        for column in ("job", "nodes", "episodes", "most depended-on episode"):
            jobs.add_column(column)
        for job in report.jobs:
            top = job.impact[0] if job.impact else None
            jobs.add_row(job.job, str(job.nodes), str(len(job.impact)),
                         f"{top['detection']} on {top['port']} "
                         f"({float(str(top['share'])) * 100:.2f}% of its traffic)"
                         if top else "none")
        console.print(jobs)
    decisions = runbooks_by_decision(report.runbooks)
    if decisions:
        console.print("runbooks: " + ", ".join(f"{n} {d}" for d, n in sorted(decisions.items())))
    if report.temporal_ui:
        console.print(f"runbook histories: {report.temporal_ui}")
