"""Benchmark: diff the 100k-port simulator fabric against its cable plan.

Run: .venv/bin/python benchmarks/topology_diff.py [--preset 100k-port] [--repeat 5]
Reports, for the simulator's ``100k-port`` preset (50,688 cables, 101,376 ports): loading the
plan CSV, the diff on a clean fabric and on one with injected faults (swapped pairs, missing
and degraded links), the stream tracker's step, parsing the fabric's ibnetdiscover output,
and the whole ``fabricwatch topology diff`` command as a subprocess. The floor is a bare
Python pass that indexes both sides by port end (what any O(links) diff must do at least),
measured in the same run, reported as a ratio.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._machine import write_result  # noqa: E402
from collectors.ibnetdiscover import parse_ibnetdiscover, parse_nodes  # noqa: E402
from schemas import Topology, encode  # noqa: E402
from schemas.policy import Policy  # noqa: E402
from sim.topology import Fabric, Link, generate  # noqa: E402
from streams.topology.logic import TrackerState, diff, step  # noqa: E402
from streams.topology.plan import load_plan  # noqa: E402

TS = 1_700_000_000_000


def best(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    """(median, min) wall seconds of ``repeat`` calls."""
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), min(times)


def faulty(fabric: Fabric, swaps: int, missing: int, degraded: int) -> list[Link]:
    rng = random.Random(7)
    links = list(fabric.links)
    picks = rng.sample(range(len(links)), 2 * swaps + missing + degraded)
    for n in range(swaps):
        i, j = picks[2 * n], picks[2 * n + 1]
        x, y = links[i], links[j]
        links[i] = dataclasses.replace(x, b_device=y.b_device, b_port=y.b_port)
        links[j] = dataclasses.replace(y, b_device=x.b_device, b_port=x.b_port)
    rest = picks[2 * swaps:]
    for i in rest[missing:]:
        links[i] = dataclasses.replace(links[i], width="2X")
    gone = set(rest[:missing])
    return [x for i, x in enumerate(links) if i not in gone]


def floor(plan_rows: list[tuple[str, int, str, int]], topology: Topology) -> None:
    planned = {}
    for a, ap, b, bp in plan_rows:
        planned[(a, ap)] = (b, bp)
        planned[(b, bp)] = (a, ap)
    found = {}
    for x in topology.links:
        found[(x.a_device, x.a_port)] = (x.b_device, x.b_port)
        found[(x.b_device, x.b_port)] = (x.a_device, x.a_port)
    sum(1 for end, peer in planned.items() if found.get(end) == peer)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="100k-port")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    policy = Policy()

    fabric = generate(args.preset)
    plan_csv = fabric.to_plan_csv()
    plan_load_s, _ = best(lambda: load_plan(plan_csv), args.repeat)
    plan = load_plan(plan_csv)
    clean = fabric.to_topology(TS)
    swaps, missing, degraded = 100, 50, 50
    broken = fabric.to_topology(TS, faulty(fabric, swaps, missing, degraded))

    clean_s, clean_min = best(lambda: diff(plan, clean, policy), args.repeat)
    faulty_s, faulty_min = best(lambda: diff(plan, broken, policy), args.repeat)
    report = diff(plan, broken, policy)
    assert diff(plan, clean, policy).ok
    assert report.summary["swap_groups"] == swaps
    assert report.summary["missing_link"] == missing
    assert report.summary["degraded_link"] == degraded
    assert report.summary["miswire"] == 2 * swaps
    assert report.summary["unexpected_link"] == 0

    state = step(TrackerState(), broken, plan, policy).state
    step_s, _ = best(lambda: step(state, broken, plan, policy), args.repeat)

    rows = [(x.a_device, x.a_port, x.b_device, x.b_port) for x in plan.links]
    floor_s, _ = best(lambda: floor(rows, clean), args.repeat)

    text = fabric.to_ibnetdiscover()
    parse_s, _ = best(lambda: parse_ibnetdiscover(text, fabric="bench", ts=TS),
                      max(1, args.repeat // 2))
    nodes_s, _ = best(lambda: parse_nodes(text), max(1, args.repeat // 2))

    with tempfile.TemporaryDirectory() as tmp:
        plan_path = Path(tmp) / "plan.csv"
        plan_path.write_text(plan_csv)
        ibn_path = Path(tmp) / "fabric.ibnetdiscover"
        ibn_path.write_text(fabric.to_ibnetdiscover(faulty(fabric, swaps, missing, degraded)))
        json_path = Path(tmp) / "topology.json"
        json_path.write_bytes(encode(broken))
        cli = [str(ROOT / ".venv" / "bin" / "fabricwatch"), "topology", "diff", "--plan",
               str(plan_path), "--discovered"]

        def run(path: Path) -> None:
            done = subprocess.run([*cli, str(path)], capture_output=True, check=False)
            assert done.returncode == 1, done.stderr[-500:]

        cli_ibn_s, _ = best(lambda: run(ibn_path), 3)
        cli_json_s, _ = best(lambda: run(json_path), 3)

    figures = {
        # Other work on the machine skews absolute figures; the ratio to the floor holds.
        "load_avg_1m_at_end": round(os.getloadavg()[0], 2),
        "preset": args.preset,
        "links": len(fabric.links),
        "ports": 2 * len(fabric.links),
        "injected": {"swapped_pairs": swaps, "missing": missing, "degraded": degraded},
        "findings": report.summary["findings"],
        "plan_load_s": round(plan_load_s, 3),
        "diff_clean_s": round(clean_s, 3),
        "diff_clean_min_s": round(clean_min, 3),
        "diff_faulty_s": round(faulty_s, 3),
        "diff_faulty_min_s": round(faulty_min, 3),
        "links_per_s": round(len(fabric.links) / faulty_s),
        "tracker_step_s": round(step_s, 3),
        "floor_index_both_sides_s": round(floor_s, 3),
        "ratio_diff_to_floor": round(faulty_s / floor_s, 2),
        "parse_ibnetdiscover_s": round(parse_s, 3),
        "parse_nodes_s": round(nodes_s, 3),
        "ibnetdiscover_bytes": len(text),
        "cli_ibnetdiscover_wall_s": round(cli_ibn_s, 2),
        "cli_json_event_wall_s": round(cli_json_s, 2),
    }
    command = f"python benchmarks/topology_diff.py --preset {args.preset} --repeat {args.repeat}"
    path = write_result("topology_diff", figures, command)
    for k, v in figures.items():
        print(f"{k}: {v}")
    print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
