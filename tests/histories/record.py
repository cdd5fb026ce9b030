"""Record the workflow histories that tests/unit/workflows/test_replay.py replays.

Run after a deliberate, versioned change to a workflow (``workflow.patched``), never to make
a failing replay pass: ``.venv/bin/python tests/histories/record.py``. It starts the real
dev server, runs each scenario to completion and writes ``<scenario>.json`` here.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "integration" / "workflows"))

from conftest import TEMPORAL_BIN, TS_FLAG  # noqa: E402
from temporalio.client import Client, WorkflowHandle  # noqa: E402
from temporalio.contrib.pydantic import pydantic_data_converter  # noqa: E402
from temporalio.testing import WorkflowEnvironment  # noqa: E402
from test_remediation import make_input, running_worker, until  # noqa: E402
from wf_helpers import FileFabric, TicketServer  # noqa: E402

from workflows.dispatch import runbook_id  # noqa: E402
from workflows.remediation.models import (  # noqa: E402
    AbortRequest,
    Approval,
    PortRef,
    RemediationInput,
    StepDone,
)
from workflows.remediation.workflows import PortRemediation  # noqa: E402


async def save(handle: WorkflowHandle, name: str) -> None:  # type: ignore[type-arg]
    history = await handle.fetch_history()
    (HERE / f"{name}.json").write_text(json.dumps(json.loads(history.to_json()), indent=1)
                                       + "\n")
    print(f"wrote {name}.json ({len(history.events)} events)")


async def scenarios(client: Client, tmp: Path, tickets: TicketServer) -> None:
    """Probation (the ``probation`` patch, on top of ``cable-runbook``). The ``remediation_*``
    and ``budget_su`` histories predate the cable patch, the ``cable_*`` ones the probation
    patch; both are kept as they are: they prove that runbooks started before each still
    replay (``cable_scenarios`` below recorded the latter and is kept for reference)."""
    queue = "record-probation"
    fabric = FileFabric(tmp / "probation")
    async with running_worker(client, queue, fabric, tickets):
        # 1. the reseat leaves the link slow: ib_write_bw fails in probation, the link is
        #    isolated again; the new optic passes (a waived NCCL check recorded as waived)
        fabric.script({"*": "clean-and-reseat"})
        fabric.slow("leaf-su04-r1:1", 0.6)
        inp = cable_input("leaf-su04-r1", 1, "node0301/mlx5_1", 1, su="su04")
        waived = inp.config.probation.model_copy(update={  # type: ignore[union-attr]
            "waived": {"nccl-allreduce-baseline": "ops-lead (no GPUs yet)"}})
        inp = inp.model_copy(update={"config": inp.config.model_copy(update={
            "probation": waived})})
        h = await start(client, inp, queue)
        await until(h, lambda s: s.waiting_for == "clean-and-reseat")
        await h.execute_update(PortRemediation.complete_step,
                               StepDone(step="clean-and-reseat", actor="tech"))
        await until(h, lambda s: s.waiting_for == "swap-optic")
        fabric.slow("leaf-su04-r1:1", 1.0)
        await h.execute_update(PortRemediation.complete_step,
                               StepDone(step="swap-optic", actor="tech"))
        await h.result()
        await save(h, "probation_slow_then_pass")

        # 2. a re-flap during the soak fails the rung; abort while the next rung waits
        inp = cable_input("leaf-su05-r1", 1, "node0401/mlx5_1", 1, su="su05")
        inp = inp.model_copy(update={"config": inp.config.model_copy(update={
            "clean_counters_wait_s": 3600.0})})
        h = await start(client, inp, queue)
        await until(h, lambda s: s.waiting_for == "clean-and-reseat")
        await h.execute_update(PortRemediation.complete_step,
                               StepDone(step="clean-and-reseat", actor="tech"))
        await until(h, lambda s: s.state == "probation_soak")
        await h.signal(PortRemediation.detection, inp.detection.model_copy(update={
            "id": "soak-reflap", "episode": "ep-2"}))
        await until(h, lambda s: s.waiting_for == "swap-optic")
        await h.signal(PortRemediation.abort, AbortRequest(actor="lead", reason="test"))
        await h.result()
        await save(h, "probation_soak_reflap_abort")


async def cable_scenarios(client: Client, tmp: Path, tickets: TicketServer) -> None:
    """The cable runbook (the ``cable-runbook`` patch), as recorded before probation: running
    it today would take the probation patch too, so its histories are no longer re-recorded."""
    queue = "record"
    fabric = FileFabric(tmp)
    async with running_worker(client, queue, fabric, tickets):
        # 1. both ends, a re-flap during the checks fails the first rung, the second fixes it
        fabric.script({"leaf-su01-r1:1": "clean-and-reseat"})  # the checks pass, then it flaps
        inp = cable_input("leaf-su01-r1", 1, "node0001/mlx5_1", 1)
        inp = inp.model_copy(update={"config": inp.config.model_copy(update={
            "clean_counters_wait_s": 5.0})})
        h = await start(client, inp, queue)
        await until(h, lambda s: s.waiting_for == "clean-and-reseat")
        await h.signal(PortRemediation.detection, inp.detection.model_copy(update={
            "id": "peer-end", "device": "node0001/mlx5_1", "port": 1}))
        await h.execute_update(PortRemediation.complete_step,
                               StepDone(step="clean-and-reseat", actor="tech"))
        await until(h, lambda s: s.state in ("waiting_clean_counters", "probation_soak"))
        await h.signal(PortRemediation.detection, inp.detection.model_copy(update={
            "id": "reflap", "episode": "ep-2"}))
        await until(h, lambda s: s.waiting_for == "swap-optic")
        await h.execute_update(PortRemediation.complete_step, StepDone(
            step="swap-optic", actor="tech", new_serials={"leaf-su01-r1:1": "MT0001"}))
        await h.result()
        await save(h, "cable_ladder_reflap")

        # 2. a refused isolate: needs_human, approve retries it, then abort
        fabric.fail(isolate="reject")
        inp = cable_input("leaf-su02-r1", 1, "node0101/mlx5_1", 1, su="su02")
        h = await start(client, inp, queue)
        await until(h, lambda s: s.state == "needs_human")
        fabric.fail()
        await h.signal(PortRemediation.approve, Approval(actor="lead", note="fixed"))
        await until(h, lambda s: s.waiting_for == "clean-and-reseat")
        await h.signal(PortRemediation.abort, AbortRequest(actor="lead", reason="test"))
        await h.result()
        await save(h, "cable_needs_human")

        # 3. found isolated by someone else: handed over by a human's approve
        fabric.script({"*": "clean-and-reseat"})
        fabric.isolate_by_other("leaf-su03-r1", 1, by="ufm")
        inp = cable_input("leaf-su03-r1", 1, "node0201/mlx5_1", 1, su="su03")
        h = await start(client, inp, queue)
        await until(h, lambda s: s.waiting_for == "clean-and-reseat")
        await h.execute_update(PortRemediation.complete_step,
                               StepDone(step="clean-and-reseat", actor="tech"))
        await until(h, lambda s: s.state == "awaiting_handover")
        await h.signal(PortRemediation.approve, Approval(actor="lead"))
        await h.result()
        await save(h, "cable_found_isolated")


def cable_input(device: str, port: int, peer: str, peer_port: int, su: str = "su01"
                ) -> RemediationInput:
    inp = make_input(device, port, su=su, wait_s=1.0, fabric="hist")
    peer_ref = PortRef(fabric="hist", device=peer, port=peer_port, su=su, rail=1)
    return inp.model_copy(update={
        "peer": peer_ref,
        "port": inp.port.model_copy(update={"peer_device": peer, "peer_port": peer_port}),
        "detection": inp.detection.model_copy(update={"device": device, "port": port})})


async def start(client: Client, inp: RemediationInput, queue: str) -> WorkflowHandle:  # type: ignore[type-arg]
    return await client.start_workflow(PortRemediation.run, inp, id=runbook_id(inp),
                                       task_queue=queue)


async def main() -> None:
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=TEMPORAL_BIN, dev_server_extra_args=TS_FLAG,
        data_converter=pydantic_data_converter, ip="127.0.0.1")
    tickets = TicketServer()
    await tickets.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            await scenarios(env.client, Path(tmp), tickets)
    finally:
        await tickets.stop()
        await env.shutdown()


if __name__ == "__main__":
    asyncio.run(main())
