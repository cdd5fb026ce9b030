"""The opensm controller's argument lists: the M_Key reaches ibportstate and nothing else sees
it; a port the topology does not have is refused before any tool runs. The tools are scripted
here (the lab test runs the real ones against ibsim)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest
from pydantic import SecretStr

from collectors.live.tools import ToolResult, ToolRunner
from schemas.events import Topology
from workflows.adapters.base import AdapterError, AdapterRejected
from workflows.adapters.opensm import OpensmController, check_m_key, mask_argv
from workflows.adapters.records import MemorySink
from workflows.inventory import Inventory
from workflows.remediation.models import PortRef

KEY = "0x1234abcd5678ef01"
PORT = PortRef(fabric="lab", device="leaf-su01-r0", port=2, lid=1)
QUERY = "# Port info: Lid 1 port 2\nPhysLinkState:...................{state}\n"


@dataclass(frozen=True)
class Scripted(ToolRunner):
    """Answers ibportstate like the real one (its own block first), records every argv."""

    calls: list[tuple[str, ...]] = field(default_factory=list)
    state: list[str] = field(default_factory=lambda: ["LinkUp"])
    stderr: str = ""

    async def run(self, argv: Sequence[str], timeout_s: float) -> ToolResult:
        self.calls.append(tuple(argv))
        op = argv[-1]
        if argv[0] == "ibportstate" and op in ("disable", "enable"):
            self.state[0] = "Disabled" if op == "disable" else "Polling"
        if argv[0] == "ibportstate" and self.stderr:
            return ToolResult(tuple(argv), 255, "", self.stderr, 0.01)
        out = QUERY.format(state=self.state[0]) if argv[0] == "ibportstate" else ""
        return ToolResult(tuple(argv), 0, out, "", 0.01)


async def test_the_m_key_goes_to_ibportstate_and_nowhere_else(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    runner = Scripted()
    ctl = OpensmController(runner, records=MemorySink(), m_key=SecretStr(KEY))
    assert await ctl.isolate(PORT) is True
    smp = [c for c in runner.calls if c[0] == "ibportstate"]
    assert smp and all(c[1:3] == ("-y", KEY) for c in smp), smp
    assert [c[-1] for c in smp] == ["query", "disable", "query"]
    await ctl.reset_counters(PORT)
    pma = [c for c in runner.calls if c[0] == "perfquery"]
    assert pma and all(KEY not in c for c in pma)  # performance MADs take no M_Key
    assert KEY.lower() not in caplog.text.lower()
    assert mask_argv(smp[0]) == ["ibportstate", "-y", "****", "1", "2", "query"]


async def test_errors_never_carry_the_m_key() -> None:
    # a tool that echoes the key back (as with -K) in any of its forms
    runner = Scripted(stderr=f"ibwarn: bad key {KEY.upper()} / {int(KEY, 16)} / "
                             f"0x{int(KEY, 16):016x}")
    ctl = OpensmController(runner, m_key=SecretStr(KEY))
    with pytest.raises(AdapterError) as info:
        await ctl.isolate(PORT)
    text = str(info.value)
    assert "-y ****" in text
    for form in (KEY, KEY.upper(), str(int(KEY, 16)), KEY[2:]):
        assert form.lower() not in text.lower(), text


def test_m_key_values_are_checked_without_showing_them() -> None:
    assert check_m_key(SecretStr(" 0xFF\n")).get_secret_value() == "0xFF"
    assert check_m_key(SecretStr("18446744073709551615")).get_secret_value()
    for bad in ("-K", "0x", "0x12345678901234567", "18446744073709551616", "12 34", "x"):
        with pytest.raises(ValueError) as info:
            OpensmController(Scripted(), m_key=SecretStr(bad))
        assert str(info.value).endswith("its value is not shown")
        assert len(bad) < 4 or bad not in str(info.value)


async def test_no_m_key_no_flag() -> None:
    runner = Scripted()
    await OpensmController(runner).is_isolated(PORT)
    assert runner.calls == [("ibportstate", "1", "2", "query")]


async def test_a_port_the_topology_lacks_is_refused_before_any_tool() -> None:
    inv = Inventory()
    runner = Scripted()
    ctl = OpensmController(runner, records=MemorySink(), topology=inv)
    assert await ctl.is_isolated(PORT) is False  # no topology yet: nothing to judge by
    inv.load(Topology.model_validate({
        "id": "t1", "ts": 1, "fabric": "lab", "source": "ibnetdiscover",
        "links": [{"a_device": "leaf-su01-r0", "a_port": 2, "b_device": "node0001/mlx5_0",
                   "b_port": 1}]}))
    runner.calls.clear()
    assert await ctl.isolate(PORT) is True
    ghost = PORT.model_copy(update={"port": 30})
    runner.calls.clear()
    for call in (ctl.isolate, ctl.unisolate, ctl.is_isolated, ctl.reset_counters):
        with pytest.raises(AdapterRejected, match="topology has no such port"):
            await call(ghost)
    with pytest.raises(AdapterRejected):
        await ctl.repair_step(ghost, "clean-and-reseat")
    assert runner.calls == []
