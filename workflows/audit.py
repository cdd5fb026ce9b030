"""The daily topology audit as a Temporal schedule: discovered fabric against the cable plan.

``TopologyAudit`` runs one activity that reads the cable plan and the discovered topology
(an ``ibnetdiscover`` output file, or ``ibnetdiscover`` run by argument list), diffs them with
``streams.topology.logic.diff`` and records each finding as a detection (``miswire``,
``missing_link``, ``unexpected_link``, ``degraded_link``) with a stable episode, so the same
unfixed miswire is one episode day after day. ``ensure_audit_schedule`` creates (or updates)
the schedule ``topology-audit/{fabric}``; overlapping runs are skipped.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field
from temporalio import activity, workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from workflows.adapters.base import RecordSink


class AuditInput(BaseModel):
    model_config = ConfigDict(frozen=True)

    fabric: str
    plan_path: str
    discovered_path: str | None = None  # None: run ibnetdiscover on this host
    policy_yaml: str | None = None  # the policy text; None: defaults


class AuditResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    ok: bool
    findings: int
    by_kind: dict[str, int] = Field(default_factory=dict)
    detail: str = ""


class AuditActivities:
    def __init__(self, records: RecordSink, *, ibnetdiscover: str = "ibnetdiscover") -> None:
        self._records = records
        self._ibnetdiscover = ibnetdiscover

    async def _discovered_text(self, inp: AuditInput) -> str:
        if inp.discovered_path is not None:
            return await asyncio.to_thread(Path(inp.discovered_path).read_text, "utf-8")
        from workflows.adapters.tools import run_tool

        out = await run_tool("ibnetdiscover", [self._ibnetdiscover], 600.0)
        if out.exit_code != 0:
            raise RuntimeError(f"ibnetdiscover failed: {out.output[-500:]}")
        return out.output

    @activity.defn(name="audit_topology")
    async def audit_topology(self, inp: AuditInput) -> AuditResult:
        from collectors.ibnetdiscover import parse_ibnetdiscover
        from schemas.events import Action, Detection, DetectionKind, Severity
        from schemas.policy import Policy
        from streams.topology.logic import diff
        from streams.topology.plan import load_plan

        now = int(time.time() * 1000)
        plan = load_plan(await asyncio.to_thread(Path(inp.plan_path).read_text, "utf-8"))
        topo = parse_ibnetdiscover(await self._discovered_text(inp), fabric=inp.fabric, ts=now)
        policy = Policy.from_yaml(inp.policy_yaml) if inp.policy_yaml else Policy()
        report = diff(plan, topo, policy)
        day = time.strftime("%Y-%m-%d", time.gmtime(now / 1000))
        detections = []
        by_kind: dict[str, int] = {}
        for f in report.findings:
            by_kind[f.kind] = by_kind.get(f.kind, 0) + 1
            detections.append(Detection(
                id=f"audit/{inp.fabric}/{day}/{f.key}", ts=now, fabric=inp.fabric,
                source="topology-audit", device=f.a_device, port=f.a_port,
                detection=DetectionKind(f.kind), severity=Severity.WARNING, action=Action.TICKET,
                evidence=f.to_dict(), episode=f"audit/{inp.fabric}/{f.key}"))
        if detections:
            await self._records.write(detections)
        return AuditResult(ok=report.ok, findings=len(detections), by_kind=by_kind,
                           detail=str(report.summary)[:1000])


@workflow.defn(name="TopologyAudit")
class TopologyAudit:
    @workflow.run
    async def run(self, inp: AuditInput) -> AuditResult:
        result: AuditResult = await workflow.execute_activity_method(
            AuditActivities.audit_topology, inp,
            # ibnetdiscover of a 100k-port fabric takes minutes; the diff itself is < 1 s
            start_to_close_timeout=timedelta(minutes=20),
            retry_policy=RetryPolicy(maximum_attempts=3, initial_interval=timedelta(minutes=1)))
        return result


def audit_schedule_id(fabric: str) -> str:
    return f"topology-audit/{fabric}"


async def ensure_audit_schedule(client: object, inp: AuditInput, *, task_queue: str,
                                every: timedelta = timedelta(days=1)) -> str:
    """Create the daily schedule, or update it to ``inp`` if it exists. Returns its id."""
    from temporalio.client import (
        Client,
        Schedule,
        ScheduleActionStartWorkflow,
        ScheduleAlreadyRunningError,
        ScheduleIntervalSpec,
        SchedulePolicy,
        ScheduleSpec,
        ScheduleUpdate,
        ScheduleUpdateInput,
    )
    from temporalio.client import ScheduleOverlapPolicy as Overlap

    assert isinstance(client, Client)  # noqa: S101 - typed loosely to keep imports late
    sid = audit_schedule_id(inp.fabric)
    schedule = Schedule(
        action=ScheduleActionStartWorkflow(TopologyAudit.run, inp, id=f"audit/{inp.fabric}",
                                           task_queue=task_queue),
        spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=every)]),
        policy=SchedulePolicy(overlap=Overlap.SKIP))
    try:
        await client.create_schedule(sid, schedule)
    except ScheduleAlreadyRunningError:
        def update(_: ScheduleUpdateInput) -> ScheduleUpdate:
            return ScheduleUpdate(schedule=schedule)
        await client.get_schedule_handle(sid).update(update)
    return sid
