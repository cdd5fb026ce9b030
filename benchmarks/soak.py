"""The drills as a repeatable soak on the production-shaped stack (``fabricwatch.cluster``).

Runs the cluster (3 brokers, Temporal, ledger endpoint + ingest, 2 stream workers, 2 runbook
workers, the simulator on a 10k-port fabric) on free loopback ports in a temporary state
folder, injects faults continuously (``sim inject``: a flap, a link trained at 2X or a BER
ramp, each on a cable of its own, round-robin over the SUs) and, at seeded random times,
kill -9s a stream worker, a runbook worker, the ledger ingest and a broker (each started
again after a few seconds, as Kubernetes restarts a pod) and restarts the Temporal server.
At the end the simulator stops, the ledger is given time to catch up, and the run is counted
against the simulator's ground truth (``fabricwatch.drills.tally``): faults injected vs
detected per episode, duplicate detections, runbooks per cable, isolate / un-isolate
commands per cable, counter samples published vs in the ledger, dead letters and reasons.

    python benchmarks/soak.py --minutes 30 --seed 1        # writes benchmarks/results/soak.json

Exit code 0 when every check holds, 1 when one does not (the JSON says which).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import random
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fabricwatch.cluster import ClusterOptions, LocalCluster  # noqa: E402
from fabricwatch.demo.watch import topic_partitions  # noqa: E402
from fabricwatch.drills import (  # noqa: E402
    CHAOS_TARGETS,
    Cable,
    ChaosEvent,
    PlannedFault,
    plan_chaos,
    plan_faults,
    samples_verdict,
    tally,
)
from fabricwatch.stack_config import free_ports  # noqa: E402
from runtime.settings import KafkaSettings, LedgerSettings, Settings, TemporalSettings  # noqa: E402

log = logging.getLogger("soak")
# What a Faust worker logs when partitions move to it and it rebuilds their tables.
TAKEOVER_MARKS = ("Setting newly assigned partitions", "Restoring state from changelog")


@dataclass
class SoakOptions:
    minutes: float = 30.0
    seed: int = 0
    preset: str = "10k-port"
    interval: str = "10s"
    fault_every_s: float = 60.0
    settle_s: float = 120.0  # no fault or kill in the last this many seconds: they play out
    chaos_start_s: float = 60.0
    chaos_rounds: int = 1
    chaos_targets: tuple[str, ...] = CHAOS_TARGETS
    down_s: tuple[float, float] = (5.0, 20.0)
    drain_s: float = 300.0  # after the simulator stops, at most this long for the ledger
    state_dir: Path | None = None
    keep: bool = False


@dataclass
class SoakRun:
    chaos: list[dict[str, Any]] = field(default_factory=list)
    injected: list[tuple[PlannedFault, int]] = field(default_factory=list)
    unexpected_exits: list[str] = field(default_factory=list)
    # a killed stream worker -> its chaos entry and the survivors' log offsets at the kill
    watch: dict[str, tuple[dict[str, Any], dict[str, int]]] = field(default_factory=dict)


def _settings(state_dir: Path) -> tuple[Settings, list[tuple[int, int]]]:
    ports = free_ports(9)
    kafka = list(zip(ports[0:6:2], ports[1:6:2], strict=True))
    settings = Settings(state_dir=state_dir, clickhouse_url=None,
                        kafka=KafkaSettings(port=kafka[0][0], controller_port=kafka[0][1]),
                        temporal=TemporalSettings(port=ports[6], ui_port=ports[7]),
                        ledger=LedgerSettings(http_port=ports[8]))
    return settings, kafka


def cables_of(preset: str) -> list[Cable]:
    """Every HCA-leaf cable of the fabric, the leaf end first (where the fault goes)."""
    from sim.topology import generate

    fabric = generate(preset)
    return [Cable(link.b_device, link.b_port, link.a_device, link.a_port, link.su)
            for link in fabric.links if link.tier == "host"]


async def read_topic(bootstrap: str, topic: str) -> list[bytes]:
    """Every message of ``topic`` now, from the start of each partition to its end."""
    from aiokafka import AIOKafkaConsumer  # type: ignore[import-untyped]
    from aiokafka.structs import TopicPartition  # type: ignore[import-untyped]

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                group_id=None, request_timeout_ms=30_000)
    await consumer.start()
    out: list[bytes] = []
    try:
        parts = [TopicPartition(topic, p) for p in sorted(await topic_partitions(consumer,
                                                                                topic))]
        if not parts:  # fail closed: a count of nothing read must not pass as "none there"
            raise RuntimeError(f"{topic} has no partitions the consumer can see")
        consumer.assign(parts)
        await consumer.seek_to_beginning(*parts)
        ends = await consumer.end_offsets(parts)
        pending = {tp for tp in parts if ends[tp] > 0}
        deadline = time.monotonic() + 300
        while pending and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=1000, max_records=5000)
            for tp, records in batch.items():
                out.extend(r.value for r in records if r.value is not None)
                if records and records[-1].offset + 1 >= ends[tp]:
                    pending.discard(tp)
            for tp in list(pending):
                if await consumer.position(tp) >= ends[tp]:
                    pending.discard(tp)
        if pending:
            raise RuntimeError(f"could not read {topic} to its end: {sorted(map(str, pending))}")
    finally:
        # aiokafka's stop awaits the group-less coordinator's task it has just cancelled
        with contextlib.suppress(asyncio.CancelledError):
            await consumer.stop()
    return out


STREAM_INPUTS = ("fabric.counters", "fabric.port-events", "fabric.topology", "fabric.probes")


async def group_lag(bootstrap: str, group: str, topics: tuple[str, ...]) -> int:
    """Messages of ``topics`` the consumer group has not committed yet (all, when none)."""
    from aiokafka import AIOKafkaConsumer
    from aiokafka.admin import AIOKafkaAdminClient  # type: ignore[import-untyped]
    from aiokafka.structs import TopicPartition

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000)
    await admin.start()
    try:
        committed = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                enable_auto_commit=False, request_timeout_ms=30_000)
    await consumer.start()
    try:
        parts = [TopicPartition(t, p) for t in topics
                 for p in sorted(await topic_partitions(consumer, t))]
        ends = await consumer.end_offsets(parts)
    finally:
        with contextlib.suppress(asyncio.CancelledError):
            await consumer.stop()
    return sum(max(0, end - (committed[tp].offset if tp in committed else 0))
               for tp, end in ends.items())


async def runbook_runs(target: str) -> dict[str, int]:
    """Workflow id -> runs, of every runbook Temporal knows (open and closed)."""
    from temporalio.client import Client

    client = await Client.connect(target)
    runs: Counter[str] = Counter()
    async for wf in client.list_workflows():
        runs[wf.id] += 1
    return dict(runs)


def sim_stats(log_path: Path) -> dict[str, Any] | None:
    """The simulator's closing stats line (``sim run`` prints it when stopped)."""
    for line in reversed(log_path.read_text(errors="replace").splitlines()):
        if line.startswith("{") and "port_samples" in line:
            parsed: dict[str, Any] = orjson.loads(line)
            return parsed
    return None


def ledger_counts(cluster: LocalCluster, fabric: str) -> tuple[int, int]:
    """Rows of the fabric's counter samples in the ledger, and distinct (device, port, ts)."""
    with cluster.ledger_client() as client:
        row = client.query(  # type: ignore[attr-defined]
            "SELECT count() AS n, uniqExact(device, port, ts) AS d FROM counter_samples "
            "WHERE fabric = {f:String}", parameters={"f": fabric}).first_row
    return int(row[0]), int(row[1])


def _pick(cluster: LocalCluster, rng: random.Random, target: str) -> str | None:
    names = {"stream-worker": cluster.workers, "runbook-worker": cluster.runbook_workers,
             "ingest": ["ingest"], "broker": [n.name for n in cluster.nodes]}[target]
    return rng.choice(names) if names else None


def _act(cluster: LocalCluster, rng: random.Random, event: ChaosEvent,
         restarts: list[tuple[float, str]], run: SoakRun, t: float) -> None:
    if event.target == "temporal":
        began = time.monotonic()
        cluster.restart_temporal()
        run.chaos.append({"at_s": round(t, 1), "target": "temporal", "action": "restart",
                          "took_s": round(time.monotonic() - began, 1)})
        return
    name = _pick(cluster, rng, event.target)
    if name is None:
        return
    survivors = {w: _size(cluster.log_path(w)) for w in cluster.workers if w != name}
    killed = cluster.kill(name, signal.SIGKILL)
    entry: dict[str, Any] = {"at_s": round(t, 1), "target": event.target, "name": name,
                             "action": "kill -9", "was_running": killed,
                             "down_s": event.down_s}
    if event.target == "stream-worker":
        run.watch[name] = (entry, survivors)
    run.chaos.append(entry)
    restarts.append((t + event.down_s, name))


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def takeover_lines(cluster: LocalCluster, survivors: dict[str, int]) -> list[str]:
    """What the surviving workers logged about taking partitions over since the kill."""
    found = []
    for worker, offset in survivors.items():
        with open(cluster.log_path(worker), "rb") as handle:
            handle.seek(offset)
            text = handle.read().decode(errors="replace")
        found += [f"{worker}: {line.strip()[:200]}" for line in text.splitlines()
                  if any(m in line for m in TAKEOVER_MARKS)]
    return found


def soak(opts: SoakOptions) -> dict[str, Any]:
    """Run the soak; the figures soak.json holds."""
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    rng = random.Random(opts.seed)
    owned = opts.state_dir is None
    state_dir = opts.state_dir or Path(tempfile.mkdtemp(prefix="fabricwatch-soak-"))
    settings, kafka_ports = _settings(state_dir)
    duration_s = opts.minutes * 60
    cluster = LocalCluster(settings, ClusterOptions(
        preset=opts.preset, interval=opts.interval, seed=opts.seed, kafka_ports=kafka_ports,
        # a snapshot a minute: a link trained at 2X is seen within one
        sim_args=("--topology-every", "6", "--probe-every", "6")))
    faults = plan_faults(rng, cables_of(opts.preset), duration_s=duration_s,
                         every_s=opts.fault_every_s, settle_s=opts.settle_s)
    chaos = plan_chaos(rng, duration_s=duration_s, start_s=opts.chaos_start_s,
                       settle_s=opts.settle_s, targets=opts.chaos_targets,
                       rounds=opts.chaos_rounds, down_s=opts.down_s)
    run = SoakRun()
    from sim.controller import SimController

    began_up = time.monotonic()
    figures: dict[str, Any] = {"minutes": opts.minutes, "seed": opts.seed,
                               "preset": opts.preset, "interval": opts.interval}
    try:
        cluster.up()
        figures["startup_s"] = round(time.monotonic() - began_up, 1)
        controller = SimController(cluster.sim_state)
        start = time.monotonic()
        timeline: list[tuple[float, int, Any]] = (
            [(f.at_s, 0, f) for f in faults] + [(c.at_s, 1, c) for c in chaos])
        timeline.sort(key=lambda e: (e[0], e[1]))
        restarts: list[tuple[float, str]] = []
        while True:
            t = time.monotonic() - start
            if t >= duration_s and not restarts:
                break
            while timeline and timeline[0][0] <= t:
                _, _, item = timeline.pop(0)
                if isinstance(item, PlannedFault):
                    controller.inject(item.spec)
                    run.injected.append((item, int(time.time() * 1000)))
                    log.info("%5.0fs inject %s", t, item.spec)
                else:
                    log.info("%5.0fs %s", t, item)
                    _act(cluster, rng, item, restarts, run, t)
            for due, name in list(restarts):
                if due <= t:
                    restarts.remove((due, name))
                    if name in run.watch:  # before it comes back: did the other take over?
                        entry, survivors = run.watch.pop(name)
                        lines = takeover_lines(cluster, survivors)
                        entry["takeover_logged"] = bool(lines)
                        entry["takeover_log"] = lines[:8]
                    cluster.start(name)
                    log.info("%5.0fs started %s again", t, name)
            down = {n for _, n in restarts}
            for name, alive in cluster.running().items():
                if not alive and name not in down:
                    run.unexpected_exits.append(f"{round(t)}s {name}")
                    log.warning("%s exited unexpectedly; starting it again", name)
                    cluster.start(name)
            time.sleep(1.0)
        figures["ran_s"] = round(time.monotonic() - start, 1)
        # the ground truth: the simulator stops and says what it published
        cluster.stop("sim")
        stats = sim_stats(cluster.log_path("sim"))
        published = int(stats["port_samples"]) if stats else -1
        figures["sim"] = stats
        drained = time.monotonic()
        rows = distinct = 0
        while time.monotonic() - drained < opts.drain_s:
            try:
                rows, distinct = ledger_counts(cluster, cluster.fabric)
            except Exception as exc:  # noqa: BLE001 - the endpoint may be busy; try again
                log.info("ledger count failed: %s", exc)
            if distinct >= published >= 0:
                break
            time.sleep(5.0)
        figures["ledger_drain_s"] = round(time.monotonic() - drained, 1)
        # the stream workers catch up with what was published (on a busy machine they lag)
        lag = -1
        while time.monotonic() - drained < opts.drain_s:
            try:
                lag = asyncio.run(group_lag(cluster.bootstrap, "fabricwatch-streams",
                                            STREAM_INPUTS))
            except Exception as exc:  # noqa: BLE001 - a busy broker; try again
                log.info("lag check failed: %s", exc)
            if lag == 0:
                break
            time.sleep(5.0)
        figures["stream_lag_at_end"] = lag
        figures["stream_drain_s"] = round(time.monotonic() - drained, 1)
        time.sleep(15.0)  # the last detections and runbooks of what was published
        rows, distinct = ledger_counts(cluster, cluster.fabric)
        figures["counter_samples"] = samples_verdict(published, rows, distinct)
        detections = [orjson.loads(v) for v in asyncio.run(
            read_topic(cluster.bootstrap, "fabric.detections"))]
        dead = [orjson.loads(v) for v in asyncio.run(read_topic(cluster.bootstrap, "fabric.dlq"))]
        figures["dead_letters"] = {"count": len(dead), "reasons": dict(Counter(
            str(d.get("reason", ""))[:120] for d in dead))}
        runs = asyncio.run(runbook_runs(settings.temporal.target))
        figures["runbooks_total"] = len(runs)
        from schemas.policy import parse_duration_s

        result = tally(run.injected, detections, fabric=cluster.fabric, runbook_runs=runs,
                       commands=controller.commands(),
                       slack_ms=int(parse_duration_s(opts.interval) * 1000) + 1000)
        figures.update(result.as_dict())
        figures["chaos"] = run.chaos
        figures["unexpected_exits"] = run.unexpected_exits
        summary = result.summary()
        figures["checks"] = checks = {
            "every_fault_detected": summary["faults_detected"] == summary["faults_injected"],
            "no_duplicate_detections": summary["duplicate_detections"] == 0,
            "at_most_one_runbook_per_cable": all(f.runbooks <= 1 for f in result.faults),
            "at_most_one_isolate_per_cable": all(f.isolates <= 1 for f in result.faults),
            "no_sample_lost_or_doubled": figures["counter_samples"]["ok"],
            "no_dead_letters": not dead,
            "every_kill_done": all(c.get("was_running", True) for c in run.chaos),
            "no_unexpected_exits": not run.unexpected_exits,
        }
        figures["ok"] = all(checks.values())
        log.info("checks %s; samples %s; summary %s", checks, figures["counter_samples"], summary)
    finally:
        cluster.down()
        figures["pids"] = list(cluster.spawned)
        figures["logs"] = str(cluster.logs_dir)
        if owned and not opts.keep:
            shutil.rmtree(state_dir, ignore_errors=True)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--preset", default="10k-port")
    parser.add_argument("--interval", default="10s")
    parser.add_argument("--fault-every", type=float, default=60.0, help="seconds between faults")
    parser.add_argument("--settle", type=float, default=120.0,
                        help="seconds at the end with no new fault or kill")
    parser.add_argument("--state-dir", type=Path, default=None,
                        help="keep the run's state here (default: a temporary folder, removed)")
    parser.add_argument("--scenario", default="soak", help="results file name")
    args = parser.parse_args(argv)
    if args.minutes <= 0 or args.fault_every <= 0 or args.settle < 0:
        parser.error("--minutes and --fault-every must be positive, --settle not negative")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    from benchmarks._machine import save_and_print

    figures = soak(SoakOptions(minutes=args.minutes, seed=args.seed, preset=args.preset,
                               interval=args.interval, fault_every_s=args.fault_every,
                               settle_s=args.settle, state_dir=args.state_dir,
                               keep=args.state_dir is not None))
    save_and_print(args.scenario, figures)
    return 0 if figures.get("ok") else 1


def options_dict(opts: SoakOptions) -> dict[str, Any]:
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(opts).items()}


if __name__ == "__main__":
    raise SystemExit(main())
