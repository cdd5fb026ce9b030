"""Reconcile the isolation accounting with the fabric: budgets, the controller's isolated set
and the open runbooks.

``compare`` is pure: it takes what was read and returns every difference. ``gather`` reads
the three from Temporal and the controller; ``repair`` fixes the *accounting* only (a budget
slot released or granted), never the fabric: a port isolated that no runbook holds, or a
runbook that believes a port isolated that is not, is reported for a human.

Differences:

* ``stale_grant``: a budget holds a slot for a runbook that is not running, and the controller
  says its port is not isolated. Repair: release the slot.
* ``closed_hold``: the same, but the port is still isolated (a runbook that handed the port to
  a human, or left a port it found isolated): the slot is truthful and stays. Reported.
* ``unverified_grant``: the same, but the controller's isolated set could not be read:
  nothing is released (fail closed).
* ``missing_grant``: a running runbook says it holds the budget, the budget does not list it.
  Repair: grant it (recorded as forced by ``reconcile``).
* ``untracked_isolation``: the controller has a port isolated that no open runbook isolated.
* ``not_isolated``: an open runbook believes its port isolated; the controller says it is not.
* ``unreadable_runbook``: a running runbook did not answer its status query (no worker): its
  slots count as held, its own checks did not run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import Any, Literal

from workflows.budget.models import BudgetState, GrantRequest, ReleaseRequest

Kind = Literal["stale_grant", "closed_hold", "unverified_grant", "missing_grant",
               "untracked_isolation", "not_isolated", "unreadable_runbook"]
REPAIRABLE = frozenset({"stale_grant", "missing_grant"})


@dataclass(frozen=True, slots=True)
class OpenRunbook:
    workflow_id: str
    isolated_end: str  # device:port
    su: str
    isolated: bool
    budget_held: bool
    readable: bool = True  # False: the status query did not answer


@dataclass(frozen=True, slots=True)
class Budget:
    workflow_id: str  # budget/{fabric} or budget/{fabric}/{su}
    scope: str
    su: str | None
    holders: Mapping[str, str]  # holder workflow id -> port key


@dataclass(slots=True)
class Difference:
    kind: Kind
    detail: str
    runbook: str | None = None
    budget: str | None = None
    port: str | None = None
    repaired: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v not in (None, {})}


def compare(open_runbooks: Iterable[OpenRunbook], budgets: Iterable[Budget],
            isolated: set[str] | None) -> list[Difference]:
    """Every difference between the three views (``isolated`` None: the controller's set
    could not be read; the checks that need it are reported as not run, never passed)."""
    runs = {r.workflow_id: r for r in open_runbooks}
    budgets = list(budgets)
    diffs: list[Difference] = [
        Difference("unreadable_runbook", f"{r.workflow_id} did not answer its status query; "
                   f"its slots are kept and its checks did not run", runbook=r.workflow_id)
        for r in runs.values() if not r.readable]
    for b in budgets:
        if b.scope not in ("su", "fabric"):
            continue
        for holder, port in b.holders.items():
            if holder in runs:
                continue
            if isolated is None:
                diffs.append(Difference("unverified_grant", f"{b.workflow_id} holds a slot for "
                                        f"{holder}, which is not running; the controller's "
                                        f"isolated set was not read, so it is kept",
                                        runbook=holder, budget=b.workflow_id, port=port))
            elif port in isolated:
                diffs.append(Difference("closed_hold", f"{holder} is closed and {port} is still "
                                        f"isolated: the slot is truthful (a human holds it)",
                                        runbook=holder, budget=b.workflow_id, port=port))
            else:
                diffs.append(Difference("stale_grant", f"{b.workflow_id} holds a slot for "
                                        f"{holder}, which is not running, and {port} is not "
                                        f"isolated", runbook=holder, budget=b.workflow_id,
                                        port=port))
    for r in runs.values():
        if not r.budget_held:
            continue
        for b in budgets:
            if b.scope == "fabric" or (b.scope == "su" and b.su == r.su):
                if r.workflow_id not in b.holders:
                    diffs.append(Difference("missing_grant", f"{r.workflow_id} holds the budget "
                                            f"but {b.workflow_id} does not list it",
                                            runbook=r.workflow_id, budget=b.workflow_id,
                                            port=r.isolated_end, extra={"su": r.su}))
    if isolated is not None:
        held = {r.isolated_end for r in runs.values() if r.isolated}
        closed = {d.port for d in diffs if d.kind == "closed_hold" and d.port}
        for port in sorted(isolated - held - closed):
            diffs.append(Difference("untracked_isolation", f"{port} is isolated on the "
                                    f"controller and no open runbook isolated it", port=port))
        for r in runs.values():
            if r.isolated and r.isolated_end not in isolated:
                diffs.append(Difference("not_isolated", f"{r.workflow_id} believes "
                                        f"{r.isolated_end} isolated; the controller says it "
                                        f"is not", runbook=r.workflow_id, port=r.isolated_end))
    return diffs


async def gather(client: Any, fabric: str) -> tuple[list[OpenRunbook], list[Budget]]:
    """The open runbooks and the budgets of ``fabric``, as Temporal has them now."""
    from workflows.budget.workflows import IsolationBudget
    from workflows.remediation.workflows import PortRemediation

    runs: list[OpenRunbook] = []
    prefix = f"remediate/{fabric}/"
    async for wf in client.list_workflows(
            "WorkflowType = 'PortRemediation' AND ExecutionStatus = 'Running'"):
        if not wf.id.startswith(prefix):
            continue
        try:
            st = await client.get_workflow_handle(wf.id).query(PortRemediation.status,
                                                               rpc_timeout=timedelta(seconds=10))
        except Exception:  # noqa: BLE001 - no worker for it: counted as open, reported
            runs.append(OpenRunbook(wf.id, "", "", isolated=False, budget_held=False,
                                    readable=False))
            continue
        runs.append(OpenRunbook(wf.id, st.port.key, st.port.su, st.isolated, st.budget_held))
    budgets: list[Budget] = []
    async for wf in client.list_workflows(
            "WorkflowType = 'IsolationBudget' AND ExecutionStatus = 'Running'"):
        if wf.id != f"budget/{fabric}" and not wf.id.startswith(f"budget/{fabric}/"):
            continue
        bs: BudgetState = await client.get_workflow_handle(wf.id).query(IsolationBudget.state)
        budgets.append(Budget(wf.id, bs.scope, bs.su, {h.holder: h.port_key for h in bs.holders}))
    return runs, budgets


async def repair(client: Any, diffs: list[Difference]) -> None:
    """Release stale slots and grant missing ones (accounting only); marks ``repaired``."""
    from workflows.budget.workflows import IsolationBudget

    for d in diffs:
        if d.kind not in REPAIRABLE or d.budget is None or d.runbook is None:
            continue
        handle = client.get_workflow_handle(d.budget)
        if d.kind == "stale_grant":
            await handle.execute_update(IsolationBudget.release, ReleaseRequest(holder=d.runbook))
        else:
            # limit -1: keep the budget's limit; force: the runbook already acted on it
            await handle.execute_update(IsolationBudget.grant, GrantRequest(
                holder=d.runbook, port_key=d.port or "", limit=-1, force_by="reconcile"))
        d.repaired = True
        await asyncio.sleep(0)
