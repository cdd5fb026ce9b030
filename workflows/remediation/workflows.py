"""``PortRemediation``: the durable runbook of one cable, from evidence to return to service.

Workflow id ``remediate/{fabric}/{end_a}~{end_b}`` (the two ``device:port`` ends sorted;
``remediate/{fabric}/{device}:{port}`` when the peer is unknown); a detection from either end
is signalled into the running workflow (signal-with-start) instead of starting another. The
input's ``port`` is the end it isolates (the switch port of a host link, the leaf end of a
leaf-spine link: ``isolateEnd`` in the policy), ``peer`` the other end.

1. evidence: perfquery / mlxlink / cable info into the ledger before anything changes;
2. budget: the SU's and the fabric's ``IsolationBudget`` grant, or the breaker opens: a
   ``breaker_open`` detection, the SU's breaker incident joined (it pages once for the SU;
   patch ``incident-alerts``, before it a page per runbook), and a wait for a human's
   approve or abort (the incident's reaches every member);
3. isolate the port, label and taint the node's rail;
4. open a ticket with both cable ends, the evidence and the detection;
5. the repair ladder: each rung waits for a technician's ``step_done`` (reminders, then an
   escalation), then the return-to-service checks (ib_write_bw, NCCL, a durable clean-counter
   wait); a failed check moves to the next rung; after the last, a human decides;
6. return to service: un-isolate, remove label and taint, close the ticket, release the budget.

Every step is an ActionRecord in the ledger. An abort at any point rolls back what was done,
in the safe order (port back before the budget is released). So does the signal
``explained``, once every detection of the runbook is an incident's after all (the
correlator's ``<id>/explained``, delivered by the dispatcher): a flap that counted a reboot's
down, read before the reboot's other reports, stands down (actor ``fabricwatch``). In
shadow mode everything is decided and recorded (outcome ``dry_run``) and nothing changes.

Since the ``cable-runbook`` patch (``workflow.patched``: runs started before it replay and
finish the old way):

* ownership: the port's state is read before isolating; a port found isolated is recorded as
  found so, counts against the budget, and is returned to service only after a human's
  approve hands it over; a node's rail is unfenced only when no other open runbook holds it;
* a step that cannot complete (rejected, retries exhausted) moves the runbook to
  ``needs_human``: the port's state read back, a page, the budget released only if the port
  is not isolated; approve retries the step, abort rolls back (and a rollback that fails
  ends ``handed_to_human``, never a failed workflow); since patch
  ``retry-grant-within-limit``, a retried isolate whose slot was released asks the budget
  again within the limit, and a full SU goes step 2's breaker way (no approve: aborted);
* a cable returned to service ``repeatNextRungAfter`` times within ``repeatWindow`` starts at
  the rung after the one that last fixed it; ``repeatHumanAfter`` times and a human decides
  before anything is isolated;
* a new detection on the cable while its repair is checked (or soaked) fails that rung at once.

Deterministic: time is ``workflow.now()``, configuration arrives in the input, every side
effect is an activity.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Literal

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from workflows.budget.activities import BudgetActivities
    from workflows.budget.models import AcquireInput, GrantResult, ReleaseInput
    from workflows.incident.activities import IncidentActivities
    from workflows.incident.models import JoinInput
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
        Explained,
        HistoryEntry,
        PortState,
        RailInput,
        RailResult,
        RecordInput,
        RemediationInput,
        RemediationResult,
        RemediationStatus,
        RepairInput,
        RepairResult,
        StepAck,
        StepDone,
        TicketInput,
        evidence_outcome,
    )
    from workflows.remediation.probation import FAILED_NOTE, HOLD_NOTE, PASSED_NOTE, check_kind

Outcome = Literal["done", "refused", "failed", "skipped", "dry_run"]

# The one patch of the cable runbook (issue 18's behaviour); see the module docstring.
CABLE_PATCH = "cable-runbook"
# Return to service under traffic (probation); taken once at the start, after CABLE_PATCH,
# and only by a run whose input carries a probation config.
PROBATION_PATCH = "probation"
# Since this patch a budget refusal joins the SU's breaker incident (one page per SU, not
# one per refused port), and a runbook that paged resolves its alert when it ends.
INCIDENT_PATCH = "incident-alerts"
# Since this patch a human's approve of a failed isolate asks the budget as it is now: the
# SU may have filled while the port, read back in service, held no slot. A full SU goes the
# breaker's way (breaker_open, its own approve to pass the limit) instead of a silent force.
RETRY_GRANT_PATCH = "retry-grant-within-limit"

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
        self._paged = False  # a page went out: its alert is resolved when the runbook ends
        self._incident: str | None = None  # the breaker incident it joined
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
        self._v2 = False  # the cable-runbook patch applies (set first thing in run)
        self._peer = inp.peer
        self._owned = False  # fabricwatch changed the port (False: found isolated)
        self._found: str | None = None
        self._needs: str | None = None
        self._port_state: dict[str, Any] | None = None
        self._rail_held = False
        self._start_rung = 0
        self._rolling_back = False
        self._left_isolated = False
        self._serials: dict[str, str] = {}
        self._prior_episodes = {e for r in inp.prior for e in r.episodes}
        self._v3 = False  # the probation patch applies (set first thing in run)
        self._measurements: list[dict[str, Any]] = []
        self._explained: dict[str, str] = {}  # detection id -> the incident that explains it

    # --- signals, updates, queries ------------------------------------------------------

    @workflow.signal
    def detection(self, det: DetectionRef) -> None:
        """A further detection of this cable (either end) joins the running runbook."""
        if det.episode in self._prior_episodes:
            return  # an episode an earlier runbook of the cable already took care of
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

    @workflow.signal
    def explained(self, note: Explained) -> None:
        """One of its detections was an incident's (``Explained``). Once every detection it
        has is so explained, the runbook stands down as an abort does: an isolation it made
        is undone, the budget released, the ticket closed. A detection of its own, not
        explained, keeps it going."""
        self._explained[note.detection] = note.incident
        if self._abort is None and all(d.id in self._explained for d in self._detections):
            incidents = sorted(set(self._explained.values()))
            self._abort = AbortRequest(
                actor="fabricwatch", reason=f"explained by incident {', '.join(incidents)}: "
                "its downs were that incident's, read before its other reports")

    @workflow.query
    def status(self) -> RemediationStatus:
        return RemediationStatus(
            workflow_id=workflow.info().workflow_id, port=self._port, step=self._step,
            state=self._state, waiting_for=self._waiting_for, rung=self._rung,
            shadow=self._dry, isolated=self._isolated, fenced=self._fenced,
            ticket=self._ticket, budget_held=self._granted, detections=list(self._detections),
            history=list(self._history), evidence=list(self._evidence), peer=self._peer,
            cable=self._cable(), isolated_end=self._port.key, owned=self._owned,
            found_isolated=self._found, needs_human=self._needs, port_state=self._port_state,
            waived=dict(self._cfg.probation.waived) if self._v3 and self._cfg.probation else {},
            measurements=list(self._measurements), incident=self._incident)

    def _cable(self) -> list[str]:
        ends = [self._port.key] + ([self._peer.key] if self._peer is not None else [])
        return sorted(ends)

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
        async def once() -> ControlResult:
            result: ControlResult = await workflow.execute_activity_method(
                method, ControlInput(workflow_id=workflow.info().workflow_id, port=self._port,
                                     dry_run=self._dry),
                start_to_close_timeout=_s(self._cfg.timeouts.controller),
                heartbeat_timeout=self._controller_heartbeat(),
                retry_policy=self._controller_retry())
            return result
        done: ControlResult = await self._guarded(step, once)
        return done

    def _controller_heartbeat(self) -> timedelta | None:
        # short: a worker killed mid-call is noticed in seconds (the activity heartbeats)
        beat = self._cfg.timeouts.controller_heartbeat
        return _s(beat) if beat else None

    def _controller_retry(self) -> RetryPolicy:
        attempts = self._cfg.timeouts.controller_attempts
        if attempts == CONTROLLER.maximum_attempts:
            return CONTROLLER
        return dataclasses.replace(CONTROLLER, maximum_attempts=attempts)

    async def _guarded(self, step: str, call: Callable[[], Any]) -> Any:
        """Run a step; one that cannot complete goes to a human (approve: try again)."""
        while True:
            try:
                return await call()
            except ActivityError as exc:
                if not self._v2 or self._rolling_back:
                    raise
                await self._needs_human(step, str(exc.cause or exc)[:500])

    async def _read_state(self) -> PortState:
        state: PortState = await workflow.execute_activity_method(
            FabricActivities.port_state,
            ControlInput(workflow_id=workflow.info().workflow_id, port=self._port),
            start_to_close_timeout=_s(self._cfg.timeouts.controller),
            heartbeat_timeout=self._controller_heartbeat(), retry_policy=FEW)
        self._port_state = state.model_dump(mode="json")
        return state

    async def _release_budget(self, note: str) -> None:
        await workflow.execute_activity_method(
            BudgetActivities.release,
            ReleaseInput(fabric=self._port.fabric, su=self._port.su,
                         holder=workflow.info().workflow_id),
            start_to_close_timeout=_s(self._cfg.timeouts.budget), retry_policy=FOREVER)
        self._granted = False
        await self._record("budget", "done", note=note)

    async def _account(self, state: PortState) -> None:
        """The budget, truthfully: a port not isolated holds no slot; isolated (or unreadable:
        fail closed) keeps it."""
        if state.isolated is False:
            self._isolated = False
            if self._granted:
                await self._release_budget("released: the port is not isolated")

    async def _needs_human(self, step: str, why: str) -> None:
        """Stop, read the port back, account the budget, page, and wait: approve tries the
        step again, abort rolls back."""
        self._step = f"needs_human:{step}"
        self._needs = f"{step}: {why}"
        state = await self._read_state()
        if state.isolated and step == "isolate":
            # it was in service before this runbook tried: the isolation is ours
            self._isolated, self._owned = True, True
        await self._record(step, "failed", note=f"needs a human: {why}"[:500],
                           after=state.model_dump(mode="json"))
        await self._account(state)
        # the state says "needs_human" once the port is read and the budget accounted
        self._state = "needs_human"
        self._waiting_for = "approve"
        self._approval = None
        await self._ticket_op("page", f"{self._cable_name()}: {step} could not complete; a human "
                                      f"must act (port {state.detail or 'state unknown'})",
                              {**self._ticket_details(), "failed_step": step, "why": why,
                               "port_state": state.model_dump(mode="json"),
                               "approve": "retries the step", "abort": "rolls back"})
        await self._wait(lambda: self._approval is not None, None)
        self._waiting_for = None
        approval = self._approval
        assert approval is not None  # noqa: S101 - _wait(None) returns only when set
        self._approval = None
        self._needs = None
        self._state = "running"
        await self._record("approve", "done", actor=approval.actor,
                           note=f"retry {step}" + (f": {approval.note}" if approval.note else ""))
        if step == "isolate" and not self._granted and not self._dry:
            if workflow.patched(RETRY_GRANT_PATCH):
                # approve retries the step; it does not pass the limit (the page said so)
                if not await self._acquire_budget():
                    raise _Aborted(AbortRequest(
                        actor="fabricwatch", reason="no budget for the retried isolate and no "
                                                    "approval to pass the limit"))
                return
            grant = await self._acquire(approval.actor)
            self._granted = True
            await self._record("budget", "done", actor=approval.actor,
                               note=f"granted again for the retry: {grant.reason}")

    def _cable_name(self) -> str:
        return " ~ ".join(self._cable())

    async def _ticket_op(self, op: Literal["open", "update", "close", "page", "resolve"],
                         summary: str, details: dict[str, Any] | None = None) -> str | None:
        if op == "page":
            self._paged = True
        try:
            res = await workflow.execute_activity_method(
                FabricActivities.ticket,
                TicketInput(workflow_id=workflow.info().workflow_id, port=self._port, op=op,
                            summary=summary, details=details or {}, dry_run=self._dry),
                start_to_close_timeout=_s(self._cfg.timeouts.ticket), retry_policy=TICKET)
        except ActivityError as exc:
            if not self._v2:
                raise
            # a ticket system that refuses must not stop isolation or a return to service
            await self._record(f"ticket:{op}", "failed", note=str(exc.cause or exc)[:500])
            return None
        return res.ticket_id

    # --- the runbook ---------------------------------------------------------------------

    @workflow.run
    async def run(self, inp: RemediationInput) -> RemediationResult:
        self._v2 = workflow.patched(CABLE_PATCH)
        self._v3 = (self._v2 and inp.config.probation is not None
                    and workflow.patched(PROBATION_PATCH))
        await self._record("detection", "done", note=(
            f"{inp.detection.detection} ({inp.detection.severity}) {inp.detection.id}; "
            f"runbook {'in shadow mode' if self._dry else 'started'}"
            + (f"; cable {self._cable_name()}, isolating {self._port.key}"
               if self._v2 and self._peer is not None else "")))
        try:
            await self._capture_evidence()
            self._check_abort()
            if self._v2:
                await self._repeat_offender()
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
            return await self._finish(await self._rollback(aborted.request))
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
        if self._paged and workflow.patched(INCIDENT_PATCH):
            await self._ticket_op("resolve", f"{self._cable_name()}: {outcome}",
                                  {"outcome": outcome})
        await self._record("outcome", "done", note=outcome + (f" after {fixed_by}"
                                                              if fixed_by else ""))
        episodes = list(dict.fromkeys(d.episode for d in self._detections))
        return RemediationResult(outcome=outcome, fixed_by=fixed_by, history=list(self._history),
                                 episodes=episodes, cable=self._cable(),
                                 isolated_end=self._port.key, closed_ts=self._now_ms(),
                                 still_isolated=self._isolated, prior=list(self._inp.prior))

    async def _repeat_offender(self) -> None:
        """A cable that keeps coming back: start further down the ladder, or ask a human."""
        now = self._now_ms()
        window_ms = int(self._cfg.repeat_window_s * 1000)
        returns = [r for r in self._inp.prior if r.outcome == "returned_to_service"
                   and now - r.closed_ts <= window_ms]
        n = len(returns)
        ladder = self._cfg.ladder
        if n < self._cfg.repeat_next_rung_after:
            return
        last = returns[-1].fixed_by
        self._start_rung = min(ladder.index(last) + 1 if last in ladder else len(ladder) - 1,
                               len(ladder) - 1)
        days = self._cfg.repeat_window_s / 86400
        await self._record("history", "done", note=(
            f"returned to service {n} time(s) in {days:.0f} d (last fixed by {last}); "
            f"starts at {ladder[self._start_rung]}"))
        if n < self._cfg.repeat_human_after or self._dry:
            return
        self._step = "repeat_offender"
        self._state = "needs_human"
        self._waiting_for = "approve"
        self._approval = None
        self._needs = (f"returned to service {n} times in {days:.0f} d; a human decides "
                       f"before it is isolated and re-admitted again")
        await self._ticket_op("page", f"{self._cable_name()}: {self._needs}",
                              {**self._ticket_details(), "approve": "isolate and repair again",
                               "abort": "leave it to a human"})
        await self._record("repeat_offender", "done", note=self._needs)
        await self._wait(lambda: self._approval is not None, None)
        self._waiting_for = None
        approval = self._approval
        assert approval is not None  # noqa: S101 - _wait(None) returns only when set
        self._approval = None
        self._needs = None
        self._state = "running"
        await self._record("approve", "done", actor=approval.actor, note=approval.note)

    async def _capture_evidence(self) -> None:
        self._step = "evidence"
        try:
            res = await workflow.execute_activity_method(
                FabricActivities.capture_evidence,
                EvidenceInput(workflow_id=workflow.info().workflow_id, port=self._port,
                              ts=self._now_ms(), peer=self._peer if self._v2 else None),
                start_to_close_timeout=_s(self._cfg.timeouts.evidence),
                heartbeat_timeout=_s(self._cfg.timeouts.evidence_heartbeat), retry_policy=FEW,
                task_queue=self._cfg.evidence_task_queue)
        except ActivityError as exc:
            # Evidence is best effort: a broken tool must not keep a flapping port in service.
            await self._record("evidence", "failed", note=str(exc.cause or exc)[:500])
            return
        self._evidence = list(res.items)
        # Evidence is read-only, so it is captured for real even in shadow mode. A tool that
        # did not run (not installed, timed out: no exit code) captured nothing, and the step
        # says so: "done" only when every tool ran.
        outcome, note = evidence_outcome(res.items)
        await self._record("evidence", "dry_run" if self._dry else outcome, note=note)

    async def _acquire(self, force_by: str | None) -> GrantResult:
        wid = workflow.info().workflow_id
        result: GrantResult = await workflow.execute_activity_method(
            BudgetActivities.acquire,
            AcquireInput(fabric=self._port.fabric, su=self._port.su, holder=wid,
                         port_key=self._port.key, su_limit=self._cfg.su_limit,
                         fabric_limit=self._cfg.fabric_limit, limits_ts=self._cfg.limits_ts,
                         ts=self._now_ms(),
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
        join = not self._dry and workflow.patched(INCIDENT_PATCH)
        await workflow.execute_activity_method(
            FabricActivities.open_breaker,
            BreakerInput(workflow_id=workflow.info().workflow_id, port=self._port,
                         detection=self._inp.detection, reason=grant.reason, ts=self._now_ms(),
                         dry_run=self._dry, page=not join),
            start_to_close_timeout=_s(self._cfg.timeouts.ticket), retry_policy=TICKET)
        if join:
            # the SU's breaker incident pages once for all its refused ports; its approve /
            # abort reaches this runbook as the signals below wait for
            joined = await workflow.execute_activity_method(
                IncidentActivities.join,
                JoinInput(fabric=self._port.fabric, su=self._port.su, member=self._port.key,
                          runbook=workflow.info().workflow_id, reason=grant.reason,
                          ts=self._now_ms()),
                start_to_close_timeout=_s(self._cfg.timeouts.budget), retry_policy=FOREVER)
            self._incident = joined.workflow_id
            await self._record("breaker", "done", note=f"breaker_open published, joined "
                                                       f"{joined.workflow_id}: {grant.reason}")
        else:
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
        if self._v2 and not self._dry:
            # Read first, durably: a retry after a crash that finds the port isolated is this
            # runbook's own isolation; a port isolated before we acted is someone else's.
            before = await self._read_state()
            if before.isolated:
                self._isolated, self._owned = True, False
                self._found = before.by or f"isolated before fabricwatch acted ({before.controller})"
                await self._record("isolate", "skipped", note=(
                    f"found already isolated ({self._found}); counted, and not returned to "
                    f"service without a human's approve"), before=before.model_dump(mode="json"))
            else:
                res = await self._control(FabricActivities.isolate_port, "isolate")
                if not self._isolated:  # (needs_human may have found it isolated already)
                    self._isolated, self._owned = True, True
                await self._record("isolate", "done", note=res.detail, before=res.before,
                                   after=res.after)
        else:
            res = await self._control(FabricActivities.isolate_port, "isolate")
            self._isolated = not self._dry
            self._owned = self._isolated
            await self._record("isolate", "done", note=res.detail, before=res.before,
                               after=res.after)
        self._step = "fence"
        fence = await self._control(FabricActivities.fence_node, "fence")
        if self._v2 and not self._dry and not fence.skipped and self._port.node is not None:
            # this runbook holds the rail: another runbook's return leaves the fence alone
            await self._rail(BudgetActivities.rail_hold)
            self._rail_held = True
        # `node is not None` keeps histories from before `skipped` existed replaying the same
        self._fenced = not self._dry and self._port.node is not None and not fence.skipped
        await self._record("fence", "skipped" if fence.skipped else "done", note=fence.detail,
                           after=fence.after)

    async def _rail(self, method: Any) -> RailResult:
        assert self._port.node is not None  # noqa: S101 - callers check
        res: RailResult = await workflow.execute_activity_method(
            method, RailInput(fabric=self._port.fabric, node=self._port.node,
                              rail=self._port.rail, holder=workflow.info().workflow_id),
            start_to_close_timeout=_s(self._cfg.timeouts.budget), retry_policy=FOREVER)
        return res

    def _ticket_details(self) -> dict[str, Any]:
        p = self._port
        ends = [p] + ([self._peer] if self._peer is not None else [])
        last = self._inp.prior[-1] if self._inp.prior else None
        return {
            "cable": {"a": f"{p.device}:{p.port}",
                      "b": f"{p.peer_device}:{p.peer_port}" if p.peer_device else None},
            "isolated_end": p.key, "found_isolated": self._found,
            "ends": [{"end": e.key, "device": e.device, "port": e.port, "guid": e.guid,
                      "lid": e.lid, "node": e.node, "rail": e.rail, "su": e.su,
                      "serial": self._serials.get(e.key)} for e in ends],
            "su": p.su, "rail": p.rail, "node": p.node,
            # the error-rate history: every detection on either end, with its evidence
            "ber_history": [{"ts": d.ts, "end": d.end, "detection": d.detection,
                             "evidence": d.evidence} for d in self._detections],
            "last_change": None if last is None else {
                "ts": last.closed_ts, "outcome": last.outcome, "fixed_by": last.fixed_by},
            "prior_runs": [r.model_dump(mode="json") for r in self._inp.prior],
            "detections": [d.model_dump(mode="json") for d in self._detections],
            "evidence": [e.model_dump(mode="json") for e in self._evidence],
            "ladder": list(self._cfg.ladder),
        }

    async def _open_ticket(self) -> None:
        self._step = "ticket"
        det = self._inp.detection
        what = (f"found isolated ({self._found})" if self._found
                else f"{self._port.key} isolated")
        where = (f"cable {self._cable_name()}" if self._v2 and self._peer is not None
                 else self._port.key)
        self._ticket = await self._ticket_op(
            "open", f"{det.detection} on {where} ({self._port.fabric}, SU "
                    f"{self._port.su}, rail {self._port.rail}): {what}",
            self._ticket_details())
        await self._record("ticket", "done", note=self._ticket)

    async def _shadow_rest(self) -> RemediationResult:
        """Shadow mode after the ticket: record the ladder and checks it would walk."""
        for rung in self._cfg.ladder:
            await self._record(f"ladder:{rung}", "dry_run", note="would wait for a technician")
        waived = self._cfg.probation.waived if self._v3 and self._cfg.probation else {}
        if self._v3:
            await self._record("probation", "dry_run", note=(
                "would re-enable the link with the rail fenced and probe it"))
        for check in self._cfg.checks:
            if check in waived:
                await self._record(f"check:{check}", "skipped", note=f"waived by "
                                                                     f"{waived[check]}")
            else:
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
            if index < self._start_rung:
                continue  # a repeat offender: this rung has already been tried on the cable
            self._rung = rung
            self._step = f"ladder:{rung}"
            self._state = "awaiting_technician"
            done = await self._await_step(rung)
            self._state = "running"

            async def repair_call(rung: str = rung, index: int = index) -> RepairResult:
                res: RepairResult = await workflow.execute_activity_method(
                    FabricActivities.repair_step,
                    RepairInput(workflow_id=workflow.info().workflow_id, port=self._port,
                                rung=rung, rung_index=index),
                    start_to_close_timeout=_s(self._cfg.timeouts.controller),
                    heartbeat_timeout=self._controller_heartbeat(),
                    retry_policy=self._controller_retry())
                return res
            repair = await self._guarded(f"ladder:{rung}", repair_call)
            after: dict[str, Any] = {"controller_says_fixed": repair.fixed}
            if done.new_port is not None:  # swap-switch-port: where the cable went
                after["new_port"] = done.new_port
            if done.new_serials:  # swap rungs: the new optics / cable
                after["new_serials"] = dict(done.new_serials)
                self._serials.update(done.new_serials)
            await self._record(f"ladder:{rung}", "done", actor=done.actor, note=done.note,
                               after=after)
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
        if self._v3:
            return await self._probation()
        wid = workflow.info().workflow_id
        mark = len(self._detections)

        def reflapped() -> bool:
            return self._v2 and len(self._detections) > mark

        for check in self._cfg.checks:
            self._check_abort()
            self._step = f"check:{check}"
            if reflapped():
                return await self._reflap(check, mark)
            since = self._now_ms()
            if check.startswith("counters-clean"):
                await self._control(FabricActivities.reset_counters, "reset")
                since = self._now_ms()
                self._state = "waiting_clean_counters"
                # A durable timer: survives worker and server restarts; abort cuts it short,
                # and so does a new detection on the cable (the repair did not hold).
                await self._wait(reflapped, self._cfg.clean_counters_wait_s)
                self._state = "running"
                if reflapped():
                    return await self._reflap(check, mark)
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
            if reflapped():
                return await self._reflap(check, mark)
        return True

    # --- probation: return to service under traffic -------------------------------------

    async def _probation(self) -> bool:
        """Re-enable the link with the node's rail still fenced, probe it against the pinned
        baselines, soak it under repeating probes, and judge its counters against the normal
        thresholds. False: it failed (isolated again, the ladder moves on). A check that
        cannot be judged isolates the link again and holds for a human; approve runs the
        probation again from the start."""
        while True:
            verdict = await self._probation_once()
            if verdict != "hold":
                return verdict == "passed"

    def _fence_note(self) -> str:
        if self._fenced:
            return f"rail {self._port.rail} of {self._port.node} stays fenced"
        return "no node fence behind this port"

    async def _probation_once(self) -> str:
        pc = self._cfg.probation
        assert pc is not None  # noqa: S101 - _v3 implies it
        mark = len(self._detections)

        def reflapped() -> bool:
            return len(self._detections) > mark

        if self._isolated and not self._owned:
            await self._handover()  # found isolated: it carries traffic only once handed over
        self._step = "probation"
        self._state = "probation"
        if self._isolated:
            res = await self._control(FabricActivities.unisolate_port, "unisolate")
            self._isolated = False
            # "unisolate" is the step the ledger's port state follows (006)
            await self._record("unisolate", "done", note=(
                f"re-enabled for probation; {self._fence_note()}: {res.detail}"),
                before=res.before, after=res.after)
        await self._record("probation", "done", note=(
            f"probation: the link carries probe traffic, {self._fence_note()}"))
        for check in self._cfg.checks:
            if check in pc.waived:
                await self._record(f"check:{check}", "skipped",
                                   note=f"waived by {pc.waived[check]}; not run")
        probes = [c for c in self._cfg.checks
                  if check_kind(c) != "counters" and c not in pc.waived]
        soaks = [c for c in self._cfg.checks
                 if check_kind(c) == "counters" and c not in pc.waived]
        verdict = await self._probe_round(probes, 0, mark)
        if verdict is not None:
            return verdict
        rnd = 1
        for check in soaks:
            self._check_abort()
            self._step = f"check:{check}"
            await self._control(FabricActivities.reset_counters, "reset")
            since = self._now_ms()
            until = since + int(self._cfg.clean_counters_wait_s * 1000)
            self._state = "probation_soak"
            # Durable timers: the probes repeat every probe interval so the link carries
            # traffic; a detection on the cable (the stream watches the link, now up) or a
            # failed probe ends the soak at once.
            while self._now_ms() < until:
                left = (until - self._now_ms()) / 1000
                await self._wait(reflapped, min(pc.probe_interval_s, left))
                if reflapped():
                    return await self._probation_failed(check, None, mark)
                if self._now_ms() >= until:
                    break
                verdict = await self._probe_round(probes, rnd, mark)
                rnd += 1
                if verdict is not None:
                    return verdict
            self._state = "probation"
            soaked = await self._run_check(check, since, until_ms=until, normal=pc.normal)
            await self._record(f"check:{check}", "done" if soaked.passed else "failed",
                               note=soaked.detail, after={**soaked.measured, "round": rnd})
            if soaked.unconfigured:
                return await self._probation_hold(check, soaked)
            if not soaked.passed:
                return await self._probation_failed(check, soaked, mark)
        if reflapped():
            return await self._probation_failed("probation", None, mark)
        self._state = "running"
        await self._record("probation", "done", note=(
            f"{PASSED_NOTE} {len(probes)} probe check(s) at >= {pc.slo_fraction:.0%} of the pinned "
            f"baseline, {rnd - 1} repeat round(s), counters below the normal thresholds"))
        return "passed"

    async def _run_check(self, check: str, since: int, *, slo: float | None = None,
                         until_ms: int | None = None,
                         normal: dict[str, float] | None = None) -> CheckResult:
        try:
            res: CheckResult = await workflow.execute_activity_method(
                FabricActivities.run_check,
                CheckInput(workflow_id=workflow.info().workflow_id, port=self._port,
                           check=check, since_ms=since, slo_fraction=slo,
                           cable=self._cable(), normal=dict(normal or {}), until_ms=until_ms),
                start_to_close_timeout=_s(self._cfg.timeouts.check),
                heartbeat_timeout=_s(self._cfg.timeouts.check_heartbeat), retry_policy=FEW)
        except ActivityError as exc:
            res = CheckResult(check=check, passed=False, detail=str(exc.cause or exc)[:500])
        return res

    async def _probe_round(self, checks: list[str], rnd: int, mark: int) -> str | None:
        """One round of the probes; None when every one met its baseline."""
        pc = self._cfg.probation
        assert pc is not None  # noqa: S101 - _v3 implies it
        for check in checks:
            self._check_abort()
            if len(self._detections) > mark:
                return await self._probation_failed(check, None, mark)
            self._step = f"check:{check}"
            res = await self._run_check(check, self._now_ms(), slo=pc.slo_fraction)
            self._measurements.append({"ts": self._now_ms(), "check": check, "round": rnd,
                                       "passed": res.passed, "unconfigured": res.unconfigured,
                                       "detail": res.detail})
            await self._record(f"check:{check}", "done" if res.passed else "failed",
                               note=res.detail, after={**res.measured, "round": rnd})
            if res.unconfigured:
                return await self._probation_hold(check, res)
            if not res.passed:
                return await self._probation_failed(check, res, mark)
        return None

    async def _reisolate(self, note: str, after: dict[str, Any] | None) -> None:
        self._step = "probation:isolate"
        await self._record("probation", "failed", note=note[:500], after=after)
        res = await self._control(FabricActivities.isolate_port, "isolate")
        self._isolated = True
        self._state = "running"
        await self._record("isolate", "done", note=f"isolated again after probation: "
                                                   f"{res.detail}", before=res.before,
                           after=res.after)

    async def _probation_failed(self, check: str, res: CheckResult | None, mark: int) -> str:
        """The repair did not hold under traffic: isolate again; the ladder moves on."""
        if res is None:  # a detection on the cable during probation
            await self._reflap(check, mark)
            det = self._detections[mark]
            why = f"{det.detection} {det.id} on {det.end or self._port.key} during {check}"
            await self._reisolate(f"{FAILED_NOTE} {why}; link isolated again",
                                  {"detection": det.id, "check": check})
        else:
            await self._reisolate(f"{FAILED_NOTE} {res.detail}; link isolated again",
                                  {"check": check, **res.measured})
        return "failed"

    async def _probation_hold(self, check: str, res: CheckResult) -> str:
        """A check that could not be judged fails closed: isolated again, and a human
        configures (or waives) it and approves; probation then starts over."""
        await self._reisolate(f"{check} {HOLD_NOTE} {res.detail}; link isolated again",
                              {"check": check, "unconfigured": True})
        await self._needs_human(f"check:{check}", f"not judged, so not passed: {res.detail}")
        return "hold"

    async def _reflap(self, check: str, mark: int) -> bool:
        """A detection on the cable while its repair was checked: the rung failed."""
        await self._flush_joined()
        det = self._detections[mark]
        await self._record(f"check:{check}", "failed", note=(
            f"re-flap: {det.detection} {det.id} on {det.end or self._port.key} during "
            f"{check}; the rung failed"), after={"detection": det.id, "episode": det.episode,
                                                "end": det.end})
        return False

    async def _return_to_service(self, fixed_by: str) -> None:
        self._step = "return"
        self._rung = None
        await self._undo(note=f"fixed by {fixed_by}")
        await self._record("return", "done", note=f"returned to service after {fixed_by}")

    async def _handover(self) -> None:
        """A port found isolated goes back to service only when a human hands it over."""
        self._step = "handover"
        self._state = "awaiting_handover"
        self._waiting_for = "approve"
        self._approval = None
        await self._ticket_op("page", f"{self._port.key} was found isolated ({self._found}); "
                                      f"fabricwatch returns it to service only on approve",
                              {**self._ticket_details(), "approve": "hand it over: un-isolate",
                               "abort": "leave it isolated"})
        await self._wait(lambda: self._approval is not None, None)
        self._waiting_for = None
        approval = self._approval
        assert approval is not None  # noqa: S101 - _wait(None) returns only when set
        self._approval = None
        self._state = "running"
        self._owned = True
        await self._record("approve", "done", actor=approval.actor,
                           note="handed over: fabricwatch may return the port to service"
                                + (f" ({approval.note})" if approval.note else ""))

    async def _undo(self, note: str) -> None:
        """Un-isolate, unfence, close the ticket, release the budget: in that order, so the
        budget is never freed while the port is still out. A port fabricwatch did not isolate
        stays isolated (with its fence and its budget slot) unless a human hands it over."""
        if self._isolated and self._v2 and not self._owned:
            if not self._rolling_back:
                await self._handover()
            if not self._owned:
                self._left_isolated = True
                await self._record("unisolate", "skipped", note=(
                    f"found isolated ({self._found}); left isolated for a human"))
        if self._isolated and (self._owned or not self._v2):
            res = await self._control(FabricActivities.unisolate_port, "unisolate")
            self._isolated = False
            await self._record("unisolate", "done", note=res.detail, before=res.before,
                               after=res.after)
        if (self._fenced or self._rail_held) and not self._left_isolated:
            others = 0
            if self._rail_held:
                others = (await self._rail(BudgetActivities.rail_release)).held_by_others
                self._rail_held = False
            if not self._fenced:
                pass
            elif others:
                self._fenced = False
                await self._record("unfence", "skipped", note=(
                    f"rail {self._port.rail} of {self._port.node} is held by {others} other "
                    f"open runbook(s); left fenced"))
            else:
                res = await self._control(FabricActivities.unfence_node, "unfence")
                self._fenced = False
                await self._record("unfence", "done", note=res.detail)
        if self._ticket is not None:
            await self._ticket_op("close", f"{self._port.key}: {note}")
            await self._record("ticket", "done", note=f"closed: {note}")
        if self._granted and not self._left_isolated:
            await self._release_budget("released")

    async def _rollback(self, req: AbortRequest) -> str:
        """Undo what was done; the outcome (``handed_to_human`` when the rollback itself could
        not complete: the port read back, the budget accounted, a human paged)."""
        self._step = "abort"
        self._waiting_for = None
        self._needs = None
        self._rolling_back = True
        await self._record("abort", "done", actor=req.actor, note=req.reason)
        try:
            await self._undo(note=f"aborted by {req.actor}")
        except ActivityError as exc:
            if not self._v2:
                # The port could not be returned: say so loudly, keep the budget held.
                await self._record("abort", "failed", note=f"rollback incomplete: {exc.cause}")
                raise ApplicationError(f"rollback of {self._port.key} incomplete") from exc
            why = str(exc.cause or exc)[:500]
            state = await self._read_state()
            self._needs = f"rollback incomplete: {why}"
            await self._record("abort", "failed", note=self._needs,
                               after=state.model_dump(mode="json"))
            await self._account(state)
            await self._ticket_op("page", f"{self._cable_name()}: rollback incomplete; a human "
                                          f"holds it now ({state.detail})",
                                  {**self._ticket_details(), "why": why,
                                   "port_state": state.model_dump(mode="json")})
            return "handed_to_human"
        return "aborted"
