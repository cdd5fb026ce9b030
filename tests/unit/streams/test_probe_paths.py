"""Probe routes from the topology, and slow pairs localised to the cable they share."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from schemas import Probe, Topology, TopologyLink
from schemas.policy import Policy
from sim.topology import Params, TopologyError, generate
from streams.engine import Engine
from streams.probes.logic import step
from streams.probes.paths import ProbeRoutes, RouteBook

BASE = 1_700_002_800_000
POLICY = Policy()


def probe(t: int, src: str, dst: str, bw: float, rail: int = 0,
          baseline: float = 400.0) -> Probe:
    return Probe(id=f"p-{src}-{dst}-{rail}-{t}", ts=BASE + t, fabric="lab", source="probe",
                 probe="ib_write_bw", src=src, dst=dst, rail=rail, size_bytes=1 << 23,
                 bw_gbps=bw, baseline_gbps=baseline)


def tick(after: Probe) -> Probe:
    """A fast probe of the rail past ``localiseConfirm``, between endpoints no topology
    cables (it clears no cable): the step that decides on the cables named before it."""
    t = after.ts - BASE + round(POLICY.fabric_health.probes.localise_confirm * 1000) + 1000
    return probe(t, "elsewhere-a", "elsewhere-b", 400, rail=after.rail)


def named(routes: ProbeRoutes, probes: list[Probe]) -> list[tuple[str, str, str]]:
    """(port, action, cable) of the localised detections, the cables confirmed."""
    state = None
    out = []
    for p in [*probes, tick(probes[-1])]:
        state, dets = step(state, p, POLICY, routes)
        out += [(f"{d.device}:{d.port}", d.action.value, d.evidence["link"])
                for d in dets if d.evidence["localised"]]
    return out


def lab_routes() -> ProbeRoutes:
    fabric = generate("lab")  # one SU: every HCA of a rail under that rail's leaf
    return ProbeRoutes.from_topology(fabric.to_topology(BASE))


def test_same_leaf_pair_crosses_only_its_two_access_cables() -> None:
    routes = lab_routes()
    route = routes(probe(0, "node0001/mlx5_2", "node0003/mlx5_2", 400, rail=2))
    assert route is not None and not route.ecmp
    ports = sorted(port for _key, port in route.links)
    assert len(ports) == 2 and all(p.startswith("leaf-su01-r2:") for p in ports)
    # a bare host name is its HCA on the probe's rail
    assert routes(probe(0, "node0001", "node0003", 400, rail=2)) == route


def test_slow_pairs_through_one_access_cable_name_it_on_the_leaf_port() -> None:
    routes = lab_routes()
    fabric = generate("lab")
    leaf_port = next(f"{x.b_device}:{x.b_port}" for x in fabric.links
                     if x.a_device == "node0002/mlx5_1")
    seq = [probe(0, "node0001", "node0002", 240, rail=1),
           probe(1, "node0002", "node0003", 238, rail=1),
           probe(2, "node0003", "node0004", 392, rail=1)]
    out = named(routes, seq)
    assert [(port, action) for port, action, _ in out] == [(leaf_port, "isolate_port")]
    assert out[0][2] == f"{leaf_port}<->node0002/mlx5_1:1"  # the ends, sorted


def test_unknown_endpoint_falls_back_to_endpoints_and_only_tickets() -> None:
    routes = lab_routes()
    assert routes(probe(0, "elsewhere", "node0002", 200)) is None
    seq = [probe(0, "elsewhere", "node0002", 200), probe(1, "elsewhere", "node0003", 200)]
    out = named(routes, seq)
    assert out == [("elsewhere/mlx5_0:1", "ticket", "elsewhere/mlx5_0:1")]


def two_leaves(uplinks: int) -> Topology:
    """Two leaves of rail 0, hosts h1..h4 under leaf-a and h5..h8 under leaf-b, joined by
    ``uplinks`` spines (one cable to each from each leaf)."""
    links = []
    for i in range(1, 9):
        leaf = "leaf-a-r0" if i <= 4 else "leaf-b-r0"
        links.append(TopologyLink(a_device=f"h{i}/mlx5_0", a_port=1, b_device=leaf,
                                  b_port=(i - 1) % 4 + 1))
    for s in range(1, uplinks + 1):
        for leaf in ("leaf-a-r0", "leaf-b-r0"):
            links.append(TopologyLink(a_device=leaf, a_port=10 + s, b_device=f"spine-{s}",
                                      b_port=1 if leaf == "leaf-a-r0" else 2))
    return Topology(id="t", ts=BASE, fabric="lab", source="sim", links=links)


def test_slow_pairs_sharing_the_only_spine_path_name_the_leaf_uplink() -> None:
    routes = ProbeRoutes.from_topology(two_leaves(uplinks=1))
    route = routes(probe(0, "h1", "h5", 400))
    assert route is not None and not route.ecmp and len(route.links) == 4
    # three pairs from different hosts to different hosts: only the spine hop is shared
    seq = [probe(0, "h1", "h5", 230), probe(1, "h2", "h6", 231), probe(2, "h7", "h3", 229)]
    out = named(routes, seq)
    assert sorted((port, action) for port, action, _ in out) == [
        ("leaf-a-r0:11", "isolate_port"), ("leaf-b-r0:11", "isolate_port")]
    assert {cable for _, _, cable in out} == {"leaf-a-r0:11<->spine-1:1",
                                              "leaf-b-r0:11<->spine-1:2"}


def test_with_ecmp_no_uplink_is_guessed_and_a_fast_probe_clears_the_shared_host() -> None:
    routes = ProbeRoutes.from_topology(two_leaves(uplinks=2))
    route = routes(probe(0, "h1", "h5", 400))
    assert route is not None and route.ecmp and len(route.links) == 2  # access cables only
    # h1's pairs across the leaves hashed onto a slow uplink; h1 -> h2 under its own leaf
    # is fast, so h1's own cable is not what they share
    seq = [probe(0, "h1", "h5", 230), probe(1, "h1", "h2", 396), probe(2, "h1", "h6", 231),
           probe(3, "h1", "h7", 228)]
    assert named(routes, seq) == []
    # without the fast probe h1's cable is what the topology knows they share
    assert [p for p, _, _ in named(routes, [seq[0], seq[2]])] == ["leaf-a-r0:1"]


def test_a_named_cable_is_acted_on_only_after_the_confirmation() -> None:
    """Named by routes, a cable waits ``localiseConfirm`` of event time: the steps before it
    name nothing, the first probe of the rail after it does; a fast probe across the
    cable meanwhile drops it."""
    routes = lab_routes()
    seq = [probe(0, "node0001", "node0002", 240, rail=1),
           probe(1000, "node0002", "node0003", 238, rail=1)]
    state = None
    for p in [*seq, probe(30_000, "elsewhere-a", "elsewhere-b", 400, rail=1)]:
        state, dets = step(state, p, POLICY, routes)
        assert not [d for d in dets if d.evidence["localised"]]
    state, dets = step(state, tick(seq[-1]), POLICY, routes)
    assert [(d.action.value, d.evidence["named_since_ms"]) for d in dets] == [
        ("isolate_port", BASE + 1000)]
    # the same pairs, and a fast probe across the shared cable before the confirmation
    state = None
    for p in [*seq, probe(20_000, "node0002", "node0004", 399, rail=1), tick(seq[-1])]:
        state, dets = step(state, p, POLICY, routes)
        assert not [d for d in dets if d.evidence["localised"]]


def test_slow_pairs_across_many_cables_of_one_switch_are_one_common_mode_ticket() -> None:
    """Every pair under one leaf slow at once (an ECN misconfiguration, a congested
    switch): the routes name each host's cable, and none of them is acted on: one ticket at
    the switch, naming the cables."""
    routes = lab_routes()
    hosts = [f"node000{i}" for i in range(1, 5)]
    seq = [probe(n * 1000, a, b, 230, rail=1)
           for n, (a, b) in enumerate((a, b) for a in hosts for b in hosts if a < b)]
    state = None
    out = []
    for p in [*seq, tick(seq[-1]), tick(tick(seq[-1]))]:
        state, dets = step(state, p, POLICY, routes)
        out += [d for d in dets if d.evidence["localised"]]
    assert [(d.device, d.port, d.action.value) for d in out] == [("leaf-su01-r1", 0, "ticket")]
    ev = out[0].evidence
    assert ev["common_mode"] is True and len(ev["links"]) == 4 and len(ev["pairs"]) == 6
    assert ev["acted_on"] == []


def test_a_cable_confirmed_before_its_switchs_common_mode_showed_is_named_in_its_ticket(
        ) -> None:
    """One cable's pairs were slow first and it was confirmed alone (asked to be isolated);
    then the rest of the switch's pairs slowed: the common-mode ticket names that cable as
    acted on, and no other cable is isolated."""
    routes = lab_routes()
    first = [probe(0, "node0001", "node0002", 240, rail=1),
             probe(1000, "node0002", "node0003", 238, rail=1)]
    later = [probe(90_000 + n * 1000, a, b, 230, rail=1)
             for n, (a, b) in enumerate([("node0001", "node0003"), ("node0001", "node0004"),
                                         ("node0003", "node0004"), ("node0002", "node0004")])]
    state = None
    out = []
    for p in [*first, tick(first[-1]), *later, tick(later[-1]), tick(tick(later[-1]))]:
        state, dets = step(state, p, POLICY, routes)
        out += [d for d in dets if d.evidence["localised"]]
    assert [(d.port == 0, d.action.value) for d in out] == [(False, "isolate_port"),
                                                            (True, "ticket")]
    assert out[1].evidence["acted_on"] == [out[0].evidence["link"]]


def localised(routes: ProbeRoutes, probes: list[Probe]) -> list[tuple[int, int, str]]:
    """(ms from BASE, port, action) of the localised detections, the state through JSON
    after every step, as the worker stores it."""
    state = None
    out = []
    for p in probes:
        state, dets = step(state, p, POLICY, routes)
        state = orjson.loads(orjson.dumps(state))
        out += [(p.ts - BASE, d.port, d.action.value) for d in dets if d.evidence["localised"]]
    return out


@pytest.mark.parametrize("cleared", ["node0001", "node0004"])
def test_a_cable_whose_slow_pairs_all_crossed_a_worse_one_is_its_shadow(cleared: str) -> None:
    """node0003's cable is bad: its pairs with node0001 and node0004, both ways, are slow,
    so the routes name node0001's and node0004's cables too (two slow pairs each). Those
    pairs all crossed node0003's cable, which has more: only it is acted on, whichever
    peer a fast probe clears meanwhile (the order of the cables' keys decides nothing)."""
    routes = lab_routes()
    slow = [probe(0, "node0003", "node0001", 230, rail=1),
            probe(1000, "node0001", "node0003", 230, rail=1),
            probe(2000, "node0003", "node0004", 230, rail=1),
            probe(3000, "node0004", "node0003", 230, rail=1)]
    out = localised(routes, [*slow, probe(65_000, cleared, "node0002", 400, rail=1)])
    assert out == [(65_000, 3, "isolate_port")]


def test_a_bad_cable_among_peers_slow_beside_it_is_acted_on_alone() -> None:
    """node0001's cable is bad, probed both ways with node0002 and node0003 (their cables
    named beside it, each by fewer pairs); later its pairs with node0004 are slow too, and
    node0002 <-> node0003 fast. Only node0001's cable is acted on, once."""
    routes = lab_routes()
    seq = [probe(0, "node0001", "node0002", 230, rail=1),
           probe(1000, "node0002", "node0001", 230, rail=1),
           probe(2000, "node0001", "node0003", 230, rail=1),
           probe(3000, "node0003", "node0001", 230, rail=1),
           probe(70_000, "node0002", "node0003", 400, rail=1)]
    for k in range(1, 12):
        seq += [probe(71_000 + k * 60_000, "node0001", "node0004", 230, rail=1),
                probe(72_000 + k * 60_000, "node0004", "node0001", 230, rail=1),
                probe(73_000 + k * 60_000, "node0002", "node0003", 400, rail=1)]
    assert localised(routes, seq) == [(70_000, 1, "isolate_port")]


def test_a_common_mode_that_a_fast_probe_dissolves_acts_on_the_cable_left() -> None:
    """Three cables of one leaf named together are its common mode (one ticket); a fast
    probe then clears two of them: the one left is pending again and, still slow, acted on
    after its own confirmation."""
    routes = lab_routes()
    # node0001's cable bad; node0002's and node0003's each crossed by one pair of their own
    # too, so no cable's pairs are all among another's
    seq = [probe(0, "node0001", "node0002", 230, rail=1),
           probe(1000, "node0001", "node0003", 230, rail=1),
           probe(2000, "node0002", "node0003", 230, rail=1),
           probe(61_000, "elsewhere-a", "elsewhere-b", 400, rail=1),
           probe(62_000, "node0002", "node0003", 400, rail=1)]
    seq += [probe(63_000 + k * 20_000, "node0001", f"node000{2 + k % 2}", 230, rail=1)
            for k in range(5)]
    out = localised(routes, seq)
    assert out[0] == (61_000, 0, "ticket")  # the common mode, at the leaf
    assert out[1:] == [(out[1][0], 1, "isolate_port")] and out[1][0] >= 122_000


def test_a_lasting_common_mode_is_one_ticket() -> None:
    """Every pair under one leaf slow for 40 minutes (an ECN misconfiguration that stays):
    one common-mode ticket, not one each time its first naming leaves the window."""
    routes = lab_routes()
    hosts = [f"node000{i}" for i in range(1, 5)]
    pairs = [(a, b) for a in hosts for b in hosts if a != b]
    seq = [probe(i * 5000, *pairs[i % 12], 230, rail=1) for i in range(12 * 40)]
    assert [(port, action) for _, port, action in localised(routes, seq)] == [(0, "ticket")]


def test_two_cables_crossed_by_the_very_same_pairs_are_both_acted_on() -> None:
    """One pair slow both ways and nothing else: its two access cables cannot be told
    apart; both are named, whichever key sorts first."""
    routes = lab_routes()
    seq = [probe(0, "node0001", "node0002", 230, rail=1),
           probe(1000, "node0002", "node0001", 230, rail=1)]
    seq += [probe(61_000 + k * 60_000, "node0003", "node0004", 400, rail=1) for k in range(3)]
    assert localised(routes, seq) == [(61_000, 1, "isolate_port"), (61_000, 2, "isolate_port")]


def test_a_repaired_cable_still_explains_its_shadows() -> None:
    """node0003's cable is acted on; its first probe after the repair is fast. The cables
    named only by its slow pairs (node0004's) are still its shadows: not acted on."""
    routes = lab_routes()
    seq = [probe(0, "node0003", "node0001", 230, rail=1),
           probe(1000, "node0001", "node0003", 230, rail=1),
           probe(2000, "node0003", "node0004", 230, rail=1),
           probe(3000, "node0004", "node0003", 230, rail=1),
           probe(65_000, "node0001", "node0002", 400, rail=1),
           probe(70_000, "node0003", "node0002", 400, rail=1),
           probe(75_000, "elsewhere-a", "elsewhere-b", 400, rail=1),
           probe(140_000, "elsewhere-a", "elsewhere-b", 400, rail=1)]
    assert localised(routes, seq) == [(65_000, 3, "isolate_port")]


def test_route_book_keeps_a_cable_the_newest_snapshot_lost() -> None:
    book = RouteBook()
    full = two_leaves(uplinks=1)
    book.update(full)
    without_h1 = full.model_copy(update={"id": "t2", "ts": BASE + 10,
                                         "links": full.links[1:]})
    book.update(without_h1)  # h1's cable isolated: absent from discovery, still cabled
    routes = book.get("lab")
    assert routes is not None and routes(probe(0, "h1", "h5", 400)) is not None
    book.update(without_h1)  # a redelivery changes nothing
    assert book.get("lab") is routes


def test_a_probe_is_routed_by_the_newest_snapshot_before_it() -> None:
    """As replay reads a file: a probe stamped with (or before) a snapshot's time was
    routed without it, even when the worker read the snapshot back first."""
    book = RouteBook()
    book.update(two_leaves(uplinks=1))  # at BASE
    assert book.get("lab", BASE) is None and book.get("lab", BASE + 1) is not None
    first = book.get("lab", BASE + 1)
    book.update(two_leaves(uplinks=2).model_copy(update={"id": "t2", "ts": BASE + 100}))
    assert book.get("lab", BASE + 100) is first
    later = book.get("lab", BASE + 101)
    assert later is not None and later is not first


def test_engine_routes_probes_by_the_topology_it_has_seen() -> None:
    fabric = generate(Params(sus=1, nodes_per_su=4, rails=2, spines_per_su=2, fabric="lab"))
    seq = [probe(0, "node0001", "node0002", 240, rail=1),
           probe(1, "node0002", "node0003", 238, rail=1)]
    before = Engine(POLICY)
    assert [d.action.value for p in seq for d in before.feed(p)
            if d.evidence.get("localised")] == ["ticket"]  # endpoints: a lead only
    engine = Engine(POLICY)
    engine.feed(fabric.to_topology(BASE - 1000))
    localised = [d for p in [*seq, tick(seq[-1])] for d in engine.feed(p)
                 if d.evidence.get("localised")]
    assert [(d.device.startswith("leaf-su01-r1"), d.action.value) for d in localised] == [
        (True, "isolate_port")]
    assert localised[0].evidence["by"] == "paths"


@settings(max_examples=25, deadline=None)
@given(sus=st.integers(1, 3), nodes=st.integers(1, 4), rails=st.integers(1, 2),
       spines=st.integers(1, 3), seed=st.integers(0, 10_000))
def test_known_cables_are_on_the_path_the_simulator_routes(sus: int, nodes: int, rails: int,
                                                           spines: int, seed: int) -> None:
    """Whatever the fat tree, every cable a route says the probe crosses is on the path the
    simulator's ECMP hash actually took, and a route without ECMP is that whole path."""
    import random

    from sim.telemetry import Simulator

    params = Params(sus=sus, nodes_per_su=nodes, rails=rails, radix=8, core=sus > 1,
                    spines_per_su=min(spines, nodes), fabric="lab")
    try:
        params.check()
    except TopologyError:
        assume(False)  # not a fabric (too few spine ports for the uplinks)
    fabric = generate(params)
    sim = Simulator(fabric, start_ms=BASE)
    routes = ProbeRoutes.from_topology(fabric.to_topology(BASE))
    rng = random.Random(seed)
    for _ in range(10):
        a, b = rng.sample(fabric.nodes, 2) if len(fabric.nodes) > 1 else (fabric.nodes[0],) * 2
        rail = rng.randrange(rails)
        route = routes(probe(0, a, b, 400, rail=rail))
        assert route is not None
        taken = set(sim.path_ports(a, b, rail))
        for key, port in route.links:
            x, y = key.split("<->")
            assert {x, y} <= taken, (key, sorted(taken))
            assert port in (x, y) and "/" not in port.rpartition(":")[0]  # a switch end
        if not route.ecmp:
            assert {e for key, _ in route.links for e in key.split("<->")} == taken
