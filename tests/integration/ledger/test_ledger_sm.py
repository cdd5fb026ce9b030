"""The SM's sweeps in the real ledger (chdb), and the audit's NCCL timeout rule reading them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from collectors.ibnetdiscover import parse_nodes
from collectors.lidmap import LidMap
from collectors.smlog import parse_opensm_log
from fabricwatch.cli import main
from fabricwatch.commands.audit import resweep_from_ledger
from ledger.embedded import EmbeddedLedger
from runtime.settings import Settings
from schemas import SmEvent

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"
CLEAN_ENV = ROOT / "golden" / "audit" / "nccl" / "clean.env"  # 4.096 us x 2^22 x 7 = 120 s


def _log_events() -> list[SmEvent]:
    lids = LidMap.from_nodes(parse_nodes(
        (FIXTURES / "ibnetdiscover" / "topograph-ndr-fattree.txt").read_text()))
    text = (FIXTURES / "opensm" / "ibsim-default-level-traps-128.log").read_text()
    return parse_opensm_log(text, fabric="lab", tz="UTC", year=2026, lids=lids).sm_events


def _write(settings: Settings, events: list[SmEvent]) -> None:
    ledger = EmbeddedLedger(settings.ledger_path)
    try:
        ledger.migrate()
        ledger.write(events)
        ledger.write(events)  # a re-read log: the same ids, the same rows
    finally:
        ledger.close()


def _audit(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[str, object]]:
    monkeypatch.setenv("FABRICWATCH_STATE_DIR", str(settings.state_dir))
    monkeypatch.setenv("FABRICWATCH_FABRIC", settings.fabric)
    result = CliRunner().invoke(main, ["audit", "--nccl-env", str(CLEAN_ENV), "--ledger",
                                       "--format", "json", "--fail-on", "never"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    findings = doc["findings"] if isinstance(doc, dict) else doc
    return {f["rule"]: f for f in findings if str(f["rule"]).startswith("NCCL0")}


def test_every_heavy_sweep_of_a_real_log_is_a_row_and_the_audit_measures_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings(state_dir=tmp_path, fabric="lab")
    events = _log_events()
    _write(settings, events)
    ledger = EmbeddedLedger(settings.ledger_path)
    try:
        rows = ledger.query("SELECT trigger, duration_ms, length(devices) AS senders "
                            "FROM sm_sweeps FINAL ORDER BY end")
        assert len(rows) == 5  # one per SUBNET UP of the log
        assert rows[0] == {"trigger": "start-up", "duration_ms": 802, "senders": 0}
        assert [r["trigger"] for r in rows[1:]] == ["trap 128"] * 4
        assert all(r["duration_ms"] is not None and 0 < r["duration_ms"] < 1000 for r in rows)
        assert ledger.query("SELECT count() AS n FROM sm_events FINAL "
                            "WHERE event = 'state'") == [{"n": 2}]
    finally:
        ledger.close()
    resweep = resweep_from_ledger(settings)
    assert resweep == pytest.approx(0.802)
    found = _audit(settings, monkeypatch)
    assert "NCCL010" not in found  # measured: the check ran
    assert "NCCL007" not in found  # 120 s of retries outlast a 0.8 s sweep (ms: .143 to .945)


def test_a_sweep_longer_than_the_nccl_budget_is_nccl007(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings(state_dir=tmp_path, fabric="lab")
    t0 = 1_780_000_000_000
    slow = SmEvent(id="sweep-slow", ts=t0 + 150_000, fabric="lab", source="opensm",
                   event="sweep", sm="0x2c5eab0300b87b40", start=t0, end=t0 + 150_000,
                   trigger="trap 128", ports=["leaf-su01-r0:3"])
    unknown = SmEvent(id="sweep-unknown-start", ts=t0 + 200_000, fabric="lab",
                      source="opensm", event="sweep", sm="0x2c5eab0300b87b40",
                      end=t0 + 900_000)  # no start seen: no duration, not counted
    other = SmEvent(id="sweep-other-fabric", ts=t0, fabric="other", source="opensm",
                    event="sweep", sm="x", start=t0, end=t0 + 999_000)
    _write(settings, [slow, unknown, other])
    assert resweep_from_ledger(settings) == pytest.approx(150.0)
    found = _audit(settings, monkeypatch)
    assert "NCCL007" in found
    assert "150" in json.dumps(found["NCCL007"])


def test_no_sweep_in_the_ledger_says_the_check_did_not_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings(state_dir=tmp_path, fabric="lab")
    _write(settings, [])
    assert resweep_from_ledger(settings) is None
    assert "NCCL010" in _audit(settings, monkeypatch)
