"""The report's first screen on the real engine: what needs a human, then the window grouped.

The ledger holds, written here as the other parts write them: an open switch-reboot
incident of 50 member ports (paged) and one more (not paged), a cable with two episodes and
two runbook runs (the second in probation), a runbook that needs a human, and a device that
stopped reporting. Then the report is read back: in Python, in the terminal, and in a real
browser (headless Chromium from Debian's package), which must show the sections without
JavaScript and without the network.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from fabricwatch.report.build import Report, build_report
from fabricwatch.report.html import render_html
from fabricwatch.report.terminal import print_summary
from ledger.embedded import EmbeddedLedger
from schemas.events import (
    ActionRecord,
    Detection,
    Event,
    Incident,
    Topology,
    TopologyLink,
)

pytestmark = pytest.mark.integration

FABRIC = "rpt"
NOW = int(time.time() * 1000) // 1000 * 1000
T0 = NOW - 20 * 60_000  # the story starts 20 minutes ago; the window is the last 30
ROOT = "spine-su01-s1"
MEMBERS = [f"{ROOT}:{p}" for p in range(1, 51)]
LEAF, HOST = ("leaf-su01-r1", 7), ("node0007/mlx5_1", 1)
CABLE = "leaf-su01-r1:7 ~ node0007/mlx5_1:1"
CABLE_ID = f"remediate/{FABRIC}/leaf-su01-r1:7~node0007/mlx5_1:1"
HELD = ("leaf-su01-r2", 3)
HELD_ID = f"remediate/{FABRIC}/leaf-su01-r2:3~node0003/mlx5_2:1"
STALE = "node0009/mlx5_0"
INCIDENT, QUIET = "inc:switch_reboot:spine-su01-s1:1", "inc:sm_event:sm01:1"


def det(device: str, port: int, ts: int, kind: str, *, episode: str, severity: str = "critical",
        action: str = "isolate_port", incident: str | None = None,
        evidence: dict[str, Any] | None = None) -> Detection:
    return Detection(id=f"det:{kind}/{device}:{port}/{ts}", ts=ts, fabric=FABRIC,
                     source="streams", device=device, port=port, detection=kind,
                     severity=severity, action=action, episode=episode, incident=incident,
                     evidence=evidence or {})


class Run:
    """A runbook run's records, as ``PortRemediation._record`` writes them."""

    def __init__(self, workflow_id: str, run_id: str, end: tuple[str, int]) -> None:
        self.workflow_id, self.run_id, self.end = workflow_id, run_id, end
        self.seq = 0
        self.records: list[ActionRecord] = []

    def rec(self, ts: int, step: str, outcome: str = "done", *, note: str | None = None,
            after: dict[str, Any] | None = None) -> Run:
        self.seq += 1
        self.records.append(ActionRecord(
            id=f"{self.workflow_id}/{self.run_id}/{self.seq}", ts=ts, fabric=FABRIC,
            source="workflows", device=self.end[0], port=self.end[1],
            workflow_id=self.workflow_id, step=step, actor="fabricwatch", outcome=outcome,
            note=note, after=after))
        return self


def story() -> list[Event]:
    events: list[Event] = [Topology(
        id=f"topo:{FABRIC}:1", ts=T0 - 60_000, fabric=FABRIC, source="ibnetdiscover",
        links=[TopologyLink(a_device=LEAF[0], a_port=LEAF[1], b_device=HOST[0], b_port=HOST[1]),
               TopologyLink(a_device=HELD[0], a_port=HELD[1], b_device="node0003/mlx5_2",
                            b_port=1),
               *[TopologyLink(a_device=f"leaf-su01-r{p % 8}", a_port=33 + p, b_device=ROOT,
                              b_port=p) for p in range(1, 51)]])]
    # the switch reboot: 50 member ports down; the correlator names the incident from the
    # eleventh on (the first members' detections come before it)
    events.append(Incident(id=f"{INCIDENT}/open", ts=T0 + 2_000, fabric=FABRIC,
                           source="streams", incident=INCIDENT, cause="switch_reboot",
                           root=ROOT, state="open", started=T0, members=MEMBERS, su="su01"))
    for i, member in enumerate(MEMBERS):
        device, port = member.rsplit(":", 1)
        ts = T0 + i * 40
        events.append(det(device, int(port), ts, "missing_link", severity="warning",
                          action="ticket", episode=f"missing_link/{member}/{ts}",
                          incident=INCIDENT if i >= 10 else None))
    events += Run(INCIDENT, "r0", (ROOT, 0)).rec(T0 + 2_500, "page",
                                                 note="on-call fabric: spine reboot").records
    events.append(Incident(id=f"{QUIET}/open", ts=T0 + 5_000, fabric=FABRIC, source="streams",
                           incident=QUIET, cause="sm_event", root="sm01", state="open",
                           started=T0 + 5_000, members=[]))

    # one cable, two episodes: a degraded link on the leaf end (a warning first, then the
    # critical detection that started the runbook), later rising BER on the host end
    a0 = T0 + 60_000
    ep_a, ep_b = f"degraded_link/leaf-su01-r1:7/{a0}", f"ber/node0007/mlx5_1:1/{a0 + 300_000}"
    first = det(*LEAF, a0, "degraded_link", severity="warning", action="ticket", episode=ep_a)
    asked = det(*LEAF, a0 + 10_000, "degraded_link", episode=ep_a)
    again = det(*LEAF, a0 + 30_000, "degraded_link", episode=ep_a)
    ber = det(*HOST, a0 + 300_000, "ber", episode=ep_b)
    ber2 = det(*HOST, a0 + 302_000, "ber", episode=ep_b)
    events += [first, asked, again, ber, ber2]
    run1 = (Run(CABLE_ID, "run-1", LEAF)
            .rec(asked.ts + 400, "detection", note=f"degraded_link (critical) {asked.id}; "
                 f"runbook started; cable {CABLE}, isolating leaf-su01-r1:7")
            .rec(asked.ts + 900, "evidence").rec(asked.ts + 1_000, "budget")
            .rec(asked.ts + 1_500, "isolate", note="isolated")
            .rec(asked.ts + 1_700, "ticket", note="FAB-101")
            .rec(asked.ts + 60_000, "ladder:reseat").rec(asked.ts + 120_000, "return")
            .rec(asked.ts + 120_100, "outcome", note="returned_to_service after reseat"))
    run2 = (Run(CABLE_ID, "run-2", LEAF)
            .rec(ber.ts + 300, "detection", note=f"ber (critical) {ber.id}; runbook started")
            .rec(ber.ts + 1_000, "budget").rec(ber.ts + 2_000, "isolate", note="isolated")
            .rec(ber.ts + 2_200, "ticket", note="FAB-102")
            .rec(ber.ts + 90_000, "ladder:swap-optic")
            .rec(ber.ts + 100_000, "probation", note="back in service on trial for 24 h")
            .rec(ber.ts + 160_000, "check:ib_write_bw", after={"bw_gbps": 390.5}))
    events += run1.records + run2.records

    # a runbook whose isolate could not complete: a human must act
    h0 = T0 + 200_000
    flap = det(*HELD, h0, "flap", episode=f"flap/leaf-su01-r2:3/{h0}")
    events.append(flap)
    events += (Run(HELD_ID, "run-h", HELD)
               .rec(h0 + 500, "detection", note=f"flap (critical) {flap.id}; runbook started")
               .rec(h0 + 1_000, "budget")
               .rec(h0 + 9_000, "isolate", "failed",
                    note="needs a human: isolate: the controller refused (port locked)")).records

    # a device that stopped reporting
    events.append(det(STALE, 0, T0 + 400_000, "stale", severity="warning", action="ticket",
                      episode=f"stale/{STALE}/{T0 + 400_000}", evidence={"scope": "device"}))
    return events


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Report:
    ledger = EmbeddedLedger(tmp_path_factory.mktemp("first-screen") / "ledger")
    try:
        ledger.migrate()
        ledger.write(story())
        return build_report(ledger, since_ms=NOW - 30 * 60_000, until_ms=NOW)
    finally:
        ledger.close()


def test_the_first_screen_lists_what_needs_a_human(report: Report) -> None:
    opened = {i.incident: i for i in report.incidents_open}
    assert set(opened) == {INCIDENT, QUIET}
    reboot = opened[INCIDENT]
    assert (reboot.cause, reboot.root, reboot.members, reboot.started_ms) == (
        "switch_reboot", ROOT, 50, T0)
    assert reboot.paged.startswith("page (done, fabricwatch")
    assert opened[QUIET].paged == "unknown"  # no ticket or page record for it
    [held] = report.waiting
    assert (held.workflow_id, held.state) == (HELD_ID, "needs a human")
    assert "controller refused" in held.why
    [trial] = report.probation
    assert (trial.workflow_id, trial.cable, trial.checks, trial.failed) == (CABLE_ID, CABLE, 1, 0)
    assert trial.last_check == "check:ib_write_bw done" and "390.5" in (trial.measurement or "")
    assert [(s.device, s.scope) for s in report.stale] == [(STALE, "device")]


def test_the_incident_folds_its_detections_into_one_row(report: Report) -> None:
    reboot = next(i for i in report.incidents if i.incident == INCIDENT)
    # all 50, also the ten the correlator had not named yet
    assert (reboot.detections, reboot.episodes, reboot.kinds) == (50, 50, {"missing_link": 50})
    assert not any(ROOT in c.cable for c in report.cables)
    assert report.detections_by_kind["missing_link"] == 50  # counted, just not listed 50 times


def test_a_cable_is_one_row_with_its_two_episodes(report: Report) -> None:
    [cable] = [c for c in report.cables if c.cable == CABLE]
    assert [(e.port, e.detection, e.n) for e in cable.episodes] == [
        ("leaf-su01-r1:7", "degraded_link", 3), ("node0007/mlx5_1:1", "ber", 2)]
    assert cable.runbook == "in probation"  # its latest run, not the earlier return
    assert {c.cable for c in report.cables} == {CABLE, "leaf-su01-r2:3 ~ node0003/mlx5_2:1",
                                                f"{STALE}:0"}


def test_detection_to_isolation_is_positive_and_per_cable(report: Report) -> None:
    rows = [(r.cable, r.detection, r.detected_on, r.latency_s) for r in report.latencies]
    # from the detection that started each run (not the cable's first, a warning 10 s
    # earlier, nor a later one) to that run's own isolate record
    assert rows == [(CABLE, "degraded_link", "leaf-su01-r1:7", 1.5),
                    (CABLE, "ber", "node0007/mlx5_1:1", 2.0)]
    assert report.latency_unmatched == 0


def test_the_series_are_binned_to_the_window(report: Report) -> None:
    assert report.bucket_s == 30  # 30 minutes: 30 s bins
    assert 60 <= len(report.downs_over_time) <= 62
    series = report.detections_over_time["missing_link"]
    assert len(series) == len(report.downs_over_time) and sum(v for _, v in series) == 50


def test_the_terminal_prints_the_same_first_screen(report: Report) -> None:
    console = Console(record=True, width=200)
    print_summary(report, console)
    text = console.export_text()
    needs, _, window = text.partition("the window")
    for expected in ("open incidents", "switch_reboot", ROOT, "unknown",
                     "runbooks waiting on a human (1)", "needs a human", "controller refused",
                     "cables in probation", "check:ib_write_bw done", "stale devices (1)", STALE):
        assert expected in needs, expected
    assert INCIDENT in window and "50 in 50 episodes" in window and CABLE in window


def test_an_empty_ledger_says_none(tmp_path: Path) -> None:
    ledger = EmbeddedLedger(tmp_path / "ledger")
    try:
        ledger.migrate()
        empty = build_report(ledger, since_ms=NOW - 180_000, until_ms=NOW)
    finally:
        ledger.close()
    html = render_html(empty)
    for section in ("Open incidents", "Runbooks waiting on a human", "Cables in probation",
                    "Stale devices", "Incidents", "Detections outside incidents",
                    "Isolations in this window"):
        assert f"{section}: none." in html, section
    assert empty.bucket_s == 5 and len(empty.downs_over_time) in (36, 37)


# --- the same report in a real browser --------------------------------------------------------

def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("chromium is not installed (make browser-deps: Debian's chromium)")
    return found


def _browser(binary: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # no network at all: every host name resolves to nothing, and no background fetches
    cmd = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
           "--no-first-run", "--disable-background-networking", "--disable-component-update",
           "--disable-sync", "--host-resolver-rules=MAP * ~NOTFOUND",
           f"--user-data-dir={profile}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "HOME": str(profile)})


class _Sections(HTMLParser):
    """The text of each <section>, the <h3> titles, and how many <details> each holds."""

    def __init__(self) -> None:
        super().__init__()
        self.text: dict[str, list[str]] = {}
        self.details: dict[str, int] = {}
        self.h3: list[str] = []
        self.tags: set[str] = set()
        self._section: str | None = None
        self._in_h3 = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        if tag == "section":
            self._section = dict(attrs).get("id") or "?"
            self.text[self._section] = []
            self.details[self._section] = 0
        elif tag == "details" and self._section:
            self.details[self._section] += 1
        elif tag == "h3":
            self._in_h3 = True

    def handle_endtag(self, tag: str) -> None:
        if tag == "h3":
            self._in_h3 = False

    def handle_data(self, data: str) -> None:
        if self._in_h3:
            self.h3.append(data.strip())
        if self._section:
            self.text[self._section].append(data)


@pytest.mark.browser
def test_the_html_report_in_a_real_browser(report: Report, tmp_path: Path) -> None:
    binary = _chromium()
    html = render_html(report)
    # self-contained: nothing to fetch, nothing to run
    assert not re.search(r"<script|<link|<img|<iframe|@import|url\(|src=", html, re.I)
    page = tmp_path / "report.html"
    page.write_text(html, encoding="utf-8")
    dom = _browser(binary, tmp_path / "profile", "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    parsed = _Sections()
    parsed.feed(dom.stdout)
    assert "script" not in parsed.tags
    # the first screen, in this order, with what needs a human
    assert parsed.h3[:4] == ["Open incidents", "Runbooks waiting on a human",
                             "Cables in probation", "Stale devices"]
    assert list(parsed.text)[:2] == ["needs-you", "in-window"]
    needs = " ".join(parsed.text["needs-you"])
    for expected in ("switch_reboot", ROOT, "50", "unknown", "needs a human",
                     "controller refused", CABLE, "check:ib_write_bw done", STALE):
        assert expected in needs, expected
    window = " ".join(parsed.text["in-window"])
    assert INCIDENT in window and "50 in 50 episodes" in window
    # folded: the incident is one row, the cable one row with its episodes inside
    assert window.count("missing_link") <= 2
    assert "2 episodes, 5 detections" in window
    assert parsed.details["in-window"] >= 1 + 1 + 2  # incident, cable, each episode
    the_rest = " ".join(parsed.text["the-rest"])
    assert "Detection to isolation" in the_rest and "1.50" in the_rest and "2.00" in the_rest
    shot = tmp_path / "report.png"
    taken = _browser(binary, tmp_path / "profile", "--window-size=1200,2000",
                     f"--screenshot={shot}", page.as_uri())
    assert taken.returncode == 0, taken.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1200, 2000) and len(data) > 20_000  # drawn, not blank
