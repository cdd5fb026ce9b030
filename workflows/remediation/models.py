"""Inputs and outputs of the remediation runbook: one model per workflow, activity, signal and update.

These models cross the Temporal boundary through ``pydantic_data_converter``. They are plain
data: no clock, no I/O, no validators that read the time (the workflow sandbox forbids it), so
they deserialize the same way on replay years later. Fields are only ever added, with defaults.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from schemas.events import Detection
from schemas.policy import Policy


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


def remediation_workflow_id(fabric: str, device: str, port: int) -> str:
    """The one id of a port's runbook: a second detection joins the running one."""
    return f"remediate/{fabric}/{device}:{port}"


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

    @classmethod
    def from_detection(cls, det: Detection) -> DetectionRef:
        return cls(id=det.id, ts=det.ts, detection=str(det.detection), severity=str(det.severity),
                   action=str(det.action), episode=det.episode, source=det.source,
                   evidence=dict(det.evidence))


class ActivityTimeouts(_Model):
    """Start-to-close and heartbeat timeouts per activity family, in seconds.

    Carried in the input (not constants in the workflow) so an operator with a slow UFM or a
    long NCCL run lengthens them in policy, and tests shorten them to see a dead worker fast.
    """

    record: float = 30.0  # one ledger batch insert
    controller: float = 120.0  # UFM applies an isolation within seconds; 2 min covers a busy UFM
    controller_heartbeat: float | None = None
    evidence: float = 600.0  # ibdiagnet cable info on a big fabric takes minutes
    evidence_heartbeat: float = 60.0
    ticket: float = 60.0
    check: float = 1800.0  # an NCCL all-reduce sweep on a rail takes minutes
    check_heartbeat: float = 120.0
    budget: float = 60.0


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
    timeouts: ActivityTimeouts = ActivityTimeouts()

    @classmethod
    def from_policy(cls, policy: Policy, *, fabric: str, detection: str, su_ports: int,
                    fabric_ports: int, timeouts: ActivityTimeouts | None = None) -> RunbookConfig:
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
            timeouts=timeouts or ActivityTimeouts(),
        )


class RemediationInput(_Model):
    port: PortRef
    detection: DetectionRef
    config: RunbookConfig


# --- signals and updates -------------------------------------------------------------------

class StepDone(_Model):
    """A technician says a ladder rung (or an escalation) is done."""

    step: str
    actor: str
    note: str | None = None


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


# --- queries and result --------------------------------------------------------------------

class HistoryEntry(_Model):
    ts: int  # workflow time, epoch ms
    step: str
    outcome: str
    actor: str = "fabricwatch"
    note: str | None = None


class EvidenceItem(_Model):
    tool: str
    exit_code: int | None = None
    bytes: int = 0
    excerpt: str = ""  # the first lines, for the ticket and the query; the full text is in the ledger


State = Literal["running", "awaiting_technician", "awaiting_approval", "waiting_clean_counters",
                "escalated", "returned_to_service", "aborted", "expired", "shadow_done"]


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


class RemediationResult(_Model):
    outcome: str  # returned_to_service | aborted | expired | shadow_done
    fixed_by: str | None = None  # the ladder rung after which the checks passed
    history: list[HistoryEntry] = Field(default_factory=list)


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


class EvidenceResult(_Model):
    items: list[EvidenceItem] = Field(default_factory=list)


class ControlInput(_Model):
    """Isolate / un-isolate / fence / unfence / reset counters: the change is idempotent."""

    workflow_id: str
    port: PortRef
    dry_run: bool = False


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


class CheckResult(_Model):
    check: str
    passed: bool
    detail: str = ""
    measured: dict[str, Any] = Field(default_factory=dict)


class TicketInput(_Model):
    """A ticket operation; the ticket is keyed by the workflow id (one per runbook run)."""

    workflow_id: str
    port: PortRef
    op: Literal["open", "update", "close", "page"]
    summary: str
    details: dict[str, Any] = Field(default_factory=dict)
    dry_run: bool = False


class TicketResult(_Model):
    ticket_id: str | None
    detail: str = ""


class BreakerInput(_Model):
    """The budget refused: publish a ``breaker_open`` detection and page a human."""

    workflow_id: str
    port: PortRef
    detection: DetectionRef
    reason: str
    ts: int
    dry_run: bool = False


class BreakerResult(_Model):
    detection_id: str
    paged: bool
