"""The demo's jobs: placed so that each injected fault touches some jobs and spares others."""

from __future__ import annotations

import pytest

from fabricwatch.demo.run import jobs_touched
from fabricwatch.demo.scenario import build_scenario
from sim.faults import parse_spec
from sim.jobs import placements
from sim.topology import generate
from streams.topology.jobpaths import FabricMap, jobs_on_port

T0 = 1_790_000_000_000


@pytest.mark.parametrize("preset", ["su", "10k-gpu"])
def test_each_fault_touches_the_jobs_on_its_links(preset: str) -> None:
    scenario = build_scenario(preset, short=True)
    fabric = generate(preset)
    jobs = placements(fabric, scenario.jobs, T0)  # what `sim run --job` places
    ib = [e for e in scenario.expectations if e.fabric == scenario.ib_fabric]
    topology_faults = [parse_spec(e.spec) for e in ib if e.spec.startswith("swap:")]
    fmap = FabricMap.from_topology(fabric.to_topology(T0, fabric.discovered_links(
        topology_faults)))
    touched: dict[str, set[str]] = {}
    for expectation in ib:
        for key in expectation.ports:
            device, _, port = key.rpartition(":")
            touched.setdefault(expectation.label, set()).update(
                t.job for t in jobs_on_port(fmap, jobs, device, int(port), T0 + 1))
    assert touched["rising BER"] == {"train-a"}
    assert touched["slow-not-dead link"] == {"train-a"}
    assert touched["flapping link"] == {"train-b"}
    assert touched["link trained at 2X"] == {"train-b"}
    assert touched["swapped pair of cables"] == {"train-b"}
    assert all("eval-c" not in jobs for jobs in touched.values())


def test_jobs_touched_joins_detections_to_the_reports_episodes() -> None:
    detected = {"flap": {"f|leaf-su01-r3:5", "f|node0005/mlx5_3:1"}, "storm": {"g|x:1"}}
    touched = {"f|leaf-su01-r3:5": ["train-b"], "f|node0005/mlx5_3:1": ["train-b", "z"]}
    assert jobs_touched(detected, touched) == {"flap": ["train-b", "z"], "storm": []}
