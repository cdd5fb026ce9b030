"""The ibdiags poller and the trap scan against the real tools on an ibsim fabric.

Brings up the lab (ibsim + opensm) on a simulator preset, then times: opensm to SUBNET UP,
one ``ibnetdiscover`` + parse (``IbdiagsPoller.discover``), sampling rounds (perfquery and
perfquery -x per switch at the given concurrency, plus one fabric-wide ibqueryerrors), and
the follower's ``iblinkinfo --switches-only -l`` port scan. Events go to an in-memory sink
(the broker is measured elsewhere); what is measured is the tools and the parsing.

    .venv/bin/python benchmarks/lab_ibdiags.py --preset 10k-gpu --rounds 2 --concurrency 8
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._machine import write_result  # noqa: E402
from collectors.live.poll_ibdiags import IbdiagsPoller, PollConfig  # noqa: E402
from collectors.live.tail_opensm import PortScan  # noqa: E402
from fabricwatch.lab import LabStack  # noqa: E402
from sim.topology import generate  # noqa: E402


class Sink:
    def __init__(self) -> None:
        self.events = 0
        self.ports = 0

    async def send(self, event: Any) -> None:
        self.events += 1

    async def send_many(self, events: Any) -> None:
        for e in events:
            self.events += 1
            self.ports += len(getattr(e, "ports", []))

    async def flush(self) -> None:
        return None


async def measure(lab: LabStack, rounds: int, concurrency: int) -> dict[str, Any]:
    runner = lab.tool_runner()
    sink = Sink()
    poller = IbdiagsPoller(PollConfig(fabric="bench", concurrency=concurrency, timeout_s=60,
                                      discover_timeout_s=900), sink, runner)
    t = time.monotonic()
    topo = await poller.discover()
    discover_s = time.monotonic() - t
    round_s, failed = [], 0
    for _ in range(rounds):
        sink.ports = 0
        rep = await poller.sample()
        round_s.append(rep.elapsed_s)
        failed += len(rep.failed)
    scan = PortScan(runner, "bench", timeout_s=900)
    t = time.monotonic()
    states = await scan(None)
    scan_s = time.monotonic() - t
    return {"links": len(topo.links), "switches": len(poller.targets),
            "discover_s": round(discover_s, 2), "round_s": [round(x, 2) for x in round_s],
            "round_median_s": round(statistics.median(round_s), 2),
            "port_samples_per_round": sink.ports,
            "port_samples_per_s": round(sink.ports / statistics.median(round_s)),
            "failed_switches": failed, "concurrency": concurrency,
            "iblinkinfo_scan_s": round(scan_s, 2), "switch_ports_scanned": len(states)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="10k-gpu")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--concurrency", type=int, default=8)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        net = Path(tmp) / "fabric.net"
        net.write_text(generate(args.preset).to_ibnetdiscover(), encoding="utf-8")
        lab = LabStack(Path(tmp) / "state")
        t = time.monotonic()
        status = lab.up(net, timeout_s=900)
        up_s = time.monotonic() - t
        try:
            figures = asyncio.run(measure(lab, args.rounds, args.concurrency))
        finally:
            lab.down()
    figures = {"preset": args.preset, "nodes": status["nodes"], "lab_up_s": round(up_s, 1),
               **figures}
    command = (f".venv/bin/python benchmarks/lab_ibdiags.py --preset {args.preset} "
               f"--rounds {args.rounds} --concurrency {args.concurrency}")
    path = write_result(f"lab_ibdiags_{args.preset}", figures, command)
    print(path.read_text())


if __name__ == "__main__":
    main()
