"""sim.controller: idempotent commands, deterministic repairs, state that survives a restart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sim.controller import STATE_FILE, ControllerError, SimController


def test_isolate_is_idempotent_and_persists(tmp_path: Path) -> None:
    ctl = SimController(tmp_path)
    assert not ctl.is_isolated("leaf-su01-r3", 5)
    assert ctl.isolate("leaf-su01-r3", 5) is True
    assert ctl.isolate("leaf-su01-r3", 5) is False
    assert ctl.is_isolated("leaf-su01-r3", 5)
    serial = ctl.view().serial
    ctl.isolate("leaf-su01-r3", 5)
    assert ctl.view().serial == serial  # a no-op writes nothing
    again = SimController(tmp_path)  # a restart reads the same state
    assert again.is_isolated("leaf-su01-r3", 5)
    assert again.isolated_ports() == ["leaf-su01-r3:5"]
    assert again.unisolate("leaf-su01-r3", 5) is True
    assert again.unisolate("leaf-su01-r3", 5) is False
    assert not ctl.is_isolated("leaf-su01-r3", 5)  # the first instance sees the change


def test_state_file_is_json_and_written_atomically(tmp_path: Path) -> None:
    ctl = SimController(tmp_path)
    ctl.isolate("node0001/mlx5_0", 1)
    ctl.reset_counters("node0001/mlx5_0", 1)
    state = json.loads((tmp_path / STATE_FILE).read_text())
    assert state["version"] == 1
    assert "node0001/mlx5_0:1" in state["isolated"]
    assert state["resets"] == {"node0001/mlx5_0:1": 1}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".sim-controller.")]


def test_reset_sequence(tmp_path: Path) -> None:
    ctl = SimController(tmp_path)
    assert ctl.reset_counters("leaf-su01-r0", 1) == 1
    assert ctl.reset_counters("leaf-su01-r0", 1) == 2
    assert ctl.view().resets == {"leaf-su01-r0:1": 2}


def test_repair_is_deterministic_and_retry_safe(tmp_path: Path) -> None:
    rungs = ["clean-and-reseat", "swap-optic", "swap-cable", "swap-switch-port"]
    a = SimController(tmp_path / "a", seed=7)
    b = SimController(tmp_path / "b", seed=7)
    ports = [(f"leaf-su01-r{r}", p) for r in range(4) for p in range(1, 9)]
    for dev, port in ports:
        a.isolate(dev, port)
        b.isolate(dev, port)
    first = [a.repair_step(d, p, rung) for d, p in ports for rung in rungs]
    assert first == [b.repair_step(d, p, rung) for d, p in ports for rung in rungs]
    # An activity retry gets the recorded answer, not a new draw.
    assert first == [a.repair_step(d, p, rung) for d, p in ports for rung in rungs]
    assert SimController(tmp_path / "a", seed=7).repairs(*ports[0])[0]["rung"] == rungs[0]
    assert any(first) and not all(first)  # the default chances are neither 0 nor 1
    fixed_ports = [k for k in a.view().repaired]
    assert fixed_ports


def test_repair_chance_is_configurable(tmp_path: Path) -> None:
    never = SimController(tmp_path / "n", fix_chance={"clean-and-reseat": 0.0})
    always = SimController(tmp_path / "y", fix_chance={"clean-and-reseat": 1.0})
    for port in range(1, 30):
        assert never.repair_step("leaf-su01-r0", port, "clean-and-reseat") is False
        assert always.repair_step("leaf-su01-r0", port, "clean-and-reseat") is True
    assert never.view().repaired == {}
    # A new isolation episode draws again rather than replaying the old answer.
    ctl = SimController(tmp_path / "e", seed=3)
    answers = set()
    for _ in range(20):
        ctl.isolate("spine-su01-s1", 1)
        answers.add(ctl.repair_step("spine-su01-s1", 1, "swap-optic"))
        ctl.unisolate("spine-su01-s1", 1)
    assert answers == {True, False}


@pytest.mark.parametrize("device,port", [("", 1), ("a\nb", 1), ("leaf", -1), ("leaf", 5000),
                                         ("leaf", True)])
def test_bad_arguments(tmp_path: Path, device: str, port: int) -> None:
    with pytest.raises(ControllerError):
        SimController(tmp_path).isolate(device, port)


def test_corrupt_state_is_reported(tmp_path: Path) -> None:
    (tmp_path / STATE_FILE).write_text("{not json")
    with pytest.raises(ControllerError, match="not valid JSON"):
        SimController(tmp_path).is_isolated("x", 1)
    with pytest.raises(ControllerError, match="between|0..1"):
        SimController(tmp_path / "c", fix_chance={"x": 2.0})


def test_command_log_and_who_isolated(tmp_path: Path) -> None:
    c = SimController(tmp_path)
    assert c.isolate("leaf-su01-r1", 3) and not c.isolate("leaf-su01-r1", 3)
    assert c.isolate("leaf-su01-r1", 4, by="ufm port-health")
    assert c.isolated_by("leaf-su01-r1", 4) == "ufm port-health"
    assert c.isolated_by("leaf-su01-r1", 3) is None and c.isolated_by("x", 1) is None
    assert c.unisolate("leaf-su01-r1", 3) and not c.unisolate("leaf-su01-r1", 3)
    c.reset_counters("leaf-su01-r1", 4)
    # another process's controller on the same folder reads the same log
    log = SimController(tmp_path).commands()
    assert [(r["op"], r["key"], r.get("changed")) for r in log] == [
        ("isolate", "leaf-su01-r1:3", True), ("isolate", "leaf-su01-r1:3", False),
        ("isolate", "leaf-su01-r1:4", True), ("unisolate", "leaf-su01-r1:3", True),
        ("unisolate", "leaf-su01-r1:3", False), ("reset_counters", "leaf-su01-r1:4", None)]
    assert [r["key"] for r in c.commands("unisolate")] == ["leaf-su01-r1:3"] * 2
    assert log[2]["by"] == "ufm port-health"


@pytest.mark.parametrize("device,port", [("$(touch x)", 1), ("leaf-su01-r1\u202egnp.exe", 3),
                                         ("--help", 4), ("leaf-su01-r1", 40)])
def test_a_port_the_simulated_fabric_lacks_is_refused_unchanged(
        tmp_path: Path, device: str, port: int) -> None:
    ctl = SimController(tmp_path)
    ctl.record_fabric("f", ["leaf-su01-r1:1", "node0001/mlx5_1:1"])
    before = ctl.view()
    for command in (ctl.isolate, ctl.unisolate, ctl.reset_counters):
        with pytest.raises(ControllerError, match="not a cabled port"):
            command(device, port)
    with pytest.raises(ControllerError, match="not a cabled port"):
        ctl.repair_step(device, port, "swap-optic")
    assert ctl.view() == before and not ctl.is_isolated(device, port)
    assert {c["op"] for c in ctl.commands()} == {"refused"}
    assert ctl.isolate("leaf-su01-r1", 1)  # a cabled port is still taken


async def test_the_runbook_adapter_turns_a_refusal_into_a_rejection(tmp_path: Path) -> None:
    from workflows.adapters.base import AdapterRejected
    from workflows.adapters.sim import SimControllerAdapter
    from workflows.remediation.models import PortRef

    ctl = SimController(tmp_path)
    ctl.record_fabric("f", ["leaf-su01-r1:1"])
    adapter = SimControllerAdapter(ctl, tmp_path)
    port = PortRef(fabric="f", device="; rm -rf /", port=2)
    for call in (adapter.isolate, adapter.unisolate, adapter.reset_counters):
        with pytest.raises(AdapterRejected, match="not a cabled port"):
            await call(port)
    with pytest.raises(AdapterRejected):
        await adapter.repair_step(port, "swap-optic")
    assert ctl.isolated_ports() == []


def test_a_fabric_recorded_again_or_gone_is_seen_by_a_controller_that_read_it(
        tmp_path: Path) -> None:
    # the recorded fabric is cached per file: a simulator that records another fabric (or
    # whose file is gone) must change what the same controller object accepts
    ctl = SimController(tmp_path)
    ctl.record_fabric("f", ["leaf-su01-r1:1"])
    ctl.check_port("leaf-su01-r1", 1)
    with pytest.raises(ControllerError, match="not a cabled port"):
        ctl.check_port("leaf-su01-r1", 2)
    SimController(tmp_path).record_fabric("f", ["leaf-su01-r1:2"])
    ctl.check_port("leaf-su01-r1", 2)
    with pytest.raises(ControllerError, match="not a cabled port"):
        ctl.check_port("leaf-su01-r1", 1)
    SimController(tmp_path).record_fabric("g", ["spine-1:7"])
    assert ctl.recorded_fabrics()[0] == {"leaf-su01-r1:2", "spine-1:7"}
    ctl.check_port("spine-1", 7)
    ctl.check_port("spine-1", None)
    for path in tmp_path.glob("sim-fabric-*.json"):
        path.unlink()
    assert ctl.recorded_fabrics()[0] is None
    ctl.check_port("leaf-su09-r9", 9)  # no fabric recorded: every well-formed port is taken
