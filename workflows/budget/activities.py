"""Activities that talk to the budget workflows (a workflow cannot send another one an update).

``acquire`` asks the SU budget, then the fabric budget, with update-with-start so the first
request of an SU creates its budget. If the fabric refuses after the SU granted, the SU grant
is released again, so a refusal never leaves a grant behind; that release names the attempt,
so an attempt that timed out and finishes late cannot take back the grant of a retry that
has since succeeded. Both calls are idempotent per holder, so a retried activity changes
nothing.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from temporalio import activity
from temporalio.client import Client, WithStartWorkflowOperation
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError, RPCStatusCode

from workflows.budget.models import (
    RAIL_NO_LIMIT,
    AcquireInput,
    BudgetInput,
    GrantRequest,
    GrantResult,
    ReleaseInput,
    ReleaseRequest,
    ReleaseResult,
    fabric_budget_id,
    rail_hold_id,
    su_budget_id,
)
from workflows.budget.workflows import IsolationBudget
from workflows.remediation.models import RailInput, RailResult

T = TypeVar("T")

# Temporal admits a few in-flight updates per workflow (10 on the dev server) and aborts those
# that meet a continue-as-new; in a burst (a spine reboot: dozens of ports of one SU at once)
# callers are turned away with these codes. Retrying here, quickly and with jitter, keeps the
# grants flowing instead of waiting out the activity retry's exponential backoff.
_BUSY = {RPCStatusCode.RESOURCE_EXHAUSTED, RPCStatusCode.UNAVAILABLE, RPCStatusCode.ABORTED}
_BUSY_TRIES = 200


async def _while_busy(call: Callable[[], Awaitable[T]]) -> T:
    delay = 0.05
    for attempt in range(_BUSY_TRIES):
        try:
            return await call()
        except RPCError as exc:
            if exc.status not in _BUSY or attempt == _BUSY_TRIES - 1:
                raise
        if activity.in_activity():
            activity.heartbeat("budget busy")
        # exponential with full jitter: a crowd of callers must not hammer a busy server
        await asyncio.sleep(random.uniform(0, delay))  # noqa: S311 - jitter, not security
        delay = min(delay * 2, 2.0)
    raise AssertionError("unreachable")


class BudgetActivities:
    """Budget requests through a Temporal client (injected, like every other client)."""

    def __init__(self, client: Client, task_queue: str | None = None) -> None:
        self._client = client
        self._task_queue = task_queue

    @property
    def client(self) -> Client:
        return self._client

    @property
    def task_queue(self) -> str | None:
        return self._task_queue

    def _queue(self) -> str:
        return self._task_queue or activity.info().task_queue

    def _op(self, wf_id: str, start: BudgetInput) -> WithStartWorkflowOperation[Any, Any]:
        # a fresh operation per call: one carries the handle of one start attempt
        return WithStartWorkflowOperation(
            IsolationBudget.run, start, id=wf_id, task_queue=self._queue(),
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING)

    async def _grant(self, wf_id: str, start: BudgetInput, req: GrantRequest) -> GrantResult:
        result: GrantResult = await _while_busy(
            lambda: self._client.execute_update_with_start_workflow(
                IsolationBudget.grant, req, start_workflow_operation=self._op(wf_id, start)))
        return result

    async def _release(self, wf_id: str, start: BudgetInput, holder: str,
                       only_attempt: int | None = None) -> ReleaseResult:
        result: ReleaseResult = await _while_busy(
            lambda: self._client.execute_update_with_start_workflow(
                IsolationBudget.release, ReleaseRequest(holder=holder, only_attempt=only_attempt),
                start_workflow_operation=self._op(wf_id, start)))
        return result

    @activity.defn(name="budget_acquire")
    async def acquire(self, inp: AcquireInput) -> GrantResult:
        # An attempt that timed out may still be running beside its retry; the attempt
        # number keeps its compensating release off a grant the retry has since relied on.
        attempt = activity.info().attempt if activity.in_activity() else None
        su_start = BudgetInput(fabric=inp.fabric, scope="su", su=inp.su, limit=inp.su_limit,
                               limit_ts=inp.limits_ts)
        fab_start = BudgetInput(fabric=inp.fabric, scope="fabric", limit=inp.fabric_limit,
                                limit_ts=inp.limits_ts)
        su = await self._grant(su_budget_id(inp.fabric, inp.su), su_start, GrantRequest(
            holder=inp.holder, port_key=inp.port_key, limit=inp.su_limit,
            limit_ts=inp.limits_ts, force_by=inp.force_by, probe=inp.probe, attempt=attempt))
        if not su.granted:
            return su
        fab = await self._grant(fabric_budget_id(inp.fabric), fab_start, GrantRequest(
            holder=inp.holder, port_key=inp.port_key, limit=inp.fabric_limit,
            limit_ts=inp.limits_ts, force_by=inp.force_by, probe=inp.probe, attempt=attempt))
        if not fab.granted:
            if not inp.probe:
                await self._release(su_budget_id(inp.fabric, inp.su), su_start, inp.holder,
                                    only_attempt=attempt)
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

    def _rail(self, inp: RailInput) -> tuple[str, BudgetInput]:
        where = f"{inp.node}/{'all' if inp.rail is None else inp.rail}"
        return (rail_hold_id(inp.fabric, inp.node, inp.rail),
                BudgetInput(fabric=inp.fabric, scope="rail", su=where, limit=RAIL_NO_LIMIT))

    @activity.defn(name="rail_hold")
    async def rail_hold(self, inp: RailInput) -> RailResult:
        """This runbook holds the node's rail fence (idempotent per holder)."""
        wf_id, start = self._rail(inp)
        res = await self._grant(wf_id, start, GrantRequest(
            holder=inp.holder, port_key=f"{inp.node}/{inp.rail}", limit=RAIL_NO_LIMIT))
        return RailResult(held_by_others=max(0, res.in_use - 1))

    @activity.defn(name="rail_release")
    async def rail_release(self, inp: RailInput) -> RailResult:
        """Let go of the rail; ``held_by_others`` > 0 means the fence must stay."""
        wf_id, start = self._rail(inp)
        res = await self._release(wf_id, start, inp.holder)
        return RailResult(held_by_others=res.in_use)
