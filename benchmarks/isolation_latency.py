"""Detection-to-isolation on the real stack, under the 100k-port counters load (issue 24).

    .venv/bin/python benchmarks/isolation_latency.py --runbooks 120 --every 0.5
    .venv/bin/python benchmarks/isolation_latency.py --runbooks 60 --pairs 2 \
        --before /tmp/p-isolate-base      # before/after pairs in one run

One run starts, on free loopback ports in a temporary folder: the Kafka broker and
``temporal server start-dev`` (``fabricwatch.stack.LocalStack``), a stream worker
(``fabricwatch worker --no-ledger``) taking ``--ports`` healthy port samples every 10 s on
``fabric.counters`` (64-port messages, spread evenly, from a producer process of its own),
and ``fabricwatch runbook-worker --records kafka --controller sim`` (worker + dispatcher, as
the production-shaped cluster runs it) against the simulator's controller
(``sim.controller``, the fabric recorded as a running simulator records it, so the
controller checks every port it is asked to change). The fabric is the simulator's
``--preset`` (100k-port), its topology published on ``fabric.topology``.

Detections (``flap`` and ``degraded_link``, action ``isolate_port``) are published on
``fabric.detections`` one every ``--every`` seconds, each on a cable of its own, round-robin
over the SUs and within the breaker's budget (every runbook must be granted; a refusal fails
the run). Per runbook, on the one clock of this machine:

    published   the bench, just before the send (acks=all)
    started     the Temporal history's WorkflowExecutionStarted
    evidence    the evidence activity's scheduled / started / completed events
    budget      the budget grant activity's, port state's and isolate's events likewise
    isolated    the controller's command log (``sim-commands.jsonl``): the isolate received

The evidence activity's run time (started -> completed: the tools and storing their output)
is the evidence-tool time: reported beside the total and excluded from ``ex_evidence``.
The first ``--warmup`` runbooks of each phase are not counted (the dispatcher joining its
group, first imports). With ``--pairs N`` and ``--before DIR`` the runbook worker alternates
between the tree in DIR (``git archive main | tar -x -C DIR``) and this one, N times each,
on the same stack and load; between phases every runbook is aborted (its rollback releases
its budget) and awaited. Writes ``benchmarks/results/isolation_latency.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import resources as res  # noqa: E402
from benchmarks._machine import save_and_print  # noqa: E402
from benchmarks.streams_bench import WorkerProc, cpu_seconds  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PORTS_PER_MESSAGE = 64
# The runbook's activities before the isolate command, in the order the workflow runs them.
STEPS = ("capture_evidence", "budget_acquire", "port_state", "isolate_port")
# One task queue for every phase: the budgets are long-lived workflows on it, and each
# phase's runbook worker must serve them.
QUEUE = "fabricwatch-runbooks"


# --------------------------------------------------------------------------- counters load


def counters_message(fabric: str, device: str, first: int, seq: int, ts: int) -> bytes:
    """A healthy 64-port counters message (no errors: the load starts no runbook)."""
    ports = [{"port": p, "symbol_errors": 0, "link_error_recovery": 0, "link_downed": 0,
              "rcv_errors": 0, "rcv_remote_phys_errors": 0, "xmit_discards": 0,
              "xmit_wait": 1_000_000 + seq * 17 * p, "local_link_integrity_errors": 0,
              "excessive_buffer_overrun": 0, "fec_corrected": seq * 1000 + p,
              "fec_uncorrectable": 0, "raw_ber": 1.5e-9, "effective_ber": 1e-15,
              "width": "4X", "speed": "NDR"} for p in range(first, first + PORTS_PER_MESSAGE)]
    return orjson.dumps({"v": 1, "id": f"{device}/{first}/{seq}", "ts": ts, "fabric": fabric,
                         "source": "gnmi", "kind": "counters", "device": device,
                         "ports": ports})


def load_devices(preset: str, ports: int) -> list[tuple[str, int]]:
    """(switch, first port) per 64-port message: the fabric's switches, ``ports`` in all."""
    from sim.topology import generate

    fab = generate(preset)
    switches = sorted({p.device for p in fab.ports() if "/" not in p.device})
    out: list[tuple[str, int]] = []
    i = 0
    while len(out) * PORTS_PER_MESSAGE < ports:
        out.append((switches[i % len(switches)], 1 + PORTS_PER_MESSAGE * (i // len(switches))))
        i += 1
    return out


async def produce_load(bootstrap: str, preset: str, fabric: str, ports: int,
                       interval_s: float) -> None:
    """Every port every ``interval_s``, the messages spread evenly, until SIGTERM."""
    from aiokafka import AIOKafkaProducer  # type: ignore[import-untyped]

    devices = load_devices(preset, ports)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5,
                                compression_type="lz4", acks=1)
    await producer.start()
    try:
        seq = 0
        gap = interval_s / len(devices)
        t0 = time.monotonic()
        while not stop.is_set():
            ts = int(time.time() * 1000)
            for i, (dev, first) in enumerate(devices):
                await producer.send("fabric.counters", counters_message(fabric, dev, first, seq,
                                                                        ts), key=dev.encode())
                ahead = t0 + seq * interval_s + (i + 1) * gap - time.monotonic()
                if ahead > 0:
                    await asyncio.sleep(ahead)
                if stop.is_set():
                    break
            seq += 1
            print(f"round {seq} {time.monotonic() - t0:.1f}s", flush=True)  # noqa: T201
    finally:
        await producer.stop()


# --------------------------------------------------------------------------- processes


@contextlib.contextmanager
def stack(state: Path) -> Iterator[Any]:
    from fabricwatch.stack import LocalStack
    from fabricwatch.stack_config import free_ports
    from runtime.settings import KafkaSettings, Settings, TemporalSettings

    a, b, c, d = free_ports(4)
    settings = Settings(state_dir=state / "stack", kafka=KafkaSettings(port=a, controller_port=b),
                        temporal=TemporalSettings(port=c, ui_port=d))
    local = LocalStack(settings, services=["kafka", "temporal"], timeout=240)
    local.up()
    try:
        yield settings
    finally:
        local.down()


def runbook_env(settings: Any, state: Path, queue: str, code: Path | None) -> dict[str, str]:
    env = {**os.environ, "FABRICWATCH_STATE_DIR": str(state),
           "FABRICWATCH_KAFKA__BOOTSTRAP": settings.kafka.bootstrap_servers,
           "FABRICWATCH_TEMPORAL__PORT": str(settings.temporal.port),
           "FABRICWATCH_TEMPORAL__TASK_QUEUE": queue, "PYTHONUNBUFFERED": "1"}
    if code is not None:
        env["PYTHONPATH"] = str(code)
    return env


class RunbookWorker:
    """``fabricwatch runbook-worker`` as the cluster runs it (records to Kafka, sim)."""

    def __init__(self, settings: Any, state: Path, sim_state: Path, queue: str,
                 code: Path | None, name: str) -> None:
        self.log = state / f"runbooks-{name}.log"
        args = [sys.executable, "-m", "fabricwatch", "runbook-worker", "--records", "kafka",
                "--controller", "sim", "--sim-state", str(sim_state), "--alerts-file",
                str(state / "alerts.jsonl"), "--loglevel", "info"]
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT,
                                         env=runbook_env(settings, state, queue, code),
                                         cwd=str(code or ROOT))

    def wait_ready(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if b"runbook worker on" in self.log.read_bytes():
                return
            if self.proc.poll() is not None:
                raise RuntimeError(self.log.read_bytes()[-3000:].decode(errors="replace"))
            time.sleep(0.1)
        raise RuntimeError("runbook worker not ready")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


# --------------------------------------------------------------------------- the runbooks


@dataclass
class Target:
    device: str  # the detected (leaf) end
    port: int
    su: str
    kind: str
    published_ms: float = 0.0
    workflow_id: str = ""


@dataclass
class Phase:
    name: str
    code: Path | None
    targets: list[Target] = field(default_factory=list)
    rows: list[dict[str, float]] = field(default_factory=list)
    worker_cpu_s: float = 0.0
    temporal_cpu_s: float = 0.0
    stream_cpu_s: float = 0.0
    wall_s: float = 0.0
    load_avg: float = 0.0
    profiles: dict[str, Any] = field(default_factory=dict)


def plan_targets(fab: Any, inventory: Any, n: int, used: set[str]) -> list[Target]:
    """``n`` host cables not in ``used``, round-robin over the SUs, within each SU's budget."""
    from workflows.budget.models import su_limit

    by_su: dict[str, list[Any]] = {}
    for link in fab.links:
        if link.tier == "host" and f"{link.b_device}:{link.b_port}" not in used:
            port = inventory.port_ref(fab.fabric, link.b_device, link.b_port)
            by_su.setdefault(port.su or "", []).append(link)
    sus = sorted(by_su)
    limit = {su: su_limit(0.01, inventory.su_ports(su)) for su in sus}
    out: list[Target] = []
    rnd = 0
    while len(out) < n:
        progressed = False
        for su in sus:
            if rnd < limit[su] and rnd < len(by_su[su]) and len(out) < n:
                link = by_su[su][rnd]
                out.append(Target(link.b_device, link.b_port, su,
                                  "flap" if len(out) % 2 == 0 else "degraded_link"))
                progressed = True
        if not progressed:
            raise SystemExit(f"only {len(out)} cables fit the breaker's budget, {n} asked")
        rnd += 1
    used.update(f"{t.device}:{t.port}" for t in out)
    return out


def detection(fabric: str, t: Target, tag: str) -> Any:
    from schemas.events import Action, Detection, DetectionKind, Severity

    now = int(time.time() * 1000)
    return Detection(id=f"bench-{tag}-{t.device}:{t.port}", ts=now, fabric=fabric,
                     source="bench", device=t.device, port=t.port,
                     detection=DetectionKind(t.kind), severity=Severity.CRITICAL,
                     action=Action.ISOLATE_PORT, episode=f"bench-{tag}-{t.device}:{t.port}")


async def inject(publisher: Any, fabric: str, targets: list[Target], every: float,
                 tag: str) -> None:
    t0 = time.monotonic()
    for i, t in enumerate(targets):
        ahead = t0 + i * every - time.monotonic()
        if ahead > 0:
            await asyncio.sleep(ahead)
        t.published_ms = time.time() * 1000
        await publisher.send(detection(fabric, t, tag))
        await publisher.flush()


async def wait_isolated(sim: Any, targets: list[Target], limit_s: float) -> dict[str, float]:
    """The controller's receive time of each target's isolate, from its command log."""
    want = {f"{t.device}:{t.port}" for t in targets}
    deadline = time.monotonic() + limit_s
    seen: dict[str, float] = {}
    while time.monotonic() < deadline:
        for row in sim.commands("isolate"):
            if row["key"] in want and row.get("changed"):
                seen.setdefault(row["key"], float(row["ts_ms"]))
        if len(seen) == len(want):
            return seen
        await asyncio.sleep(0.1)
    missing = sorted(want - set(seen))
    raise SystemExit(f"{len(missing)} of {len(want)} ports not isolated in {limit_s:.0f} s: "
                     f"{missing[:5]}")


def _ms(ev: Any) -> float:
    return float(ev.event_time.ToMilliseconds())


async def timeline(client: Any, wf_id: str) -> dict[str, float]:
    """Event times of the runbook's start and its activities before the isolate."""
    from temporalio.api.enums.v1 import EventType

    handle = client.get_workflow_handle(wf_id)
    out: dict[str, float] = {}
    names: dict[int, str] = {}
    wft: dict[str, float] = {}
    out["wft_queue"] = out["wft_run"] = 0.0
    out["wft_count"] = 0.0
    async for ev in handle.fetch_history_events():
        t = ev.event_type
        if t == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            out["started"] = _ms(ev)
        elif t == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
            wft = {"scheduled": _ms(ev)}
        elif t == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED and "scheduled" in wft:
            wft["started"] = _ms(ev)
            out["wft_queue"] += wft["started"] - wft["scheduled"]
        elif t == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED and "started" in wft:
            # the worker's turn: the workflow code and its local activities (the records)
            out["wft_run"] += _ms(ev) - wft["started"]
            out["wft_count"] += 1
        elif t == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            name = ev.activity_task_scheduled_event_attributes.activity_type.name
            if name in STEPS and f"{name}.scheduled" not in out:
                names[ev.event_id] = name
                out[f"{name}.scheduled"] = _ms(ev)
        elif t == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            name = names.get(ev.activity_task_started_event_attributes.scheduled_event_id, "")
            if name:
                out[f"{name}.started"] = _ms(ev)
        elif t == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            name = names.get(ev.activity_task_completed_event_attributes.scheduled_event_id, "")
            if name:
                out[f"{name}.completed"] = _ms(ev)
                if name == "isolate_port":
                    break
    return out


def stages(pub: float, ev: dict[str, float], iso: float) -> dict[str, float]:
    """Where one runbook's time went, in ms (each from the previous mark)."""
    e, b, s, i = (f"{n}." for n in STEPS)
    row = {
        "total": iso - pub,
        "dispatch": ev["started"] - pub,  # Kafka consume, the cable's last run, the start
        "wft_to_evidence": ev[e + "scheduled"] - ev["started"],
        "evidence_queue": ev[e + "started"] - ev[e + "scheduled"],
        "evidence_tool": ev[e + "completed"] - ev[e + "started"],
        "wft_to_budget": ev[b + "scheduled"] - ev[e + "completed"],
        "budget_queue": ev[b + "started"] - ev[b + "scheduled"],
        "budget_grant": ev[b + "completed"] - ev[b + "started"],
        "wft_to_isolate": ev[i + "scheduled"] - ev[b + "completed"],
        "isolate_queue": ev[i + "started"] - ev[i + "scheduled"],
        "isolate_to_controller": iso - ev[i + "started"],
    }
    if s + "scheduled" in ev:  # read before isolating (its own activity on main)
        row["port_state"] = ev[s + "completed"] - ev[s + "scheduled"]
        row["wft_to_isolate"] = ev[i + "scheduled"] - ev[s + "completed"]
        row["wft_to_port_state"] = ev[s + "scheduled"] - ev[b + "completed"]
    row["ex_evidence"] = row["total"] - row["evidence_tool"]
    # every workflow task up to the isolate's: waiting for the worker to take it (server and
    # poll), and the worker's turn (workflow code, the records as local activities)
    row["wft_queue_sum"] = ev["wft_queue"]
    row["wft_run_sum"] = ev["wft_run"]
    row["workflow_tasks"] = ev["wft_count"]
    return row


def pct(values: list[float], q: float) -> float:
    v = sorted(values)
    return round(v[min(len(v) - 1, max(0, round(q * (len(v) - 1))))], 1)


def summary(rows: list[dict[str, float]]) -> dict[str, Any]:
    keys = list(dict.fromkeys(k for r in rows for k in r))
    out: dict[str, Any] = {"runbooks": len(rows)}
    for k in keys:
        vals = [r[k] for r in rows if k in r]
        out[k] = {"p50_ms": pct(vals, 0.5), "p90_ms": pct(vals, 0.9), "p99_ms": pct(vals, 0.99),
                  "max_ms": round(max(vals), 1), "mean_ms": round(statistics.fmean(vals), 1)}
    return out


async def abort_all(client: Any, ids: list[str], limit_s: float = 600) -> float:
    """Abort every runbook (its rollback returns the port and releases the budget), await."""
    from workflows.remediation.models import AbortRequest

    t0 = time.monotonic()
    # a few at a time: every release goes through the one fabric budget workflow, and a
    # crowd of them is mostly turned away (10 in-flight updates) and retried
    gate = asyncio.Semaphore(6)

    async def one(wf: str) -> None:
        async with gate:
            handle = client.get_workflow_handle(wf)
            await handle.signal("abort", AbortRequest(actor="bench",
                                                      reason="benchmark phase over"))
            await asyncio.wait_for(handle.result(), limit_s)
    await asyncio.gather(*[one(wf) for wf in ids])
    return time.monotonic() - t0


async def run_phase(phase: Phase, settings: Any, state: Path, sim_state: Path, client: Any,
                    publisher: Any, fabric: str, every: float, warmup: int, queue: str,
                    last: bool) -> None:
    from sim.controller import SimController
    from workflows.dispatch import runbook_id
    from workflows.inventory import Inventory  # noqa: F401 - the dispatcher's (below)

    worker = RunbookWorker(settings, state, sim_state, queue, phase.code, phase.name)
    try:
        worker.wait_ready()
        sim = SimController(sim_state)
        warm, counted = phase.targets[:warmup], phase.targets[warmup:]
        if warm:
            await inject(publisher, fabric, warm, 0.2, phase.name)
            await wait_isolated(sim, warm, 300)
        pids = (worker.proc.pid, PIDS["temporal"], PIDS["stream"])
        cpu0 = [cpu_seconds(p) for p in pids]
        t0 = time.monotonic()
        spy = (res.start_profiles({"runbook_worker": worker.proc.pid,
                                   "stream_worker": PIDS["stream"]}, PROFILE_S[0], state)
               if PROFILE_S[0] > 0 else {})
        await inject(publisher, fabric, counted, every, phase.name)
        isolated = await wait_isolated(sim, counted, 600)
        if spy:
            phase.profiles = await asyncio.to_thread(res.finish_profiles, spy, PROFILE_S[0])
        phase.wall_s = round(time.monotonic() - t0, 1)
        phase.worker_cpu_s, phase.temporal_cpu_s, phase.stream_cpu_s = (
            round(cpu_seconds(p) - c, 2) for p, c in zip(pids, cpu0, strict=True))
        phase.load_avg = round(os.getloadavg()[0], 2)
        inv = DISPATCH_INVENTORY[0]
        for t in phase.targets:
            t.workflow_id = runbook_id(_dispatcher_input(inv, fabric, t))
        for t in counted:
            ev = await timeline(client, t.workflow_id)
            phase.rows.append(stages(t.published_ms, ev, isolated[f"{t.device}:{t.port}"]))
        for t in phase.targets:
            st = await client.get_workflow_handle(t.workflow_id).query("status")
            state_name = st["state"] if isinstance(st, dict) else st.state
            if state_name not in ("awaiting_technician", "running"):
                raise SystemExit(f"{t.workflow_id}: {state_name} (the breaker refused?)")
        if not last:  # the next phase starts with the budget free
            await abort_all(client, [t.workflow_id for t in phase.targets])
    finally:
        worker.stop()


DISPATCH_INVENTORY: list[Any] = []
PROFILE_S = [0]  # --profile-seconds
PIDS: dict[str, int] = {}  # the Temporal server's and the stream worker's


def _dispatcher_input(inv: Any, fabric: str, t: Target) -> Any:
    from schemas.policy import Policy
    from workflows.dispatch import Dispatcher

    disp = Dispatcher(None, Policy(), inv, task_queue="x")  # type: ignore[arg-type]
    return disp.runbook_input(detection(fabric, t, "id"))


def start_load(state: Path, bootstrap: str, args: Any, fabric: str
               ) -> tuple[Any, subprocess.Popen[bytes]]:
    """The counters load in a process of its own (its CPU is not the bench's)."""
    log = (state / "load.log").open("ab")
    proc = subprocess.Popen([sys.executable, __file__, "--produce-load", bootstrap, args.preset,
                             fabric, str(args.ports), str(args.interval)],
                            stdout=log, stderr=subprocess.STDOUT)
    return log, proc


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="100k-port")
    ap.add_argument("--ports", type=int, default=100_000, help="counter samples per round")
    ap.add_argument("--interval", type=float, default=10.0, help="seconds per counters round")
    ap.add_argument("--runbooks", type=int, default=120, help="counted runbooks per phase")
    ap.add_argument("--every", type=float, default=0.5, help="seconds between detections")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--pairs", type=int, default=0, help="before/after pairs (with --before)")
    ap.add_argument("--before", type=Path, default=None, help="the 'before' tree (main)")
    ap.add_argument("--scenario", default="isolation_latency")
    ap.add_argument("--profile-seconds", type=int, default=0,
                    help="py-spy the runbook and stream workers while the runbooks run")
    ap.add_argument("--produce-load", nargs=5, metavar=("BOOTSTRAP", "PRESET", "FABRIC",
                                                        "PORTS", "INTERVAL"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args()
    PROFILE_S[0] = args.profile_seconds
    if args.produce_load:
        b, preset, fabric, ports, interval = args.produce_load
        await produce_load(b, preset, fabric, int(ports), float(interval))
        return

    from temporalio.client import Client
    from temporalio.contrib.pydantic import pydantic_data_converter

    from collectors.publish import Publisher
    from sim.controller import SimController
    from sim.topology import generate
    from workflows.inventory import Inventory

    if args.pairs and args.before is None:
        raise SystemExit("--pairs needs --before DIR")
    phases: list[Phase] = []
    for i in range(max(1, args.pairs)):
        if args.before is not None:
            phases.append(Phase(f"before{i}", args.before.resolve()))
        phases.append(Phase(f"after{i}", None))
    fab = generate(args.preset)
    topo = fab.to_topology(int(time.time() * 1000))
    inv = Inventory()
    inv.load(topo)
    DISPATCH_INVENTORY.append(inv)
    used: set[str] = set()
    for ph in phases:  # each phase's runbooks are aborted before the next: the budget is free
        ph.targets = plan_targets(fab, inv, args.runbooks + args.warmup, set(used))
        used.update(f"{t.device}:{t.port}" for t in ph.targets)

    with tempfile.TemporaryDirectory(prefix="isolation-") as tmp, stack(Path(tmp)) as settings:
        state = Path(tmp)
        sim_state = state / "sim"
        SimController(sim_state).record_fabric(fab.fabric, [f"{p.device}:{p.port}"
                                                            for p in fab.ports()])
        bootstrap = settings.kafka.bootstrap_servers
        async with Publisher(bootstrap, compression="zstd") as publisher:
            await publisher.send(topo)
            await publisher.flush()
            stream = WorkerProc(bootstrap, state, "isolation-bench", ledger=False)
            load_log, load = start_load(state, bootstrap, args, fab.fabric)
            try:
                stream.wait_ready()
                PIDS["stream"] = stream.proc.pid
                PIDS["temporal"] = orjson.loads((state / "stack" / "run" / "temporal.json"
                                                 ).read_bytes())["pid"]
                await asyncio.sleep(2 * args.interval)  # the load at its rate before timing
                client = await Client.connect(settings.temporal.target,
                                              data_converter=pydantic_data_converter)
                for n, ph in enumerate(phases):
                    await run_phase(ph, settings, state, sim_state, client, publisher,
                                    fab.fabric, args.every, args.warmup, QUEUE,
                                    n == len(phases) - 1)
                    print(f"{ph.name}: {summary(ph.rows)['total']}", flush=True)  # noqa: T201
                    # every phase's rows as they come (a run stopped later keeps them)
                    (ROOT / "benchmarks" / "results" / f"{args.scenario}.partial.json"
                     ).write_bytes(orjson.dumps({p.name: p.rows for p in phases if p.rows}))
                stream_cpu = cpu_seconds(stream.proc.pid)
                rounds = (state / "load.log").read_text().count("round ")
            finally:
                load.send_signal(signal.SIGTERM)
                load.wait(30)
                load_log.close()
                stream.stop()

    figures: dict[str, Any] = {
        "preset": args.preset, "load_port_samples_per_round": args.ports,
        "load_round_s": args.interval, "load_rounds_produced": rounds,
        "detection_every_s": args.every, "warmup_per_phase": args.warmup,
        "stream_worker_cpu_s": round(stream_cpu, 1),
        "clock": "one machine: the bench's send time, the Temporal server's event times, the "
                 "simulator controller's command log",
    }
    for ph in phases:
        figures[ph.name] = {"code": str(ph.code) if ph.code else "this tree",
                            "wall_s": ph.wall_s, "runbook_worker_cpu_s": ph.worker_cpu_s,
                            "temporal_server_cpu_s": ph.temporal_cpu_s,
                            "stream_worker_cpu_s": ph.stream_cpu_s,
                            "load_average_1m": ph.load_avg, **summary(ph.rows),
                            **({"profiles": ph.profiles} if ph.profiles else {})}
    if args.before is not None:
        befores = [r for ph in phases if ph.code for r in ph.rows]
        afters = [r for ph in phases if not ph.code for r in ph.rows]
        figures["before"] = summary(befores)
        figures["after"] = summary(afters)
        for k in ("total", "ex_evidence"):
            for q in ("p50_ms", "p99_ms"):
                figures[f"ratio_{k}_{q}_before_over_after"] = round(
                    figures["before"][k][q] / max(figures["after"][k][q], 0.1), 2)
    else:
        figures["after"] = summary([r for ph in phases for r in ph.rows])
    save_and_print(args.scenario, figures)
    # the rows as they came are in the result now
    (ROOT / "benchmarks" / "results" / f"{args.scenario}.partial.json").unlink(missing_ok=True)


if __name__ == "__main__":
    asyncio.run(main())
