"""``ibnetdiscover`` output (default and ``-p`` ports format) to a ``topology`` event.

Both formats are detected from the text. The device naming rule is pinned (issue 4; the
topology diff and the simulator rely on it), see ``device_name``.

Default format: one record per node (``vendid=``/``devid=``/``switchguid=`` or ``caguid=``
lines, a ``Switch``/``Ca``/``Rtr`` line, then one line per connected port). Every cable
shows up twice, once from each end; it is reported once. Peers are matched by the quoted
node name (``"S-<guid>"``, or whatever a ``--node-name-map`` made of it).

Ports format (``-p``): one line per port, ``TYPE LID PORT GUID WIDTHx SPEED`` then either
``- TYPE LID PORT GUID ( 'desc' - 'peer desc' )`` or, for a port without a peer, the node
description alone (quoted or not). That format prints port GUIDs, not node GUIDs: for a CA
whose port GUID differs from its node GUID, the GUID fallback name differs from the one the
default format gives. Prefer the default format where the GUID fallback matters.

The topology event carries, beyond the contract's ``links``, an extra ``nodes`` list
(``name``, ``type``, ``guid``, ``description``, ``lmc``, ``lids``: port number as a string
-> base LID) so that consumers can resolve LIDs through the latest topology
(``collectors.lidmap.LidMap.from_topology``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from collectors.common import collapse, guarded, guid_str, lines, stable_id
from collectors.errors import ParseError
from schemas import Topology, TopologyLink
from schemas.policy import SPEED_RANK, WIDTH_RANK

NodeType = Literal["switch", "ca", "router"]

_TYPE_WORD: dict[str, NodeType] = {"Switch": "switch", "Ca": "ca", "Rtr": "router",
                                   "SW": "switch", "CA": "ca", "RT": "router"}

# MF0;NAME:MODEL/Uk -- how NVIDIA/Mellanox managed switches describe themselves.
_MF0 = re.compile(r"^MF0;([^:]+):([^/]+)/U\d+$")
# Node descriptions firmware sets when nobody configured one. They name the hardware, not
# the device, and repeat across a fabric, so they fall back to the node GUID.
_VENDOR_DEFAULT = re.compile(
    r"(?i)\b(?:mellanox|nvidia) technologies\b"
    r"|\baggregation node\b"
    r"|\bvoltaire\b"
    r"|^MT\d{4,5}\b"
    r"|\bqlogic\b"
)

# Default format.
_GUID_LINE = re.compile(r"^(vendid|devid|sysimgguid|switchguid|caguid|rtrguid)=(0x[0-9a-fA-F]+)")
_NODE_LINE = re.compile(
    r'^(Switch|Ca|Rtr)\s+(\d+)\s+"([^"]*)"\s*#\s*"(.*)"'
    r"(?:\s+(?:enhanced|base)\s+port\s+\d+\s+lid\s+(\d+)\s+lmc\s+(\d+))?\s*$"
)
_PORT_LINE = re.compile(
    r'^\[(\d+)\](?:\(([0-9a-fA-F]+)\))?\s*"([^"]*)"\[(\d+)\](?:\(([0-9a-fA-F]+)\))?\s*'
    r"#\s*(?:lid\s+(\d+)\s+lmc\s+(\d+)\s+)?"
    r'"(.*)"\s+lid\s+(\d+)\s+(\d+)x(\S+)(?:\s+.*)?$'
)
_GROUP_HEADER = re.compile(r"^(?:Non-Chassis Nodes|Chassis\b.*)$")
_GUID_IN_NAME = re.compile(r"^[SHR]-([0-9a-fA-F]{1,16})$")

# Ports format.
_P_END = r"(CA|SW|RT)\s+(\d+)\s+(\d+)\s+(0x[0-9a-fA-F]+)"
_P_LINKED = re.compile(
    rf"^{_P_END}\s+(\d+)x\s*(\S+)\s+-\s+{_P_END}\s+\(\s*(.*)\s*\)\s*$"
)
_P_ALONE = re.compile(rf"^{_P_END}\s+(\d+)x\s*(\S+)(?:\s+(.*))?$")
_P_DESCS_QUOTED = re.compile(r"^'(.*)'\s+-\s+'(.*)'$")
# "- SW 12 5 0x..." where a port's description belongs: the peer half of a cut linked line
_P_PEER_CUT = re.compile(r"^-\s+(CA|SW|RT)\s+\d+\s+\d+\s+0x")


@dataclass
class Node:
    """One node as discovered: switch, CA or router."""

    type: NodeType
    guid: str  # 0x + 16 hex; in the -p format the GUID printed for its port(s)
    description: str  # as reported, inside the quotes
    name: str  # the device name by the pinned naming rule
    lids: dict[int, int] = field(default_factory=dict)  # port (0 for a switch) -> base LID
    lmc: int = 0
    ports: int | None = None  # number of ports, where the output says
    line: int = 0  # where the node first appears
    port_guids: dict[int, str] = field(default_factory=dict)  # CA port -> port GUID

    @property
    def lid(self) -> int | None:
        """The node's first base LID (a switch's LID; a CA's lowest port's)."""
        return self.lids[min(self.lids)] if self.lids else None

    def to_wire(self) -> dict[str, object]:
        wire: dict[str, object] = {
            "name": self.name, "type": self.type, "guid": self.guid,
            "description": self.description, "lmc": self.lmc,
            "lids": {str(port): lid for port, lid in sorted(self.lids.items())}}
        if any(g != self.guid for g in self.port_guids.values()):
            wire["port_guids"] = {str(p): g for p, g in sorted(self.port_guids.items())}
        return wire


def device_name(description: str, guid: str | int, node_type: NodeType) -> str:
    """The pinned device naming rule (issue 4).

    A switch described ``MF0;NAME:MODEL/Uk`` is ``NAME``; a firmware default description
    (``MT4129 ConnectX7   Mellanox Technologies``, ``Mellanox Technologies Aggregation
    Node``, ``ISR9024 Voltaire``) or an empty one is the node GUID, ``0x`` + 16 hex digits;
    any other two-word description ``HOST HCA`` is ``HOST/HCA``; anything else is used as it
    stands, whitespace collapsed. A description with control characters cannot be a device
    name and falls back to the GUID too.
    """
    text = collapse(description)
    if node_type == "switch":
        match = _MF0.match(text)
        if match:
            return match.group(1).strip()
    if not text or _VENDOR_DEFAULT.search(text) or any(ord(c) < 0x20 or ord(c) == 0x7F
                                                        for c in text):
        return guid_str(guid)
    words = text.split(" ")
    if len(words) == 2:
        return f"{words[0]}/{words[1]}"
    return text


def _split_speed(width: str, speed: str, line: int) -> tuple[str | None, str | None]:
    """``4``, ``NDR`` -> ``4X``, ``NDR``; ibnetdiscover's unknown speed ``???`` -> None.

    Anything else is refused: a speed such as ``SD`` is what a line cut off in the middle
    of ``SDR`` looks like, and a wrong speed would fire degraded-link detections.
    """
    w = f"{width}X"
    if w not in WIDTH_RANK:
        raise ParseError(None, line, f"unknown link width {width}x")
    if speed == "???":
        return w, None
    if speed not in SPEED_RANK:
        raise ParseError(None, line, f"unknown link speed {speed[:20]!r} (truncated line?)")
    return w, speed


@dataclass
class _Parsed:
    nodes: list[Node]
    # (a node, a port, b node, b port, width, speed)
    links: list[tuple[Node, int, Node, int, str | None, str | None]]
    format: str


def _detect(text: str) -> str:
    for _number, line in lines(text):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if _P_ALONE.match(stripped):
            return "ports"
        return "default"
    return "empty"


def _parse_default(text: str) -> _Parsed:
    by_key: dict[str, Node] = {}  # quoted name ("S-<guid>") -> node
    nodes: list[Node] = []
    guids: dict[str, str] = {}
    current: Node | None = None
    # (line, local node, local port, peer key, peer port, peer port guid, peer desc,
    #  peer lid, width, speed)
    raw: list[tuple[int, Node, int, str, int, str | None, str, int, str, str]] = []
    for number, line in lines(text):
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or _GROUP_HEADER.match(stripped):
            if not stripped:
                current = None
            continue
        match = _GUID_LINE.match(stripped)
        if match:
            guids[match.group(1)] = match.group(2)
            continue
        match = _NODE_LINE.match(stripped)
        if match:
            word, nports, key, desc, lid, lmc = match.groups()
            node_type = _TYPE_WORD[word]
            if node_type == "switch" and lid is None:
                # ibnetdiscover always ends a Switch line with "... port 0 lid N lmc M".
                raise ParseError(None, number, "Switch line without its port 0 LID "
                                               "(truncated line?)")
            guid_field = {"switch": "switchguid", "ca": "caguid", "router": "rtrguid"}[node_type]
            guid = guids.get(guid_field)
            if guid is None:
                in_name = _GUID_IN_NAME.match(key)
                if in_name is None:
                    raise ParseError(None, number, f"{word} record without a {guid_field}= line")
                guid = in_name.group(1)
            if key in by_key:
                raise ParseError(None, number, f"node {key!r} appears twice")
            current = Node(type=node_type, guid=guid_str(guid), description=desc,
                           name=device_name(desc, guid, node_type), ports=int(nports),
                           lmc=int(lmc) if lmc is not None else 0, line=number)
            if lid is not None:
                current.lids[0] = int(lid)
            by_key[key] = current
            nodes.append(current)
            guids = {}
            continue
        match = _PORT_LINE.match(stripped)
        if match:
            if current is None:
                raise ParseError(None, number, "port line outside a Switch/Ca record")
            (port, pguid, peer_key, peer_port, peer_pguid, lid, lmc, peer_desc, peer_lid,
             width, speed) = match.groups()
            if pguid is not None:
                current.port_guids[int(port)] = guid_str(pguid)
            if lid is not None:
                current.lids[int(port)] = int(lid)
                current.lmc = max(current.lmc, int(lmc))
            raw.append((number, current, int(port), peer_key, int(peer_port), peer_pguid,
                        peer_desc, int(peer_lid), width, speed))
            continue
        raise ParseError(None, number, f"not ibnetdiscover output: {stripped[:80]!r}")

    links: list[tuple[Node, int, Node, int, str | None, str | None]] = []
    seen: dict[tuple[tuple[str, int], tuple[str, int]], int] = {}
    for (number, node, port, peer_key, peer_port, peer_pguid, peer_desc, peer_lid, width,
         speed) in raw:
        peer = by_key.get(peer_key)
        if peer is None:
            # The peer's own record is missing (a cut-down file): name it from what this
            # line says about it.
            in_name = _GUID_IN_NAME.match(peer_key)
            guid = in_name.group(1) if in_name else peer_pguid
            if guid is None:
                raise ParseError(None, number, f"peer {peer_key!r} has no node record and "
                                               "no GUID to name it by")
            peer_type: NodeType = "switch" if peer_key.startswith("S-") else (
                "router" if peer_key.startswith("R-") else "ca")
            peer = Node(type=peer_type, guid=guid_str(guid), description=peer_desc,
                        name=device_name(peer_desc, guid, peer_type), line=number)
            peer.lids[0 if peer_type == "switch" else peer_port] = peer_lid
            by_key[peer_key] = peer
            nodes.append(peer)
        ends = tuple(sorted(((node.guid, port), (peer.guid, peer_port))))
        key = (ends[0], ends[1])
        w, s = _split_speed(width, speed, number)
        if key in seen:
            # The two ends normally agree; where they do not, the slower report wins,
            # because a degraded link must not hide behind its healthy-looking end.
            i = seen[key]
            a, ap, b, bp, w0, s0 = links[i]
            links[i] = (a, ap, b, bp, _slower(w0, w), _slower(s0, s))
            continue
        seen[key] = len(links)
        links.append((node, port, peer, peer_port, w, s))
    return _Parsed(nodes, links, "default")


def _slower(old: str | None, new: str | None) -> str | None:
    """The lower-ranked of two widths or speeds (unknown ones lose to known ones)."""
    if old is None or new is None:
        return old or new
    rank = WIDTH_RANK if old in WIDTH_RANK else SPEED_RANK
    return new if rank.get(new, 0) < rank.get(old, 0) else old


def _parse_ports(text: str) -> _Parsed:
    by_guid: dict[tuple[str, str], Node] = {}
    nodes: list[Node] = []
    links: list[tuple[Node, int, Node, int, str | None, str | None]] = []
    seen: set[tuple[tuple[str, int], tuple[str, int]]] = set()

    def node_for(number: int, word: str, lid: str, port: str, guid: str, desc: str) -> Node:
        node_type = _TYPE_WORD[word]
        key = (node_type, guid_str(guid))
        node = by_guid.get(key)
        if node is None:
            node = Node(type=node_type, guid=key[1], description=desc,
                        name=device_name(desc, guid, node_type), line=number)
            by_guid[key] = node
            nodes.append(node)
        node.lids[0 if node_type == "switch" else int(port)] = int(lid)
        if node_type != "switch":
            node.port_guids[int(port)] = key[1]
        return node

    for number, line in lines(text):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        match = _P_LINKED.match(stripped)
        if match:
            (aw, alid, aport, aguid, width, speed, bw, blid, bport, bguid,
             descs) = match.groups()
            quoted = _P_DESCS_QUOTED.match(descs.strip())
            if quoted:
                adesc, bdesc = quoted.groups()
            elif " - " in descs:
                adesc, bdesc = descs.split(" - ", 1)
            else:
                raise ParseError(None, number, "cannot split the two node descriptions "
                                               f"in {descs[:80]!r}")
            a = node_for(number, aw, alid, aport, aguid, adesc)
            b = node_for(number, bw, blid, bport, bguid, bdesc)
            ends = tuple(sorted(((a.guid, int(aport)), (b.guid, int(bport)))))
            key = (ends[0], ends[1])
            if key not in seen:
                seen.add(key)
                w, s = _split_speed(width, speed, number)
                links.append((a, int(aport), b, int(bport), w, s))
            continue
        match = _P_ALONE.match(stripped)
        if match:
            aw, alid, aport, aguid, _width, _speed, desc = match.groups()
            desc = (desc or "").strip()
            if _P_PEER_CUT.match(desc):
                raise ParseError(None, number, "a linked port's line is cut off before its "
                                               f"peer's descriptions end: {stripped[:80]!r}")
            if desc.startswith("'") and (len(desc) < 2 or not desc.endswith("'")):
                raise ParseError(None, number, f"unterminated node description {desc[:80]!r} "
                                               "(the line is cut off?)")
            if len(desc) >= 2 and desc[0] == desc[-1] == "'":
                desc = desc[1:-1]
            node_for(number, aw, alid, aport, aguid, desc)
            continue
        raise ParseError(None, number, f"not ibnetdiscover -p output: {stripped[:80]!r}")
    return _Parsed(nodes, links, "ports")


def _parse(text: str) -> _Parsed:
    fmt = _detect(text)
    if fmt == "empty":
        raise ParseError(None, None, "no ibnetdiscover records: the input is empty or only "
                                     "comments")
    parsed = _parse_ports(text) if fmt == "ports" else _parse_default(text)
    if not parsed.nodes:
        raise ParseError(None, None, "no ibnetdiscover node records found (is this the "
                                     "output of another tool?)")
    return parsed


@guarded
def parse_nodes(text: str) -> list[Node]:
    """Every node of an ``ibnetdiscover`` output (either format), in order of appearance."""
    return _parse(text).nodes


def _oriented(a: Node, ap: int, b: Node, bp: int) -> tuple[Node, int, Node, int]:
    """Switch end first; otherwise the lower (name, port) first: one canonical orientation."""
    if (a.type == "switch") != (b.type == "switch"):
        return (a, ap, b, bp) if a.type == "switch" else (b, bp, a, ap)
    return (a, ap, b, bp) if (a.name, ap) <= (b.name, bp) else (b, bp, a, ap)


@guarded
def parse_ibnetdiscover(text: str, *, fabric: str, ts: int,
                        source: str = "ibnetdiscover") -> Topology:
    """A ``topology`` event from ``ibnetdiscover`` output (default or ``-p`` format).

    Each cable appears once, switch end as ``a`` where one end is a switch, links sorted by
    ``(a_device, a_port)``. The id is a hash of the fabric and the links, so the same
    discovery published twice dedupes. Raises ``ParseError`` for anything else.
    """
    parsed = _parse(text)
    links = []
    for a, ap, b, bp, width, speed in parsed.links:
        a, ap, b, bp = _oriented(a, ap, b, bp)
        links.append(TopologyLink(a_device=a.name, a_port=ap, b_device=b.name, b_port=bp,
                                  width=width, speed=speed))
    links.sort(key=lambda link: (link.a_device, link.a_port, link.b_device, link.b_port))
    nodes = sorted(parsed.nodes, key=lambda n: (n.name, n.guid))
    # Two nodes that the naming rule gives one name (the same node description set on two
    # hosts) would merge in every consumer: name them so an operator can fix the fabric.
    by_name: dict[str, list[str]] = {}
    for node in nodes:
        by_name.setdefault(node.name, []).append(node.guid)
    collisions = [{"name": name, "guids": guids} for name, guids in by_name.items()
                  if len(guids) > 1]
    ident = stable_id("topology", fabric, source,
                      *(f"{x.a_device}:{x.a_port}-{x.b_device}:{x.b_port}/{x.width}{x.speed}"
                        for x in links),
                      *(f"{n.name}={n.guid}" for n in nodes))
    return Topology(id=ident, ts=ts, fabric=fabric, source=source, links=links,
                    nodes=[n.to_wire() for n in nodes],
                    discovery_format=parsed.format,
                    **({"name_collisions": collisions} if collisions else {}))
