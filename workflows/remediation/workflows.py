"""``PortRemediation``: the durable runbook of one port, from evidence to return to service.

Workflow id ``remediate/{fabric}/{device}:{port}``; a second detection of the port is
signalled into the running workflow (signal-with-start) instead of starting another.

1. evidence: perfquery / mlxlink / cable info into the ledger before anything changes;
2. budget: the SU's and the fabric's ``IsolationBudget`` grant, or the breaker opens: a
   ``breaker_open`` detection, a page, and a wait for a human's approve or abort;
3. isolate the port, label and taint the node's rail;
4. open a ticket with both cable ends, the evidence and the detection;
5. the repair ladder: each rung waits for a technician's ``step_done`` (reminders, then an
   escalation), then the return-to-service checks (ib_write_bw, NCCL, a durable clean-counter
   wait); a failed check moves to the next rung; after the last, a human decides;
6. return to service: un-isolate, remove label and taint, close the ticket, release the budget.

Every step is an ActionRecord in the ledger. An abort at any point rolls back what was done,
in the safe order (port back before the budget is released). In shadow mode everything is
decided and recorded (outcome ``dry_run``) and nothing changes.

Deterministic: time is ``workflow.now()``, configuration arrives in the input, every side
effect is an activity.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Literal

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from workflows.budget.activities import BudgetActivities
    from workflows.budget.models import AcquireInput, GrantResult, ReleaseInput
    from workflows.remediation.activities import FabricActivities
    from workflows.remediation.models import (
        AbortRequest,
        Approval,
        BreakerInput,
        CheckInput,
        CheckResult,
        ControlInput,
        ControlResult,
        DetectionRef,
        EvidenceInput,
        EvidenceItem,
        HistoryEntry,
        RecordInput,
        RemediationInput,
        RemediationResult,
        RemediationStatus,
        RepairInput,
        StepAck,
        StepDone,
        TicketInput,
    )

Outcome = Literal["done", "refused", "failed", "skipped", "dry_run"]

# Retry policies, by what a failure means:
# - ledger writes and budget calls: transient (ledger busy, server restarting); retry for
#   ever with backoff, the runbook must not lose its record or its grant.
FOREVER = RetryPolicy(initial_interval=timedelta(seconds=1), backoff_coefficient=2.0,
                      maximum_interval=timedelta(minutes=1))
# - controller changes: idempotent, and a port that cannot be isolated needs a human after a
#   while: retry with backoff up to 5 min apart, give up after 20 attempts (about an hour).
CONTROLLER = RetryPolicy(initial_interval=timedelta(seconds=2), backoff_coefficient=2.0,
                         maximum_interval=timedelta(minutes=5), maximum_attempts=20,
                         non_retryable_error_types=["AdapterRejected"])
# - evidence and checks: a tool that fails three times will fail the fourth; evidence then
#   proceeds without it (recorded), a check counts as failed.
FEW = RetryPolicy(initial_interval=timedelta(seconds=5), backoff_coefficient=2.0,
                  maximum_interval=timedelta(minutes=2), maximum_attempts=3,
                  non_retryable_error_types=["AdapterRejected"])
# - tickets: a ticket system outage should not stop isolation; retry for ever.
TICKET = RetryPolicy(initial_interval=timedelta(seconds=2), backoff_coefficient=2.0,
                     maximum_interval=timedelta(minutes=5),
                     non_retryable_error_types=["AdapterRejected"])


class _Aborted(Exception):
    def __init__(self, request: AbortRequest) -> None:
        super().__init__(request.reason or "aborted")
        self.request = request


def _s(seconds: float) -> timedelta:
    return timedelta(seconds=seconds)


@workflow.defn(name="PortRemediation")
class PortRemediation:
    @workflow.init
    def __init__(self, inp: RemediationInput) -> None:
        self._inp = inp
        self._cfg = inp.config
        self._port = inp.port
        self._dry = inp.config.shadow
        self._step = "start"
        self._state = "running"
        self._rung: str | None = None
        self._waiting_for: str | None = None
        self._detections: list[DetectionRef] = [inp.detection]
        self._unrecorded: list[DetectionRef] = []
        self._history: list[HistoryEntry] = []
        self._evidence: list[EvidenceItem] = []
        self._done: StepDone | None = None
        self._approval: Approval | None = None
        self._abort: AbortRequest | None = None
        self._isolated = False
        self._fenced = False
        self._ticket: str | None = None
        self._granted = False
        self._seq = 0

    # --- signals, updates, queries ------------------------------------------------------

    @workflow.signal
    def detection(self, det: DetectionRef) -> None:
        """A further detection of this port joins the running runbook."""
        if all(d.id != det.id for d in self._detections):
            self._detections.append(det)
            self._unrecorded.append(det)

    def _accept_step(self, done: StepDone) -> bool:
        if self._waiting_for is not None and done.step == self._waiting_for:
            self._done = done
            return True
        return False

    @workflow.signal
    def step_done(self, done: StepDone) -> None:
        """A technician finished a rung (a step name that is not awaited is ignored)."""
        self._accept_step(done)

    @workflow.update
    def complete_step(self, done: StepDone) -> StepAck:
        """Like ``step_done``, but the caller learns at once if the step was not awaited."""
        return StepAck(step=done.step, accepted=self._accept_step(done))

    @complete_step.validator
    def _validate_step(self, done: StepDone) -> None:
        if self._waiting_for is None:
            raise ValueError(f"no step is awaited now (current step: {self._step})")
        if done.step != self._waiting_for:
            raise ValueError(f"the awaited step is {self._waiting_for!r}, not {done.step!r}")

    @workflow.signal
    def approve(self, approval: Approval) -> None:
        self._approval = approval

    @workflow.signal
    def abort(self, req: AbortRequest) -> None:
        if self._abort is None:
            self._abort = req

    @workflow.query
    def status(self) -> RemediationStatus:
        return RemediationStatus(
            workflow_id=workflow.info().workflow_id, port=self._port, step=self._step,
            state=self._state, waiting_for=self._waiting_for, rung=self._rung,
            shadow=self._dry, isolated=self._isolated, fenced=self._fenced,
            ticket=self._ticket, budget_held=self._granted, detections=list(self._detections),
            history=list(self._history), evidence=list(self._evidence))

    @workflow.query
    def current_step(self) -> str:
        return self._step

    @workflow.query
    def history(self) -> list[HistoryEntry]:
        return list(self._history)

    @workflow.query
    def evidence(self) -> list[EvidenceItem]:
        return list(self._evidence)

    # --- helpers ---------------------------------------------------------------------------

    def _now_ms(self) -> int:
        return int(workflow.now().timestamp() * 1000)

    async def _record(self, step: str, outcome: Outcome, *, actor: str = "fabricwatch",
                      note: str | None = None, before: dict[str, Any] | None = None,
                      after: dict[str, Any] | None = None) -> None:
        if self._dry and outcome == "done":
            outcome = "dry_run"
        info = workflow.info()
        self._seq += 1
        ts = self._now_ms()
        self._history.append(HistoryEntry(ts=ts, step=step, outcome=outcome, actor=actor,
                                          note=note))
        # A local activity: a short idempotent ledger write (deterministic id) needs no task
        # queue round trip; halving the server round trips doubled a burst's throughput
        # (benchmarks/runbooks_bench.py). Re-run on replay after a crash, deduplicated by id.
        await workflow.execute_local_activity_method(
            FabricActivities.record_action,
            RecordInput(record_id=f"{info.workflow_id}/{info.run_id}/{self._seq}",
                        workflow_id=info.workflow_id, port=self._port, ts=ts, step=step,
                        outcome=outcome, actor=actor, note=note, before=before, after=after,
                        dry_run=self._dry),
            start_to_close_timeout=_s(self._cfg.timeouts.record), retry_policy=FOREVER)

    async def _flush_joined(self) -> None:
        while self._unrecorded:
            det = self._unrecorded.pop(0)
            await self._record("detection", "done", note=f"{det.detection} {det.id} joined "
                                                         f"(episode {det.episode})")

    def _check_abort(self) -> None:
        if self._abort is not None:
            raise _Aborted(self._abort)

    async def _wait(self, cond: Callable[[], bool], timeout_s: float | None) -> bool:
        """Wait for ``cond`` (or an abort, or a joined detection to record); False on timeout."""
        deadline = None if timeout_s is None else workflow.now() + _s(timeout_s)
        while True:
            await self._flush_joined()
            self._check_abort()
            if cond():
                return True
            remaining = None
            if deadline is not None:
                remaining = (deadline - workflow.now()).total_seconds()
                if remaining <= 0:
                    return False
            try:
                await workflow.wait_condition(
                    lambda: cond() or self._abort is not None or bool(self._unrecorded),
                    timeout=None if remaining is None else _s(remaining))
            except TimeoutError:
                return False

    async def _control(self, method: Any, step: str) -> ControlResult:
        result: ControlResult = await workflow.execute_activity_method(
            method, ControlInput(workflow_id=workflow.info().workflow_id, port=self._port,
                                 dry_run=self._dry),
            start_to_close_timeout=_s(self._cfg.timeouts.controller),
            heartbeat_timeout=(_s(self._cfg.timeouts.controller_heartbeat)
                               if self._cfg.timeouts.controller_heartbeat else None),
            retry_policy=CONTROLLER)
        return result

    async def _ticket_op(self, op: Literal["open", "update", "close", "page"], summary: str,
                         details: dict[str, Any] | None = None) -> str | None:
        res = await workflow.execute_activity_method(
            FabricActivities.ticket,
            TicketInput(workflow_id=workflow.info().workflow_id, port=self._port, op=op,
                        summary=summary, details=details or {}, dry_run=self._dry),
            start_to_close_timeout=_s(self._cfg.timeouts.ticket), retry_policy=TICKET)
        return res.ticket_id

    # --- the runbook ---------------------------------------------------------------------

    @workflow.run
    async def run(self, inp: RemediationInput) -> RemediationResult:
        await self._record("detection", "done", note=(
            f"{inp.detection.detection} ({inp.detection.severity}) {inp.detection.id}; "
            f"runbook {'in shadow mode' if self._dry else 'started'}"))
        try:
            await self._capture_evidence()
            self._check_abort()
            if not await self._acquire_budget():
                return await self._finish("shadow_done" if self._dry else "expired")
            self._check_abort()
            await self._isolate()
            self._check_abort()
            await self._open_ticket()
            self._check_abort()
            if self._dry:
                return await self._shadow_rest()
            fixed_by = await self._ladder()
            await self._return_to_service(fixed_by)
            return await self._finish("returned_to_service", fixed_by)
        except _Aborted as aborted:
            await self._rollback(aborted.request)
            return await self._finish("aborted")
        except asyncio.CancelledError:
            # A cancel from Temporal (UI, `temporal workflow cancel`) must not leave the
            # port isolated and the budget held: roll back like an abort, then end cancelled.
            await self._rollback(AbortRequest(actor="temporal", reason="workflow cancelled"))
            await self._finish("aborted")
            raise

    async def _finish(self, outcome: str, fixed_by: str | None = None) -> RemediationResult:
        self._state = outcome
        self._waiting_for = None
        await self._flush_joined()
        await self._record("outcome", "done", note=outcome + (f" after {fixed_by}"
                                                              if fixed_by else ""))
        return RemediationResult(outcome=outcome, fixed_by=fixed_by, history=list(self._history))

    async def _capture_evidence(self) -> None:
        self._step = "evidence"
        try:
            res = await workflow.execute_activity_method(
                FabricActivities.capture_evidence,
                EvidenceInput(workflow_id=workflow.info().workflow_id, port=self._port,
                              ts=self._now_ms()),
                start_to_close_timeout=_s(self._cfg.timeouts.evidence),
                heartbeat_timeout=_s(self._cfg.timeouts.evidence_heartbeat), retry_policy=FEW)
        except ActivityError as exc:
            # Evidence is best effort: a broken tool must not keep a flapping port in service.
            await self._record("evidence", "failed", note=str(exc.cause or exc)[:500])
            return
        self._evidence = list(res.items)
        # Evidence is read-only, so it is captured for real even in shadow mode.
        tools = ", ".join(f"{i.tool}={i.exit_code}" for i in res.items)
        await self._record("evidence", "done" if not self._dry else "dry_run",
                           note=f"captured {tools}" if tools else "no tools")

    async def _acquire(self, force_by: str | None) -> GrantResult:
        wid = workflow.info().workflow_id
        result: GrantResult = await workflow.execute_activity_method(
            BudgetActivities.acquire,
            AcquireInput(fabric=self._port.fabric, su=self._port.su, holder=wid,
                         port_key=self._port.key, su_limit=self._cfg.su_limit,
                         fabric_limit=self._cfg.fabric_limit, ts=self._now_ms(),
                         force_by=force_by, probe=self._dry),
            start_to_close_timeout=_s(self._cfg.timeouts.budget), retry_policy=FOREVER)
        return result

    async def _acquire_budget(self) -> bool:
        """True when isolation may go ahead; False when the approval wait expired."""
        self._step = "budget"
        grant = await self._acquire(None)
        if grant.granted:
            self._granted = not self._dry
            await self._record("budget", "done", after={"in_use": grant.in_use,
                                                        "limit": grant.limit},
                               note=grant.reason or None)
            return True
        await self._record("budget", "refused", note=grant.reason,
                           after={"in_use": grant.in_use, "limit": grant.limit})
        self._step = "breaker"
        await workflow.execute_activity_method(
            FabricActivities.open_breaker,
            BreakerInput(workflow_id=workflow.info().workflow_id, port=self._port,
                         detection=self._inp.detection, reason=grant.reason, ts=self._now_ms(),
                         dry_run=self._dry),
            start_to_close_timeout=_s(self._cfg.timeouts.ticket), retry_policy=TICKET)
        await self._record("breaker", "done", note=f"breaker_open published, paged: "
                                                   f"{grant.reason}")
        if self._dry:
            # Shadow mode records that a human would have been asked, and stops there.
            return False
        self._state = "awaiting_approval"
        self._waiting_for = "approve"
        self._approval = None
        approved = await self._wait(lambda: self._approval is not None,
                                    self._cfg.approval_timeout_s)
        self._waiting_for = None
        self._state = "running"
        if not approved or self._approval is None:
            await self._record("breaker", "failed", note="no approval within "
                               f"{self._cfg.approval_timeout_s:.0f} s; port left in service")
            return False
        approval = self._approval
        self._approval = None
        await self._record("approve", "done", actor=approval.actor, note=approval.note)
        grant = await self._acquire(approval.actor)
        self._granted = True
        await self._record("budget", "done", actor=approval.actor,
                           note=f"granted past the limit: {grant.reason}",
                           after={"in_use": grant.in_use, "limit": grant.limit})
        return True

    async def _isolate(self) -> None:
        self._step = "isolate"
        res = await self._control(FabricActivities.isolate_port, "isolate")
        self._isolated = not self._dry
        await self._record("isolate", "done", note=res.detail, before=res.before,
                           after=res.after)
        self._step = "fence"
        fence = await self._control(FabricActivities.fence_node, "fence")
        # `node is not None` keeps histories from before `skipped` existed replaying the same
        self._fenced = not self._dry and self._port.node is not None and not fence.skipped
        await self._record("fence", "skipped" if fence.skipped else "done", note=fence.detail,
                           after=fence.after)

    def _ticket_details(self) -> dict[str, Any]:
        p = self._port
        return {
            "cable": {"a": f"{p.device}:{p.port}",
                      "b": f"{p.peer_device}:{p.peer_port}" if p.peer_device else None},
            "su": p.su, "rail": p.rail, "node": p.node,
            "detections": [d.model_dump(mode="json") for d in self._detections],
            "evidence": [e.model_dump(mode="json") for e in self._evidence],
            "ladder": list(self._cfg.ladder),
        }

    async def _open_ticket(self) -> None:
        self._step = "ticket"
        det = self._inp.detection
        self._ticket = await self._ticket_op(
            "open", f"{det.detection} on {self._port.key} ({self._port.fabric}, SU "
                    f"{self._port.su}, rail {self._port.rail}): port isolated",
            self._ticket_details())
        await self._record("ticket", "done", note=self._ticket)

    async def _shadow_rest(self) -> RemediationResult:
        """Shadow mode after the ticket: record the ladder and checks it would walk."""
        for rung in self._cfg.ladder:
            await self._record(f"ladder:{rung}", "dry_run", note="would wait for a technician")
        for check in self._cfg.checks:
            await self._record(f"check:{check}", "dry_run", note="would run")
        await self._record("return", "dry_run", note="would un-isolate, unfence, close the "
                                                     "ticket and release the budget")
        return await self._finish("shadow_done")

    async def _await_step(self, step: str) -> StepDone:
        """Wait for the technician, with reminders and one escalation."""
        self._waiting_for = step
        self._done = None
        started = workflow.now()
        escalated = False
        while True:
            if await self._wait(lambda: self._done is not None, self._cfg.step_reminder_s):
                break
            waited = (workflow.now() - started).total_seconds()
            if not escalated and waited >= self._cfg.step_escalation_s:
                escalated = True
                await self._ticket_op("page", f"{step} on {self._port.key} not done after "
                                              f"{waited / 3600:.1f} h: escalated")
                await self._record(step, "skipped", note=f"escalated after {waited:.0f} s")
            else:
                # the elapsed time makes each reminder distinct (the webhook deduplicates
                # identical requests as retries)
                await self._ticket_op("update", f"reminder: {step} on {self._port.key} "
                                                f"awaits a technician for {waited / 3600:.1f} h")
                await self._record(step, "skipped", note=f"reminder after {waited:.0f} s")
        self._waiting_for = None
        done = self._done
        assert done is not None  # noqa: S101 - the wait above returns only once it is set
        self._done = None
        return done

    async def _ladder(self) -> str:
        """Walk the ladder until the checks pass; returns the rung that fixed the port."""
        ladder = self._cfg.ladder
        for index, rung in enumerate(ladder):
            self._rung = rung
            self._step = f"ladder:{rung}"
            self._state = "awaiting_technician"
            done = await self._await_step(rung)
            self._state = "running"
            repair = await workflow.execute_activity_method(
                FabricActivities.repair_step,
                RepairInput(workflow_id=workflow.info().workflow_id, port=self._port, rung=rung,
                            rung_index=index),
                start_to_close_timeout=_s(self._cfg.timeouts.controller),
                retry_policy=CONTROLLER)
            await self._record(f"ladder:{rung}", "done", actor=done.actor, note=done.note,
                               after={"controller_says_fixed": repair.fixed})
            self._check_abort()
            if await self._checks():
                return rung
            if index + 1 < len(ladder):
                await self._ticket_op("update", f"checks failed after {rung}; next: "
                                                f"{ladder[index + 1]}")
        return await self._escalate()

    async def _escalate(self) -> str:
        """Every rung done and the checks still fail: a human fixes it and approves (the
        checks run again) or aborts. Paged again after every failed attempt."""
        while True:
            self._rung = None
            self._step = "escalated"
            self._state = "escalated"
            await self._ticket_op("page", f"{self._port.key}: every ladder rung done and the "
                                          f"checks still fail; a human must decide",
                                  self._ticket_details())
            await self._record("escalate", "done", note="ladder exhausted; paged")
            self._waiting_for = "approve"
            self._approval = None
            await self._wait(lambda: self._approval is not None, None)
            self._waiting_for = None
            approval = self._approval
            assert approval is not None  # noqa: S101 - _wait(None) returns only when set
            self._approval = None
            await self._record("approve", "done", actor=approval.actor, note=approval.note)
            self._step = "escalated:checks"
            self._state = "running"
            if await self._checks():
                return "escalation"

    async def _checks(self) -> bool:
        """The return-to-service checks, in policy order; False at the first failure."""
        wid = workflow.info().workflow_id
        for check in self._cfg.checks:
            self._check_abort()
            self._step = f"check:{check}"
            since = self._now_ms()
            if check.startswith("counters-clean"):
                await self._control(FabricActivities.reset_counters, "reset")
                since = self._now_ms()
                self._state = "waiting_clean_counters"
                # A durable timer: survives worker and server restarts; abort cuts it short.
                await self._wait(lambda: False, self._cfg.clean_counters_wait_s)
                self._state = "running"
            try:
                res: CheckResult = await workflow.execute_activity_method(
                    FabricActivities.run_check,
                    CheckInput(workflow_id=wid, port=self._port, check=check, since_ms=since),
                    start_to_close_timeout=_s(self._cfg.timeouts.check),
                    heartbeat_timeout=_s(self._cfg.timeouts.check_heartbeat), retry_policy=FEW)
            except ActivityError as exc:
                res = CheckResult(check=check, passed=False, detail=str(exc.cause or exc)[:500])
            await self._record(f"check:{check}", "done" if res.passed else "failed",
                               note=res.detail, after=res.measured or None)
            if not res.passed:
                return False
        return True

    async def _return_to_service(self, fixed_by: str) -> None:
        self._step = "return"
        self._rung = None
        await self._undo(note=f"fixed by {fixed_by}")
        await self._record("return", "done", note=f"returned to service after {fixed_by}")

    async def _undo(self, note: str) -> None:
        """Un-isolate, unfence, close the ticket, release the budget: in that order, so the
        budget is never freed while the port is still out."""
        if self._isolated:
            res = await self._control(FabricActivities.unisolate_port, "unisolate")
            self._isolated = False
            await self._record("unisolate", "done", note=res.detail, before=res.before,
                               after=res.after)
        if self._fenced:
            res = await self._control(FabricActivities.unfence_node, "unfence")
            self._fenced = False
            await self._record("unfence", "done", note=res.detail)
        if self._ticket is not None:
            await self._ticket_op("close", f"{self._port.key}: {note}")
            await self._record("ticket", "done", note=f"closed: {note}")
        if self._granted:
            await workflow.execute_activity_method(
                BudgetActivities.release,
                ReleaseInput(fabric=self._port.fabric, su=self._port.su,
                             holder=workflow.info().workflow_id),
                start_to_close_timeout=_s(self._cfg.timeouts.budget), retry_policy=FOREVER)
            self._granted = False
            await self._record("budget", "done", note="released")

    async def _rollback(self, req: AbortRequest) -> None:
        self._step = "abort"
        self._waiting_for = None
        await self._record("abort", "done", actor=req.actor, note=req.reason)
        try:
            await self._undo(note=f"aborted by {req.actor}")
        except ActivityError as exc:
            # The port could not be returned: say so loudly, keep the budget held.
            await self._record("abort", "failed", note=f"rollback incomplete: {exc.cause}")
            raise ApplicationError(f"rollback of {self._port.key} incomplete") from exc
