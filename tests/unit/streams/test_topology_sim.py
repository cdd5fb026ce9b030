"""The diff on simulator fabrics with injected swaps, missing and degraded links.

Thousands of correct links around a few dozen faults: every fault is reported as what it is,
and nothing else is. The discovered side goes through the real path: the simulator writes
ibnetdiscover output and the collectors' parser reads it.
"""

from __future__ import annotations

import dataclasses
import random

import pytest

from collectors.ibnetdiscover import parse_ibnetdiscover, parse_nodes
from schemas.policy import Policy
from sim.topology import Fabric, Link, generate
from streams.topology.logic import DiffReport, diff, link_key
from streams.topology.plan import load_plan

POLICY = Policy()


@pytest.fixture(scope="module")
def fabric() -> Fabric:
    return generate("10k-gpu")


def key(x: Link) -> str:
    return link_key((x.a_device, x.a_port), (x.b_device, x.b_port))


def inject(fabric: Fabric, seed: int) -> tuple[list[Link], dict[str, str], dict[str, set[str]]]:
    """Discovered links with faults, the expected kind of each faulty planned link, and for
    each swapped link the cable ids it must name as swapped with."""
    rng = random.Random(seed)
    links = list(fabric.links)
    host = [i for i, x in enumerate(links) if x.tier == "host"]
    upper = [i for i, x in enumerate(links) if x.tier != "host"]
    expected: dict[str, str] = {}
    swapped: dict[str, set[str]] = {}
    used: set[int] = set()

    def pick(pool: list[int]) -> int:
        while True:
            i = rng.choice(pool)
            if i not in used:
                used.add(i)
                return i

    def swap(i: int, j: int) -> None:
        x, y = links[i], links[j]
        links[i] = dataclasses.replace(x, b_device=y.b_device, b_port=y.b_port)
        links[j] = dataclasses.replace(y, b_device=x.b_device, b_port=x.b_port)
        expected[key(x)] = expected[key(y)] = "miswire"
        swapped[key(x)] = {y.cable_id}
        swapped[key(y)] = {x.cable_id}

    # 10 classic rail swaps inside one node (NIC k and NIC l onto each other's leaves).
    for _ in range(10):
        i = pick(host)
        node = links[i].a_device.split("/")[0]
        j = next(k for k in host if k not in used and k != i
                 and links[k].a_device.startswith(node + "/"))
        used.add(j)
        swap(i, j)
    # 5 swaps between leaf-spine or spine-core uplinks.
    for _ in range(5):
        swap(pick(upper), pick(upper))
    # 10 missing links, 10 degraded (width or speed), anywhere.
    gone = {pick(host + upper) for _ in range(10)}
    for i in gone:
        expected[key(links[i])] = "missing_link"
    for n in range(10):
        i = pick(host + upper)
        change = {"width": "2X"} if n % 2 else {"speed": "HDR"}
        links[i] = dataclasses.replace(links[i], **change)
        expected[key(links[i])] = "degraded_link"
    return [x for i, x in enumerate(links) if i not in gone], expected, swapped


def check(report: DiffReport, expected: dict[str, str], swapped: dict[str, set[str]],
          cable_of: dict[str, str]) -> None:
    got = {link_key((f.a_device, f.a_port), (f.b_device, f.b_port)): f for f in report.findings}
    assert {k: f.kind for k, f in got.items()} == expected
    for k, f in got.items():
        if f.kind == "miswire":
            assert {s.split()[1] for s in f.swapped_with} == swapped[k]
            assert f.cable_id == cable_of[k]


def test_injected_faults_through_ibnetdiscover(fabric: Fabric) -> None:
    seed = 1
    plan = load_plan(fabric.to_plan_csv())
    assert len(plan.links) > 10_000
    found, expected, swapped = inject(fabric, seed)
    text = fabric.to_ibnetdiscover(found)
    topology = parse_ibnetdiscover(text, fabric=fabric.fabric, ts=1_700_000_000_000)
    report = diff(plan, topology, POLICY)  # GUID names, if needed, from the event's nodes
    check(report, expected, swapped, {key(x): x.cable_id for x in fabric.links})
    s = report.summary
    assert s["rail_optimized"] is True
    assert s["swap_groups"] == 15 and s["unexpected_link"] == 0
    assert s["matched_links"] == len(plan.links) - 30 - 10
    # Every rail swap inside a node costs exactly that node's two rails.
    for f in report.findings:
        if f.kind == "miswire" and "/" in f.a_device:
            node = f.a_device.split("/")[0]
            assert list(f.rails) == [node] and len(f.rails[node]) == 2
            assert f"costs {node} rails" in f.explanation


@pytest.mark.parametrize("seed", [2, 3])
def test_injected_faults_as_a_topology_event(fabric: Fabric, seed: int) -> None:
    plan = load_plan(fabric.to_plan_csv())
    found, expected, swapped = inject(fabric, seed)
    report = diff(plan, fabric.to_topology(1_700_000_000_000, found), POLICY)
    check(report, expected, swapped, {key(x): x.cable_id for x in fabric.links})


def test_clean_simulated_fabric_has_no_finding(fabric: Fabric) -> None:
    report = diff(load_plan(fabric.to_plan_csv()), fabric.to_topology(1_700_000_000_000),
                  POLICY)
    assert report.ok and report.summary["matched_links"] == len(fabric.links)


def test_plan_naming_switches_by_guid_matches_through_ibnetdiscover() -> None:
    fabric = generate("su")
    guid = {sw.name: f"0x{sw.guid:016X}" for sw in fabric.switches}
    lines = fabric.to_plan_csv().splitlines()
    out = [lines[0]]
    for line in lines[1:]:
        a, ap, b, bp, cable = line.split(",")
        out.append(",".join([guid.get(a, a), ap, guid.get(b, b), bp, cable]))
    plan = load_plan("\n".join(out) + "\n")
    assert any(x.a_device.startswith("0x") or x.b_device.startswith("0x") for x in plan.links)
    text = fabric.to_ibnetdiscover()
    topology = parse_ibnetdiscover(text, fabric=fabric.fabric, ts=1_700_000_000_000)
    report = diff(plan, topology, POLICY)  # names from the event's own nodes
    assert report.ok and report.summary["matched_links"] == len(fabric.links)
    report = diff(plan, topology.model_copy(update={"nodes": None}), POLICY,
                  guid_names={n.guid: n.name for n in parse_nodes(text)})
    assert report.ok and report.summary["rail_optimized"] is True
