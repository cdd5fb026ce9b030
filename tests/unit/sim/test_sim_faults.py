"""sim.faults: specs, files, schedules and checks against the fabric."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.faults import FaultError, check_all, load_file, parse_spec
from sim.topology import Params, generate


def test_flap_spec() -> None:
    f = parse_spec("flap:leaf-su01-r3:5,count=4,every=60s,at=30s")
    assert (f.kind, f.device, f.port, f.count, f.every_ms, f.at_ms) == (
        "flap", "leaf-su01-r3", 5, 4, 60_000, 30_000)
    assert f.occurrences() == [(30_000, 32_000), (90_000, 92_000), (150_000, 152_000),
                               (210_000, 212_000)]
    assert f.active(31_000) == (30_000, 32_000) and f.active(33_000) is None
    assert parse_spec(f.spec()) == f


def test_within_spreads_bounces() -> None:
    f = parse_spec("flap:node0001/mlx5_0:1,count=3,within=1780s")
    starts = [s for s, _ in f.occurrences()]
    assert starts == [0, 890_000, 1_780_000]


def test_defaults_and_aliases() -> None:
    assert parse_spec("saturate:leaf-su01-r0:1").kind == "counter_saturation"
    assert parse_spec("saturate:leaf-su01-r0:1").counter == "symbol_errors"
    assert parse_spec("width:leaf-su01-r0:1").width == "2X"
    assert parse_spec("degraded_speed:leaf-su01-r0:1").speed == "HDR"
    assert parse_spec("spine_reboot:spine-su01-s1").for_ms == 180_000
    swap = parse_spec("swap:node0001/mlx5_2:1,with=node0001/mlx5_3:1")
    assert (swap.with_device, swap.with_port) == ("node0001/mlx5_3", 1)


@pytest.mark.parametrize("spec,match", [
    ("bogus:leaf:1", "unknown fault kind"),
    ("flap:leaf-su01-r0", "needs a port"),
    ("flap:leaf-su01-r0:1,count=x", "integer"),
    ("flap:leaf-su01-r0:1,color=red", "unknown fault parameter"),
    ("flap:leaf-su01-r0:1,at=soon", "duration"),
    ("swap:leaf-su01-r0:1", "with="),
    ("saturate:leaf-su01-r0:1,counter=fec_corrected", "legacy"),
    ("degraded_width:leaf-su01-r0:1,width=3X", "width"),
    ("link_down:leaf-su01-r0:1,count=3", "every"),
    ("nonsense", "KIND:DEVICE"),
    ("flap:leaf;rm -rf /:1", "KIND:DEVICE"),
])
def test_bad_specs(spec: str, match: str) -> None:
    with pytest.raises(FaultError, match=match):
        parse_spec(spec)


def test_checks_against_fabric() -> None:
    lab = generate("lab")
    check_all([parse_spec("flap:leaf-su01-r3:2")], lab)
    for spec, match in [("flap:leaf-su01-r3:60", "not cabled"),
                        ("flap:node0099/mlx5_0:1", "no device"),
                        ("spine_reboot:node0001/mlx5_0", "switch"),
                        ("pause_storm:node0001/mlx5_0:1", "RoCE"),
                        ("hot_uplink:leaf-su01-r0:1", "uplink"),
                        ("swap:leaf-su01-r0:1,with=node0001/mlx5_0:1", "different")]:
        with pytest.raises(FaultError, match=match):
            check_all([parse_spec(spec)], lab)
    roce = generate(Params(sus=1, nodes_per_su=4, rails=2, spines_per_su=2, transport="roce"))
    check_all([parse_spec("pause_storm:node0001/mlx5_0:1"),
               parse_spec("ecn_misconfig:leaf-su01-r0")], roce)


def test_files(tmp_path: Path) -> None:
    yml = tmp_path / "f.yaml"
    yml.write_text("faults:\n  - flap:leaf-su01-r3:5,count=4,every=60s,at=30s\n"
                   "  - {kind: ber, device: node0001/mlx5_0, port: 1, raw: 1e-4, ramp: 5m}\n"
                   "  - {kind: spine_reboot, target: spine-su01-s1, at: 10m, for: 2m}\n")
    faults = load_file(yml)
    assert [f.kind for f in faults] == ["flap", "ber", "spine_reboot"]
    assert faults[1].raw == 1e-4 and faults[1].ramp_ms == 300_000
    assert faults[2].at_ms == 600_000 and faults[2].for_ms == 120_000
    js = tmp_path / "f.json"
    js.write_text('["link_down:leaf-su01-r0:1,at=1m,for=30s"]')
    assert load_file(js)[0].for_ms == 30_000
    bad = tmp_path / "bad.yaml"
    bad.write_text("- 42\n")
    with pytest.raises(FaultError, match="fault 1"):
        load_file(bad)
    with pytest.raises(FaultError, match="cannot read"):
        load_file(tmp_path / "missing.yaml")
    broken = tmp_path / "broken.json"
    broken.write_text("[")
    with pytest.raises(FaultError, match="JSON"):
        load_file(broken)
