"""Probation on the real Temporal dev server: the link re-enabled with the rail fenced, probed
against pinned baselines, soaked under repeating probes (the 24 h soak time-skipped), and
isolated again with the next rung when it fails; checks that cannot be judged hold the
runbook for a human; a waived check is recorded as waived."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import WorkflowEnvironment
from test_remediation import make_input, running_worker, start, steps, until, wid
from wf_helpers import FileFabric, SimBaselines, TicketServer, fabric_activities

from schemas.policy import Policy
from workflows.adapters.records import MemorySink
from workflows.adapters.tools import CommandChecker
from workflows.budget.activities import BudgetActivities
from workflows.remediation.models import AbortRequest, Approval, DetectionRef, StepDone
from workflows.remediation.workflows import PortRemediation
from workflows.worker import activity_functions, build_worker

pytestmark = pytest.mark.integration

KEY = "leaf-su01-r1:7"
PEER = "node0001/mlx5_1:1"


def policy(**probation: Any) -> Policy:
    return Policy.from_mapping({"fabricHealth": {"probation": probation}})


def actions(sink: MemorySink, workflow_id: str, step: str) -> list[Any]:
    return [a for a in sink.actions() if a.workflow_id == workflow_id and a.step == step]


async def needs_human_gauge(client: Any, ok: Callable[[float], bool]) -> float:
    """``fabricwatch_runbooks_needs_human`` as ``RunbookMetrics`` sets it, once ``ok``
    (visibility lists a state change a moment later)."""
    from prometheus_client import REGISTRY

    from runtime.metrics import RunbookMetrics

    rm = RunbookMetrics(client)
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        await rm.update()
        value = REGISTRY.get_sample_value("fabricwatch_runbooks_needs_human") or 0.0
        if ok(value):
            return value
        assert asyncio.get_running_loop().time() < deadline, value
        await asyncio.sleep(0.3)


async def step_done(handle: Any, rung: str, actor: str = "tech-ana") -> None:
    await until(handle, lambda s: s.waiting_for == rung)
    await handle.execute_update(PortRemediation.complete_step, StepDone(step=rung, actor=actor))


async def test_a_good_repair_passes_probation_under_traffic_and_returns(
        wf_env: WorkflowEnvironment, tmp_path: Path, ticket_server: TicketServer,
        task_queue: str) -> None:
    client = wf_env.client
    fabric = FileFabric(tmp_path)
    fabric.script({"*": "clean-and-reseat"})
    inp = make_input(wait_s=Policy().fabric_health.runbook.clean_counters_wait,
                     policy=policy(probeInterval="6h"))
    assert inp.config.clean_counters_wait_s == 24 * 3600
    async with running_worker(client, task_queue, fabric, ticket_server) as sink:
        handle = await start(client, inp, task_queue)
        await step_done(handle, "clean-and-reseat")
        st = await until(handle, lambda s: s.state == "probation_soak")
        # in probation the link is up (it carries the probes) and still the runbook's
        assert not st.isolated and not fabric.is_isolated("leaf-su01-r1", 7)
        assert st.budget_held
        assert [m["check"] for m in st.measurements] == ["ib_write_bw-per-rail",
                                                         "nccl-allreduce-baseline"]
        t0 = await wf_env.get_current_time(handle)
        await wf_env.fast_forward(handle, timedelta(hours=24, minutes=1))
        result = await asyncio.wait_for(handle.result(), 120)
        t1 = await wf_env.get_current_time(handle)
        final = await handle.query(PortRemediation.status)
    assert result.outcome == "returned_to_service" and result.fixed_by == "clean-and-reseat"
    assert t1 - t0 >= timedelta(hours=24)
    names = [s for s, _ in steps(sink, wid(inp))]
    # re-enabled before any check ran, the checks under traffic, and one un-isolation only
    assert names.index("ladder:clean-and-reseat") < names.index("unisolate") \
        < names.index("probation") < names.index("check:ib_write_bw-per-rail")
    assert names.index("check:counters-clean-24h") < names.index("return")
    assert len(fabric.calls("isolate")) == 1 and len(fabric.calls("unisolate")) == 1
    # the probes repeated on the schedule through the soak (0 h, then every 6 h)
    rounds = sorted({m["round"] for m in final.measurements})
    assert rounds == [0, 1, 2, 3], rounds
    bw = actions(sink, wid(inp), "check:ib_write_bw-per-rail")[0]
    runs = bw.after["runs"]
    assert [r["run"] for r in runs] == ["forward", "reverse"]  # both directions
    assert all(r["bw_gbps"] == 392.0 and r["baseline_gbps"] == 392.0 for r in runs)
    assert runs[0]["baseline_pinned_by"] == "test-pinner" and bw.after["slo_fraction"] == 0.9
    soak = actions(sink, wid(inp), "check:counters-clean-24h")[0]
    assert soak.outcome == "done" and soak.after["errors"] == 0
    assert not fabric.is_isolated("leaf-su01-r1", 7)


async def test_a_repair_that_leaves_the_link_slow_fails_ib_write_bw_and_moves_on(
        wf_env: WorkflowEnvironment, tmp_path: Path, ticket_server: TicketServer,
        task_queue: str) -> None:
    client = wf_env.client
    fabric = FileFabric(tmp_path)
    fabric.script({"*": "clean-and-reseat"})  # "fixed" says the controller...
    fabric.slow(KEY, 0.7)  # ...but the link trains slow: 70 % of the baseline
    inp = make_input(wait_s=1.0)
    async with running_worker(client, task_queue, fabric, ticket_server) as sink:
        handle = await start(client, inp, task_queue)
        await step_done(handle, "clean-and-reseat")
        st = await until(handle, lambda s: s.waiting_for == "swap-optic")
        # isolated again, the failing measurement in the ledger
        assert st.isolated and fabric.is_isolated("leaf-su01-r1", 7)
        failed = [a for a in actions(sink, wid(inp), "check:ib_write_bw-per-rail")
                  if a.outcome == "failed"]
        assert len(failed) == 1
        assert failed[0].after["worst_fraction"] == pytest.approx(0.7)
        assert "below 90% of the pinned baseline" in (failed[0].note or "")
        assert not actions(sink, wid(inp), "check:nccl-allreduce-baseline")
        fabric.slow(KEY, 0.97)  # the new optic carries the rail's bandwidth
        await step_done(handle, "swap-optic")
        result = await asyncio.wait_for(handle.result(), 60)
    assert result.outcome == "returned_to_service" and result.fixed_by == "swap-optic"
    probation = actions(sink, wid(inp), "probation")
    assert [a.outcome for a in probation] == ["done", "failed", "done", "done"]
    assert len(fabric.calls("isolate")) == 2 and len(fabric.calls("unisolate")) == 2


async def test_errors_during_the_soak_fail_it(wf_env: WorkflowEnvironment, tmp_path: Path,
                                              ticket_server: TicketServer,
                                              task_queue: str) -> None:
    client = wf_env.client
    fabric = FileFabric(tmp_path)
    fabric.script({"*": "clean-and-reseat"})
    inp = make_input(wait_s=24 * 3600.0)
    async with running_worker(client, task_queue, fabric, ticket_server) as sink:
        handle = await start(client, inp, task_queue)
        await step_done(handle, "clean-and-reseat")
        await until(handle, lambda s: s.state == "probation_soak")
        # the stream's detectors see the link, now up, cross the error-rate threshold
        det = DetectionRef(id="det-soak-1", ts=1_700_000_100_000, detection="error_rate",
                           severity="warning", action="ticket", episode="ep-soak",
                           source="streams", device="node0001/mlx5_1", port=1)
        await handle.signal(PortRemediation.detection, det)
        st = await until(handle, lambda s: s.waiting_for == "swap-optic")
        assert st.isolated and fabric.is_isolated("leaf-su01-r1", 7)
        failed = [a for a in actions(sink, wid(inp), "probation") if a.outcome == "failed"]
        assert len(failed) == 1 and "det-soak-1" in (failed[0].note or "")
        await handle.signal(PortRemediation.abort, AbortRequest(actor="ops", reason="test"))
        result = await asyncio.wait_for(handle.result(), 60)
    assert result.outcome == "aborted"


async def test_dirty_counters_in_the_soak_fail_the_rung(wf_env: WorkflowEnvironment,
                                                        tmp_path: Path,
                                                        ticket_server: TicketServer,
                                                        task_queue: str) -> None:
    client = wf_env.client
    fabric = FileFabric(tmp_path)
    fabric.script({"*": "clean-and-reseat"})
    fabric.errors_under_traffic(KEY, 40)  # errors only under load: probes pass, soak fails
    inp = make_input(wait_s=1.0)
    async with running_worker(client, task_queue, fabric, ticket_server) as sink:
        handle = await start(client, inp, task_queue)
        await step_done(handle, "clean-and-reseat")
        await until(handle, lambda s: s.waiting_for == "swap-optic")
        soak = actions(sink, wid(inp), "check:counters-clean-24h")
        assert [a.outcome for a in soak] == ["failed"] and soak[0].after["errors"] == 40
        assert fabric.is_isolated("leaf-su01-r1", 7)
        await handle.signal(PortRemediation.abort, AbortRequest(actor="ops", reason="test"))
        assert (await asyncio.wait_for(handle.result(), 60)).outcome == "aborted"


async def test_an_unconfigured_check_holds_the_runbook_for_a_human(
        wf_env: WorkflowEnvironment, tmp_path: Path, ticket_server: TicketServer,
        task_queue: str) -> None:
    client = wf_env.client
    fabric = FileFabric(tmp_path)
    fabric.script({"*": "clean-and-reseat"})
    inp = make_input(wait_s=1.0)
    # a real fabric's worker with no command configured for any check
    acts, sink = fabric_activities(fabric, ticket_server.url, checker=CommandChecker({}))
    worker = build_worker(client, task_queue,
                          activity_functions(acts, BudgetActivities(client, task_queue)))
    async with worker:
        handle = await start(client, inp, task_queue)
        await step_done(handle, "clean-and-reseat")
        st = await until(handle, lambda s: s.state == "needs_human")
        assert st.waiting_for == "approve"
        assert "no command configured" in (st.needs_human or "")
        assert "ib_write_bw-per-rail" in (st.needs_human or "")
        assert st.isolated and fabric.is_isolated("leaf-su01-r1", 7)  # fail closed
        pages = [r for r in ticket_server.ops(wid(inp), "page")
                 if "check:ib_write_bw-per-rail" in r["summary"]]
        assert pages
        # the runbook worker's gauge counts it (the alert rule FabricwatchRunbooksWaiting)
        held = await needs_human_gauge(client, lambda v: v >= 1)
        # approve without configuring anything: probation runs again and holds again
        await handle.signal(PortRemediation.approve, Approval(actor="ops", note="retry"))
        await until(handle, lambda s: s.state == "needs_human"
                    and len([a for a in sink.actions() if a.step == "approve"]) == 1)
        await handle.signal(PortRemediation.abort, AbortRequest(actor="ops", reason="test"))
        result = await asyncio.wait_for(handle.result(), 60)
    await acts.aclose()
    assert result.outcome == "aborted"
    assert result.fixed_by is None
    await needs_human_gauge(client, lambda v: v == held - 1)  # aborted: no longer waiting
    checks = actions(sink, wid(inp), "check:ib_write_bw-per-rail")
    assert checks and all(a.outcome == "failed" for a in checks)
    assert not [a for a in sink.actions() if a.step == "return"]


async def test_a_baseline_learned_on_the_cable_itself_is_refused(
        wf_env: WorkflowEnvironment, tmp_path: Path, ticket_server: TicketServer,
        task_queue: str) -> None:
    client = wf_env.client
    fabric = FileFabric(tmp_path)
    fabric.script({"*": "clean-and-reseat"})
    inp = make_input(wait_s=1.0)
    acts, sink = fabric_activities(fabric, ticket_server.url,
                                   baselines=SimBaselines(links=(KEY, "spine-1:3")))
    worker = build_worker(client, task_queue,
                          activity_functions(acts, BudgetActivities(client, task_queue)))
    async with worker:
        handle = await start(client, inp, task_queue)
        await step_done(handle, "clean-and-reseat")
        st = await until(handle, lambda s: s.state == "needs_human")
        assert "the cable under repair" in (st.needs_human or "")
        await handle.signal(PortRemediation.abort, AbortRequest(actor="ops", reason="test"))
        await asyncio.wait_for(handle.result(), 60)
    await acts.aclose()


async def test_a_waived_check_is_recorded_as_waived(wf_env: WorkflowEnvironment,
                                                    tmp_path: Path,
                                                    ticket_server: TicketServer,
                                                    task_queue: str) -> None:
    client = wf_env.client
    fabric = FileFabric(tmp_path)
    fabric.script({"*": "clean-and-reseat"})
    inp = make_input(wait_s=1.0, policy=policy(
        waive=["nccl-allreduce-baseline"], waivedBy="ops-lead",
        waiveReason="no GPU nodes on this rail yet"))
    async with running_worker(client, task_queue, fabric, ticket_server) as sink:
        handle = await start(client, inp, task_queue)
        await step_done(handle, "clean-and-reseat")
        result = await asyncio.wait_for(handle.result(), 60)
        st = await handle.query(PortRemediation.status)
    assert result.outcome == "returned_to_service"
    assert st.waived == {"nccl-allreduce-baseline": "ops-lead (no GPU nodes on this rail yet)"}
    waived = actions(sink, wid(inp), "check:nccl-allreduce-baseline")
    assert [a.outcome for a in waived] == ["skipped"]
    assert waived[0].note == "waived by ops-lead (no GPU nodes on this rail yet); not run"
    assert "nccl-allreduce-baseline" not in {m["check"] for m in st.measurements}
    assert actions(sink, wid(inp), "check:ib_write_bw-per-rail")[0].outcome == "done"
