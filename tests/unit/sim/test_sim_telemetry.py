"""sim.telemetry: every fault kind shows in the telemetry the way an operator would see it,
controller commands change what is emitted, and the fast encoder emits valid contract JSON."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import orjson
import pytest

from schemas import LEGACY_COUNTER_BITS, Counters, PortEvent, PortSample, Probe, Topology, decode
from schemas.events import Event
from sim.controller import SimController
from sim.faults import Fault, parse_spec
from sim.telemetry import Simulator, StepOutput
from sim.topology import Fabric, Params, generate

START = 1_790_000_000_000  # 2026-09-21, fixed so that runs compare byte for byte
LAB = generate("lab")
ROCE = generate(Params(sus=1, nodes_per_su=4, rails=2, spines_per_su=2, transport="roce",
                       fabric="roce-lab"))
MULTI = generate(Params(sus=2, nodes_per_su=4, rails=2, radix=8, core=True, fabric="multi"))


def sim(fabric: Fabric = LAB, faults: Sequence[str | Fault] = (), *,
        controller: SimController | None = None, **kw: object) -> Simulator:
    parsed = [parse_spec(f) if isinstance(f, str) else f for f in faults]
    opts: dict[str, object] = {"start_ms": START, "probe_every": 1, "topology_every": 1}
    opts.update(kw)
    return Simulator(fabric, faults=parsed, controller=controller, **opts)  # type: ignore[arg-type]


def events(outs: Sequence[StepOutput]) -> list[Event]:
    return [e for out in outs for e in out.events()]


def samples(outs: Sequence[StepOutput], device: str, port: int) -> list[tuple[int, PortSample]]:
    found = []
    for e in events(outs):
        if isinstance(e, Counters) and e.device == device:
            found += [(e.ts, s) for s in e.ports if s.port == port]
    return found


def port_events(outs: Sequence[StepOutput]) -> list[PortEvent]:
    return [e for e in events(outs) if isinstance(e, PortEvent)]


def probes(outs: Sequence[StepOutput], rail: int | None = None) -> list[Probe]:
    return [e for e in events(outs) if isinstance(e, Probe) and rail in (None, e.rail)]


def per_hour(series: list[tuple[int, PortSample]], name: str) -> float:
    (t0, a), (t1, b) = series[0], series[-1]
    return (getattr(b, name) - getattr(a, name)) / ((t1 - t0) / 3_600_000)


def test_encoded_messages_are_the_contract() -> None:
    s = sim(ROCE, ["pause_storm:node0001/mlx5_0:1"])
    outs = s.run_steps(3)
    kinds = set()
    for out in outs:
        for m in out.messages:
            model = decode(m.value)  # validates
            kinds.add(model.kind)
            raw = orjson.loads(m.value)
            wire = model.to_wire()
            if model.kind == "counters":  # samples leave unreported counters out
                wire["ports"] = [{k: v for k, v in x.items() if v is not None}
                                 for x in wire["ports"]]
            assert {k: wire[k] for k in raw} == raw
            assert decode(orjson.dumps(wire)) == model
            topic = {"counters": "fabric.counters", "port_event": "fabric.port-events",
                     "probe": "fabric.probes", "topology": "fabric.topology",
                     "sm_event": "fabric.sm"}[model.kind]
            assert m.topic == topic
    # the simulated SM says who is master and standby at the first step
    assert kinds == {"counters", "probe", "topology", "sm_event"}
    ids = [decode(m.value).id for out in outs for m in out.messages]
    assert len(ids) == len(set(ids))


def test_deterministic_bytes() -> None:
    faults = ["flap:leaf-su01-r3:2,count=3,every=20s,at=5s", "ber:node0002/mlx5_1:1"]
    a = [m.value for out in sim(LAB, faults).run_steps(6) for m in out.messages]
    b = [m.value for out in sim(LAB, faults).run_steps(6) for m in out.messages]
    assert a == b
    c = [m.value for out in sim(LAB, faults, seed=1).run_steps(6) for m in out.messages]
    assert a != c


def test_healthy_counters_are_monotonic_and_quiet() -> None:
    outs = sim(LAB, probe_every=0, topology_every=0).run_steps(40)
    assert all(out.port_samples == LAB.port_count() for out in outs)
    for dev in ("leaf-su01-r0", "spine-su01-s1", "node0001/mlx5_0"):
        series = samples(outs, dev, LAB.device_ports(dev)[0])
        for (_, a), (_, b) in zip(series, series[1:], strict=False):
            for name in ("symbol_errors", "xmit_wait", "fec_corrected", "link_downed"):
                assert getattr(b, name) >= getattr(a, name)
        last = series[-1][1]
        assert last.width == "4X" and last.speed == "NDR"
        assert last.link_downed == 0 and last.raw_ber is not None and last.raw_ber < 1e-7
        assert per_hour(series, "symbol_errors") < 200
        assert last.fec_corrected and last.fec_corrected > 0
    assert not port_events(outs)


def test_flap_bounces_with_traps_and_link_downed() -> None:
    outs = sim(LAB, ["flap:leaf-su01-r3:2,count=4,every=60s,at=30s"]).run_steps(25)
    evs = port_events(outs)
    assert [(e.device, e.port, e.state, e.ts - START) for e in evs] == [
        ("leaf-su01-r3", 2, state, t) for start in (30_000, 90_000, 150_000, 210_000)
        for state, t in (("down", start), ("up", start + 2_000))]
    assert all(e.trap == 128 for e in evs)
    assert samples(outs, "leaf-su01-r3", 2)[-1][1].link_downed == 4
    # The HCA end sends no trap, but its counter shows every down.
    assert samples(outs, "node0002/mlx5_3", 1)[-1][1].link_downed == 4


def test_link_down_and_back() -> None:
    outs = sim(LAB, ["link_down:node0001/mlx5_0:1,at=15s,for=30s"]).run_steps(6)
    evs = port_events(outs)
    assert [(e.device, e.port, e.state, e.phys_state) for e in evs] == [
        ("leaf-su01-r0", 1, "down", "Polling"), ("leaf-su01-r0", 1, "up", "LinkUp")]
    during = dict(samples(outs, "leaf-su01-r0", 1))[START + 30_000]
    assert during.width is None and during.raw_ber is None
    rail0 = [p for p in probes(outs[2:4], 0) if "node0001" in p.src + p.dst]
    assert rail0 and all(p.bw_gbps == 0 for p in rail0)


@pytest.mark.parametrize("spec,field,value", [
    ("degraded_width:node0003/mlx5_1:1,at=20s", "width", "2X"),
    ("degraded_speed:leaf-su01-r1:3,at=20s", "speed", "HDR"),
])
def test_degraded_link(spec: str, field: str, value: str) -> None:
    outs = sim(LAB, [spec]).run_steps(5)
    series = samples(outs, "leaf-su01-r1", 3)
    assert getattr(series[0][1], field) != value
    assert getattr(series[-1][1], field) == value
    assert getattr(samples(outs, "node0003/mlx5_1", 1)[-1][1], field) == value
    assert [e.state for e in port_events(outs)] == ["down", "up"]  # the retrain
    slow = [p for p in probes(outs[-1:], 1) if "node0003" in p.src]
    fast = [p for p in probes(outs[-1:], 0)]
    assert slow and all(p.bw_gbps < 0.55 * (p.baseline_gbps or 0) for p in slow)
    assert all(p.bw_gbps > 0.95 * (p.baseline_gbps or 0) for p in fast)
    topo = [e for e in events(outs[-1:]) if isinstance(e, Topology)][0]
    link = next(x for x in topo.links if (x.a_device, x.a_port) == ("leaf-su01-r1", 3))
    assert getattr(link, field) == value


def test_degraded_from_the_start_needs_no_bounce() -> None:
    outs = sim(LAB, ["degraded_width:leaf-su01-r1:3"]).run_steps(2)
    assert not port_events(outs)
    assert samples(outs, "leaf-su01-r1", 3)[0][1].width == "2X"


def test_ber_rises() -> None:
    outs = sim(LAB, ["ber:node0002/mlx5_1:1,raw=5e-5,ramp=5m"], probe_every=0,
               topology_every=0).run_steps(40)
    series = samples(outs, "node0002/mlx5_1", 1)
    early, late = series[1][1], series[-1][1]
    assert late.raw_ber is not None and late.raw_ber >= 4e-5 > (early.raw_ber or 0)
    assert late.effective_ber is not None and late.effective_ber > 1e-11
    assert late.rx_power_dbm is not None and early.rx_power_dbm is not None
    assert late.rx_power_dbm < early.rx_power_dbm - 2
    growth_late = series[-1][1].fec_corrected - series[-2][1].fec_corrected  # type: ignore[operator]
    growth_early = series[1][1].fec_corrected - series[0][1].fec_corrected  # type: ignore[operator]
    assert growth_late > 100 * growth_early
    assert late.symbol_errors and late.symbol_errors > 1000
    healthy = samples(outs, "node0001/mlx5_1", 1)[-1][1]
    assert (healthy.raw_ber or 1) < 1e-7 and (healthy.symbol_errors or 0) < 5


def test_symbol_errors_rise_and_saturate_at_16_bits() -> None:
    outs = sim(LAB, ["symbol_errors:leaf-su01-r2:1,per_hour=3600,ramp=0s"], probe_every=0,
               topology_every=0).run_steps(60)
    series = samples(outs, "leaf-su01-r2", 1)
    assert 2500 < per_hour(series, "symbol_errors") < 5000
    assert per_hour(samples(outs, "leaf-su01-r2", 2), "symbol_errors") < 200
    saturating = sim(LAB, ["symbol_errors:leaf-su01-r2:1,per_hour=100000000"],
                     probe_every=0, topology_every=0).run_steps(5)
    top = samples(saturating, "leaf-su01-r2", 1)[-1][1]
    assert top.symbol_errors == 2 ** LEGACY_COUNTER_BITS["symbol_errors"] - 1


def test_counter_saturation_and_reset(tmp_path: Path) -> None:
    ctl = SimController(tmp_path)
    s = sim(LAB, ["counter_saturation:leaf-su01-r0:3,counter=link_downed,at=10s"],
            controller=ctl, probe_every=0, topology_every=0)
    outs = s.run_steps(4)
    assert [x.link_downed for _, x in samples(outs, "leaf-su01-r0", 3)][-2:] == [255, 255]
    ctl.reset_counters("leaf-su01-r0", 3)
    after = samples(s.run_steps(1), "leaf-su01-r0", 3)[0][1]
    assert after.link_downed is not None and after.link_downed < 5
    assert after.xmit_wait is not None and after.xmit_wait < samples(outs, "leaf-su01-r0", 3)[
        -1][1].xmit_wait  # type: ignore[operator]


def test_swap_and_missing_link_in_topology() -> None:
    outs = sim(LAB, ["swap:node0001/mlx5_2:1,with=node0001/mlx5_3:1",
                     "missing_link:leaf-su01-r0:2"]).run_steps(1)
    topo = [e for e in events(outs) if isinstance(e, Topology)][0]
    links = {(x.a_device, x.a_port): x.b_device for x in topo.links}
    assert links[("leaf-su01-r2", 1)] == "node0001/mlx5_3"
    assert links[("leaf-su01-r3", 1)] == "node0001/mlx5_2"
    assert ("leaf-su01-r0", 2) not in links
    assert len(links) == len(LAB.links) - 1
    assert not port_events(outs)  # the cable was never there: nothing went down
    assert samples(outs, "leaf-su01-r0", 2)[0][1].width is None


def test_pause_storm() -> None:
    outs = sim(ROCE, ["pause_storm:node0001/mlx5_0:1"], topology_every=0).run_steps(4)
    storm = samples(outs, "node0001/mlx5_0", 1)
    assert per_hour(storm, "pfc_pause_rx") / 3600 > 50_000
    peer = samples(outs, "leaf-su01-r0", 1)
    assert per_hour(peer, "pfc_pause_tx") / 3600 > 50_000
    calm = samples(outs, "node0002/mlx5_0", 1)
    assert per_hour(calm, "pfc_pause_rx") / 3600 < 100
    slowed = [p for p in probes(outs, 0) if "node0001" in p.src + p.dst and
              p.probe == "ib_write_bw"]
    assert slowed and all(p.bw_gbps < 0.1 * (p.baseline_gbps or 0) for p in slowed)


def test_ecn_misconfig() -> None:
    outs = sim(ROCE, ["ecn_misconfig:leaf-su01-r1"], topology_every=0).run_steps(4)
    for port in ROCE.device_ports("leaf-su01-r1"):
        series = samples(outs, "leaf-su01-r1", port)
        pauses = per_hour(series, "pfc_pause_tx") / 3600
        marks = per_hour(series, "ecn_marked") / 3600
        assert pauses > 1000 and marks / pauses < 1
    ok = samples(outs, "leaf-su01-r0", 1)
    assert per_hour(ok, "ecn_marked") > per_hour(ok, "pfc_pause_tx")


def test_ecn_misconfig_on_one_priority() -> None:
    outs = sim(ROCE, ["ecn_misconfig:leaf-su01-r1,prio=5"], topology_every=0).run_steps(4)
    for port in ROCE.device_ports("leaf-su01-r1"):
        series = samples(outs, "leaf-su01-r1", port)
        extra = series[-1][1].model_extra or {}
        assert per_hour(series, "pfc5_tx") / 3600 > 1000 and extra["ecn_marked_q5"] == 0
        # the RoCE class keeps marking; the sums are the queues' and priorities'
        assert extra["ecn_marked_q3"] > 0
        last = series[-1][1]
        assert last.pfc_pause_tx == sum(extra[f"pfc{p}_tx"] for p in (3, 4, 5))
        assert last.ecn_marked == sum(extra[f"ecn_marked_q{q}"] for q in (3, 4, 5))
    ok = (samples(outs, "leaf-su01-r0", 1)[-1][1].model_extra or {})
    assert "pfc5_tx" not in ok and ok["ecn_marked_q3"] > ok["pfc3_tx"]


def test_hot_uplink() -> None:
    hot = ("leaf-su01-r0", 5)
    s = sim(MULTI, [f"hot_uplink:{hot[0]}:{hot[1]}"], topology_every=0)
    outs = s.run_steps(3)
    waits = {p: per_hour(samples(outs, "leaf-su01-r0", p), "xmit_wait")
             for p in (5, 6, 7, 8)}
    assert waits[5] > 50 * max(waits[6], waits[7], waits[8])
    hot_li = s.link_index[hot]
    crossing = [(a, b) for a in MULTI.nodes_of_su(1) for b in MULTI.nodes_of_su(2)
                if hot_li in (s.path(a, b, 0) or [])]
    other = [(a, b) for a in MULTI.nodes_of_su(1) for b in MULTI.nodes_of_su(2)
             if hot_li not in (s.path(a, b, 0) or [])]
    assert crossing and other
    for a, b in crossing:
        probe = s.probe("ib_write_bw", a, b, 0)
        assert isinstance(probe, Probe) and probe.bw_gbps < 0.8 * (probe.baseline_gbps or 0)
    for a, b in other:
        probe = s.probe("ib_write_bw", a, b, 0)
        assert isinstance(probe, Probe) and probe.bw_gbps > 0.95 * (probe.baseline_gbps or 0)


def test_slow_link_only_probes_see_it() -> None:
    quiet = {"probe_every": 0, "topology_every": 0}
    with_fault = sim(LAB, ["slow_link:node0004/mlx5_2:1,factor=0.6"], **quiet).run_steps(5)
    without = sim(LAB, **quiet).run_steps(5)
    assert [m.value for o in with_fault for m in o.messages] == \
        [m.value for o in without for m in o.messages]
    outs = sim(LAB, ["slow_link:node0004/mlx5_2:1,factor=0.6"]).run_steps(1)
    slow = [p for p in probes(outs, 2) if p.probe == "ib_write_bw" and "node0004" in
            p.src + p.dst]
    assert slow and all(0.55 < p.bw_gbps / (p.baseline_gbps or 1) < 0.65 for p in slow)
    nccl = [p for p in probes(outs, 2) if p.probe == "nccl_allreduce"]
    assert nccl and nccl[0].bw_gbps < 0.65 * (nccl[0].baseline_gbps or 0)


def test_spine_reboot_takes_many_ports_at_once() -> None:
    s = sim(MULTI, ["spine_reboot:spine-su01-s1,at=60s,for=30s,bounces=0"], probe_every=0,
            topology_every=0)
    before = s.run_steps(6)  # (0, 60 s]: the reboot starts at 60 s
    during = s.run_steps(2)  # (60, 80 s]
    after = s.run_steps(3)  # (80, 110 s]: back at 90 s
    downs = [e for e in port_events(before + during) if e.state == "down"]
    ports = MULTI.device_ports("spine-su01-s1")
    assert len(downs) == len(ports)  # from the peers: the spine itself is rebooting
    assert {e.ts for e in downs} == {START + 60_000}
    assert all(e.device != "spine-su01-s1" for e in downs)
    assert not [e for e in events(during) if isinstance(e, Counters)
                and e.device == "spine-su01-s1"]
    ups = [e for e in port_events(after) if e.state == "up"]
    assert len(ups) == 2 * len(ports)  # both ends trap when the links come back
    xw_before = samples(before, "spine-su01-s1", 1)[-1][1].xmit_wait
    xw_after = samples(after, "spine-su01-s1", 1)[0][1].xmit_wait
    assert xw_after is not None and xw_before is not None and xw_after < xw_before
    assert samples(after, "spine-su01-s1", 1)[0][1].link_downed == 0  # counters restarted


def test_spine_reboot_bounces_make_every_peer_port_flap() -> None:
    s = sim(MULTI, ["spine_reboot:spine-su01-s1,at=10s,for=60s"], probe_every=0,
            topology_every=0)
    evs = port_events(s.run_steps(12))
    peers = {MULTI.require_link("spine-su01-s1", p).other_end("spine-su01-s1", p)
             for p in MULTI.device_ports("spine-su01-s1")}
    for device, port in peers:
        downs = [e.ts - START for e in evs if (e.device, e.port, e.state) ==
                 (device, port, "down")]
        assert downs == [10_000, 85_000, 100_000]  # reboot, then two bounces while it settles
    spine_downs = [e for e in evs if e.device == "spine-su01-s1" and e.state == "down"]
    assert len(spine_downs) == 2 * len(peers)  # it traps for the bounces, not the reboot


def test_isolate_stops_flapping_and_traffic(tmp_path: Path) -> None:
    ctl = SimController(tmp_path)
    s = sim(LAB, ["flap:leaf-su01-r3:2,count=10,every=30s,at=5s"], controller=ctl)
    first = s.run_steps(4)
    assert len([e for e in port_events(first) if e.state == "down"]) == 2
    ctl.isolate("leaf-su01-r3", 2)
    iso = s.run_steps(1)
    assert [(e.state, e.phys_state) for e in port_events(iso)] == [("down", "Disabled")]
    frozen = s.run_steps(12)
    assert not port_events(frozen)  # no more bounces while isolated
    series = samples(frozen, "leaf-su01-r3", 2)
    assert all(x.width is None for _, x in series)
    assert series[0][1].xmit_wait == series[-1][1].xmit_wait  # no traffic
    node_probes = [p for p in probes(frozen, 3) if "node0002" in p.src + p.dst]
    assert node_probes and all(p.bw_gbps == 0 for p in node_probes)
    ctl.unisolate("leaf-su01-r3", 2)
    back = s.run_steps(1)
    assert [(e.state, e.phys_state) for e in port_events(back)][0] == ("up", "LinkUp")


def test_isolated_uplink_is_routed_around(tmp_path: Path) -> None:
    ctl = SimController(tmp_path)
    s = sim(MULTI, controller=ctl, topology_every=0)
    s.run_steps(1)
    pairs = [(a, b) for a in MULTI.nodes_of_su(1) for b in MULTI.nodes_of_su(2)]
    li = s.link_index[("leaf-su01-r0", 5)]
    crossing = [p for p in pairs if li in (s.path(*p, 0) or [])]
    assert crossing
    ctl.isolate("leaf-su01-r0", 5)
    s.run_steps(1)
    for a, b in crossing:
        path = s.path(a, b, 0)
        assert path is not None and li not in path
        probe = s.probe("ib_write_bw", a, b, 0)
        assert isinstance(probe, Probe) and probe.bw_gbps > 0.95 * (probe.baseline_gbps or 0)


def test_repair_clears_the_fault(tmp_path: Path) -> None:
    ctl = SimController(tmp_path, fix_chance={"swap-cable": 1.0, "clean-and-reseat": 0.0})
    s = sim(LAB, ["degraded_width:node0003/mlx5_1:1"], controller=ctl, probe_every=0)
    s.run_steps(1)
    ctl.isolate("node0003/mlx5_1", 1)
    assert ctl.repair_step("node0003/mlx5_1", 1, "clean-and-reseat") is False
    out = s.run_steps(1)
    assert samples(out, "leaf-su01-r1", 3)[0][1].width is None  # isolated
    assert ctl.repair_step("node0003/mlx5_1", 1, "swap-cable") is True
    ctl.unisolate("node0003/mlx5_1", 1)
    out = s.run_steps(1)
    assert samples(out, "leaf-su01-r1", 3)[0][1].width == "4X"


def test_restart_keeps_isolation(tmp_path: Path) -> None:
    ctl = SimController(tmp_path)
    ctl.isolate("leaf-su01-r0", 1)
    s = sim(LAB, controller=SimController(tmp_path))
    out = s.run_steps(2)
    assert not port_events(out)  # already down when the simulator started
    assert samples(out, "leaf-su01-r0", 1)[-1][1].width is None
    topo = [e for e in events(out) if isinstance(e, Topology)][0]
    assert ("leaf-su01-r0", 1) not in {(x.a_device, x.a_port) for x in topo.links}


def test_health_file_reports_faults_until_repaired(tmp_path: Path) -> None:
    ctl = SimController(tmp_path, fix_chance={"swap-optic": 1.0})
    assert ctl.is_healthy("node0002/mlx5_1", 1) is None  # no simulator has reported
    s = sim(LAB, ["ber:node0002/mlx5_1:1", "link_down:leaf-su01-r0:1,at=0s,for=15s",
                  "flap:leaf-su01-r2:3,at=30s"], controller=ctl)
    s.run_steps(1)
    assert ctl.is_healthy("node0002/mlx5_1", 1) is False
    assert ctl.is_healthy("leaf-su01-r1", 2) is False  # the other end of the same cable
    assert ctl.is_healthy("leaf-su01-r0", 1) is False  # down until 15 s
    assert ctl.is_healthy("leaf-su01-r2", 3) is True  # its flap has not started
    assert ctl.is_healthy("node0001/mlx5_0", 1) is False  # the HCA end of that link
    s.run_steps(3)
    assert ctl.is_healthy("leaf-su01-r0", 1) is True  # the outage is over
    assert ctl.is_healthy("leaf-su01-r2", 3) is False  # a cable that flapped stays suspect
    ctl.isolate("node0002/mlx5_1", 1)
    s.run_steps(1)
    assert ctl.is_healthy("node0002/mlx5_1", 1) is False  # isolation does not fix a cable
    assert ctl.repair_step("node0002/mlx5_1", 1, "swap-optic") is True
    s.run_steps(1)
    assert ctl.is_healthy("node0002/mlx5_1", 1) is True


def test_path_ports_name_the_links_a_probe_crosses() -> None:
    s = sim(MULTI, topology_every=0)
    s.run_steps(1)
    same = s.path_ports("node0001", "node0002", 1)
    assert same == ["node0001/mlx5_1:1", "leaf-su01-r1:1", "node0002/mlx5_1:1",
                    "leaf-su01-r1:2"]
    cross = s.path_ports("node0001", "node0005", 0)
    assert len(cross) == 12 and cross[0] == "node0001/mlx5_0:1"
    assert any(k.startswith("core-") for k in cross)
    assert cross[-1] == "leaf-su02-r0:1"


def test_100k_port_step_samples_every_port_once() -> None:
    fab = generate("100k-port")
    s = Simulator(fab, faults=[parse_spec("spine_reboot:spine-su02-s1,at=5s,for=60s")],
                  start_ms=START, probe_every=1, topology_every=0)
    out = s.step()
    rebooting = len(fab.device_ports("spine-su02-s1"))
    assert out.port_samples == fab.port_count() - rebooting >= 100_000 - rebooting
    counters = [m for m in out.messages if m.topic == "fabric.counters"]
    assert len(counters) == len(fab.devices()) - 1
    # A sample of the fast-encoded messages decodes to the contract (the rest share the code).
    for m in counters[::500] + [m for m in out.messages if m.topic != "fabric.counters"]:
        decode(m.value)
    assert out.port_events == rebooting  # the peers' traps, all at once


def test_a_link_back_from_isolation_carries_probe_traffic(tmp_path: Path) -> None:
    """Probation: the runbook re-enables the link; the simulator sends ib_write_bw across it
    both ways, so a repaired link measures its baseline and one still slow shows it."""
    quiet = {"probe_every": 0, "topology_every": 0}
    for factor, healthy in ((None, True), (0.6, False)):
        ctl = SimController(tmp_path / str(factor))
        faults = [] if factor is None else [f"slow_link:node0004/mlx5_2:1,factor={factor}"]
        s = sim(LAB, faults, controller=ctl, **quiet)
        switch_end = next(f"{d}:{p}" for d, p in s.links[s.link_index[("node0004/mlx5_2", 1)]]
                          .ends() if "/" not in d)
        device, _, port = switch_end.rpartition(":")
        ctl.isolate(device, int(port))
        assert not probes(s.run_steps(2))  # isolated: no probe traffic
        ctl.unisolate(device, int(port))
        got = probes(s.run_steps(3), 2)
        assert {(p.src, p.dst) for p in got} == {("node0004/mlx5_2", "node0001/mlx5_2"),
                                                 ("node0001/mlx5_2", "node0004/mlx5_2")}
        ratios = {round(p.bw_gbps / (p.baseline_gbps or 1), 1) for p in got}
        assert ratios == ({1.0} if healthy else {0.6}), ratios
        ctl.isolate(device, int(port))  # failed probation: isolated again, the probes stop
        s.run_steps(1)
        assert not probes(s.run_steps(2))


async def test_the_checker_judges_a_fixed_rung_fixed_before_the_next_step(
        tmp_path: Path) -> None:
    """The simulator rewrites its health report only at a step: a check right after a rung
    that fixed the cable must not read the report from before that rung. (The probes measure
    against a pinned baseline, judged by the runbook; the health-judged check is the counters'.)"""
    from workflows.adapters.sim import SimChecker, SimControllerAdapter
    from workflows.remediation.models import PortRef

    ctl = SimController(tmp_path, fix_chance={"swap-optic": 1.0, "clean-and-reseat": 0.0})
    s = sim(LAB, ["ber:node0002/mlx5_1:1", "ber:node0003/mlx5_1:1"], controller=ctl,
            probe_every=0)
    adapter = SimControllerAdapter(ctl, tmp_path)
    checker = SimChecker(adapter)
    fixed, other = (PortRef(fabric="lab", device="node0002/mlx5_1", port=1),
                    PortRef(fabric="lab", device="node0003/mlx5_1", port=1))
    s.run_steps(1)
    for port in (fixed, other):
        await adapter.isolate(port)
    s.run_steps(1)
    assert not (await checker.run("counters-clean-24h", fixed, 0)).passed
    assert await adapter.repair_step(fixed, "swap-optic") is True
    assert await adapter.repair_step(other, "clean-and-reseat") is False
    # the report is from before the repair: the repair's result decides
    assert ctl.is_healthy(fixed.device, fixed.port) is None
    assert (await checker.run("counters-clean-24h", fixed, 0)).passed
    assert not (await checker.run("counters-clean-24h", other, 0)).passed
    s.run_steps(1)  # the simulator applies the repair and reports again
    assert ctl.is_healthy(fixed.device, fixed.port) is True
    assert (await checker.run("counters-clean-24h", fixed, 0)).passed
    assert not (await checker.run("counters-clean-24h", other, 0)).passed
