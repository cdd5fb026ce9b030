"""Inputs and outputs of the incident runbook (``IncidentRunbook``), one model per signal,
query and activity. Plain data that crosses Temporal through ``pydantic_data_converter``;
fields are only ever added, with defaults."""

from __future__ import annotations

import hashlib
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from schemas.events import Incident


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


BREAKER_PREFIX = "breaker/"


def incident_workflow_id(fabric: str, incident: str) -> str:
    """The one runbook of an incident: ``incident/{fabric}/{incident id}``."""
    return f"incident/{fabric}/{incident}"


def breaker_incident(su: str | None) -> str:
    """The incident id of an SU's open breaker (``breaker/{su}``; ``breaker/fabric`` for the
    fabric-wide cap): every refusal of that SU joins it while it is open."""
    return f"{BREAKER_PREFIX}{su or 'fabric'}"


def alert_key(fabric: str, incident: str) -> str:
    """The receivers' deduplication key of an incident's alert (at most 255 characters)."""
    key = f"incident/{fabric}/{incident}"
    if len(key) <= 255:
        return key
    return f"incident/{fabric[:100]}/sha256:{hashlib.sha256(incident.encode()).hexdigest()}"


class IncidentSnapshot(_Model):
    """An incident as ``fabric.incidents`` last said it (or a breaker incident's start)."""

    incident: str
    fabric: str
    cause: str
    root: str
    state: Literal["open", "update", "closed"] = "open"
    started: int
    ended: int | None = None
    members: list[str] = Field(default_factory=list)
    su: str | None = None
    reason: str | None = None
    ts: int = 0
    evidence: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def from_event(cls, ev: Incident) -> IncidentSnapshot:
        return cls(incident=ev.incident, fabric=ev.fabric, cause=str(ev.cause), root=ev.root,
                   state=ev.state, started=ev.started, ended=ev.ended,
                   members=list(ev.members), su=ev.su, reason=ev.reason, ts=ev.ts,
                   evidence=dict(ev.evidence))


class IncidentConfig(_Model):
    horizon_s: float = 24 * 3600.0  # a firing alert's Alertmanager endsAt ahead
    refresh_s: float = 12 * 3600.0  # re-post the alert this often while open (< horizon)
    debounce_s: float = 5.0  # member changes within this are one update
    notify_timeout_s: float = 60.0
    signal_timeout_s: float = 60.0
    max_history_events: int = 5000  # continue-as-new past this (a long, busy incident)


class IncidentInput(_Model):
    snapshot: IncidentSnapshot
    config: IncidentConfig = IncidentConfig()
    # carried over a continue-as-new
    runbooks: dict[str, str] = Field(default_factory=dict)  # member port -> runbook id
    acked_by: str | None = None
    decision: Decision | None = None
    alerts_sent: int = 0
    records_written: int = 0


class JoinRequest(_Model):
    """A port's runbook joins the incident (a breaker refusal): the incident pages for it."""

    member: str  # device:port
    runbook: str | None = None  # the runbook's workflow id, which approve / abort reach
    reason: str | None = None
    ts: int = 0


class Decision(_Model):
    """A human's word on the incident: ack, approve or abort (all members at once), close."""

    actor: str
    note: str | None = None
    action: Literal["ack", "approve", "abort", "close"] = "ack"


class IncidentView(_Model):
    """The ``status`` query: what the incident is and what it waits for."""

    workflow_id: str
    incident: str
    fabric: str
    cause: str
    root: str
    state: Literal["open", "update", "closed"]
    started: int
    ended: int | None
    su: str | None
    reason: str | None
    members: list[str]
    runbooks: dict[str, str]
    acked_by: str | None
    decision: Decision | None
    alert_key: str
    alerts_sent: int
    receivers: list[str]
    waiting_for: str | None
    alert_error: str | None = None  # the last alert a receiver refused for good (not sent)


class IncidentResult(_Model):
    incident: str
    outcome: Literal["closed", "closed_by_human", "aborted"]
    members: list[str]
    alerts_sent: int
    closed_ts: int


class NotifyInput(_Model):
    alert: dict[str, Any]  # a workflows.adapters.notify.Alert, as JSON


class NotifyResult(_Model):
    receivers: list[str]
    refs: list[str]


class RecordIncidentInput(_Model):
    """``incident_record``: a breaker incident's state as an ``Incident`` event (JSON), for
    the ledger and ``fabric.incidents`` (the stream's incidents are there already)."""

    event: dict[str, Any]


class RecordIncidentResult(_Model):
    written: int


class JoinInput(_Model):
    """``join_incident``: signal-with-start the SU's breaker incident with one member."""

    fabric: str
    su: str | None
    member: str
    runbook: str
    reason: str
    ts: int
    config: IncidentConfig = IncidentConfig()


class JoinResult(_Model):
    workflow_id: str


class SignalRunbooks(_Model):
    """``signal_runbooks``: approve or abort each member's runbook (the human's one word)."""

    runbooks: list[str]
    decision: Decision


class SignalResult(_Model):
    signalled: list[str]
    gone: list[str]  # runbooks that had already finished


IncidentInput.model_rebuild()
