"""Expectations for the real fixtures that do not come from the parser under test.

The golden files are regenerated from the parsers' own output, so they catch regressions but
not a parser that was wrong from the start. Here every real topology and error report is read
a second time by a deliberately simple reading (a handful of regular expressions, no naming
rules, no LID maps), or checked against the tool's own summary lines, and the parser must
agree with it. The simple reading is kept apart from ``collectors`` on purpose: it shares no
code with the parsers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from collectors.formats import IngestOptions, parse_input
from collectors.ibnetdiscover import parse_ibnetdiscover
from schemas import Counters

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"

# default format: a node header, then one line per connected port: [port] "peer"[peer port]
_HEADER = re.compile(r'^(Switch|Ca|Rt)\s+\d+\s+"([^"]+)"')
_PORT = re.compile(r'^\[(\d+)\](?:\([0-9a-fA-F]+\))?\s+"([^"]+)"\[(\d+)\]')
# -p format: one line per port; a connected one has both ends around " - "
_PLINE = re.compile(r"^(CA|SW)\s+\d+\s+(\d+)\s+(0x[0-9a-f]+)\s.*?-\s+(CA|SW)\s+\d+\s+(\d+)\s+(0x[0-9a-f]+)")


@dataclass
class SimpleReading:
    switches: set[str] = field(default_factory=set)
    cas: set[str] = field(default_factory=set)
    links: set[frozenset[tuple[str, int]]] = field(default_factory=set)


def simple_read(text: str) -> SimpleReading:
    """Nodes by their quoted ids (S-… switch, H-… CA; a peer counts even without a header),
    links as unordered pairs of (id, port), so a link seen from both ends counts once."""
    seen = SimpleReading()
    current: str | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if m := _HEADER.match(line):
            current = m.group(2)
            (seen.switches if m.group(1) == "Switch" else seen.cas).add(current)
        elif (m := _PORT.match(line)) and current is not None:
            peer = m.group(2)
            (seen.switches if peer.startswith("S-") else seen.cas).add(peer)
            seen.links.add(frozenset({(current, int(m.group(1))), (peer, int(m.group(3)))}))
        elif m := _PLINE.match(line):
            seen.links.add(frozenset({(m.group(3), int(m.group(2))), (m.group(6), int(m.group(5)))}))
    return seen


def _types(path: str) -> tuple[int, int, int]:
    topo = parse_ibnetdiscover((FIXTURES / path).read_text(), fabric="lab", ts=1)
    switches = sum(1 for n in topo.nodes if n["type"] == "switch")
    cas = sum(1 for n in topo.nodes if n["type"] == "ca")
    return switches, cas, len(topo.links)


DEFAULT_FORMAT = [
    "ibnetdiscover/topograph-ndr-fattree.txt",
    "ibnetdiscover/ufm-sdk-selene-compute-hdr.txt",
    "ibnetdiscover/ufm-sdk-selene-storage-hdr.txt",
    "ibnetdiscover/ufm-sdk-small-topo.txt",
    "ibnetdiscover/manpage-voltaire-sdr-lab.txt",
    "ibnetdiscover/superbench-hdr-director-faked-with-swve.txt",
    "ibnetdiscover/topograph-single-ca-gb200.txt",
]


@pytest.mark.parametrize("path", DEFAULT_FORMAT)
def test_default_format_topologies_agree_with_a_simple_reading(path: str) -> None:
    seen = simple_read((FIXTURES / path).read_text())
    assert _types(path) == (len(seen.switches), len(seen.cas), len(seen.links))


def test_the_selene_fabrics_have_the_size_their_files_show() -> None:
    # Figures read off the files with grep (headers and link lines), written down here so a
    # change to the simple reading cannot silently move both sides at once.
    assert _types("ibnetdiscover/ufm-sdk-selene-compute-hdr.txt") == (666, 4341, 12852)
    assert _types("ibnetdiscover/ufm-sdk-selene-storage-hdr.txt") == (160, 1247, 3286)
    assert _types("ibnetdiscover/topograph-ndr-fattree.txt") == (40, 582, 1114)


@pytest.mark.parametrize("path", [
    "ibnetdiscover/ibsim-ports-ndr-fattree-sdr.txt",
    "ibnetdiscover/ports-edr-mixed.txt",
    "ibnetdiscover/ports-hdr-sharp.txt",
    "ibnetdiscover/ports-qdr-unquoted.txt",
])
def test_ports_format_links_agree_with_a_simple_reading(path: str) -> None:
    seen = simple_read((FIXTURES / path).read_text())
    assert _types(path)[2] == len(seen.links)


def test_ibsim_discovery_of_the_fat_tree_is_the_fabric_it_was_loaded_with() -> None:
    # ibsim was loaded with the topograph file; the real ibnetdiscover -p against it must show
    # the same fabric, counted by the simple reading of each file.
    loaded = simple_read((FIXTURES / "ibnetdiscover/topograph-ndr-fattree.txt").read_text())
    discovered = _types("ibnetdiscover/ibsim-ports-ndr-fattree-sdr.txt")
    assert discovered == (len(loaded.switches), len(loaded.cas), len(loaded.links))


_SUMMARY = re.compile(r"## Summary: (\d+) nodes checked, (\d+) bad nodes found\s*\n"
                      r"##\s+(\d+) ports checked, (\d+) ports have errors beyond threshold")


@pytest.mark.parametrize("path", [
    "ibqueryerrors/ibsim-injected-errors.txt",
    "ibqueryerrors/ibsim-injected-errors-report-port.txt",
])
def test_ibqueryerrors_agrees_with_its_own_summary(path: str) -> None:
    data = (FIXTURES / path).read_bytes()
    m = _SUMMARY.search(data.decode())
    assert m, "the fixture carries ibqueryerrors' summary footer"
    nodes_checked, bad_nodes, _ports_checked, bad_ports = map(int, m.groups())
    events = parse_input("ibqueryerrors", data, IngestOptions(fabric="lab", ts=1))
    assert all(isinstance(e, Counters) for e in events)
    samples = [p for e in events if isinstance(e, Counters) for p in e.ports]
    assert (len({e.device for e in events if isinstance(e, Counters)}), len(samples)) == (
        bad_nodes, bad_ports)
    # the fabric ibqueryerrors walked is the one ibsim was loaded with
    loaded = simple_read((FIXTURES / "ibnetdiscover/topograph-ndr-fattree.txt").read_text())
    assert nodes_checked == len(loaded.switches) + len(loaded.cas)


def test_iblinkinfo_reports_every_port_line_of_the_file() -> None:
    data = (FIXTURES / "iblinkinfo/ibsim-ndr-fattree-grouped.txt").read_bytes()
    text = data.decode()
    port_lines = sum(1 for line in text.splitlines() if "==(" in line)
    headers = sum(1 for line in text.splitlines() if re.match(r"^(CA|Switch): ", line))
    events = parse_input("iblinkinfo", data, IngestOptions(fabric="lab", ts=1))
    assert len(events) == headers
    assert sum(len(e.ports) for e in events if isinstance(e, Counters)) == port_lines
