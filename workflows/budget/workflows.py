"""``IsolationBudget``: an entity workflow per SU (and one per fabric) that serialises grants.

Grants and releases are updates: the caller learns at once whether it may isolate, and the
handlers change state without awaiting anything, so no two grants can interleave and the
limit is never passed (except by an explicit human override, recorded as such). Grants are
idempotent per holder (the runbook's workflow id): a retried request never counts twice.
The workflow never completes; it continues-as-new, carrying its holders, before its
history grows large.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from workflows.budget.models import (
        BudgetInput,
        BudgetState,
        GrantRequest,
        GrantResult,
        Holder,
        ReleaseRequest,
        ReleaseResult,
    )


@workflow.defn(name="IsolationBudget")
class IsolationBudget:
    @workflow.init
    def __init__(self, inp: BudgetInput) -> None:
        self._inp = inp
        self._limit = inp.limit
        self._limit_ts = inp.limit_ts
        # dict keeps insertion order, so iteration is deterministic on replay
        self._holders: dict[str, Holder] = {h.holder: h for h in inp.holders}
        self._granted_total = inp.granted_total
        self._refused_total = inp.refused_total

    @workflow.run
    async def run(self, inp: BudgetInput) -> BudgetState:
        await workflow.wait_condition(self._history_large)
        # Let in-flight updates finish so no caller loses its answer across the new run.
        await workflow.wait_condition(workflow.all_handlers_finished)
        workflow.continue_as_new(BudgetInput(
            fabric=inp.fabric, scope=inp.scope, su=inp.su, limit=self._limit,
            limit_ts=self._limit_ts, holders=list(self._holders.values()), granted_total=self._granted_total,
            refused_total=self._refused_total, max_history_events=inp.max_history_events,
        ))

    def _history_large(self) -> bool:
        info = workflow.info()
        return (info.is_continue_as_new_suggested()
                or info.get_current_history_length() >= self._inp.max_history_events)

    def _name(self) -> str:
        if self._inp.scope == "rail":
            return f"rail {self._inp.su}"
        return f"SU {self._inp.su}" if self._inp.scope == "su" else f"fabric {self._inp.fabric}"

    @workflow.update
    def grant(self, req: GrantRequest) -> GrantResult:
        limit = self._limit
        if req.limit >= 0 and req.limit_ts >= self._limit_ts:
            limit = req.limit
            if not req.probe:  # a shadow-mode probe answers as if, and changes nothing
                self._limit, self._limit_ts = req.limit, req.limit_ts
        in_use = len(self._holders)
        held = self._holders.get(req.holder)
        if held is not None:
            if req.attempt is not None and (held.attempt or 0) < req.attempt:
                self._holders[req.holder] = held.model_copy(update={"attempt": req.attempt})
            return GrantResult(granted=True, in_use=in_use, limit=limit, already_held=True,
                               reason="already held")
        if in_use >= limit and req.force_by is None:
            if not req.probe:
                self._refused_total += 1
            return GrantResult(
                granted=False, in_use=in_use, limit=limit,
                reason=(f"isolation budget of {self._name()} exhausted: {in_use} of {limit} "
                        f"port(s) already isolated"))
        if req.probe:
            return GrantResult(granted=True, in_use=in_use, limit=limit, reason="probe")
        self._holders[req.holder] = Holder(
            holder=req.holder, port_key=req.port_key,
            granted_ts=int(workflow.now().timestamp() * 1000), forced_by=req.force_by,
            attempt=req.attempt)
        self._granted_total += 1
        reason = f"override by {req.force_by}" if in_use >= limit else ""
        return GrantResult(granted=True, in_use=in_use + 1, limit=limit, reason=reason)

    @workflow.update
    def release(self, req: ReleaseRequest) -> ReleaseResult:
        held = self._holders.get(req.holder)
        if held is not None and (req.only_attempt is None or held.attempt == req.only_attempt):
            del self._holders[req.holder]
            return ReleaseResult(released=True, in_use=len(self._holders))
        return ReleaseResult(released=False, in_use=len(self._holders))

    @workflow.query
    def state(self) -> BudgetState:
        return BudgetState(
            fabric=self._inp.fabric, scope=self._inp.scope, su=self._inp.su, limit=self._limit,
            in_use=len(self._holders), holders=list(self._holders.values()),
            granted_total=self._granted_total, refused_total=self._refused_total)
