"""``fabricwatch runbook-worker --controller ufm|sonic|opensm``: configuration errors (no
inventory, a bad one, an inline secret, an unreadable secret file, a malformed M_Key) exit 2
with the reason before anything connects; a good inventory builds the controller."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from pydantic import SecretStr

from fabricwatch.commands.runbook import runbook_worker_command
from runtime.settings import SecretsSettings, Settings
from workflows.adapters.opensm import OpensmController
from workflows.adapters.sonic import SonicController
from workflows.adapters.ufm import UfmController
from workflows.wiring import WiringError, WiringOptions, build_controller

SONIC = """
devices:
  leaf-su01-r3:
    sonic: {{url: "https://leaf-su01-r3.mgmt", interfaces: {{8: Ethernet32}}{extra}}}
"""


def cli(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    # an unreachable Temporal: any attempt to connect would hang or fail differently
    env = {"FABRICWATCH_STATE_DIR": str(tmp_path / "state"),
           "FABRICWATCH_TEMPORAL__ADDRESS": "127.0.0.1:9", **(env or {})}
    res = CliRunner().invoke(runbook_worker_command, list(args), env=env)
    return res.exit_code, res.output


@pytest.mark.parametrize(("args", "files", "env", "why"), [
    (["--controller", "sonic"], {}, {}, "needs --inventory FILE"),
    (["--controller", "ufm", "--inventory", "{tmp}/inv.yaml"],
     {"inv.yaml": SONIC.format(extra="")}, {}, "no device has a ufm entry"),
    (["--controller", "sonic", "--inventory", "{tmp}/inv.yaml"],
     {"inv.yaml": SONIC.format(extra=", password: hunter2")}, {},
     "secrets are given by reference only"),
    (["--controller", "sonic", "--inventory", "{tmp}/inv.yaml"],
     {"inv.yaml": SONIC.format(extra="")}, {}, "no credentials in the inventory"),
    (["--controller", "sonic", "--inventory", "{tmp}/nope.yaml"], {}, {}, "nope.yaml"),
    (["--controller", "opensm"], {"mkey": "hunter2\n"},
     {"FABRICWATCH_SECRETS__M_KEY_FILE": "{tmp}/mkey"}, "the M_Key is not 0x"),
    (["--controller", "opensm"], {}, {"FABRICWATCH_SECRETS__M_KEY_FILE": "{tmp}/absent"},
     "cannot read the M_Key file"),
])
def test_configuration_errors_exit_2_before_connecting(
        tmp_path: Path, args: list[str], files: dict[str, str], env: dict[str, str],
        why: str) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    code, out = cli(tmp_path, *[a.format(tmp=tmp_path) for a in args],
                    env={k: v.format(tmp=tmp_path) for k, v in env.items()})
    assert code == 2, out
    assert why in out and "hunter2" not in out


def test_a_good_inventory_builds_each_controller(tmp_path: Path) -> None:
    (tmp_path / "pw").write_text("pw\n")
    inv = tmp_path / "inv.yaml"
    inv.write_text(f"""
credentials: {{admin: {{username: admin, password_file: {tmp_path}/pw}}}}
ufm: {{default: {{url: "https://ufm.mgmt", credentials: admin}}}}
devices:
  leaf-su01-r3: {{sonic: {{url: "https://sw", credentials: admin, interfaces: {{8: E32}}}}}}
  ib-leaf-1: {{ufm: {{guid: "248a0703002e628e", ports: "1-40"}}}}
""")
    settings = Settings()
    assert isinstance(build_controller(settings, WiringOptions(controller="sonic",
                                                               inventory_path=inv), None),
                      SonicController)
    assert isinstance(build_controller(settings, WiringOptions(controller="ufm",
                                                               inventory_path=inv), None),
                      UfmController)
    keyed = Settings(secrets=SecretsSettings(m_key=SecretStr("0x00000000000000ff")))
    ctl = build_controller(keyed, WiringOptions(controller="opensm"), None)
    assert isinstance(ctl, OpensmController) and ctl._smp_args() == ["-y", "0x00000000000000ff"]
    with pytest.raises(WiringError, match="needs --inventory"):
        build_controller(settings, WiringOptions(controller="ufm"), None)
