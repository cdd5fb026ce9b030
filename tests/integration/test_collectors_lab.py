"""The collectors against the real tools: ibsim, opensm and infiniband-diags on a small fabric.

ibsim simulates the fabric at the MAD level; opensm (run once) assigns LIDs; the real
``ibnetdiscover``, ``perfquery`` and ``iblinkinfo`` read it through libumad2sim; their output
goes through the parsers. Counters are set with ibsim's ``PerformanceSet`` so that a
saturated legacy counter is known to be one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from collectors.ibdiags import parse_iblinkinfo, parse_perfquery
from collectors.ibnetdiscover import parse_ibnetdiscover, parse_nodes
from collectors.lidmap import LidMap

UMAD2SIM = Path("/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so")
pytestmark = [
    pytest.mark.integration,
    pytest.mark.lab,
    pytest.mark.skipif(shutil.which("ibsim") is None or shutil.which("opensm") is None
                       or shutil.which("perfquery") is None or not UMAD2SIM.exists(),
                       reason="ibsim, opensm and infiniband-diags are not installed "
                              "(make lab-deps)"),
]

# ibsim reads ibnetdiscover's own format; names in quotes are ibsim's node ids.
NET = """\
Switch\t8 "S-leaf"\t\t# "MF0;leaf-su01-r1:MQM9700/U1" enhanced port 0 lid 0 lmc 0
[1]\t"H-node1"[1]
[2]\t"H-node2"[1]
[7]\t"S-spine"[7]
[8]\t"S-spine"[8]

Switch\t8 "S-spine"\t\t# "MF0;spine-01:MQM9700/U1" enhanced port 0 lid 0 lmc 0
[7]\t"S-leaf"[7]
[8]\t"S-leaf"[8]
[1]\t"H-spare"[1]

Ca\t1 "H-node1"\t\t# "node0001 mlx5_0"
[1]\t"S-leaf"[1]

Ca\t1 "H-node2"\t\t# "node0002 mlx5_0"
[1]\t"S-leaf"[2]

Ca\t1 "H-spare"\t\t# "MT4129 ConnectX7   Mellanox Technologies"
[1]\t"S-spine"[1]
"""


class Lab:
    def __init__(self, folder: Path, sim: subprocess.Popen[str], env: dict[str, str]) -> None:
        self.folder, self.sim, self.env = folder, sim, env

    def console(self, command: str) -> None:
        assert self.sim.stdin is not None
        self.sim.stdin.write(command + "\n")
        self.sim.stdin.flush()
        time.sleep(0.3)

    def run(self, *argv: str) -> str:
        result = subprocess.run(list(argv), env={**self.env, "LD_PRELOAD": str(UMAD2SIM)},
                                cwd=self.folder, capture_output=True, text=True, timeout=60,
                                check=True)
        return result.stdout


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    folder = tmp_path_factory.mktemp("iblab")
    (folder / "net").write_text(NET)
    env = {**os.environ, "IBSIM_SOCKNAME": f"fw{uuid.uuid4().hex[:10]}",
           "OSM_CACHE_DIR": str(folder), "OSM_TMP_DIR": str(folder)}
    log = (folder / "ibsim.log").open("w")
    sim = subprocess.Popen(["ibsim", "-s", "net"], cwd=folder, env=env, text=True,
                           stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while "simulator ready" not in (folder / "ibsim.log").read_text():
            assert sim.poll() is None, (folder / "ibsim.log").read_text()
            assert time.monotonic() < deadline, "ibsim did not start"
            time.sleep(0.1)
        lab = Lab(folder, sim, env)
        lab.run("opensm", "-o", "-f", str(folder / "opensm.log"))  # assign LIDs once
        yield lab
    finally:
        if sim.stdin is not None and sim.poll() is None:
            sim.stdin.write("Quit\n")
            sim.stdin.close()
        try:
            sim.wait(timeout=10)
        except subprocess.TimeoutExpired:
            sim.kill()
            sim.wait()
        log.close()


def test_real_ibnetdiscover_both_formats(lab: Lab) -> None:
    default = parse_ibnetdiscover(lab.run("ibnetdiscover"), fabric="lab", ts=1)
    ports = parse_ibnetdiscover(lab.run("ibnetdiscover", "-p"), fabric="lab", ts=1)
    links = {(x.a_device, x.a_port, x.b_device, x.b_port, x.width, x.speed)
             for x in default.links}
    spare = next(x.b_device for x in default.links if x.a_device == "spine-01" and x.a_port == 1)
    assert spare.startswith("0x") and len(spare) == 18  # the vendor default: GUID name
    assert links == {
        ("leaf-su01-r1", 1, "node0001/mlx5_0", 1, "4X", "SDR"),
        ("leaf-su01-r1", 2, "node0002/mlx5_0", 1, "4X", "SDR"),
        ("leaf-su01-r1", 7, "spine-01", 7, "4X", "SDR"),
        ("leaf-su01-r1", 8, "spine-01", 8, "4X", "SDR"),
        ("spine-01", 1, spare, 1, "4X", "SDR"),
    }
    named = {x for x in links if not x[2].startswith("0x")}
    assert named <= {(x.a_device, x.a_port, x.b_device, x.b_port, x.width, x.speed)
                     for x in ports.links}


def test_real_perfquery_saturation_and_lid_resolution(lab: Lab) -> None:
    lids = LidMap.from_nodes(parse_nodes(lab.run("ibnetdiscover")))
    leaf_lid = next(lid for lid in range(1, 64) if lids.device_for_lid(lid) == "leaf-su01-r1")
    lab.console('PerformanceSet "S-leaf"[2] PortCounters.SymbolErrorCounter=65535')
    lab.console('PerformanceSet "S-leaf"[2] PortCounters.LinkDownedCounter=255')
    lab.console('PerformanceSet "S-leaf"[2] PortCounters.PortRcvErrors=1482')
    [basic] = parse_perfquery(lab.run("perfquery", str(leaf_lid), "2"), fabric="lab", ts=1,
                              lids=lids)
    sample = basic.ports[0]
    assert (basic.device, sample.port) == ("leaf-su01-r1", 2)
    assert (sample.symbol_errors, sample.link_downed, sample.rcv_errors) == (65535, 255, 1482)
    assert sample.counter_bits is not None
    assert (sample.counter_bits["symbol_errors"], sample.counter_bits["link_downed"]) == (16, 8)
    [extended] = parse_perfquery(lab.run("perfquery", "-x", str(leaf_lid), "2"), fabric="lab",
                                 ts=1, lids=lids)
    ext = extended.ports[0]
    assert ext.model_extra is not None and ext.model_extra["xmit_data"] >= 0
    assert ext.counter_bits is not None and ext.counter_bits["xmit_data"] == 64


def test_real_iblinkinfo_sees_an_unlinked_port_down(lab: Lab) -> None:
    lab.console('Unlink "S-leaf"[8]')
    try:
        events = {e.device: e for e in parse_iblinkinfo(lab.run("iblinkinfo"), fabric="lab",
                                                        ts=1)}
    finally:
        lab.console('ReLink "S-leaf"[8]')
    leaf = {p.port: p for p in events["leaf-su01-r1"].ports}
    assert (leaf[7].width, leaf[7].speed) == ("4X", "SDR")
    assert (leaf[8].width, (leaf[8].model_extra or {})["state"]) == (None, "Down")
