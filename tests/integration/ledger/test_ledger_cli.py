"""`fabricwatch ledger ...` on the real engine: directly, and through a running owner's
endpoint (the CLI must not try to open a folder another process owns)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from fabricwatch.cli import main
from ledger.embedded import EmbeddedLedger
from ledger.http import LedgerHTTPServer
from ledger.migrations import load_migrations

from .conftest import history_start
from .synth import history

pytestmark = pytest.mark.integration


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FABRICWATCH_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("FABRICWATCH_FABRIC", "lab")
    monkeypatch.delenv("FABRICWATCH_CLICKHOUSE_URL", raising=False)
    return tmp_path


def test_a_state_folder_without_a_ledger_gets_an_empty_migrated_one(state_dir: Path) -> None:
    runner = CliRunner()
    assert not (state_dir / "ledger").exists()
    result = runner.invoke(main, ["ledger", "query", "isolated_ports", "--format", "json"])
    assert result.exit_code == 0, result.output
    assert "created an empty one" in result.stderr
    assert json.loads(result.stdout) == []
    # created and migrated to the latest schema: nothing left for migrate to do
    assert "already current" in runner.invoke(main, ["ledger", "migrate"]).output
    report = state_dir / "out" / "report.html"
    result = runner.invoke(main, ["report", "--since", "1h", "--out", str(report)])
    assert result.exit_code == 0, result.output
    assert "created an empty one" not in result.stderr  # only the first command created it
    assert report.read_text().startswith("<!")


def test_a_report_is_the_first_command_on_a_new_state_folder(state_dir: Path) -> None:
    report = state_dir / "report.html"
    result = CliRunner().invoke(main, ["report", "--since", "24h", "--out", str(report)])
    assert result.exit_code == 0, result.output
    assert "created an empty one" in result.stderr and report.is_file()
    # the terminal shows the HTML's first screen, and an empty ledger's sections say none
    for line in ("what needs you now", "open incidents: none",
                 "runbooks waiting on a human: none", "cables in probation: none",
                 "stale devices: none", "incidents: none"):
        assert line in result.stdout, line
    assert "Open incidents: none." in report.read_text()


def test_a_server_that_cannot_be_reached_is_an_error(state_dir: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from fabricwatch.stack_config import free_ports

    (port,) = free_ports(1)
    monkeypatch.setenv("FABRICWATCH_CLICKHOUSE_URL", f"http://default@127.0.0.1:{port}/fabricwatch")
    result = CliRunner().invoke(main, ["ledger", "query", "SELECT 1"])
    assert result.exit_code != 0
    assert "cannot reach" in result.output
    assert not (state_dir / "ledger").exists()


def test_cli_direct_and_through_the_endpoint(state_dir: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(main, ["ledger", "migrate"])
    assert result.exit_code == 0, result.output
    assert f"applied {[m.version for m in load_migrations()]}" in result.output
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


def test_serve_refuses_a_non_loopback_bind_without_users(state_dir: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FABRICWATCH_LEDGER__HTTP_HOST", "0.0.0.0")  # noqa: S104 - refused
    result = CliRunner().invoke(main, ["ledger", "serve", "--port", "0"])
    assert result.exit_code == 2
    assert "not loopback" in result.output and "ledger_http_password" in result.output


def test_cli_through_an_endpoint_with_users(state_dir: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The owner serves with users from the secrets files; the CLI of another process signs
    in as the configured user, and a wrong password is ClickHouse's AUTHENTICATION_FAILED."""
    from ledger.http import server_for
    from runtime.settings import Settings

    secret = state_dir / "ro-password"
    secret.write_text("r-secret\n")
    monkeypatch.setenv("FABRICWATCH_SECRETS__LEDGER_HTTP_READONLY_PASSWORD_FILE", str(secret))
    ledger = EmbeddedLedger(state_dir / "ledger")
    try:
        ledger.migrate()
        with server_for(ledger, Settings(), port=0) as server:
            url = server.start(state_dir)
            info = json.loads((state_dir / "ledger-endpoint.json").read_text())
            assert info["auth"] is True
            info["pid"] = os.getppid()  # as if another live process owned it
            (state_dir / "ledger-endpoint.json").write_text(json.dumps(info))
            runner = CliRunner()
            result = runner.invoke(main, ["ledger", "query", "SELECT count() AS n FROM "
                                          "port_events", "--format", "json"])
            assert result.exit_code == 0, result.output
            assert json.loads(result.output) == [{"n": 0}]
            secret.write_text("wrong\n")
            result = runner.invoke(main, ["ledger", "query", "SELECT 1"])
            assert result.exit_code != 0 and "516" in result.output, result.output
            assert url
    finally:
        ledger.close()
