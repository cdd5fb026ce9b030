"""Benchmark: what Faust's event loop costs by itself, between the bare consumer and the worker.

Run: .venv/bin/python benchmarks/faust_floor.py [--ports 50000] [--intervals 12] [--columnar]
     [--ports-per-message 64] [--bootstrap HOST:PORT]
     [--batched] [--before TREE --rounds 3]

The stream worker's counters rate is ~0.1 of a bare aiokafka consumer that decodes the same
messages. This run splits that gap in one sitting, on one broker and the same messages
(``benchmarks/streams_bench.py``'s 64-port device batches):

1. ``bare``: aiokafka ``getmany`` + ``schemas.decode`` of every message (no group);
2. ``faust_events``: a Faust app (the worker's consumer settings, no tables) whose one agent
   iterates ``stream.events()`` and does nothing with them: Faust's own per-event cost;
3. ``faust_decode``: the same agent running ``schemas.decode`` on every event;
4. ``worker``: ``fabricwatch worker --no-ledger`` (every detector, its tables and changelogs);
5. ``worker_batched`` (``--batched``): the same with the counters off Faust's stream
   (``FABRICWATCH_STREAMS__COUNTERS_BATCHED``, ``streams/counters/batched.py``), timed to
   its own group's committed end.

Each Faust process is timed from its agent's first event to its committed offsets reaching
the end of the topic, and charged the CPU seconds of its process over the same span; the
bare consumer its own process CPU. Every figure is port-samples per CPU-second; the ratios
to ``bare`` say which share of the worker's gap is Faust's event loop and which is
fabricwatch's work per message.

With ``--before TREE`` (an unpacked ``git archive`` of another revision) it runs only the
batched worker, that tree's and this one's in turns, ``--rounds`` each, on the same
messages, and reports each run's CPU per message and the ratio of the medians.

Writes benchmarks/results/faust_floor.json (``--scenario`` names another).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import streams_bench as sb  # noqa: E402
from benchmarks._machine import save_and_print  # noqa: E402

READY = "faust floor: first event"
HERE = Path(__file__).resolve().parent.parent  # this tree, the "after" of --before


def child(mode: str, bootstrap: str, app_id: str, datadir: str) -> None:
    """A Faust app with one agent over ``fabric.counters`` (the worker's consumer settings)."""
    import faust

    from schemas import ContractError, decode

    app = faust.App(app_id, broker=f"kafka://{bootstrap}", store="memory://",
                    datadir=datadir, web_enabled=False, key_serializer="raw",
                    value_serializer="raw", consumer_auto_offset_reset="earliest",
                    stream_wait_empty=False, stream_buffer_maxsize=256,
                    broker_commit_interval=1.0)
    topic = app.topic("fabric.counters", key_type=bytes, value_type=bytes,
                      key_serializer="raw", value_serializer="raw")

    @app.agent(topic, name="floor")
    async def floor(stream: Any) -> None:
        first = True
        async for event in stream.events():
            if first:
                print(READY, flush=True)
                first = False
            if mode == "decode":
                try:
                    decode(event.value)
                except ContractError:
                    pass

    sys.argv = [sys.argv[0], "worker", "--loglevel", "warn", "--without-web"]
    app.main()


class FaustProc:
    def __init__(self, mode: str, bootstrap: str, state: Path) -> None:
        self.app_id = f"floor-{mode}-{uuid.uuid4().hex[:8]}"
        self.log = state / f"{self.app_id}.log"
        datadir = state / self.app_id
        datadir.mkdir()
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, __file__, "--child", mode, "--bootstrap", bootstrap,
                 "--app-id", self.app_id, "--datadir", str(datadir)],
                stdout=out, stderr=subprocess.STDOUT, cwd=state)

    def wait_first_event(self, timeout: float = 180) -> tuple[float, float]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if READY.encode() in self.log.read_bytes():
                return time.perf_counter(), sb.cpu_seconds(self.proc.pid)
            if self.proc.poll() is not None:
                raise RuntimeError(self.log.read_bytes()[-3000:].decode(errors="replace"))
            time.sleep(0.01)
        raise RuntimeError(f"{self.app_id}: no event in {timeout} s")

    stop = sb.WorkerProc.stop  # terminate, then kill (it reads only ``self.proc``)


async def until_committed(proc: Any, app_id: str, bootstrap: str, tps: list[Any],
                          end_total: int) -> list[tuple[float, int]]:
    """Wait for the group's committed offsets to reach the end; the (time, total) of each
    commit seen on the way."""
    steps: list[tuple[float, int]] = []
    while True:
        done = await sb.committed_total(bootstrap, app_id, tps)
        if not steps or done != steps[-1][1]:
            steps.append((time.perf_counter(), done))
        if done >= end_total:
            return steps
        if proc.poll() is not None:
            raise RuntimeError(f"{app_id} exited")
        await asyncio.sleep(0.1)


def between_commits(steps: list[tuple[float, int]], samples_per_message: int) -> int | None:
    """Port-samples/s between the first commit and the last, None with fewer than three: the
    rate of a worker under way, without its start (group join, first sight of every device)
    or the wait for its last commit (the batched consumer commits every few seconds)."""
    moved = [(t, n) for t, n in steps if n > 0]
    if len(moved) < 3:
        return None
    (t0, n0), (t1, n1) = moved[0], moved[-1]
    return round((n1 - n0) * samples_per_message / (t1 - t0))


async def faust_run(mode: str, bootstrap: str, state: Path, tps: list[Any], end_total: int,
                    samples: int) -> dict[str, Any]:
    faust_proc = FaustProc(mode, bootstrap, state)
    try:
        t0, cpu0 = await asyncio.to_thread(faust_proc.wait_first_event)
        await until_committed(faust_proc.proc, faust_proc.app_id, bootstrap, tps, end_total)
        wall, cpu = time.perf_counter() - t0, sb.cpu_seconds(faust_proc.proc.pid) - cpu0
    finally:
        faust_proc.stop()
    return figures(wall, cpu, samples)


def figures(wall: float, cpu: float, samples: int) -> dict[str, Any]:
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
            "port_samples_per_s": round(samples / wall),
            "port_samples_per_cpu_s": round(samples / max(cpu, 1e-9))}


async def worker_run(bootstrap: str, state: Path, tps: list[Any], end_total: int,
                     samples: int, batched: bool = False, tree: Path | None = None
                     ) -> dict[str, Any]:
    app_id = f"floor-worker-{uuid.uuid4().hex[:8]}"
    env = {"FABRICWATCH_STREAMS__COUNTERS_BATCHED": "true"} if batched else {}
    if tree is not None:  # the worker's code from that tree (an unpacked ``git archive``)
        env["PYTHONPATH"] = str(tree)
    worker = sb.WorkerProc(bootstrap, state, app_id, ledger=False, extra_env=env)
    try:
        t0 = await asyncio.to_thread(worker.wait_ready)
        cpu0 = sb.cpu_seconds(worker.proc.pid)
        # the batched consumer's own group (streams/counters/batched.py)
        steps = await until_committed(worker.proc,
                                      f"{app_id}-counters" if batched else app_id,
                                      bootstrap, tps, end_total)
        wall, cpu = time.perf_counter() - t0, sb.cpu_seconds(worker.proc.pid) - cpu0
    finally:
        worker.stop()
    return {**figures(wall, cpu, samples),
            "between_commits_port_samples_per_s": between_commits(steps, sb.PORTS_PER_DEVICE),
            "commits_seen": len(steps)}


async def before_after(args: argparse.Namespace, state: Path, bootstrap: str, tps: list[Any],
                       end_total: int, samples: int) -> dict[str, Any]:
    """The batched worker of ``--before`` and of this tree in turns, ``--rounds`` each, on
    the same messages: CPU per message of each run, and after / before of the medians."""
    sides: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    for _ in range(args.rounds):
        for side, tree in (("before", args.before), ("after", HERE)):
            run_ = await worker_run(bootstrap, state, tps, end_total, samples, batched=True,
                                    tree=tree)
            run_["cpu_us_per_message"] = round(run_["cpu_s"] / end_total * 1e6, 1)
            sides[side].append(run_)
    median = {side: statistics.median(r["cpu_us_per_message"] for r in runs)
              for side, runs in sides.items()}
    return {"before_tree": str(args.before), "rounds": args.rounds, "worker_batched": sides,
            "median_cpu_us_per_message": median,
            "after_to_before_cpu": round(median["after"] / median["before"], 3)}


async def run(args: argparse.Namespace, state: Path, bootstrap: str) -> dict[str, Any]:
    devices = sb.devices_for(args.ports)
    base = int(time.time() * 1000) - 3 * 3600_000
    messages = await sb.produce_counters(bootstrap, devices, args.intervals, base)
    tps, end_total = await sb.end_offsets(bootstrap, "fabric.counters")
    if args.before is not None:
        samples = messages * sb.PORTS_PER_DEVICE
        return {"ports": len(devices) * sb.PORTS_PER_DEVICE, "intervals": args.intervals,
                "ports_per_message": sb.PORTS_PER_DEVICE, "messages": messages,
                "port_samples": samples,
                "message_form": "counter_columns" if sb.COLUMNAR else "counters",
                **await before_after(args, state, bootstrap, tps, end_total, samples),
                "load_average_1m_at_end": round(os.getloadavg()[0], 2)}
    bare_s, samples = await sb.bare_throughput(bootstrap, end_total)
    bare_cpu = sb.BARE_CPU[1] - sb.BARE_CPU[0]
    out: dict[str, Any] = {
        "ports": len(devices) * sb.PORTS_PER_DEVICE, "intervals": args.intervals,
        "ports_per_message": sb.PORTS_PER_DEVICE,
        "messages": messages, "port_samples": samples,
        "message_form": "counter_columns" if sb.COLUMNAR else "counters",
        "bare": {"wall_s": round(bare_s, 2), "cpu_s": round(bare_cpu, 2),
                 "port_samples_per_s": round(samples / bare_s),
                 "port_samples_per_cpu_s": round(samples / max(bare_cpu, 1e-9))},
    }
    out["faust_events"] = await faust_run("events", bootstrap, state, tps, end_total, samples)
    out["faust_decode"] = await faust_run("decode", bootstrap, state, tps, end_total, samples)
    out["worker"] = await worker_run(bootstrap, state, tps, end_total, samples)
    runs = ["faust_events", "faust_decode", "worker"]
    if args.batched:
        out["worker_batched"] = await worker_run(bootstrap, state, tps, end_total, samples,
                                                 batched=True)
        runs.append("worker_batched")
    bare_rate = out["bare"]["port_samples_per_cpu_s"]
    out["ratio_to_bare_per_cpu_s"] = {
        k: round(out[k]["port_samples_per_cpu_s"] / bare_rate, 3) for k in runs}
    out["cpu_us_per_message"] = {
        k: round(out[k]["cpu_s"] / end_total * 1e6, 1) for k in ["bare", *runs]}
    out["load_average_1m_at_end"] = round(os.getloadavg()[0], 2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ports", type=int, default=50_000)
    parser.add_argument("--intervals", type=int, default=12)
    parser.add_argument("--columnar", action="store_true",
                        help="send the counters as counter_columns messages")
    parser.add_argument("--ports-per-message", type=int, default=sb.PORTS_PER_DEVICE,
                        help="8: the size of a host agent's message")
    parser.add_argument("--batched", action="store_true",
                        help="also the worker with FABRICWATCH_STREAMS__COUNTERS_BATCHED")
    parser.add_argument("--before", type=Path, default=None,
                        help="only the batched worker, this unpacked tree's (git archive) "
                             "and this one's in turns")
    parser.add_argument("--rounds", type=int, default=3, help="turns of each (--before)")
    parser.add_argument("--bootstrap", default=None)
    parser.add_argument("--scenario", default="faust_floor")
    parser.add_argument("--child", choices=["events", "decode"], help=argparse.SUPPRESS)
    parser.add_argument("--app-id", help=argparse.SUPPRESS)
    parser.add_argument("--datadir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.bootstrap, args.app_id, args.datadir)
        return
    sb.COLUMNAR = args.columnar
    sb.PORTS_PER_DEVICE = args.ports_per_message
    with tempfile.TemporaryDirectory(prefix="fw-faust-floor-") as tmp:
        state = Path(tmp)
        with sb.broker(args.bootstrap, state) as bootstrap:
            figures = asyncio.run(run(args, state, bootstrap))
    save_and_print(args.scenario, figures)


if __name__ == "__main__":
    main()
