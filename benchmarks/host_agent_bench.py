"""Benchmark: the host agent's CPU per host at a 1 s interval on 8 HCA ports.

Run: .venv/bin/python benchmarks/host_agent_bench.py [--seconds 30] [--rounds 300]

The sysfs tree is built from the real sysfs fixture (an H100 node's ``mlx5_0``: 24
``counters/*``, 27 ``hw_counters/*``, state, phys_state, rate, link_layer) repeated for
``mlx5_0..7``, on the machine's disk (real sysfs is in memory and costs a syscall per
attribute just the same). Two figures:

1. ``fabricwatch agent --interval 1 --print`` as a process for ``--seconds`` (stdout to
   /dev/null): its user+system CPU from ``/proc/<pid>/stat`` over the steady part (after
   a 3 s warm-up) divided by the wall time = the share of one core, and its RSS.
2. ``HostAgent.round()`` in-process, ``--rounds`` times: CPU ms per round (read 8 ports,
   build and validate the contract message) and the same plus ``schemas.encode``; and a
   RoCE round (8 Ethernet ports, each with ``ethtool -S`` run as a subprocess; the
   stand-in prints the real ethtool capture, so the figure is the agent's own cost of the
   spawn and parse, without the NIC driver's; the children's own CPU is reported apart).

Publishing (aiokafka) is not in figure 1: one ~25 KB message a second adds little to it.
Writes benchmarks/results/host_agent.json.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import resource
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._machine import save_and_print  # noqa: E402
from collectors.live.host_agent import AgentConfig, HostAgent  # noqa: E402
from schemas import encode  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
FABRICWATCH = str(Path(sys.executable).parent / "fabricwatch")
_spec = importlib.util.spec_from_file_location("sysfs_tree", ROOT / "tests" / "sysfs_tree.py")
assert _spec is not None and _spec.loader is not None
tree = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tree)
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def process_figures(sysfs: Path, seconds: float) -> dict[str, Any]:
    proc = subprocess.Popen([FABRICWATCH, "agent", "--sysfs-root", str(sysfs), "--host",
                             "node0042", "--interval", "1", "--print"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(3)  # imports and the first rounds
        c0, t0 = cpu_s(proc.pid), time.monotonic()
        time.sleep(seconds)
        c1, t1 = cpu_s(proc.pid), time.monotonic()
        rss = rss_mib(proc.pid)
    finally:
        proc.terminate()
        proc.wait(30)
    share = (c1 - c0) / (t1 - t0)
    return {"process_cpu_share_of_one_core": round(share, 4),
            "process_cpu_ms_per_s": round(share * 1000, 1),
            "process_rss_mib": rss, "process_seconds_measured": round(t1 - t0, 1)}


def children_cpu_s() -> float:
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def rounds_figures(agent: HostAgent, rounds: int) -> dict[str, float]:
    async def go() -> tuple[float, float, int, float]:
        await agent.round()  # warm
        c0, k0 = time.process_time(), children_cpu_s()
        for _ in range(rounds):
            await agent.round()
        c1, k1 = time.process_time(), children_cpu_s()
        size = 0
        for _ in range(rounds):
            size = len(encode((await agent.round())[0]))
        c2 = time.process_time()
        return (c1 - c0) / rounds, (c2 - c1) / rounds, size, (k1 - k0) / rounds

    read_s, read_encode_s, size, child_s = asyncio.run(go())
    return {"cpu_ms_per_round": round(read_s * 1000, 2),
            "cpu_ms_per_round_with_encode": round(read_encode_s * 1000, 2),
            "child_processes_cpu_ms_per_round": round(child_s * 1000, 2),
            "message_bytes": size}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--rounds", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fw-agent-bench-") as tmp:
        base = Path(tmp)
        tree.build(base / "ib", hcas=8)
        tree.build(base / "roce", hcas=8, ethernet=set(range(8)))
        ethtool = base / "ethtool"
        ethtool.write_text(f"#!/bin/sh\nexec cat {tree.ETHTOOL_S}\n")
        ethtool.chmod(ethtool.stat().st_mode | stat.S_IEXEC)
        ib_agent = HostAgent(AgentConfig(fabric="bench", host="node0042",
                                         sysfs_root=base / "ib"))
        roce_agent = HostAgent(AgentConfig(fabric="bench", host="node0042",
                                           sysfs_root=base / "roce", ethtool=str(ethtool)))
        ib = rounds_figures(ib_agent, args.rounds)
        roce = rounds_figures(roce_agent, max(20, args.rounds // 10))
        proc = process_figures(base / "ib", args.seconds)
    figures = {
        "ports": 8, "interval_s": 1.0, "files_per_port": len(tree.dump_lines()) - 3,
        **proc,
        "infiniband": ib,
        "roce_with_ethtool_subprocess": roce,
        "load_average_1m_at_end": round(os.getloadavg()[0], 2),
    }
    save_and_print("host_agent", figures)


if __name__ == "__main__":
    main()
