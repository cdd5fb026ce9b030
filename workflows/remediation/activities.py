"""The remediation runbook's side effects, as methods of a class that receives its clients.

Each activity is idempotent: controller changes first look at the current state (a retry
after a crash finds the port already isolated and does nothing), tickets are keyed by the
workflow id, and every record has a deterministic id that the ledger deduplicates. In shadow
mode the changing activities touch nothing and return what they would have done.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError

from schemas.events import Action, ActionRecord, Detection, DetectionKind, EvidenceRecord, Severity
from workflows.adapters.base import (
    AdapterRejected,
    BaselineStore,
    Checker,
    Controller,
    EvidenceSource,
    JobLookup,
    NodeFencer,
    RecordSink,
    Ticketing,
)
from workflows.remediation.models import (
    BreakerInput,
    BreakerResult,
    CheckInput,
    CheckResult,
    ControlInput,
    ControlResult,
    EvidenceInput,
    EvidenceItem,
    EvidenceResult,
    PortRef,
    PortState,
    RecordInput,
    RecordResult,
    RepairInput,
    RepairResult,
    TicketInput,
    TicketResult,
)
from workflows.remediation.probation import PROBE_KINDS, check_kind, judge_probes

T = TypeVar("T")
SOURCE = "fabricwatch"
EXCERPT_LINES = 12

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


def heartbeating(fn: F) -> F:
    """Heartbeat every third of the activity's heartbeat timeout while it runs.

    A worker killed mid-activity stops heartbeating, so the server retries the activity on
    another worker after the (short) heartbeat timeout instead of its whole start-to-close
    timeout. A call that hangs in a live worker keeps heartbeating: the start-to-close
    timeout bounds that one. Without a heartbeat timeout it runs as it is.
    """
    @functools.wraps(fn)
    async def run(*args: Any, **kwargs: Any) -> Any:
        # called as a plain method (a test, a tool) there is no activity to heartbeat for
        timeout = activity.info().heartbeat_timeout if activity.in_activity() else None
        if not timeout:
            return await fn(*args, **kwargs)
        every = max(timeout.total_seconds() / 3, 0.1)

        async def tick() -> None:
            while True:
                await asyncio.sleep(every)
                activity.heartbeat()
        ticker = asyncio.create_task(tick())
        try:
            return await fn(*args, **kwargs)
        finally:
            ticker.cancel()
    return run  # type: ignore[return-value]


def _rejected(exc: AdapterRejected) -> ApplicationError:
    # A refusal for good (bad port, no permission): retrying cannot help, a human must look.
    return ApplicationError(str(exc), type="AdapterRejected", non_retryable=True)


def _now_ms() -> int:
    return int(time.time() * 1000)


# A record's ts is the workflow's time when it decided (``workflow.now()``, in the input),
# never this activity's clock: a retry stamps what the first attempt stamped. The one
# exception: the contract refuses an event more than a day ahead of the wall clock, which
# only a time-skipped workflow (tests, a fast-forwarded demo) reaches, as workflow time is
# the server's and trails the wall clock in production; such a record is stamped 23 h ahead
# so it stays valid (its own time is still in the history and the query). A re-run with
# another ts (the record is a local activity, re-run with a later ``workflow.now()`` when
# its workflow task is lost) is the same row: the ledger keeps one row per record id.
_MAX_AHEAD_MS = 23 * 3600 * 1000


def event_ts(workflow_ms: int) -> int:
    return min(workflow_ms, _now_ms() + _MAX_AHEAD_MS)


HEARTBEAT_EVERY_S = 1.0  # well inside the checks' heartbeat timeout (5 s, ActivityTimeouts)


async def _heartbeating(call: Awaitable[T], what: str) -> T:
    """Await ``call`` (an all-reduce sweep runs for minutes) while heartbeating, so a live
    check is not taken for a dead worker."""
    task = asyncio.ensure_future(call)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=HEARTBEAT_EVERY_S)
            if done:
                return task.result()
            activity.heartbeat(f"{what}: running")
    except BaseException:
        task.cancel()  # a cancelled activity stops its tool too
        raise


class FabricActivities:
    """Activities of ``PortRemediation``; one instance per worker, clients injected."""

    def __init__(self, *, records: RecordSink, controller: Controller, evidence: EvidenceSource,
                 checker: Checker, fencer: NodeFencer, ticketing: Ticketing,
                 jobs: JobLookup | None = None, baselines: BaselineStore | None = None
                 ) -> None:
        self.records = records
        self.baselines = baselines  # pinned probe baselines (probation judges against them)
        self.jobs = jobs
        self.controller = controller
        self.evidence = evidence
        self.checker = checker
        self.fencer = fencer
        self.ticketing = ticketing

    async def aclose(self) -> None:
        """Close the adapters' HTTP sessions (those that have one)."""
        for client in (self.controller, self.ticketing, self.checker, self.evidence):
            close = getattr(client, "aclose", None)
            if close is not None:
                await close()

    # --- records --------------------------------------------------------------------------

    @activity.defn(name="record_action")
    async def record_action(self, inp: RecordInput) -> RecordResult:
        rec = ActionRecord(
            id=inp.record_id, ts=event_ts(inp.ts), fabric=inp.port.fabric, source=SOURCE,
            device=inp.port.device, port=inp.port.port, workflow_id=inp.workflow_id,
            step=inp.step, actor=inp.actor, outcome=inp.outcome, before=inp.before,
            after=inp.after, note=inp.note, dry_run=inp.dry_run)
        return RecordResult(written=await self.records.write([rec]))

    # --- evidence ---------------------------------------------------------------------------

    @activity.defn(name="capture_evidence")
    async def capture_evidence(self, inp: EvidenceInput) -> EvidenceResult:
        # the same activity the fabric agent's evidence worker serves (EvidenceActivities)
        evidence = EvidenceActivities(records=self.records, evidence=self.evidence)
        return await evidence.capture_evidence(inp)

    # --- controller -------------------------------------------------------------------------

    async def _state(self, port: PortRef) -> dict[str, Any]:
        return {"isolated": await self.controller.is_isolated(port),
                "controller": self.controller.name}

    @activity.defn(name="isolate_port")
    @heartbeating
    async def isolate_port(self, inp: ControlInput) -> ControlResult:
        try:
            before = await self._state(inp.port)
            if inp.dry_run:
                return ControlResult(changed=False, before=before,
                                     detail=f"would isolate {inp.port.key} via "
                                            f"{self.controller.name}")
            changed = await self.controller.isolate(inp.port)
            after = await self._state(inp.port)
        except AdapterRejected as exc:
            raise _rejected(exc) from None
        return ControlResult(changed=changed, before=before, after=after,
                             detail="isolated" if changed else "was already isolated")

    @activity.defn(name="port_state")
    @heartbeating
    async def port_state(self, inp: ControlInput) -> PortState:
        """The port's real state, read back for a human (never raises: unreadable is None)."""
        try:
            isolated = await self.controller.is_isolated(inp.port)
            by_fn = getattr(self.controller, "isolated_by", None)
            by = await by_fn(inp.port) if by_fn is not None and isolated else None
        except Exception as exc:  # noqa: BLE001 - a human needs the answer "unknown" too
            return PortState(isolated=None, controller=self.controller.name,
                             detail=f"could not read {inp.port.key}: {exc}"[:500])
        return PortState(isolated=isolated, controller=self.controller.name, by=by,
                         detail=f"{inp.port.key} {'isolated' if isolated else 'in service'}"
                                f" ({self.controller.name})")

    @activity.defn(name="unisolate_port")
    @heartbeating
    async def unisolate_port(self, inp: ControlInput) -> ControlResult:
        try:
            before = await self._state(inp.port)
            if inp.dry_run:
                return ControlResult(changed=False, before=before,
                                     detail=f"would return {inp.port.key} to service")
            changed = await self.controller.unisolate(inp.port)
            after = await self._state(inp.port)
        except AdapterRejected as exc:
            raise _rejected(exc) from None
        return ControlResult(changed=changed, before=before, after=after,
                             detail="returned to service" if changed else "was not isolated")

    @activity.defn(name="reset_counters")
    @heartbeating
    async def reset_counters(self, inp: ControlInput) -> ControlResult:
        if inp.dry_run:
            return ControlResult(changed=False, detail="would reset counters")
        try:
            await self.controller.reset_counters(inp.port)
        except AdapterRejected as exc:
            raise _rejected(exc) from None
        return ControlResult(changed=True, detail="counters reset")

    @activity.defn(name="repair_step")
    @heartbeating
    async def repair_step(self, inp: RepairInput) -> RepairResult:
        try:
            return RepairResult(fixed=await self.controller.repair_step(inp.port, inp.rung))
        except AdapterRejected as exc:
            raise _rejected(exc) from None

    # --- node fencing -------------------------------------------------------------------

    @activity.defn(name="fence_node")
    @heartbeating
    async def fence_node(self, inp: ControlInput) -> ControlResult:
        if inp.port.node is None:
            return ControlResult(changed=False, skipped=True, detail="no node behind this port")
        if not getattr(self.fencer, "enabled", True):
            return ControlResult(changed=False, skipped=True, detail="no node fencing configured")
        if inp.dry_run:
            return ControlResult(changed=False, detail=f"would label and taint {inp.port.node} "
                                                       f"rail {inp.port.rail}")
        try:
            changed = await self.fencer.fence(inp.port.node, inp.port.rail,
                                              f"{inp.port.key} isolated by {inp.workflow_id}")
        except AdapterRejected as exc:
            raise _rejected(exc) from None
        return ControlResult(changed=changed, after={"node": inp.port.node, "rail": inp.port.rail},
                             detail="labelled and tainted" if changed else "already fenced")

    @activity.defn(name="unfence_node")
    @heartbeating
    async def unfence_node(self, inp: ControlInput) -> ControlResult:
        if inp.port.node is None:
            return ControlResult(changed=False, skipped=True, detail="no node behind this port")
        if not getattr(self.fencer, "enabled", True):
            return ControlResult(changed=False, skipped=True, detail="no node fencing configured")
        if inp.dry_run:
            return ControlResult(changed=False, detail=f"would remove label and taint of "
                                                       f"{inp.port.node} rail {inp.port.rail}")
        try:
            changed = await self.fencer.unfence(inp.port.node, inp.port.rail)
        except AdapterRejected as exc:
            raise _rejected(exc) from None
        return ControlResult(changed=changed, detail="label and taint removed" if changed
                             else "was not fenced")

    # --- checks -----------------------------------------------------------------------

    @activity.defn(name="run_check")
    @heartbeating
    async def run_check(self, inp: CheckInput) -> CheckResult:
        if inp.dry_run:
            return CheckResult(check=inp.check, passed=True, detail="would run")
        activity.heartbeat(inp.check)
        kind = check_kind(inp.check)
        try:
            soak = getattr(self.checker, "run_soak", None)
            if kind == "counters" and inp.normal and soak is not None:
                call = soak(inp.check, inp.port, inp.since_ms, inp.until_ms, inp.normal)
            else:
                call = self.checker.run(inp.check, inp.port, inp.since_ms)
            out = await _heartbeating(call, inp.check)
        except AdapterRejected as exc:
            raise _rejected(exc) from None
        if out.unconfigured:
            return CheckResult(check=inp.check, passed=False, unconfigured=True,
                               detail=out.detail, measured=dict(out.measured))
        if inp.slo_fraction is None or not out.passed or kind not in PROBE_KINDS:
            return CheckResult(check=inp.check, passed=out.passed, detail=out.detail,
                               measured=dict(out.measured))
        return await self._judge(inp, out)

    async def _judge(self, inp: CheckInput, out: Any) -> CheckResult:
        """Probation: the measured bandwidth against the pinned baseline (fail closed)."""
        probes = out.measured.get("probes")
        rail = inp.port.rail
        why = None
        if not probes:
            why = f"{inp.check}: the check reported no bandwidth measurement"
        elif self.baselines is None:
            why = f"{inp.check}: no baseline store on this worker (the ledger's baselines)"
        elif rail is None:
            why = f"{inp.check}: {inp.port.key} has no rail, so no baseline applies"
        if why is not None:
            return CheckResult(check=inp.check, passed=False, unconfigured=True, detail=why,
                               measured=dict(out.measured))
        assert self.baselines is not None and rail is not None  # noqa: S101 - checked above
        try:
            found = await self.baselines.pinned(inp.port.fabric, rail)
        except Exception as exc:  # noqa: BLE001 - unread baselines judge nothing: fail closed
            return CheckResult(check=inp.check, passed=False, unconfigured=True,
                               detail=f"{inp.check}: baselines not read: {exc}"[:500],
                               measured=dict(out.measured))
        pinned = {(b.rail, b.probe, b.size_bytes, b.scale): b for b in found}
        verdict = judge_probes(
            inp.check, probes, rail=rail,
            lookup=lambda r, probe, size, scale: pinned.get((r, probe, size, scale)),
            fraction=inp.slo_fraction or 0.0, cable=inp.cable or [inp.port.key],
            scale=int(out.measured.get("scale") or 2), size=out.measured.get("size"))
        measured = {**verdict.measured, "argv": out.measured.get("argv")}
        return CheckResult(check=inp.check, passed=verdict.verdict == "passed",
                           unconfigured=verdict.verdict == "unconfigured",
                           detail=verdict.detail,
                           measured={k: v for k, v in measured.items() if v is not None})

    # --- tickets and pages ---------------------------------------------------------------

    @activity.defn(name="ticket")
    async def ticket(self, inp: TicketInput) -> TicketResult:
        if inp.dry_run:
            return TicketResult(ticket_id=None, detail=f"would {inp.op}: {inp.summary}")
        details = {"port": inp.port.model_dump(mode="json"), **inp.details}
        if inp.op in ("open", "page"):
            # what the cable carries now: the jobs a technician's work or the isolation touch
            details["jobs_touched"] = (
                await self.jobs.touching(inp.port.fabric, inp.port.device, inp.port.port,
                                         int(time.time() * 1000))
                if self.jobs is not None
                else {"not_looked_up": "no job lookup is configured for this worker"})
        if inp.op == "resolve":
            # only a ticketing that pages through a notifier has an alert to resolve
            resolve = getattr(self.ticketing, "resolve", None)
            if resolve is None:
                return TicketResult(ticket_id=None, detail="no alert to resolve")
            try:
                await resolve(inp.workflow_id, inp.summary, details)
            except AdapterRejected as exc:
                raise _rejected(exc) from None
            return TicketResult(ticket_id=inp.workflow_id, detail="resolve")
        try:
            fn = {"open": self.ticketing.open, "update": self.ticketing.update,
                  "close": self.ticketing.close, "page": self.ticketing.page}[inp.op]
            ticket_id = await fn(inp.workflow_id, inp.summary, details)
        except AdapterRejected as exc:
            raise _rejected(exc) from None
        return TicketResult(ticket_id=ticket_id, detail=inp.op)

    @activity.defn(name="open_breaker")
    async def open_breaker(self, inp: BreakerInput) -> BreakerResult:
        """Publish/record a ``breaker_open`` detection; page a human unless the SU's breaker
        incident does (``inp.page`` False)."""
        det_id = f"{inp.workflow_id}/breaker/{inp.detection.id}"
        det = Detection(
            id=det_id, ts=event_ts(inp.ts), fabric=inp.port.fabric, source=SOURCE,
            device=inp.port.device, port=inp.port.port, detection=DetectionKind.BREAKER_OPEN,
            severity=Severity.CRITICAL, action=Action.PAGE, episode=inp.detection.episode,
            evidence={"reason": inp.reason, "su": inp.port.su, "workflow_id": inp.workflow_id,
                      "original": inp.detection.detection, "dry_run": inp.dry_run})
        await self.records.write([det])
        if inp.dry_run or not inp.page:  # not paged here: the SU's breaker incident pages
            return BreakerResult(detection_id=det_id, paged=False)
        await self.ticketing.page(inp.workflow_id, f"breaker open: {inp.reason}", {
            "port": inp.port.model_dump(mode="json"), "detection": inp.detection.detection,
            "approve": f"fabricwatch runbook approve {inp.workflow_id}",
            "abort": f"fabricwatch runbook abort {inp.workflow_id}"})
        return BreakerResult(detection_id=det_id, paged=True)


class EvidenceActivities:
    """The evidence activity alone: what a worker on the host with the fabric tools serves
    (``fabricwatch evidence-worker`` on ``settings.temporal.evidence_task_queue``). Read-only:
    it runs the tools and records what they printed, or that they could not run and why."""

    def __init__(self, *, records: RecordSink, evidence: EvidenceSource) -> None:
        self.records = records
        self.evidence = evidence

    @activity.defn(name="capture_evidence")
    @heartbeating
    async def capture_evidence(self, inp: EvidenceInput) -> EvidenceResult:
        activity.heartbeat("capturing")
        ends = [inp.port] + ([inp.peer] if inp.peer is not None else [])
        captured = []
        try:
            for end in ends:  # both ends of the cable, the isolated one first
                captured += [(end, out) for out in await self.evidence.capture(end)]
                activity.heartbeat(f"captured {end.key}")
        except AdapterRejected as exc:
            raise _rejected(exc) from None
        activity.heartbeat("storing")
        records = []
        items = []
        for end, out in captured:
            digest = hashlib.sha256(out.output.encode()).hexdigest()[:12]
            # the isolated end keeps the id it always had; the peer's names its end
            suffix = "" if end is inp.port else f"/{end.key}"
            records.append(EvidenceRecord(
                id=f"{inp.workflow_id}/evidence/{inp.ts}/{out.tool}{suffix}", ts=event_ts(inp.ts),
                fabric=end.fabric, source=SOURCE, device=end.device,
                port=end.port, workflow_id=inp.workflow_id, tool=out.tool,
                output=out.output, exit_code=out.exit_code))
            lines = out.output.splitlines()
            items.append(EvidenceItem(tool=out.tool, end=end.key, exit_code=out.exit_code,
                                      bytes=len(out.output.encode()),
                                      excerpt="\n".join(lines[:EXCERPT_LINES]) + (
                                          f"\n[sha256 {digest}]" if len(lines) > EXCERPT_LINES
                                          else "")))
        if records:
            await self.records.write(records)
        return EvidenceResult(items=items)
