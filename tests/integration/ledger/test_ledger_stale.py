"""Silence in the ledger: a port whose device (or itself) went stale is `unknown`, never ok."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ledger.embedded import EmbeddedLedger
from schemas import Counters, PortEvent, PortSample, encode
from schemas.policy import Policy
from streams.replay import replay

pytestmark = pytest.mark.integration


def history(start: int) -> list[Counters | PortEvent]:
    """Three hosts at 1 s with two HCAs each: h2 is silent for 20 s and back; h3 stops;
    h1's mlx5_1 port cannot be read from 10 s on."""
    out: list[Counters | PortEvent] = []
    for t in range(40):
        for host in ("h1", "h2", "h3"):
            if (host == "h2" and 10 <= t < 30) or (host == "h3" and t >= 20):
                continue
            samples = []
            for hca in ("mlx5_0", "mlx5_1"):
                if host == "h1" and hca == "mlx5_1" and t >= 10:
                    samples.append(PortSample(port=1, device=f"{host}/{hca}",
                                              error="mlx5_1 port 1 is no longer in sysfs"))
                else:
                    samples.append(PortSample(port=1, device=f"{host}/{hca}", symbol_errors=0,
                                              xmit_wait=t))
            out.append(Counters(id=f"{host}-{t}", ts=start + t * 1000, fabric="lab",
                                source="host_agent", device=host, ports=samples))
    out.append(PortEvent(id="down", ts=start + 5000, fabric="lab", source="host_agent",
                         device="h1/mlx5_0", port=1, state="down"))
    return out


def test_stale_ports_are_unknown_and_back_to_known(tmp_path: Path) -> None:
    events = history(int(time.time() * 1000) - 600_000)
    dets = list(replay([encode(e) for e in events], Policy()))
    assert sorted((d.detection.value, d.device, d.port) for d in dets) == [
        ("stale", "h1/mlx5_1", 1),
        ("stale", "h2/mlx5_0", 0), ("stale", "h2/mlx5_1", 0),
        ("stale", "h3/mlx5_0", 0), ("stale", "h3/mlx5_1", 0),
        ("stale_end", "h2/mlx5_0", 0), ("stale_end", "h2/mlx5_1", 0)]
    ledger = EmbeddedLedger(tmp_path / "ledger")
    try:
        ledger.migrate()
        ledger.write([*events, *dets])
        rows = ledger.query("SELECT device, port, status, stale_since, last_sample_ts "
                            "FROM port_ledger ORDER BY device, port")
        status = {(r["device"], r["port"]): r["status"] for r in rows}
        assert status == {("h1/mlx5_0", 1): "down", ("h1/mlx5_1", 1): "unknown",
                          ("h2/mlx5_0", 1): "ok", ("h2/mlx5_1", 1): "ok",
                          ("h3/mlx5_0", 1): "unknown", ("h3/mlx5_1", 1): "unknown"}
        by = {(r["device"], r["port"]): r for r in rows}
        assert by[("h3/mlx5_0", 1)]["stale_since"] is not None
        assert by[("h2/mlx5_0", 1)]["stale_since"] is None
        # error samples are not stored as counter values (they would zero the next delta)
        samples = ledger.query("SELECT count() AS n, max(xmit_wait) AS m FROM "
                               "counter_samples FINAL WHERE device = 'h1/mlx5_1'")
        assert samples == [{"n": 10, "m": 9}]
        opened = ledger.query("SELECT device, port, scope FROM stale_open ORDER BY device")
        assert [(r["device"], r["port"], r["scope"]) for r in opened] == [
            ("h1/mlx5_1", 1, "port"), ("h3/mlx5_0", 0, "device"), ("h3/mlx5_1", 0, "device")]
    finally:
        ledger.close()


def test_the_report_shows_unknown_ports(tmp_path: Path) -> None:
    from rich.console import Console

    from fabricwatch.report.build import build_report
    from fabricwatch.report.html import render_html
    from fabricwatch.report.terminal import print_summary

    start = int(time.time() * 1000) - 600_000
    events = history(start)
    dets = list(replay([encode(e) for e in events], Policy()))
    ledger = EmbeddedLedger(tmp_path / "ledger")
    try:
        ledger.migrate()
        ledger.write([*events, *dets])
        report = build_report(ledger, since_ms=start - 1000, until_ms=start + 3_600_000)
    finally:
        ledger.close()
    assert report.ports_by_status == {"down": 1, "ok": 2, "unknown": 3}
    assert [p for p, _ in report.unknown_ports] == ["h1/mlx5_1:1", "h3/mlx5_0:1",
                                                    "h3/mlx5_1:1"]
    html = render_html(report)
    assert "<b>3</b>unknown" in html and "h3/mlx5_0:1" in html
    console = Console(record=True, width=200)
    print_summary(report, console)
    text = console.export_text()
    assert "1 down, 2 ok, 3 unknown" in text and "h1/mlx5_1:1" in text
