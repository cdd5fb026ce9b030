"""Record the history of the ``retry-grant-within-limit`` patch of ``PortRemediation`` that
tests/unit/workflows/test_replay.py replays: an isolate the controller refuses goes to a
human, the port's slot is released, other ports take the SU's slots, and the human's
approve retries the isolate within the limit: refused, the breaker's way, then aborted.
``record.py`` and ``record_incidents.py`` keep the earlier histories.

Run only after a deliberate, ``workflow.patched`` change:
``.venv/bin/python tests/histories/record_retry_grant.py``.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "integration" / "workflows"))
sys.path.insert(0, str(HERE))

from conftest import TEMPORAL_BIN, TS_FLAG  # noqa: E402
from record import cable_input, save, start  # noqa: E402
from temporalio.contrib.pydantic import pydantic_data_converter  # noqa: E402
from temporalio.testing import WorkflowEnvironment  # noqa: E402
from test_remediation import running_worker, until  # noqa: E402
from wf_helpers import FileFabric, TicketServer  # noqa: E402

from workflows.budget.models import GrantRequest, su_budget_id  # noqa: E402
from workflows.budget.workflows import IsolationBudget  # noqa: E402
from workflows.remediation.models import AbortRequest, Approval  # noqa: E402
from workflows.remediation.workflows import PortRemediation  # noqa: E402

QUEUE = "record-retry-grant"


async def main() -> None:
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=TEMPORAL_BIN, dev_server_extra_args=TS_FLAG,
        data_converter=pydantic_data_converter, ip="127.0.0.1")
    tickets = TicketServer()
    await tickets.start()
    client = env.client
    try:
        with tempfile.TemporaryDirectory() as tmp:
            fabric = FileFabric(Path(tmp))
            async with running_worker(client, QUEUE, fabric, tickets):
                fabric.fail(isolate="reject")
                inp = cable_input("leaf-su04-r1", 1, "node0301/mlx5_1", 1, su="su04")
                h = await start(client, inp, QUEUE)
                await until(h, lambda s: s.state == "needs_human")
                budget = client.get_workflow_handle(su_budget_id("hist", "su04"))
                for other in (2, 3):  # the SU's two slots (make_input's su_limit)
                    await budget.execute_update(IsolationBudget.grant, GrantRequest(
                        holder=f"another-runbook-{other}", port_key=f"leaf-su04-r1:{other}",
                        limit=-1))
                fabric.fail()
                await h.signal(PortRemediation.approve, Approval(actor="lead"))
                await until(h, lambda s: s.state == "awaiting_approval")
                await h.signal(PortRemediation.abort, AbortRequest(actor="lead", reason="test"))
                await h.result()
                await save(h, "cable_retry_within_limit")
    finally:
        await tickets.stop()
        await env.shutdown()


if __name__ == "__main__":
    asyncio.run(main())
