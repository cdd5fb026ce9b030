"""ibnetdiscover: the pinned naming rule, each cable once, and what a cut-off file does."""

from __future__ import annotations

from pathlib import Path

import pytest

from collectors.errors import ParseError
from collectors.ibnetdiscover import device_name, parse_ibnetdiscover, parse_nodes
from collectors.lidmap import LidMap
from schemas import Topology, decode, encode

FIXTURES = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "ibnetdiscover"
GUID = "0x2c5eab0300b87b40"


@pytest.mark.parametrize(("description", "node_type", "expected"), [
    ("MF0;A09-P1-IBLEAF-04-04:MQM9701/U1", "switch", "A09-P1-IBLEAF-04-04"),
    ("MF0;leaf-su01-r3:MQM9790/U12", "switch", "leaf-su01-r3"),
    # A director's ASICs are MODEL/Sxx/Uk or MODEL/Lxx/Uk: not the pinned form, kept whole.
    ("MF0;rmd70-0101:MCS8500/S01/U1", "switch", "MF0;rmd70-0101:MCS8500/S01/U1"),
    ("node0042 mlx5_3", "ca", "node0042/mlx5_3"),
    ("selene-cache-02 mlx5_1 ", "ca", "selene-cache-02/mlx5_1"),
    ("  a08-p1-dgx-04-c01\tHCA-6  ", "ca", "a08-p1-dgx-04-c01/HCA-6"),
    ("MT4129 ConnectX7   Mellanox Technologies", "ca", GUID),
    ("Mellanox Technologies Aggregation Node", "ca", GUID),
    ("Infiniscale-IV Mellanox Technologies", "switch", GUID),
    ("ISR9024 Voltaire", "switch", GUID),
    ("", "ca", GUID),
    ("   ", "switch", GUID),
    ("5FB0405-leaf-IB01 ", "switch", "5FB0405-leaf-IB01"),
    ("storage   gateway  number 3", "ca", "storage gateway number 3"),
    # An MF0 description on a CA is not a switch name: used as it stands.
    ("MF0;x:Y/U1", "ca", "MF0;x:Y/U1"),
    ("rack1; rm -rf / $(id)", "ca", "rack1; rm -rf / $(id)"),
])
def test_device_naming_rule(description: str, node_type: str, expected: str) -> None:
    assert device_name(description, GUID, node_type) == expected  # type: ignore[arg-type]


def test_guid_fallback_is_16_hex_digits() -> None:
    assert device_name("", "8f10403960984", "ca") == "0x0008f10403960984"


def _links(topology: Topology) -> set[tuple[str, int, str, int]]:
    return {(x.a_device, x.a_port, x.b_device, x.b_port) for x in topology.links}


def test_fat_tree_links_once_with_width_and_speed() -> None:
    topo = parse_ibnetdiscover((FIXTURES / "topograph-ndr-fattree.txt").read_text(),
                               fabric="lab", ts=1)
    ends = [(x.a_device, x.a_port) for x in topo.links] + [
        (x.b_device, x.b_port) for x in topo.links]
    assert len(ends) == len(set(ends))  # no port is on two links, no link twice
    assert ("A09-P1-IBLEAF-04-04", 1, "a08-p1-dgx-04-c01/mlx5_5", 1) in _links(topo)
    assert ("A09-P1-IBLEAF-04-04", 35, "A10-P1-IBSPINE-02", 32) in _links(topo)
    assert {(x.width, x.speed) for x in topo.links} == {("4X", "NDR")}
    assert len(topo.links) == 1114
    assert decode(encode(topo)) == topo


def test_default_and_ports_format_agree_up_to_port_guids() -> None:
    default = parse_ibnetdiscover((FIXTURES / "topograph-ndr-fattree.txt").read_text(),
                                  fabric="lab", ts=1)
    ports = parse_ibnetdiscover((FIXTURES / "ibsim-ports-ndr-fattree-sdr.txt").read_text(),
                                fabric="lab", ts=1)
    assert len(default.links) == len(ports.links)
    named = {link for link in _links(default) if not link[2].startswith("0x")}
    assert named <= _links(ports)  # differences only where a CA is named by port GUID


def test_slower_end_wins_when_the_two_ends_disagree() -> None:
    topo = parse_ibnetdiscover((FIXTURES / "manpage-voltaire-sdr-lab.txt").read_text(),
                               fabric="lab", ts=1)
    widths = {(x.a_device, x.a_port): x.width for x in topo.links}
    assert widths[("0x0008f10400410015", 1)] == "1X"  # one end says 4xSDR, the other 1xSDR
    assert widths[("0x005442ba00003080", 12)] == "1X"


def test_nodes_lids_and_lidmap() -> None:
    nodes = parse_nodes((FIXTURES / "manpage-voltaire-sdr-lab.txt").read_text())
    ca = next(n for n in nodes if n.guid == "0x0008f10403960558")
    assert ca.type == "ca" and ca.lids == {1: 10, 2: 14} and ca.lmc == 1
    lids = LidMap.from_nodes(nodes)
    assert lids.by_lid(11) == lids.by_lid(10)  # lmc 1: two LIDs per port
    target = lids.by_lid(14)
    assert target is not None and (target.device, target.port) == (ca.name, 2)
    switch = lids.by_lid(6)
    assert switch is not None and switch.port is None and switch.type == "switch"


def test_lidmap_from_a_published_topology() -> None:
    text = (FIXTURES / "ufm-sdk-small-topo.txt").read_text()
    topo = decode(encode(parse_ibnetdiscover(text, fabric="lab", ts=1)))
    assert isinstance(topo, Topology)
    from_event = LidMap.from_topology(topo)
    from_nodes = LidMap.from_nodes(parse_nodes(text))
    assert len(from_event) == len(from_nodes) > 0
    assert from_event.device_for_lid(13) == from_nodes.device_for_lid(13) == "r-ufm-sw95"


def test_same_discovery_same_id() -> None:
    text = (FIXTURES / "ufm-sdk-small-topo.txt").read_text()
    first = parse_ibnetdiscover(text, fabric="lab", ts=1)
    assert parse_ibnetdiscover(text, fabric="lab", ts=1).id == first.id
    assert parse_ibnetdiscover(text, fabric="other", ts=1).id != first.id


def _record_line_cuts(text: str) -> list[int]:
    """Offsets inside every Switch/Ca/port line, after its first 3 characters."""
    cuts, offset = [], 0
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\n").rstrip()
        if body.startswith(("Switch", "Ca", "[")):
            cuts.extend(range(offset + 3, offset + len(body)))
        offset += len(line)
    return cuts


@pytest.mark.parametrize("name", ["manpage-voltaire-sdr-lab.txt", "ufm-sdk-small-topo.txt"])
def test_every_cut_inside_a_record_line_names_that_line(name: str) -> None:
    text = (FIXTURES / name).read_text()
    failures = []
    for cut in _record_line_cuts(text):
        partial = text[:cut]
        if text[:text.index("\n", cut)].endswith("FDR10") and partial.endswith("FDR"):
            continue  # 4xFDR10 cut after FDR reads as a real 4xFDR: nothing can tell
        try:
            parse_ibnetdiscover(partial, fabric="lab", ts=1)
            failures.append(repr(partial.splitlines()[-1]))
        except ParseError as error:
            assert error.line == partial.count("\n") + 1
    assert failures == []


@pytest.mark.parametrize("text", ["", "# only a comment\n", "hello world\n",
                                  "Switch 24 no quotes\n"])
def test_not_ibnetdiscover(text: str) -> None:
    with pytest.raises(ParseError):
        parse_ibnetdiscover(text, fabric="lab", ts=1)


def test_ca_port_guids_resolve_to_the_node_name() -> None:
    nodes = parse_nodes((FIXTURES / "manpage-voltaire-sdr-lab.txt").read_text())
    lids = LidMap.from_nodes(nodes)
    assert lids.device_for_guid("0x0008f1040396055a") == "0x0008f10403960558"  # port 2
    topo = decode(encode(parse_ibnetdiscover(
        (FIXTURES / "manpage-voltaire-sdr-lab.txt").read_text(), fabric="lab", ts=1)))
    assert isinstance(topo, Topology)
    assert LidMap.from_topology(topo).device_for_guid("0x0008f1040396055a") == (
        "0x0008f10403960558")


def test_two_nodes_with_one_name_are_reported() -> None:
    text = (FIXTURES / "ports-edr-mixed.txt").read_text().replace("'o0002 HCA-1'",
                                                                  "'o0001 HCA-1'")
    topo = parse_ibnetdiscover(text, fabric="lab", ts=1)
    assert (topo.model_extra or {})["name_collisions"] == [
        {"name": "o0001/HCA-1", "guids": ["0x7cfe9003003b4b96", "0x7cfe9003003b4bde"]}]
    clean = parse_ibnetdiscover((FIXTURES / "ports-edr-mixed.txt").read_text(), fabric="lab",
                                ts=1)
    assert "name_collisions" not in (clean.model_extra or {})
