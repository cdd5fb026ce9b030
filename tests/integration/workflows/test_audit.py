"""The daily topology audit as a Temporal schedule: the schedule exists with a one-day
interval, and a run diffs the discovered fabric against the plan and records detections."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.client import ScheduleIntervalSpec
from temporalio.testing import WorkflowEnvironment

from schemas.events import Detection
from sim.topology import generate
from workflows.adapters.records import MemorySink
from workflows.audit import (
    AuditActivities,
    AuditInput,
    TopologyAudit,
    audit_schedule_id,
    ensure_audit_schedule,
)
from workflows.worker import build_worker

pytestmark = pytest.mark.integration


async def test_daily_audit_schedule_finds_a_swapped_pair(wf_env: WorkflowEnvironment,
                                                         tmp_path: Path, task_queue: str) -> None:
    client = wf_env.client
    fab = generate("lab")
    lines = fab.to_plan_csv().splitlines()
    # the plan says node0001/mlx5_0 and node0002/mlx5_0 go to leaf-su01-r0 ports 1 and 2;
    # write the plan with those two swapped: the discovered fabric is then "miswired"
    header, rows = lines[0], lines[1:]
    a = next(i for i, r in enumerate(rows) if r.startswith("node0001/mlx5_0,"))
    b = next(i for i, r in enumerate(rows) if r.startswith("node0002/mlx5_0,"))
    ra, rb = rows[a].split(","), rows[b].split(",")
    ra[3], rb[3] = rb[3], ra[3]
    rows[a], rows[b] = ",".join(ra), ",".join(rb)
    plan = tmp_path / "plan.csv"
    plan.write_text("\n".join([header, *rows]) + "\n")
    discovered = tmp_path / "ibnetdiscover.txt"
    discovered.write_text(fab.to_ibnetdiscover())
    fabric = f"audit{uuid.uuid4().hex[:6]}"
    sink = MemorySink()
    inp = AuditInput(fabric=fabric, plan_path=str(plan), discovered_path=str(discovered))
    worker = build_worker(client, task_queue, [AuditActivities(sink).audit_topology])
    async with worker:
        sid = await ensure_audit_schedule(client, inp, task_queue=task_queue)
        assert sid == audit_schedule_id(fabric)
        await ensure_audit_schedule(client, inp, task_queue=task_queue)  # idempotent
        handle = client.get_schedule_handle(sid)
        desc = await handle.describe()
        assert desc.schedule.spec.intervals == [ScheduleIntervalSpec(every=timedelta(days=1))]
        await handle.trigger()
        for _ in range(100):
            if sink.records:
                break
            await asyncio.sleep(0.1)
        direct = await client.execute_workflow(TopologyAudit.run, inp, id=f"a-{fabric}",
                                               task_queue=task_queue)
        await handle.delete()
    assert not direct.ok and direct.by_kind.get("miswire", 0) >= 2
    dets = [r for r in sink.records.values() if isinstance(r, Detection)]
    assert {d.detection for d in dets} == {"miswire"}
    assert {d.device for d in dets} >= {"node0001/mlx5_0", "node0002/mlx5_0"}
    assert all(d.episode.startswith(f"audit/{fabric}/") for d in dets)
