"""``fabricwatch runbook-worker`` as operators run it: a process with the worker and the
dispatcher, on the real broker and Temporal, the simulator controller and the chdb ledger;
a detection published to fabric.detections becomes a runbook a technician completes with
``fabricwatch runbook step-done``; SIGTERM stops the process cleanly."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import WorkflowEnvironment

from collectors.publish import Publisher
from ledger.embedded import EmbeddedLedger
from schemas.events import Action, Detection, DetectionKind, Severity, Topology, TopologyLink
from sim.controller import SimController

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[3]


def start_process(argv: list[str], env: dict[str, str], log: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen(argv, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)


async def test_runbook_worker_process_end_to_end(wf_env: WorkflowEnvironment,
                                                 kafka_bootstrap: str, tmp_path: Path) -> None:
    target = wf_env.client.service_client.config.target_host
    fabric = f"cli{uuid.uuid4().hex[:6]}"
    policy = tmp_path / "policy.yaml"
    policy.write_text("fabricHealth:\n  runbook: {cleanCountersWait: 1s}\n")
    env = {**os.environ, "FABRICWATCH_STATE_DIR": str(tmp_path / "state"),
           "FABRICWATCH_FABRIC": fabric, "FABRICWATCH_TEMPORAL__ADDRESS": target,
           "FABRICWATCH_TEMPORAL__TASK_QUEUE": f"q-{fabric}",
           "FABRICWATCH_KAFKA__BOOTSTRAP": kafka_bootstrap}
    cli = [sys.executable, "-c", "from fabricwatch.cli import main; main()"]
    # probation judges against pinned baselines: the operator pins the rail's first (before
    # the worker opens the embedded ledger, which has one process)
    for probe, size, scale, gbps in (("ib_write_bw", 8 << 20, 2, 392), (
            "nccl_allreduce", 1 << 30, 16, 368.0)):
        pinned = await asyncio.to_thread(
            subprocess.run, [*cli, "baseline", "pin", "--rail", "2", "--probe", probe,
                             "--size", str(size), "--scale", str(scale), "--gbps", str(gbps),
                             "--actor", "ops-ana"],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)
        assert pinned.returncode == 0, pinned.stderr
    # the fabric's topology first: the dispatcher acts only on ports it has cabled
    async with Publisher(kafka_bootstrap) as pub:
        await pub.send(Topology(id=f"topo-{fabric}", ts=int(time.time() * 1000), fabric=fabric,
                                source="ibnetdiscover", links=[TopologyLink(
                                    a_device="leaf-su01-r2", a_port=4,
                                    b_device="node0004/mlx5_2", b_port=1)]))
    log = (tmp_path / "worker.log").open("wb")
    worker = start_process([*cli, "runbook-worker", "--policy", str(policy)], env, log)
    wf_id = f"remediate/{fabric}/leaf-su01-r2:4~node0004/mlx5_2:1"

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*cli, *args], cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=60, check=False)

    async def wait_for(pred_args: tuple[str, ...], text: str, within: float = 60) -> str:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            out = await asyncio.to_thread(run, *pred_args)
            if text in out.stdout:
                return out.stdout
            await asyncio.sleep(0.5)
        raise AssertionError(f"{text!r} never appeared; worker log:\n"
                             f"{(tmp_path / 'worker.log').read_text()[-3000:]}")

    try:
        async with Publisher(kafka_bootstrap) as pub:
            await pub.send(Detection(
                id=f"{fabric}-1", ts=int(time.time() * 1000), fabric=fabric, source="streams",
                device="leaf-su01-r2", port=4, detection=DetectionKind.FLAP,
                severity=Severity.CRITICAL, action=Action.ISOLATE_PORT, episode="ep"))
        await wait_for(("runbook", "list"), f"{wf_id}  RUNNING  awaiting_technician")
        sim = SimController(tmp_path / "state" / "sim")
        assert sim.is_isolated("leaf-su01-r2", 4)
        for rung in ("clean-and-reseat", "swap-optic", "swap-cable", "swap-switch-port"):
            shown = await asyncio.to_thread(run, "runbook", "show", wf_id)
            if "returned_to_service" in shown.stdout:
                break
            if f"waiting for: {rung}" not in shown.stdout:
                await wait_for(("runbook", "show", wf_id), f"waiting for: {rung}")
            done = await asyncio.to_thread(run, "runbook", "step-done", wf_id, rung,
                                           "--actor", "tech-ivy")
            assert done.returncode == 0, done.stderr
            await asyncio.sleep(3)  # the checks and the 1 s clean-counter wait
        await wait_for(("runbook", "list", "--all"), f"{wf_id}  COMPLETED")
        assert not sim.is_isolated("leaf-su01-r2", 4)
    finally:
        worker.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(worker.wait, 60)
        log.close()
    assert code == 0, (tmp_path / "worker.log").read_text()[-3000:]
    ledger = EmbeddedLedger(tmp_path / "state" / "ledger")
    try:
        rows = ledger.query("SELECT step, actor FROM actions FINAL WHERE workflow_id = "
                            "{w:String} ORDER BY ts, id", {"w": wf_id})
    finally:
        ledger.close()
    steps = [r["step"] for r in rows]
    assert steps[0] == "detection" and steps[-1] == "outcome" and "unisolate" in steps
    assert {r["actor"] for r in rows if r["step"].startswith("ladder:")} == {"tech-ivy"}
