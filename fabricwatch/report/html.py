"""Render a ``Report`` as one self-contained HTML file (inline SVG, no scripts, no network)."""

from __future__ import annotations

import time
from html import escape

from fabricwatch.report.build import Report, runbooks_by_decision
from fabricwatch.report.svg import bar_chart, heatmap, line_chart, timelines

_CSS = """
body{font-family:system-ui,sans-serif;margin:24px auto;max-width:880px;color:#111827}
h1{font-size:22px;margin-bottom:2px} h2{font-size:16px;margin-top:28px;border-bottom:1px solid
#e5e7eb;padding-bottom:4px} .muted{color:#6b7280} table{border-collapse:collapse;font-size:12px}
td,th{padding:3px 8px;border-bottom:1px solid #f3f4f6;text-align:left}
.cards{display:flex;gap:10px;flex-wrap:wrap}.card{border:1px solid #e5e7eb;border-radius:6px;
padding:8px 12px}.card b{display:block;font-size:18px}
"""


def _utc(ms: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000)) + "Z"


def _hhmm(seconds: float) -> str:
    return time.strftime("%H:%M", time.gmtime(seconds))


def _ticks(report: Report) -> list[tuple[float, str]]:
    start, end = report.since_ms / 1000, report.until_ms / 1000
    return [(start + (end - start) * k / 4, _hhmm(start + (end - start) * k / 4))
            for k in range(5)]


def render_html(report: Report) -> str:
    ticks = _ticks(report)
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>fabricwatch report"
             f"</title><style>{_CSS}</style></head><body>",
             "<h1>fabricwatch report</h1>",
             f"<p class='muted'>{_utc(report.since_ms)} to {_utc(report.until_ms)}, "
             "read from the ledger</p>", "<div class='cards'>"]
    labels = {"port_events": "port events", "counter_samples": "port samples",
              "probes": "probe results", "detections": "detections",
              "actions": "runbook actions", "evidence": "evidence items"}
    for key, label in labels.items():
        parts.append(f"<div class='card'><b>{report.counts.get(key, 0):,}</b>{label}</div>")
    parts.append("</div>")

    parts.append("<h2>Ports now</h2>")
    if report.ports_by_status:
        parts.append("<div class='cards'>" + "".join(
            f"<div class='card'><b>{n:,}</b>{escape(status)}</div>"
            for status, n in sorted(report.ports_by_status.items())) + "</div>")
    if report.unknown_ports:
        parts.append("<p>Ports that stopped reporting are <b>unknown</b>, not healthy:</p>"
                     "<table><tr><th>port</th><th>silent since</th></tr>")
        for port, since in report.unknown_ports[:100]:
            parts.append(f"<tr><td>{escape(port)}</td><td>{_utc(float(since))}</td></tr>")
        parts.append("</table>")

    parts.append("<h2>Detections</h2>")
    parts.append(bar_chart("detections by kind", sorted(report.detections_by_kind.items(),
                                                         key=lambda kv: -kv[1])))
    if report.detections:
        parts.append("<table><tr><th>first seen</th><th>kind</th><th>port</th><th>severity</th>"
                     "<th>action</th><th>detections</th></tr>")
        for row in report.detections:
            parts.append(
                f"<tr><td>{_utc(float(row['ts_ms']))}</td><td>{escape(str(row['detection']))}</td>"
                f"<td>{escape(str(row['device']))}:{int(row['port'])}</td>"
                f"<td>{escape(str(row['severity']))}</td><td>{escape(str(row['action']))}</td>"
                f"<td>{int(row['n'])}</td></tr>")
        parts.append("</table>")

    parts.append("<h2>Flaps and errors over time</h2>")
    parts.append(line_chart(f"link downs per {report.bucket_s} s",
                            {"downs": report.downs_over_time}, x_ticks=ticks, y_label="downs"))
    parts.append(line_chart(f"link errors per {report.bucket_s} s (all ports)",
                            {"errors": report.errors_over_time}, x_ticks=ticks,
                            y_label="errors"))
    parts.append(bar_chart("ports with the most link errors", report.top_ports))

    parts.append("<h2>Where: link errors by scalable unit and rail</h2>")
    cells = {tuple(k.split("|")): v for k, v in report.heat.items()}
    sus = sorted({k[0] for k in cells}, key=int)
    rails = sorted({k[1] for k in cells}, key=int)
    parts.append(heatmap("link errors by SU (rows) and rail (columns)",
                         [f"SU{s}" for s in sus], [f"r{r}" for r in rails],
                         {(f"SU{s}", f"r{r}"): v for (s, r), v in cells.items()},
                         row_label="SU", col_label="rail"))

    parts.append("<h2>Detection to isolation</h2>")
    if report.latencies:
        lat = sorted(r.latency_s for r in report.latencies)
        p50 = lat[len(lat) // 2]
        p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
        parts.append(f"<p>{len(lat)} ports isolated; detection to isolation p50 {p50:.2f} s, "
                     f"p99 {p99:.2f} s.</p>")
        parts.append(bar_chart("seconds from first detection to isolation",
                               [(f"{r.device}:{r.port} ({r.detection})", r.latency_s)
                                for r in report.latencies[:30]], unit=" s"))
    else:
        parts.append("<p class='muted'>No port was isolated in this window.</p>")

    parts.append("<h2>Jobs and the links that hurt them</h2>")
    if report.jobs:
        parts.append("<p class='muted'>Each job's links: its NICs' cables, and where a rail's "
                     "NICs sit under several leaves, the spine and core cables joining them. "
                     "Share: of the job's rail-to-rail traffic, the part that crosses the "
                     "link.</p>")
        parts.append("<table><tr><th>job</th><th>nodes</th><th>GPUs</th><th>state</th>"
                     "<th>links</th><th>episodes on them (share, kind, port)</th></tr>")
        for job in report.jobs:
            found = "; ".join(
                f"{float(str(r['share'])) * 100:.2f}% {escape(str(r['detection']))} "
                f"{escape(str(r['port']))}" for r in job.impact[:8])
            if len(job.impact) > 8:
                found += f"; and {len(job.impact) - 8} more"
            if job.off_rail:
                found += f" (off-rail NICs: {escape(', '.join(job.off_rail))})"
            parts.append(f"<tr><td>{escape(job.job)}</td><td>{job.nodes}</td>"
                         f"<td>{'' if job.gpus is None else job.gpus}</td>"
                         f"<td>{escape(job.state)}</td><td>{job.links}</td>"
                         f"<td>{found or 'none'}</td></tr>")
        parts.append("</table>")
    else:
        parts.append("<p class='muted'>No job placements in the ledger for this window.</p>")

    parts.append("<h2>Runbooks</h2>")
    decisions = runbooks_by_decision(report.runbooks)
    parts.append("<p>" + ", ".join(f"{n} {escape(d)}" for d, n in sorted(decisions.items()))
                 + "</p>" if decisions else "<p class='muted'>No runbook ran.</p>")
    lanes = []
    for rb in report.runbooks[:40]:
        segs = []
        for i, (ts, step, outcome) in enumerate(rb.steps):
            end = rb.steps[i + 1][0] if i + 1 < len(rb.steps) else ts + 1000
            segs.append((ts / 1000, max(end, ts + 1) / 1000, f"{step} ({outcome})"))
        lanes.append((rb.workflow_id.removeprefix("remediate/"), segs))
    parts.append(timelines("runbook steps over time", lanes))
    if report.alerts is not None:
        parts.append("<h2>Alerts</h2>")
        where = escape(report.alerts_file or "")
        if report.alerts:
            parts.append(f"<p>{len(report.alerts)} alert(s), "
                         f"{sum(int(a['messages']) for a in report.alerts)} message(s), as the "
                         f"notifier recorded them in <code>{where}</code>.</p>")
            parts.append("<table><tr><th>alert</th><th>kind</th><th>members</th>"
                         "<th>last</th><th>messages</th><th>summary</th></tr>")
            for a in report.alerts[:100]:
                members = "" if a.get("members") is None else str(a["members"])
                parts.append(f"<tr><td>{escape(str(a['key']))}</td><td>{escape(a['kind'])}</td>"
                             f"<td>{members}</td><td>{escape(str(a['last']))}</td>"
                             f"<td>{a['messages']}</td><td>{escape(str(a['summary']))}</td></tr>")
            parts.append("</table>")
        else:
            parts.append(f"<p class='muted'>No alert in <code>{where}</code> for this window."
                         "</p>")
    if report.temporal_ui:
        ui = escape(report.temporal_ui)
        parts.append(f"<p>Each runbook's full history: <a href='{ui}'>{ui}</a> "
                     "(the Temporal UI).</p>")
    parts.append("</body></html>")
    return "\n".join(parts)
