"""Render a ``Report`` in the terminal with rich: the same first screen as the HTML (what
needs a human now, then the window by incident and by cable), then a short summary."""

from __future__ import annotations

import time
from collections import defaultdict

from rich.console import Console
from rich.table import Table

from fabricwatch.report.build import LATENCY_CLOCK, Report, WaitingRow, runbooks_by_decision


def _utc(ms: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(ms / 1000))


def _table(title: str, columns: list[str]) -> Table:
    table = Table(title=title, title_justify="left", title_style="bold")
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


def print_first_screen(report: Report, console: Console, *, max_rows: int = 15) -> None:
    """What needs a human now, and what happened in the window, grouped."""
    console.rule("what needs you now")
    if report.incidents_open:
        table = _table("open incidents", ["cause", "root", "members", "since", "paged"])
        for i in report.incidents_open:
            table.add_row(i.cause, i.root, f"{i.members:,}", _utc(i.started_ms), i.paged)
        console.print(table)
    else:
        console.print("open incidents: none")
    if report.waiting:
        groups: dict[tuple[str, str], list[WaitingRow]] = defaultdict(list)
        for w in report.waiting:
            groups[(w.state, w.why)].append(w)
        table = _table(f"runbooks waiting on a human ({len(report.waiting)})",
                       ["waiting for", "why (latest record)", "runbooks", "since"])
        for (state, why), held in sorted(groups.items(), key=lambda kv: kv[1][0].since_ms):
            names = ", ".join(w.cable for w in held[:3]) + (
                f" and {len(held) - 3} more" if len(held) > 3 else "")
            table.add_row(state, why, f"{len(held)}: {names}", _utc(held[0].since_ms))
        console.print(table)
    else:
        console.print("runbooks waiting on a human: none")
    if report.probation:
        table = _table("cables in probation", ["cable", "since", "checks (failed)",
                                               "latest check", "measurement"])
        for p in report.probation:
            table.add_row(p.cable, _utc(p.since_ms), f"{p.checks} ({p.failed})",
                          p.last_check or "none yet", p.measurement or "")
        console.print(table)
    else:
        console.print("cables in probation: none")
    if report.stale:
        table = _table(f"stale devices ({len(report.stale)})",
                       ["device", "port", "scope", "silent since"])
        for st in report.stale[:max_rows]:
            table.add_row(st.device, "" if st.scope == "device" else str(st.port), st.scope,
                          _utc(st.since_ms))
        console.print(table)
    else:
        console.print("stale devices: none")

    console.rule(f"the window {_utc(report.since_ms)} to {_utc(report.until_ms)}")
    if report.incidents:
        table = _table("by incident", ["incident", "cause", "root", "state", "members",
                                       "detections"])
        for i in report.incidents:
            table.add_row(i.incident, i.cause, i.root, i.state, f"{i.members:,}",
                          f"{i.detections:,} in {i.episodes:,} episodes")
        console.print(table)
    else:
        console.print("incidents: none")
    if report.cables:
        table = _table(f"by cable ({report.cables_total} cables; first {max_rows})",
                       ["cable", "first seen", "episodes", "detections", "kinds", "runbook"])
        for cable in report.cables[:max_rows]:
            kinds: dict[str, int] = defaultdict(int)
            for ep in cable.episodes:
                for kind, n in ep.kinds.items():
                    kinds[kind] += n
            table.add_row(cable.cable, _utc(cable.first_ms), str(len(cable.episodes)),
                          f"{cable.detections:,}",
                          ", ".join(f"{k} {n}" for k, n in sorted(kinds.items(),
                                                                  key=lambda kv: -kv[1])),
                          cable.runbook or "none")
        console.print(table)
    else:
        console.print("detections outside incidents: none")


def print_summary(report: Report, console: Console) -> None:
    print_first_screen(report, console)
    console.rule("in numbers")
    counts = Table(title="what the ledger holds for this window", show_header=False)
    for key, value in report.counts.items():
        counts.add_row(key.replace("_", " "), f"{value:,}")
    console.print(counts)
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
        console.print(f"detection to isolation: {len(lat)} isolations, p50 "
                      f"{lat[len(lat) // 2]:.2f} s, max {lat[-1]:.2f} s, min {lat[0]:.2f} s")
        console.print(f"  ({LATENCY_CLOCK})", style="dim")
    else:
        console.print("detection to isolation: none isolated in this window")
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
    if report.probation_outcomes:
        console.print(return_to_service_line(report.probation_outcomes))
    if report.temporal_ui:
        console.print(f"runbook histories: {report.temporal_ui}")


def return_to_service_line(outcomes: dict[str, int]) -> str:
    """The summary line for return to service (probation under traffic)."""
    return (f"return to service: {outcomes.get('passed', 0)} runbook(s) passed probation, "
            f"{outcomes.get('failed', 0)} failed it ({outcomes.get('failures', 0)} failure(s), "
            f"each isolated again for the next rung), {outcomes.get('waiting_on_human', 0)} "
            f"wait on a human")
