"""The lab's pure parts: net-file mapping, console commands, argument checks, trap -> port events."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from collectors.ibnetdiscover import parse_ibnetdiscover
from collectors.lidmap import LidMap
from collectors.live.poll_ibdiags import switch_targets
from collectors.live.tail_opensm import LogFollower, OpensmTail
from collectors.live.tools import check_arg, check_lid, check_port, port_list
from fabricwatch.lab import LabError, LabStack, parse_netfile
from sim.topology import generate

FIXTURE = (Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "opensm"
           / "ibsim-default-level-traps-128.log")


def test_net_file_maps_contract_names_to_ibsim_ids() -> None:
    nodes, links = parse_netfile(generate("lab").to_ibnetdiscover())
    assert nodes["leaf-su01-r0"].ident == "S-fc6a1c0300000100"
    assert nodes["node0001/mlx5_0"].type == "ca"
    assert links["S-fc6a1c0300000100[1]"] == "H-946dae0300000010[1]"
    assert links["H-946dae0300000010[1]"] == "S-fc6a1c0300000100[1]"


def test_port_list_and_checks() -> None:
    assert port_list([5, 1, 2, 3, 8, 7]) == "1-3,5,7-8"
    assert port_list([4]) == "4"
    for bad in (0, 255, -1, True, "3"):
        with pytest.raises(ValueError):
            check_port(bad)
    for bad in (0, 0xC000, False):
        with pytest.raises(ValueError):
            check_lid(bad)
    for bad in ("1;rm", "$(x)", "a b", "", "`x`", "a|b"):
        with pytest.raises(ValueError):
            check_arg(bad)
    assert check_arg("--switches-only") == "--switches-only"


def test_console_refuses_unknown_devices_and_bad_counters(tmp_path: Path) -> None:
    lab = LabStack(tmp_path)
    with pytest.raises(LabError, match="no lab"):
        lab.unlink("leaf-su01-r0", 1)
    lab.dir.mkdir(parents=True)
    lab._save({"socket": "x", "nodes": {"leaf-su01-r0": {"id": "S-1", "type": "switch",
                                                         "guid": "0x1"}}, "links": {},
               "netfile": "n"})
    with pytest.raises(LabError, match="not in the lab"):
        lab.unlink("leaf-su01-r9", 1)
    with pytest.raises(LabError, match="not a device name"):
        lab.unlink('x" ; Unlink "y', 1)
    with pytest.raises(LabError, match="PortCounters"):
        lab.set_counters("leaf-su01-r0", 1, {"Symbol Error": 1})
    with pytest.raises(LabError, match="not running"):
        lab.unlink("leaf-su01-r0", 1)  # no console FIFO reader: ibsim is not running


def test_switch_targets_from_a_topology() -> None:
    topo = parse_ibnetdiscover(generate("lab").to_ibnetdiscover(), fabric="lab", ts=1)
    targets = {t.device: t for t in switch_targets(topo)}
    assert targets["leaf-su01-r0"].lid == 1 and targets["leaf-su01-r0"].ports == tuple(range(1, 9))
    assert set(targets) == {"leaf-su01-r0", "leaf-su01-r1", "leaf-su01-r2", "leaf-su01-r3",
                            "spine-su01-s1", "spine-su01-s2"}


class Sink:
    def __init__(self) -> None:
        self.events: list[object] = []

    async def send_many(self, events: list[object]) -> None:
        self.events += events

    async def flush(self) -> None:
        return None


def test_fresh_trap_becomes_the_ports_that_changed(tmp_path: Path) -> None:
    states = [{("leaf-a", 1): "LinkUp", ("leaf-a", 2): "LinkUp"},
              {("leaf-a", 1): "LinkUp", ("leaf-a", 2): "Polling"}]

    async def scan(_lids: LidMap | None) -> dict[tuple[str, int], str]:
        return states.pop(0)

    log = tmp_path / "opensm.log"
    log.write_text("", encoding="utf-8")
    line = ("Nov 29 17:33:08 940993 [6C27C6C0] 0x01 -> log_trap_info: Received Generic Notice "
            "type:1 num:128 (Link state change) Producer:2 (Switch) from LID:73 TID:0x0")
    # the clock says it is a second after the line (2026, UTC)
    tail = OpensmTail(LogFollower(log, tmp_path / "p.json"), Sink(), fabric="f", scan=scan,
                      clock=lambda: 1795973589.0)

    async def go() -> list[object]:
        await tail.baseline()
        return list(await tail.process([line]))

    events = asyncio.run(go())
    assert len(events) == 1
    ev = events[0]
    assert (ev.device, ev.port, ev.state, ev.trap) == ("leaf-a", 2, "down", 128)  # type: ignore[attr-defined]


def test_stale_traps_are_counted_not_guessed(tmp_path: Path) -> None:
    calls = []

    async def scan(_lids: LidMap | None) -> dict[tuple[str, int], str]:
        calls.append(1)
        return {}

    tail = OpensmTail(LogFollower(tmp_path / "x.log", tmp_path / "p.json"), Sink(),
                      fabric="f", scan=scan, clock=lambda: 1795973589.0 + 86400)
    lines = FIXTURE.read_text(encoding="utf-8").splitlines()
    events = asyncio.run(tail.process(lines))
    assert events == [] or all(e.trap is None for e in events)
    assert tail.stats.traps >= 6 and tail.stats.stale_traps == tail.stats.traps
    assert calls == []


def test_a_trap_with_its_directed_route_reads_only_that_switch(tmp_path: Path) -> None:
    asked: list[str | None] = []

    async def scan(_lids: LidMap | None, path: str | None = None
                   ) -> dict[tuple[str, int], str]:
        asked.append(path)
        if path is None:  # the baseline: the whole fabric
            return {("spine-a", 3): "LinkUp", ("leaf-b", 5): "LinkUp"}
        return {("spine-a", 3): "Polling"}

    log = tmp_path / "opensm.log"
    log.write_text("", encoding="utf-8")
    lines = [
        "Nov 29 17:33:08 940993 [6C27C6C0] 0x01 -> log_trap_info: Received Generic Notice "
        "type:1 num:128 (Link state change) Producer:2 (Switch) from LID:5 TID:0x0",
        "Nov 29 17:33:08 941227 [6C27C6C0] 0x02 -> SM class trap 128: Directed Path Dump of "
        "1 hop path: Path = 0,5",
    ]
    tail = OpensmTail(LogFollower(log, tmp_path / "p.json"), Sink(), fabric="f", scan=scan,
                      clock=lambda: 1795973589.0,
                      peers=lambda: {("spine-a", 3): ("node1/mlx5_0", 1)})  # a host cable

    async def go() -> list[object]:
        await tail.baseline()
        return list(await tail.process(lines))

    events = asyncio.run(go())
    assert asked == [None, "0,5"]
    assert [(e.device, e.port, e.state) for e in events] == [("spine-a", 3, "down")]  # type: ignore[attr-defined]
    assert tail.stats.targeted_scans == 1
