"""``fabricwatch lab`` input checks (exit 2 on bad input, nothing started)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from fabricwatch.cli import main


@pytest.fixture
def runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setenv("FABRICWATCH_STATE_DIR", str(tmp_path))
    return CliRunner()


@pytest.mark.parametrize("args", [
    ["lab", "run", "bash", "-c", "id"],
    ["lab", "run", "perfquery", "1;id"],
    ["lab", "run", "perfquery", "$(id)"],
    ["lab", "inject", "counters", "leaf-su01-r0:1", "Symbol;Error=1"],
    ["lab", "inject", "counters", "leaf-su01-r0:1", "SymbolErrorCounter=-1"],
    ["lab", "inject", "unlink", "leaf-su01-r0"],
    ["lab", "inject", "flap", "leaf-su01-r0:1", "--count", "0"],
])
def test_bad_input_exits_2(runner: CliRunner, args: list[str]) -> None:
    result = runner.invoke(main, args)
    assert result.exit_code == 2, result.output


def test_no_lab_is_said_plainly(runner: CliRunner) -> None:
    result = runner.invoke(main, ["lab", "status"])
    assert result.exit_code == 3 and "no lab" in result.output
    result = runner.invoke(main, ["lab", "inject", "unlink", "leaf-su01-r0:1"])
    assert result.exit_code == 1 and "no lab" in result.output
    result = runner.invoke(main, ["lab", "down"])
    assert result.exit_code == 0 and "nothing was running" in result.output
