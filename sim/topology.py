"""Rail-optimized fat-tree generator: the simulated fabric's structure and its real-format output.

A fabric is built from scalable units (SUs) of ``nodes_per_su`` nodes with ``rails`` HCAs
each. HCA ``mlx5_k`` of every node of an SU plugs into leaf ``k`` of that SU (rail ``k``),
so same-rail traffic inside an SU crosses one leaf only. Each leaf has as many uplinks as
node ports (1:1, half the radix down, half up) to the SU's spines. With a core tier the
spines also split their radix half down, half up, and spine ``j`` of every SU stripes its
uplinks across core group ``j``; without one the spines use their whole radix downwards.

Names follow the contract's device naming (collectors' ibnetdiscover rule): switches
``leaf-su01-r3`` (SU 1, rail 3), ``spine-su01-s2``, ``core-g2-c07``; nodes ``node0042``;
HCAs ``node0042/mlx5_3`` (port 1). GUIDs and LIDs are derived from positions, so the
same parameters always give the same fabric.

``to_ibnetdiscover`` writes the default ``ibnetdiscover`` format exactly as the tool prints
it (records, tabs, ``enhanced port 0``, ``4xNDR``), which ``collectors.ibnetdiscover`` parses
and ``ibsim`` loads as its net file (lines stay under ibsim's 256-byte limit).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Literal, Protocol

from schemas import Topology, TopologyLink

Tier = Literal["leaf", "spine", "core"]
LinkTier = Literal["host", "leaf-spine", "spine-core"]

SWITCH_GUID_BASE = 0xFC6A1C0300000000  # an NVIDIA switch OUI (fc:6a:1c) with a running index
HCA_GUID_BASE = 0x946DAE0300000000  # an NVIDIA ConnectX OUI (94:6d:ae)
SWITCH_MODEL = "MQM9700"  # Quantum-2, 64 NDR ports
SWITCH_DEVID = 0xD2F2
HCA_DEVID = 0x1021  # ConnectX-7
VENDOR_ID = 0x2C9
LANE_GBPS = {"SDR": 2.5, "DDR": 5.0, "QDR": 10.0, "FDR10": 10.0, "FDR": 14.0625,
             "EDR": 25.0, "HDR": 50.0, "NDR": 100.0, "XDR": 200.0}
WIDTH_LANES = {"1X": 1, "2X": 2, "4X": 4, "8X": 8, "12X": 12}
# A fixed "generated on" time keeps the written file byte-identical across runs.
DEFAULT_GENERATED = datetime(2026, 1, 5, 9, 0, 0, tzinfo=UTC)


class TopologyError(ValueError):
    """Parameters that do not make a fabric, or a name the fabric does not have."""


@dataclass(frozen=True, slots=True)
class Params:
    """What a fabric is made of. ``spines_per_su`` None = as many as the uplinks need."""

    sus: int = 1
    nodes_per_su: int = 32
    rails: int = 8
    radix: int = 64
    core: bool = False
    spines_per_su: int | None = None
    width: str = "4X"
    speed: str = "NDR"
    transport: Literal["ib", "roce"] = "ib"
    fabric: str = "sim"
    name: str = "custom"

    def check(self) -> None:
        if self.sus < 1 or self.nodes_per_su < 1 or self.rails < 1:
            raise TopologyError("sus, nodes_per_su and rails must be at least 1")
        if self.radix < 4 or self.radix % 2 or self.radix > 254:
            raise TopologyError("radix must be even, 4..254")
        if self.nodes_per_su > self.radix // 2:
            raise TopologyError(f"a leaf has {self.radix // 2} node ports (half of radix "
                                f"{self.radix}); nodes_per_su {self.nodes_per_su} is too many")
        if self.width.upper() not in WIDTH_LANES:
            raise TopologyError(f"unknown width {self.width!r}; expected {', '.join(WIDTH_LANES)}")
        if self.speed.upper() not in LANE_GBPS:
            raise TopologyError(f"unknown speed {self.speed!r}; expected {', '.join(LANE_GBPS)}")
        if self.sus > 1 and not self.core:
            raise TopologyError("more than one SU needs the core tier (core=True)")
        spines = self.spine_count()
        down = self.radix // 2 if self.core else self.radix
        if spines < 1 or math.ceil(self.rails * self.nodes_per_su / spines) > down:
            raise TopologyError(f"{spines} spines per SU cannot take {self.rails} leaves x "
                                f"{self.nodes_per_su} uplinks with {down} down ports each")

    def spine_count(self) -> int:
        if self.spines_per_su is not None:
            return self.spines_per_su
        down = self.radix // 2 if self.core else self.radix
        return max(1, math.ceil(self.rails * self.nodes_per_su / down))

    @property
    def lane_gbps(self) -> float:
        return LANE_GBPS[self.speed.upper()]

    @property
    def line_gbps(self) -> float:
        return LANE_GBPS[self.speed.upper()] * WIDTH_LANES[self.width.upper()]


PRESETS: dict[str, Params] = {
    "lab": Params(sus=1, nodes_per_su=4, rails=4, spines_per_su=2, name="lab", fabric="lab"),
    "su": Params(sus=1, nodes_per_su=32, rails=8, name="su", fabric="su"),
    # 39 SUs x 32 nodes = 1,248 nodes, 9,984 GPUs.
    "10k-gpu": Params(sus=39, nodes_per_su=32, rails=8, core=True, name="10k-gpu",
                      fabric="10k-gpu"),
    # 7 SUs: 1,792 HCA + 3,584 leaf + 3,584 spine + 1,792 core = 10,752 ports (the soak's).
    "10k-port": Params(sus=7, nodes_per_su=32, rails=8, core=True, name="10k-port",
                       fabric="10k-port"),
    # 66 SUs: 16,896 HCA + 33,792 leaf + 33,792 spine + 16,896 core ports = 101,376.
    "100k-port": Params(sus=66, nodes_per_su=32, rails=8, core=True, name="100k-port",
                        fabric="100k-port"),
}


@dataclass(frozen=True, slots=True)
class Switch:
    name: str
    tier: Tier
    su: int | None  # None for core switches, which serve every SU
    index: int  # rail for leaves, spine number in the SU, core number in its group
    group: int | None  # the spine index a core switch serves
    guid: int
    lid: int
    ports: int

    @property
    def description(self) -> str:
        return f"MF0;{self.name}:{SWITCH_MODEL}/U1"


@dataclass(frozen=True, slots=True)
class Hca:
    device: str  # node0042/mlx5_3
    node: str
    rail: int
    su: int
    guid: int
    lid: int

    @property
    def port_guid(self) -> int:
        # What ibsim assigns too (port GUID = node GUID + port), so a discovery through
        # ibsim reproduces this file.
        return self.guid + 1

    @property
    def description(self) -> str:
        return f"{self.node} mlx5_{self.rail}"


@dataclass(frozen=True, slots=True)
class Link:
    """One cable. ``a`` is the lower tier (HCA, leaf, spine), ``b`` the upper one."""

    a_device: str
    a_port: int
    b_device: str
    b_port: int
    tier: LinkTier
    su: int | None
    rail: int | None  # None on spine-core links, which carry every rail
    cable_id: str
    width: str
    speed: str

    @property
    def key(self) -> tuple[str, int, str, int]:
        return (self.a_device, self.a_port, self.b_device, self.b_port)

    def ends(self) -> tuple[tuple[str, int], tuple[str, int]]:
        return (self.a_device, self.a_port), (self.b_device, self.b_port)

    def other_end(self, device: str, port: int) -> tuple[str, int]:
        if (device, port) == (self.a_device, self.a_port):
            return self.b_device, self.b_port
        return self.a_device, self.a_port


@dataclass(frozen=True, slots=True)
class PortRef:
    """One port of the fabric and what it connects to."""

    device: str
    port: int
    link: Link
    peer_device: str
    peer_port: int
    su: int | None
    rail: int | None


class TopologyFault(Protocol):
    """A fault that changes what discovery sees (swaps, missing links, degraded training)."""

    def apply_to_links(self, links: list[Link], fabric: Fabric) -> list[Link]: ...


@dataclass
class Fabric:
    """The generated fabric: nodes, switches, HCAs and links, with lookups."""

    params: Params
    nodes: list[str]
    switches: list[Switch]
    hcas: list[Hca]
    links: list[Link]
    _devices: dict[str, Switch | Hca] = field(default_factory=dict, repr=False)
    _by_port: dict[tuple[str, int], Link] = field(default_factory=dict, repr=False)
    _device_ports: dict[str, list[int]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._devices = {s.name: s for s in self.switches}
        self._devices.update({h.device: h for h in self.hcas})
        for link in self.links:
            for end in link.ends():
                if end in self._by_port:
                    raise TopologyError(f"port {end[0]}:{end[1]} is cabled twice")
                self._by_port[end] = link
        ports: dict[str, list[int]] = {}
        for device, port in self._by_port:
            ports.setdefault(device, []).append(port)
        self._device_ports = {d: sorted(p) for d, p in ports.items()}

    @property
    def fabric(self) -> str:
        return self.params.fabric

    # -- lookups ---------------------------------------------------------------------------

    def device(self, name: str) -> Switch | Hca:
        try:
            return self._devices[name]
        except KeyError:
            raise TopologyError(f"no device {name!r} in fabric {self.fabric!r}") from None

    def has_device(self, name: str) -> bool:
        return name in self._devices

    def devices(self) -> list[str]:
        """Every device with a cabled port: switches (leaf, spine, core), then HCAs."""
        return [s.name for s in self.switches] + [h.device for h in self.hcas]

    def device_ports(self, device: str) -> list[int]:
        return self._device_ports.get(device, [])

    def link_at(self, device: str, port: int) -> Link | None:
        return self._by_port.get((device, port))

    def require_link(self, device: str, port: int) -> Link:
        link = self._by_port.get((device, port))
        if link is None:
            self.device(device)  # a clear error for an unknown device
            raise TopologyError(f"{device}:{port} is not cabled in fabric {self.fabric!r}")
        return link

    def ports(self) -> Iterator[PortRef]:
        """Every cabled port, device by device (switches, then HCAs), ports ascending."""
        for device in self.devices():
            for port in self._device_ports.get(device, ()):
                link = self._by_port[(device, port)]
                peer, peer_port = link.other_end(device, port)
                yield PortRef(device, port, link, peer, peer_port, self.su_of(device),
                              self.rail_of(device, port))

    def port_count(self) -> int:
        return len(self._by_port)

    def su_of(self, device: str) -> int | None:
        """The SU a device belongs to; None for a core switch, which serves all SUs."""
        return self.device(device).su

    def rail_of(self, device: str, port: int) -> int | None:
        """The rail a port carries; None for spine-core ports, which carry every rail."""
        dev = self.device(device)
        if isinstance(dev, Hca):
            return dev.rail
        if dev.tier == "leaf":
            return dev.index
        link = self._by_port.get((device, port))
        return link.rail if link is not None else None

    def hca(self, node: str, rail: int) -> Hca:
        dev = self.device(f"{node}/mlx5_{rail}")
        if not isinstance(dev, Hca):
            raise TopologyError(f"{node}/mlx5_{rail} is not an HCA")
        return dev

    def leaf(self, su: int, rail: int) -> Switch:
        dev = self.device(leaf_name(su, rail, self._su_digits()))
        if not isinstance(dev, Switch):
            raise TopologyError(f"leaf of SU {su} rail {rail} is not a switch")
        return dev

    def nodes_of_su(self, su: int) -> list[str]:
        n = self.params.nodes_per_su
        return self.nodes[(su - 1) * n: su * n]

    def _su_digits(self) -> int:
        return max(2, len(str(self.params.sus)))

    # -- output ----------------------------------------------------------------------------

    def to_plan_csv(self) -> str:
        """The cable plan: ``a_device,a_port,b_device,b_port,cable_id``, one cable a line."""
        out = ["a_device,a_port,b_device,b_port,cable_id"]
        out.extend(f"{x.a_device},{x.a_port},{x.b_device},{x.b_port},{x.cable_id}"
                   for x in self.links)
        return "\n".join(out) + "\n"

    def to_ibnetdiscover(self, links: Sequence[Link] | None = None, *,
                         generated: datetime = DEFAULT_GENERATED) -> str:
        """The fabric (or ``links`` of it, as discovered) in ibnetdiscover's default format."""
        use = self.links if links is None else links
        peers: dict[tuple[str, int], tuple[str, int, Link]] = {}
        for link in use:
            peers[(link.a_device, link.a_port)] = (link.b_device, link.b_port, link)
            peers[(link.b_device, link.b_port)] = (link.a_device, link.a_port, link)
        first = self.hcas[0] if self.hcas else None
        out = ["#", f"# Topology file: generated on {_ctime(generated)}", "#"]
        if first is not None:
            out.append(f"# Initiated from node {first.guid:016x} port {first.port_guid:016x}")
        out.append("")
        for sw in self.switches:
            out += [f"vendid=0x{VENDOR_ID:x}", f"devid=0x{SWITCH_DEVID:x}",
                    f"sysimgguid=0x{sw.guid:x}", f"switchguid=0x{sw.guid:x}({sw.guid:x})",
                    f'Switch\t{sw.ports} "S-{sw.guid:016x}"\t\t# "{sw.description}" '
                    f"enhanced port 0 lid {sw.lid} lmc 0"]
            for port in range(1, sw.ports + 1):
                peer = peers.get((sw.name, port))
                if peer is None:
                    continue
                pdev, pport, link = peer
                rate = _rate(link)
                other = self._devices[pdev]
                if isinstance(other, Hca):
                    out.append(f'[{port}]\t"H-{other.guid:016x}"[{pport}]({other.port_guid:x}) '
                               f'\t\t# "{other.description}" lid {other.lid} {rate}')
                else:
                    out.append(f'[{port}]\t"S-{other.guid:016x}"[{pport}]'
                               f'\t\t# "{other.description}" lid {other.lid} {rate}')
            out.append("")
        for hca in self.hcas:
            out += [f"vendid=0x{VENDOR_ID:x}", f"devid=0x{HCA_DEVID:x}",
                    f"sysimgguid=0x{hca.guid:x}", f"caguid=0x{hca.guid:x}",
                    f'Ca\t1 "H-{hca.guid:016x}"\t\t# "{hca.description}"']
            peer = peers.get((hca.device, 1))
            if peer is not None:
                pdev, pport, link = peer
                up = self._devices[pdev]
                out.append(f'[1]({hca.port_guid:x}) \t"S-{up.guid:016x}"[{pport}]'
                           f'\t\t# lid {hca.lid} lmc 0 "{up.description}" lid {up.lid} '
                           f"{_rate(link)}")
            out.append("")
        return "\n".join(out)

    def discovered_links(self, faults: Iterable[TopologyFault] = ()) -> list[Link]:
        """The links as discovery would see them with ``faults`` applied (all of them)."""
        links = list(self.links)
        for fault in faults:
            links = fault.apply_to_links(links, self)
        return links

    def discovered(self, faults: Iterable[TopologyFault] = ()) -> str:
        """ibnetdiscover output of the fabric with the topology faults injected."""
        return self.to_ibnetdiscover(self.discovered_links(faults))

    def topology_links(self, links: Sequence[Link] | None = None) -> list[dict[str, object]]:
        """Links as contract dicts, oriented the way the collectors' parser orients them."""
        use = self.links if links is None else links
        rows = []
        for x in use:
            a, ap, b, bp = x.a_device, x.a_port, x.b_device, x.b_port
            a_is_switch = isinstance(self._devices[a], Switch)
            b_is_switch = isinstance(self._devices[b], Switch)
            if (b_is_switch and not a_is_switch) or (
                    a_is_switch == b_is_switch and (b, bp) < (a, ap)):
                a, ap, b, bp = b, bp, a, ap
            rows.append({"a_device": a, "a_port": ap, "b_device": b, "b_port": bp,
                         "width": x.width, "speed": x.speed})
        rows.sort(key=lambda r: (r["a_device"], r["a_port"], r["b_device"], r["b_port"]))
        return rows

    def to_topology(self, ts: int, links: Sequence[Link] | None = None, *,
                    source: str = "sim") -> Topology:
        """A ``topology`` event of the fabric (or of ``links`` as discovered)."""
        rows = self.topology_links(links)
        digest = _digest("|".join(f"{r['a_device']}:{r['a_port']}-{r['b_device']}:"
                                  f"{r['b_port']}/{r['width']}{r['speed']}" for r in rows))
        return Topology(id=f"sim:{self.fabric}:topology:{ts}:{digest}", ts=ts,
                        fabric=self.fabric, source=source,
                        links=[TopologyLink.model_validate(r) for r in rows])


def _digest(text: str) -> str:
    import hashlib

    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def _rate(link: Link) -> str:
    # ibnetdiscover prints width and speed joined: 4xNDR, 2xNDR, 4xHDR.
    return f"{WIDTH_LANES.get(link.width.upper(), 4)}x{link.speed.upper()}"


def _ctime(when: datetime) -> str:
    # ctime(3) layout, as ibnetdiscover prints it: "Wed Aug  6 16:11:23 2025".
    return when.strftime("%a %b ") + f"{when.day:2d}" + when.strftime(" %H:%M:%S %Y")


def leaf_name(su: int, rail: int, su_digits: int = 2) -> str:
    return f"leaf-su{su:0{su_digits}d}-r{rail}"


def spine_name(su: int, index: int, su_digits: int = 2) -> str:
    return f"spine-su{su:0{su_digits}d}-s{index}"


def core_name(group: int, index: int) -> str:
    return f"core-g{group}-c{index:02d}"


def node_name(index: int, digits: int = 4) -> str:
    return f"node{index:0{digits}d}"


def resolve_params(preset: str | Params) -> Params:
    if isinstance(preset, Params):
        return preset
    try:
        return PRESETS[preset]
    except KeyError:
        raise TopologyError(f"unknown preset {preset!r}; expected one of "
                            f"{', '.join(PRESETS)}") from None


def generate(preset: str | Params) -> Fabric:
    """Build the fabric of a preset name (``lab``, ``su``, ``10k-gpu``, ``100k-port``) or Params."""
    params = resolve_params(preset)
    params.check()
    sd = max(2, len(str(params.sus)))
    nd = max(4, len(str(params.sus * params.nodes_per_su)))
    spines = params.spine_count()
    leaf_up = params.nodes_per_su  # 1:1
    spine_up = params.radix // 2 if params.core else 0

    switches: list[Switch] = []
    lid = 1

    def add_switch(name: str, tier: Tier, su: int | None, index: int,
                   group: int | None) -> Switch:
        nonlocal lid
        sw = Switch(name, tier, su, index, group,
                    SWITCH_GUID_BASE + ((len(switches) + 1) << 8), lid, params.radix)
        lid += 1
        switches.append(sw)
        return sw

    leaves = {(su, r): add_switch(leaf_name(su, r, sd), "leaf", su, r, None)
              for su in range(1, params.sus + 1) for r in range(params.rails)}
    spine_sw = {(su, j): add_switch(spine_name(su, j, sd), "spine", su, j, None)
                for su in range(1, params.sus + 1) for j in range(1, spines + 1)}
    cores: dict[tuple[int, int], Switch] = {}
    per_group = 0
    if params.core:
        per_group = math.ceil(params.sus * spine_up / params.radix)
        for j in range(1, spines + 1):
            for c in range(1, per_group + 1):
                cores[(j, c)] = add_switch(core_name(j, c), "core", None, c, j)

    nodes: list[str] = []
    hcas: list[Hca] = []
    links: list[Link] = []
    w, s = params.width.upper(), params.speed.upper()

    def cable(a: str, ap: int, b: str, bp: int, tier: LinkTier, su: int | None,
              rail: int | None) -> None:
        links.append(Link(a, ap, b, bp, tier, su, rail, f"CBL-{len(links) + 1:06d}", w, s))

    for su in range(1, params.sus + 1):
        for i in range(1, params.nodes_per_su + 1):
            node = node_name((su - 1) * params.nodes_per_su + i, nd)
            nodes.append(node)
            for r in range(params.rails):
                hca = Hca(f"{node}/mlx5_{r}", node, r, su,
                          HCA_GUID_BASE + ((len(hcas) + 1) << 4), lid)
                lid += 1
                hcas.append(hca)
                cable(hca.device, 1, leaves[(su, r)].name, i, "host", su, r)
    if lid > 0xBFFF:
        raise TopologyError(f"{lid - 1} LIDs exceed the unicast LID space (49,151)")

    # Leaf uplinks, round robin over the SU's spines (uplink u of leaf r to spine
    # (r*U + u) mod S + 1); each spine fills its down ports in leaf order, so every leaf
    # gets the same share of every spine whenever the numbers divide.
    spine_next = {key: 1 for key in spine_sw}
    for su in range(1, params.sus + 1):
        for r in range(params.rails):
            leaf = leaves[(su, r)]
            for u in range(leaf_up):
                j = (r * leaf_up + u) % spines + 1
                sp = spine_sw[(su, j)]
                cable(leaf.name, params.nodes_per_su + 1 + u, sp.name, spine_next[(su, j)],
                      "leaf-spine", su, r)
                spine_next[(su, j)] += 1
    # Spine uplinks: spine j of SU s, uplink u -> slot g = u * sus + (s-1) of core group j;
    # striping by SU first spreads each spine across the group's cores.
    if params.core:
        for su in range(1, params.sus + 1):
            for j in range(1, spines + 1):
                sp = spine_sw[(su, j)]
                for u in range(spine_up):
                    g = u * params.sus + (su - 1)
                    core = cores[(j, g // params.radix + 1)]
                    cable(sp.name, params.radix // 2 + 1 + u, core.name, g % params.radix + 1,
                          "spine-core", su, None)
    return Fabric(params, nodes, switches, hcas, links)


def degrade(link: Link, *, width: str | None = None, speed: str | None = None) -> Link:
    """The same cable trained at a lower width and/or speed."""
    return replace(link, width=(width or link.width).upper(), speed=(speed or link.speed).upper())
