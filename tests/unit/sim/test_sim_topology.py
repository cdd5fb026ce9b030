"""sim.topology: rail-optimized wiring, presets, and output that the real parser reads back."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collectors.ibnetdiscover import parse_ibnetdiscover
from sim.faults import parse_spec
from sim.topology import PRESETS, Params, TopologyError, generate

GOLDEN = Path(__file__).parent / "golden"


def _parsed(text: str, fabric: str = "t") -> list[dict[str, object]]:
    topo = parse_ibnetdiscover(text, fabric=fabric, ts=0)
    return [link.model_dump() for link in topo.links]


def test_preset_sizes() -> None:
    lab = generate("lab")
    assert (len(lab.nodes), len(lab.hcas), lab.port_count()) == (4, 16, 64)
    su = generate("su")
    assert (len(su.nodes), len(su.hcas)) == (32, 256)
    gpu = generate("10k-gpu")
    assert 1200 <= len(gpu.nodes) <= 1300 and len(gpu.hcas) == len(gpu.nodes) * 8
    big = generate("100k-port")
    assert big.port_count() >= 100_000
    tiers = {s.tier for s in big.switches}
    assert tiers == {"leaf", "spine", "core"}


def test_rail_wiring_and_names() -> None:
    fab = generate("su")
    for hca in fab.hcas:
        link = fab.require_link(hca.device, 1)
        assert link.b_device == f"leaf-su01-r{hca.rail}"
        assert hca.device == f"{hca.node}/mlx5_{hca.rail}"
        assert fab.rail_of(hca.device, 1) == hca.rail
        assert fab.rail_of(link.b_device, link.b_port) == hca.rail
        assert fab.su_of(hca.device) == 1
    assert fab.link_at("node0042/mlx5_3", 1) is None  # su has 32 nodes
    link = fab.require_link("node0005/mlx5_3", 1)
    assert (link.b_device, link.b_port) == ("leaf-su01-r3", 5)


def test_leaves_uplink_one_to_one() -> None:
    for preset in ("su", "10k-gpu"):
        fab = generate(preset)
        half = fab.params.radix // 2
        for sw in fab.switches:
            ports = fab.device_ports(sw.name)
            if sw.tier == "leaf":
                down = [p for p in ports if fab.require_link(sw.name, p).tier == "host"]
                up = [p for p in ports if fab.require_link(sw.name, p).tier == "leaf-spine"]
                assert len(down) == len(up) == fab.params.nodes_per_su
                assert max(down) <= half < min(up)
            if sw.tier == "spine" and fab.params.core:
                assert len(ports) == fab.params.radix
                ups = [p for p in ports if fab.require_link(sw.name, p).tier == "spine-core"]
                assert len(ups) == half
        # Every leaf reaches every spine of its SU equally.
        for sw in fab.switches:
            if sw.tier != "leaf":
                continue
            spines: dict[str, int] = {}
            for p in fab.device_ports(sw.name):
                link = fab.require_link(sw.name, p)
                if link.tier == "leaf-spine":
                    spines[link.b_device] = spines.get(link.b_device, 0) + 1
            assert len(set(spines.values())) == 1
            assert len(spines) == fab.params.spine_count()


def test_core_tier_spans_sus() -> None:
    fab = generate("10k-gpu")
    core = next(s for s in fab.switches if s.tier == "core")
    assert fab.su_of(core.name) is None
    sus = {fab.su_of(fab.require_link(core.name, p).a_device)
           for p in fab.device_ports(core.name)}
    assert len(sus) > 30
    spine_up = next(p for p in fab.device_ports("spine-su01-s1")
                    if fab.require_link("spine-su01-s1", p).tier == "spine-core")
    assert fab.rail_of("spine-su01-s1", spine_up) is None


def test_deterministic() -> None:
    a, b = generate("su"), generate("su")
    assert a.to_ibnetdiscover() == b.to_ibnetdiscover()
    assert a.to_plan_csv() == b.to_plan_csv()
    guids = [s.guid for s in a.switches] + [h.guid for h in a.hcas]
    assert len(set(guids)) == len(guids)
    lids = [s.lid for s in a.switches] + [h.lid for h in a.hcas]
    assert sorted(lids) == list(range(1, len(lids) + 1))


def test_lab_matches_golden() -> None:
    fab = generate("lab")
    assert fab.to_ibnetdiscover() == (GOLDEN / "lab-ibnetdiscover.txt").read_text()
    assert fab.to_plan_csv() == (GOLDEN / "lab-plan.csv").read_text()


@pytest.mark.parametrize("preset", ["lab", "su", "10k-gpu"])
def test_ibnetdiscover_parses_back(preset: str) -> None:
    fab = generate(preset)
    text = fab.to_ibnetdiscover()
    assert _parsed(text) == fab.topology_links()
    assert max(len(line) for line in text.splitlines()) < 256  # ibsim's MAXLINE


def test_format_details_like_the_tool() -> None:
    text = generate("lab").to_ibnetdiscover()
    lines = text.splitlines()
    assert lines[1].startswith("# Topology file: generated on ")
    assert any(line.startswith('Switch\t64 "S-') and '# "MF0;leaf-su01-r3:MQM9700/U1" '
               'enhanced port 0 lid ' in line and line.endswith(" lmc 0") for line in lines)
    assert any(line.startswith('Ca\t1 "H-') and line.endswith('# "node0001 mlx5_0"')
               for line in lines)
    host_ports = [line for line in lines if line.startswith("[1](")]
    assert len(host_ports) == 16
    assert all(" lmc 0 \"MF0;leaf-su01-r" in line and line.endswith(" 4xNDR")
               for line in host_ports)


def test_plan_csv() -> None:
    fab = generate("su")
    rows = list(csv.DictReader(io.StringIO(fab.to_plan_csv())))
    assert list(rows[0]) == ["a_device", "a_port", "b_device", "b_port", "cable_id"]
    assert len(rows) == len(fab.links)
    assert len({r["cable_id"] for r in rows}) == len(rows)
    assert rows[0]["a_device"] == "node0001/mlx5_0" and rows[0]["b_device"] == "leaf-su01-r0"


def test_discovered_with_faults() -> None:
    fab = generate("lab")
    faults = [parse_spec("swap:node0001/mlx5_2:1,with=node0001/mlx5_3:1"),
              parse_spec("missing_link:leaf-su01-r0:2"),
              parse_spec("degraded_width:node0003/mlx5_1:1"),
              parse_spec("degraded_speed:leaf-su01-r0:5,speed=HDR")]
    links = {(x["a_device"], x["a_port"]): x for x in _parsed(fab.discovered(faults))}
    assert links[("leaf-su01-r3", 1)]["b_device"] == "node0001/mlx5_2"
    assert links[("leaf-su01-r2", 1)]["b_device"] == "node0001/mlx5_3"
    assert ("leaf-su01-r0", 2) not in links
    assert links[("leaf-su01-r1", 3)]["width"] == "2X"
    assert links[("leaf-su01-r0", 5)]["speed"] == "HDR"
    assert len(links) == len(fab.links) - 1


def test_bad_params() -> None:
    with pytest.raises(TopologyError, match="too many"):
        generate(Params(nodes_per_su=40))
    with pytest.raises(TopologyError, match="core"):
        generate(Params(sus=2))
    with pytest.raises(TopologyError, match="unknown preset"):
        generate("nope")
    with pytest.raises(TopologyError, match="no device"):
        generate("lab").su_of("node9999/mlx5_0")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sus=st.integers(1, 4), nodes=st.integers(1, 16), rails=st.integers(1, 8),
       radix=st.sampled_from([32, 40, 64]), speed=st.sampled_from(["HDR", "NDR", "EDR"]))
def test_any_fabric_round_trips(sus: int, nodes: int, rails: int, radix: int,
                                speed: str) -> None:
    fab = generate(Params(sus=sus, nodes_per_su=nodes, rails=rails, radix=radix,
                          core=sus > 1, speed=speed))
    assert _parsed(fab.to_ibnetdiscover()) == fab.topology_links()
    assert fab.port_count() == 2 * len(fab.links)
    assert PRESETS["lab"].fabric == "lab"
