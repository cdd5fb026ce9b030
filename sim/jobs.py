"""Jobs on the simulated fabric: a few placements laid over its SUs, as a scheduler would.

``place_jobs(fabric, count, start_ms)`` is deterministic. On one SU the jobs split its nodes
(every rail of a job stays on its leaf); on several, the first job spans two SUs (its rails
cross the spine and core tiers), the second keeps to the rest of SU 1 and the third to
another SU, so a fault anywhere touches some jobs and spares others.
"""

from __future__ import annotations

from schemas import JobPlacement
from sim.topology import Fabric, TopologyError


def _groups(fabric: Fabric) -> list[list[str]]:
    sus = fabric.params.sus
    first = fabric.nodes_of_su(1)
    half = max(1, len(first) // 2)
    if sus == 1:
        quarter = max(1, len(first) // 4)
        return [first[:quarter], first[quarter:half], first[half:]]
    second = fabric.nodes_of_su(2)
    groups = [first[:half] + second[:half], first[half:]]
    groups.append(fabric.nodes_of_su(min(sus, 4) if sus > 2 else 2)[half:])
    return groups


def place_jobs(fabric: Fabric, count: int, start_ms: int) -> list[JobPlacement]:
    """Up to ``count`` running jobs named ``sim-job-N``, GPUs per node = the node's rails."""
    if count < 0:
        raise TopologyError("the number of jobs must not be negative")
    groups = [(f"sim-job-{i}", nodes) for i, nodes in enumerate(_groups(fabric)[:count], 1)
              if nodes]
    return placements(fabric, groups, start_ms)


def placements(fabric: Fabric, jobs: list[tuple[str, list[str]]],
               start_ms: int) -> list[JobPlacement]:
    """Running jobs on the named nodes (``sim run --job NAME=HOSTLIST``); a node the fabric
    does not have, or a node in two jobs, is an error."""
    known = set(fabric.nodes)
    taken: dict[str, str] = {}
    out: list[JobPlacement] = []
    for job, nodes in jobs:
        for node in nodes:
            if node not in known:
                raise TopologyError(f"job {job}: no node {node!r} in fabric {fabric.fabric!r}")
            if node in taken:
                raise TopologyError(f"job {job}: node {node} already runs job {taken[node]}")
            taken[node] = job
        out.append(JobPlacement(id=f"sim:{fabric.fabric}:job:{job}:{start_ms}", ts=start_ms,
                                fabric=fabric.fabric, source="sim", job=job, nodes=nodes,
                                start=start_ms, end=None, gpus_per_node=fabric.params.rails,
                                state="running", name=f"simulated job {job}"))
    return out
