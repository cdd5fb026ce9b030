"""The runbook with the real parts: detections from the real Kafka broker through the
dispatcher (signal-with-start), the simulator's own controller, and the chdb ledger; the
ledger shows every step of a port that was detected, isolated, repaired and returned."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment
from test_remediation import FAST, until
from wf_helpers import TicketServer

from collectors.publish import Publisher
from ledger.baselines import PinnedBaseline, pin
from ledger.embedded import EmbeddedLedger
from schemas.events import Action, Detection, DetectionKind, Severity, Topology, TopologyLink
from schemas.policy import Policy
from sim.controller import SimController
from workflows.adapters.baselines import LedgerBaselines
from workflows.adapters.k8s import NoFencer
from workflows.adapters.records import LedgerSink
from workflows.adapters.sim import SIM_PROBES, SimChecker, SimControllerAdapter, SimEvidence
from workflows.adapters.ticket import WebhookTicketing
from workflows.budget.activities import BudgetActivities
from workflows.dispatch import Dispatcher, run_dispatcher
from workflows.inventory import Inventory
from workflows.remediation.activities import FabricActivities
from workflows.remediation.models import StepDone
from workflows.remediation.workflows import PortRemediation
from workflows.worker import activity_functions, build_worker

pytestmark = pytest.mark.integration


def detection(fabric: str, device: str, port: int, det_id: str, action: Action) -> Detection:
    return Detection(id=det_id, ts=int(time.time() * 1000), fabric=fabric, source="streams",
                     device=device, port=port, detection=DetectionKind.FLAP,
                     severity=Severity.CRITICAL, action=action, episode=f"ep-{device}:{port}",
                     evidence={"downs": 3, "window_s": 1800})


def pin_sim_baselines(ledger: EmbeddedLedger, fabric: str) -> None:
    """What the simulator's healthy rails carry, pinned as an operator would."""
    for rail in range(2):
        for probe, (size, scale, gbps) in SIM_PROBES.items():
            pin(ledger, PinnedBaseline(fabric=fabric, rail=rail, probe=probe, size_bytes=size,
                                       scale=scale, gbps=gbps, pinned_by="ops-ana",
                                       pinned_ts=int(time.time() * 1000),
                                       links=("leaf-su01-r1:8",)))


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[EmbeddedLedger]:
    """The real chdb ledger; closed even when the test fails (one folder per process)."""
    led = EmbeddedLedger(tmp_path / "ledger")
    try:
        led.migrate()
        yield led
    finally:
        led.close()


async def test_detected_isolated_repaired_returned_with_the_ledger(
        wf_env: WorkflowEnvironment, kafka_bootstrap: str, tmp_path: Path,
        ticket_server: TicketServer, task_queue: str, ledger: EmbeddedLedger) -> None:
    client = wf_env.client
    fabric = f"e2e{uuid.uuid4().hex[:6]}"
    device, port = "leaf-su01-r1", 3
    # the cable's runbook: leaf-su01-r1:3 is cabled to node0002/mlx5_1:1
    wf_id = f"remediate/{fabric}/{device}:{port}~node0002/mlx5_1:1"
    sim = SimController(tmp_path / "sim", fix_chance={"clean-and-reseat": 1.0})
    adapter = SimControllerAdapter(sim, tmp_path / "sim")
    pin_sim_baselines(ledger, fabric)
    acts = FabricActivities(records=LedgerSink(ledger), controller=adapter,
                            evidence=SimEvidence(adapter), checker=SimChecker(adapter),
                            fencer=NoFencer(), ticketing=WebhookTicketing(ticket_server.url),
                            baselines=LedgerBaselines(ledger))
    topo = Topology(id=f"topo-{fabric}", ts=int(time.time() * 1000), fabric=fabric,
                    source="ibnetdiscover", links=[
                        TopologyLink(a_device=f"leaf-su01-r{r}", a_port=n + 1,
                                     b_device=f"node{n:04d}/mlx5_{r}", b_port=1)
                        for r in range(2) for n in range(8)])
    async with Publisher(kafka_bootstrap) as pub:
        await pub.send(topo)
        await pub.send(detection(fabric, device, port, f"{fabric}-d1", Action.ISOLATE_PORT))
        await pub.send(detection(fabric, device, port, f"{fabric}-d2", Action.ISOLATE_PORT))
        await pub.send(detection(fabric, "leaf-su01-r0", 1, f"{fabric}-d3", Action.TICKET))
    policy = Policy.from_yaml("fabricHealth: {runbook: {cleanCountersWait: 1s}}")
    # its own fabric only: the session broker holds other tests' detections for the same
    # device names, and the simulated controller is one fabric
    dispatcher = Dispatcher(client, policy, Inventory(), task_queue=task_queue, timeouts=FAST,
                            fabric=fabric)
    stop = asyncio.Event()
    worker = build_worker(client, task_queue,
                          activity_functions(acts, BudgetActivities(client, task_queue)))
    try:
        async with worker:
            disp = asyncio.create_task(run_dispatcher(dispatcher, kafka_bootstrap,
                                                      group_id=f"g-{fabric}", stop=stop))
            handle = client.get_workflow_handle_for(PortRemediation.run, wf_id)
            for _ in range(300):
                try:
                    st = await handle.query(PortRemediation.status)
                    if st.waiting_for == "clean-and-reseat" and len(st.detections) == 2:
                        break
                except Exception:  # noqa: BLE001, S110 - not started yet
                    pass
                await asyncio.sleep(0.1)
            st = await until(handle, lambda s: s.waiting_for == "clean-and-reseat"
                             and len(s.detections) == 2)
            assert sim.is_isolated(device, port)
            # placed by the topology read from fabric.topology before the detections
            assert (st.port.su, st.port.rail, st.port.peer_device, st.port.node) == (
                "su01", 1, "node0002/mlx5_1", "node0002")
            await handle.execute_update(PortRemediation.complete_step,
                                        StepDone(step="clean-and-reseat", actor="tech-hal",
                                                 note="reseated"))
            result = await asyncio.wait_for(handle.result(), 60)
            stop.set()
            await asyncio.wait_for(disp, 30)
    finally:
        await acts.aclose()
    assert result.outcome == "returned_to_service"
    assert not sim.is_isolated(device, port)
    assert dispatcher.stats.dispatched >= 2 and dispatcher.stats.ignored >= 1
    rows = ledger.query("SELECT step, outcome, actor FROM actions FINAL "
                        "WHERE workflow_id = {w:String} ORDER BY ts, id", {"w": wf_id})
    steps = [r["step"] for r in rows]
    for expected in ("detection", "evidence", "budget", "isolate", "fence", "ticket",
                     "ladder:clean-and-reseat", "check:ib_write_bw-per-rail",
                     "check:nccl-allreduce-baseline", "check:counters-clean-24h",
                     "unisolate", "return", "outcome"):
        assert expected in steps, (expected, steps)
    assert {r["actor"] for r in rows if r["step"] == "ladder:clean-and-reseat"} == {"tech-hal"}
    evidence = ledger.query("SELECT tool, device, port FROM evidence FINAL WHERE workflow_id = "
                            "{w:String} ORDER BY device", {"w": wf_id})
    # from both ends of the cable
    assert [(e["tool"], e["device"], e["port"]) for e in evidence] == [
        ("sim_port_state", "leaf-su01-r1", 3), ("sim_port_state", "node0002/mlx5_1", 1)]
    # only the isolate_port detection started a runbook
    assert not sim.is_isolated("leaf-su01-r0", 1)


async def test_a_repair_that_did_not_hold_fails_probation_and_the_next_passes(
        wf_env: WorkflowEnvironment, kafka_bootstrap: str, tmp_path: Path,
        ticket_server: TicketServer, task_queue: str, ledger: EmbeddedLedger) -> None:
    """One fault through the simulator: the reseat does not fix it, so under probation's
    probe traffic the link measures below its pinned baseline and is isolated again; the
    new optic fixes it and passes. The report shows probation and the measurements."""
    from fabricwatch.report.build import build_report
    from fabricwatch.report.html import render_html
    from fabricwatch.report.terminal import return_to_service_line

    client = wf_env.client
    fabric = f"e2p{uuid.uuid4().hex[:6]}"
    device, port = "leaf-su01-r1", 4
    wf_id = f"remediate/{fabric}/{device}:{port}~node0003/mlx5_1:1"
    started = int(time.time() * 1000)
    sim = SimController(tmp_path / "sim", fix_chance={"clean-and-reseat": 0.0,
                                                      "swap-optic": 1.0})
    adapter = SimControllerAdapter(sim, tmp_path / "sim")
    pin_sim_baselines(ledger, fabric)
    acts = FabricActivities(records=LedgerSink(ledger), controller=adapter,
                            evidence=SimEvidence(adapter), checker=SimChecker(adapter),
                            fencer=NoFencer(), ticketing=WebhookTicketing(ticket_server.url),
                            baselines=LedgerBaselines(ledger))
    topo = Topology(id=f"topo-{fabric}", ts=started, fabric=fabric, source="ibnetdiscover",
                    links=[TopologyLink(a_device=f"leaf-su01-r{r}", a_port=n + 1,
                                        b_device=f"node{n:04d}/mlx5_{r}", b_port=1)
                           for r in range(2) for n in range(8)])
    async with Publisher(kafka_bootstrap) as pub:
        await pub.send(topo)
        await pub.send(detection(fabric, device, port, f"{fabric}-d1", Action.ISOLATE_PORT))
    policy = Policy.from_yaml("fabricHealth: {runbook: {cleanCountersWait: 1s}}")
    dispatcher = Dispatcher(client, policy, Inventory(), task_queue=task_queue, timeouts=FAST,
                            fabric=fabric)
    stop = asyncio.Event()
    worker = build_worker(client, task_queue,
                          activity_functions(acts, BudgetActivities(client, task_queue)))
    try:
        async with worker:
            disp = asyncio.create_task(run_dispatcher(dispatcher, kafka_bootstrap,
                                                      group_id=f"g-{fabric}", stop=stop))
            handle = client.get_workflow_handle_for(PortRemediation.run, wf_id)
            for _ in range(300):
                try:
                    await handle.query(PortRemediation.status)
                    break
                except Exception:  # noqa: BLE001, S110 - not started yet
                    await asyncio.sleep(0.1)
            await until(handle, lambda s: s.waiting_for == "clean-and-reseat")
            await handle.execute_update(PortRemediation.complete_step,
                                        StepDone(step="clean-and-reseat", actor="tech-hal"))
            st = await until(handle, lambda s: s.waiting_for == "swap-optic")
            assert st.isolated and sim.is_isolated(device, port)  # isolated again
            await handle.execute_update(PortRemediation.complete_step,
                                        StepDone(step="swap-optic", actor="tech-hal"))
            result = await asyncio.wait_for(handle.result(), 60)
            stop.set()
            await asyncio.wait_for(disp, 30)
    finally:
        await acts.aclose()
    assert result.outcome == "returned_to_service" and result.fixed_by == "swap-optic"
    assert not sim.is_isolated(device, port)
    ops = [c["op"] for c in sim.commands() if c.get("key") == f"{device}:{port}"
           and c["op"] in ("isolate", "unisolate")]
    assert ops == ["isolate", "unisolate", "isolate", "unisolate"]
    report = build_report(ledger, since_ms=started - 60_000,
                          until_ms=int(time.time() * 1000) + 60_000)
    assert report.probation_outcomes == {"passed": 1, "failed": 1, "failures": 1,
                                         "waiting_on_human": 0}
    mine = [r for r in report.probation_records if r["workflow_id"] == wf_id]
    failed = [r for r in mine if r["step"] == "check:ib_write_bw-per-rail"
              and r["outcome"] == "failed"]
    assert len(failed) == 1 and "215.6/392.0 Gb/s (55%)" in failed[0]["note"]
    passed = [r for r in mine if r["step"] == "check:ib_write_bw-per-rail"
              and r["outcome"] == "done"]
    assert passed and "392.0/392.0 Gb/s (100%)" in passed[0]["note"]
    lane = next(rb for rb in report.runbooks if rb.workflow_id == wf_id)
    labels = [f"{step} ({outcome})" for _, step, outcome in lane.steps]
    assert "probation (failed)" in labels and labels.count("probation (done)") == 3
    html = render_html(report)
    assert "<h2>Probation</h2>" in html and "215.6/392.0 Gb/s (55%)" in html
    assert "probation (failed)" in html  # the timeline's segment titles
    assert return_to_service_line(report.probation_outcomes).startswith(
        "return to service: 1 runbook(s) passed probation, 1 failed it")
