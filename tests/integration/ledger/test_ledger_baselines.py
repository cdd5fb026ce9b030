"""Pinned probe baselines on the real engine: ``fabricwatch baseline pin | show | unpin`` and
the reader probation uses (who pinned, when, which links the runs crossed)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from fabricwatch.cli import main
from ledger.baselines import current
from ledger.embedded import EmbeddedLedger
from schemas import Detection, Probe
from workflows.adapters.baselines import BaselinesUnavailable, LedgerBaselines

pytestmark = pytest.mark.integration


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FABRICWATCH_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("FABRICWATCH_FABRIC", "lab")
    monkeypatch.delenv("FABRICWATCH_CLICKHOUSE_URL", raising=False)
    return tmp_path


def cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


KEY = ["--rail", "1", "--probe", "ib_write_bw", "--size", "65536", "--scale", "2"]


def test_pin_show_unpin(state_dir: Path) -> None:
    code, out, err = cli("baseline", "pin", *KEY, "--gbps", "392", "--actor", "ana",
                         "--link", "leaf-su01-r2:5")
    assert code == 0, err
    assert "392.0 Gb/s by ana" in out
    code, out, _ = cli("baseline", "show", "--format", "json")
    shown = json.loads(out)
    assert len(shown) == 1
    assert shown[0]["gbps"] == 392.0 and shown[0]["pinned_by"] == "ana"
    assert shown[0]["links"] == ["leaf-su01-r2:5"]
    assert abs(shown[0]["pinned_ts"] - time.time() * 1000) < 120_000
    # a re-pin replaces the key's value; the newest wins
    assert cli("baseline", "pin", *KEY, "--gbps", "380", "--actor", "bo")[0] == 0
    shown = json.loads(cli("baseline", "show", "--format", "json")[1])
    assert [(b["gbps"], b["pinned_by"]) for b in shown] == [(380.0, "bo")]
    code, out, _ = cli("baseline", "unpin", *KEY, "--actor", "cy")
    assert code == 0 and "unpinned" in out
    assert json.loads(cli("baseline", "show", "--format", "json")[1]) == []
    every = json.loads(cli("baseline", "show", "--all", "--format", "json")[1])
    assert every[0]["pinned_by"] == "unpinned by cy"
    # unpinning what is not pinned, bad numbers: exit 2
    assert cli("baseline", "unpin", *KEY)[0] == 2
    assert cli("baseline", "pin", *KEY, "--gbps", "-3", "--actor", "ana")[0] == 2
    assert cli("baseline", "pin", *KEY)[0] == 2  # neither --gbps nor --from-ledger


def test_pin_from_the_ledger_skips_runs_over_links_with_detections(state_dir: Path) -> None:
    now = int(time.time() * 1000)
    ledger = EmbeddedLedger(state_dir / "ledger")
    try:
        ledger.migrate()
        probes = [Probe(id=f"p{i}", ts=now - 60_000 * (i + 1), fabric="lab", source="probe",
                        probe="ib_write_bw", src=f"node000{i % 3}/mlx5_1", dst="node0009/mlx5_1",
                        rail=1, size_bytes=65536, bw_gbps=bw)
                  for i, bw in enumerate([390.0, 392.0, 394.0, 391.0, 393.0, 120.0])]
        # the slow run's source (node0002) had a detection: its runs are not a yardstick
        bad = Detection(id="d1", ts=now - 30 * 60_000, fabric="lab", source="streams",
                        device="node0002/mlx5_1", port=1, detection="error_rate",
                        severity="warning", action="ticket", episode="e1")
        ledger.write([*probes, bad])
    finally:
        ledger.close()
    code, out, err = cli("baseline", "pin", *KEY, "--from-ledger", "--since", "2h",
                         "--actor", "ana")
    assert code == 0, err
    shown = json.loads(cli("baseline", "show", "--format", "json")[1])
    # node0002's runs (394 and 120) are left out: the median of 390, 392, 391, 393
    assert shown[0]["gbps"] == pytest.approx(391.5, abs=0.6)
    assert "node0002/mlx5_1" not in shown[0]["links"]
    assert "node0000/mlx5_1" in shown[0]["links"]
    assert "healthy runs" in shown[0]["note"]


async def test_the_runbook_reads_what_was_pinned(state_dir: Path) -> None:
    assert cli("baseline", "pin", *KEY, "--gbps", "392", "--actor", "ana")[0] == 0
    ledger = EmbeddedLedger(state_dir / "ledger")
    try:
        got = await LedgerBaselines(ledger).pinned("lab", 1)
        assert [(b.probe, b.size_bytes, b.scale, b.gbps, b.pinned_by) for b in got] == [
            ("ib_write_bw", 65536, 2, 392.0, "ana")]
        assert current(ledger, "lab", 2) == []
        with pytest.raises(BaselinesUnavailable):  # no ledger: nothing is judged
            await LedgerBaselines(lambda: None).pinned("lab", 1)
    finally:
        ledger.close()
