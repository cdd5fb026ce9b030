"""Activities that talk to the budget workflows (a workflow cannot send another one an update).

``acquire`` asks the SU budget, then the fabric budget, with update-with-start so the first
request of an SU creates its budget. If the fabric refuses after the SU granted, the SU grant
is released again, so a refusal never leaves a grant behind. Both calls are idempotent per
holder, so a retried activity changes nothing.
"""

from __future__ import annotations

from temporalio import activity
from temporalio.client import Client, WithStartWorkflowOperation
from temporalio.common import WorkflowIDConflictPolicy

from workflows.budget.models import (
    AcquireInput,
    BudgetInput,
    GrantRequest,
    GrantResult,
    ReleaseInput,
    ReleaseRequest,
    ReleaseResult,
    fabric_budget_id,
    su_budget_id,
)
from workflows.budget.workflows import IsolationBudget


class BudgetActivities:
    """Budget requests through a Temporal client (injected, like every other client)."""

    def __init__(self, client: Client, task_queue: str | None = None) -> None:
        self._client = client
        self._task_queue = task_queue

    def _queue(self) -> str:
        return self._task_queue or activity.info().task_queue

    async def _grant(self, wf_id: str, start: BudgetInput, req: GrantRequest) -> GrantResult:
        op = WithStartWorkflowOperation(
            IsolationBudget.run, start, id=wf_id, task_queue=self._queue(),
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING)
        result: GrantResult = await self._client.execute_update_with_start_workflow(
            IsolationBudget.grant, req, start_workflow_operation=op)
        return result

    async def _release(self, wf_id: str, start: BudgetInput, holder: str) -> ReleaseResult:
        op = WithStartWorkflowOperation(
            IsolationBudget.run, start, id=wf_id, task_queue=self._queue(),
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING)
        result: ReleaseResult = await self._client.execute_update_with_start_workflow(
            IsolationBudget.release, ReleaseRequest(holder=holder), start_workflow_operation=op)
        return result

    @activity.defn(name="budget_acquire")
    async def acquire(self, inp: AcquireInput) -> GrantResult:
        su_start = BudgetInput(fabric=inp.fabric, scope="su", su=inp.su, limit=inp.su_limit)
        fab_start = BudgetInput(fabric=inp.fabric, scope="fabric", limit=inp.fabric_limit)
        su = await self._grant(su_budget_id(inp.fabric, inp.su), su_start, GrantRequest(
            holder=inp.holder, port_key=inp.port_key, limit=inp.su_limit, force_by=inp.force_by,
            probe=inp.probe))
        if not su.granted:
            return su
        fab = await self._grant(fabric_budget_id(inp.fabric), fab_start, GrantRequest(
            holder=inp.holder, port_key=inp.port_key, limit=inp.fabric_limit,
            force_by=inp.force_by, probe=inp.probe))
        if not fab.granted:
            if not inp.probe:
                await self._release(su_budget_id(inp.fabric, inp.su), su_start, inp.holder)
            return fab
        return su

    @activity.defn(name="budget_release")
    async def release(self, inp: ReleaseInput) -> ReleaseResult:
        # Fabric first then SU: the reverse of acquire, so the SU count never undercounts.
        fab = await self._release(fabric_budget_id(inp.fabric),
                                  BudgetInput(fabric=inp.fabric, scope="fabric"), inp.holder)
        su = await self._release(su_budget_id(inp.fabric, inp.su),
                                 BudgetInput(fabric=inp.fabric, scope="su", su=inp.su), inp.holder)
        return ReleaseResult(released=fab.released or su.released, in_use=su.in_use)
