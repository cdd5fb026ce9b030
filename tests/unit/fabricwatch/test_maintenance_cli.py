"""``fabricwatch maintenance add`` refuses bad arguments before it reaches any broker."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from fabricwatch.commands.maintenance import maintenance_group


@pytest.mark.parametrize(("args", "says"), [
    (["add", "--for", "2h", "--reason", "x"], "give --device D, --su S or --fabric F"),
    (["add", "--device", "a", "--su", "su01", "--for", "2h", "--reason", "x"], "one of"),
    (["add", "--device", "a", "--for", "soon", "--reason", "x"], "--for"),
    (["add", "--device", "a", "--for", "0s", "--reason", "x"], "longer than zero"),
    (["add", "--device", "a", "--for", "2h", "--reason", "  "], "must say why"),
    (["add", "--device", "bad\x01name", "--for", "2h", "--reason", "x"], "control character"),
])
def test_bad_arguments_exit_2(args: list[str], says: str,
                              monkeypatch: pytest.MonkeyPatch) -> None:
    # a broker that does not exist: reaching it would be a different failure (exit 1)
    monkeypatch.setenv("FABRICWATCH_KAFKA__BOOTSTRAP", "127.0.0.1:9")
    result = CliRunner().invoke(maintenance_group, args)
    assert result.exit_code == 2, result.output
    assert says in result.output


def test_an_unreachable_broker_exits_1(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FABRICWATCH_KAFKA__BOOTSTRAP", "127.0.0.1:9")
    result = CliRunner().invoke(maintenance_group, ["list"])
    assert result.exit_code == 1, result.output
    assert "cannot read fabric.maintenance" in result.output
