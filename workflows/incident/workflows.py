"""``IncidentRunbook``: one durable runbook per incident, not one per port.

Workflow id ``incident/{fabric}/{incident id}`` (``incident_workflow_id``), started or
signalled by the incident consumer (``workflows/incident/dispatch.py``) for every
``fabric.incidents`` message, and by a port runbook whose isolation the SU budget refused
(``join``: the SU's breaker incident, id ``breaker/{su}``).

1. page once: one alert for the incident (key ``incident/{fabric}/{id}``), whatever the
   number of members;
2. while open, a member change (a new message, a joining runbook) updates that one alert,
   changes within ``debounce_s`` together; the alert is re-posted every ``refresh_s`` so
   Alertmanager's ``endsAt`` never runs out on an open incident;
3. ``ack`` acknowledges the alert; ``approve`` / ``abort`` is the human's word for all
   members at once: each member's port runbook (a breaker incident's) is signalled, and a
   breaker incident closes then; ``close`` is a human's close;
4. the stream's ``closed`` message (or a human close) resolves the alert and ends the run.

Deterministic: time is ``workflow.now()``; alerts, joins and runbook signals are activities.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Literal

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from workflows.adapters.notify import Alert
    from workflows.incident.activities import IncidentActivities
    from workflows.incident.models import (
        BREAKER_PREFIX,
        Decision,
        IncidentInput,
        IncidentResult,
        IncidentSnapshot,
        IncidentView,
        JoinRequest,
        NotifyInput,
        RecordIncidentInput,
        SignalRunbooks,
        alert_key,
    )

# alerts: retried until delivered (a receiver down for an hour still gets the page; the
# workflow never counts an undelivered alert as sent); a refused payload is final
NOTIFY = RetryPolicy(initial_interval=timedelta(seconds=2), backoff_coefficient=2.0,
                     maximum_interval=timedelta(minutes=5),
                     non_retryable_error_types=["AdapterRejected"])
SIGNALS = RetryPolicy(initial_interval=timedelta(seconds=1), backoff_coefficient=2.0,
                      maximum_interval=timedelta(minutes=1))

MEMBERS_SHOWN = 200  # in the alert; the query has them all


def _s(seconds: float) -> timedelta:
    return timedelta(seconds=seconds)


@workflow.defn(name="IncidentRunbook")
class IncidentRunbook:
    @workflow.init
    def __init__(self, inp: IncidentInput) -> None:
        self._cfg = inp.config
        self._snap = inp.snapshot
        self._runbooks: dict[str, str] = dict(inp.runbooks)  # member -> runbook id ("": none)
        self._acked_by = inp.acked_by
        self._decision = inp.decision
        self._sent = inp.alerts_sent
        self._receivers: list[str] = []
        self._alert_error: str | None = None
        self._version = 0  # bumped by every member change
        self._sent_version = 0  # the member list the alert last showed
        self._pending: list[Decision] = []
        self._closed_by: Decision | None = None
        self._signalled: set[str] = set()
        self._records = inp.records_written  # breaker incident records written (their ids)

    # --- signals and query ------------------------------------------------------------------

    @workflow.signal(name="incident")
    def incident(self, snap: IncidentSnapshot) -> None:
        """A ``fabric.incidents`` message; an older one than the last seen is ignored."""
        if snap.ts < self._snap.ts or self._snap.state == "closed":
            return
        before = self.members()
        self._snap = snap
        if self.members() != before:
            self._version += 1

    @workflow.signal(name="join")
    def join(self, req: JoinRequest) -> None:
        if req.member in self._runbooks and (self._runbooks[req.member] or not req.runbook):
            return
        self._runbooks[req.member] = req.runbook or ""
        self._version += 1

    @workflow.signal(name="ack")
    def ack(self, d: Decision) -> None:
        self._pending.append(d.model_copy(update={"action": "ack"}))

    @workflow.signal(name="approve")
    def approve(self, d: Decision) -> None:
        self._pending.append(d.model_copy(update={"action": "approve"}))

    @workflow.signal(name="abort")
    def abort(self, d: Decision) -> None:
        self._pending.append(d.model_copy(update={"action": "abort"}))

    @workflow.signal(name="close")
    def close(self, d: Decision) -> None:
        self._pending.append(d.model_copy(update={"action": "close"}))

    @workflow.query(name="status")
    def status(self) -> IncidentView:
        s = self._snap
        return IncidentView(
            workflow_id=workflow.info().workflow_id, incident=s.incident, fabric=s.fabric,
            cause=s.cause, root=s.root, state=s.state, started=s.started, ended=s.ended,
            su=s.su, reason=s.reason, members=self.members(), runbooks=dict(self._runbooks),
            acked_by=self._acked_by, decision=self._decision,
            alert_key=alert_key(s.fabric, s.incident), alerts_sent=self._sent,
            receivers=self._receivers, waiting_for=self._waiting_for(),
            alert_error=self._alert_error)

    def members(self) -> list[str]:
        return sorted(set(self._snap.members) | set(self._runbooks))

    def _waiting_for(self) -> str | None:
        if self._snap.state == "closed" or self._closed_by is not None:
            return None
        if self._decision is None and any(self._runbooks.values()):
            return "approve"
        return "close" if self._acked_by else "ack"

    def _done(self) -> bool:
        return self._snap.state == "closed" or self._closed_by is not None

    @property
    def _breaker(self) -> bool:
        return self._snap.incident.startswith(BREAKER_PREFIX) and self._snap.cause == "breaker"

    # --- the alert --------------------------------------------------------------------------

    def _now_ms(self) -> int:
        return int(workflow.now().timestamp() * 1000)

    def _alert(self, action: Literal["trigger", "update", "acknowledge", "resolve"]
               ) -> dict[str, Any]:
        s = self._snap
        members = self.members()
        if self._breaker:
            summary = (f"breaker open on {s.root}: {len(members)} isolation(s) refused; "
                       "suspect firmware, SM or power, not optics")
        else:
            summary = f"{s.cause} at {s.root}: {len(members)} port(s), one incident"
        inc = s.incident
        details: dict[str, Any] = {
            "incident": inc, "cause": s.cause, "root": s.root, "state": s.state,
            "member_count": len(members), "members": members[:MEMBERS_SHOWN],
            "ack": f"fabricwatch incident ack {inc}",
            "close": f"fabricwatch incident close {inc}"}
        if any(self._runbooks.values()):
            details["runbooks_waiting"] = sum(1 for r in self._runbooks.values() if r)
            details["approve"] = f"fabricwatch incident approve {inc}"
            details["abort"] = f"fabricwatch incident abort {inc}"
        if s.reason:
            details["reason"] = s.reason
        if self._acked_by:
            details["acknowledged_by"] = self._acked_by
        if self._decision is not None:
            details["decision"] = f"{self._decision.action} by {self._decision.actor}"
        labels = {"incident": inc, "cause": s.cause, "root": s.root}
        if s.su:
            labels["su"] = s.su
        now = self._now_ms()
        ended = (s.ended or now) if action == "resolve" else None
        return Alert(key=alert_key(s.fabric, inc), kind="incident", action=action,
                     fabric=s.fabric, summary=summary, labels=labels, details=details,
                     started_ms=min(s.started, now), ts_ms=now, ended_ms=ended,
                     horizon_s=self._cfg.horizon_s).model_dump(mode="json")

    async def _record(self, state: Literal["open", "update", "closed"]) -> None:
        """A breaker incident is the runbooks' own: record its state as the stream records
        its incidents (the ledger's ``incidents_current``, the report). Stream incidents are
        on ``fabric.incidents`` already."""
        if not self._breaker:
            return
        s = self._snap
        now = self._now_ms()
        self._records += 1
        event = {"kind": "incident", "id": f"{workflow.info().workflow_id}/"
                 f"{workflow.info().first_execution_run_id}/{self._records}",
                 "ts": now, "fabric": s.fabric, "source": "fabricwatch-runbooks",
                 "incident": s.incident, "cause": s.cause, "root": s.root, "state": state,
                 "started": min(s.started, now), "ended": now if state == "closed" else None,
                 "members": self.members(), "su": s.su,
                 "reason": (s.reason or "")[:500] or None,
                 "evidence": {"runbooks": sorted(r for r in self._runbooks.values() if r)}}
        await workflow.execute_activity_method(
            IncidentActivities.record, RecordIncidentInput(event=event),
            start_to_close_timeout=_s(self._cfg.notify_timeout_s), retry_policy=SIGNALS)

    async def _notify(self, action: Literal["trigger", "update", "acknowledge", "resolve"]
                      ) -> None:
        shown = self._version  # changes while the activity runs are the next update's
        try:
            res = await workflow.execute_activity_method(
                IncidentActivities.notify, NotifyInput(alert=self._alert(action)),
                start_to_close_timeout=_s(self._cfg.notify_timeout_s), retry_policy=NOTIFY)
        except ActivityError as exc:
            # a receiver refused this payload for good: not sent, shown in the status; the
            # incident goes on (the next update or refresh tries again)
            self._alert_error = f"{action}: {exc.cause or exc}"[:500]
            self._sent_version = shown
            return
        self._alert_error = None
        self._sent_version = shown
        self._sent += 1
        self._receivers = res.receivers

    # --- decisions --------------------------------------------------------------------------

    async def _signal_members(self, d: Decision) -> None:
        """Pass approve / abort to every member runbook, those that join meanwhile too."""
        while True:
            todo = sorted(r for r in self._runbooks.values() if r and r not in self._signalled)
            if not todo:
                return
            res = await workflow.execute_activity_method(
                IncidentActivities.signal_runbooks, SignalRunbooks(runbooks=todo, decision=d),
                start_to_close_timeout=_s(self._cfg.signal_timeout_s), retry_policy=SIGNALS)
            self._signalled.update(res.signalled)
            self._signalled.update(res.gone)

    async def _decide(self, d: Decision) -> None:
        if d.action == "ack":
            if self._acked_by is None:
                self._acked_by = d.actor
                await self._notify("acknowledge")
        elif d.action == "close":
            self._closed_by = d
        elif self._decision is None:  # approve / abort: the first word counts
            self._decision = d
            await self._signal_members(d)
            if self._breaker:  # its members have their answer: the breaker episode is over
                self._closed_by = d
            else:
                await self._notify("update")

    # --- the run ------------------------------------------------------------------------------

    @workflow.run
    async def run(self, inp: IncidentInput) -> IncidentResult:
        if inp.alerts_sent == 0:
            await self._record("open")
            await self._notify("trigger")
        while not self._done():
            try:
                await workflow.wait_condition(
                    lambda: (self._version != self._sent_version or bool(self._pending)
                             or self._snap.state == "closed"),
                    timeout=_s(self._cfg.refresh_s))
                refresh = False
            except TimeoutError:
                refresh = True
            while self._pending and self._closed_by is None:
                await self._decide(self._pending.pop(0))
            if self._done():
                break
            if self._version != self._sent_version:
                # a burst of joins (a reboot's ports) is one update, not one per port
                await workflow.sleep(_s(self._cfg.debounce_s))
                await self._record("update")
                await self._notify("update")
            elif refresh:
                await self._notify("update")
            if workflow.info().get_current_history_length() > self._cfg.max_history_events:
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(IncidentInput(
                    snapshot=self._snap, config=self._cfg, runbooks=self._runbooks,
                    acked_by=self._acked_by, decision=self._decision, alerts_sent=self._sent,
                    records_written=self._records))
        # a decision that arrived with the close still reaches the runbooks
        if self._decision is not None:
            await self._signal_members(self._decision)
        await self._record("closed")
        await self._notify("resolve")
        if self._snap.state == "closed":
            outcome: Literal["closed", "closed_by_human", "aborted"] = "closed"
        elif self._closed_by is not None and self._closed_by.action == "abort":
            outcome = "aborted"
        else:
            outcome = "closed_by_human"
        return IncidentResult(incident=self._snap.incident, outcome=outcome,
                              members=self.members(), alerts_sent=self._sent,
                              closed_ts=self._now_ms())
