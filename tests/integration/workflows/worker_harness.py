"""A runbook worker in its own process, so a test can kill it mid-activity (SIGKILL).

Usage: worker_harness.py TARGET TASK_QUEUE STATE_DIR TICKET_URL
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from temporalio.client import Client  # noqa: E402
from temporalio.contrib.pydantic import pydantic_data_converter  # noqa: E402
from wf_helpers import FileFabric, JsonlSink, fabric_activities  # noqa: E402

from workflows.budget.activities import BudgetActivities  # noqa: E402
from workflows.worker import activity_functions, build_worker  # noqa: E402


async def main(target: str, queue: str, state_dir: str, ticket_url: str) -> None:
    client = await Client.connect(target, data_converter=pydantic_data_converter)
    fabric = FileFabric(Path(state_dir))
    acts, _ = fabric_activities(fabric, ticket_url, JsonlSink(Path(state_dir) / "records.jsonl"))
    worker = build_worker(client, queue, activity_functions(acts, BudgetActivities(client, queue)))
    (Path(state_dir) / f"worker-{sys.argv[5] if len(sys.argv) > 5 else 'x'}.ready").write_text("")
    await worker.run()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
