"""The topology diff on hand-built fabrics, on every real ibnetdiscover fixture, and as a property."""

from __future__ import annotations

import dataclasses
import os
import random
import time
from collections.abc import Iterable
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.ibnetdiscover import parse_ibnetdiscover, parse_nodes
from schemas import Topology, TopologyLink
from schemas.policy import Policy
from streams.topology.logic import MAX_NAMED, DiffReport, Finding, diff, link_key
from streams.topology.plan import Plan, PlanError, PlanLink, load_plan, plan_from_topology

FIXTURES = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "ibnetdiscover"
GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "topology"
POLICY = Policy()

End = tuple[str, int]


def topo(links: Iterable[tuple[End, End] | tuple[End, End, str, str]]) -> Topology:
    out = []
    for item in links:
        (a, ap), (b, bp) = item[0], item[1]
        width, speed = (item[2], item[3]) if len(item) == 4 else ("4X", "NDR")
        out.append(TopologyLink(a_device=a, a_port=ap, b_device=b, b_port=bp, width=width,
                                speed=speed))
    return Topology(id="snap", ts=1_700_000_000_000, fabric="lab", source="test", links=out)


def rail_fabric(nodes: int, rails: int = 4, per_su: int = 32) -> list[PlanLink]:
    """A rail-optimized plan: NIC k of each node to leaf k of its SU, leaves up to spines."""
    links = []
    for n in range(nodes):
        su = n // per_su + 1
        for k in range(rails):
            links.append(PlanLink(f"node{n:04d}/mlx5_{k}", 1, f"leaf-su{su:02d}-r{k}",
                                  n % per_su + 1, f"N{n:04d}-{k}", "4X", "NDR"))
    for su in range(1, (nodes - 1) // per_su + 2):
        for k in range(rails):
            for s in range(4):
                links.append(PlanLink(f"leaf-su{su:02d}-r{k}", per_su + 1 + s, f"spine-{s:02d}",
                                      (su - 1) * rails + k + 1, f"S{su}-{k}-{s}"))
    return links


def as_found(plan_links: Iterable[PlanLink]) -> list[tuple[End, End]]:
    return [(x.a, x.b) for x in plan_links]


def kinds(report: DiffReport) -> list[tuple[str, str]]:
    return sorted((f.kind, link_key((f.a_device, f.a_port), (f.b_device, f.b_port)))
                  for f in report.findings)


# --- hand-built cases -----------------------------------------------------------------------

def test_exact_match_is_clean() -> None:
    links = rail_fabric(8)
    report = diff(Plan(tuple(links)), topo(as_found(links)), POLICY)
    assert report.ok and report.summary["matched_links"] == len(links)
    assert report.summary["rail_optimized"] is True


def test_links_are_unordered() -> None:
    links = rail_fabric(2)
    report = diff(Plan(tuple(links)), topo((b, a) for a, b in as_found(links)), POLICY)
    assert report.ok


def test_swapped_pair_names_the_other_and_the_rails() -> None:
    links = rail_fabric(40)
    found = as_found(links)
    i2 = next(i for i, x in enumerate(links) if x.a_device == "node0037/mlx5_2")
    i3 = next(i for i, x in enumerate(links) if x.a_device == "node0037/mlx5_3")
    (a2, b2), (a3, b3) = found[i2], found[i3]
    found[i2], found[i3] = (a2, b3), (a3, b2)
    report = diff(Plan(tuple(links)), topo(found), POLICY)
    assert [f.kind for f in report.findings] == ["miswire", "miswire"]
    f2, f3 = report.findings
    assert (f2.a_device, f2.b_device, f2.b_port) == ("node0037/mlx5_2", "leaf-su02-r2", 6)
    assert f2.swapped_with == ("cable N0037-3 (node0037/mlx5_3:1<->leaf-su02-r3:6)",)
    assert f3.swapped_with == ("cable N0037-2 (node0037/mlx5_2:1<->leaf-su02-r2:6)",)
    assert f2.found == "node0037/mlx5_2:1<->leaf-su02-r3:6; leaf-su02-r2:6<->node0037/mlx5_3:1"
    assert f2.explanation == ("swapped: node0037/mlx5_2:1 is on leaf-su02-r3:6 but belongs on "
                              "leaf-su02-r2:6; swap back cables N0037-2 and N0037-3; costs "
                              "node0037 rails 2,3")
    assert dict(f2.rails) == {"node0037": (2, 3)}
    assert report.summary["rails_affected"] == {"node0037": [2, 3]}
    assert report.summary["swap_groups"] == 1
    assert report.summary["miswire"] == 2 and report.summary["findings"] == 2


def test_three_way_rotation_is_one_swap_group() -> None:
    links = rail_fabric(4)
    found = as_found(links)
    # node0000 NICs 0,1,2 rotate their leaf ends.
    ends = [found[i][1] for i in range(3)]
    for i in range(3):
        found[i] = (found[i][0], ends[(i + 1) % 3])
    report = diff(Plan(tuple(links)), topo(found), POLICY)
    assert [f.kind for f in report.findings] == ["miswire"] * 3
    for f in report.findings:
        assert len(f.swapped_with) == 2
        assert dict(f.rails) == {"node0000": (0, 1, 2)}


def test_moved_cable_is_a_miswire_not_missing_plus_unexpected() -> None:
    links = rail_fabric(2)
    found = as_found(links)
    a, _ = found[0]
    found[0] = (a, ("leaf-su01-r0", 30))  # plugged into a free leaf port
    report = diff(Plan(tuple(links)), topo(found), POLICY)
    (f,) = report.findings
    assert f.kind == "miswire" and f.swapped_with == ()
    assert f.explanation == ("miswired: cable N0000-0 from node0000/mlx5_0:1 lands on "
                             "leaf-su01-r0:30 and leaf-su01-r0:1 is empty; move its far end "
                             "from leaf-su01-r0:30 to leaf-su01-r0:1; costs node0000 rail 0")


def test_missing_unexpected_and_degraded() -> None:
    links = rail_fabric(2)
    found: list[tuple[End, End] | tuple[End, End, str, str]] = list(as_found(links))
    del found[3]
    found.append((("leaf-su01-r0", 40), ("leaf-su01-r1", 40)))
    a, b = found[0]
    found[0] = (a, b, "2X", "NDR")
    spine_idx = next(i for i, x in enumerate(links) if x.b_device.startswith("spine"))
    a, b = found[spine_idx - 1]  # the deletion shifted indices by one past 3
    found[spine_idx - 1] = (a, b, "4X", "HDR")  # plan is silent: the policy's NDR applies
    report = diff(Plan(tuple(links)), topo(found), POLICY)
    assert kinds(report) == sorted([
        ("missing_link", "leaf-su01-r3:1<->node0000/mlx5_3:1"),
        ("unexpected_link", "leaf-su01-r0:40<->leaf-su01-r1:40"),
        ("degraded_link", "leaf-su01-r0:1<->node0000/mlx5_0:1"),
        ("degraded_link", "leaf-su01-r0:33<->spine-00:1"),
    ])
    by_kind = {f.kind + f.a_device: f for f in report.findings}
    assert "the plan expects 4X NDR" in by_kind["degraded_linknode0000/mlx5_0"].explanation
    assert "slows node0000 rail 0" in by_kind["degraded_linknode0000/mlx5_0"].explanation
    assert "the policy expects 4X NDR" in by_kind["degraded_linkleaf-su01-r0"].explanation
    assert dict(by_kind["missing_linknode0000/mlx5_3"].rails) == {"node0000": (3,)}


def test_degraded_against_a_custom_policy_and_unknown_speed_is_unjudged() -> None:
    policy = Policy.from_yaml("fabricHealth: {degradedLink: {expectWidth: 4X, expectSpeed: HDR}}")
    plan = Plan((PlanLink("sw", 1, "sw2", 1), PlanLink("sw", 2, "sw2", 2),
                 PlanLink("sw", 3, "sw2", 3)))
    report = diff(plan, topo([(("sw", 1), ("sw2", 1), "4X", "HDR"),
                              (("sw", 2), ("sw2", 2), "4X", "???"),
                              (("sw", 3), ("sw2", 3), "1X", "NDR")]), policy)
    assert kinds(report) == [("degraded_link", "sw:3<->sw2:3")]
    assert report.summary["unjudged_links"] == 1


def test_plan_by_guid_with_names_from_parse_nodes_or_the_event() -> None:
    plan = load_plan("a_device,a_port,b_device,b_port\n0xB8599F0300FC6DE4,3,leaf,1\n")
    found = topo([(("r-ufm-sw95", 3), ("leaf", 1))])
    assert [f.kind for f in diff(plan, found, POLICY).findings] == ["miswire"]
    assert diff(plan, found, POLICY, guid_names={"0xb8599f0300fc6de4": "r-ufm-sw95"}).ok
    with_nodes = found.model_copy(update={})
    event = Topology.model_validate({**with_nodes.model_dump(), "nodes": [
        {"guid": "0xb8599f0300fc6de4", "name": "r-ufm-sw95"}, "junk", {"guid": 5}]})
    assert diff(plan, event, POLICY).ok


def test_guid_and_name_for_one_port_is_a_plan_error() -> None:
    plan = load_plan("a_device,a_port,b_device,b_port\n0xb8599f0300fc6de4,3,leaf,1\n"
                     "r-ufm-sw95,3,leaf,2\n")
    with pytest.raises(PlanError, match="planned twice once GUIDs are resolved"):
        diff(plan, topo([]), POLICY, guid_names={"0xb8599f0300fc6de4": "r-ufm-sw95"})


def test_conflicting_discovered_report_is_counted_not_trusted() -> None:
    plan = Plan((PlanLink("sw", 1, "n/h", 1),))
    report = diff(plan, topo([(("sw", 1), ("n/h", 1)), (("n/h", 1), ("sw", 1)),
                              (("sw", 1), ("x/h", 1))]), POLICY)
    assert report.ok and report.summary["conflicting_discovered_links"] == 1


# --- the real fixtures --------------------------------------------------------------------

def fixture_topologies() -> list[Path]:
    return sorted(p for p in FIXTURES.glob("*.txt"))


@pytest.fixture(scope="module")
def parsed() -> dict[str, tuple[Topology, dict[str, str]]]:
    out = {}
    for path in fixture_topologies():
        text = path.read_text(encoding="utf-8")
        top = parse_ibnetdiscover(text, fabric="lab", ts=1_700_000_000_000)
        out[path.name] = (top, {n.guid: n.name for n in parse_nodes(text)})
    return out


def test_fixtures_are_there() -> None:
    assert len(fixture_topologies()) >= 10


@pytest.mark.parametrize("name", [p.name for p in fixture_topologies()])
def test_fixture_against_a_plan_from_itself_is_clean(
        name: str, parsed: dict[str, tuple[Topology, dict[str, str]]]) -> None:
    top, names = parsed[name]
    plan = load_plan(plan_from_topology(top, cable_prefix="C").to_csv())
    report = diff(plan, top, POLICY, guid_names=names)
    assert report.ok, report.findings[:3]
    # A port reported with two peers (ports-hdr-sharp has two SHARP nodes under one GUID)
    # is counted, not matched.
    assert report.summary["matched_links"] == len(plan.links)
    assert len(plan.links) + report.summary["conflicting_discovered_links"] == len(top.links)


def edit(top: Topology, seed: int) -> tuple[Plan, Topology, list[tuple[str, str]]]:
    """A plan from ``top`` with four edits, a discovered topology with one, and the findings
    those edits must produce (each found link lies where the plan expects its edit)."""
    rng = random.Random(seed)
    plan = list(plan_from_topology(top, cable_prefix="C").links)
    picks = rng.sample(range(len(plan)), 4)
    i, j, drop, weak = picks
    x, y = plan[i], plan[j]
    # Swap two ends: the plan wants x.a<->y.b and y.a<->x.b; the fabric has x and y.
    plan[i] = PlanLink(x.a_device, x.a_port, y.b_device, y.b_port, x.cable_id, x.width, x.speed)
    plan[j] = PlanLink(y.a_device, y.a_port, x.b_device, x.b_port, y.cable_id, y.width, y.speed)
    expected = [("miswire", link_key(plan[i].a, plan[i].b)),
                ("miswire", link_key(plan[j].a, plan[j].b)),
                ("unexpected_link", link_key(plan[drop].a, plan[drop].b)),
                ("missing_link", "new-switch:1<->new-switch:2"),
                ("degraded_link", link_key(plan[weak].a, plan[weak].b))]
    dropped = plan[drop]
    weak_link = plan[weak] = dataclasses.replace(plan[weak], width="4X")
    plan = [p for k, p in enumerate(plan) if k != drop]
    plan.append(PlanLink("new-switch", 1, "new-switch", 2, "C-NEW"))
    links = []
    for tl in top.links:
        if {(tl.a_device, tl.a_port), (tl.b_device, tl.b_port)} == {weak_link.a, weak_link.b}:
            tl = tl.model_copy(update={"width": "1X"})  # trained at 1X where 4X was planned
        links.append(tl)
    assert dropped is not None
    return Plan(tuple(plan)), top.model_copy(update={"links": links}), sorted(expected)


@pytest.mark.parametrize("name", [p.name for p in fixture_topologies()])
def test_fixture_against_an_edited_plan_finds_exactly_the_edits(
        name: str, parsed: dict[str, tuple[Topology, dict[str, str]]]) -> None:
    top, names = parsed[name]
    if len(top.links) < 4:
        pytest.skip(f"{name} has {len(top.links)} link(s), too few for four edits")
    for seed in range(3):
        plan, found, expected = edit(top, seed)
        report = diff(plan, found, POLICY, guid_names=names)
        assert kinds(report) == expected
        swapped = [f for f in report.findings if f.kind == "miswire"]
        assert all(len(f.swapped_with) == 1 for f in swapped)


def test_golden_small_topology() -> None:
    """The whole report on one real fixture with hand edits, kept as a golden file."""
    text = (FIXTURES / "ufm-sdk-small-topo.txt").read_text(encoding="utf-8")
    top = parse_ibnetdiscover(text, fabric="lab", ts=1_700_000_000_000)
    names = {n.guid: n.name for n in parse_nodes(text)}
    plan = load_plan((GOLDEN / "small-topo-edited-plan.csv").read_text(encoding="utf-8"))
    report = diff(plan, top, POLICY, guid_names=names)
    got = orjson.dumps(report.to_dict(), option=orjson.OPT_INDENT_2).decode() + "\n"
    golden = GOLDEN / "small-topo-edited-report.json"
    if os.environ.get("FABRICWATCH_UPDATE_GOLDEN") == "1":
        golden.write_text(got, encoding="utf-8")
    assert got == golden.read_text(encoding="utf-8")


# --- property: random permutations of plan ends are reported exactly ----------------------

@settings(max_examples=200, deadline=None)
@given(st.data())
def test_random_permutation_of_plan_ends_is_reported_exactly(data: st.DataObject) -> None:
    links = rail_fabric(6, rails=4, per_su=4)
    plan = Plan(tuple(links))
    chosen = data.draw(st.lists(st.sampled_from(range(len(links))), min_size=2, max_size=12,
                                unique=True), label="links")
    ends = [e for i in chosen for e in (links[i].a, links[i].b)]
    order = data.draw(st.permutations(ends), label="order")
    found = [(x.a, x.b) for k, x in enumerate(links) if k not in set(chosen)]
    found += [(order[k], order[k + 1]) for k in range(0, len(order), 2)]
    report = diff(plan, topo(found), POLICY)

    planned = {link_key(x.a, x.b): x for x in links}
    still = {link_key(a, b) for a, b in found}
    changed = {link_key(links[i].a, links[i].b) for i in chosen} - still
    assert {link_key((f.a_device, f.a_port), (f.b_device, f.b_port))
            for f in report.findings} == changed
    assert all(f.kind == "miswire" for f in report.findings)
    # Every end is still cabled, so every miswire is part of a permutation: it names the
    # others of its group, the relation is symmetric, and the group's planned ends are
    # exactly the ends its discovered links use.
    label_of = {planned[k].label(): k for k in changed}
    by_key: dict[str, Finding] = {link_key((f.a_device, f.a_port), (f.b_device, f.b_port)): f
                                  for f in report.findings}
    peer = {a: b for a, b in found} | {b: a for a, b in found}
    for key, f in by_key.items():
        assert f.swapped_with, f
        group = {key} | {label_of[s] for s in f.swapped_with}
        for other in group - {key}:
            assert planned[key].label() in by_key[other].swapped_with
        group_ends = {e for k in group for e in (planned[k].a, planned[k].b)}
        assert {peer[e] for e in group_ends} == group_ends


def test_huge_rotation_stays_linear_and_names_a_bounded_list() -> None:
    links = rail_fabric(1024, rails=4, per_su=32)
    host = [i for i, x in enumerate(links) if "/" in x.a_device]
    found = as_found(links)
    for k, i in enumerate(host):  # every host cable moved to the next host cable's leaf port
        found[i] = (links[i].a, links[host[(k + 1) % len(host)]].b)
    t = time.perf_counter()
    report = diff(Plan(tuple(links)), topo(found), POLICY)
    assert time.perf_counter() - t < 5
    assert report.summary["miswire"] == len(host) == 4096
    assert report.summary["swap_groups"] == 1
    f = report.findings[0]
    assert len(f.swapped_with) == MAX_NAMED + 1 and f.swapped_with[-1] == "... and 4063 more"
    assert "the 4096 cables of this rotation" in f.explanation
    assert len(f.rails) == 1  # its own node's rail, not 1024 nodes'


def test_leaf_cabled_one_port_off_is_a_chain_of_moves() -> None:
    links = rail_fabric(7, rails=1, per_su=8)
    found = as_found(links)
    for i, x in enumerate(links):
        if "/" in x.a_device:
            found[i] = (x.a, (x.b_device, x.b_port + 1))  # port 8 of the leaf is free
    report = diff(Plan(tuple(links)), topo(found), POLICY)
    assert [f.kind for f in report.findings] == ["miswire"] * 7
    assert all(f.swapped_with == () for f in report.findings)
    assert report.summary["unexpected_link"] == 0 and report.summary["swap_groups"] == 0


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_random_mix_of_swaps_drops_extras_and_weak_links(data: st.DataObject) -> None:
    """Disjoint faults of every kind at once: each reported as its kind, nothing else."""
    links = rail_fabric(6, rails=4, per_su=4)
    n = len(links)
    order = data.draw(st.permutations(range(n)), label="order")
    k_swap = data.draw(st.integers(0, 4), label="swaps")
    k_drop = data.draw(st.integers(0, 4), label="drops")
    k_weak = data.draw(st.integers(0, 4), label="weak")
    k_extra = data.draw(st.integers(0, 4), label="extras")
    swaps = [order[2 * i: 2 * i + 2] for i in range(k_swap)]
    rest = order[2 * k_swap:]
    drops, weak = set(rest[:k_drop]), set(rest[k_drop:k_drop + k_weak])
    found: list[tuple[End, End] | tuple[End, End, str, str]] = []
    expected: dict[str, str] = {}
    swapped = {i for pair in swaps for i in pair}
    for i, x in enumerate(links):
        if i in drops:
            expected[link_key(x.a, x.b)] = "missing_link"
        elif i in weak:
            found.append((x.a, x.b, "4X", "HDR"))
            expected[link_key(x.a, x.b)] = "degraded_link"
        elif i not in swapped:
            found.append((x.a, x.b))
    for i, j in swaps:
        x, y = links[i], links[j]
        found += [(x.a, y.b), (y.a, x.b)]
        expected[link_key(x.a, x.b)] = expected[link_key(y.a, y.b)] = "miswire"
    for e in range(k_extra):  # cables between ports the plan does not use
        found.append(((f"leaf-su01-r{e}", 60), (f"leaf-su02-r{e}", 60)))
        expected[link_key((f"leaf-su01-r{e}", 60), (f"leaf-su02-r{e}", 60))] = "unexpected_link"
    report = diff(Plan(tuple(links)), topo(found), POLICY)
    assert {link_key((f.a_device, f.a_port), (f.b_device, f.b_port)): f.kind
            for f in report.findings} == expected
    assert len(report.findings) == len(expected)
    assert report.summary["swap_groups"] == k_swap


def _fixture_topology(name: str) -> Topology:
    path = FIXTURES / name
    if not path.exists():
        pytest.skip(f"{name} is not on this machine")
    return parse_ibnetdiscover(path.read_text(), fabric="lab", ts=1_700_000_000_000)


def test_default_format_plan_matches_the_ports_format_of_the_same_cabling() -> None:
    # The same NDR fat tree: the default format names GUID-only nodes by node GUID, the -p
    # format (from ibsim) by port GUID, one apart; none of that is a miswire.
    plan = load_plan(plan_from_topology(
        _fixture_topology("topograph-ndr-fattree.txt")).to_csv())
    ports = _fixture_topology("ibsim-ports-ndr-fattree-sdr.txt")
    report = diff(plan, ports, Policy())
    assert report.summary["matched_links"] == report.summary["planned_links"] == 1114
    assert {k for k, _ in kinds(report)} == {"degraded_link"}  # ibsim trains at SDR
    # and a swap of two GUID-named HCAs in the -p output is still a swap
    guid_named = [tl for tl in ports.links if tl.b_device.startswith("0x")]
    a, b = guid_named[0], guid_named[1]
    assert a.b_device != b.b_device
    swapped = ports.model_copy(update={"links": [
        a.model_copy(update={"b_device": b.b_device, "b_port": b.b_port}),
        b.model_copy(update={"b_device": a.b_device, "b_port": a.b_port}),
        *[tl for tl in ports.links if tl not in (a, b)]]})
    miswires = [f for f in diff(plan, swapped, Policy()).findings if f.kind == "miswire"]
    assert len(miswires) == 2 and all(f.swapped_with for f in miswires)


def test_rails_come_from_the_nic_index_where_leaf_names_carry_none() -> None:
    # NIC k of each node on leaf k, but the leaves are named su1-ibleaf-01.. (no rail token)
    links = [dataclasses.replace(x, b_device=x.b_device.replace("leaf-su", "ibleaf-su")
                                 .replace("-r", "-")) if x.b_device.startswith("leaf") else x
             for x in rail_fabric(64)]
    links = [dataclasses.replace(x, a_device=x.a_device.replace("leaf-su", "ibleaf-su")
                                 .replace("-r", "-")) if x.a_device.startswith("leaf") else x
             for x in links]
    found = as_found(links)
    i2 = next(i for i, (a, _) in enumerate(found) if a == ("node0037/mlx5_2", 1))
    i3 = next(i for i, (a, _) in enumerate(found) if a == ("node0037/mlx5_3", 1))
    (a2, b2), (a3, b3) = found[i2], found[i3]
    found[i2], found[i3] = (a2, b3), (a3, b2)
    report = diff(Plan(tuple(links)), topo(found), POLICY)
    assert report.summary["rail_optimized"] is True
    assert report.summary["rails_affected"] == {"node0037": [2, 3]}
    # a leaf carrying two NIC indices is no rail: the plan is then not rail-optimized
    mixed = [dataclasses.replace(x, a_device="node0001/mlx5_1")
             if x.a_device == "node0001/mlx5_0" else x for x in links]
    mixed = [x for x in mixed if x.a_device != "node0001/mlx5_1" or x.b_device.endswith("-0")]
    assert diff(Plan(tuple(mixed)), topo(as_found(mixed)), POLICY).summary[
        "rail_optimized"] is False
