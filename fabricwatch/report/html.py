"""Render a ``Report`` as one self-contained HTML file (inline SVG, no scripts, no network)."""

from __future__ import annotations

import datetime as dt
import time
from collections import defaultdict
from html import escape

from fabricwatch.report.bins import width_label
from fabricwatch.report.build import (
    LATENCY_CLOCK,
    EpisodeRow,
    Report,
    WaitingRow,
    runbooks_by_decision,
)
from fabricwatch.report.svg import bar_chart, heatmap, line_chart, timelines
from fabricwatch.report.terminal import return_to_service_line

_CSS = """
body{font-family:system-ui,sans-serif;margin:24px auto;max-width:1100px;color:#111827}
h1{font-size:22px;margin-bottom:2px} h2{font-size:16px;margin-top:28px;border-bottom:1px solid
#e5e7eb;padding-bottom:4px} .muted{color:#6b7280} table{border-collapse:collapse;font-size:12px}
td,th{padding:3px 8px;border-bottom:1px solid #f3f4f6;text-align:left}
h3{font-size:14px;margin:16px 0 4px} .none{color:#374151;font-style:italic}
.warn{color:#b91c1c} details summary{cursor:pointer} td.cable{vertical-align:top;
font-weight:600} code{font-size:11px}
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


def _none(what: str) -> str:
    return f"<p class='none'>{escape(what)}: none.</p>"


def _table(head: list[str], rows: list[list[str]]) -> str:
    """Cells are already escaped."""
    return ("<table><tr>" + "".join(f"<th>{escape(h)}</th>" for h in head) + "</tr>"
            + "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
            + "</table>")


def _more(total: int, shown: int) -> str:
    return f"<p class='muted'>and {total - shown:,} more.</p>" if total > shown else ""


def _needs_you(report: Report) -> list[str]:
    parts = ["<section id='needs-you'><h2>What needs you now</h2>"]
    parts.append("<h3>Open incidents</h3>")
    if report.incidents_open:
        parts.append(_table(
            ["cause", "root", "members", "since", "state", "paged"],
            [[escape(i.cause), escape(i.root), f"{i.members:,}", _utc(i.started_ms),
              escape(i.state), escape(i.paged)] for i in report.incidents_open]))
    else:
        parts.append(_none("Open incidents"))
    parts.append("<h3>Runbooks waiting on a human</h3>")
    if report.waiting:
        # runbooks held for the same reason are one row (a budget refusal holds dozens)
        groups: dict[tuple[str, str], list[WaitingRow]] = defaultdict(list)
        for w in report.waiting:
            groups[(w.state, w.why)].append(w)
        rows = []
        for (state, why), held in sorted(groups.items(), key=lambda kv: kv[1][0].since_ms):
            cables = "".join(f"<li>{escape(w.cable)} since {_utc(w.since_ms)}; paged: "
                             f"{escape(w.paged)}</li>" for w in held[:200])
            rows.append([escape(state), escape(why),
                         f"<details><summary>{len(held)} runbook{'s' if len(held) != 1 else ''}"
                         f"</summary><ul>{cables}</ul></details>",
                         _utc(held[0].since_ms), escape(held[-1].paged)])
        parts.append(_table(["waiting for", "why (latest record)", "runbooks", "since",
                             "paged (latest)"], rows))
    else:
        parts.append(_none("Runbooks waiting on a human"))
    parts.append("<h3>Cables in probation</h3>")
    if report.probation:
        parts.append(_table(
            ["cable", "since", "checks (failed)", "latest check", "measurement"],
            [[escape(p.cable), _utc(p.since_ms), f"{p.checks} ({p.failed})",
              escape(p.last_check or "none yet"), f"<code>{escape(p.measurement or '')}</code>"]
             for p in report.probation]))
    else:
        parts.append(_none("Cables in probation"))
    parts.append("<h3>Stale devices</h3>")
    if report.stale:
        shown_stale = report.stale[:100]
        parts.append(_table(
            ["device", "port", "scope", "silent since"],
            [[escape(st.device), "" if st.scope == "device" else str(st.port), escape(st.scope),
              _utc(st.since_ms)] for st in shown_stale]))
        parts.append(_more(len(report.stale), len(shown_stale)))
    else:
        parts.append(_none("Stale devices"))
    parts.append("</section>")
    return parts


def _episode_details(ep: EpisodeRow) -> str:
    rows = "".join(f"<tr><td>{_utc(ts)}</td><td>{escape(kind)}</td><td>{escape(sev)}</td>"
                   f"<td>{escape(action)}</td><td><code>{escape(det_id)}</code></td></tr>"
                   for ts, kind, sev, action, det_id in ep.items)
    more = f"<p class='muted'>first {len(ep.items)} of {ep.n}</p>" if ep.n > len(ep.items) else ""
    return (f"<details><summary>{ep.n} detection{'s' if ep.n != 1 else ''}</summary>"
            f"<table><tr><th>at</th><th>kind</th><th>severity</th><th>action</th><th>id</th>"
            f"</tr>{rows}</table>{more}</details>")


def _cable_kinds(episodes: list[EpisodeRow]) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for ep in episodes:
        for kind, n in ep.kinds.items():
            out[kind] += n
    return dict(out)


def _kinds(kinds: dict[str, int]) -> str:
    return ", ".join(f"{escape(k)} {n:,}" for k, n in sorted(kinds.items(), key=lambda kv: -kv[1]))


def _in_window(report: Report) -> list[str]:
    parts = ["<section id='in-window'><h2>What happened in the window</h2>",
             "<h3>By incident</h3>"]
    if report.incidents:
        parts.append("<table class='groups'><tr><th>incident</th><th>cause</th><th>root</th>"
                     "<th>state</th><th>started</th><th>members</th><th>detections</th></tr>")
        for i in report.incidents:
            ports = ", ".join(escape(p) for p in i.ports)
            detail = (f"<details><summary>{i.detections:,} in {i.episodes:,} episodes</summary>"
                      f"<p>{_kinds(i.kinds)}</p><p class='muted'>ports: {ports}</p></details>"
                      if i.detections else "none in the window")
            parts.append(f"<tr class='incident'><td>{escape(i.incident)}</td>"
                         f"<td>{escape(i.cause)}</td><td>{escape(i.root)}</td>"
                         f"<td>{escape(i.state)}</td><td>{_utc(i.started_ms)}</td>"
                         f"<td>{i.members:,}</td><td>{detail}</td></tr>")
        parts.append("</table>")
    else:
        parts.append(_none("Incidents"))
    parts.append("<h3>By cable and episode</h3>")
    if report.cables:
        parts.append("<p class='muted'>One row per cable (its two ends together), the worst "
                     "first; open it for its episodes, one row each, and an episode for its "
                     "detections.</p>")
        parts.append("<table class='cables'><tr><th>cable</th><th>first seen</th>"
                     "<th>worst</th><th>runbook</th><th>episodes and detections</th></tr>")
        for cable in report.cables:
            worst = cable.worst
            eps = "".join(
                f"<tr class='episode'><td>{_utc(ep.first_ms)}</td><td>{escape(ep.port)}</td>"
                f"<td>{escape(ep.detection)}</td><td>{escape(ep.severity)}, "
                f"{escape(ep.action)}</td><td>{_episode_details(ep)}</td></tr>"
                for ep in cable.episodes)
            n_eps = len(cable.episodes)
            summary = (f"{n_eps} episode{'s' if n_eps != 1 else ''}, {cable.detections:,} "
                       f"detection{'s' if cable.detections != 1 else ''}: "
                       f"{_kinds(_cable_kinds(cable.episodes))}")
            parts.append(
                f"<tr class='cable'><td class='cable'>{escape(cable.cable)}</td>"
                f"<td>{_utc(cable.first_ms)}</td><td>{escape(worst)}</td>"
                f"<td>{escape(cable.runbook or 'none')}</td>"
                f"<td><details><summary>{summary}</summary><table><tr><th>first seen</th>"
                f"<th>port</th><th>kind</th><th>severity, action</th><th>detections</th></tr>"
                f"{eps}</table></details></td></tr>")
        parts.append("</table>")
        parts.append(_more(report.cables_total, len(report.cables)))
    else:
        parts.append(_none("Detections outside incidents"))
    parts.append("</section>")
    return parts


def _heat(title: str, heat: dict[str, float]) -> str:
    cells = {tuple(k.split("|")): v for k, v in heat.items()}
    sus = sorted({k[0] for k in cells}, key=int)
    rails = sorted({k[1] for k in cells}, key=int)
    return heatmap(title, [f"SU{s}" for s in sus], [f"r{r}" for r in rails],
                   {(f"SU{s}", f"r{r}"): v for (s, r), v in cells.items()},
                   row_label="SU", col_label="rail")


def _latency(report: Report) -> list[str]:
    parts = ["<h2 id='latency'>Detection to isolation</h2>",
             f"<p class='muted'>From the detection that asked for isolation (the one that "
             f"started the cable's runbook) to the runbook's isolate record. "
             f"{escape(LATENCY_CLOCK)}</p>"]
    if not report.latencies:
        parts.append(_none("Isolations in this window"))
    else:
        lat = sorted(r.latency_s for r in report.latencies)
        p50 = lat[len(lat) // 2]
        p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
        parts.append(f"<p>{len(lat)} isolations; p50 {p50:.2f} s, p99 {p99:.2f} s, "
                     f"max {lat[-1]:.2f} s.</p>")
        negative = [r for r in report.latencies if r.latency_s < 0]
        if negative:
            parts.append(f"<p class='warn'>{len(negative)} detection(s) are stamped after "
                         "their isolation: a clock runs ahead (shown as measured).</p>")
        parts.append(_table(
            ["cable", "detection", "seen on", "detected", "isolated", "seconds"],
            [[escape(r.cable), escape(r.detection), escape(r.detected_on), _utc(r.detected_ms),
              _utc(r.isolated_ms) + (" (shadow)" if r.dry_run else ""),
              f"{r.latency_s:.2f}"] for r in report.latencies[:200]]))
    if report.latency_unmatched:
        parts.append(f"<p class='muted'>{report.latency_unmatched} isolating runbook(s) name a "
                     "detection the ledger does not hold for this window: not measured.</p>")
    return parts


def render_html(report: Report) -> str:
    ticks = _ticks(report)
    width = width_label(report.bucket_s)
    parts = [f"<!doctype html><html lang='en'><head><meta charset='utf-8'>"
             f"<title>fabricwatch report</title><style>{_CSS}</style></head><body>",
             "<h1>fabricwatch report</h1>",
             f"<p class='muted'>{_utc(report.since_ms)} to {_utc(report.until_ms)}, "
             "read from the ledger</p>"]
    parts += _needs_you(report)
    parts += _in_window(report)

    parts.append("<section id='the-rest'><h2>The window in numbers</h2><div class='cards'>")
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

    parts.append("<h2>Over time</h2>")
    kinds = sorted(report.detections_over_time.items(), key=lambda kv: -sum(v for _, v in kv[1]))
    series = dict(kinds[:7])
    if len(kinds) > 7:
        rest: dict[float, float] = defaultdict(float)
        for _, points in kinds[7:]:
            for t, v in points:
                rest[t] += v
        series["other kinds"] = sorted(rest.items())
    parts.append(line_chart(f"detections per {width}, by kind", series, x_ticks=ticks,
                            y_label="detections"))
    parts.append(line_chart(f"link downs per {width}", {"downs": report.downs_over_time},
                            x_ticks=ticks, y_label="downs"))
    parts.append(line_chart(f"link errors per {width} (all ports)",
                            {"errors": report.errors_over_time}, x_ticks=ticks,
                            y_label="errors"))
    parts.append(bar_chart("detections by kind", sorted(report.detections_by_kind.items(),
                                                         key=lambda kv: -kv[1])))
    parts.append(bar_chart("ports with the most link errors", report.top_ports))

    parts.append("<h2>Where: by scalable unit and rail</h2>")
    parts.append(_heat("link errors by SU (rows) and rail (columns)", report.heat))
    parts.append(_heat("isolations by SU (rows) and rail (columns)", report.heat_isolations))

    parts += _latency(report)

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
    if report.probation_records:
        parts.append("<h2>Probation</h2>")
        parts.append(f"<p>{escape(return_to_service_line(report.probation_outcomes))}. The "
                     "link carries probe traffic with its node's rail still fenced; each "
                     "probe is judged against the pinned baseline.</p>")
        parts.append("<table><tr><th>time (UTC)</th><th>runbook</th><th>step</th>"
                     "<th>outcome</th><th>measurement</th></tr>")
        for r in report.probation_records[:400]:
            when = dt.datetime.fromtimestamp(int(r["ts_ms"]) / 1000, dt.UTC)
            parts.append(f"<tr><td>{when:%Y-%m-%d %H:%M:%S}</td>"
                         f"<td>{escape(str(r['workflow_id']).removeprefix('remediate/'))}</td>"
                         f"<td>{escape(str(r['step']))}</td><td>{escape(str(r['outcome']))}"
                         f"</td><td>{escape(str(r.get('note') or ''))}</td></tr>")
        parts.append("</table>")
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
    parts.append("</section></body></html>")
    return "\n".join(parts)
