"""The links a job's traffic crosses, and the jobs a link carries. Pure: no I/O, no clock.

A GPU job on a rail-optimized fabric talks rail to rail: NIC ``k`` of every node exchanges
with NIC ``k`` of the others (NCCL's rings and trees are rail-aligned). So, for each rail
``k`` of the job, the NICs on that rail sit under some leaves: when all sit under one leaf
the rail's traffic stays on that leaf (two hops: NIC-leaf-NIC); when they sit under several
it crosses the switches that join those leaves along every shortest path (ECMP), which is
the spine tier within an SU and spine-core-spine across SUs. A miswired cable that puts one
of the job's NICs on another rail's leaf therefore shows as an extra leaf on that rail: an
extra hop, and uplinks the rail did not use before.

How much of the job depends on a link (``share``): the job's flows are the ordered pairs of
its NICs on the same rail on different nodes, one unit each; a flow is split evenly over
its shortest paths, cable by cable. A link's share is the traffic that crosses it over all
flows (a NIC's own cable carries every flow from and to it). It ranks links by how much of
a synchronous job waits on them; it is a model, not a measurement.

Nothing here needs the switches to be named by tier: a leaf is a switch with HCAs cabled to
it, a leaf's rail is the NIC index most of its HCAs have, a spine is a switch cabled to a
leaf, and the rest are core. HCAs are named ``HOST/HCA`` (``node0042/mlx5_3``), the NIC
index being the HCA name's trailing number (the collectors' naming rule).
"""

from __future__ import annotations

import re
from collections import Counter, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from schemas import JobPlacement, Topology

End = tuple[str, int]
_NIC_INDEX = re.compile(r"(\d+)$")
# Scheduler states in which a job holds its nodes (Slurm's and the Kubernetes reader's words).
ACTIVE_STATES = frozenset({"running", "completing", "configuring", "suspended", "stage_out",
                           "resizing", "signaling"})


def end_text(end: End) -> str:
    return f"{end[0]}:{end[1]}"


def cable_key(a: End, b: End) -> str:
    """The unordered identity of a cable: its two ends, sorted (as the topology diff names it)."""
    x, y = (a, b) if a <= b else (b, a)
    return f"{end_text(x)}<->{end_text(y)}"


def nic_index(hca: str) -> int | None:
    """The NIC index of ``HOST/HCA`` (mlx5_3 -> 3), the rail it is meant for."""
    if "/" not in hca:
        return None
    m = _NIC_INDEX.search(hca.rsplit("/", 1)[1])
    return int(m.group(1)) if m else None


@dataclass(frozen=True, slots=True)
class Cable:
    a: End
    b: End
    tier: str  # host | leaf-spine | spine-core | switch

    @property
    def key(self) -> str:
        return cable_key(self.a, self.b)

    def touches(self, device: str, port: int | None = None) -> bool:
        return any(d == device and (port is None or p == port) for d, p in (self.a, self.b))


@dataclass
class FabricMap:
    """A discovered topology as the graph path questions need."""

    cables: list[Cable]
    by_end: dict[End, Cable]
    node_hcas: dict[str, list[str]]  # host -> its HCAs (cabled ones), sorted
    hca_leaf: dict[str, tuple[str, Cable]]  # HCA -> (the switch it is cabled to, the cable)
    leaf_rail: dict[str, int | None]
    tier: dict[str, str]  # switch -> leaf | spine | core
    adj: dict[str, dict[str, list[Cable]]]  # switch -> neighbour switch -> cables
    _bfs: dict[str, tuple[dict[str, int], dict[str, int], list[str]]] = field(
        default_factory=dict, repr=False)

    @classmethod
    def from_links(cls, links: Iterable[tuple[str, int, str, int]]) -> FabricMap:
        """From ``(a_device, a_port, b_device, b_port)`` links; a port seen twice keeps its
        first link (a snapshot lists each cable once)."""
        raw: list[tuple[End, End]] = []
        used: set[End] = set()
        for a_dev, a_port, b_dev, b_port in links:
            a, b = (a_dev, a_port), (b_dev, b_port)
            if a in used or b in used or a == b:
                continue
            used.update((a, b))
            raw.append((a, b))
        hca_leaf_dev: dict[str, str] = {}
        leaves: set[str] = set()
        switch_links: list[tuple[End, End]] = []
        host_links: list[tuple[End, End]] = []
        for a, b in raw:
            a_hca, b_hca = "/" in a[0], "/" in b[0]
            if a_hca == b_hca:
                if not a_hca:
                    switch_links.append((a, b))
                continue  # host-host back to back: no fabric path to speak of
            hca, sw = (a, b) if a_hca else (b, a)
            host_links.append((hca, sw))
            hca_leaf_dev[hca[0]] = sw[0]
            leaves.add(sw[0])
        spines = {d for a, b in switch_links for d, o in ((a[0], b[0]), (b[0], a[0]))
                  if o in leaves and d not in leaves}
        tier: dict[str, str] = {}
        for a, b in switch_links:
            for dev in (a[0], b[0]):
                tier[dev] = "leaf" if dev in leaves else "spine" if dev in spines else "core"
        for leaf in leaves:
            tier[leaf] = "leaf"
        cables: list[Cable] = []
        by_end: dict[End, Cable] = {}
        hca_leaf: dict[str, tuple[str, Cable]] = {}
        node_hcas: dict[str, list[str]] = {}
        for hca, sw in host_links:
            cable = Cable(hca, sw, "host")
            cables.append(cable)
            hca_leaf[hca[0]] = (sw[0], cable)
            node_hcas.setdefault(hca[0].split("/", 1)[0], []).append(hca[0])
        adj: dict[str, dict[str, list[Cable]]] = {}
        for a, b in switch_links:
            pair = {tier[a[0]], tier[b[0]]}
            kind = ("leaf-spine" if pair == {"leaf", "spine"} else
                    "spine-core" if pair == {"spine", "core"} else "switch")
            cable = Cable(a, b, kind)
            cables.append(cable)
            adj.setdefault(a[0], {}).setdefault(b[0], []).append(cable)
            adj.setdefault(b[0], {}).setdefault(a[0], []).append(cable)
        for cable in cables:
            by_end[cable.a] = cable
            by_end[cable.b] = cable
        indices: dict[str, Counter[int]] = {}
        for hca_name, leaf in hca_leaf_dev.items():
            k = nic_index(hca_name)
            if k is not None:
                indices.setdefault(leaf, Counter())[k] += 1
        leaf_rail: dict[str, int | None] = {}
        for leaf in leaves:
            counts = indices.get(leaf)
            leaf_rail[leaf] = counts.most_common(1)[0][0] if counts else None
        for hcas in node_hcas.values():
            hcas.sort(key=lambda h: (nic_index(h) is None, nic_index(h) or 0, h))
        return cls(cables, by_end, node_hcas, hca_leaf, leaf_rail, tier, adj)

    @classmethod
    def from_topology(cls, topology: Topology) -> FabricMap:
        return cls.from_links((x.a_device, x.a_port, x.b_device, x.b_port)
                              for x in topology.links)

    def cable_at(self, device: str, port: int) -> Cable | None:
        return self.by_end.get((device, port))

    def bfs(self, source: str) -> tuple[dict[str, int], dict[str, int], list[str]]:
        """Hop distance and number of shortest cable-paths from ``source`` over switches,
        and the switches in the order reached (cached: a job asks for each leaf often)."""
        cached = self._bfs.get(source)
        if cached is not None:
            return cached
        dist = {source: 0}
        sigma = {source: 1}
        order = [source]
        queue = deque([source])
        while queue:
            u = queue.popleft()
            for v, parallel in self.adj.get(u, {}).items():
                if v not in dist:
                    dist[v] = dist[u] + 1
                    sigma[v] = 0
                    order.append(v)
                    queue.append(v)
                if dist[v] == dist[u] + 1:
                    sigma[v] += sigma[u] * len(parallel)
        result = (dist, sigma, order)
        self._bfs[source] = result
        return result

    def between(self, x: str, y: str) -> tuple[int, dict[Cable, float]] | None:
        """Hops from switch ``x`` to ``y`` and each cable's fraction of the x->y traffic
        spread evenly over every shortest path; None when they are not connected."""
        dx, sx, order = self.bfs(x)
        dy, sy, _ = self.bfs(y)
        hops = dx.get(y)
        if hops is None:
            return None
        total = sx[y]
        out: dict[Cable, float] = {}
        for u in order:
            du = dx[u]
            if du >= hops:
                break
            for v, parallel in self.adj.get(u, {}).items():
                dv = dy.get(v)
                if dv is None or du + 1 + dv != hops:
                    continue
                frac = sx[u] * sy[v] / total
                for cable in parallel:
                    out[cable] = out.get(cable, 0.0) + frac
        return hops, out


def merge_links(latest: Sequence[tuple[str, int, str, int]],
                earlier: Iterable[tuple[str, int, str, int]]) -> list[tuple[str, int, str, int]]:
    """The latest snapshot's links, plus earlier links whose two ends it does not cable.

    An isolated or pulled cable is absent from discovery; the jobs it carried crossed it all
    the same, so path questions about a time window use the fabric as it was cabled.
    """
    used = {end for a, ap, b, bp in latest for end in ((a, ap), (b, bp))}
    out = list(latest)
    for a, ap, b, bp in earlier:
        if (a, ap) not in used and (b, bp) not in used:
            out.append((a, ap, b, bp))
            used.update(((a, ap), (b, bp)))
    return out


@dataclass(frozen=True, slots=True)
class JobLink:
    """One cable on a job's paths, with the share of the job's traffic that crosses it."""

    cable: Cable
    share: float
    rails: tuple[int, ...]

    def to_dict(self) -> dict[str, object]:
        return {"link": self.cable.key, "a": end_text(self.cable.a), "b": end_text(self.cable.b),
                "tier": self.cable.tier, "share": round(self.share, 6), "rails": list(self.rails)}


@dataclass(frozen=True, slots=True)
class RailPath:
    """How one rail of a job is laid out: its leaves, the hops its traffic takes, and the
    NICs that sit on another rail's leaf (miswired)."""

    rail: int
    leaves: Mapping[str, int]  # leaf -> the job's NICs of this rail under it
    hops: int  # cables on the longest NIC-to-NIC path of the rail (2 = one leaf)
    off_rail: tuple[str, ...]  # HCAs of this rail cabled to a leaf of another rail

    def to_dict(self) -> dict[str, object]:
        return {"rail": self.rail, "leaves": dict(sorted(self.leaves.items())),
                "hops": self.hops, "off_rail": list(self.off_rail)}


@dataclass(frozen=True, slots=True)
class JobPaths:
    links: tuple[JobLink, ...]  # by share, largest first
    rails: tuple[RailPath, ...]
    missing_nodes: tuple[str, ...]  # nodes of the job with no cabled HCA in the topology

    def ports(self) -> set[End]:
        return {end for link in self.links for end in (link.cable.a, link.cable.b)}

    def link_at(self, device: str, port: int) -> JobLink | None:
        for link in self.links:
            if (device, port) in (link.cable.a, link.cable.b):
                return link
        return None

    def by_port(self) -> dict[End, JobLink]:
        """Each end of each cable on the paths -> its link (for many look-ups)."""
        return {end: link for link in self.links for end in (link.cable.a, link.cable.b)}

    def to_dict(self) -> dict[str, object]:
        return {"links": [x.to_dict() for x in self.links],
                "rails": [r.to_dict() for r in self.rails],
                "missing_nodes": list(self.missing_nodes)}


def job_paths(fabric: FabricMap, nodes: Sequence[str]) -> JobPaths:
    """Every cable the job on ``nodes`` crosses, with its share; see the module docstring."""
    by_rail: dict[int, list[tuple[str, str]]] = {}  # rail -> [(hca, leaf)]
    missing: list[str] = []
    for node in dict.fromkeys(nodes):
        hcas = fabric.node_hcas.get(node)
        if not hcas:
            missing.append(node)
            continue
        for hca in hcas:
            k = nic_index(hca)
            if k is None:
                continue
            by_rail.setdefault(k, []).append((hca, fabric.hca_leaf[hca][0]))
    total_flows = sum(len(nics) * (len(nics) - 1) for nics in by_rail.values())
    load: dict[Cable, float] = {}
    rails_of: dict[Cable, set[int]] = {}
    rail_paths: list[RailPath] = []

    def add(cable: Cable, amount: float, rail: int) -> None:
        load[cable] = load.get(cable, 0.0) + amount
        rails_of.setdefault(cable, set()).add(rail)

    for rail, nics in sorted(by_rail.items()):
        n = len(nics)
        counts = Counter(leaf for _, leaf in nics)
        off = tuple(sorted(h for h, leaf in nics
                           if fabric.leaf_rail.get(leaf) not in (None, rail)))
        hops = 2 if n > 1 else 0
        if n > 1:
            for hca, _leaf in nics:
                add(fabric.hca_leaf[hca][1], 2 * (n - 1), rail)
            leaves = sorted(counts)
            for i, x in enumerate(leaves):
                for y in leaves[i + 1:]:
                    found = fabric.between(x, y)
                    if found is None:
                        continue
                    pair_hops, fractions = found
                    hops = max(hops, pair_hops + 2)
                    flows = 2 * counts[x] * counts[y]
                    for cable, frac in fractions.items():
                        add(cable, flows * frac, rail)
        rail_paths.append(RailPath(rail, dict(counts), hops, off))
    links = tuple(sorted(
        (JobLink(c, amount / total_flows, tuple(sorted(rails_of[c])))
         for c, amount in load.items() if total_flows),
        key=lambda x: (-x.share, x.cable.key)))
    return JobPaths(links, tuple(rail_paths), tuple(missing))


# ---- placements -------------------------------------------------------------------------------


def latest_placements(placements: Iterable[JobPlacement]) -> dict[str, JobPlacement]:
    """Each job's latest placement (by ``ts``, then id): where it runs now."""
    out: dict[str, JobPlacement] = {}
    for p in placements:
        key = f"{p.fabric}\x00{p.job}"
        have = out.get(key)
        if have is None or (p.ts, p.id) > (have.ts, have.id):
            out[key] = p
    return {p.job: p for p in sorted(out.values(), key=lambda p: (p.fabric, p.job))}


def running_at(placement: JobPlacement, at_ms: int) -> bool:
    """Whether the job held its nodes at ``at_ms`` (an active state, within start..end)."""
    if placement.start is not None and at_ms < placement.start:
        return False
    if placement.state in ACTIVE_STATES:
        return True  # a running job past its expected end still runs until told otherwise
    if placement.state == "pending":
        return False
    return placement.end is not None and at_ms < placement.end


def overlaps(placement: JobPlacement, since_ms: int, until_ms: int) -> bool:
    """Whether the job held its nodes at any time in ``[since_ms, until_ms)``."""
    if placement.start is not None and placement.start >= until_ms:
        return False
    if placement.state in ACTIVE_STATES:
        return True
    return placement.end is None or placement.end > since_ms


@dataclass(frozen=True, slots=True)
class TouchedJob:
    job: str
    share: float  # of the job's traffic on the cable
    link: str
    nodes: int
    gpus: int | None

    def to_dict(self) -> dict[str, object]:
        return {"job": self.job, "share": round(self.share, 6), "link": self.link,
                "nodes": self.nodes, "gpus": self.gpus}


def jobs_on_port(fabric: FabricMap, placements: Iterable[JobPlacement], device: str,
                 port: int | None, at_ms: int) -> list[TouchedJob]:
    """The jobs running at ``at_ms`` whose traffic crosses the cable at ``device:port`` (or,
    with ``port`` None, any cable of ``device``: a switch reboot), largest share first.

    What a runbook ticket, an incident page or an operator about to isolate a port asks.
    A port the topology does not cable touches no job: say so rather than guess.
    """
    cables = ([fabric.cable_at(device, port)] if port is not None
              else [c for c in fabric.cables if c.touches(device)])
    targets = [c for c in cables if c is not None]
    if not targets:
        return []
    hosts = {end[0].split("/", 1)[0] for c in targets for end in (c.a, c.b) if "/" in end[0]}
    switch_only = all(c.tier != "host" for c in targets)
    out: list[TouchedJob] = []
    for placement in latest_placements(placements).values():
        if not running_at(placement, at_ms):
            continue
        if not switch_only and hosts and not hosts & set(placement.nodes) \
                and all(c.tier == "host" for c in targets):
            continue  # a host cable carries only the jobs on that host
        paths = job_paths(fabric, placement.nodes)
        best: JobLink | None = None
        share = 0.0
        for c in targets:
            for end in (c.a, c.b):
                hit = paths.link_at(*end)
                if hit is not None and hit.cable == c:
                    share += hit.share
                    if best is None or hit.share > best.share:
                        best = hit
                    break
        if best is not None:
            gpus = (placement.gpus_per_node * len(placement.nodes)
                    if placement.gpus_per_node is not None else None)
            out.append(TouchedJob(placement.job, share, best.cable.key, len(placement.nodes),
                                  gpus))
    out.sort(key=lambda t: (-t.share, t.job))
    return out


# ---- impact: what happened on a job's links --------------------------------------------------


@dataclass(frozen=True, slots=True)
class Episode:
    """Something that happened to a port in a window: a detection episode or an isolation."""

    device: str
    port: int
    kind: str  # the detection kind, or "isolated" for a runbook's done isolate
    episode: str
    first_ms: int
    last_ms: int
    count: int = 1
    severity: str | None = None


@dataclass(frozen=True, slots=True)
class ImpactRow:
    link: JobLink
    episode: Episode

    def to_dict(self) -> dict[str, object]:
        return {**self.link.to_dict(), "port": f"{self.episode.device}:{self.episode.port}",
                "detection": self.episode.kind, "episode": self.episode.episode,
                "severity": self.episode.severity, "first_ms": self.episode.first_ms,
                "last_ms": self.episode.last_ms, "count": self.episode.count}


def held_window(placement: JobPlacement) -> tuple[int | None, int | None]:
    """When the job held its nodes: from its start to its end once it has ended (a running
    job's end is only the scheduler's expectation)."""
    end = None if placement.state in ACTIVE_STATES else placement.end
    return placement.start, end


def job_impact(paths: JobPaths, episodes: Iterable[Episode], *,
               window: tuple[int | None, int | None] = (None, None)) -> list[ImpactRow]:
    """Every episode on a cable of the job's paths while the job ran (``window``, see
    ``held_window``), the cables most of the job depends on first, then the earliest
    episode. An episode on both ends of one cable counts once per end (each end's detector
    saw it)."""
    start, end = window
    rows: list[ImpactRow] = []
    index = paths.by_port()
    for ep in episodes:
        if (start is not None and ep.last_ms < start) or (end is not None and ep.first_ms >= end):
            continue  # before the job started or after it ended: it did not hurt this job
        link = index.get((ep.device, ep.port))
        if link is not None:
            rows.append(ImpactRow(link, ep))
    rows.sort(key=lambda r: (-r.link.share, r.episode.first_ms, r.episode.device,
                             r.episode.port, r.episode.kind))
    return rows
