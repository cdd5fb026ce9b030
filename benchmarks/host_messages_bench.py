"""Benchmark: the stream worker's capacity in host-agent messages per second (8 ports each).

Run: .venv/bin/python benchmarks/host_messages_bench.py [--hosts 12500] [--intervals 3]
     [--latency-traps 100] [--trap-rate 2.5] [--host-rate 12500] [--split-traps] [--batched]
     [--scenario host_messages] [--bootstrap HOST:PORT]

Target context: 100,000 host ports read at 1 s by 12,500 host agents is 12,500 messages/s.
The messages are the agent's own: one ``HostAgent.round()`` of an 8-HCA tree built from
the real sysfs fixture, re-stamped per host and interval (host name, id, ts, advancing
``xmit_wait``/data counters), so each carries 8 samples of ~50 counters with their HCA
names (``excessive_buffer_overrun`` set to 0: the fixture's 15 is its 4-bit register's
maximum, which would make every port ``counter_saturated``). ``--intervals`` rounds of
``--hosts`` hosts are produced to ``fabric.counters``;
a bare aiokafka consumer that only decodes them (``schemas.decode``) sets the floor; then
``fabricwatch worker --no-ledger`` (counters and stale agents, RocksDB tables with
changelogs) consumes the same messages from the start, timed from "Worker ready" until
its committed offsets reach the end (the streams benchmark's method, whose helpers this
reuses). Without ``--bootstrap`` it starts its own broker.

Then, unless ``--latency-traps 0``, trap-to-detection under the host load: the host agents'
messages go on arriving (every host every second, ``--host-rate`` messages/s at most: one
pre-encoded message per host, re-stamped with each round's id and ts; one producer in a
process of its own) while
``--latency-traps`` ports flap (the streams benchmark's latency phase: two downs, then a
third at ``--trap-rate``); each third down's publish time against its ``flap`` detection on
``fabric.detections``. The counters backlog the worker has at the phase's start and end is
recorded (a worker that keeps up has none, and traps then wait behind nothing).
The counters worker's CPU over that phase per message produced is what a message costs it
at a steady rate (``worker_cpu_us_per_message``). ``--split-traps`` runs the trap path in
its own worker process (``fabricwatch worker --agents traps`` beside ``--agents rest``, the
same ``--app-id``). ``--batched`` takes
the counters off Faust's stream (``FABRICWATCH_STREAMS__COUNTERS_BATCHED``).

Writes benchmarks/results/host_messages.json.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import multiprocessing
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaProducer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._machine import save_and_print  # noqa: E402
from benchmarks.streams_bench import (  # noqa: E402
    WorkerProc,
    bare_throughput,
    broker,
    committed_total,
    cpu_seconds,
    end_offsets,
    latency_phase,
    max_trap_rate,
)
from collectors.live.host_agent import AgentConfig, HostAgent  # noqa: E402
from schemas import encode  # noqa: E402
from schemas.events import columns_wire  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("sysfs_tree", ROOT / "tests" / "sysfs_tree.py")
assert _spec is not None and _spec.loader is not None
tree = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tree)


async def template(tmp: Path) -> dict[str, Any]:
    tree.build(tmp, hcas=8)
    agent = HostAgent(AgentConfig(fabric="bench", host="HOST", sysfs_root=tmp))
    counters = (await agent.round())[0]
    return dict(orjson.loads(encode(counters)))


# --columnar: the agent's counter_columns form (FABRICWATCH_KAFKA__COLUMNAR_COUNTERS); from
# the environment, so the host-load producer's spawned process sends the same form
COLUMNAR = os.environ.get("FW_BENCH_COLUMNAR") == "1"


def host_message(tpl: dict[str, Any], host: str, seq: int, ts: int) -> bytes:
    ports = []
    for i, sample in enumerate(tpl["ports"]):
        s = dict(sample)
        s["device"] = f"{host}/mlx5_{i}"
        # The fixture's 15 is the 4-bit register's maximum, a saturated counter
        # (counter_saturated on every port): the benchmark's fabric is a healthy one.
        s["excessive_buffer_overrun"] = 0
        s["xmit_wait"] = s["xmit_wait"] + seq * 1000 + i
        s["port_xmit_data"] = s.get("port_xmit_data", 0) + seq * 5_000_000
        ports.append(s)
    message = {**tpl, "id": f"{host}/{seq}", "ts": ts, "device": host, "ports": ports}
    return orjson.dumps(columns_wire(message) if COLUMNAR else message)


async def produce(bootstrap: str, tpl: dict[str, Any], hosts: int, intervals: int,
                  base: int) -> tuple[int, int]:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20,
                                max_batch_size=1 << 20, compression_type="lz4", acks=1)
    await producer.start()
    n = size = 0
    try:
        for i in range(intervals):
            for h in range(hosts):
                host = f"node{h:05d}"
                value = host_message(tpl, host, i, base + i * 1000 + h % 997)
                size = len(value)
                await producer.send("fabric.counters", value, key=host.encode())
                n += 1
        await producer.flush()
    finally:
        await producer.stop()
    return n, size


TS_MARK = 1_111_111_111_111  # a ts no real message carries: replaced per round


def host_background(bootstrap: str, tpl: dict[str, Any], hosts: int, rate: float,
                    produced: dict[str, float]) -> Any:
    """Every host's message every second (at most ``rate`` messages/s), as fast as one
    producer sends them; ``produced`` gets the messages sent and the seconds taken."""
    names = [f"node{h:05d}" for h in range(hosts)]
    # the agent's message per host, encoded once: a round changes only its id and ts
    encoded = [host_message(tpl, h, 0, TS_MARK).replace(
        b'"id":"%s/0"' % h.encode(), b'"id":"%s/@SEQ@"' % h.encode()) for h in names]
    assert all(v.count(b"@SEQ@") == 1 for v in encoded)
    mark = str(TS_MARK).encode()
    period = max(1.0, hosts / rate)

    async def run(stop: asyncio.Event) -> None:
        prod = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20,
                                max_batch_size=1 << 20, compression_type="lz4", acks=1)
        await prod.start()
        t_start = time.perf_counter()
        n = 0
        try:
            seq = 1_000_000
            while not stop.is_set():
                t0 = time.perf_counter()
                ts = str(int(time.time() * 1000)).encode()
                new_id = b"%d" % seq
                for i, (host, value) in enumerate(zip(names, encoded, strict=True)):
                    if stop.is_set():
                        break
                    await prod.send("fabric.counters",
                                    value.replace(mark, ts).replace(b"@SEQ@", new_id, 1),
                                    key=host.encode())
                    n += 1
                    due = t0 + period * (i + 1) / hosts
                    if i % 100 == 99 and (delay := due - time.perf_counter()) > 0:
                        await asyncio.sleep(delay)
                seq += 1
        finally:
            produced["messages"] = n
            produced["seconds"] = time.perf_counter() - t_start
            await prod.stop()
    return run


def host_load_process(bootstrap: str, tpl: dict[str, Any], hosts: int, rate: float,
                      done: Any, results: Any) -> None:
    """``host_background`` in a process of its own until ``done`` is set: producing it
    would otherwise slow the trap sender and the readers (one event loop) down with it.
    Puts what it produced on ``results``."""
    produced: dict[str, float] = {}

    async def main() -> None:
        stop = asyncio.Event()

        async def watch() -> None:
            await asyncio.to_thread(done.wait)  # a process's event, not the loop's
            stop.set()
        watcher = asyncio.create_task(watch())
        await host_background(bootstrap, tpl, hosts, rate, produced)(stop)
        await watcher
    try:
        asyncio.run(main())
    finally:
        results.put(produced)


# A worker commits every few seconds (the batched consumer's commit interval, 5 s; Faust's
# own): the committed offsets trail what it has applied by up to that many seconds of load.
LAG_WINDOW_S = 6.0


async def lag(bootstrap: str, group: str, tps: list[Any]) -> int:
    """Messages of ``fabric.counters`` the group has not committed: the least seen over
    ``LAG_WINDOW_S`` (right after a commit, the backlog the worker has, not its commit's
    trail)."""
    seen = []
    deadline = time.monotonic() + LAG_WINDOW_S
    while not seen or time.monotonic() < deadline:
        _, end = await end_offsets(bootstrap, "fabric.counters")
        seen.append(end - await committed_total(bootstrap, group, tps))
        await asyncio.sleep(0.25)
    return min(seen)


async def run(args: argparse.Namespace, state: Path, bootstrap: str) -> dict[str, Any]:
    tpl = await template(state / "sys")
    base = int(time.time() * 1000) - 3600_000
    t = time.perf_counter()
    messages, size = await produce(bootstrap, tpl, args.hosts, args.intervals, base)
    produce_s = time.perf_counter() - t
    tps, end_total = await end_offsets(bootstrap, "fabric.counters")
    bare_s, samples = await bare_throughput(bootstrap, end_total)
    app_id = f"bench-host-{uuid.uuid4().hex[:8]}"
    # the counters off Faust's stream: their own consumer group (streams/counters/batched.py)
    env = {"FABRICWATCH_STREAMS__COUNTERS_BATCHED": "true"} if args.batched else {}
    if args.split_traps:  # the counters' process and the trap path's, one app id
        group = f"{app_id}-rest"
        workers = [WorkerProc(bootstrap, state, app_id, ledger=False, agents="rest",
                              extra_env=env),
                   WorkerProc(bootstrap, state, app_id, ledger=False, agents="traps")]
    else:
        group = app_id
        workers = [WorkerProc(bootstrap, state, app_id, ledger=False, extra_env=env)]
    if args.batched:
        group += "-counters"
    worker = workers[0]  # the one that takes the counters
    latency: dict[str, Any] | None = None
    produced: dict[str, float] = {}
    backlog: list[int] = []
    load_cpu: list[float] = []  # the counters worker's CPU seconds over the host load
    try:
        ready = max([await asyncio.to_thread(w.wait_ready) for w in workers])
        catch_up_cpu0 = cpu_seconds(worker.proc.pid)
        while True:
            done = await committed_total(bootstrap, group, tps)
            if done >= end_total:
                break
            for w in workers:
                if w.proc.poll() is not None:
                    raise RuntimeError(w.log.read_bytes()[-3000:].decode(errors="replace"))
            await asyncio.sleep(0.2)
        worker_s = time.perf_counter() - ready
        # its CPU over the catch-up: the wall time above waits for the last commit too, up
        # to a commit interval (batched) after the last message was applied
        catch_up_cpu = cpu_seconds(worker.proc.pid) - catch_up_cpu0
        if args.latency_traps:
            async def loaded(stop: asyncio.Event) -> None:
                ctx = multiprocessing.get_context("spawn")
                done, results = ctx.Event(), ctx.Queue()
                proc = ctx.Process(target=host_load_process, daemon=True, args=(
                    bootstrap, tpl, args.hosts, args.host_rate, done, results))
                proc.start()
                cpu0 = cpu_seconds(worker.proc.pid)
                try:
                    await asyncio.sleep(args.warm_up)  # the backlog builds before traps
                    backlog.append(await lag(bootstrap, group, tps))
                    await stop.wait()
                    backlog.append(await lag(bootstrap, group, tps))  # still under the load
                finally:
                    done.set()
                    load_cpu.append(cpu_seconds(worker.proc.pid) - cpu0)
                    produced.update(await asyncio.to_thread(results.get, True, 120))
                    await asyncio.to_thread(proc.join, 30)
            latency = await latency_phase(bootstrap, args.latency_traps, args.trap_rate,
                                          loaded, lead_s=args.warm_up)
    finally:
        for w in workers:
            w.stop()
    log = worker.log.read_bytes().decode(errors="replace")
    rate = messages / worker_s
    bare = messages / bare_s
    return {
        "hosts": args.hosts, "ports_per_message": len(tpl["ports"]),
        "intervals": args.intervals, "messages": messages, "message_bytes": size,
        "port_samples": samples, "produce_s": round(produce_s, 2),
        "host_messages_per_s": round(rate),
        "port_samples_per_s": round(rate * len(tpl["ports"])),
        "bare_host_messages_per_s": round(bare),
        "ratio_to_bare": round(rate / bare, 3),
        "worker_catch_up_s": round(worker_s, 2),
        "worker_catch_up_cpu_s": round(catch_up_cpu, 2),
        "host_messages_per_cpu_s": round(messages / max(catch_up_cpu, 1e-9)),
        "batched_commit_interval_s": (float(os.environ.get(
            "FABRICWATCH_STREAMS__BATCHED_COMMIT_INTERVAL_S", "5")) if args.batched else None),
        "target_host_messages_per_s": 12_500,
        "fraction_of_target": round(rate / 12_500, 3),
        "stale_detections_in_log": log.count("stale"),
        "load_average_1m_at_end": round(os.getloadavg()[0], 2),
        "split_traps": args.split_traps,
        "counters_batched": args.batched,
        "message_form": "counter_columns" if COLUMNAR else "counters",
        "host_load": None if latency is None else {
            "target_messages_per_s": min(args.host_rate, float(args.hosts)),
            "produced_messages": produced.get("messages"),
            "produced_per_s": round(produced.get("messages", 0)
                                    / max(produced.get("seconds", 0), 1e-9)),
            "counters_backlog_at_first_trap": backlog[0] if backlog else None,
            "counters_backlog_at_end": backlog[1] if len(backlog) > 1 else None,
            # what a message costs the worker at a steady rate (with the traps), when it
            # keeps up (the backlog at the end no larger than at the first trap)
            "worker_cpu_s": round(load_cpu[0], 2) if load_cpu else None,
            "worker_cpu_us_per_message": (
                round(load_cpu[0] / produced["messages"] * 1e6, 1)
                if load_cpu and produced.get("messages") else None),
        },
        "latency_under_host_load": latency,
        "target_trap_p99_ms": 100,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=12_500)
    parser.add_argument("--intervals", type=int, default=3)
    parser.add_argument("--latency-traps", type=int, default=100)
    parser.add_argument("--trap-rate", type=float, default=2.5)
    parser.add_argument("--host-rate", type=float, default=12_500.0,
                        help="host messages/s produced during the latency phase, at most")
    parser.add_argument("--warm-up", type=float, default=10.0,
                        help="seconds of host load before the first trap")
    parser.add_argument("--split-traps", action="store_true",
                        help="the trap path in its own worker process (--agents traps)")
    parser.add_argument("--batched", action="store_true",
                        help="the worker with FABRICWATCH_STREAMS__COUNTERS_BATCHED")
    parser.add_argument("--columnar", action="store_true",
                        help="the host messages as counter_columns (the agent's columnar form)")
    parser.add_argument("--scenario", default="host_messages",
                        help="results file name: benchmarks/results/<scenario>.json")
    parser.add_argument("--bootstrap", default=None)
    args = parser.parse_args()
    if args.columnar:
        global COLUMNAR
        COLUMNAR = True
        os.environ["FW_BENCH_COLUMNAR"] = "1"
    if args.latency_traps and not 0 < args.trap_rate <= max_trap_rate():
        parser.error(f"--trap-rate: more than 0 and at most {max_trap_rate():.1f}/s")
    if args.latency_traps < 0 or args.host_rate <= 0 or args.warm_up < 0:
        parser.error("--latency-traps, --host-rate and --warm-up: not negative")
    with tempfile.TemporaryDirectory(prefix="fw-host-bench-") as tmp:
        state = Path(tmp)
        with broker(args.bootstrap, state) as bootstrap:
            figures = asyncio.run(run(args, state, bootstrap))
    save_and_print(args.scenario, figures)


if __name__ == "__main__":
    main()
