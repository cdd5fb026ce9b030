"""Activities of the incident runbook: deliver its alert through the notifier, join a port's
runbook to its SU's breaker incident (signal-with-start), and pass the human's approve or
abort on to every member's runbook. The notifier and the Temporal client are injected."""

from __future__ import annotations

import logging

from temporalio import activity
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from schemas.events import ActionRecord, Incident
from workflows.adapters.base import AdapterRejected, RecordSink
from workflows.adapters.notify import Alert, Notifier
from workflows.incident.models import (
    BREAKER_PREFIX,
    IncidentConfig,
    IncidentInput,
    IncidentSnapshot,
    JoinInput,
    JoinRequest,
    JoinResult,
    NotifyInput,
    NotifyResult,
    RecordIncidentInput,
    RecordIncidentResult,
    SignalResult,
    SignalRunbooks,
    breaker_incident,
    incident_workflow_id,
)
from workflows.remediation.models import AbortRequest, Approval

WORKFLOW_TYPE = "IncidentRunbook"
log = logging.getLogger(__name__)


class IncidentActivities:
    def __init__(self, client: Client, notifier: Notifier, task_queue: str | None = None, *,
                 config: IncidentConfig | None = None, records: RecordSink | None = None
                 ) -> None:
        self.client = client
        self.notifier = notifier
        self.records = records  # where a breaker incident's state is recorded (None: nowhere)
        self._task_queue = task_queue
        self.config = config  # a breaker incident's (else the join's default)

    def _queue(self) -> str:
        return self._task_queue or activity.info().task_queue

    @activity.defn(name="incident_notify")
    async def notify(self, inp: NotifyInput) -> NotifyResult:
        """Deliver one alert; an error is raised (and retried), never taken as sent."""
        alert = Alert.model_validate(inp.alert)
        try:
            deliveries = await self.notifier.send(alert)
        except AdapterRejected as exc:
            raise ApplicationError(str(exc), type="AdapterRejected", non_retryable=True
                                   ) from None
        receivers = [d.receiver for d in deliveries]
        await self._record_page(alert, receivers)
        return NotifyResult(receivers=receivers, refs=[d.ref for d in deliveries])

    async def _record_page(self, alert: Alert, receivers: list[str]) -> None:
        """Who was told, in the ledger: a ``page`` record on the incident's root (port 0),
        its workflow id the incident's id, so the report names who is paged. Only after a
        receiver accepted the alert; a record that cannot be written is logged, and the
        alert (already delivered) is not sent again for it."""
        incident = alert.labels.get("incident")
        root = alert.labels.get("root")
        if self.records is None or alert.kind != "incident" or not incident or not root:
            return
        record = ActionRecord(
            id=f"{incident}/page/{alert.action}/{alert.ts_ms}", ts=alert.ts_ms,
            fabric=alert.fabric, source="fabricwatch", device=root, port=0,
            workflow_id=incident, step="page", actor="fabricwatch", outcome="done",
            note=f"{alert.action} to {', '.join(receivers) or 'no receiver'}: {alert.summary}"[
                :1000])
        try:
            await self.records.write([record])
        except Exception as exc:  # noqa: BLE001 - the page went out; its record is secondary
            log.warning("incident %s: the page was sent but not recorded: %s", incident, exc)

    @activity.defn(name="incident_record")
    async def record(self, inp: RecordIncidentInput) -> RecordIncidentResult:
        """A breaker incident's open / update / closed, as the stream's incidents are: in the
        ledger (``incidents_current``) or on ``fabric.incidents``, by the records sink."""
        if self.records is None:
            return RecordIncidentResult(written=0)
        event = Incident.model_validate(inp.event)
        return RecordIncidentResult(written=await self.records.write([event]))

    @activity.defn(name="incident_join")
    async def join(self, inp: JoinInput) -> JoinResult:
        """The runbook of ``inp.member`` joins the SU's open breaker incident (starting it)."""
        incident = breaker_incident(inp.su)
        wf_id = incident_workflow_id(inp.fabric, incident)
        snap = IncidentSnapshot(incident=incident, fabric=inp.fabric, cause="breaker",
                                root=inp.su or inp.fabric, state="open", started=inp.ts,
                                su=inp.su, reason=inp.reason, ts=inp.ts)
        await self.client.start_workflow(
            WORKFLOW_TYPE, IncidentInput(snapshot=snap, config=self.config or inp.config),
            id=wf_id,
            task_queue=self._queue(), id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            start_signal="join", start_signal_args=[JoinRequest(
                member=inp.member, runbook=inp.runbook, reason=inp.reason, ts=inp.ts)])
        return JoinResult(workflow_id=wf_id)

    @activity.defn(name="incident_signal_runbooks")
    async def signal_runbooks(self, inp: SignalRunbooks) -> SignalResult:
        """approve / abort each runbook; one that has finished is reported as gone."""
        signalled: list[str] = []
        gone: list[str] = []
        d = inp.decision
        note = f"incident: {d.note}" if d.note else "incident decision"
        for wf_id in inp.runbooks:
            handle = self.client.get_workflow_handle(wf_id)
            try:
                if d.action == "approve":
                    await handle.signal("approve", Approval(actor=d.actor, note=note))
                else:
                    await handle.signal("abort", AbortRequest(actor=d.actor, reason=note))
            except RPCError as exc:
                if exc.status == RPCStatusCode.NOT_FOUND:  # finished (or never existed)
                    gone.append(wf_id)
                    continue
                raise
            signalled.append(wf_id)
            activity.heartbeat(len(signalled))
        return SignalResult(signalled=signalled, gone=gone)


def default_config(horizon_s: float) -> IncidentConfig:
    """The incident runbook's configuration for a notifier horizon (refresh at half)."""
    return IncidentConfig(horizon_s=horizon_s, refresh_s=horizon_s / 2)


__all__ = ["BREAKER_PREFIX", "IncidentActivities", "default_config"]
