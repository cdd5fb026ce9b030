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
from test_remediation import make_input, running_worker, start, until  # noqa: E402
from wf_helpers import FileFabric, TicketServer  # noqa: E402

from schemas.policy import Policy  # noqa: E402
from workflows.budget.models import su_budget_id  # noqa: E402
from workflows.remediation.models import AbortRequest, Approval, StepDone  # noqa: E402
from workflows.remediation.workflows import PortRemediation  # noqa: E402


async def save(handle: WorkflowHandle, name: str) -> None:  # type: ignore[type-arg]
    history = await handle.fetch_history()
    (HERE / f"{name}.json").write_text(json.dumps(json.loads(history.to_json()), indent=1)
                                       + "\n")
    print(f"wrote {name}.json ({len(history.events)} events)")


async def scenarios(client: Client, tmp: Path, tickets: TicketServer) -> None:
    queue = "record"
    fabric = FileFabric(tmp)
    async with running_worker(client, queue, fabric, tickets):
        # 1. happy path, then a fix on the second rung after a failed check
        fabric.script({"*": "swap-optic"})
        inp = make_input("leaf-su01-r1", 1, wait_s=1.0, fabric="hist")
        h = await start(client, inp, queue)
        for rung in ("clean-and-reseat", "swap-optic"):
            await until(h, lambda s, r=rung: s.waiting_for == r)
            await h.execute_update(PortRemediation.complete_step,
                                   StepDone(step=rung, actor="tech", note="done"))
        await h.result()
        await save(h, "remediation_ladder")

        # 2. breaker: limit 1 held by a second runbook, approve, then abort both
        a = make_input("leaf-su02-r1", 1, su="su02", su_limit=1, fabric="hist")
        b = make_input("leaf-su02-r2", 2, su="su02", su_limit=1, fabric="hist")
        ha = await start(client, a, queue)
        await until(ha, lambda s: s.waiting_for == "clean-and-reseat")
        hb = await start(client, b, queue)
        await until(hb, lambda s: s.state == "awaiting_approval")
        await hb.signal(PortRemediation.detection,
                        b.detection.model_copy(update={"id": "second"}))
        await hb.signal(PortRemediation.approve, Approval(actor="lead", note="ok"))
        await until(hb, lambda s: s.waiting_for == "clean-and-reseat")
        await hb.signal(PortRemediation.abort, AbortRequest(actor="lead", reason="test"))
        await hb.result()
        await save(hb, "remediation_breaker_approve_abort")
        await ha.signal(PortRemediation.abort, AbortRequest(actor="lead"))
        await ha.result()
        await save(client.get_workflow_handle(su_budget_id("hist", "su02")), "budget_su")

        # 3. shadow mode
        s = make_input("leaf-su03-r1", 1, su="su03",
                       policy=Policy.from_yaml("fabricHealth: {shadow: {all: true}}"),
                       fabric="hist")
        hs = await start(client, s, queue)
        await hs.result()
        await save(hs, "remediation_shadow")


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
