"""`fabricwatch ledger ...` on the real engine: directly, and through a running owner's
endpoint (the CLI must not try to open a folder another process owns)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from fabricwatch.cli import main
from ledger.embedded import EmbeddedLedger
from ledger.http import LedgerHTTPServer
from ledger.synth import history

from .conftest import history_start

pytestmark = pytest.mark.integration


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FABRICWATCH_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("FABRICWATCH_FABRIC", "lab")
    monkeypatch.delenv("FABRICWATCH_CLICKHOUSE_URL", raising=False)
    return tmp_path


def test_cli_direct_and_through_the_endpoint(state_dir: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(main, ["ledger", "query", "isolated_ports"])
    assert result.exit_code == 1 and "ledger migrate" in result.output
    result = runner.invoke(main, ["ledger", "migrate"])
    assert result.exit_code == 0, result.output
    assert "applied [1, 2, 3, 4, 5, 6, 7]" in result.output
    assert "already current" in runner.invoke(main, ["ledger", "migrate"]).output

    ledger = EmbeddedLedger(state_dir / "ledger")
    try:
        events, exp = history(history_start(), hours=2)
        ledger.write(events)
        ledger.close()
        result = runner.invoke(main, ["ledger", "query", "top_flapping_ports",
                                      "--format", "json"])
        assert result.exit_code == 0, result.output
        direct = json.loads(result.output)
        assert {(r["device"], r["port"]) for r in direct} == set(exp.flapping)

        # A worker owns the ledger now: the CLI goes through its endpoint.
        ledger = EmbeddedLedger(state_dir / "ledger")
        with LedgerHTTPServer(ledger, port=0) as server:
            server.start(state_dir)
            result = runner.invoke(main, ["ledger", "query", "top_flapping_ports",
                                          "--format", "json"])
            assert result.exit_code == 0, result.output
            assert json.loads(result.output) == direct
            result = runner.invoke(main, ["ledger", "query", "port_history", "--format", "csv",
                                          "-p", f"device={next(iter(exp.flapping))[0]}",
                                          "-p", f"port={next(iter(exp.flapping))[1]}"])
            assert result.exit_code == 0 and result.output.startswith("ts,kind,what,detail")
            result = runner.invoke(main, ["ledger", "query", "top_flapping_ports", "--format",
                                          "json", "-p", "since=2020-01-01T00:00:00Z",
                                          "-p", "until=1577836800000"])  # 2020-01-01 in ms
            assert result.exit_code == 0 and json.loads(result.output) == []
            result = runner.invoke(main, ["ledger", "tables"])
            assert "counter_samples" in result.output and "ReplacingMergeTree" in result.output
            result = runner.invoke(main, ["ledger", "migrate"])
            assert result.exit_code == 0 and "owned by a running worker" in result.output
            # Bad input: exit code 2 with a reason.
            result = runner.invoke(main, ["ledger", "query", "port_history"])
            assert result.exit_code == 2 and "device, port" in result.output
            result = runner.invoke(main, ["ledger", "query", "DROP TABLE actions"])
            assert result.exit_code == 2 and "read-only" in result.output
            result = runner.invoke(main, ["ledger", "query", "no_such_query"])
            assert result.exit_code == 2
            result = runner.invoke(main, ["ledger", "query", "isolated_ports", "-p", "oops"])
            assert result.exit_code == 2
    finally:
        ledger.close()
