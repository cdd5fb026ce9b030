"""The evidence activity on its own task queue (the fabric agent's evidence worker), on the
real Temporal dev server: the runbook workers run everything else; the tools run where the
evidence worker is, and one that cannot run there is recorded as not captured, with why."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment
from test_remediation import make_input, running_worker, start, until, wid
from wf_helpers import FileFabric, TicketServer

from workflows.adapters.records import MemorySink
from workflows.adapters.tools import FabricToolsEvidence
from workflows.remediation.activities import EvidenceActivities
from workflows.worker import run_evidence_worker

pytestmark = pytest.mark.integration


async def test_evidence_runs_on_the_evidence_queue_and_says_what_was_not_captured(
        wf_env: WorkflowEnvironment, tmp_path: Path, ticket_server: TicketServer,
        task_queue: str) -> None:
    client = wf_env.client
    fabric = FileFabric(tmp_path)
    fabric.script({"*": "clean-and-reseat"})
    evidence_queue = f"{task_queue}-evidence"
    # the fabric agent's host: perfquery is there (a real executable), mlxlink is not
    perfquery = tmp_path / "perfquery"
    perfquery.write_text("#!/bin/sh\necho \"perfquery $*: PortXmitData 42 on the agent\"\n")
    perfquery.chmod(0o755)
    agent_records = MemorySink()
    tools = FabricToolsEvidence(perfquery=str(perfquery),
                                mlxlink=f"fabricwatch-no-mlxlink-{uuid.uuid4().hex[:6]}")
    inp = make_input()
    inp = inp.model_copy(update={
        "port": inp.port.model_copy(update={"lid": 17}),
        "config": inp.config.model_copy(update={"evidence_task_queue": evidence_queue})})
    stop = asyncio.Event()
    agent = asyncio.create_task(run_evidence_worker(
        client, evidence_queue, EvidenceActivities(records=agent_records, evidence=tools),
        stop=stop))
    try:
        async with running_worker(client, task_queue, fabric, ticket_server) as sink:
            handle = await start(client, inp, task_queue)
            st = await until(handle, lambda s: bool(s.evidence), within=60)
            evidence_step = [a for a in sink.actions()
                             if a.workflow_id == wid(inp) and a.step == "evidence"]
            await handle.terminate("test done")
    finally:
        stop.set()
        await asyncio.wait_for(agent, 30)
    items = {i.tool: i for i in st.evidence}
    assert set(items) == {"perfquery", "mlxlink", "cable_info"}
    assert items["perfquery"].exit_code == 0
    assert "-x 17 7: PortXmitData 42 on the agent" in items["perfquery"].excerpt
    assert items["mlxlink"].exit_code is None and not items["mlxlink"].captured
    assert "not installed on this host" in items["mlxlink"].excerpt
    # the records are the evidence worker's (in the deployment: its fabric.actions)
    stored = {r.tool: r for r in agent_records.records.values()}
    assert set(stored) == {"perfquery", "mlxlink", "cable_info"}
    assert stored["cable_info"].exit_code is None
    assert "not installed on this host" in stored["cable_info"].output
    # the runbook's step says it plainly: not done, and what was not captured and why
    [step] = evidence_step
    assert step.outcome == "failed"
    assert step.note is not None and step.note.startswith("captured perfquery=0; not captured:")
    assert "mlxlink on leaf-su01-r1:7 (fabricwatch-no-mlxlink-" in step.note
    assert "not installed on this host)" in step.note
