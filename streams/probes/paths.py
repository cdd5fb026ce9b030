"""Which cables a probe's traffic crosses, from the fabric's topology. Pure: no I/O, no clock.

In a rail-optimized fat tree a probe between two HCAs of one rail goes host -> leaf of that
rail -> (spine -> ... -> spine) -> leaf -> host. Under one leaf it crosses only the two
access cables. Across leaves, the switch hops are spread over every shortest path (ECMP,
or the SM's routes, which the topology does not say): a cable is *known* to be on the
probe's path only when every shortest path crosses it (``FabricMap.between`` gives it the
whole flow), which is always true of the access cables and true of a switch cable only
where the fabric offers no alternative. The other switch cables of the paths are
*possible* only: two slow pairs under the same leaf pair hashed onto one uplink share no
cable that the topology can name, and this module does not guess one.

Only ib_write_bw is routed: an NCCL all-reduce is bounded by its GPUs, NVLink and every
member's host as much as by the fabric, so its slowness stays a lead on its hosts.

A cable is named by its key (``a:p<->b:q``, ends sorted, ``jobpaths.cable_key``); the
port a detection on it is raised on (what the runbook isolates) is the end nearest the
hosts: the switch end of an access cable, the leaf end of a leaf-spine cable, the spine
end of a spine-core cable.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from schemas import Probe, Topology
from streams.topology.jobpaths import Cable, FabricMap, end_text, merge_links

_TIER_ORDER = {"leaf": 0, "spine": 1, "core": 2}
# Fractions are sums of products of path counts; "every path" is 1 up to rounding.
_EVERY_PATH = 1.0 - 1e-9
MAX_CACHED = 65_536  # routes of (src, dst, rail) kept; a fabric probes far fewer pairs


@dataclass(frozen=True, slots=True)
class Route:
    """The cables a probe is known to cross (key, port to act on), and whether some hops of
    its path had alternatives the topology cannot tell apart (``ecmp``)."""

    links: tuple[tuple[str, str], ...]
    ecmp: bool = False


def endpoint(name: str, rail: int) -> tuple[str, int]:
    """The port a probe endpoint names: ``device:port`` as given; a ``device/hca`` name is
    port 1; a bare host name is its HCA on the probe's rail, ``{host}/mlx5_{rail}`` port 1
    (the simulator's and the usual rail-optimised naming)."""
    device, sep, port = name.rpartition(":")
    if sep and port.isdigit():
        return device, int(port)
    if "/" in name:
        return name, 1
    return f"{name}/mlx5_{rail}", 1


class ProbeRoutes:
    """Probe routes over one fabric's cabling; call it with a probe (``PathFn``)."""

    def __init__(self, fabric: FabricMap) -> None:
        self.fabric = fabric
        self._cache: dict[tuple[str, str, str, int], Route | None] = {}

    @classmethod
    def from_links(cls, links: Iterable[tuple[str, int, str, int]]) -> ProbeRoutes:
        return cls(FabricMap.from_links(links))

    @classmethod
    def from_topology(cls, topology: Topology) -> ProbeRoutes:
        return cls(FabricMap.from_topology(topology))

    def act_port(self, cable: Cable) -> str:
        """The end of ``cable`` a detection is raised on (see the module docstring)."""
        ends = sorted((cable.a, cable.b))
        hosts = [e for e in ends if "/" in e[0]]
        if hosts and len(hosts) < 2:
            return end_text(next(e for e in ends if "/" not in e[0]))
        ranked = sorted(ends, key=lambda e: _TIER_ORDER.get(self.fabric.tier.get(e[0], ""), 3))
        return end_text(ranked[0])

    def _access(self, name: str, rail: int) -> Cable | None:
        device, port = endpoint(name, rail)
        return self.fabric.cable_at(device, port)

    def __call__(self, probe: Probe) -> Route | None:
        key = (probe.probe, probe.src, probe.dst, probe.rail)
        if key in self._cache:
            return self._cache[key]
        route = self._route(probe)
        if len(self._cache) >= MAX_CACHED:
            self._cache.clear()
        self._cache[key] = route
        return route

    def _route(self, probe: Probe) -> Route | None:
        """None when the topology does not cable an endpoint (the caller falls back)."""
        if probe.probe != "ib_write_bw":
            # A collective's members, GPUs and NVLink all bound its bus bandwidth: its
            # slowness is a lead on its hosts (the endpoint fallback), not on a cable.
            return None
        src = self._access(probe.src, probe.rail)
        dst = self._access(probe.dst, probe.rail)
        if src is None or dst is None:
            return None
        links = [src] if src == dst else [src, dst]
        leaf_a, leaf_b = self._leaf(src), self._leaf(dst)
        ecmp = False
        if leaf_a != leaf_b:
            found = self.fabric.between(leaf_a, leaf_b)
            if found is None:
                return None  # no path between the leaves: nothing to say about its cables
            _hops, fractions = found
            for cable, frac in sorted(fractions.items(), key=lambda x: x[0].key):
                if frac >= _EVERY_PATH:
                    links.append(cable)
                else:
                    ecmp = True
        return Route(tuple((c.key, self.act_port(c)) for c in links), ecmp=ecmp)

    @staticmethod
    def _leaf(cable: Cable) -> str:
        return cable.b[0] if "/" in cable.a[0] else cable.a[0]


class RouteBook:
    """The routes of every fabric, from its topology snapshots, looked up by time.

    A probe is routed by the newest snapshot taken strictly before it (``get``), so the
    worker, which may read a snapshot back before the probes that preceded it, routes
    each probe as ``fabricwatch replay`` does in file order. The last ``KEEP`` snapshots
    per fabric are kept. A cable missing from a snapshot but present in the one before
    (isolated, down, pulled) stays on the book: the probes that crossed it before still
    did, and its probation probes cross exactly it. ``update`` is idempotent.
    """

    KEEP = 3

    def __init__(self) -> None:
        # fabric -> [(ts, links, routes)], oldest first
        self._book: dict[str, list[tuple[int, list[tuple[str, int, str, int]], ProbeRoutes]]] = {}

    def update(self, topology: Topology) -> None:
        entries = self._book.setdefault(topology.fabric, [])
        if any(ts == topology.ts for ts, _, _ in entries):
            return  # seen (a redelivery, or the snapshot read back at start)
        before = [e for e in entries if e[0] < topology.ts]
        latest = sorted((x.a_device, x.a_port, x.b_device, x.b_port) for x in topology.links)
        merged = merge_links(latest, before[-1][1] if before else [])
        routes = (before[-1][2] if before and before[-1][1] == merged
                  else ProbeRoutes.from_links(merged))
        entries.append((topology.ts, merged, routes))
        entries.sort(key=lambda e: e[0])
        del entries[:-self.KEEP]

    def get(self, fabric: str, before_ts: int | None = None) -> ProbeRoutes | None:
        """The routes of the newest snapshot before ``before_ts`` (None: the newest)."""
        for ts, _links, routes in reversed(self._book.get(fabric, [])):
            if before_ts is None or ts < before_ts:
                return routes
        return None
