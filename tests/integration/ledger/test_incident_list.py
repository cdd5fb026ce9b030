"""`fabricwatch incident list --ledger` on the real engine: every incident as it stands now
(``incidents_current``, the latest message of each id), open ones unless ``--all``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ledger.embedded import EmbeddedLedger
from schemas.events import Incident, IncidentCause

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[3]


def incident(inc: str, state: str, ts: int, members: int, cause: IncidentCause,
             root: str, fabric: str = "lab") -> Incident:
    return Incident(id=f"{inc}-{state}-{ts}", ts=ts, fabric=fabric, source="correlator",
                    incident=inc, cause=cause, root=root, state=state,  # type: ignore[arg-type]
                    started=ts - 1000, ended=ts if state == "closed" else None,
                    members=[f"{root}:{i}" for i in range(1, members + 1)])


def test_incident_list_from_the_ledger(tmp_path: Path) -> None:
    now = int(time.time() * 1000)
    ledger = EmbeddedLedger(tmp_path / "ledger")
    try:
        ledger.migrate()
        ledger.write([
            incident("reboot-1", "open", now - 60_000, 50, IncidentCause.SWITCH_REBOOT,
                     "spine-01"),
            incident("reboot-1", "update", now - 50_000, 51, IncidentCause.SWITCH_REBOOT,
                     "spine-01"),
            incident("node-9", "open", now - 40_000, 8, IncidentCause.NODE_REBOOT, "node0009"),
            incident("node-9", "closed", now - 30_000, 8, IncidentCause.NODE_REBOOT,
                     "node0009"),
            incident("elsewhere", "open", now - 20_000, 3, IncidentCause.SM_EVENT, "sm-1",
                     fabric="other"),
        ])
    finally:
        ledger.close()
    env = {**os.environ, "FABRICWATCH_STATE_DIR": str(tmp_path), "FABRICWATCH_FABRIC": "lab"}
    env.pop("FABRICWATCH_CLICKHOUSE_URL", None)
    cli = [sys.executable, "-c", "from fabricwatch.cli import main; main()",
           "incident", "list", "--ledger"]

    def run(*args: str) -> list[dict[str, object]]:
        out = subprocess.run([*cli, *args], env=env, capture_output=True, text=True,
                             timeout=120, check=False, cwd=REPO)
        assert out.returncode == 0, out.stderr
        return [json.loads(line) for line in out.stdout.splitlines()]

    (open_one,) = run("--json")
    assert open_one["incident"] == "reboot-1" and open_one["state"] == "update"
    assert open_one["members"] == 51 and open_one["root"] == "spine-01"
    both = run("--json", "--all")
    assert [r["incident"] for r in both] == ["node-9", "reboot-1"]
    assert both[0]["state"] == "closed" and both[0]["ended"] == now - 30_000
    text = subprocess.run([*cli, "--all"], env=env, capture_output=True, text=True,
                          timeout=120, check=False, cwd=REPO).stdout
    assert "reboot-1  update  switch_reboot spine-01  51 member(s)" in text
