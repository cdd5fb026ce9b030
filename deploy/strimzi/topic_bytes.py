"""Measure what the 100k-port simulator puts on each contract topic per sampling step.

The sizing of ``deploy/strimzi/topics.yaml`` (retention, broker disks) rests on these bytes:
raw JSON and compressed the way ``collectors.publish`` compresses (zstd, 512 KiB batches).
``python deploy/strimzi/topic_bytes.py [--steps 4]`` writes ``deploy/strimzi/topic-bytes.json``.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import cramjam
import orjson

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks._machine import machine_facts  # noqa: E402 - after the path is set
from collectors.publish import DEFAULT_BATCH_SIZE  # noqa: E402
from schemas import encode  # noqa: E402
from sim.telemetry import Simulator  # noqa: E402
from sim.topology import generate  # noqa: E402

OUT = Path(__file__).with_name("topic-bytes.json")


def compressed(values: list[bytes]) -> int:
    total, batch = 0, bytearray()
    for v in values:
        batch += v
        if len(batch) >= DEFAULT_BATCH_SIZE:
            total += len(bytes(cramjam.zstd.compress(bytes(batch))))
            batch.clear()
    if batch:
        total += len(bytes(cramjam.zstd.compress(bytes(batch))))
    return total


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="100k-port")
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args(argv)
    fabric = generate(args.preset)
    sim = Simulator(fabric)
    steps = sim.run_steps(args.steps)[1:]  # the first step also carries the topology
    raw: dict[str, int] = defaultdict(int)
    comp: dict[str, int] = defaultdict(int)
    count: dict[str, int] = defaultdict(int)
    for out in steps:
        by: dict[str, list[bytes]] = defaultdict(list)
        for m in out.messages:
            by[m.topic].append(m.value)
        for topic, values in by.items():
            raw[topic] += sum(len(v) for v in values)
            comp[topic] += compressed(values)
            count[topic] += len(values)
    n = len(steps)
    topo = encode(fabric.to_topology(0))
    doc = {
        "scenario": "topic_bytes",
        "command": f"python deploy/strimzi/topic_bytes.py --preset {args.preset} --steps {args.steps}",
        "preset": args.preset,
        "ports": fabric.port_count() if callable(fabric.port_count) else fabric.port_count,
        "interval_s": 10.0,
        "steps_measured": n,
        "per_step": {t: {"messages": count[t] / n, "bytes": raw[t] / n,
                         "zstd_bytes": comp[t] / n,
                         "ratio": round(raw[t] / comp[t], 2) if comp[t] else None}
                     for t in sorted(raw)},
        "topology_event": {"bytes": len(topo), "zstd_bytes": compressed([topo])},
        "machine": machine_facts(),
    }
    OUT.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")
    print(f"wrote {OUT}")  # noqa: T201 - a command-line tool's one line of output


if __name__ == "__main__":
    main()
