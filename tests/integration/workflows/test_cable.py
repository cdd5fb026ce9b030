"""The cable runbook on the real Temporal dev server: one runbook per cable whichever end is
seen, ownership of the isolation, failures into a human's hands with the budget right,
exactly once per episode, repeat offenders, a re-flap failing the rung, and reconcile."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment
from test_remediation import FAST, running_worker, until
from wf_helpers import FileFabric, TicketServer

from schemas.events import Action, Detection, DetectionKind, Severity, Topology, TopologyLink
from schemas.policy import Policy
from streams.incidents.logic import explained
from workflows.budget.models import GrantRequest, fabric_budget_id, su_budget_id
from workflows.budget.workflows import IsolationBudget
from workflows.dispatch import Dispatcher
from workflows.inventory import Inventory
from workflows.reconcile import Budget, compare, gather, repair
from workflows.remediation.models import (
    AbortRequest,
    ActivityTimeouts,
    Approval,
    RemediationResult,
    StepDone,
)
from workflows.remediation.workflows import PortRemediation

pytestmark = pytest.mark.integration

LEAF, HOST = ("leaf-su01-r1", 3), ("node0002/mlx5_1", 1)


def cable_id(fabric: str) -> str:
    return f"remediate/{fabric}/leaf-su01-r1:3~node0002/mlx5_1:1"


def topology(fabric: str) -> Topology:
    links = [TopologyLink(a_device="leaf-su01-r1", a_port=n + 1,
                          b_device=f"node{n:04d}/mlx5_1", b_port=1) for n in range(8)]
    links.append(TopologyLink(a_device="leaf-su01-r1", a_port=40, b_device="spine-01",
                              b_port=1))
    return Topology(id=f"t-{fabric}", ts=int(time.time() * 1000), fabric=fabric,
                    source="ibnetdiscover", links=links,
                    nodes=[{"name": "leaf-su01-r1", "guid": "0x248a0703002e628e"}])


def detection(fabric: str, end: tuple[str, int], episode: str = "ep-1",
              det_id: str | None = None) -> Detection:
    return Detection(id=det_id or f"d-{uuid.uuid4().hex[:8]}", ts=int(time.time() * 1000),
                     fabric=fabric, source="streams", device=end[0], port=end[1],
                     detection=DetectionKind.FLAP, severity=Severity.CRITICAL,
                     action=Action.ISOLATE_PORT, episode=episode,
                     evidence={"downs": 3, "ber": 1e-9})


def dispatcher(client: Client, fabric: str, queue: str, policy: str = "",
               timeouts: ActivityTimeouts = FAST) -> Dispatcher:
    inv = Inventory()
    inv.load(topology(fabric))
    pol = Policy.from_yaml(policy or "fabricHealth: {runbook: {cleanCountersWait: 0.3s}}")
    return Dispatcher(client, pol, inv, task_queue=queue, timeouts=timeouts)


async def budgets(client: Client, fabric: str) -> tuple[int, int]:
    su = await client.get_workflow_handle(su_budget_id(fabric, "su01")).query(
        IsolationBudget.state)
    fab = await client.get_workflow_handle(fabric_budget_id(fabric)).query(IsolationBudget.state)
    return su.in_use, fab.in_use


def handle_of(client: Client, wf_id: str) -> Any:
    return client.get_workflow_handle_for(PortRemediation.run, wf_id)


async def wait_started(client: Client, wf_id: str) -> Any:
    h = handle_of(client, wf_id)
    await until(h, lambda s: True)
    return h


async def test_both_ends_one_runbook_one_isolate_of_the_switch_end(
        wf_env: WorkflowEnvironment, tmp_path: Path, ticket_server: TicketServer,
        task_queue: str) -> None:
    client = wf_env.client
    fabric = f"c{uuid.uuid4().hex[:8]}"
    fab = FileFabric(tmp_path)
    fab.script({"*": "clean-and-reseat"})
    disp = dispatcher(client, fabric, task_queue)
    async with running_worker(client, task_queue, fab, ticket_server) as sink:
        assert await disp.handle(detection(fabric, HOST))  # seen from the host end first
        h = await wait_started(client, cable_id(fabric))
        assert await disp.handle(detection(fabric, LEAF))  # the switch end: joins
        st = await until(h, lambda s: s.waiting_for == "clean-and-reseat"
                         and len(s.detections) == 2)
        assert st.cable == ["leaf-su01-r1:3", "node0002/mlx5_1:1"]
        assert st.isolated_end == "leaf-su01-r1:3" and st.owned and st.budget_held
        assert {e.end for e in st.evidence} == {"leaf-su01-r1:3", "node0002/mlx5_1:1"}
        assert await budgets(client, fabric) == (1, 1)  # counted once
        await h.execute_update(PortRemediation.complete_step,
                               StepDone(step="clean-and-reseat", actor="tech"))
        result = await asyncio.wait_for(h.result(), 60)
        assert await budgets(client, fabric) == (0, 0)
    assert result.outcome == "returned_to_service"
    assert [c["key"] for c in fab.calls("isolate")] == ["leaf-su01-r1:3"]
    assert [c["key"] for c in fab.calls("unisolate")] == ["leaf-su01-r1:3"]
    opened = ticket_server.ops(cable_id(fabric), "open")
    assert len(opened) == 1
    details = opened[0]["details"]
    assert "leaf-su01-r1:3 ~ node0002/mlx5_1:1" in opened[0]["summary"]
    assert [e["end"] for e in details["ends"]] == ["leaf-su01-r1:3", "node0002/mlx5_1:1"]
    assert details["ends"][0]["guid"] == "0x248a0703002e628e"
    assert {b["end"] for b in details["ber_history"]} == {"leaf-su01-r1:3", "node0002/mlx5_1:1"}
    # no runbook of either port alone
    ids = [wf.id async for wf in client.list_workflows(
        "WorkflowType = 'PortRemediation'") if wf.id.startswith(f"remediate/{fabric}/")]
    assert ids == [cable_id(fabric)]
    assert {a.workflow_id for a in sink.actions() if fabric in a.workflow_id} == {
        cable_id(fabric)}


async def test_switch_link_isolates_the_leaf_end(wf_env: WorkflowEnvironment, tmp_path: Path,
                                                 ticket_server: TicketServer,
                                                 task_queue: str) -> None:
    client = wf_env.client
    fabric = f"c{uuid.uuid4().hex[:8]}"
    fab = FileFabric(tmp_path)
    disp = dispatcher(client, fabric, task_queue)
    async with running_worker(client, task_queue, fab, ticket_server):
        assert await disp.handle(detection(fabric, ("spine-01", 1)))
        h = await wait_started(client, f"remediate/{fabric}/leaf-su01-r1:40~spine-01:1")
        st = await until(h, lambda s: s.waiting_for == "clean-and-reseat")
        assert st.isolated_end == "leaf-su01-r1:40"
        await h.signal(PortRemediation.abort, AbortRequest(actor="t"))
        await asyncio.wait_for(h.result(), 60)
    assert [c["key"] for c in fab.calls("isolate")] == ["leaf-su01-r1:40"]


async def test_found_isolated_is_counted_and_never_returned_without_approve(
        wf_env: WorkflowEnvironment, tmp_path: Path, ticket_server: TicketServer,
        task_queue: str) -> None:
    client = wf_env.client
    fabric = f"c{uuid.uuid4().hex[:8]}"
    fab = FileFabric(tmp_path)
    fab.script({"*": "clean-and-reseat"})
    fab.isolate_by_other(*LEAF, by="ufm port-health plugin")
    disp = dispatcher(client, fabric, task_queue)
    async with running_worker(client, task_queue, fab, ticket_server) as sink:
        await disp.handle(detection(fabric, LEAF))
        h = await wait_started(client, cable_id(fabric))
        st = await until(h, lambda s: s.waiting_for == "clean-and-reseat")
        assert st.isolated and not st.owned
        assert st.found_isolated == "ufm port-health plugin"
        assert await budgets(client, fabric) == (1, 1)  # counts as isolated
        await h.execute_update(PortRemediation.complete_step,
                               StepDone(step="clean-and-reseat", actor="tech"))
        st = await until(h, lambda s: s.state == "awaiting_handover")
        assert st.waiting_for == "approve"
        assert fab.calls("unisolate") == [] and fab.is_isolated(*LEAF)
        await h.signal(PortRemediation.approve, Approval(actor="lead", note="ours now"))
        result = await asyncio.wait_for(h.result(), 60)
    assert result.outcome == "returned_to_service"
    assert fab.calls("isolate") == []  # fabricwatch never isolated it
    assert len(fab.calls("unisolate")) == 1 and not fab.is_isolated(*LEAF)
    skipped = [a for a in sink.actions() if a.step == "isolate"]
    assert skipped[0].outcome == "skipped" and "found already isolated" in (skipped[0].note or "")
    assert any(a.step == "approve" and a.actor == "lead" for a in sink.actions())


async def test_found_isolated_abort_leaves_it_isolated_and_counted(
        wf_env: WorkflowEnvironment, tmp_path: Path, ticket_server: TicketServer,
        task_queue: str) -> None:
    client = wf_env.client
    fabric = f"c{uuid.uuid4().hex[:8]}"
    fab = FileFabric(tmp_path)
    fab.isolate_by_other(*LEAF, by="oncall")
    disp = dispatcher(client, fabric, task_queue)
    async with running_worker(client, task_queue, fab, ticket_server):
        await disp.handle(detection(fabric, HOST))
        h = await wait_started(client, cable_id(fabric))
        await until(h, lambda s: s.waiting_for == "clean-and-reseat")
        await h.signal(PortRemediation.abort, AbortRequest(actor="t"))
        result: RemediationResult = await asyncio.wait_for(h.result(), 60)
        assert await budgets(client, fabric) == (1, 1)  # still isolated: still counted
        runs, bs = await gather(client, fabric)
    assert result.outcome == "aborted" and result.still_isolated
    assert fab.calls("unisolate") == [] and fab.is_isolated(*LEAF)
    diffs = compare(runs, bs, set(fab.isolated_ports()))
    assert {d.kind for d in diffs} == {"closed_hold"}


async def test_rejected_isolate_needs_a_human_and_releases_the_budget(
        wf_env: WorkflowEnvironment, tmp_path: Path, ticket_server: TicketServer,
        task_queue: str) -> None:
    client = wf_env.client
    fabric = f"c{uuid.uuid4().hex[:8]}"
    fab = FileFabric(tmp_path)
    fab.fail(isolate="reject")
    disp = dispatcher(client, fabric, task_queue)
    async with running_worker(client, task_queue, fab, ticket_server):
        await disp.handle(detection(fabric, LEAF))
        h = await wait_started(client, cable_id(fabric))
        st = await until(h, lambda s: s.state == "needs_human")
        assert st.waiting_for == "approve" and "refused by the controller" in (st.needs_human
                                                                               or "")
        assert st.port_state is not None and st.port_state["isolated"] is False
        assert await budgets(client, fabric) == (0, 0)  # never isolated: released
        pages = ticket_server.ops(cable_id(fabric), "page")
        assert pages and pages[-1]["details"]["failed_step"] == "isolate"
        desc = await h.describe()
        assert desc.status == WorkflowExecutionStatus.RUNNING  # not a failed workflow
        fab.fail()  # the human fixed the permission: approve retries
        await h.signal(PortRemediation.approve, Approval(actor="lead"))
        st = await until(h, lambda s: s.waiting_for == "clean-and-reseat")
        assert st.isolated and st.owned and await budgets(client, fabric) == (1, 1)
        await h.signal(PortRemediation.abort, AbortRequest(actor="lead"))
        result = await asyncio.wait_for(h.result(), 60)
        assert await budgets(client, fabric) == (0, 0)
    assert result.outcome == "aborted" and not fab.is_isolated(*LEAF)


async def test_an_approved_retry_of_the_isolate_does_not_pass_a_full_su(
        wf_env: WorkflowEnvironment, tmp_path: Path, ticket_server: TicketServer,
        task_queue: str) -> None:
    # The isolate is rejected, the port reads back in service, its slot is released; while a
    # human looks, another port takes the SU's only slot. The human's approve retries the
    # isolate (what the page says), it does not pass the limit: the budget refuses, the
    # breaker opens and waits for its own approve. (Before: a grant forced past the limit.)
    client = wf_env.client
    fabric = f"c{uuid.uuid4().hex[:8]}"
    fab = FileFabric(tmp_path)
    fab.fail(isolate="reject")
    disp = dispatcher(client, fabric, task_queue)
    async with running_worker(client, task_queue, fab, ticket_server):
        await disp.handle(detection(fabric, LEAF))
        h = await wait_started(client, cable_id(fabric))
        await until(h, lambda s: s.state == "needs_human")
        assert await budgets(client, fabric) == (0, 0)
        su = client.get_workflow_handle(su_budget_id(fabric, "su01"))
        taken = await su.execute_update(IsolationBudget.grant, GrantRequest(
            holder="another-runbook", port_key="leaf-su01-r1:5", limit=-1))
        assert taken.granted and taken.limit == 1
        fab.fail()
        await h.signal(PortRemediation.approve, Approval(actor="lead"))
        st = await until(h, lambda s: s.state == "awaiting_approval")
        assert not st.isolated and not fab.is_isolated(*LEAF)
        assert await budgets(client, fabric) == (1, 0)  # the other port's slot only
        await h.signal(PortRemediation.abort, AbortRequest(actor="lead"))
        result = await asyncio.wait_for(h.result(), 60)
    assert result.outcome == "aborted" and fab.calls("isolate") == []
    assert [r.outcome for r in result.history if r.step == "budget"][-1] == "refused"


async def test_exhausted_retries_need_a_human(wf_env: WorkflowEnvironment, tmp_path: Path,
                                              ticket_server: TicketServer,
                                              task_queue: str) -> None:
    client = wf_env.client
    fabric = f"c{uuid.uuid4().hex[:8]}"
    fab = FileFabric(tmp_path)
    fab.fail(isolate="error")  # retryable: a controller that is down
    disp = dispatcher(client, fabric, task_queue,
                      timeouts=FAST.model_copy(update={"controller_attempts": 2}))
    async with running_worker(client, task_queue, fab, ticket_server):
        await disp.handle(detection(fabric, LEAF))
        h = await wait_started(client, cable_id(fabric))
        st = await until(h, lambda s: s.state == "needs_human", within=60)
        assert len(fab.calls("isolate-error")) == 2
        assert await budgets(client, fabric) == (0, 0)
        await h.signal(PortRemediation.abort, AbortRequest(actor="lead"))
        result = await asyncio.wait_for(h.result(), 60)
    assert st.port_state is not None and st.port_state["isolated"] is False
    assert result.outcome == "aborted" and not fab.is_isolated(*LEAF)


async def test_failed_return_keeps_the_budget_and_reconcile_repairs_the_accounting(
        wf_env: WorkflowEnvironment, tmp_path: Path, ticket_server: TicketServer,
        task_queue: str) -> None:
    client = wf_env.client
    fabric = f"c{uuid.uuid4().hex[:8]}"
    fab = FileFabric(tmp_path)
    fab.script({"*": "clean-and-reseat"})
    disp = dispatcher(client, fabric, task_queue)
    async with running_worker(client, task_queue, fab, ticket_server):
        await disp.handle(detection(fabric, LEAF))
        h = await wait_started(client, cable_id(fabric))
        await until(h, lambda s: s.waiting_for == "clean-and-reseat")
        fab.fail(unisolate="reject")
        await h.execute_update(PortRemediation.complete_step,
                               StepDone(step="clean-and-reseat", actor="tech"))
        st = await until(h, lambda s: s.state == "needs_human")
        assert st.step == "needs_human:unisolate" and st.port_state["isolated"] is True
        assert await budgets(client, fabric) == (1, 1)  # still isolated: still counted
        # abort: the rollback's un-isolate is refused too: handed to a human, not failed
        await h.signal(PortRemediation.abort, AbortRequest(actor="lead"))
        result = await asyncio.wait_for(h.result(), 60)
        assert result.outcome == "handed_to_human" and result.still_isolated
        assert await budgets(client, fabric) == (1, 1)
        runs, bs = await gather(client, fabric)
        assert {d.kind for d in compare(runs, bs, set(fab.isolated_ports()))} == {"closed_hold"}
        # the human returns the port by hand: the slot is now stale; --apply releases it
        fab.fail()
        fab.unisolate(*LEAF)
        diffs = compare(runs, bs, set(fab.isolated_ports()))
        assert [d.kind for d in diffs] == ["stale_grant", "stale_grant"]
        await repair(client, diffs)
        assert all(d.repaired for d in diffs)
        assert await budgets(client, fabric) == (0, 0)
        runs, bs = await gather(client, fabric)
        assert compare(runs, bs, set(fab.isolated_ports())) == []
        # and without the controller's set nothing is released: reported as unverified
        stale = Budget(bs[0].workflow_id, "su", "su01", {"remediate/x": "p:1"})
        assert [d.kind for d in compare([], [stale], None)] == ["unverified_grant"]


async def test_replayed_detection_after_close_changes_nothing(
        wf_env: WorkflowEnvironment, tmp_path: Path, ticket_server: TicketServer,
        task_queue: str) -> None:
    client = wf_env.client
    fabric = f"c{uuid.uuid4().hex[:8]}"
    fab = FileFabric(tmp_path)
    fab.script({"*": "clean-and-reseat"})
    disp = dispatcher(client, fabric, task_queue)
    first = detection(fabric, LEAF, episode="ep-a")
    async with running_worker(client, task_queue, fab, ticket_server):
        await disp.handle(first)
        h = await wait_started(client, cable_id(fabric))
        await until(h, lambda s: s.waiting_for == "clean-and-reseat")
        await h.execute_update(PortRemediation.complete_step,
                               StepDone(step="clean-and-reseat", actor="tech"))
        await asyncio.wait_for(h.result(), 60)
        run_id = (await h.describe()).run_id
        # a redelivered message, and another detection of the same episode from the peer
        assert not await disp.handle(first)
        assert not await disp.handle(detection(fabric, HOST, episode="ep-a"))
        assert disp.stats.duplicate == 2
        assert (await h.describe()).run_id == run_id
        assert (await h.describe()).status == WorkflowExecutionStatus.COMPLETED
    assert len(fab.calls("isolate")) == 1 and len(fab.calls("unisolate")) == 1
    assert len(ticket_server.ops(cable_id(fabric), "open")) == 1


async def cycle(client: Client, disp: Dispatcher, fab: FileFabric, fabric: str, episode: str,
                rung: str) -> RemediationResult:
    fab.script({"*": rung})
    assert await disp.handle(detection(fabric, HOST, episode=episode))
    h = handle_of(client, cable_id(fabric))
    await until(h, lambda s: s.waiting_for is not None and any(
        d.episode == episode for d in s.detections))
    st = await until(h, lambda s: s.waiting_for == rung)
    assert st.state == "awaiting_technician"
    await h.execute_update(PortRemediation.complete_step, StepDone(step=rung, actor="tech"))
    result: RemediationResult = await asyncio.wait_for(h.result(), 60)
    return result


async def test_repeat_offender_starts_further_down_then_goes_to_a_human(
        wf_env: WorkflowEnvironment, tmp_path: Path, ticket_server: TicketServer,
        task_queue: str) -> None:
    client = wf_env.client
    fabric = f"c{uuid.uuid4().hex[:8]}"
    fab = FileFabric(tmp_path)
    disp = dispatcher(client, fabric, task_queue)
    async with running_worker(client, task_queue, fab, ticket_server) as sink:
        for episode in ("ep-1", "ep-2"):  # returned to service twice after a reseat
            r = await cycle(client, disp, fab, fabric, episode, "clean-and-reseat")
            assert r.outcome == "returned_to_service" and r.fixed_by == "clean-and-reseat"
        # the third episode starts at the next rung (swap-optic), not at the reseat again
        r = await cycle(client, disp, fab, fabric, "ep-3", "swap-optic")
        assert r.outcome == "returned_to_service" and len(r.prior) == 2
        # the fourth: a human decides before anything is isolated again
        isolates = len(fab.calls("isolate"))
        assert await disp.handle(detection(fabric, LEAF, episode="ep-4"))
        h = handle_of(client, cable_id(fabric))
        st = await until(h, lambda s: s.state == "needs_human"
                         and any(d.episode == "ep-4" for d in s.detections))
        assert st.step == "repeat_offender" and "3 times" in (st.needs_human or "")
        assert len(fab.calls("isolate")) == isolates and not st.isolated
        assert any("3 times" in p["summary"] for p in ticket_server.ops(cable_id(fabric), "page"))
        await h.signal(PortRemediation.abort, AbortRequest(actor="lead", reason="replace it"))
        r = await asyncio.wait_for(h.result(), 60)
    assert r.outcome == "aborted"
    assert len(fab.calls("isolate")) == 3 and len(fab.calls("unisolate")) == 3
    rungs = [c["rung"] for c in fab.calls("repair_step")]
    assert rungs == ["clean-and-reseat", "clean-and-reseat", "swap-optic"]
    notes = [a.note or "" for a in sink.actions() if a.step == "history"]
    assert any("starts at swap-optic" in n for n in notes)


async def test_reflap_during_the_soak_fails_the_rung(wf_env: WorkflowEnvironment,
                                                     tmp_path: Path,
                                                     ticket_server: TicketServer,
                                                     task_queue: str) -> None:
    client = wf_env.client
    fabric = f"c{uuid.uuid4().hex[:8]}"
    fab = FileFabric(tmp_path)
    fab.script({"*": "clean-and-reseat"})
    disp = dispatcher(client, fabric, task_queue,
                      policy="fabricHealth: {runbook: {cleanCountersWait: 1h}}")
    async with running_worker(client, task_queue, fab, ticket_server) as sink:
        await disp.handle(detection(fabric, LEAF))
        h = await wait_started(client, cable_id(fabric))
        await until(h, lambda s: s.waiting_for == "clean-and-reseat")
        await h.execute_update(PortRemediation.complete_step,
                               StepDone(step="clean-and-reseat", actor="tech"))
        await until(h, lambda s: s.state in ("waiting_clean_counters", "probation_soak"))
        flap = detection(fabric, HOST, episode="ep-2")
        assert await disp.handle(flap)  # the repair did not hold: seen from the host end
        await until(h, lambda s: s.waiting_for == "swap-optic")
        await h.execute_update(PortRemediation.complete_step, StepDone(
            step="swap-optic", actor="tech", new_serials={"leaf-su01-r1:3": "MT2231FT0001"}))
        await until(h, lambda s: s.state in ("waiting_clean_counters", "probation_soak"))
        await h.signal(PortRemediation.abort, AbortRequest(actor="t"))
        await asyncio.wait_for(h.result(), 60)
    reflap = [a for a in sink.actions() if a.step == "check:counters-clean-24h"
              and a.outcome == "failed"]
    assert len(reflap) == 1 and flap.id in (reflap[0].note or "")
    assert reflap[0].after == {"detection": flap.id, "episode": "ep-2",
                               "end": "node0002/mlx5_1:1"}
    swap = [a for a in sink.actions() if a.step == "ladder:swap-optic"]
    assert swap[0].after is not None
    assert swap[0].after["new_serials"] == {"leaf-su01-r1:3": "MT2231FT0001"}
    assert any("next: swap-optic" in u["summary"]
               for u in ticket_server.ops(cable_id(fabric), "update"))
    # in probation the link is up; the re-flap isolates it again for the next rung, whose
    # probation re-enables it (and the abort leaves it in service)
    assert len(fab.calls("isolate")) == 2 and len(fab.calls("unisolate")) == 2
    assert not fab.is_isolated(*LEAF)


class RailFencer:
    """A stand-in for Kubernetes (label + taint per node rail), recording each call."""

    enabled = True

    def __init__(self) -> None:
        self.fenced: set[tuple[str, int | None]] = set()
        self.calls: list[tuple[str, str, int | None]] = []

    async def fence(self, node: str, rail: int | None, reason: str) -> bool:
        self.calls.append(("fence", node, rail))
        changed = (node, rail) not in self.fenced
        self.fenced.add((node, rail))
        return changed

    async def unfence(self, node: str, rail: int | None) -> bool:
        self.calls.append(("unfence", node, rail))
        changed = (node, rail) in self.fenced
        self.fenced.discard((node, rail))
        return changed


async def test_a_rail_is_unfenced_only_when_no_other_runbook_holds_it(
        wf_env: WorkflowEnvironment, tmp_path: Path, ticket_server: TicketServer,
        task_queue: str) -> None:
    from wf_helpers import fabric_activities

    from workflows.budget.activities import BudgetActivities
    from workflows.worker import activity_functions, build_worker

    client = wf_env.client
    fabric = f"c{uuid.uuid4().hex[:8]}"
    fab = FileFabric(tmp_path)
    acts, sink = fabric_activities(fab, ticket_server.url)
    fencer = RailFencer()
    acts.fencer = fencer
    # two cables of one node's rail 1 (a dual-port HCA on the same rail)
    inv = Inventory()
    links = [TopologyLink(a_device="leaf-su01-r1", a_port=3, b_device="node0002/mlx5_1",
                          b_port=1),
             TopologyLink(a_device="leaf-su01-r1", a_port=4, b_device="node0002/mlx5_1",
                          b_port=2)]
    inv.load(Topology(id="t", ts=int(time.time() * 1000), fabric=fabric, source="x",
                      links=links))
    disp = Dispatcher(client, Policy.from_yaml("fabricHealth: {breaker: "
                                               "{maxIsolatedPortsPerSU: 100%}}"),
                      inv, task_queue=task_queue, timeouts=FAST)
    worker = build_worker(client, task_queue,
                          activity_functions(acts, BudgetActivities(client, task_queue)))
    async with worker:
        await disp.handle(detection(fabric, ("leaf-su01-r1", 3)))
        await disp.handle(detection(fabric, ("node0002/mlx5_1", 2), episode="ep-b"))
        a = handle_of(client, cable_id(fabric))
        b = handle_of(client, f"remediate/{fabric}/leaf-su01-r1:4~node0002/mlx5_1:2")
        for h in (a, b):
            st = await until(h, lambda s: s.waiting_for == "clean-and-reseat")
            assert st.fenced and st.port.node == "node0002"
        await a.signal(PortRemediation.abort, AbortRequest(actor="t"))
        await asyncio.wait_for(a.result(), 60)
        assert fencer.fenced == {("node0002", 1)}  # b still holds the rail
        await b.signal(PortRemediation.abort, AbortRequest(actor="t"))
        await asyncio.wait_for(b.result(), 60)
    await acts.aclose()
    assert fencer.fenced == set()
    assert [c[0] for c in fencer.calls].count("unfence") == 1
    skipped = [x for x in sink.actions() if x.step == "unfence" and x.outcome == "skipped"]
    assert len(skipped) == 1 and "held by 1 other" in (skipped[0].note or "")


def cli(target: str, fabric: str, *args: str) -> Any:
    import os
    import subprocess
    import sys

    from test_durability import REPO

    env = {**os.environ, "FABRICWATCH_TEMPORAL__ADDRESS": target, "FABRICWATCH_FABRIC": fabric}
    return subprocess.run([sys.executable, "-c", "from fabricwatch.cli import main; main()",
                           *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=60, check=False)


async def test_cli_lists_cables_and_reconciles(wf_env: WorkflowEnvironment, tmp_path: Path,
                                               ticket_server: TicketServer,
                                               task_queue: str) -> None:
    import orjson

    from sim.controller import SimController
    from workflows.adapters.k8s import NoFencer
    from workflows.adapters.records import MemorySink
    from workflows.adapters.sim import SimChecker, SimControllerAdapter, SimEvidence
    from workflows.adapters.ticket import WebhookTicketing
    from workflows.budget.activities import BudgetActivities
    from workflows.remediation.activities import FabricActivities
    from workflows.worker import activity_functions, build_worker

    client = wf_env.client
    target = client.service_client.config.target_host
    fabric = f"c{uuid.uuid4().hex[:8]}"
    sim = SimController(tmp_path / "sim")
    adapter = SimControllerAdapter(sim, tmp_path / "sim")
    acts = FabricActivities(records=MemorySink(), controller=adapter,
                            evidence=SimEvidence(adapter), checker=SimChecker(adapter),
                            fencer=NoFencer(), ticketing=WebhookTicketing(ticket_server.url))
    disp = dispatcher(client, fabric, task_queue)
    run = lambda *a: asyncio.to_thread(cli, target, fabric, *a)  # noqa: E731
    worker = build_worker(client, task_queue,
                          activity_functions(acts, BudgetActivities(client, task_queue)))
    async with worker:
        await disp.handle(detection(fabric, HOST))
        h = await wait_started(client, cable_id(fabric))
        await until(h, lambda s: s.waiting_for == "clean-and-reseat")
        listed = await run("runbook", "list", "--format", "json")
        assert listed.returncode == 0, listed.stderr
        rows = orjson.loads(listed.stdout)
        assert len(rows) >= 1
        row = next(r for r in rows if r["id"] == cable_id(fabric))
        assert row["cable"] == ["leaf-su01-r1:3", "node0002/mlx5_1:1"]
        assert (row["isolated_end"], row["state"], row["rung"]) == (
            "leaf-su01-r1:3", "awaiting_technician", "clean-and-reseat")
        # either end names the runbook
        shown = await run("runbook", "show", "node0002/mlx5_1:1")
        assert shown.returncode == 0 and cable_id(fabric) in shown.stdout, shown.stderr
        agree = await run("runbook", "reconcile", "--sim-state", str(tmp_path / "sim"))
        assert agree.returncode == 0 and "agree" in agree.stdout, agree.stdout + agree.stderr
        sim.isolate("leaf-su01-r1", 5, by="a human")  # not fabricwatch's
        found = await run("runbook", "reconcile", "--sim-state", str(tmp_path / "sim"),
                          "--format", "json")
        assert found.returncode == 1
        kinds = [(d["kind"], d.get("port")) for d in orjson.loads(found.stdout)["differences"]]
        assert kinds == [("untracked_isolation", "leaf-su01-r1:5")]
        blind = await run("runbook", "reconcile", "--controller", "none")
        assert blind.returncode == 1 and "did not run" in blind.stdout
        await h.signal(PortRemediation.abort, AbortRequest(actor="t"))
        await asyncio.wait_for(h.result(), 60)
        listed = await run("runbook", "list", "--all", "--format", "json")
        row = next(r for r in orjson.loads(listed.stdout) if r["id"] == cable_id(fabric))
        assert (row["state"], row["isolated_end"]) == ("aborted", "leaf-su01-r1:3")
        assert row["cable"] == ["leaf-su01-r1:3", "node0002/mlx5_1:1"] and "rung" in row
    await acts.aclose()
    # the fabric is never touched by reconcile: the human's isolation is still there
    assert sim.is_isolated("leaf-su01-r1", 5)
    assert [c["key"] for c in sim.commands("isolate")] == ["leaf-su01-r1:3", "leaf-su01-r1:5"]


async def test_a_flap_the_correlator_explains_stands_its_runbook_down(
        wf_env: WorkflowEnvironment, tmp_path: Path, ticket_server: TicketServer,
        task_queue: str) -> None:
    """A flap that counted a reboot's down, published before the reboot's other reports were
    read, started the cable's runbook, which isolated the port. The correlator publishes it
    again under the incident (``<id>/explained``): the dispatcher tells the runbook, which
    stands down as an abort does (the isolation undone, the budget released), once every
    detection it has is explained; one of its own, not explained, would keep it going."""
    client = wf_env.client
    fabric = f"c{uuid.uuid4().hex[:8]}"
    fab = FileFabric(tmp_path)
    fab.script({"*": "clean-and-reseat"})
    disp = dispatcher(client, fabric, task_queue)
    flap = detection(fabric, HOST, episode="flap/node0002/mlx5_1:1/1")
    incident = f"inc/node_reboot/node0002/{flap.ts}"
    copy = explained(flap, incident)  # what the correlator publishes
    async with running_worker(client, task_queue, fab, ticket_server):
        assert await disp.handle(flap)
        h = await wait_started(client, cable_id(fabric))
        await until(h, lambda s: s.waiting_for == "clean-and-reseat")
        assert await budgets(client, fabric) == (1, 1)
        assert not await disp.handle(copy)  # held (it carries the incident) ...
        assert disp.stats.explained == 1  # ... and delivered to the runbook
        result = await asyncio.wait_for(h.result(), 60)
        assert await budgets(client, fabric) == (0, 0)
    assert result.outcome == "aborted"
    abort = [e for e in result.history if e.step == "abort"][0]
    assert abort.actor == "fabricwatch" and incident in (abort.note or "")
    assert [c["key"] for c in fab.calls("isolate")] == ["leaf-su01-r1:3"]
    assert [c["key"] for c in fab.calls("unisolate")] == ["leaf-su01-r1:3"]
    # the explained copy read again: no runbook runs, nothing is told
    assert not await disp.handle(copy)
    assert disp.stats.explained == 1


async def test_a_runbook_with_a_detection_of_its_own_is_not_stood_down(
        wf_env: WorkflowEnvironment, tmp_path: Path, ticket_server: TicketServer,
        task_queue: str) -> None:
    client = wf_env.client
    fabric = f"c{uuid.uuid4().hex[:8]}"
    fab = FileFabric(tmp_path)
    fab.script({"*": "clean-and-reseat"})
    disp = dispatcher(client, fabric, task_queue)
    flap = detection(fabric, HOST, episode="flap/node0002/mlx5_1:1/1")
    other = detection(fabric, LEAF, episode="ber/leaf-su01-r1:3/1")
    copy = explained(flap, "inc/node_reboot/node0002/1")
    async with running_worker(client, task_queue, fab, ticket_server):
        assert await disp.handle(flap)
        h = await wait_started(client, cable_id(fabric))
        assert await disp.handle(other)  # the switch end's own detection joins
        await until(h, lambda s: s.waiting_for == "clean-and-reseat" and len(s.detections) == 2)
        assert not await disp.handle(copy)
        assert disp.stats.explained == 1
        await asyncio.sleep(2)
        st = await h.query(PortRemediation.status)
        assert st.state == "awaiting_technician" and st.isolated  # the other keeps it going
        await h.signal(PortRemediation.abort, AbortRequest(actor="test", reason="done"))
        result = await asyncio.wait_for(h.result(), 60)
    assert [e.actor for e in result.history if e.step == "abort"] == ["test"]
