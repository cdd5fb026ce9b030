"""The opensm controller on an M_Key-protected lab: opensm configured with ``m_key`` and
``m_key_protection_level 2`` (as the audit's OSM001 asks), the real ibsim, opensm and
infiniband-diags.

What this shows, and what it cannot: the controller hands the key to ``ibportstate -y`` on
every subnet-management call, and the key appears in no record, error or log line. ibsim
0.10 does **not** enforce M_Key: it ignores the M_Key of an incoming SMP and does not keep
the M_Key or protection bits that opensm sets in PortInfo (port 0 of a switch reads back
``Mkey 0x0`` and ``ProtectBits 0``), so a disable without the key succeeds here as well. The
refusal of a keyless Set on a protected fabric is real hardware's behaviour, untested here;
the test asserts ibsim's behaviour so that a future ibsim that enforces the key turns it red
(then it becomes the negative check).
"""

from __future__ import annotations

import asyncio
import logging
import re
import shutil
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from pydantic import SecretStr

from collectors.ibnetdiscover import parse_ibnetdiscover
from collectors.live.tools import ToolResult, ToolRunner
from fabricwatch.lab import LabStack
from sim.topology import generate
from workflows.adapters.base import AdapterError, AdapterRejected
from workflows.adapters.opensm import OpensmController
from workflows.adapters.records import MemorySink
from workflows.inventory import Inventory

pytestmark = [pytest.mark.lab, pytest.mark.integration]

KEY = "0x5ec2e7000000f00d"
DEVICE, PORT = "leaf-su01-r0", 2  # LID 1, cabled to node0002/mlx5_0


@dataclass(frozen=True)
class Recording(ToolRunner):
    """The lab's runner, recording each argv it ran."""

    calls: list[tuple[str, ...]] = field(default_factory=list)

    async def run(self, argv: Sequence[str], timeout_s: float) -> ToolResult:
        self.calls.append(tuple(argv))
        return await super().run(argv, timeout_s)


@pytest.fixture
def mkey_lab(tmp_path: Path) -> Iterator[LabStack]:
    if shutil.which("ibsim") is None:
        pytest.skip("the ibsim binary is absent (make lab-deps installs ibsim-utils, opensm, "
                    "infiniband-diags)")
    net = tmp_path / "lab.net"
    net.write_text(generate("lab").to_ibnetdiscover(), encoding="utf-8")
    stack = LabStack(tmp_path / "state")
    stack.up(net, timeout_s=60, m_key=SecretStr(KEY), m_key_protection_level=2)
    try:
        yield stack
    finally:
        stack.down()


def field_of(text: str, name: str) -> str:
    m = re.search(rf"^{name}:\.*(\S+)", text, re.MULTILINE)
    assert m, text
    return m.group(1)


async def test_m_key_reaches_ibportstate_and_no_record(mkey_lab: LabStack,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    conf = (mkey_lab.dir / "opensm.conf")
    assert f"m_key {KEY}" in conf.read_text() and "m_key_protection_level 2" in conf.read_text()
    assert conf.stat().st_mode & 0o077 == 0  # the key's file is the owner's alone
    base = mkey_lab.tool_runner()
    runner = Recording(env=base.env, cwd=base.cwd)
    topo = parse_ibnetdiscover(await runner.check(["ibnetdiscover"], 30), fabric="lab",
                               ts=int(time.time() * 1000))
    inventory = Inventory()
    inventory.load(topo)
    port = inventory.port_ref("lab", DEVICE, PORT)
    assert port.lid == 1
    records = MemorySink()
    ctl = OpensmController(runner, records=records, m_key=SecretStr(KEY), topology=inventory)

    assert await ctl.isolate(port) is True
    assert await ctl.phys_state(port) == "Disabled"
    smp = [c for c in runner.calls if c[0] == "ibportstate"]
    assert [c[-1] for c in smp] == ["query", "disable", "query", "query"]
    assert all(c[1:3] == ("-y", KEY) for c in smp), smp
    await ctl.reset_counters(port)  # perfquery: a PMA MAD, no key
    assert all(KEY not in c for c in runner.calls if c[0] == "perfquery")
    assert await ctl.unisolate(port) is True
    assert await ctl.phys_state(port) != "Disabled"

    # what ibsim does with the key: it keeps none of it, and a keyless Set works too
    sw = await runner.run(["smpquery", "-K", "-y", KEY, "portinfo", "1", "0"], 30)
    assert sw.exit_code == 0, sw.stderr
    assert int(field_of(sw.stdout, "Mkey"), 16) == 0 and field_of(sw.stdout, "ProtectBits") == "0"
    keyless = await runner.run(["ibportstate", "1", str(PORT), "disable"], 30)
    assert "PhysLinkState:...................Disabled" in keyless.stdout, keyless
    assert await ctl.is_isolated(port)  # ibsim does not enforce M_Key (see the docstring)
    await ctl.unisolate(port)

    # the key is in no record, error or log line
    text = " ".join(str(r.model_dump()) for r in records.records.values())
    with pytest.raises(AdapterError) as info:  # a LID nobody answers: the error shows argv
        await ctl.phys_state(port.model_copy(update={"lid": 999}))
    assert "-y ****" in str(info.value)
    for where in (text, str(info.value), caplog.text):
        assert KEY[2:].lower() not in where.lower()

    # a port the fabric's topology does not have is refused before any tool runs
    before = len(runner.calls)
    with pytest.raises(AdapterRejected, match="no such port"):
        await ctl.isolate(inventory.port_ref("lab", DEVICE, 30).model_copy(update={"lid": 1}))
    assert len(runner.calls) == before
    await asyncio.sleep(0)


def test_lab_up_m_key_takes_the_settings_key(tmp_path: Path) -> None:
    import os
    import subprocess

    from lab_helpers import FABRICWATCH

    if shutil.which("ibsim") is None:
        pytest.skip("the ibsim binary is absent")
    net = tmp_path / "lab.net"
    net.write_text(generate("lab").to_ibnetdiscover(), encoding="utf-8")
    state = tmp_path / "state"
    env = {**os.environ, "FABRICWATCH_STATE_DIR": str(state)}
    env.pop("FABRICWATCH_SECRETS__M_KEY_FILE", None)
    env.pop("FABRICWATCH_SECRETS__M_KEY", None)

    def lab(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([FABRICWATCH, "lab", *args], env=env, capture_output=True,
                              text=True, timeout=120, check=False)

    res = lab("up", "--topology", str(net), "--m-key")
    assert res.returncode == 2 and "M_KEY_FILE" in res.stderr, res  # no key configured
    (tmp_path / "mkey").write_text(KEY + "\n")
    env["FABRICWATCH_SECRETS__M_KEY_FILE"] = str(tmp_path / "mkey")
    try:
        res = lab("up", "--topology", str(net), "--m-key", "--m-key-protection", "3")
        assert res.returncode == 0, res
        assert KEY[2:] not in res.stdout + res.stderr
        conf = (state / "lab" / "opensm.conf").read_text()
        assert f"m_key {KEY}" in conf and "m_key_protection_level 3" in conf
    finally:
        assert "opensm, ibsim" in lab("down").stdout
