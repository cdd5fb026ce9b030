"""The isolation budget on the real Temporal dev server: the per-SU limit, the fabric-wide cap,
the breaker path through the runbook (breaker_open, the SU's breaker incident pages, approve /
abort), continue-as-new."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client, WithStartWorkflowOperation
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment
from test_remediation import make_input, running_worker, start, until, wid
from wf_helpers import FileFabric, TicketServer

from schemas.events import Detection
from workflows.budget.activities import BudgetActivities
from workflows.budget.models import (
    AcquireInput,
    BudgetInput,
    GrantRequest,
    ReleaseRequest,
    fabric_budget_id,
    fabric_limit,
    su_budget_id,
    su_limit,
)
from workflows.budget.workflows import IsolationBudget
from workflows.incident.models import alert_key, breaker_incident, incident_workflow_id
from workflows.remediation.models import AbortRequest, Approval
from workflows.remediation.workflows import PortRemediation

pytestmark = pytest.mark.integration


async def until_paged(tickets: TicketServer, key: str, within: float = 30.0) -> None:
    """The breaker incident's one page (the worker's notifier is the ticket webhook here)."""
    deadline = asyncio.get_running_loop().time() + within
    while [r["op"] for r in tickets.ops(key)][:1] != ["page"]:  # noqa: ASYNC110
        assert asyncio.get_running_loop().time() < deadline, tickets.ops(key)
        await asyncio.sleep(0.1)


async def grant(client: Client, wf_id: str, start: BudgetInput, req: GrantRequest,
                task_queue: str):  # type: ignore[no-untyped-def]
    op = WithStartWorkflowOperation(IsolationBudget.run, start, id=wf_id, task_queue=task_queue,
                                    id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING)
    return await client.execute_update_with_start_workflow(IsolationBudget.grant, req,
                                                           start_workflow_operation=op)


async def test_grants_serialise_and_never_pass_the_limit(
        wf_env: WorkflowEnvironment, tmp_path: Path, ticket_server: TicketServer,
        task_queue: str) -> None:
    client = wf_env.client
    fabric = FileFabric(tmp_path)
    bid = f"budget/t/{uuid.uuid4().hex[:6]}"
    start_in = BudgetInput(fabric="t", scope="su", su="su09", limit=3)
    async with running_worker(client, task_queue, fabric, ticket_server):
        # 20 concurrent requests for 3 slots
        results = await asyncio.gather(*[
            grant(client, bid, start_in, GrantRequest(holder=f"h{i}", port_key=f"p:{i}",
                                                      limit=3), task_queue)
            for i in range(20)])
        again = await grant(client, bid, start_in, GrantRequest(holder="h0", port_key="p:0",
                                                                limit=3), task_queue)
        state = await client.get_workflow_handle(bid).query(IsolationBudget.state)
        granted = [r for r in results if r.granted]
        refused = [r for r in results if not r.granted]
        assert len(granted) == 3 and len(refused) == 17
        assert state.in_use == 3
        assert all("exhausted: 3 of 3" in r.reason for r in refused)
        # a repeated request of a holder is idempotent
        holder = next(h.holder for h in state.holders)
        again = await grant(client, bid, start_in, GrantRequest(holder=holder, port_key="x",
                                                                limit=3), task_queue)
        assert again.granted and again.already_held
        assert (await client.get_workflow_handle(bid).query(IsolationBudget.state)).in_use == 3


async def test_the_most_recently_resolved_limit_wins_and_a_probe_changes_none(
        wf_env: WorkflowEnvironment, tmp_path: Path, ticket_server: TicketServer,
        task_queue: str) -> None:
    # A runbook started before the policy was tightened carries the old, larger limit; its
    # request must not put it back (before: the latest request's limit won, and the SU
    # passed the new limit). Nor may a shadow-mode probe move the live limit.
    client = wf_env.client
    bid = f"budget/t/{uuid.uuid4().hex[:6]}"
    start_in = BudgetInput(fabric="t", scope="su", su="su02", limit=1, limit_ts=2_000)
    async with running_worker(client, task_queue, FileFabric(tmp_path), ticket_server):
        def req(holder: str, limit: int, ts: int, probe: bool = False) -> GrantRequest:
            return GrantRequest(holder=holder, port_key=f"{holder}:1", limit=limit,
                                limit_ts=ts, probe=probe)
        assert (await grant(client, bid, start_in, req("new", 1, 2_000), task_queue)).granted
        stale = await grant(client, bid, start_in, req("stale", 5, 1_000), task_queue)
        assert not stale.granted and stale.limit == 1
        probe = await grant(client, bid, start_in, req("shadow", 9, 3_000, probe=True),
                            task_queue)
        assert probe.granted and probe.limit == 9
        assert (await client.get_workflow_handle(bid).query(IsolationBudget.state)).limit == 1
        newer = await grant(client, bid, start_in, req("newer", 2, 4_000), task_queue)
        assert newer.granted and newer.limit == 2
        state = await client.get_workflow_handle(bid).query(IsolationBudget.state)
    assert state.in_use == 2 and sorted(h.holder for h in state.holders) == ["new", "newer"]


async def test_a_late_compensation_of_a_timed_out_attempt_keeps_the_retrys_grant(
        wf_env: WorkflowEnvironment, tmp_path: Path, ticket_server: TicketServer,
        task_queue: str) -> None:
    # Attempt 1 of ``budget_acquire`` takes the SU grant, the fabric refuses, and its
    # compensating release is slow; attempt 2 (the retry after the timeout) finds the SU
    # grant held, takes the fabric's, and the runbook isolates. Attempt 1's release, landing
    # after, must leave the grant (before: it took it, and another port got the SU's slot).
    client = wf_env.client
    fabric = f"t{uuid.uuid4().hex[:6]}"
    su_id, fab_id = su_budget_id(fabric, "su03"), fabric_budget_id(fabric)
    su_start = BudgetInput(fabric=fabric, scope="su", su="su03", limit=1)
    fab_start = BudgetInput(fabric=fabric, scope="fabric", limit=1)
    acts = BudgetActivities(client, task_queue)
    inp = AcquireInput(fabric=fabric, su="su03", holder="rb", port_key="leaf-su03-r1:1",
                       su_limit=1, fabric_limit=1, ts=0)
    async with running_worker(client, task_queue, FileFabric(tmp_path), ticket_server):
        assert (await grant(client, fab_id, fab_start, GrantRequest(
            holder="elsewhere", port_key="x:1", limit=1), task_queue)).granted
        # attempt 1: the SU grants, the fabric refuses; its release is still on its way
        assert (await grant(client, su_id, su_start, GrantRequest(
            holder="rb", port_key="leaf-su03-r1:1", limit=1, attempt=1), task_queue)).granted
        await client.get_workflow_handle(fab_id).execute_update(
            IsolationBudget.release, ReleaseRequest(holder="elsewhere"))
        env = ActivityEnvironment()
        env.info = dataclasses.replace(env.info, attempt=2, task_queue=task_queue)
        retry = await env.run(acts.acquire, inp)
        assert retry.granted
        late = await client.get_workflow_handle(su_id).execute_update(
            IsolationBudget.release, ReleaseRequest(holder="rb", only_attempt=1))
        assert not late.released
        su = await client.get_workflow_handle(su_id).query(IsolationBudget.state)
        other = await grant(client, su_id, su_start, GrantRequest(
            holder="another", port_key="leaf-su03-r1:2", limit=1), task_queue)
        # and attempt 2's own refusal would have released it
        assert (await client.get_workflow_handle(su_id).execute_update(
            IsolationBudget.release, ReleaseRequest(holder="rb", only_attempt=2))).released
    assert [h.holder for h in su.holders] == ["rb"] and su.holders[0].attempt == 2
    assert not other.granted


def test_limits_follow_the_policy() -> None:
    assert su_limit(0.01, 2048) == 20
    assert su_limit(0.01, 64) == 1  # at least one port, or automation could never act
    assert su_limit(0.0, 2048) == 0
    assert fabric_limit(0.005, 10, 100_000) == 500
    assert fabric_limit(0.005, 10, 1_000) == 10  # max(10, 0.5 %)


async def test_budget_continues_as_new_and_keeps_its_holders(
        wf_env: WorkflowEnvironment, tmp_path: Path, ticket_server: TicketServer,
        task_queue: str) -> None:
    client = wf_env.client
    fabric = FileFabric(tmp_path)
    bid = f"budget/t/{uuid.uuid4().hex[:6]}"
    start_in = BudgetInput(fabric="t", scope="su", su="su01", limit=2, max_history_events=20)
    async with running_worker(client, task_queue, fabric, ticket_server):
        first = await grant(client, bid, start_in, GrantRequest(holder="keep", port_key="k:1",
                                                                limit=2), task_queue)
        assert first.granted
        handle = client.get_workflow_handle(bid)
        first_run = (await handle.describe()).run_id
        for i in range(15):  # churn: grant and release another holder
            await grant(client, bid, start_in, GrantRequest(holder=f"c{i}", port_key="c:1",
                                                            limit=2), task_queue)
            await client.get_workflow_handle(bid).execute_update(
                IsolationBudget.release, ReleaseRequest(holder=f"c{i}"))
        await asyncio.sleep(0.5)
        desc = await client.get_workflow_handle(bid).describe()
        state = await client.get_workflow_handle(bid).query(IsolationBudget.state)
    assert desc.run_id != first_run  # a new run...
    assert [h.holder for h in state.holders] == ["keep"]  # ...with the holder carried over
    assert state.granted_total == 16


async def test_breaker_path_budget_exhausted(wf_env: WorkflowEnvironment, tmp_path: Path,
                                             ticket_server: TicketServer,
                                             task_queue: str) -> None:
    """SU limit 1: the second port's runbook is refused, publishes breaker_open, joins the
    SU's breaker incident (which pages) and waits; approve lets it isolate past the limit
    (recorded), abort leaves it in service."""
    client = wf_env.client
    fabric = FileFabric(tmp_path)
    fab = f"f{uuid.uuid4().hex[:8]}"
    a = make_input("leaf-su02-r1", 1, su="su02", su_limit=1, fabric=fab)
    b = make_input("leaf-su02-r2", 2, su="su02", su_limit=1, fabric=fab)
    c = make_input("leaf-su02-r3", 3, su="su02", su_limit=1, fabric=fab)
    async with running_worker(client, task_queue, fabric, ticket_server) as sink:
        ha = await start(client, a, task_queue)
        await until(ha, lambda s: s.waiting_for == "clean-and-reseat")
        hb = await start(client, b, task_queue)
        st = await until(hb, lambda s: s.state == "awaiting_approval")
        assert not st.isolated and not fabric.is_isolated("leaf-su02-r2", 2)
        breakers = [r for r in sink.records.values()
                    if isinstance(r, Detection) and r.detection == "breaker_open"]
        assert len(breakers) == 1 and breakers[0].device == "leaf-su02-r2"
        assert "exhausted: 1 of 1" in breakers[0].evidence["reason"]
        assert breakers[0].episode == b.detection.episode
        # no page of its own: it joined the SU's breaker incident, which pages once
        assert ticket_server.ops(wid(b), "page") == []
        assert st.incident == incident_workflow_id(fab, breaker_incident("su02"))
        await until_paged(ticket_server, alert_key(fab, breaker_incident("su02")))
        refused = [x for x in sink.actions() if x.workflow_id == wid(b) and x.step == "budget"]
        assert refused[0].outcome == "refused"

        await hb.signal(PortRemediation.approve, Approval(actor="lead-eve", note="known spine"))
        st = await until(hb, lambda s: s.waiting_for == "clean-and-reseat")
        assert st.isolated and fabric.is_isolated("leaf-su02-r2", 2)
        su = await client.get_workflow_handle(su_budget_id(fab, "su02")).query(
            IsolationBudget.state)
        assert su.in_use == 2 and {h.forced_by for h in su.holders} == {None, "lead-eve"}

        hc = await start(client, c, task_queue)
        await until(hc, lambda s: s.state == "awaiting_approval")
        await hc.signal(PortRemediation.abort, AbortRequest(actor="lead-eve", reason="spine"))
        rc = await asyncio.wait_for(hc.result(), 60)
        assert rc.outcome == "aborted"
        assert fabric.calls("isolate", "leaf-su02-r3:3") == []

        for h in (ha, hb):
            await h.signal(PortRemediation.abort, AbortRequest(actor="t"))
            await asyncio.wait_for(h.result(), 60)
        su = await client.get_workflow_handle(su_budget_id(fab, "su02")).query(
            IsolationBudget.state)
        fb = await client.get_workflow_handle(fabric_budget_id(fab)).query(IsolationBudget.state)
    assert su.in_use == 0 and fb.in_use == 0 and su.refused_total == 2


async def test_fabric_cap_refuses_across_sus(wf_env: WorkflowEnvironment, tmp_path: Path,
                                             ticket_server: TicketServer,
                                             task_queue: str) -> None:
    client = wf_env.client
    fabric = FileFabric(tmp_path)
    fab = f"f{uuid.uuid4().hex[:8]}"
    ins = [make_input(f"leaf-su{i:02d}-r1", 1, su=f"su{i:02d}", su_limit=5, fabric=fab)
           for i in range(3)]
    ins = [i.model_copy(update={"config": i.config.model_copy(update={"fabric_limit": 2})})
           for i in ins]
    async with running_worker(client, task_queue, fabric, ticket_server):
        handles = []
        for inp in ins:
            h = await start(client, inp, task_queue)
            handles.append(h)
            await until(h, lambda s: s.state in ("awaiting_technician", "awaiting_approval"))
        states = [(await h.query(PortRemediation.status)).state for h in handles]
        su2 = await client.get_workflow_handle(su_budget_id(fab, "su02")).query(
            IsolationBudget.state)
        for h in handles:
            await h.signal(PortRemediation.abort, AbortRequest(actor="t"))
            await asyncio.wait_for(h.result(), 60)
    assert states == ["awaiting_technician", "awaiting_technician", "awaiting_approval"]
    assert su2.in_use == 0  # the SU grant was given back when the fabric cap refused


async def test_breaker_unanswered_expires_and_shadow_only_records(
        wf_env: WorkflowEnvironment, tmp_path: Path, ticket_server: TicketServer,
        task_queue: str) -> None:
    client = wf_env.client
    fabric = FileFabric(tmp_path)
    fab = f"f{uuid.uuid4().hex[:8]}"
    holder = make_input("leaf-su04-r1", 1, su="su04", su_limit=1, fabric=fab)
    late = make_input("leaf-su04-r2", 2, su="su04", su_limit=1, fabric=fab)
    late = late.model_copy(update={"config": late.config.model_copy(
        update={"approval_timeout_s": 1.0})})
    shadow = make_input("leaf-su04-r3", 3, su="su04", su_limit=1, fabric=fab, shadow=True)
    async with running_worker(client, task_queue, fabric, ticket_server) as sink:
        hh = await start(client, holder, task_queue)
        await until(hh, lambda s: s.waiting_for == "clean-and-reseat")
        expired = await asyncio.wait_for((await start(client, late, task_queue)).result(), 60)
        shadowed = await asyncio.wait_for((await start(client, shadow, task_queue)).result(), 60)
        await hh.signal(PortRemediation.abort, AbortRequest(actor="t"))
        await asyncio.wait_for(hh.result(), 60)
    assert expired.outcome == "expired"
    assert not fabric.calls("isolate", "leaf-su04-r2:2")
    assert shadowed.outcome == "shadow_done"
    breakers = {r.device: r for r in sink.records.values()
                if isinstance(r, Detection) and r.detection == "breaker_open"}
    assert breakers["leaf-su04-r3"].evidence["dry_run"] is True
    assert [r["op"] for r in ticket_server.ops(wid(shadow))] == []  # no page in shadow mode
    assert ticket_server.ops(wid(late), "page") == []
    await until_paged(ticket_server, alert_key(fab, breaker_incident("su04")))
