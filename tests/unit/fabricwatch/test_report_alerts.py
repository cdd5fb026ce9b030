"""The report's alerts section: one row per alert from the notifier's file."""

from __future__ import annotations

from pathlib import Path

from fabricwatch.report.build import Report, alerts_from_file
from fabricwatch.report.html import render_html
from workflows.adapters.notify import Alert, file_line


def _write(path: Path, *alerts: Alert) -> None:
    path.write_bytes(b"".join(file_line(a) for a in alerts))


def alert(key: str, action: str, ts: int, members: int) -> Alert:
    return Alert(key=key, kind="incident", action=action, fabric="lab",  # type: ignore[arg-type]
                 summary=f"switch_reboot at spine-01: {members} port(s)",
                 details={"member_count": members}, started_ms=1000, ts_ms=ts)


def test_alerts_from_file_one_row_per_key_newest_first(tmp_path: Path) -> None:
    path = tmp_path / "alerts.jsonl"
    _write(path, alert("incident/lab/a", "trigger", 2000, 50),
           alert("incident/lab/a", "update", 3000, 51),
           alert("incident/lab/b", "trigger", 4000, 2),
           alert("incident/lab/a", "resolve", 5000, 51),
           alert("incident/lab/old", "trigger", 10, 1))
    rows = alerts_from_file(path, since_ms=1000, until_ms=10_000)
    assert [r["key"] for r in rows] == ["incident/lab/a", "incident/lab/b"]
    assert rows[0]["messages"] == 3 and rows[0]["last"] == "resolve"
    assert rows[0]["members"] == 51 and rows[0]["first_ms"] == 2000
    report = Report(since_ms=1000, until_ms=10_000, bucket_s=10, alerts=rows,
                    alerts_file=str(path))
    html = render_html(report)
    assert "<h2>Alerts</h2>" in html and "2 alert(s), 4 message(s)" in html
    assert "incident/lab/b" in html
    assert alerts_from_file(tmp_path / "none.jsonl", since_ms=0, until_ms=1) == []
    assert "<h2>Alerts</h2>" not in render_html(Report(since_ms=0, until_ms=1, bucket_s=10))
