"""The main job, shortened: the demo's own code path on a one-SU fabric against the real stack.

Every injected fault must produce the detection an operator expects, every runbook the demo
started must reach a decision, the spine reboot must be one incident for which no port is
isolated and no technician sent, and the report must be written from the ledger.
"""

from __future__ import annotations

import socket
import uuid
from pathlib import Path

import pytest
from rich.console import Console

from fabricwatch.alertmanager import find_binary
from fabricwatch.demo.run import DECIDED_STATES, Demo, DemoOptions
from runtime.settings import KafkaSettings, LedgerSettings, Settings, TemporalSettings
from workflows.adapters.notify import read_alerts_file

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.timeout(1500)]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_shortened_demo_detects_every_fault_and_decides_every_runbook(tmp_path: Path) -> None:
    # The demo starts and stops its own broker and Temporal server, as `make demo` does, so
    # its traffic never reaches the session broker other tests read from the start.
    tag = uuid.uuid4().hex[:6]
    state = tmp_path / "state"
    settings = Settings(
        state_dir=state,
        clickhouse_url=None,
        kafka=KafkaSettings(port=_free_port(), controller_port=_free_port()),
        temporal=TemporalSettings(port=_free_port(), ui_port=_free_port()),
        ledger=LedgerSettings(http_port=_free_port()),
    )
    options = DemoOptions(preset="su", short=True, fresh=True, live=False, timeout_s=900,
                          clean_wait="20s", technician_delay_s=2, fabric=f"e2e-{tag}",
                          app_id=f"fabricwatch-streams-{tag}")
    console = Console(record=True, width=120)
    result = Demo(settings, options, console).run()

    assert result.ok, (result.message, result.missing, result.undecided,
                       console.export_text(clear=False)[-3000:])
    assert not result.missing
    for label, ids in result.detected.items():
        assert ids, f"{label} was not detected"
    outcomes = {view.state for view in result.runbooks.values()}
    # the flapping link, the 2X link and the rising BER are isolated, repaired and returned
    assert "returned_to_service" in outcomes
    # the spine reboot is one incident naming the spine: no runbook for a cable of it, so no
    # port of it isolated and no technician step on it
    spine = next(e.incident_root for e in Demo.scenario_of(options).expectations
                 if e.label == "spine reboot")
    reboots = [i for i in result.incidents.values() if i.root == spine]
    assert len(reboots) == 1, result.incidents
    (reboot,) = reboots
    assert reboot.cause.value == "switch_reboot" and len(reboot.members) >= 8
    assert reboot.state == "closed" and reboot.ended is not None  # its links came back
    assert result.incident_runbooks[reboot.incident] == [], result.incident_runbooks
    assert not any(spine in wf for wf in result.technician_steps)
    assert all(v.done or v.state in DECIDED_STATES for v in result.runbooks.values())
    # return to service went through probation: the summary line says how it went
    recorded = console.export_text(clear=False)  # read twice below: keep the record
    text = recorded
    assert "return to service: " in text and "passed probation" in text, text[-3000:]
    # no SU's budget was exceeded
    for su, (in_use, limit) in result.breaker.items():
        assert in_use <= limit, su
    # each fault names the jobs on its links; the job placed elsewhere is touched by none
    assert result.jobs_touched["flapping link"] == ["train-b"]
    assert result.jobs_touched["rising BER"] == ["train-a"]
    assert result.jobs_touched["RoCE pause storm"] == []
    assert all("eval-c" not in jobs for jobs in result.jobs_touched.values())
    # pages reach a receiver: Alertmanager when built (make setup), else the alerts file; the
    # spine reboot is one incident, paged once (and resolved when it closed); no SU's breaker
    # was paged for it
    assert result.alerts_distinct >= 1 and str(state / "alerts.jsonl") in result.alerts_to
    assert ("Alertmanager" in result.alerts_to) == (find_binary() is not None)
    pages: dict[str, list[str]] = {}
    for row in read_alerts_file(state / "alerts.jsonl"):
        if row["kind"] == "incident":
            pages.setdefault(str(row["labels"].get("cause")), []).append(row["action"])
    assert pages.get("switch_reboot", []).count("trigger") == 1, pages
    assert "resolve" in pages["switch_reboot"], pages
    assert "breaker" not in pages, pages
    assert result.report_html is not None
    html = result.report_html.read_text()
    assert "fabricwatch report" in html and "<svg" in html
    # the flapping link's proof (its flap, or a slow_probe localised to its cable when the
    # runbook isolated it before the third down) is in the report by its kind
    proof = {det_id.removeprefix("det:").split("/", 1)[0]
             for det_id in result.detected["flapping link"]}
    assert proof and proof <= {"flap", "slow_probe"}, proof
    assert all(f">{kind}<" in html for kind in proof), proof
    # the summary names the incident and what its members had: nothing
    text = " ".join(recorded.split())  # the console wraps long lines
    assert f"incident {reboot.incident}: switch_reboot of {spine}" in text, text[-3000:]
    assert "0 port runbook(s) and 0 technician step(s) for them" in text
    assert "Jobs and the links that hurt them" in html and "train-b" in html
    # the first screen says what needs a human; the window is grouped by the incident
    report = result.report
    assert report is not None
    assert "What needs you now" in html and "Runbooks waiting on a human" in html
    assert any(i.incident == reboot.incident for i in report.incidents), report.incidents
    # detection to isolation, from the detection that started each run to its isolate
    # record: never negative (the simulator once stamped samples an interval ahead)
    assert report.latencies and report.latency_unmatched == 0
    assert all(r.latency_s >= 0 for r in report.latencies), [
        (r.cable, r.latency_s) for r in report.latencies]
    # binned to the run: a few minutes get tens of round bins, not three
    assert report.bucket_s <= 15 and len(report.downs_over_time) >= 20
    assert "<h2>Alerts</h2>" in html
