"""The topology diff: discovered fabric against the cable plan, as findings a technician acts on.

Pure: a plan, a ``Topology`` event and the policy in, a ``DiffReport`` out; no I/O, no clock.
One pass over each side with dictionaries keyed by port end, then a union-find over the
links that did not match, so the cost is O(links) (a 100k-port fabric diffs in well under
a second of CPU).

How links that do not match are explained:

* every end has at most one planned peer and at most one discovered peer, so the unmatched
  planned and discovered links form chains and cycles through shared ends (a component);
* a planned link whose ends are cabled elsewhere is a ``miswire``; a planned link neither of
  whose ends is cabled at all is a ``missing_link``;
* a discovered link touching a planned end is the "found" side of a miswire and not reported
  again; one between two unplanned ends is an ``unexpected_link``;
* a component whose planned ends and discovered ends are the same set is a permutation of
  the planned cables (the swapped pair, or a longer rotation): each of its miswires names the
  others in ``swapped_with`` and says which cables to swap back.

``degraded_link`` is judged only on links found where planned, against the plan's width and
speed, or the policy's ``degradedLink`` expectation where the plan is silent.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from schemas import Action, Detection, DetectionKind, Severity, Topology, TopologyLink
from schemas.policy import SPEED_RANK, WIDTH_RANK, Policy
from streams.topology.plan import (
    End,
    Plan,
    PlanError,
    PlanLink,
    canonical_device,
    normalize_guid,
    normalize_speed,
    normalize_width,
)

MISWIRE = DetectionKind.MISWIRE.value
MISSING_LINK = DetectionKind.MISSING_LINK.value
UNEXPECTED_LINK = DetectionKind.UNEXPECTED_LINK.value
DEGRADED_LINK = DetectionKind.DEGRADED_LINK.value
KINDS = (MISWIRE, MISSING_LINK, DEGRADED_LINK, UNEXPECTED_LINK)
_KIND_ORDER = {kind: i for i, kind in enumerate(KINDS)}
# A permutation longer than this names only this many others (a report stays O(links)).
MAX_NAMED = 32

# Rail-optimized naming: a leaf named like leaf-su01-r3 (or ...-rail3) serves rail 3 of SU 1;
# a host HCA is HOST/HCA (the collectors' naming rule), e.g. node0042/mlx5_3.
_NIC_INDEX = re.compile(r"(\d+)$")
_RAIL = re.compile(r"(?:^|[-_.])(?:r|rail)(\d+)$", re.IGNORECASE)
_SU = re.compile(r"(?:^|[-_.])su(\d+)(?:[-_.]|$)", re.IGNORECASE)


def end_text(end: End) -> str:
    return f"{end[0]}:{end[1]}"


def link_key(a: End, b: End) -> str:
    """The unordered identity of a link: its two ends, sorted."""
    x, y = (a, b) if a <= b else (b, a)
    return f"{end_text(x)}<->{end_text(y)}"


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing wrong with the cabling, with both sides and what to do about it.

    For ``miswire``, ``missing_link`` and ``degraded_link`` the ends are the planned link's,
    in the plan's order; for ``unexpected_link`` they are the discovered link's.
    ``rails`` maps each node whose rails the finding costs to those rails (rail-optimized
    plans only).
    """

    kind: str
    a_device: str
    a_port: int
    b_device: str
    b_port: int
    expected: str
    found: str
    explanation: str
    swapped_with: tuple[str, ...] = ()
    cable_id: str | None = None
    plan_line: int | None = None
    rails: Mapping[str, tuple[int, ...]] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """Stable identity across snapshots: the kind and the unordered ends."""
        return f"{self.kind}|{link_key((self.a_device, self.a_port), (self.b_device, self.b_port))}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "a_device": self.a_device,
            "a_port": self.a_port,
            "b_device": self.b_device,
            "b_port": self.b_port,
            "expected": self.expected,
            "found": self.found,
            "swapped_with": list(self.swapped_with),
            "explanation": self.explanation,
            "cable_id": self.cable_id,
            "plan_line": self.plan_line,
            "rails": {node: list(r) for node, r in self.rails.items()},
        }


@dataclass(frozen=True, slots=True)
class DiffReport:
    """The findings, ordered by kind then ends, and a summary of the whole comparison."""

    findings: tuple[Finding, ...]
    summary: dict[str, Any]

    @property
    def ok(self) -> bool:
        return not self.findings

    def to_dict(self) -> dict[str, Any]:
        return {"findings": [f.to_dict() for f in self.findings], "summary": self.summary}


@dataclass(frozen=True, slots=True)
class _Rail:
    node: str
    rail: int


def _rail_of_switch(name: str) -> int | None:
    m = _RAIL.search(name)
    return int(m.group(1)) if m else None


def _rail_map(links: list[tuple[End, End]]) -> tuple[dict[End, _Rail], bool]:
    """Host end -> (node, rail) where the plan is rail-optimized; and whether it is.

    The plan follows the pattern when it cables host HCAs (``HOST/HCA``) to switches, no node
    has two NICs on one rail, and each switch is one rail: named so (``...-r3``,
    ``...rail3``), or, for switches named otherwise, because every NIC cabled to it has the
    same index (``mlx5_3``, ``HCA-3``: NIC k of each node on leaf k).
    """
    host_ends: list[tuple[End, str]] = []
    nic_indices: dict[str, set[int | None]] = {}
    for a, b in links:
        a_host, b_host = "/" in a[0], "/" in b[0]
        if a_host == b_host:
            continue  # switch-switch (or host-host): no node rail to speak of
        host, peer = (a, b) if a_host else (b, a)
        host_ends.append((host, peer[0]))
        nic_indices.setdefault(peer[0], set()).add(_nic_index(host[0]))
    if not host_ends:
        return {}, False
    switch_rail: dict[str, int] = {}
    for switch_name, indices in nic_indices.items():
        rail = _rail_of_switch(switch_name)
        if rail is None and len(indices) == 1:
            rail = next(iter(indices))
        if rail is None:
            return {}, False
        switch_rail[switch_name] = rail
    rails: dict[End, _Rail] = {}
    per_node: dict[str, set[int]] = {}
    for host, switch_name in host_ends:
        rail = switch_rail[switch_name]
        node = host[0].split("/", 1)[0]
        seen = per_node.setdefault(node, set())
        if rail in seen:
            return {}, False
        seen.add(rail)
        rails[host] = _Rail(node, rail)
    return rails, True


def _nic_index(host_device: str) -> int | None:
    """3 for ``node7/mlx5_3`` or ``node7/HCA-3``; None when the NIC name has no number."""
    m = _NIC_INDEX.search(host_device.split("/", 1)[1])
    return int(m.group(1)) if m else None


def _rails_text(rails: Mapping[str, tuple[int, ...]]) -> str:
    parts = []
    for node, r in sorted(rails.items()):
        word = "rail" if len(r) == 1 else "rails"
        parts.append(f"{node} {word} {','.join(str(x) for x in r)}")
    return "; ".join(parts)


def _merge_rails(target: dict[str, set[int]], rails: Mapping[str, tuple[int, ...]]) -> None:
    for node, r in rails.items():
        target.setdefault(node, set()).update(r)


class _Find:
    """Union-find over port ends (path halving), for grouping unmatched links."""

    __slots__ = ("parent",)

    def __init__(self) -> None:
        self.parent: dict[End, End] = {}

    def root(self, x: End) -> End:
        parent = self.parent
        p = parent.setdefault(x, x)
        while p != x:
            gp = parent[p]
            parent[x] = gp
            x, p = p, parent.setdefault(gp, gp)
        return x

    def union(self, a: End, b: End) -> None:
        ra, rb = self.root(a), self.root(b)
        if ra != rb:
            self.parent[ra] = rb


def _ws(width: str | None, speed: str | None) -> str:
    return " ".join(x for x in (width, speed) if x) or "unknown width/speed"


GUID_ALIAS_SPAN = 3


def _alias_guid_blocks(plan: Plan, discovered: Topology, names: dict[str, str]) -> None:
    """Map a plan device named by a GUID the discovered side does not use to the discovered
    device named by the uniquely nearest GUID at most ``GUID_ALIAS_SPAN`` away that no
    planned device uses itself.

    A node without a usable description is named by its GUID, and ``ibnetdiscover -p``
    prints a CA's port GUID where the default format prints its node GUID; the two differ
    by the port number on ibsim and some HCAs (``...86b2`` and ``...86b3``, or a SHARP
    aggregation node's ``...7fd0`` and ``...7fd1``). Adjacent devices are further apart
    than that, and an ambiguous neighbourhood is left alone.
    """
    def guid_names(devices: Iterable[str]) -> set[str]:
        return {g for d in devices if (g := normalize_guid(d)) is not None and g == d}

    found = guid_names(d for tl in discovered.links for d in (tl.a_device, tl.b_device))
    if not found:
        return
    planned = guid_names(d for link in plan.links for d in (link.a_device, link.b_device))
    spare = {int(g, 16): g for g in found - planned}
    chosen: dict[str, list[str]] = {}  # discovered alias -> plan GUIDs that picked it
    for g in planned:
        if g in found or g in names:
            continue
        value = int(g, 16)
        for distance in range(1, GUID_ALIAS_SPAN + 1):
            near = [spare[v] for v in (value - distance, value + distance) if v in spare]
            if near:
                if len(near) == 1:  # the uniquely nearest; a tie is ambiguous
                    chosen.setdefault(near[0], []).append(g)
                break
    for alias, plan_guids in chosen.items():
        if len(plan_guids) == 1:  # two plan devices wanting one alias: neither gets it
            names[plan_guids[0]] = alias


def diff(plan: Plan, discovered: Topology, policy: Policy, *,
         guid_names: Mapping[str, str] | None = None) -> DiffReport:
    """Compare ``discovered`` with ``plan``; see the module docstring for the rules.

    ``guid_names`` maps node GUIDs to the names the discovered topology uses (from the
    collectors' ``parse_nodes``) so that a plan naming devices by GUID still matches; the
    ``nodes`` a topology event may carry (the ibnetdiscover collector adds them) are used
    too, with ``guid_names`` taking precedence.
    """
    names = guid_names_from_topology(discovered)
    for guid, name in (guid_names or {}).items():
        norm = normalize_guid(guid)
        if norm is not None:
            names[norm] = name

    _alias_guid_blocks(plan, discovered, names)

    def resolve(device: str) -> str:
        return names.get(device, device)

    # Planned side: end -> (peer, index of the planned link).
    planned_links: list[tuple[End, End]] = []
    planned: dict[End, tuple[End, int]] = {}
    get_name = names.get
    for i, link in enumerate(plan.links):
        a = (get_name(link.a_device, link.a_device), link.a_port)
        b = (get_name(link.b_device, link.b_device), link.b_port)
        planned_links.append((a, b))
        planned[a] = (b, i)
        planned[b] = (a, i)
    if len(planned) != 2 * len(planned_links):
        # Two GUID spellings resolved to one port: the plan names a port twice.
        _raise_resolved_duplicate(plan, planned_links)

    # Discovered side: end -> (peer, link). A port reported with two different peers is
    # inconsistent input; the first report stands and the conflict is counted.
    canon: dict[str, str] = {}

    def dev(name: str) -> str:
        c = canon.get(name)
        if c is None:
            c = canon[name] = resolve(canonical_device(name))
        return c

    disc: dict[End, tuple[End, TopologyLink]] = {}
    disc_links: list[tuple[End, End, TopologyLink]] = []
    conflicts = 0
    get_canon = canon.get
    for tl in discovered.links:
        a = (get_canon(tl.a_device) or dev(tl.a_device), tl.a_port)
        b = (get_canon(tl.b_device) or dev(tl.b_device), tl.b_port)
        pa, pb = disc.get(a), disc.get(b)
        if pa is not None or pb is not None:
            if pa is not None and pa[0] == b:
                continue  # the same link reported again (both directions listed)
            conflicts += 1
            continue
        disc[a] = (b, tl)
        disc[b] = (a, tl)
        disc_links.append((a, b, tl))

    rail_of, rail_optimized = _rail_map(planned_links)
    expect_width = policy.fabric_health.degraded_link.expect_width
    expect_speed = policy.fabric_health.degraded_link.expect_speed

    findings: list[Finding] = []
    unmatched_plan: list[int] = []
    matched = 0
    unjudged = 0
    widths: dict[str | None, str | None] = {}
    speeds: dict[str | None, str | None] = {}
    for i, (a, b) in enumerate(planned_links):
        found = disc.get(a)
        if found is None or found[0] != b:
            unmatched_plan.append(i)
            continue
        matched += 1
        link = plan.links[i]
        tl = found[1]
        want_w = link.width or expect_width
        want_s = link.speed or expect_speed
        # Few distinct spellings in a fabric: normalise each once.
        raw_w, raw_s = tl.width, tl.speed
        got_w = widths[raw_w] if raw_w in widths else widths.setdefault(
            raw_w, normalize_width(raw_w) if raw_w else None)
        got_s = speeds[raw_s] if raw_s in speeds else speeds.setdefault(
            raw_s, normalize_speed(raw_s) if raw_s else None)
        if got_w is None or got_s is None:
            unjudged += 1
        low_w = got_w is not None and WIDTH_RANK[got_w] < WIDTH_RANK[want_w]
        low_s = got_s is not None and SPEED_RANK[got_s] < SPEED_RANK[want_s]
        if low_w or low_s:
            findings.append(_degraded(link, a, b, want_w, want_s, tl, bool(link.width or
                                      link.speed), rail_of))

    unmatched_disc = [(a, b, tl) for a, b, tl in disc_links
                      if (p := planned.get(a)) is None or p[0] != b]

    uf = _Find()
    for i in unmatched_plan:
        uf.union(*planned_links[i])
    for a, b, _ in unmatched_disc:
        uf.union(a, b)
    groups: dict[End, list[int]] = {}
    for i in unmatched_plan:
        groups.setdefault(uf.root(planned_links[i][0]), []).append(i)
    group_disc_ends: dict[End, set[End]] = {}
    for a, b, _ in unmatched_disc:
        if a in planned or b in planned:
            ends = group_disc_ends.setdefault(uf.root(a), set())
            ends.add(a)
            ends.add(b)
        else:
            findings.append(_unexpected(a, b, disc[a][1]))

    swap_groups = 0
    for root, members in groups.items():
        plan_ends = {e for i in members for e in planned_links[i]}
        permutation = len(members) >= 2 and plan_ends == group_disc_ends.get(root)
        if permutation:
            swap_groups += 1
        group_rails: dict[str, set[int]] = {}
        if permutation:
            for i in members:
                for e in planned_links[i]:
                    if (r := rail_of.get(e)) is not None:
                        group_rails.setdefault(r.node, set()).add(r.rail)
        group = [plan.links[j] for j in members] if permutation else None
        rails_of_group = {node: tuple(sorted(r)) for node, r in group_rails.items()}
        for i in members:
            a, b = planned_links[i]
            link = plan.links[i]
            pa, pb = disc.get(a), disc.get(b)
            if pa is None and pb is None:
                findings.append(_missing(link, a, b, rail_of))
                continue
            others = _others(group, i, members) if group is not None else ()
            findings.append(_miswire(link, a, b, pa[0] if pa else None, pb[0] if pb else None,
                                     others, rails_of_group if permutation else None,
                                     rail_of, group))

    findings.sort(key=lambda f: (_KIND_ORDER[f.kind], f.a_device, f.a_port, f.b_device,
                                 f.b_port))
    by_kind = {kind: 0 for kind in KINDS}
    affected: dict[str, set[int]] = {}
    for f in findings:
        by_kind[f.kind] += 1
        _merge_rails(affected, f.rails)
    summary: dict[str, Any] = {
        "match": not findings,
        "planned_links": len(planned_links),
        "discovered_links": len(disc_links),
        "matched_links": matched,
        "findings": len(findings),
        **by_kind,
        "swap_groups": swap_groups,
        "unjudged_links": unjudged,
        "conflicting_discovered_links": conflicts,
        "rail_optimized": rail_optimized,
        "rails_affected": {node: sorted(r) for node, r in sorted(affected.items())},
    }
    return DiffReport(tuple(findings), summary)


def guid_names_from_topology(topology: Topology) -> dict[str, str]:
    """GUID -> device name from the optional ``nodes`` list of a topology event.

    The field is beyond the contract's ``links`` (the collector adds it); anything in it
    that is not a ``{"guid": ..., "name": ...}`` object is ignored rather than trusted.
    """
    names: dict[str, str] = {}
    nodes = (topology.model_extra or {}).get("nodes")
    if not isinstance(nodes, list):
        return names
    for node in nodes:
        if not isinstance(node, dict):
            continue
        guid, name = node.get("guid"), node.get("name")
        if isinstance(guid, str) and isinstance(name, str) and name:
            norm = normalize_guid(guid)
            if norm is not None:
                names[norm] = name
    return names


def _raise_resolved_duplicate(plan: Plan, links: list[tuple[End, End]]) -> None:
    seen: dict[End, int] = {}
    for link, (a, b) in zip(plan.links, links, strict=True):
        for end in (a, b):
            if end in seen:
                raise PlanError(f"port {end_text(end)} is planned twice once GUIDs are resolved "
                                f"to names (first on line {seen[end]})", link.line)
            seen[end] = link.line
    raise PlanError("a port is planned twice once GUIDs are resolved to names")


def _expected_text(link: PlanLink, a: End, b: End) -> str:
    text = f"{end_text(a)}<->{end_text(b)}"
    if link.width or link.speed:
        text += f" {_ws(link.width, link.speed)}"
    if link.cable_id:
        text += f" (cable {link.cable_id})"
    return text


def _link_rails(a: End, b: End, rail_of: Mapping[End, _Rail]) -> dict[str, tuple[int, ...]]:
    out: dict[str, set[int]] = {}
    for e in (a, b):
        if (r := rail_of.get(e)) is not None:
            out.setdefault(r.node, set()).add(r.rail)
    return {node: tuple(sorted(rs)) for node, rs in out.items()}


def _others(group: list[PlanLink], i: int, members: list[int]) -> tuple[str, ...]:
    """The other cables of a permutation, by label; a huge rotation is cut at MAX_NAMED so
    that the report stays O(links) (a whole leaf cabled one port off would be O(n^2))."""
    out: list[str] = []
    for j, g in zip(members, group, strict=True):
        if j == i:
            continue
        if len(out) == MAX_NAMED:
            out.append(f"... and {len(group) - 1 - MAX_NAMED} more")
            break
        out.append(g.label())
    return tuple(out)


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _cost(rails: Mapping[str, tuple[int, ...]], what: str) -> str:
    return f"; {what} {_rails_text(rails)}" if rails else ""


def _miswire(link: PlanLink, a: End, b: End, pa: End | None, pb: End | None,
             others: tuple[str, ...], group_rails: Mapping[str, tuple[int, ...]] | None,
             rail_of: Mapping[End, _Rail], group: list[PlanLink] | None) -> Finding:
    found = "; ".join([f"{end_text(a)}<->{end_text(pa) if pa else 'nothing'}",
                       f"{end_text(b)}<->{end_text(pb) if pb else 'nothing'}"])
    if group is not None and group_rails is not None:
        rails: Mapping[str, tuple[int, ...]] = group_rails
        if len(rails) > MAX_NAMED:
            rails = _link_rails(a, b, rail_of)  # a huge rotation: each names its own rails
        cables = [g.cable_id for g in group] if len(group) <= MAX_NAMED else []
        if len(group) > MAX_NAMED:
            what = f"the {len(group)} cables of this rotation (see swapped_with)"
        elif all(cables):
            what = "cables " + _and([str(c) for c in cables])
        else:
            what = f"the {len(group)} cables at " + _and(
                [f"{end_text(g.a)}/{end_text(g.b)}" for g in group])
        # In a permutation every planned end is cabled (to another end of the group).
        on = end_text(pa) if pa is not None else "nothing"
        explanation = (f"swapped: {end_text(a)} is on {on} but belongs on {end_text(b)}; "
                       f"swap back {what}{_cost(rails, 'costs')}")
    else:
        rails = _link_rails(a, b, rail_of)
        name = f"cable {link.cable_id}" if link.cable_id else "the cable"
        if pa is not None and pb is not None:
            fix = (f"{end_text(a)} is cabled to {end_text(pa)} and {end_text(b)} to "
                   f"{end_text(pb)}; re-cable so that {end_text(a)} goes to {end_text(b)}")
        elif pa is not None:
            fix = (f"{name} from {end_text(a)} lands on {end_text(pa)} and {end_text(b)} is "
                   f"empty; move its far end from {end_text(pa)} to {end_text(b)}")
        else:
            assert pb is not None  # noqa: S101 - a miswire has at least one end cabled
            fix = (f"{name} from {end_text(b)} lands on {end_text(pb)} and {end_text(a)} is "
                   f"empty; move its far end from {end_text(pb)} to {end_text(a)}")
        explanation = f"miswired: {fix}{_cost(rails, 'costs')}"
    return Finding(MISWIRE, a[0], a[1], b[0], b[1], _expected_text(link, a, b), found,
                   explanation, others, link.cable_id, link.line or None, rails)


def _missing(link: PlanLink, a: End, b: End, rail_of: Mapping[End, _Rail]) -> Finding:
    rails = _link_rails(a, b, rail_of)
    name = f"cable {link.cable_id}" if link.cable_id else "a cable"
    explanation = (f"missing: neither {end_text(a)} nor {end_text(b)} has a live link; "
                   f"check or install {name} between them{_cost(rails, 'costs')}")
    return Finding(MISSING_LINK, a[0], a[1], b[0], b[1], _expected_text(link, a, b),
                   "no link at either end", explanation, (), link.cable_id, link.line or None,
                   rails)


def _unexpected(a: End, b: End, tl: TopologyLink) -> Finding:
    explanation = (f"unexpected: {end_text(a)}<->{end_text(b)} is cabled but in no plan; "
                   f"remove it or add it to the plan")
    return Finding(UNEXPECTED_LINK, a[0], a[1], b[0], b[1], "no planned link at either end",
                   f"{end_text(a)}<->{end_text(b)} {_ws(tl.width, tl.speed)}", explanation)


def _degraded(link: PlanLink, a: End, b: End, want_w: str, want_s: str, tl: TopologyLink,
              from_plan: bool, rail_of: Mapping[End, _Rail]) -> Finding:
    rails = _link_rails(a, b, rail_of)
    source = "plan" if from_plan else "policy"
    name = f"cable {link.cable_id}" if link.cable_id else f"the cable {end_text(a)}<->" \
        f"{end_text(b)}"
    explanation = (f"degraded: {name} trained at {_ws(tl.width, tl.speed)}, the {source} "
                   f"expects {want_w} {want_s}; reseat or replace it (repair ladder)"
                   f"{_cost(rails, 'slows')}")
    expected = f"{end_text(a)}<->{end_text(b)} {want_w} {want_s}" + (
        f" (cable {link.cable_id})" if link.cable_id else "")
    return Finding(DEGRADED_LINK, a[0], a[1], b[0], b[1], expected,
                   f"{end_text(a)}<->{end_text(b)} {_ws(tl.width, tl.speed)}", explanation, (),
                   link.cable_id, link.line or None, rails)


# --- The stream side's pure core: findings across snapshots -------------------------------

_SEVERITY = {MISWIRE: Severity.WARNING, MISSING_LINK: Severity.WARNING,
             UNEXPECTED_LINK: Severity.INFO, DEGRADED_LINK: Severity.WARNING}
_POLICY_ACTION = {"isolatePort": Action.ISOLATE_PORT, "ticket": Action.TICKET,
                  "page": Action.PAGE, "none": Action.NONE}
DETECTION_SOURCE = "topology"


@dataclass(frozen=True, slots=True)
class TrackerState:
    """What the diff remembers per fabric between snapshots.

    ``open`` maps each open finding's key to the event time of the snapshot that opened
    it (which, with the fabric and the key, makes the episode id); ``last_ts`` is the newest
    snapshot seen, so an older snapshot arriving late does not reopen what a newer one closed.
    Plain ints and strings so that it stores as JSON in a changelogged table.
    """

    open: Mapping[str, int] = field(default_factory=dict)
    last_ts: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"open": dict(self.open), "last_ts": self.last_ts}

    @classmethod
    def from_json(cls, data: Any) -> TrackerState:
        if not isinstance(data, dict):
            return cls()
        raw_open = data.get("open")
        opened = {k: v for k, v in raw_open.items() if isinstance(k, str) and isinstance(v, int)} \
            if isinstance(raw_open, dict) else {}
        last = data.get("last_ts")
        return cls(opened, last if isinstance(last, int) else None)


@dataclass(frozen=True, slots=True)
class StepResult:
    """The new state, the detections to publish (new findings only) and what closed."""

    state: TrackerState
    detections: tuple[Detection, ...]
    closed: tuple[str, ...]
    report: DiffReport | None  # None when the snapshot was older than one already seen


def episode_id(fabric: str, key: str, opened_ts: int) -> str:
    """Deterministic: the same snapshot replayed gives the same episode, and so dedupes."""
    digest = hashlib.sha256(f"{fabric}\x1f{key}\x1f{opened_ts}".encode()).hexdigest()
    return f"topology-{digest[:32]}"


def detection_port(finding: Finding) -> End:
    """The port a detection is keyed on: the switch end of a host link, else the ``a`` end.

    The switch port is where the fabric can act on a link (isolate it through the SM or
    the switch), and the end the other detectors key their switch-side findings on.
    """
    if "/" in finding.a_device and "/" not in finding.b_device:
        return (finding.b_device, finding.b_port)
    return (finding.a_device, finding.a_port)


def to_detection(finding: Finding, *, fabric: str, ts: int, episode: str, policy: Policy,
                 snapshot_id: str) -> Detection:
    device, port = detection_port(finding)
    action = (_POLICY_ACTION[policy.fabric_health.degraded_link.action]
              if finding.kind == DEGRADED_LINK else Action.TICKET)
    evidence = finding.to_dict()
    evidence["snapshot"] = snapshot_id
    return Detection(id=episode, ts=ts, fabric=fabric, source=DETECTION_SOURCE, device=device,
                     port=port, detection=DetectionKind(finding.kind),
                     severity=_SEVERITY[finding.kind], action=action, evidence=evidence,
                     episode=episode)


def step(state: TrackerState, topology: Topology, plan: Plan, policy: Policy, *,
         guid_names: Mapping[str, str] | None = None) -> StepResult:
    """Diff one snapshot and turn it into detections, once per finding.

    A finding seen for the first time opens an episode and yields one detection; one still
    present yields nothing; one absent from this snapshot closes (its key is returned in
    ``closed``, and a later recurrence is a new episode). A snapshot older than the newest
    one seen changes nothing.
    """
    if state.last_ts is not None and topology.ts < state.last_ts:
        return StepResult(state, (), (), None)
    report = diff(plan, topology, policy, guid_names=guid_names)
    opened: dict[str, int] = {}
    detections: list[Detection] = []
    for finding in report.findings:
        key = finding.key
        if key in opened:
            continue
        since = state.open.get(key)
        if since is None:
            since = topology.ts
            detections.append(to_detection(
                finding, fabric=topology.fabric, ts=topology.ts, policy=policy,
                episode=episode_id(topology.fabric, key, since), snapshot_id=topology.id))
        opened[key] = since
    closed = tuple(sorted(k for k in state.open if k not in opened))
    return StepResult(TrackerState(opened, topology.ts), tuple(detections), closed, report)
