"""The report's jobs section on the real engine: each job with the episodes on its links."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from fabricwatch.report.build import build_report
from fabricwatch.report.html import render_html
from fabricwatch.report.terminal import print_summary
from ledger.embedded import EmbeddedLedger

from .test_ledger_jobs import FABRIC, NOW_MS, T0, UPLINK, _history

pytestmark = pytest.mark.integration


def test_report_names_the_jobs_each_episode_touched(tmp_path: Path) -> None:
    ledger = EmbeddedLedger(tmp_path / "ledger")
    try:
        ledger.migrate()
        ledger.write(_history())
        report = build_report(ledger, since_ms=T0 - 3_600_000, until_ms=NOW_MS)
    finally:
        ledger.close()
    jobs = {j.job: j for j in report.jobs}
    assert set(jobs) == {"A", "B", "C"}  # C ended inside the window
    assert {r["detection"] for r in jobs["A"].impact} == {"miswire", "missing_link",
                                                          "isolated", "degraded_link"}
    assert jobs["A"].off_rail == ["node0001/mlx5_0", "node0001/mlx5_1"]
    assert jobs["B"].impact == [] and jobs["A"].gpus == 32
    assert jobs["C"].impact == []  # everything happened after it ended
    assert report.touched[f"{FABRIC}|{UPLINK[0]}:{UPLINK[1]}"] == ["A"]
    assert all("B" not in names for names in report.touched.values())
    html = render_html(report)
    assert "Jobs and the links that hurt them" in html and "degraded_link" in html
    console = Console(record=True, width=160)
    print_summary(report, console)
    assert "jobs and the episodes on their links" in console.export_text()
