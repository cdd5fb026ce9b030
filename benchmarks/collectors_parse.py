"""Benchmark: collector parse throughput on real and simulator-scale tool output.

Run: .venv/bin/python benchmarks/collectors_parse.py [--repeat 3]
Measures, best of ``--repeat``:
- ``ibnetdiscover`` of the real Selene compute fabric (55,750 lines, 12,852 links) and of
  the simulator's ``100k-port`` fabric (11 MB), to one topology event, plus its encoded and
  lz4-compressed size (what the broker has to accept as one message);
- ``perfquery`` of 4,096 port blocks (a real ``-x`` block repeated over the fat tree's 40
  switch LIDs and 64 ports; repeats of a LID and port merge into one sample), resolved
  through a LidMap;
- ``iblinkinfo`` of the whole ibsim fat tree.
The floor is ``str.splitlines`` over the same text in the same run (``ratio_to_floor``).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cramjam

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._machine import write_result  # noqa: E402
from collectors.ibdiags import parse_iblinkinfo, parse_perfquery  # noqa: E402
from collectors.ibnetdiscover import parse_ibnetdiscover, parse_nodes  # noqa: E402
from collectors.lidmap import LidMap  # noqa: E402
from schemas import encode  # noqa: E402
from sim.topology import generate  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures"


def best(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), result


def topology_figures(name: str, text: str, repeat: int) -> dict[str, Any]:
    seconds, topo = best(lambda: parse_ibnetdiscover(text, fabric="bench", ts=1), repeat)
    floor, _ = best(text.splitlines, repeat)
    wire = encode(topo)
    return {
        f"{name}_lines": text.count("\n"),
        f"{name}_links": len(topo.links),
        f"{name}_parse_s": round(seconds, 3),
        f"{name}_lines_per_s": round(text.count("\n") / seconds),
        f"{name}_ratio_to_floor": round(seconds / floor, 1),
        f"{name}_event_bytes": len(wire),
        f"{name}_event_lz4_bytes": len(bytes(cramjam.lz4.compress_block(wire))),
        f"{name}_event_zstd_bytes": len(bytes(cramjam.zstd.compress(wire))),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    figures: dict[str, Any] = {}

    selene = (FIXTURES / "ibnetdiscover" / "ufm-sdk-selene-compute-hdr.txt").read_text()
    figures.update(topology_figures("selene", selene, args.repeat))
    sim_text = generate("100k-port").to_ibnetdiscover()
    figures.update(topology_figures("sim100k", sim_text, args.repeat))

    block = (FIXTURES / "perfquery" / "extended-switch-port-edr.txt").read_text()
    fattree = (FIXTURES / "ibnetdiscover" / "topograph-ndr-fattree.txt").read_text()
    lids = LidMap.from_nodes(parse_nodes(fattree))
    switch_lids = [lid for lid in range(1, 2000) if (t := lids.by_lid(lid)) and t.port is None]
    def port_of(i: int) -> int:
        return 1 + (i // len(switch_lids)) % 64

    blocks = [block.replace("Lid 2052 port 1", f"Lid {switch_lids[i % len(switch_lids)]} "
                                               f"port {port_of(i)}")
              .replace("PortSelect:......................1",
                       f"PortSelect:......................{port_of(i)}")
              for i in range(4096)]
    text = "".join(blocks)
    seconds, events = best(lambda: parse_perfquery(text, fabric="bench", ts=1, lids=lids),
                           args.repeat)
    samples = sum(len(e.ports) for e in events)
    figures.update({"perfquery_port_blocks": 4096, "perfquery_port_samples": samples,
                    "perfquery_parse_s": round(seconds, 3),
                    "perfquery_blocks_per_s": round(4096 / seconds),
                    "perfquery_port_samples_per_s": round(samples / seconds)})

    linkinfo = (FIXTURES / "iblinkinfo" / "ibsim-ndr-fattree-grouped.txt").read_text()
    seconds, events = best(lambda: parse_iblinkinfo(linkinfo, fabric="bench", ts=1),
                           args.repeat)
    ports = sum(len(e.ports) for e in events)
    figures.update({"iblinkinfo_ports": ports, "iblinkinfo_parse_s": round(seconds, 3),
                    "iblinkinfo_ports_per_s": round(ports / seconds)})

    command = f".venv/bin/python benchmarks/collectors_parse.py --repeat {args.repeat}"
    path = write_result("collectors_parse", figures, command)
    for key, value in figures.items():
        print(f"{key:32} {value}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
