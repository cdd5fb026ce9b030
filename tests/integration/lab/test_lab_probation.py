"""Probation on the real InfiniBand management stack: ibsim, the real opensm, infiniband-diags.

The runbook disables the port with ``ibportstate`` (iblinkinfo: ``Disabled``); after the
technician's step, probation re-enables it with ``ibportstate enable`` while the runbook
still holds it, and the real diagnostics show the port back: ``LinkUp`` once the cable is
reseated (ibsim does not retrain by itself) and ``Active`` once opensm has swept it. The
soak's counters are read with perfquery on the live port. ibsim has no HCA that runs
perftest or NCCL, so the lab's policy waives those two checks, and the waiver is recorded.
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from pathlib import Path

import pytest
from lab_helpers import LAB_POLICY
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from collectors.ibdiags import parse_iblinkinfo
from collectors.ibnetdiscover import parse_ibnetdiscover
from collectors.live.tools import ToolRunner
from fabricwatch.lab import LabStack
from schemas import Detection
from schemas.policy import Policy
from workflows.adapters.k8s import NoFencer
from workflows.adapters.opensm import OpensmChecker, OpensmController, OpensmEvidence
from workflows.adapters.records import MemorySink
from workflows.adapters.tools import CommandChecker
from workflows.budget.activities import BudgetActivities
from workflows.dispatch import Dispatcher, runbook_id
from workflows.inventory import Inventory
from workflows.remediation.activities import FabricActivities
from workflows.remediation.models import ActivityTimeouts, StepDone
from workflows.remediation.workflows import PortRemediation
from workflows.worker import activity_functions, build_worker

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/: the fakes package
from fakes.ticketing import RecordingTicketing  # noqa: E402

pytestmark = [pytest.mark.lab, pytest.mark.integration]

FAST = ActivityTimeouts(record=10, controller=20, evidence=20, evidence_heartbeat=10, ticket=10,
                        check=20, check_heartbeat=10, budget=10)
POLICY = LAB_POLICY.replace("runbook: {cleanCountersWait: 1s}",
                            "runbook: {cleanCountersWait: 20s}")


async def link_state(runner: ToolRunner, device: str, port: int) -> tuple[str, str]:
    """(logical state, physical state) of a switch port, as iblinkinfo says."""
    text = await runner.check(["iblinkinfo", "--switches-only", "-l"], 30)
    for ev in parse_iblinkinfo(text, fabric="lab", ts=0):
        if ev.device == device:
            for sample in ev.ports:
                if sample.port == port:
                    extra = sample.model_extra or {}
                    return str(extra.get("state")), str(extra.get("phys_state"))
    raise AssertionError(f"{device}:{port} not in iblinkinfo")


async def eventually(runner: ToolRunner, device: str, port: int, want: tuple[str, str],
                     within: float = 60.0) -> tuple[str, str]:
    deadline = time.monotonic() + within
    while True:
        got = await link_state(runner, device, port)
        if got == want or time.monotonic() > deadline:
            return got
        await asyncio.sleep(0.5)


async def test_probation_reenables_the_port_and_the_lab_shows_it_active(
        lab: LabStack, temporal_target: str, tmp_path: Path) -> None:
    assert "cleanCountersWait: 20s" in POLICY
    policy = Policy.from_yaml(POLICY)
    fabric = f"lab{uuid.uuid4().hex[:8]}"
    device, port = "leaf-su01-r1", 3  # cabled to node0003/mlx5_1
    runner = lab.tool_runner()
    topo = parse_ibnetdiscover(await runner.check(["ibnetdiscover"], 30), fabric=fabric,
                               ts=int(time.time() * 1000))
    inventory = Inventory()
    inventory.load(topo)
    client = await Client.connect(temporal_target, data_converter=pydantic_data_converter)
    task_queue = f"lab-{uuid.uuid4().hex[:8]}"
    records = MemorySink()
    controller = OpensmController(runner, records=records)
    acts = FabricActivities(records=records, controller=controller,
                            evidence=OpensmEvidence(runner),
                            checker=OpensmChecker(controller, CommandChecker({})),
                            fencer=NoFencer(), ticketing=RecordingTicketing())
    det = Detection(id=f"{fabric}-flap", ts=int(time.time() * 1000), fabric=fabric,
                    source="streams", device=device, port=port, detection="flap",
                    severity="critical", action="isolate_port", episode=f"{fabric}-ep")
    inp = Dispatcher(client, policy, inventory, task_queue=task_queue,
                     timeouts=FAST).runbook_input(det)
    assert inp.port.key == f"{device}:{port}" and inp.port.lid is not None
    worker = build_worker(client, task_queue,
                          activity_functions(acts, BudgetActivities(client, task_queue)))
    async with worker:
        handle = await client.start_workflow(PortRemediation.run, inp, id=runbook_id(inp),
                                             task_queue=task_queue)
        deadline = time.monotonic() + 60
        while (st := await handle.query(PortRemediation.status)).waiting_for != \
                "clean-and-reseat":
            assert time.monotonic() < deadline, st
            await asyncio.sleep(0.2)
        assert (await link_state(runner, device, port))[1] == "Disabled"
        await handle.execute_update(PortRemediation.complete_step,
                                    StepDone(step="clean-and-reseat", actor="tech-lab"))
        deadline = time.monotonic() + 60
        while (st := await handle.query(PortRemediation.status)).state != "probation_soak":
            assert time.monotonic() < deadline, st
            await asyncio.sleep(0.2)
        # in probation: enabled by ibportstate, not yet returned (the runbook still holds it)
        assert not st.isolated and st.budget_held
        assert (await link_state(runner, device, port))[1] != "Disabled"
        await asyncio.to_thread(lab.reseat, device, port)  # ibsim retrains on a replug only
        assert await eventually(runner, device, port, ("Active", "LinkUp")) == (
            "Active", "LinkUp")
        result = await asyncio.wait_for(handle.result(), 90)
    assert result.outcome == "returned_to_service", result
    assert await link_state(runner, device, port) == ("Active", "LinkUp")
    steps = [(a.step, a.outcome) for a in records.actions()]
    names = [s for s, _ in steps]
    assert names.index("ladder:clean-and-reseat") < names.index("unisolate") \
        < names.index("probation") < names.index("check:counters-clean-24h")
    waived = [a for a in records.actions() if a.step == "check:ib_write_bw-per-rail"]
    assert [a.outcome for a in waived] == ["skipped"]
    assert "waived by lab (ibsim has no HCA" in (waived[0].note or "")
    soak = next(a for a in records.actions() if a.step == "check:counters-clean-24h")
    assert soak.outcome == "done", soak.note
    # the enable was read back from the port (ibportstate query) before probation went on
    enable = next(a for a in records.actions() if a.step == "unisolate")
    assert enable.before is not None and enable.after is not None
    assert enable.before["isolated"] is True and enable.after["isolated"] is False
