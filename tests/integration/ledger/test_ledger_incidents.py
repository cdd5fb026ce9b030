"""Incidents, maintenance windows and annotated detections on the real engine."""

from __future__ import annotations

import time

import pytest

from ledger.embedded import EmbeddedLedger
from schemas import Detection, Incident, Maintenance

pytestmark = pytest.mark.integration

NOW_MS = (int(time.time()) // 60 - 10) * 60_000
COMMON = {"fabric": "f1", "source": "fabricwatch"}


def _incident(n: int, state: str, members: list[str], **over: object) -> Incident:
    return Incident.model_validate({
        **COMMON, "id": f"inc-msg-{n}", "ts": NOW_MS + n * 1000, "incident": "inc/f1/spine-01/1",
        "cause": "switch_reboot", "root": "spine-01", "state": state, "started": NOW_MS,
        "members": members, **over})


def test_an_incident_is_its_latest_message_and_members_name_it(ledger: EmbeddedLedger) -> None:
    detection = Detection.model_validate({
        **COMMON, "id": "d1", "ts": NOW_MS + 500, "device": "spine-01", "port": 2,
        "detection": "flap", "severity": "critical", "action": "isolate_port",
        "episode": "flap/spine-01:2/1", "incident": "inc/f1/spine-01/1"})
    window = Maintenance.model_validate({
        **COMMON, "id": "m1", "ts": NOW_MS, "window": "mw/1", "scope": "su", "target": "su02",
        "start": NOW_MS, "end": NOW_MS + 7_200_000, "reason": "optics swap", "actor": "alice"})
    events = [
        _incident(1, "open", ["spine-01:1", "spine-01:2"]),
        _incident(2, "update", ["spine-01:1", "spine-01:2", "spine-01:3"]),
        _incident(3, "closed", ["spine-01:1", "spine-01:2", "spine-01:3"],
                  ended=NOW_MS + 120_000),
        detection, window,
    ]
    assert ledger.write(events) == 5
    assert ledger.write(events) == 5  # a replayed batch collapses under FINAL

    current = ledger.query("SELECT * FROM incidents_current")
    assert len(current) == 1
    row = current[0]
    assert (row["cause"], row["root"], row["state"]) == ("switch_reboot", "spine-01", "closed")
    assert row["members"] == ["spine-01:1", "spine-01:2", "spine-01:3"]
    assert ledger.query("SELECT count() AS n FROM incidents FINAL")[0]["n"] == 3

    tagged = ledger.query("SELECT incident, maintenance FROM detections FINAL")
    assert tagged == [{"incident": "inc/f1/spine-01/1", "maintenance": None}]
    windows = ledger.query("SELECT scope, target, actor, exclusion FROM maintenance_windows FINAL")
    assert windows == [{"scope": "su", "target": "su02", "actor": "alice", "exclusion": 0}]
