"""The links a job crosses on the simulator's rail-optimized fabrics, and what hurt them.

Same-rail traffic within an SU stays on its leaf; a job across SUs crosses the spine and core
tiers; a swapped pair of cables shows as an extra leaf (and hop) on the job's rails. The
replay-style tests feed the topology detector's own detections (the diff of the simulator's
discovered fabric against its plan) into the impact ranking.
"""

from __future__ import annotations

from collections import Counter

import pytest

from schemas import Detection, JobPlacement
from schemas.policy import Policy
from sim.faults import parse_spec
from sim.jobs import place_jobs
from sim.topology import Fabric, Params, generate
from streams.topology.jobpaths import (
    Episode,
    FabricMap,
    held_window,
    job_impact,
    job_paths,
    jobs_on_port,
    merge_links,
    running_at,
)
from streams.topology.logic import TrackerState, step
from streams.topology.plan import plan_from_topology

TWO_SU = Params(sus=2, nodes_per_su=8, rails=4, radix=16, core=True, fabric="two", name="two")
T0 = 1_790_000_000_000


def fmap(fabric: Fabric, *specs: str) -> FabricMap:
    faults = [parse_spec(s) for s in specs]
    return FabricMap.from_topology(fabric.to_topology(T0, fabric.discovered_links(faults)))


def placement(job: str, nodes: list[str], **over: object) -> JobPlacement:
    fields: dict[str, object] = {"id": f"p-{job}", "ts": T0, "fabric": "two", "source": "test",
                                 "job": job, "nodes": nodes, "start": T0 - 1000,
                                 "gpus_per_node": 4}
    fields.update(over)
    return JobPlacement.model_validate(fields)


def test_same_rail_in_one_su_stays_on_the_leaf() -> None:
    fabric = generate("su")
    paths = job_paths(fmap(fabric), fabric.nodes[:8])
    assert Counter(x.cable.tier for x in paths.links) == {"host": 8 * 8}
    for rail in paths.rails:
        assert rail.hops == 2 and list(rail.leaves) == [f"leaf-su01-r{rail.rail}"]
        assert rail.leaves[f"leaf-su01-r{rail.rail}"] == 8 and not rail.off_rail
    # every NIC's cable carries its own flows: 2 (n - 1) of the 8 rails x 8 x 7 flows
    assert {round(x.share, 9) for x in paths.links} == {round(2 * 7 / (8 * 8 * 7), 9)}


def test_across_sus_the_rails_cross_spines_and_cores() -> None:
    fabric = generate(TWO_SU)
    nodes = fabric.nodes_of_su(1)[:4] + fabric.nodes_of_su(2)[:4]
    paths = job_paths(fmap(fabric), nodes)
    tiers = Counter(x.cable.tier for x in paths.links)
    assert tiers["host"] == 8 * 4 and tiers["leaf-spine"] > 0 and tiers["spine-core"] > 0
    for rail in paths.rails:
        assert rail.hops == 6  # NIC-leaf-spine-core-spine-leaf-NIC
        assert sorted(rail.leaves) == [f"leaf-su01-r{rail.rail}", f"leaf-su02-r{rail.rail}"]
    # the flows that leave a leaf (2 x 4 x 4 per rail) spread over all its uplinks
    total = 4 * 8 * 7
    up = [x for x in paths.links if x.cable.tier == "leaf-spine"
          and x.cable.touches("leaf-su01-r0")]
    assert len(up) == 8
    assert sum(x.share for x in up) == pytest.approx(2 * 4 * 4 / total)
    assert all(x.rails == (0,) for x in up)
    # the core carries every rail of the job, and the same traffic as the leaves' uplinks
    core = [x for x in paths.links if x.cable.tier == "spine-core"]
    assert {r for x in core for r in x.rails} == {0, 1, 2, 3}
    assert sum(x.share for x in core) == pytest.approx(
        sum(x.share for x in paths.links if x.cable.tier == "leaf-spine"))


def test_a_job_within_one_su_on_a_two_su_fabric_never_reaches_the_core() -> None:
    fabric = generate(TWO_SU)
    paths = job_paths(fmap(fabric), fabric.nodes_of_su(2))
    assert {x.cable.tier for x in paths.links} == {"host"}


def test_a_miswired_nic_is_an_extra_hop_on_its_rail() -> None:
    fabric = generate("su")
    nodes = fabric.nodes[:8]
    clean = job_paths(fmap(fabric), nodes)
    swapped = job_paths(fmap(fabric, "swap:node0006/mlx5_2:1,with=node0006/mlx5_3:1"), nodes)
    rails = {r.rail: r for r in swapped.rails}
    assert rails[2].off_rail == ("node0006/mlx5_2",) and rails[3].off_rail == ("node0006/mlx5_3",)
    assert rails[2].leaves == {"leaf-su01-r2": 7, "leaf-su01-r3": 1} and rails[2].hops == 4
    assert rails[0].hops == 2 and not rails[0].off_rail
    # the clean job never left its leaves; the miswired one crosses spines on rails 2 and 3
    assert {x.cable.tier for x in clean.links} == {"host"}
    up = [x for x in swapped.links if x.cable.tier == "leaf-spine"]
    assert up and {r for x in up for r in x.rails} == {2, 3}
    assert {x.cable.a[0] for x in up} | {x.cable.b[0] for x in up} >= {"leaf-su01-r2",
                                                                      "leaf-su01-r3"}


def test_nodes_missing_from_the_topology_are_named() -> None:
    fabric = generate("lab")
    paths = job_paths(fmap(fabric), ["node0001", "node0002", "node9999"])
    assert paths.missing_nodes == ("node9999",)
    assert paths.links and all(x.cable.tier == "host" for x in paths.links)


def test_merge_keeps_cables_that_left_discovery() -> None:
    latest = [("a", 1, "b", 1)]
    earlier = [("a", 1, "c", 1), ("d", 1, "b", 2), ("e", 1, "f", 1)]
    assert merge_links(latest, earlier) == [("a", 1, "b", 1), ("d", 1, "b", 2),
                                            ("e", 1, "f", 1)]


def test_running_at() -> None:
    job = placement("j", ["node0001"], start=T0, end=T0 + 100)
    assert not running_at(job, T0 - 1) and running_at(job, T0 + 500)  # past end: still running
    done = placement("j", ["node0001"], start=T0, end=T0 + 100, state="completed")
    assert running_at(done, T0 + 50) and not running_at(done, T0 + 100)
    assert not running_at(placement("j", ["node0001"], state="pending"), T0)


# ---- replay-style: the detector's findings, ranked for each job ---------------------------


UPLINK = ("leaf-su01-r0", 9)  # leaf-su01-r0's first uplink (ports 1-8 face the nodes)


@pytest.fixture(scope="module")
def replay() -> tuple[FabricMap, list[Detection], list[JobPlacement]]:
    """SU 1 rail 0's leaf has an uplink trained at 2X, and node0001's NICs 0 and 1 are
    swapped; job A spans both SUs from node0001, job B keeps to SU 2's second half."""
    fabric = generate(TWO_SU)
    plan = plan_from_topology(fabric.to_topology(T0))
    faults = [parse_spec(f"degraded_width:{UPLINK[0]}:{UPLINK[1]},width=2X"),
              parse_spec("swap:node0001/mlx5_0:1,with=node0001/mlx5_1:1")]
    discovered = fabric.to_topology(T0 + 60_000, fabric.discovered_links(faults))
    result = step(TrackerState(), discovered, plan, Policy())
    jobs = [placement("A", fabric.nodes_of_su(1)[:4] + fabric.nodes_of_su(2)[:4]),
            placement("B", fabric.nodes_of_su(2)[4:])]
    return FabricMap.from_topology(discovered), list(result.detections), jobs


def _episodes(detections: list[Detection]) -> list[Episode]:
    return [Episode(d.device, d.port, d.detection.value, d.episode, d.ts, d.ts,
                    severity=d.severity.value) for d in detections]


def test_the_job_under_the_faults_gets_both_ranked(
        replay: tuple[FabricMap, list[Detection], list[JobPlacement]]) -> None:
    fabric, detections, jobs = replay
    kinds = Counter(d.detection.value for d in detections)
    assert kinds == {"miswire": 2, "degraded_link": 1}
    rows = job_impact(job_paths(fabric, jobs[0].nodes), _episodes(detections))
    assert [r.episode.kind for r in rows] == ["miswire", "miswire", "degraded_link"]
    # the swapped NICs' own cables carry more of the job than one of 8 uplinks
    assert rows[0].link.cable.tier == "host" and rows[-1].link.cable.tier == "leaf-spine"
    assert rows[0].link.share > rows[-1].link.share > 0
    assert (rows[-1].episode.device, rows[-1].episode.port) == UPLINK


def test_a_job_elsewhere_gets_neither(
        replay: tuple[FabricMap, list[Detection], list[JobPlacement]]) -> None:
    fabric, detections, jobs = replay
    assert job_impact(job_paths(fabric, jobs[1].nodes), _episodes(detections)) == []


def test_the_jobs_a_port_touches(
        replay: tuple[FabricMap, list[Detection], list[JobPlacement]]) -> None:
    fabric, _detections, jobs = replay
    assert [t.job for t in jobs_on_port(fabric, jobs, *UPLINK, T0)] == ["A"]
    assert [t.job for t in jobs_on_port(fabric, jobs, "node0013/mlx5_2", 1, T0)] == ["B"]
    assert [t.job for t in jobs_on_port(fabric, jobs, "leaf-su02-r1", 6, T0)] == ["B"]
    # a whole spine: job A's cross-SU traffic crosses it, job B's never leaves its leaves
    assert [t.job for t in jobs_on_port(fabric, jobs, "spine-su01-s1", None, T0)] == ["A"]
    assert jobs_on_port(fabric, jobs, *UPLINK, T0 - 10_000) == []  # before the jobs started
    assert jobs_on_port(fabric, jobs, "nosuch", 1, T0) == []


def test_simulated_jobs_span_sus_and_share_none() -> None:
    fabric = generate(TWO_SU)
    jobs = place_jobs(fabric, 3, T0)
    assert [j.job for j in jobs] == ["sim-job-1", "sim-job-2", "sim-job-3"]
    seen: set[str] = set()
    for job in jobs:
        assert not seen & set(job.nodes)
        seen |= set(job.nodes)
        assert job.gpus_per_node == 4 and job.state == "running"
    paths = job_paths(FabricMap.from_topology(fabric.to_topology(T0)), jobs[0].nodes)
    assert {x.cable.tier for x in paths.links} == {"host", "leaf-spine", "spine-core"}
    one_su = place_jobs(generate("su"), 3, T0)
    assert [len(j.nodes) for j in one_su] == [8, 8, 16]


def test_episodes_outside_the_jobs_time_did_not_hurt_it(
        replay: tuple[FabricMap, list[Detection], list[JobPlacement]]) -> None:
    fabric, detections, jobs = replay
    paths = job_paths(fabric, jobs[0].nodes)
    episodes = _episodes(detections)  # all at T0 + 60 s
    ended = placement("A", jobs[0].nodes, start=T0 - 5000, end=T0, state="completed")
    assert job_impact(paths, episodes, window=held_window(ended)) == []
    later = placement("A", jobs[0].nodes, start=T0 + 120_000)
    assert job_impact(paths, episodes, window=held_window(later)) == []
    running = placement("A", jobs[0].nodes, start=T0 - 5000, end=T0)  # past its expected end
    assert len(job_impact(paths, episodes, window=held_window(running))) == 3
