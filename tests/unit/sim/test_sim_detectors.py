"""Each fault kind, replayed through the stream detectors (``streams.replay``), yields the
detection an operator expects on the port where it was injected; a healthy fabric yields none.
This is the simulator's promise that faults are visible "as an operator would see them"."""

from __future__ import annotations

import pytest

from schemas.policy import Policy
from sim.faults import parse_spec
from sim.telemetry import Simulator
from sim.topology import Params, generate
from streams.engine import Context
from streams.replay import replay
from streams.topology.plan import load_plan, uplinks_from_plan

START = 1_790_000_000_000
LAB = generate("lab")
ROCE = generate(Params(sus=1, nodes_per_su=4, rails=2, spines_per_su=2, transport="roce",
                       fabric="roce-lab"))


def _detections(fabric_name: str, spec: str | None, steps: int) -> set[tuple[str, str]]:
    fabric = ROCE if fabric_name == "roce" else LAB
    faults = [parse_spec(spec)] if spec else []
    s = Simulator(fabric, faults=faults, start_ms=START, probe_every=1, topology_every=0)
    lines = [m.value for _ in range(steps) for m in s.step().messages]
    # the plan says which leaf ports are ECMP peers (the hot-uplink rule)
    context = Context(uplinks=uplinks_from_plan(load_plan(fabric.to_plan_csv())))
    return {(d.detection.value, f"{d.device}:{d.port}")
            for d in replay(lines, Policy(), context=context, on_error=None)}


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
    ("lab", "spine_reboot:spine-su01-s1,at=20s,for=60s", 16, ("flap", "leaf-su01-r0:5")),
    ("lab", "optic_overheat:node0002/mlx5_1:1,at=20s", 4, ("optic_temp", "node0002/mlx5_1:1")),
    ("lab", "optic_power:leaf-su01-r2:1,at=20s", 4, ("optic_power", "leaf-su01-r2:1")),
    ("lab", "hot_uplink:leaf-su01-r0:6", 14, ("hot_uplink", "leaf-su01-r0:6")),
    ("lab", "hot_uplink:leaf-su01-r0:6", 14, ("congestion", "leaf-su01-r0:6")),
    ("lab", "sm_failover:sm-2,at=30s", 5, ("sm_failover", "sm-2:0")),
    ("lab", "sm_failover:sm-2,at=30s", 5, ("sm_standby_lost", "sm-2:0")),
    ("lab", "sweep_storm:leaf-su01-r2:2,count=6,every=5s,at=20s", 8,
     ("sweep_storm", "sm-1:0")),
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


def test_hot_uplink_names_the_polarised_port_only() -> None:
    found = _detections("lab", "hot_uplink:leaf-su01-r0:6", 14)
    assert {port for kind, port in found if kind == "hot_uplink"} == {"leaf-su01-r0:6"}


def test_pause_storm_needs_a_stuck_queue() -> None:
    # the watchdog's rule: a queue paused 99.8 % of the time that still sends data is
    # heavy congestion, not a storm; the same queue sending nothing is one
    stuck = _detections("roce", "pause_storm:node0001/mlx5_0:1", 8)
    draining = _detections("roce", "pause_storm:node0001/mlx5_0:1,drain=1", 8)
    assert ("pause_storm", "node0001/mlx5_0:1") in stuck
    assert not any(kind == "pause_storm" for kind, _ in draining)
    # the stuck queue's sending end: the same link's storm, and no ECN verdict on its leaf
    # (nearly all its pauses are that one port's)
    # (starting mid-run, as in the demo: the first interval still carried data)
    later = _detections("roce", "pause_storm:node0001/mlx5_0:1,at=25s", 8)
    leaf = {port for kind, port in later if kind == "pause_storm"} - {"node0001/mlx5_0:1"}
    assert len(leaf) == 1 and next(iter(leaf)).startswith("leaf-")
    assert not any(kind == "ecn_pfc_misconfig" for kind, _ in later)


def test_ecn_misconfig_is_the_switchs() -> None:
    # the misconfigured switch sends the pauses and marks too little (its ports report per
    # queue, so priority 3, the RoCE class, is judged);
    # its peers, paused by it, are not misconfigured
    found = _detections("roce", "ecn_misconfig:leaf-su01-r1", 8)
    ecn = {port for kind, port in found if kind == "ecn_pfc_misconfig"}
    assert len(ecn) == 1 and next(iter(ecn)).startswith("leaf-su01-r1:")


def test_ecn_misconfig_on_one_priority_names_it() -> None:
    # the switch's queue 5 marks nothing while it pauses priority 5; priority 3 (the RoCE
    # class, marking normally) does not fire
    fabric = ROCE
    s = Simulator(fabric, faults=[parse_spec("ecn_misconfig:leaf-su01-r1,prio=5")],
                  start_ms=START, probe_every=0, topology_every=0)
    lines = [m.value for _ in range(6) for m in s.step().messages]
    ecn = [d for d in replay(lines, Policy(), on_error=None)
           if d.detection.value == "ecn_pfc_misconfig"]
    assert ecn and all(d.device == "leaf-su01-r1" for d in ecn)
    assert [(d.evidence["basis"], d.evidence["priority"]) for d in ecn] == [("priority", 5)]


def test_sweep_storm_names_its_port_and_is_one_sm_incident() -> None:
    s = Simulator(LAB, faults=[parse_spec("sweep_storm:leaf-su01-r2:2,count=6,every=5s,at=20s")],
                  start_ms=START, probe_every=0, topology_every=0)
    lines = [m.value for _ in range(8) for m in s.step().messages]
    from schemas import Detection, Incident
    from streams.replay import replay_all

    out = list(replay_all(lines, Policy()))
    [storm] = [d for d in out if isinstance(d, Detection) and d.detection.value == "sweep_storm"]
    assert storm.evidence["ports"] == ["leaf-su01-r2:2"]
    [opened] = [i for i in out if isinstance(i, Incident) and i.state == "open"]
    assert opened.cause.value == "sm_event" and opened.members == ["leaf-su01-r2:2"]
    assert storm.incident == opened.incident


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


def test_the_ib_plan_does_not_route_or_size_a_roce_fabric_beside_it() -> None:
    # One worker serves the IB fabric (whose cable plan it loaded) and a RoCE fabric with
    # the same switch names (the demo's). A misconfigured ECN on a RoCE leaf slows every
    # probe through it; localised by the IB plan's cabling, each became a request to isolate
    # a healthy cable, and past the SU's budget (sized by the IB plan) a breaker_open. The
    # plan is its fabric's: RoCE probes without a RoCE topology name their endpoints only.
    from streams.breaker.logic import ports_per_su
    from streams.probes.paths import ProbeRoutes

    ib = generate(Params(sus=1, nodes_per_su=4, rails=2, spines_per_su=2, fabric="ib-lab"))
    roce = generate(Params(sus=1, nodes_per_su=4, rails=2, spines_per_su=2, transport="roce",
                           fabric="ib-lab-roce"))
    plan = load_plan(ib.to_plan_csv())

    def kinds(plan_fabric: str | None) -> list[tuple[str, str]]:
        context = Context(
            paths=ProbeRoutes.from_links((x.a_device, x.a_port, x.b_device, x.b_port)
                                         for x in plan.links),
            ports_per_su=ports_per_su(end for x in plan.links
                                      for end in ((x.a_device, x.a_port),
                                                  (x.b_device, x.b_port))),
            fabric=plan_fabric)
        s = Simulator(roce, faults=[parse_spec("ecn_misconfig:leaf-su01-r1,prio=5,at=10s")],
                      start_ms=START, probe_every=1, topology_every=0)
        lines = [m.value for _ in range(16) for m in s.step().messages]
        return [(d.detection.value, d.action.value, d.device, d.port,
                 bool(d.evidence.get("common_mode")))
                for d in replay(lines, Policy(), context=context, on_error=None)]

    scoped = kinds("ib-lab")
    assert any(k[0] == "ecn_pfc_misconfig" for k in scoped)  # the verdict that explains it
    assert ("slow_probe", "ticket") in {k[:2] for k in scoped}  # named by their endpoints
    assert not [k for k in scoped if k[1] == "isolate_port" or k[0] == "breaker_open"]
    # routed (the IB plan's cabling for every fabric, as a RoCE fabric's own topology would
    # route them): the slow pairs name the cables of the misconfigured leaf, and they are
    # its common mode, one ticket at the leaf, not healthy cables to isolate
    routed = kinds(None)
    assert not [k for k in routed if k[1] == "isolate_port" or k[0] == "breaker_open"]
    assert [k[2:] for k in routed if k[4]] == [("leaf-su01-r1", 0, True)]
