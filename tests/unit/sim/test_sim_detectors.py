"""Each fault kind, replayed through the stream detectors (``streams.replay``), yields the
detection an operator expects on the port where it was injected; a healthy fabric yields none.
This is the simulator's promise that faults are visible "as an operator would see them"."""

from __future__ import annotations

import pytest

from schemas.policy import Policy
from sim.faults import parse_spec
from sim.telemetry import Simulator
from sim.topology import Params, generate
from streams.replay import replay

START = 1_790_000_000_000
LAB = generate("lab")
ROCE = generate(Params(sus=1, nodes_per_su=4, rails=2, spines_per_su=2, transport="roce",
                       fabric="roce-lab"))


def _detections(fabric_name: str, spec: str | None, steps: int) -> set[tuple[str, str]]:
    fabric = ROCE if fabric_name == "roce" else LAB
    faults = [parse_spec(spec)] if spec else []
    s = Simulator(fabric, faults=faults, start_ms=START, probe_every=1, topology_every=0)
    lines = [m.value for _ in range(steps) for m in s.step().messages]
    return {(d.detection.value, f"{d.device}:{d.port}")
            for d in replay(lines, Policy(), on_error=None)}


@pytest.mark.parametrize("fabric,spec,steps,expected", [
    ("lab", "flap:leaf-su01-r3:2,count=4,every=60s,at=30s", 30, ("flap", "leaf-su01-r3:2")),
    ("lab", "degraded_width:node0003/mlx5_1:1,at=20s", 4,
     ("degraded_link", "leaf-su01-r1:3")),
    ("lab", "degraded_speed:leaf-su01-r1:3,at=20s", 4, ("degraded_link", "leaf-su01-r1:3")),
    ("lab", "ber:node0002/mlx5_1:1,raw=5e-5,ramp=2m", 20, ("ber", "node0002/mlx5_1:1")),
    ("lab", "symbol_errors:leaf-su01-r2:1,per_hour=3000,ramp=0s", 90,
     ("error_rate", "leaf-su01-r2:1")),
    ("lab", "counter_saturation:leaf-su01-r0:3,at=10s", 4,
     ("counter_saturated", "leaf-su01-r0:3")),
    ("lab", "slow_link:node0004/mlx5_2:1", 8, ("slow_probe", "node0004/mlx5_2:1")),
    ("roce", "pause_storm:node0001/mlx5_0:1", 8, ("pause_storm", "node0001/mlx5_0:1")),
    ("roce", "ecn_misconfig:leaf-su01-r1", 8, ("ecn_pfc_misconfig", "leaf-su01-r1:1")),
    ("lab", "spine_reboot:spine-su01-s1,at=20s,for=60s", 16, ("flap", "leaf-su01-r0:5")),
])
def test_fault_is_detected(fabric: str, spec: str, steps: int,
                           expected: tuple[str, str]) -> None:
    assert expected in _detections(fabric, spec, steps)


def test_spine_reboot_is_the_breakers_case() -> None:
    found = _detections("lab", "spine_reboot:spine-su01-s1,at=20s,for=60s", 16)
    flaps = {port for kind, port in found if kind == "flap"}
    assert len(flaps) == len(LAB.device_ports("spine-su01-s1"))  # every peer port at once
    assert any(kind == "breaker_open" for kind, _ in found)


@pytest.mark.parametrize("fabric", ["lab", "roce"])
def test_healthy_fabric_is_quiet(fabric: str) -> None:
    assert _detections(fabric, None, 120) == set()  # 20 minutes of a healthy fabric


def test_slow_link_is_localised_to_its_cable_from_the_topology() -> None:
    """With the topology in the stream, the pairs sharing the slow cable name it (the leaf
    end, the port the runbook isolates) and no other cable is named. (Probes before the
    first snapshot, and the NCCL runs, are unrouted: their shared endpoints are tickets.)"""
    s = Simulator(LAB, faults=[parse_spec("slow_link:node0004/mlx5_2:1")], start_ms=START,
                  probe_every=1, topology_every=5)
    lines = [m.value for _ in range(8) for m in s.step().messages]
    named = {(f"{d.device}:{d.port}", d.action.value, d.evidence["link"])
             for d in replay(lines, Policy(), on_error=None)
             if d.detection.value == "slow_probe" and d.evidence.get("localised")
             and d.evidence["by"] == "paths"}
    leaf = next(f"{x.b_device}:{x.b_port}" for x in LAB.links
                if (x.a_device, x.a_port) == ("node0004/mlx5_2", 1))
    assert named == {(leaf, "isolate_port", f"{leaf}<->node0004/mlx5_2:1")}
