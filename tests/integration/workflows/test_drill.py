"""The drill on the real stack: the real Kafka broker, the Temporal dev server and the
simulator's own controller. The runbook worker (with its dispatcher) is killed with SIGKILL
inside each step of a cable's runbook in turn and started again; the simulated controller's
command log shows exactly one isolate and one un-isolate for the cable, and a detection
replayed after the close starts nothing."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment
from test_durability import REPO, target_of, wait_file
from test_remediation import until
from wf_helpers import TicketServer

from collectors.publish import Publisher
from ledger.embedded import EmbeddedLedger
from schemas.events import (
    Action,
    ActionRecord,
    Detection,
    DetectionKind,
    Severity,
    Topology,
    TopologyLink,
)
from sim.controller import SimController
from workflows.remediation.models import StepDone
from workflows.remediation.workflows import PortRemediation

pytestmark = pytest.mark.integration

HARNESS = str(Path(__file__).with_name("drill_harness.py"))
# Where the worker dies, in the runbook's order: right after each side effect (the harness
# kills itself there), and once while the runbook waits for the technician.
# Probation re-enables the link before the checks run on it.
STEPS = ["evidence", "budget", "isolate", "record:isolate", "fence", "ticket",
         "wait:clean-and-reseat", "repair_step", "unisolate", "check:ib_write_bw-per-rail",
         "check:nccl-allreduce-baseline", "reset_counters", "check:counters-clean-24h",
         "unfence"]


def detection(fabric: str, device: str, port: int, det_id: str) -> Detection:
    return Detection(id=det_id, ts=int(time.time() * 1000), fabric=fabric, source="streams",
                     device=device, port=port, detection=DetectionKind.FLAP,
                     severity=Severity.CRITICAL, action=Action.ISOLATE_PORT, episode="ep-drill",
                     evidence={"downs": 4})


class Workers:
    def __init__(self, client: Client, queue: str, state: Path, bootstrap: str,
                 url: str, fabric: str) -> None:
        self.args = [target_of(client), queue, str(state), bootstrap, url, fabric]
        self.state = state
        self.proc: subprocess.Popen[bytes] | None = None
        self.started = 0

    def spawn(self) -> Path:
        self.started += 1
        name = str(self.started)
        self.proc = subprocess.Popen([sys.executable, HARNESS, *self.args, name], cwd=REPO,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return self.state / f"worker-{name}.ready"

    async def start(self) -> None:
        await wait_file(self.spawn(), within=60)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.send_signal(signal.SIGKILL)
                self.proc.wait(10)


def _td(seconds: float) -> Any:
    from datetime import timedelta

    return timedelta(seconds=seconds)


async def test_kill_the_worker_in_every_step(wf_env: WorkflowEnvironment, kafka_bootstrap: str,
                                             tmp_path: Path, ticket_server: TicketServer,
                                             task_queue: str) -> None:
    client = wf_env.client
    fabric = f"drill{int(time.time() * 1000) % 10**8}"
    wf_id = f"remediate/{fabric}/leaf-su01-r1:3~node0002/mlx5_1:1"
    topo = Topology(id=f"topo-{fabric}", ts=int(time.time() * 1000), fabric=fabric,
                    source="ibnetdiscover", links=[
                        TopologyLink(a_device="leaf-su01-r1", a_port=n + 1,
                                     b_device=f"node{n:04d}/mlx5_1", b_port=1) for n in range(8)])
    async with Publisher(kafka_bootstrap) as pub:
        await pub.send(topo)
        # the flap seen from both ends, one of them twice
        await pub.send(detection(fabric, "node0002/mlx5_1", 1, f"{fabric}-host"))
        await pub.send(detection(fabric, "leaf-su01-r1", 3, f"{fabric}-leaf"))
        await pub.send(detection(fabric, "leaf-su01-r1", 3, f"{fabric}-leaf"))
    workers = Workers(client, task_queue, tmp_path, kafka_bootstrap, ticket_server.url, fabric)
    handle = client.get_workflow_handle_for(PortRemediation.run, wf_id)
    kill_at = tmp_path / "kill-at"
    killed: list[str] = []
    started = time.monotonic()
    try:
        kill_at.write_text(STEPS[0])
        await workers.start()
        for i, step in enumerate(STEPS):
            after = STEPS[i + 1] if i + 1 < len(STEPS) else None
            proc = workers.proc
            assert proc is not None
            if step.startswith("wait:"):
                await until(handle, lambda s: s.waiting_for == "clean-and-reseat", within=120)
                kill_at.write_text(after or "")
                workers.kill()
            else:
                # the harness kills itself (SIGKILL) right after the step's side effect
                code = await asyncio.wait_for(asyncio.to_thread(proc.wait), 120)
                assert code == -signal.SIGKILL, (step, code)
                if after is not None:
                    kill_at.write_text(after)
            killed.append(step)
            await workers.start()
            if step.startswith("wait:"):
                await _step_done(handle)
        result = await asyncio.wait_for(handle.result(), 120)
        # a replay of the episode's detection after the close: nothing starts
        async with Publisher(kafka_bootstrap) as pub:
            await pub.send(detection(fabric, "leaf-su01-r1", 3, f"{fabric}-late"))
        await asyncio.sleep(8)
        runs = [wf async for wf in client.list_workflows(f"WorkflowId = '{wf_id}'")]
    finally:
        workers.stop()
    elapsed = time.monotonic() - started
    assert result.outcome == "returned_to_service", result
    assert killed == STEPS
    sim = SimController(tmp_path / "sim")
    isolates = sim.commands("isolate")
    unisolates = sim.commands("unisolate")
    assert [(c["key"], c["changed"]) for c in isolates] == [("leaf-su01-r1:3", True)]
    assert [(c["key"], c["changed"]) for c in unisolates] == [("leaf-su01-r1:3", True)]
    assert not sim.is_isolated("leaf-su01-r1", 3)
    assert len(runs) == 1 and runs[0].status == WorkflowExecutionStatus.COMPLETED
    assert len(ticket_server.ops(wf_id, "open")) == 1
    # The isolate record was written twice (the worker died before the workflow task that
    # wrote it completed): same id, a later ts. In the real ledger it is one row.
    records = [ActionRecord.model_validate_json(line) for line in
               (tmp_path / "records.jsonl").read_text().splitlines() if '"step":"isolate"' in line]
    assert len({r.id for r in records}) == 1 and len({r.ts for r in records}) >= 2, records
    ledger = EmbeddedLedger(tmp_path / "ledger")
    try:
        ledger.migrate()
        ledger.write(records)
        rows = ledger.query("SELECT id FROM actions FINAL WHERE workflow_id = {w:String} "
                            "AND step = 'isolate'", {"w": wf_id})
    finally:
        ledger.close()
    assert [r["id"] for r in rows] == [records[0].id]
    print(f"drill: killed in {killed} ({workers.started} worker starts) in {elapsed:.0f} s")


async def _step_done(handle: Any) -> None:
    last: Exception | None = None
    for _ in range(100):
        try:
            await handle.execute_update(PortRemediation.complete_step,
                                        StepDone(step="clean-and-reseat", actor="tech-drill"),
                                        rpc_timeout=_td(10))
            return
        except Exception as exc:  # noqa: BLE001 - no worker yet, or the step is not awaited yet
            last = exc
            if "already completed" in str(exc):
                return  # the result says why
            await asyncio.sleep(0.2)
    raise AssertionError(f"the technician's step was never accepted: {last!r} "
                         f"{getattr(last, 'cause', None)!r}")
