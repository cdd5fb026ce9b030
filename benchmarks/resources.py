"""Benchmark: CPU and resident memory of every fabricwatch process at steady state, per 10,000 ports.

Run: .venv/bin/python benchmarks/resources.py [--preset 10k-gpu] [--interval 10s]
     [--warmup 45] [--seconds 75] [--profile-seconds 30]

Scenario 6 (and the profiles behind BENCHMARKS.md). On free ports in a temporary state
folder it starts the local stack (the Kafka broker JVM and the Temporal dev server,
``fabricwatch.stack.LocalStack``) and the processes the demo runs (``fabricwatch.demo.run``):
the ledger owner (``ledger serve --ingest``, the embedded chdb ledger's one writer), the
stream worker (``worker --no-ledger``: the ledger owner writes), the runbook worker and the
simulator at ``--preset`` publishing every ``--interval``. After ``--warmup`` seconds it
samples each process tree with psutil every 2 s for ``--seconds``: CPU as cores (CPU
seconds over wall seconds, children included) and resident memory (mean and max of the
tree's RSS), absolute and per 10,000 ports. Then it reads the stream worker's consumer lag
on ``fabric.counters`` every few seconds for ``--lag-seconds`` (a series: the simulator
publishes each step as a burst, so one reading says little; a flat or falling series
means the worker keeps up, a rising one that it falls behind).

Then, unless ``--profile-seconds 0``, py-spy records the stream worker and the ledger owner
at the same time (``--nonblocking``, 100 Hz) and the top frames by own time and by
inclusive time are written to the result (``profiles``), with the raw collapsed stacks in
the temporary folder only. Every child runs in its own process group and is stopped on the
way out; the stack is stopped last.

Writes benchmarks/results/resources.json.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks import streams_bench as sb  # noqa: E402
from benchmarks._machine import save_and_print  # noqa: E402
from fabricwatch.procs import ChildProcess  # noqa: E402

PY_SPY = Path(sys.executable).parent / "py-spy"
FRAME = re.compile(r"^(?P<fn>.*?) \((?P<file>[^()]*?)(?::\d+)?\)$")


def tree(pid: int) -> list[psutil.Process]:
    try:
        p = psutil.Process(pid)
        return [p, *p.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def cpu_seconds(procs: list[psutil.Process]) -> dict[int, float]:
    out = {}
    for p in procs:
        try:
            t = p.cpu_times()
            out[p.pid] = t.user + t.system
        except psutil.NoSuchProcess:
            continue
    return out


def rss(procs: list[psutil.Process]) -> int:
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return total


def sample(pids: dict[str, int], seconds: float, every: float = 2.0) -> dict[str, Any]:
    trees = {name: tree(pid) for name, pid in pids.items()}
    c0 = {name: cpu_seconds(t) for name, t in trees.items()}
    t0 = time.perf_counter()
    mem: dict[str, list[int]] = {name: [] for name in pids}
    while time.perf_counter() - t0 < seconds:
        for name, pid in pids.items():
            trees[name] = tree(pid)  # children may come and go
            mem[name].append(rss(trees[name]))
        time.sleep(every)
    wall = time.perf_counter() - t0
    out = {}
    for name, t in trees.items():
        c1 = cpu_seconds(t)
        used = sum(v - c0[name].get(pid, 0.0) for pid, v in c1.items())
        out[name] = {"cpu_cores": round(used / wall, 3), "processes": len(t),
                     "rss_mib_mean": round(sum(mem[name]) / max(1, len(mem[name])) / 2**20, 1),
                     "rss_mib_max": round(max(mem[name], default=0) / 2**20, 1)}
    return out


# Frames that are only the way in (event loop, CLI, thread pools) are left out of the
# inclusive ranking: they are in nearly every sample and say nothing about the cost.
PLUMBING = ("asyncio/", "click/", "<frozen", "runpy", "mode/", "fabricwatch/__main__",
            "fabricwatch/commands/", "concurrent/", "threading.py", "selectors.py")


def top_frames(raw: Path, n: int = 12) -> dict[str, Any]:
    """Own-time and inclusive-time top frames from py-spy's collapsed (raw) stacks.

    Shares are of the samples py-spy took while a thread was running (idle is excluded).
    """
    own: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count_s = line.rpartition(" ")
        if not stack or not count_s.isdigit():
            continue
        count = int(count_s)
        total += count
        frames = []
        for f in stack.split(";"):
            m = FRAME.match(f.strip())
            frames.append((m["fn"], _short(m["file"])) if m else (f.strip(), ""))
        own[f"{frames[-1][0]} ({frames[-1][1]})"] += count  # where the sample landed
        for name in {f"{fn} ({file})" for fn, file in frames
                     if not any(p in file for p in PLUMBING)}:
            incl[name] += count

    def fmt(c: collections.Counter[str]) -> list[dict[str, Any]]:
        return [{"frame": k, "share": round(v / max(1, total), 3)} for k, v in c.most_common(n)]

    return {"samples": total, "own": fmt(own), "inclusive": fmt(incl)}


def _short(path: str) -> str:
    for marker in ("site-packages/", f"{REPO}/", "python3.11/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


def start_profiles(pids: dict[str, int], seconds: int, out_dir: Path
                   ) -> dict[str, tuple[subprocess.Popen[bytes], Path]]:
    """py-spy record each pid for ``seconds`` (nonblocking: the target is never paused)."""
    procs = {}
    for name, pid in pids.items():
        raw = out_dir / f"{name}.collapsed"
        args = [str(PY_SPY), "record", "--pid", str(pid), "--duration", str(seconds),
                "--rate", "100", "--nonblocking", "--format", "raw", "--output", str(raw)]
        procs[name] = (subprocess.Popen(args, stdout=subprocess.DEVNULL,  # noqa: S603 - fixed argv
                                        stderr=subprocess.PIPE), raw)
    return procs


def finish_profiles(procs: dict[str, tuple[subprocess.Popen[bytes], Path]], seconds: int
                    ) -> dict[str, Any]:
    out = {}
    for name, (proc, raw) in procs.items():
        _, err = proc.communicate(timeout=seconds + 120)
        if proc.returncode != 0 or not raw.exists():
            out[name] = {"error": err.decode(errors="replace")[-500:]}
        else:
            out[name] = top_frames(raw)
            if keep := os.environ.get("FABRICWATCH_BENCH_KEEP_PROFILES"):  # for a closer look
                shutil.copy(raw, Path(keep) / raw.name)
    return out


def profile(pids: dict[str, int], seconds: int, out_dir: Path) -> dict[str, Any]:
    return finish_profiles(start_profiles(pids, seconds, out_dir), seconds)


async def lags(bootstrap: str, groups: dict[str, str]) -> dict[str, int]:
    tps, end = await sb.end_offsets(bootstrap, "fabric.counters")
    return {name: end - await sb.committed_total(bootstrap, g, tps) for name, g in groups.items()}


def run(args: argparse.Namespace, state: Path) -> dict[str, Any]:
    from fabricwatch.stack import LocalStack
    from fabricwatch.stack_config import free_ports
    from runtime.settings import KafkaSettings, LedgerSettings, Settings, TemporalSettings
    from sim.topology import generate

    fabric = generate(args.preset)
    ports = fabric.port_count()
    (state / "ibnetdiscover.txt").write_text(fabric.to_ibnetdiscover())
    ka, kc, tp, tu, lh = free_ports(5)
    settings = Settings(state_dir=state / "stack",
                        kafka=KafkaSettings(port=ka, controller_port=kc),
                        temporal=TemporalSettings(port=tp, ui_port=tu),
                        ledger=LedgerSettings(http_port=lh))
    stack = LocalStack(settings, timeout=240)
    children: list[ChildProcess] = []
    statuses = stack.up()
    try:
        pids = {s.name: s.pid for s in statuses if s.pid}
        env = {**os.environ, "FABRICWATCH_STATE_DIR": str(state),
               "FABRICWATCH_KAFKA__BOOTSTRAP": settings.kafka.bootstrap_servers,
               "FABRICWATCH_TEMPORAL__ADDRESS": settings.temporal.target,
               "FABRICWATCH_LEDGER__HTTP_PORT": str(lh), "PYTHONUNBUFFERED": "1"}
        app_id = "res-worker"

        def child(name: str, *argv: str) -> None:
            c = ChildProcess(name, [sys.executable, "-m", "fabricwatch", *argv],
                             state / "logs" / f"{name}.log", env=env, cwd=state)
            children.append(c.start())

        child("ledger", "ledger", "serve", "--ingest")
        child("worker", "worker", "--no-ledger", "--app-id", app_id)
        child("runbooks", "runbook-worker", "--records", "kafka", "--topology",
              str(state / "ibnetdiscover.txt"))
        child("sim", "sim", "run", "--preset", args.preset, "--interval", args.interval,
              "--state-dir", str(state / "sim"))
        time.sleep(args.warmup)
        for c in children:
            if not c.running:
                raise RuntimeError(f"{c.name} exited {c.returncode}:\n{c.tail(30)}")
            assert c.proc is not None  # noqa: S101 - started above
            pids[c.name] = c.proc.pid
        load0 = os.getloadavg()[0]
        procs = sample(pids, args.seconds)
        load1 = os.getloadavg()[0]
        # the simulator publishes a step in a burst, so one reading can land on a burst:
        # a series over several intervals says whether the worker keeps up
        groups = {"worker": app_id}
        lag_series: list[int] = []
        t_end = time.monotonic() + args.lag_seconds
        while time.monotonic() < t_end:
            lag_series.append(asyncio.run(lags(settings.kafka.bootstrap_servers,
                                               groups))["worker"])
            time.sleep(2)
        profiles: dict[str, Any] = {}
        if args.profile_seconds > 0 and PY_SPY.exists():
            profiles = profile({"worker": pids["worker"], "ledger": pids["ledger"]},
                               args.profile_seconds, state)
    finally:
        for c in reversed(children):  # the simulator first, the ledger owner last
            c.stop()
        stack.down()
    per10k = ports / 10_000
    for v in procs.values():
        v["cpu_cores_per_10k_ports"] = round(v["cpu_cores"] / per10k, 4)
        v["rss_mib_per_10k_ports"] = round(v["rss_mib_mean"] / per10k, 1)
    total_cpu = sum(v["cpu_cores"] for v in procs.values())
    total_rss = sum(v["rss_mib_mean"] for v in procs.values())
    return {
        "preset": args.preset, "ports": ports, "interval": args.interval,
        "port_samples_per_s_offered": round(ports / _seconds(args.interval)),
        "warmup_s": args.warmup, "steady_s": args.seconds,
        "processes": procs,
        "total_cpu_cores": round(total_cpu, 3),
        "total_rss_mib": round(total_rss, 1),
        "total_cpu_cores_per_10k_ports": round(total_cpu / per10k, 4),
        "total_rss_mib_per_10k_ports": round(total_rss / per10k, 1),
        "worker_counters_lag_messages": lag_series,
        "worker_counters_lag_min": min(lag_series),
        "load_average_1m": [round(load0, 2), round(load1, 2)],
        "profile_seconds": args.profile_seconds,
        "profiles": profiles,
    }


def _seconds(text: str) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m)?", text.strip())
    if not m:
        raise SystemExit(f"bad interval {text!r}")
    return float(m[1]) * {"ms": 0.001, "s": 1, "m": 60, None: 1}[m[2]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="10k-gpu")
    parser.add_argument("--interval", default="10s")
    parser.add_argument("--warmup", type=float, default=45.0)
    parser.add_argument("--seconds", type=float, default=75.0)
    parser.add_argument("--profile-seconds", type=int, default=30)
    parser.add_argument("--lag-seconds", type=float, default=60.0,
                        help="how long to follow the worker's consumer lag after sampling")
    args = parser.parse_args()
    _seconds(args.interval)
    if shutil.which("java") is None:
        raise SystemExit("the broker needs java")
    with tempfile.TemporaryDirectory(prefix="fw-resources-") as tmp:
        figures = run(args, Path(tmp))
    save_and_print("resources", figures)


if __name__ == "__main__":
    main()
