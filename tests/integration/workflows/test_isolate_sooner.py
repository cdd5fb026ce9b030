"""The ``isolate-sooner`` patch on the real Temporal dev server: evidence, the budget grant and
the port's state read are scheduled at once, the isolate only after all three, the records
in the order the steps had in series; an abort that lands while they run still releases the
grant; a repeat offender that needs a human first asks for no budget before the approval."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.testing import WorkflowEnvironment
from test_remediation import make_input, running_worker, start, steps, until, wid
from wf_helpers import FileFabric, TicketServer

from workflows.budget.models import su_budget_id
from workflows.budget.workflows import IsolationBudget
from workflows.remediation.models import AbortRequest, Approval, PriorRun
from workflows.remediation.workflows import SOONER_PATCH, PortRemediation

pytestmark = pytest.mark.integration

FIRST = ("capture_evidence", "budget_acquire", "port_state")


async def activity_events(handle: Any) -> tuple[list[tuple[str, str, int]], set[str]]:
    """(event kind, activity, the scheduling workflow task's completion event) in history
    order, and the patch markers."""
    names: dict[int, str] = {}
    out: list[tuple[str, str, int]] = []
    markers: set[str] = set()
    async for ev in handle.fetch_history_events():
        if ev.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = ev.activity_task_scheduled_event_attributes
            names[ev.event_id] = attrs.activity_type.name
            out.append(("scheduled", attrs.activity_type.name,
                        attrs.workflow_task_completed_event_id))
        elif ev.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            attrs = ev.activity_task_completed_event_attributes
            out.append(("completed", names[attrs.scheduled_event_id], 0))
        elif ev.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
            attrs_m = ev.marker_recorded_event_attributes
            if attrs_m.marker_name == "core_patch":
                data = attrs_m.details["patch-data"].payloads[0].data
                markers.add(json.loads(data)["id"])
    return out, markers


async def test_first_steps_run_at_once_and_the_isolate_waits_for_all_three(
        wf_env: WorkflowEnvironment, tmp_path: Path, ticket_server: TicketServer,
        task_queue: str) -> None:
    client = wf_env.client
    fabric = FileFabric(tmp_path)
    inp = make_input()
    async with running_worker(client, task_queue, fabric, ticket_server) as sink:
        handle = await start(client, inp, task_queue)
        st = await until(handle, lambda s: s.waiting_for == "clean-and-reseat")
        events, markers = await activity_events(handle)
    assert SOONER_PATCH in markers
    assert st.isolated and st.budget_held and st.port_state["isolated"] is False
    first = [e for e in events if e[1] in FIRST]
    scheduled = [e for e in first if e[0] == "scheduled"]
    # one workflow task schedules all three, before any of them completed
    assert sorted(e[1] for e in scheduled) == sorted(FIRST)
    assert len({e[2] for e in scheduled}) == 1
    assert [e[0] for e in first[:3]] == ["scheduled"] * 3
    # the isolate after all three completed; each of them once
    iso = next(i for i, e in enumerate(events) if e[:2] == ("scheduled", "isolate_port"))
    done = {e[1] for e in events[:iso] if e[0] == "completed"}
    assert set(FIRST) <= done
    assert [e[1] for e in events].count("port_state") == 2  # scheduled + completed, no re-read
    assert fabric.is_isolated("leaf-su01-r1", 7)
    # the records keep the order of the steps in series
    names = [s for s, _ in steps(sink, wid(inp))]
    assert names[:6] == ["detection", "evidence", "budget", "isolate", "fence", "ticket"]


async def test_an_abort_while_the_first_steps_run_releases_the_grant(
        wf_env: WorkflowEnvironment, tmp_path: Path, ticket_server: TicketServer,
        task_queue: str) -> None:
    client = wf_env.client
    fabric = FileFabric(tmp_path)
    inp = make_input()
    async with running_worker(client, task_queue, fabric, ticket_server):
        handle = await start(client, inp, task_queue)
        # with the start: the abort is there before the first steps complete
        await handle.signal(PortRemediation.abort, AbortRequest(actor="oncall", reason="no"))
        result = await asyncio.wait_for(handle.result(), 60)
        su = await client.get_workflow_handle(su_budget_id(inp.port.fabric, "su01")).query(
            IsolationBudget.state)
    assert result.outcome == "aborted"
    assert su.in_use == 0, su.holders  # the grant that came with the evidence was released
    assert not fabric.is_isolated("leaf-su01-r1", 7)


async def test_a_repeat_offender_for_a_human_asks_for_no_budget_before_the_approval(
        wf_env: WorkflowEnvironment, tmp_path: Path, ticket_server: TicketServer,
        task_queue: str) -> None:
    client = wf_env.client
    fabric = FileFabric(tmp_path)
    inp = make_input()
    cfg = inp.config
    now_ms = int(time.time() * 1000)  # the workflow's clock at its start (no timer yet)
    prior = [PriorRun(run_id=f"r{i}", closed_ts=now_ms - 3_600_000 * (i + 1),
                      outcome="returned_to_service", fixed_by="clean-and-reseat",
                      episodes=[f"old-{i}"])
             for i in range(max(cfg.repeat_human_after, cfg.repeat_next_rung_after))]
    inp = inp.model_copy(update={"prior": prior})
    async with running_worker(client, task_queue, fabric, ticket_server):
        handle = await start(client, inp, task_queue)
        await until(handle, lambda s: s.step == "repeat_offender" and s.waiting_for == "approve")
        before, _ = await activity_events(handle)
        await handle.signal(PortRemediation.approve, Approval(actor="lead", note="go"))
        # it starts further down the ladder (the rung after the one that fixed it last)
        await until(handle, lambda s: s.state == "awaiting_technician")
    assert "budget_acquire" not in {e[1] for e in before}
    assert "capture_evidence" in {e[1] for e in before}
    assert fabric.is_isolated("leaf-su01-r1", 7)
