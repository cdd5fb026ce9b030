"""Where a port sits: SU, rail, node, the other cable end, LID and GUID, and how many ports
each SU and the fabric have (the isolation budget's denominators).

Built from a ``Topology`` snapshot (its ``links``, and the ``nodes`` list the ibnetdiscover
collector adds with GUIDs and LIDs). Rail-optimized naming is the fallback: a leaf named
``leaf-su01-r3`` serves rail 3 of SU ``su01``; a host HCA ``node0042/mlx5_3`` is on rail 3 and
in the SU of the leaf it is cabled to. A spine port counts towards the SU of the leaf at its
other end (a spine reboot then trips the breaker of every SU it touches, not one big one).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from schemas.events import Topology
from schemas.policy import IsolateEnd
from workflows.remediation.models import PortRef

_SU = re.compile(r"(?:^|[-_.])(su\d+)(?:[-_.]|$)", re.IGNORECASE)
_RAIL = re.compile(r"(?:^|[-_.])(?:r|rail)(\d+)$", re.IGNORECASE)
_HCA = re.compile(r"^(?P<host>[^/]+)/(?:mlx5_|hca|ib|nic)(?P<rail>\d+)$", re.IGNORECASE)
UNKNOWN_SU = "unknown"
# Switch tiers by name: a leaf (ToR) is below a spine, a spine below a core / super-spine.
_TIERS = (("leaf", 1), ("tor", 1), ("spine", 2), ("core", 3), ("super", 3))


def su_from_name(device: str) -> str | None:
    m = _SU.search(device)
    return m.group(1).lower() if m else None


def rail_from_name(device: str) -> int | None:
    hca = _HCA.match(device)
    if hca:
        return int(hca.group("rail"))
    m = _RAIL.search(device)
    return int(m.group(1)) if m else None


def host_of(device: str) -> str | None:
    hca = _HCA.match(device)
    if hca:
        return hca.group("host")
    return device.split("/", 1)[0] if "/" in device else None


def tier_of(device: str) -> int | None:
    """0 for a host HCA, 1 leaf, 2 spine, 3 core; None when the name does not say."""
    if host_of(device) is not None:
        return 0
    name = device.lower()
    for word, tier in _TIERS:
        if word in name:
            return tier
    return None


def isolated_end(a: tuple[str, int], b: tuple[str, int], rule: IsolateEnd) -> tuple[str, int]:
    """The end of cable a-b the runbook isolates: the switch port of a host link (or the host
    port), the lower (or upper) tier end of a switch link; ``a`` when the names do not say."""
    ta, tb = tier_of(a[0]), tier_of(b[0])
    if ta is None or tb is None or ta == tb:
        return a
    if 0 in (ta, tb):  # a host link
        host, switch = (a, b) if ta == 0 else (b, a)
        return switch if rule.host_link == "switch" else host
    lower, upper = (a, b) if ta < tb else (b, a)
    return lower if rule.switch_link == "lower" else upper


@dataclass
class Inventory:
    """The fabric as the dispatcher knows it; ``load`` replaces it with a newer snapshot."""

    fabric: str | None = None
    peers: dict[tuple[str, int], tuple[str, int]] = field(default_factory=dict)
    guids: dict[str, str] = field(default_factory=dict)  # device -> 0x GUID
    lids: dict[tuple[str, int], int] = field(default_factory=dict)
    su_of_device: dict[str, str] = field(default_factory=dict)
    su_port_counts: dict[str, int] = field(default_factory=dict)
    total_ports: int = 0
    default_su_ports: int = 100  # before any topology: 1 % of this is 1 port per SU
    snapshot_ts: int | None = None
    # Every port any snapshot of a fabric has cabled, since this process started. A port
    # stays known when a later snapshot misses it: a flapping or isolated port drops out of
    # discovery, and is exactly the one a runbook must still reach.
    known: dict[str, set[tuple[str, int]]] = field(default_factory=dict)
    # The newest peer any snapshot of a fabric saw for each port, with that snapshot's time:
    # a flapping link is often down while the fabric is discovered, and its runbook must still
    # be the cable's (both ends, one workflow), not one per end.
    last_peer: dict[str, dict[tuple[str, int], tuple[tuple[str, int], int]]] = field(
        default_factory=dict)

    def load(self, topo: Topology) -> None:
        seen = self.known.setdefault(topo.fabric, set())
        last = self.last_peer.setdefault(topo.fabric, {})
        for link in topo.links:
            a, b = (link.a_device, link.a_port), (link.b_device, link.b_port)
            seen.add(a)
            seen.add(b)
            for end, other in ((a, b), (b, a)):
                if end not in last or last[end][1] <= topo.ts:
                    last[end] = (other, topo.ts)
        if self.snapshot_ts is not None and topo.ts < self.snapshot_ts:
            return  # an older snapshot read late
        peers: dict[tuple[str, int], tuple[str, int]] = {}
        for link in topo.links:
            a, b = (link.a_device, link.a_port), (link.b_device, link.b_port)
            peers[a] = b
            peers[b] = a
        guids: dict[str, str] = {}
        lids: dict[tuple[str, int], int] = {}
        nodes = (topo.model_extra or {}).get("nodes")
        for node in nodes if isinstance(nodes, list) else []:
            if not isinstance(node, dict) or not isinstance(node.get("name"), str):
                continue
            name = node["name"]
            if isinstance(node.get("guid"), str):
                guids[name] = node["guid"]
            node_lids = node.get("lids")
            if isinstance(node_lids, dict):
                for port_text, lid in node_lids.items():
                    if isinstance(lid, int) and str(port_text).isdigit():
                        lids[(name, int(port_text))] = lid
        devices = {d for d, _ in peers}
        su_of: dict[str, str] = {}
        for device in devices:
            su = su_from_name(device)
            if su:
                su_of[device] = su
        # hosts and spines take the SU of a neighbour that has one (a leaf)
        for (device, _port), (peer, _pport) in peers.items():
            if device not in su_of and peer in su_of:
                su_of[device] = su_of[peer]
        counts: dict[str, int] = {}
        for (device, port) in peers:
            su = self._su_for(device, port, su_of, peers)
            counts[su] = counts.get(su, 0) + 1
        self.fabric = topo.fabric
        self.peers, self.guids, self.lids = peers, guids, lids
        self.su_of_device, self.su_port_counts = su_of, counts
        self.total_ports = len(peers)
        self.snapshot_ts = topo.ts

    @staticmethod
    def _su_for(device: str, port: int, su_of: dict[str, str],
                peers: dict[tuple[str, int], tuple[str, int]]) -> str:
        own = su_from_name(device)
        if own:
            return own
        peer = peers.get((device, port))
        if peer is not None and peer[0] in su_of:
            return su_of[peer[0]]
        return su_of.get(device, UNKNOWN_SU)

    def has_port(self, device: str, port: int) -> bool | None:
        """Whether the topology has ``device:port`` cabled; None before any topology."""
        if self.snapshot_ts is None:
            return None
        return (device, port) in self.peers or (
            self.fabric is not None and (device, port) in self.known.get(self.fabric, ()))

    def knows(self, fabric: str, device: str, port: int) -> bool | None:
        """Whether any snapshot of ``fabric`` cabled ``device:port``; None while none of that
        fabric has been seen (nothing can be said, so nothing may act)."""
        ports = self.known.get(fabric)
        if ports is None:
            return None
        return (device, port) in ports

    def peer_of(self, device: str, port: int) -> tuple[str, int] | None:
        """The other end of ``device:port``: from the newest snapshot, else the newest one that
        had the link, unless the newest snapshot shows either end cabled elsewhere (recabled)."""
        end = (device, port)
        peer = self.peers.get(end)
        if peer is not None or self.fabric is None:
            return peer
        got = self.last_peer.get(self.fabric, {}).get(end)
        if got is None:
            return None
        other = got[0]
        if self.peers.get(other, end) != end:
            return None  # the far end is cabled to another port now
        return other

    def su_of(self, device: str, port: int) -> str:
        return self._su_for(device, port, self.su_of_device, self.peers)

    def su_ports(self, su: str) -> int:
        return self.su_port_counts.get(su, self.default_su_ports)

    def fabric_ports(self) -> int:
        return self.total_ports or sum(self.su_port_counts.values()) or self.default_su_ports

    def port_ref(self, fabric: str, device: str, port: int) -> PortRef:
        peer = self.peer_of(device, port)
        # The node whose rail this port serves: the host itself, or the host at the other end.
        node = host_of(device) or (host_of(peer[0]) if peer else None)
        rail = rail_from_name(device)
        if rail is None and peer is not None:
            rail = rail_from_name(peer[0])
        lid = self.lids.get((device, port)) or self.lids.get((device, 0))
        return PortRef(fabric=fabric, device=device, port=port, su=self.su_of(device, port),
                       rail=rail, node=node, peer_device=peer[0] if peer else None,
                       peer_port=peer[1] if peer else None, lid=lid, guid=self.guids.get(device))

    def cable(self, fabric: str, device: str, port: int, rule: IsolateEnd | None = None
              ) -> tuple[PortRef, PortRef | None]:
        """The cable of a detected port: (the end to isolate, the other end or None).

        Both ends are placed (SU, rail, node, GUID, LID) the same way ``port_ref`` places one;
        the budget is counted in the SU of the isolated end.
        """
        seen = (device, port)
        peer = self.peer_of(device, port)
        if peer is None:
            return self.port_ref(fabric, device, port), None
        target = isolated_end(seen, peer, rule or IsolateEnd())
        other = peer if target == seen else seen
        return self.port_ref(fabric, *target), self.port_ref(fabric, *other)
