"""Inputs and outputs of the remediation runbook: one model per workflow, activity, signal and update.

These models cross the Temporal boundary through ``pydantic_data_converter``. They are plain
data: no clock, no I/O, no validators that read the time (the workflow sandbox forbids it), so
they deserialize the same way on replay years later. Fields are only ever added, with defaults.
"""

from __future__ import annotations

import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from schemas.events import Detection
from schemas.policy import Policy


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


def remediation_workflow_id(fabric: str, device: str, port: int) -> str:
    """The id of the runbook of a port whose cable peer is unknown."""
    return f"remediate/{fabric}/{device}:{port}"


def cable_workflow_id(fabric: str, a: tuple[str, int], b: tuple[str, int] | None) -> str:
    """The one id of a cable's runbook: ``remediate/{fabric}/{end_a}~{end_b}``, the two
    ``device:port`` ends sorted, so a detection from either end joins the same runbook."""
    if b is None:
        return remediation_workflow_id(fabric, *a)
    ends = sorted(f"{d}:{p}" for d, p in (a, b))
    return f"remediate/{fabric}/{ends[0]}~{ends[1]}"


class PortRef(_Model):
    """A port and what the runbook needs to know about its place in the fabric."""

    fabric: str
    device: str
    port: int
    su: str = "unknown"  # scalable unit; the isolation budget is per SU
    rail: int | None = None
    node: str | None = None  # the Kubernetes node whose rail this port serves, if any
    peer_device: str | None = None  # the other cable end, for the ticket
    peer_port: int | None = None
    lid: int | None = None  # for perfquery / mlxlink on a real fabric
    guid: str | None = None  # for UFM's "<guid>_<port>" port names

    @property
    def key(self) -> str:
        return f"{self.device}:{self.port}"


class DetectionRef(_Model):
    """The parts of a ``Detection`` the runbook keeps (no time-dependent validation)."""

    id: str
    ts: int
    detection: str
    severity: str
    action: str
    episode: str
    source: str = "unknown"
    evidence: dict[str, Any] = Field(default_factory=dict)
    device: str | None = None  # the end it was seen on (a cable has two)
    port: int | None = None

    @property
    def end(self) -> str | None:
        return f"{self.device}:{self.port}" if self.device is not None else None

    @classmethod
    def from_detection(cls, det: Detection) -> DetectionRef:
        return cls(id=det.id, ts=det.ts, detection=str(det.detection), severity=str(det.severity),
                   action=str(det.action), episode=det.episode, source=det.source,
                   evidence=dict(det.evidence), device=det.device, port=det.port)


class PriorRun(_Model):
    """A closed runbook of the same cable, carried into the next one (repeat offenders)."""

    run_id: str = ""
    closed_ts: int  # workflow time of its outcome, epoch ms
    outcome: str
    fixed_by: str | None = None
    episodes: list[str] = Field(default_factory=list)


class ActivityTimeouts(_Model):
    """Start-to-close and heartbeat timeouts per activity family, in seconds.

    Carried in the input (not constants in the workflow) so an operator with a slow UFM or a
    long NCCL run lengthens them in policy, and tests shorten them to see a dead worker fast.
    """

    record: float = 30.0  # one ledger batch insert
    controller: float = 120.0  # UFM applies an isolation within seconds; 2 min covers a busy UFM
    # Heartbeats: the activity beats every third of it while it runs (``heartbeating``), so a
    # worker killed mid-activity is noticed after this, not after the start-to-close
    # timeout, and the activity is retried on another worker within ~10 s
    # (benchmarks/activity_recovery.py). None: no heartbeat (runbooks started before).
    controller_heartbeat: float | None = 5.0
    evidence: float = 600.0  # ibdiagnet cable info on a big fabric takes minutes
    evidence_heartbeat: float = 5.0
    ticket: float = 60.0
    check: float = 1800.0  # an NCCL all-reduce sweep on a rail takes minutes
    check_heartbeat: float = 5.0
    budget: float = 60.0
    controller_attempts: int = 20  # then the step goes to a human (needs_human)


class ProbationConfig(_Model):
    """Return to service under traffic (policy ``probation``), resolved at the start."""

    slo_fraction: float = 0.9
    probe_interval_s: float = 3600.0
    waived: dict[str, str] = Field(default_factory=dict)  # check -> who waived it (why)
    normal: dict[str, float] = Field(default_factory=dict)  # hysteresis thresholds


class RunbookConfig(_Model):
    """The policy as this runbook sees it, resolved when it starts (workflows read no files)."""

    ladder: list[str]
    checks: list[str]
    clean_counters_wait_s: float = 86400.0
    step_reminder_s: float = 4 * 3600.0
    step_escalation_s: float = 24 * 3600.0
    approval_timeout_s: float = 7 * 86400.0
    shadow: bool = False
    su_limit: int = 1
    fabric_limit: int = 10
    # when the two limits were resolved (ms; 0 before this existed): the budget keeps the most
    # recently resolved limit, so a runbook started under an older policy cannot restore it
    limits_ts: int = 0
    timeouts: ActivityTimeouts = ActivityTimeouts()
    repeat_window_s: float = 30 * 86400.0
    repeat_next_rung_after: int = 2
    repeat_human_after: int = 3
    # None: a runbook started before probation existed (its checks run with the port isolated)
    probation: ProbationConfig | None = None
    # The task queue of the evidence activity (settings.temporal.evidence_task_queue: the
    # fabric agent's, which has the tools and the umad device); None: the runbook's own.
    evidence_task_queue: str | None = None

    @classmethod
    def from_policy(cls, policy: Policy, *, fabric: str, detection: str, su_ports: int,
                    fabric_ports: int, timeouts: ActivityTimeouts | None = None,
                    now_ms: int | None = None) -> RunbookConfig:
        from workflows.budget.models import fabric_limit, su_limit

        fh = policy.fabric_health
        return cls(
            ladder=list(fh.repair_ladder),
            checks=list(fh.return_to_service),
            clean_counters_wait_s=fh.runbook.clean_counters_wait,
            step_reminder_s=fh.runbook.step_reminder,
            step_escalation_s=fh.runbook.step_escalation,
            approval_timeout_s=fh.runbook.approval_timeout,
            shadow=fh.shadow.applies(fabric, detection),
            su_limit=su_limit(fh.breaker.max_isolated_ports_per_su, su_ports),
            fabric_limit=fabric_limit(fh.breaker.fabric_fraction, fh.breaker.fabric_min_ports,
                                      fabric_ports),
            limits_ts=time.time_ns() // 1_000_000 if now_ms is None else now_ms,
            timeouts=timeouts or ActivityTimeouts(),
            repeat_window_s=fh.runbook.repeat_window,
            repeat_next_rung_after=fh.runbook.repeat_next_rung_after,
            repeat_human_after=fh.runbook.repeat_human_after,
            probation=ProbationConfig(
                slo_fraction=fh.probation.slo_fraction,
                probe_interval_s=fh.probation.probe_interval,
                waived=fh.probation.waived(),
                normal=fh.probation.normal.model_dump()),
        )


class RemediationInput(_Model):
    """``port`` is the end the runbook isolates; ``peer`` the cable's other end (None: the
    peer is unknown, the runbook is the port's alone)."""

    port: PortRef
    detection: DetectionRef
    config: RunbookConfig
    peer: PortRef | None = None
    prior: list[PriorRun] = Field(default_factory=list)  # this cable's earlier runbooks


# --- signals and updates -------------------------------------------------------------------

class StepDone(_Model):
    """A technician says a ladder rung (or an escalation) is done."""

    step: str
    actor: str
    note: str | None = None
    new_port: int | None = None  # swap-switch-port: the switch port the cable moved to
    new_serials: dict[str, str] = Field(default_factory=dict)  # swap rungs: end -> new serial


class StepAck(_Model):
    step: str
    accepted: bool = True


class Approval(_Model):
    """A human lets the runbook go on (past the breaker, or after an escalation)."""

    actor: str
    note: str | None = None


class AbortRequest(_Model):
    """A human stops the runbook; isolation is rolled back."""

    actor: str
    reason: str | None = None


class Explained(_Model):
    """A detection of the runbook turned out to be an incident's: the correlator published
    it again under the incident (``<id>/explained``) once its downs were found to be that
    incident's (a flap that counted a reboot's down, read before the reboot's other reports)."""

    detection: str  # the id of the runbook's detection it explains
    incident: str
    episode: str


# --- queries and result --------------------------------------------------------------------

class HistoryEntry(_Model):
    ts: int  # workflow time, epoch ms
    step: str
    outcome: str
    actor: str = "fabricwatch"
    note: str | None = None


class EvidenceItem(_Model):
    tool: str
    end: str | None = None  # device:port the tool read (None: the isolated end)
    exit_code: int | None = None
    bytes: int = 0
    excerpt: str = ""  # the first lines, for the ticket and the query; the full text is in the ledger

    @property
    def captured(self) -> bool:
        """The tool ran and its output is evidence (a non-zero exit is still what it said);
        no exit code means it never ran: not installed on the host, or timed out."""
        return self.exit_code is not None


def evidence_outcome(items: list[EvidenceItem]) -> tuple[Literal["done", "failed"], str]:
    """The evidence step's outcome and note: ``done`` only when every tool ran, else
    ``failed``, naming what was not captured and why (never "done" for a missing tool)."""
    ran = [i for i in items if i.captured]
    missed = [i for i in items if not i.captured]
    parts = []
    if ran:
        parts.append("captured " + ", ".join(f"{i.tool}={i.exit_code}" for i in ran))
    if missed:
        why = "; ".join(f"{i.tool}"
                        + (f" on {i.end}" if i.end else "")
                        + f" ({(i.excerpt.splitlines() or ['no output'])[0][:120]})"
                        for i in missed)
        parts.append(f"not captured: {why}")
    if not items:
        return "failed", "not captured: no evidence tool is configured"
    return ("failed" if missed else "done"), "; ".join(parts)


State = Literal["running", "awaiting_technician", "awaiting_approval", "waiting_clean_counters",
                "probation", "probation_soak",
                "escalated", "needs_human", "awaiting_handover", "returned_to_service",
                "aborted", "expired", "shadow_done", "handed_to_human", "ignored"]


class RemediationStatus(_Model):
    workflow_id: str
    port: PortRef
    step: str
    state: str
    waiting_for: str | None = None
    rung: str | None = None
    shadow: bool = False
    isolated: bool = False
    fenced: bool = False
    ticket: str | None = None
    budget_held: bool = False
    detections: list[DetectionRef] = Field(default_factory=list)
    history: list[HistoryEntry] = Field(default_factory=list)
    evidence: list[EvidenceItem] = Field(default_factory=list)
    peer: PortRef | None = None
    cable: list[str] = Field(default_factory=list)  # the cable's ends, device:port
    isolated_end: str | None = None  # the end this runbook isolates (or found isolated)
    owned: bool = False  # fabricwatch changed the port (False: found isolated, or not yet)
    found_isolated: str | None = None  # who/what had it isolated, as far as the controller says
    needs_human: str | None = None  # why a human must act now
    port_state: dict[str, Any] | None = None  # the port's state as last read back
    waived: dict[str, str] = Field(default_factory=dict)  # checks not run, and who waived them
    measurements: list[dict[str, Any]] = Field(default_factory=list)  # probation's probes
    incident: str | None = None  # the breaker incident it joined (its approve reaches here)


class RemediationResult(_Model):
    outcome: str  # returned_to_service | aborted | expired | shadow_done | handed_to_human
    fixed_by: str | None = None  # the ladder rung after which the checks passed
    history: list[HistoryEntry] = Field(default_factory=list)
    episodes: list[str] = Field(default_factory=list)  # every episode this runbook took in
    cable: list[str] = Field(default_factory=list)
    isolated_end: str | None = None
    closed_ts: int | None = None  # workflow time of the outcome, epoch ms
    still_isolated: bool = False  # left isolated at the end (a human holds it)
    prior: list[PriorRun] = Field(default_factory=list)  # the earlier runs it carried


# --- activity inputs and outputs -----------------------------------------------------------

class RecordInput(_Model):
    """One ActionRecord to write; ``record_id`` is deterministic so a retry deduplicates."""

    record_id: str
    workflow_id: str
    port: PortRef
    ts: int
    step: str
    outcome: Literal["done", "refused", "failed", "skipped", "dry_run"]
    actor: str = "fabricwatch"
    note: str | None = None
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None
    dry_run: bool = False


class RecordResult(_Model):
    written: int


class EvidenceInput(_Model):
    workflow_id: str
    port: PortRef
    ts: int
    peer: PortRef | None = None  # the cable's other end: its evidence too


class EvidenceResult(_Model):
    items: list[EvidenceItem] = Field(default_factory=list)


class ControlInput(_Model):
    """Isolate / un-isolate / fence / unfence / reset counters: the change is idempotent."""

    workflow_id: str
    port: PortRef
    dry_run: bool = False


class PortState(_Model):
    """A port's state read back from the controller (for a human taking over)."""

    isolated: bool | None  # None: the controller could not be read
    controller: str = ""
    by: str | None = None  # who/what isolated it, where the controller says
    detail: str = ""


class RailInput(_Model):
    """A hold on a node's rail: unfenced only when no open runbook holds it."""

    fabric: str
    node: str
    rail: int | None
    holder: str


class RailResult(_Model):
    held_by_others: int = 0


class ControlResult(_Model):
    changed: bool  # False: it was already in the wanted state (a retry, or someone else did it)
    skipped: bool = False  # nothing to do here (no node behind the port, no fencing configured)
    detail: str = ""
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None


class RepairInput(_Model):
    workflow_id: str
    port: PortRef
    rung: str
    rung_index: int


class RepairResult(_Model):
    fixed: bool | None  # None: a physical repair the controller cannot judge


class CheckInput(_Model):
    workflow_id: str
    port: PortRef
    check: str
    since_ms: int  # the clean-counter check looks at counters since this time
    dry_run: bool = False
    # probation: judge the probes against the pinned baseline at this fraction of it, and
    # the soak's counters against the normal (hysteresis) thresholds
    slo_fraction: float | None = None
    cable: list[str] = Field(default_factory=list)  # the ends under repair (device:port)
    normal: dict[str, float] = Field(default_factory=dict)
    until_ms: int | None = None  # the soak's end (workflow time)


class CheckResult(_Model):
    check: str
    passed: bool
    detail: str = ""
    measured: dict[str, Any] = Field(default_factory=dict)
    unconfigured: bool = False  # could not be judged: a human must configure or waive it


class TicketInput(_Model):
    """A ticket operation; the ticket is keyed by the workflow id (one per runbook run)."""

    workflow_id: str
    port: PortRef
    op: Literal["open", "update", "close", "page", "resolve"]  # resolve: the page's alert
    summary: str
    details: dict[str, Any] = Field(default_factory=dict)
    dry_run: bool = False


class TicketResult(_Model):
    ticket_id: str | None
    detail: str = ""


class BreakerInput(_Model):
    """The budget refused: publish a ``breaker_open`` detection (and page, unless ``page`` is
    False: since the ``incident-alerts`` patch the SU's breaker incident pages)."""

    workflow_id: str
    port: PortRef
    detection: DetectionRef
    reason: str
    ts: int
    dry_run: bool = False
    page: bool = True  # False: the SU's breaker incident pages (INCIDENT_PATCH)


class BreakerResult(_Model):
    detection_id: str
    paged: bool
