"""The remediation runbook on the real Temporal dev server: happy path with the 24 h wait
(time skipping), the ladder, abort, shadow mode and a duplicate detection joining."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.testing import WorkflowEnvironment
from wf_helpers import FileFabric, TicketServer, fabric_activities

from schemas.policy import Policy
from workflows.adapters.records import MemorySink
from workflows.budget.activities import BudgetActivities
from workflows.budget.models import fabric_budget_id, su_budget_id
from workflows.budget.workflows import IsolationBudget
from workflows.remediation.models import (
    AbortRequest,
    ActivityTimeouts,
    Approval,
    DetectionRef,
    PortRef,
    RemediationInput,
    RemediationResult,
    RunbookConfig,
    StepDone,
)
from workflows.remediation.workflows import PortRemediation
from workflows.worker import activity_functions, build_worker

pytestmark = pytest.mark.integration

FAST = ActivityTimeouts(record=10, controller=10, evidence=10, evidence_heartbeat=5, ticket=10,
                        check=10, check_heartbeat=5, budget=10)


def make_input(device: str = "leaf-su01-r1", port: int = 7, *, su: str = "su01",
               wait_s: float = 1.0, su_limit: int = 2, shadow: bool = False,
               policy: Policy | None = None, fabric: str | None = None) -> RemediationInput:
    fabric = fabric or f"f{uuid.uuid4().hex[:8]}"
    cfg = RunbookConfig.from_policy(policy or Policy(), fabric=fabric, detection="flap",
                                    su_ports=200, fabric_ports=4000, timeouts=FAST)
    cfg = cfg.model_copy(update={"clean_counters_wait_s": wait_s, "su_limit": su_limit,
                                 "shadow": shadow or cfg.shadow})
    return RemediationInput(
        port=PortRef(fabric=fabric, device=device, port=port, su=su, rail=1,
                     peer_device="node0001/mlx5_1", peer_port=1),
        detection=DetectionRef(id=f"det-{uuid.uuid4().hex[:8]}", ts=1_700_000_000_000,
                               detection="flap", severity="critical", action="isolate_port",
                               episode="ep-1", source="test"),
        config=cfg)


def wid(inp: RemediationInput) -> str:
    return f"remediate/{inp.port.fabric}/{inp.port.device}:{inp.port.port}"


@asynccontextmanager
async def running_worker(client: Client, task_queue: str, fabric: FileFabric,
                         tickets: TicketServer, sink: Any = None
                         ) -> AsyncIterator[MemorySink]:
    acts, sink = fabric_activities(fabric, tickets.url, sink)
    worker = build_worker(client, task_queue,
                          activity_functions(acts, BudgetActivities(client, task_queue)))
    try:
        async with worker:
            yield sink
    finally:
        await acts.aclose()


async def start(client: Client, inp: RemediationInput, task_queue: str
                ) -> WorkflowHandle[PortRemediation, RemediationResult]:
    return await client.start_workflow(PortRemediation.run, inp, id=wid(inp),
                                       task_queue=task_queue)


async def until(handle: WorkflowHandle[Any, Any], pred: Callable[[Any], bool],
                within: float = 30.0) -> Any:
    """Poll the status query until ``pred`` holds."""
    deadline = asyncio.get_running_loop().time() + within
    while True:
        st = await handle.query(PortRemediation.status)
        if pred(st):
            return st
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out; last status step={st.step} state={st.state} "
                                 f"waiting_for={st.waiting_for}")
        await asyncio.sleep(0.1)


def steps(sink: MemorySink, workflow_id: str) -> list[tuple[str, str]]:
    return [(a.step, a.outcome) for a in sink.actions() if a.workflow_id == workflow_id]


async def test_happy_path_with_the_24h_wait(wf_env: WorkflowEnvironment, tmp_path: Path,
                                            ticket_server: TicketServer, task_queue: str) -> None:
    client = wf_env.client
    fabric = FileFabric(tmp_path)
    fabric.script({"*": "clean-and-reseat"})
    inp = make_input(wait_s=Policy().fabric_health.runbook.clean_counters_wait)
    assert inp.config.clean_counters_wait_s == 24 * 3600
    async with running_worker(client, task_queue, fabric, ticket_server) as sink:
        handle = await start(client, inp, task_queue)
        st = await until(handle, lambda s: s.waiting_for == "clean-and-reseat")
        assert st.isolated and st.budget_held and st.ticket
        assert fabric.is_isolated("leaf-su01-r1", 7)
        await handle.execute_update(PortRemediation.complete_step,
                                    StepDone(step="clean-and-reseat", actor="tech-ana",
                                             note="reseated both ends"))
        await until(handle, lambda s: s.state in ("waiting_clean_counters", "probation_soak"))
        started = asyncio.get_running_loop().time()
        t0 = await wf_env.get_current_time(handle)
        # returns False here: the workflow completes before the clock reaches the target
        await wf_env.fast_forward(handle, timedelta(hours=24, minutes=1))
        result = await asyncio.wait_for(handle.result(), 60)
        wall = asyncio.get_running_loop().time() - started
        t1 = await wf_env.get_current_time(handle)
        su = await client.get_workflow_handle(su_budget_id(inp.port.fabric, "su01")).query(
            IsolationBudget.state)
        fab = await client.get_workflow_handle(fabric_budget_id(inp.port.fabric)).query(
            IsolationBudget.state)
    assert result.outcome == "returned_to_service"
    assert result.fixed_by == "clean-and-reseat"
    assert t1 - t0 >= timedelta(hours=24)  # the workflow's clock really moved a day
    assert wall < 60
    assert not fabric.is_isolated("leaf-su01-r1", 7)
    assert len(fabric.calls("isolate")) == 1 and len(fabric.calls("unisolate")) == 1
    # the ledger records, in order
    recorded = steps(sink, wid(inp))
    names = [s for s, _ in recorded]
    for expected in ("detection", "evidence", "budget", "isolate", "fence", "ticket",
                     "ladder:clean-and-reseat", "check:ib_write_bw-per-rail",
                     "check:nccl-allreduce-baseline", "check:counters-clean-24h", "unisolate",
                     "return", "outcome"):
        assert expected in names, (expected, names)
    assert names.index("evidence") < names.index("isolate") < names.index("ticket")
    ladder = [a for a in sink.actions() if a.step == "ladder:clean-and-reseat"][0]
    assert ladder.actor == "tech-ana" and ladder.note == "reseated both ends"
    assert all(o in ("done", "skipped") for _, o in recorded)
    # one ticket, opened and closed; budget released
    assert len(ticket_server.ops(wid(inp), "open")) == 1
    assert len(ticket_server.ops(wid(inp), "close")) == 1
    assert su.in_use == 0 and fab.in_use == 0 and su.granted_total == 1


async def test_failed_check_moves_down_the_ladder(wf_env: WorkflowEnvironment, tmp_path: Path,
                                                  ticket_server: TicketServer,
                                                  task_queue: str) -> None:
    client = wf_env.client
    fabric = FileFabric(tmp_path)
    fabric.script({"*": "swap-cable"})  # the third rung fixes it
    inp = make_input(wait_s=0.5)
    async with running_worker(client, task_queue, fabric, ticket_server) as sink:
        handle = await start(client, inp, task_queue)
        for rung in ("clean-and-reseat", "swap-optic", "swap-cable"):
            await until(handle, lambda s, r=rung: s.waiting_for == r)
            # a wrong step is refused at once, and changes nothing
            with pytest.raises(WorkflowUpdateFailedError) as info:
                await handle.execute_update(PortRemediation.complete_step,
                                            StepDone(step="swap-switch-port", actor="tech-bo"))
            assert f"the awaited step is '{rung}'" in str(info.value.cause)
            await handle.execute_update(PortRemediation.complete_step,
                                        StepDone(step=rung, actor="tech-bo"))
        result = await asyncio.wait_for(handle.result(), 60)
    assert result.outcome == "returned_to_service" and result.fixed_by == "swap-cable"
    recorded = steps(sink, wid(inp))
    failed = [s for s, o in recorded if o == "failed"]
    # the first check fails in probation after each of the first two rungs; the rest are
    # not run, and the link is isolated again each time
    assert failed == ["check:ib_write_bw-per-rail", "probation"] * 2
    assert [c["rung"] for c in fabric.calls("repair_step")] == [
        "clean-and-reseat", "swap-optic", "swap-cable"]
    assert len(fabric.calls("isolate")) == 3 and len(fabric.calls("unisolate")) == 3
    updates = [r["summary"] for r in ticket_server.ops(wid(inp), "update")]
    assert any("next: swap-optic" in u for u in updates)


async def test_last_rung_failing_escalates_to_a_human(wf_env: WorkflowEnvironment,
                                                      tmp_path: Path,
                                                      ticket_server: TicketServer,
                                                      task_queue: str) -> None:
    client = wf_env.client
    fabric = FileFabric(tmp_path)
    fabric.script({})  # nothing fixes it
    policy = Policy.from_yaml("fabricHealth: {repairLadder: [clean-and-reseat, swap-cable]}")
    inp = make_input(wait_s=0.2, policy=policy)
    async with running_worker(client, task_queue, fabric, ticket_server) as sink:
        handle = await start(client, inp, task_queue)
        for rung in ("clean-and-reseat", "swap-cable"):
            await until(handle, lambda s, r=rung: s.waiting_for == r)
            await handle.signal(PortRemediation.step_done, StepDone(step=rung, actor="tech"))
        st = await until(handle, lambda s: s.state == "escalated" and s.waiting_for == "approve")
        assert st.isolated  # still out of service while a human decides
        assert any(r["op"] == "page" for r in ticket_server.ops(wid(inp)))
        fabric.mark_healthy("leaf-su01-r1", 7)  # the human fixed it by hand
        await handle.signal(PortRemediation.approve, Approval(actor="lead-cy", note="replaced"))
        result = await asyncio.wait_for(handle.result(), 60)
    assert result.outcome == "returned_to_service" and result.fixed_by == "escalation"
    approvals = [a for a in sink.actions() if a.step == "approve"]
    assert approvals and approvals[0].actor == "lead-cy"


async def test_abort_rolls_back_isolation(wf_env: WorkflowEnvironment, tmp_path: Path,
                                          ticket_server: TicketServer, task_queue: str) -> None:
    client = wf_env.client
    fabric = FileFabric(tmp_path)
    inp = make_input()
    async with running_worker(client, task_queue, fabric, ticket_server) as sink:
        handle = await start(client, inp, task_queue)
        await until(handle, lambda s: s.waiting_for == "clean-and-reseat")
        assert fabric.is_isolated("leaf-su01-r1", 7)
        await handle.signal(PortRemediation.abort, AbortRequest(actor="oncall-dee",
                                                                reason="wrong port"))
        result = await asyncio.wait_for(handle.result(), 60)
        su = await client.get_workflow_handle(su_budget_id(inp.port.fabric, "su01")).query(
            IsolationBudget.state)
    assert result.outcome == "aborted"
    assert not fabric.is_isolated("leaf-su01-r1", 7)
    assert su.in_use == 0
    names = [s for s, _ in steps(sink, wid(inp))]
    # the port goes back before the budget is released
    assert names.index("abort") < names.index("unisolate") < names.index("outcome")
    assert names[-2:] == ["budget", "outcome"]
    abort = [a for a in sink.actions() if a.step == "abort"][0]
    assert abort.actor == "oncall-dee" and abort.note == "wrong port"
    assert len(ticket_server.ops(wid(inp), "close")) == 1


async def test_shadow_mode_records_everything_and_changes_nothing(
        wf_env: WorkflowEnvironment, tmp_path: Path, ticket_server: TicketServer,
        task_queue: str) -> None:
    client = wf_env.client
    fabric = FileFabric(tmp_path)
    fabric_name = f"f{uuid.uuid4().hex[:8]}"
    policy = Policy.from_yaml(f"fabricHealth: {{shadow: {{fabrics: [{fabric_name}]}}}}")
    inp = make_input(policy=policy, fabric=fabric_name)
    assert inp.config.shadow
    async with running_worker(client, task_queue, fabric, ticket_server) as sink:
        handle = await start(client, inp, task_queue)
        result = await asyncio.wait_for(handle.result(), 60)
        su = await client.get_workflow_handle(su_budget_id(fabric_name, "su01")).query(
            IsolationBudget.state)
    assert result.outcome == "shadow_done"
    assert fabric.calls("isolate") == [] and fabric.calls("unisolate") == []
    assert fabric.calls("reset_counters") == [] and fabric.calls("repair_step") == []
    assert ticket_server.ops(wid(inp)) == []
    assert su.in_use == 0 and su.granted_total == 0  # the budget was asked, nothing held
    recorded = steps(sink, wid(inp))
    assert {o for _, o in recorded} <= {"dry_run", "skipped"}
    names = [s for s, _ in recorded]
    for expected in ("budget", "isolate", "ticket", "ladder:clean-and-reseat",
                     "check:counters-clean-24h", "return"):
        assert expected in names
    assert all(a.dry_run for a in sink.actions() if a.workflow_id == wid(inp))


async def test_duplicate_detection_joins_the_running_workflow(
        wf_env: WorkflowEnvironment, tmp_path: Path, ticket_server: TicketServer,
        task_queue: str) -> None:
    from workflows.dispatch import start_or_join

    client = wf_env.client
    fabric = FileFabric(tmp_path)
    inp = make_input()
    second = inp.detection.model_copy(update={"id": "det-second"})
    async with running_worker(client, task_queue, fabric, ticket_server) as sink:
        h1 = await start_or_join(client, inp, task_queue=task_queue)
        await until(h1, lambda s: s.waiting_for == "clean-and-reseat")
        h2 = await start_or_join(client, inp.model_copy(update={"detection": second}),
                                 task_queue=task_queue)
        # the same detection again (a replayed Kafka message) is not counted twice
        await start_or_join(client, inp.model_copy(update={"detection": second}),
                            task_queue=task_queue)
        st = await until(h1, lambda s: len(s.detections) == 2
                         and any(h.step == "detection" and "joined" in (h.note or "")
                                 for h in s.history))
        assert h2.result_run_id == h1.result_run_id
        assert [d.id for d in st.detections] == [inp.detection.id, "det-second"]
        await h1.signal(PortRemediation.abort, AbortRequest(actor="t"))
        await asyncio.wait_for(h1.result(), 60)
    assert len(fabric.calls("isolate")) == 1
    assert len(ticket_server.ops(wid(inp), "open")) == 1
    joined = [a for a in sink.actions() if a.step == "detection" and "joined" in (a.note or "")]
    assert len(joined) == 1


async def test_cancel_from_temporal_rolls_back_too(wf_env: WorkflowEnvironment, tmp_path: Path,
                                                   ticket_server: TicketServer,
                                                   task_queue: str) -> None:
    from temporalio.client import WorkflowFailureError

    client = wf_env.client
    fabric = FileFabric(tmp_path)
    inp = make_input()
    async with running_worker(client, task_queue, fabric, ticket_server) as sink:
        handle = await start(client, inp, task_queue)
        await until(handle, lambda s: s.waiting_for == "clean-and-reseat")
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(handle.result(), 60)
        su = await client.get_workflow_handle(su_budget_id(inp.port.fabric, "su01")).query(
            IsolationBudget.state)
    assert not fabric.is_isolated("leaf-su01-r1", 7) and su.in_use == 0
    names = [s for s, _ in steps(sink, wid(inp))]
    assert "unisolate" in names and names[-1] == "outcome"


async def test_technician_reminders_and_escalation_over_a_day(
        wf_env: WorkflowEnvironment, tmp_path: Path, ticket_server: TicketServer,
        task_queue: str) -> None:
    """Default policy: a reminder every 4 h, one escalation page at 24 h (time skipped)."""
    client = wf_env.client
    fabric = FileFabric(tmp_path)
    fabric.script({"*": "clean-and-reseat"})
    inp = make_input(wait_s=0.2)
    assert (inp.config.step_reminder_s, inp.config.step_escalation_s) == (4 * 3600, 24 * 3600)
    async with running_worker(client, task_queue, fabric, ticket_server) as sink:
        handle = await start(client, inp, task_queue)
        await until(handle, lambda s: s.waiting_for == "clean-and-reseat")
        assert await wf_env.fast_forward(handle, timedelta(hours=24, minutes=30))
        st = await until(handle, lambda s: any("escalated" in (h.note or "")
                                               for h in s.history))
        assert st.waiting_for == "clean-and-reseat"  # still waiting for the technician
        await handle.execute_update(PortRemediation.complete_step,
                                    StepDone(step="clean-and-reseat", actor="night-shift"))
        result = await asyncio.wait_for(handle.result(), 60)
    assert result.outcome == "returned_to_service"
    notes = [a.note or "" for a in sink.actions()
             if a.workflow_id == wid(inp) and a.step == "clean-and-reseat"]
    assert sum(n.startswith("reminder") for n in notes) == 5  # at 4, 8, 12, 16 and 20 h
    assert sum(n.startswith("escalated") for n in notes) == 1  # at 24 h
    ops = [r["op"] for r in ticket_server.ops(wid(inp))]
    assert ops.count("update") == 5 and ops.count("page") == 1
