"""Durability on the real dev server: a worker killed mid-activity and restarted, the server
restarted on its SQLite file, and the CLI acting on a running runbook."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TEMPORAL_BIN
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from test_remediation import make_input, running_worker, start, until, wid
from wf_helpers import FileFabric, JsonlSink, TicketServer

from workflows.remediation.models import ActivityTimeouts, StepDone
from workflows.remediation.workflows import PortRemediation

pytestmark = pytest.mark.integration

HARNESS = str(Path(__file__).with_name("worker_harness.py"))
REPO = Path(__file__).resolve().parents[3]


def target_of(client: Client) -> str:
    return client.service_client.config.target_host


def spawn_worker(target: str, queue: str, state: Path, url: str, name: str
                 ) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, HARNESS, target, queue, str(state), url, name],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def wait_file(path: Path, within: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while not await asyncio.to_thread(path.exists):
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{path} never appeared")
        await asyncio.sleep(0.05)


async def test_worker_killed_mid_activity_completes_once(
        wf_env: WorkflowEnvironment, tmp_path: Path, ticket_server: TicketServer,
        task_queue: str) -> None:
    client = wf_env.client
    fabric = FileFabric(tmp_path)
    fabric.script({"*": "clean-and-reseat"})
    (tmp_path / "hang-after-isolate").write_text("1")
    inp = make_input(wait_s=0.5)
    # a short start-to-close so the dead worker's activity is retried within seconds
    inp = inp.model_copy(update={"config": inp.config.model_copy(update={
        "timeouts": ActivityTimeouts(record=5, controller=4, evidence=5, evidence_heartbeat=3,
                                     ticket=5, check=5, check_heartbeat=3, budget=5)})})
    target = target_of(client)
    first = spawn_worker(target, task_queue, tmp_path, ticket_server.url, "a")
    second = None
    try:
        handle = await start(client, inp, task_queue)
        await wait_file(tmp_path / "hanging")  # isolate done, the activity not yet completed
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        assert fabric.is_isolated("leaf-su01-r1", 7)
        second = spawn_worker(target, task_queue, tmp_path, ticket_server.url, "b")
        await until(handle, lambda s: s.waiting_for == "clean-and-reseat", within=60)
        await handle.execute_update(PortRemediation.complete_step,
                                    StepDone(step="clean-and-reseat", actor="tech"))
        result = await asyncio.wait_for(handle.result(), 60)
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(20)
    assert result.outcome == "returned_to_service"
    # the retried isolate found the port isolated and did nothing: one isolate in all
    assert len(fabric.calls("isolate")) == 1
    assert len(fabric.calls("unisolate")) == 1
    assert len(ticket_server.ops(wid(inp), "open")) == 1
    rows = JsonlSink(tmp_path / "records.jsonl").rows()
    isolate_records = {r["id"] for r in rows if r.get("step") == "isolate"}
    assert len(isolate_records) == 1
    isolate = next(r for r in rows if r.get("step") == "isolate")
    assert isolate["note"] == "was already isolated"  # what the retry saw, recorded honestly


async def test_server_restart_keeps_workflows_and_timers(tmp_path: Path,
                                                         ticket_server: TicketServer) -> None:
    db = tmp_path / "temporal.sqlite"
    fabric = FileFabric(tmp_path / "fabric")
    fabric.script({"*": "clean-and-reseat"})
    queue = "restart-q"
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=TEMPORAL_BIN, dev_server_database_filename=str(db),
        data_converter=pydantic_data_converter, ip="127.0.0.1")
    inp = make_input(wait_s=6.0)
    try:
        async with running_worker(env.client, queue, fabric, ticket_server):
            handle = await start(env.client, inp, queue)
            await until(handle, lambda s: s.waiting_for == "clean-and-reseat")
            await handle.execute_update(PortRemediation.complete_step,
                                        StepDone(step="clean-and-reseat", actor="tech"))
            await until(handle, lambda s: s.state in ("waiting_clean_counters", "probation_soak"))
    finally:
        await env.shutdown()  # the server goes away in the middle of the durable wait
    assert db.stat().st_size > 0
    env2 = await WorkflowEnvironment.start_local(
        dev_server_existing_path=TEMPORAL_BIN, dev_server_database_filename=str(db),
        data_converter=pydantic_data_converter, ip="127.0.0.1")
    try:
        async with running_worker(env2.client, queue, fabric, ticket_server) as sink:
            handle2 = env2.client.get_workflow_handle_for(PortRemediation.run, wid(inp))
            result = await asyncio.wait_for(handle2.result(), 90)
    finally:
        await env2.shutdown()
    assert result.outcome == "returned_to_service"
    names = [h.step for h in result.history]
    assert "check:counters-clean-24h" in names and names[-1] == "outcome"
    assert len(fabric.calls("isolate")) == 1 and len(fabric.calls("unisolate")) == 1
    assert any(a.step == "return" for a in sink.actions())


def cli(target: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "FABRICWATCH_TEMPORAL__ADDRESS": target}
    return subprocess.run([sys.executable, "-c", "from fabricwatch.cli import main; main()",
                           *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=60, check=False)


async def test_cli_drives_a_runbook_and_records_who(wf_env: WorkflowEnvironment, tmp_path: Path,
                                                    ticket_server: TicketServer,
                                                    task_queue: str) -> None:
    client = wf_env.client
    fabric = FileFabric(tmp_path)
    fabric.script({"*": "swap-optic"})
    inp = make_input(wait_s=0.3)
    target = target_of(client)
    async with running_worker(client, task_queue, fabric, ticket_server) as sink:
        handle = await start(client, inp, task_queue)
        await until(handle, lambda s: s.waiting_for == "clean-and-reseat")
        run = lambda *a: asyncio.to_thread(cli, target, *a)  # noqa: E731
        listed = await run("runbook", "list")
        assert wid(inp) in listed.stdout and "waiting for clean-and-reseat" in listed.stdout
        shown = await run("runbook", "show", wid(inp))
        assert shown.returncode == 0 and "sim_port_state" in shown.stdout
        wrong = await run("runbook", "step-done", wid(inp), "swap-cable")
        assert wrong.returncode == 2 and "awaited step is 'clean-and-reseat'" in wrong.stderr
        bad = await run("runbook", "show", "not-an-id")
        assert bad.returncode == 2
        not_waiting = await run("runbook", "approve", wid(inp))
        assert not_waiting.returncode == 2 and "not waiting for an approval" in not_waiting.stderr
        ok = await run("runbook", "step-done", wid(inp), "clean-and-reseat", "--note",
                       "reseated", "--actor", "tech-fay")
        assert ok.returncode == 0, ok.stderr
        await until(handle, lambda s: s.waiting_for == "swap-optic")
        ok = await run("runbook", "step-done", wid(inp), "swap-optic", "--actor", "tech-gus")
        assert ok.returncode == 0, ok.stderr
        result = await asyncio.wait_for(handle.result(), 60)
        # a finished runbook: a clear error and exit 2, not a traceback
        for args in (("step-done", wid(inp), "swap-cable"), ("abort", wid(inp))):
            late = await run("runbook", *args)
            assert late.returncode == 2 and "Traceback" not in late.stderr, late.stderr
            assert "completed" in late.stderr, late.stderr
    assert result.outcome == "returned_to_service" and result.fixed_by == "swap-optic"
    ladder = {a.step: a.actor for a in sink.actions() if a.step.startswith("ladder:")}
    assert ladder == {"ladder:clean-and-reseat": "tech-fay", "ladder:swap-optic": "tech-gus"}
