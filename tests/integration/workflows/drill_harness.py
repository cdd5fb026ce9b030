"""The drill's runbook worker: the Temporal worker and the Kafka dispatcher in one process,
on the simulator's own controller.

Usage: drill_harness.py TARGET TASK_QUEUE STATE_DIR BOOTSTRAP TICKET_URL FABRIC NAME

When STATE_DIR/kill-at names a step, the process SIGKILLs itself right *after* that step's
side effect (the port isolated, the activity not yet completed): the hardest moment to die,
since the retry must see that it was done. The file is removed first, so the next worker
goes on. ``record:isolate`` dies right after the isolate step's record is written, before
the workflow task that wrote it completes.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from temporalio import activity  # noqa: E402
from temporalio.client import Client  # noqa: E402
from temporalio.contrib.pydantic import pydantic_data_converter  # noqa: E402
from wf_helpers import JsonlSink, SimBaselines  # noqa: E402

from schemas.policy import Policy  # noqa: E402
from sim.controller import SimController  # noqa: E402
from workflows.adapters.sim import SimChecker, SimControllerAdapter, SimEvidence  # noqa: E402
from workflows.adapters.ticket import WebhookTicketing  # noqa: E402
from workflows.budget.activities import BudgetActivities  # noqa: E402
from workflows.budget.models import AcquireInput, GrantResult  # noqa: E402
from workflows.dispatch import Dispatcher, run_dispatcher  # noqa: E402
from workflows.inventory import Inventory  # noqa: E402
from workflows.remediation.activities import FabricActivities  # noqa: E402
from workflows.remediation.models import ActivityTimeouts, PortRef  # noqa: E402
from workflows.worker import activity_functions, build_worker  # noqa: E402

KILL_AT: Path | None = None
TIMEOUTS = ActivityTimeouts(record=5, controller=4, evidence=6, evidence_heartbeat=4, ticket=4,
                            check=5, check_heartbeat=4, budget=5)
POLICY = "fabricHealth: {runbook: {cleanCountersWait: 1s}}"


def die_at(step: str) -> None:
    """Die here (kill -9) when the drill asks for this step."""
    if KILL_AT is None or not KILL_AT.exists():
        return
    if KILL_AT.read_text().strip() == step:
        KILL_AT.unlink()
        os.kill(os.getpid(), signal.SIGKILL)


class DyingSink(JsonlSink):
    """Dies right after the runbook's ``isolate`` record is written (``record:isolate``):
    the local activity ran, its workflow task did not complete, and the next worker runs
    it again with the same record id and a later ``workflow.now()``."""

    async def write(self, events: Any) -> int:
        written = await super().write(events)
        if any(getattr(e, "step", None) == "isolate" for e in events):
            die_at("record:isolate")
        return written


class SlowController(SimControllerAdapter):
    async def isolate(self, port: PortRef) -> bool:
        changed = await super().isolate(port)
        die_at("isolate")
        return changed

    async def unisolate(self, port: PortRef) -> bool:
        changed = await super().unisolate(port)
        die_at("unisolate")
        return changed

    async def reset_counters(self, port: PortRef) -> None:
        await super().reset_counters(port)
        die_at("reset_counters")

    async def repair_step(self, port: PortRef, rung: str) -> bool | None:
        fixed = await super().repair_step(port, rung)
        die_at("repair_step")
        return fixed


class SlowEvidence(SimEvidence):
    async def capture(self, port: PortRef) -> Any:
        out = await super().capture(port)
        die_at("evidence")
        return out


class SlowChecker(SimChecker):
    async def run(self, check: str, port: PortRef, since_ms: int) -> Any:
        out = await super().run(check, port, since_ms)
        die_at(f"check:{check}")
        return out

    async def run_soak(self, check: str, port: PortRef, since_ms: int, until_ms: int | None,
                       normal: dict[str, float]) -> Any:
        out = await super().run_soak(check, port, since_ms, until_ms, normal)
        die_at(f"check:{check}")
        return out


class FileFencer:
    """A node fence kept in a file (a stand-in for the Kubernetes label and taint)."""

    enabled = True

    def __init__(self, path: Path) -> None:
        self.path = path

    def _read(self) -> set[str]:
        return set(self.path.read_text().split()) if self.path.exists() else set()

    async def fence(self, node: str, rail: int | None, reason: str) -> bool:
        held = self._read()
        key = f"{node}/{rail}"
        changed = key not in held
        self.path.write_text("\n".join(sorted(held | {key})))
        die_at("fence")
        return changed

    async def unfence(self, node: str, rail: int | None) -> bool:
        held = self._read()
        key = f"{node}/{rail}"
        self.path.write_text("\n".join(sorted(held - {key})))
        die_at("unfence")
        return key in held


class SlowTicketing(WebhookTicketing):
    async def open(self, key: str, summary: str, details: dict[str, Any]) -> str:
        ticket = await super().open(key, summary, details)
        die_at("ticket")
        return ticket


class SlowBudget(BudgetActivities):
    @activity.defn(name="budget_acquire")
    async def acquire(self, inp: AcquireInput) -> GrantResult:
        granted = await super().acquire(inp)
        die_at("budget")
        return granted


async def main(target: str, queue: str, state_dir: str, bootstrap: str, ticket_url: str,
               fabric: str, name: str) -> None:
    global KILL_AT
    state = Path(state_dir)
    KILL_AT = state / "kill-at"
    client = await Client.connect(target, data_converter=pydantic_data_converter)
    sim = SimController(state / "sim", fix_chance={"clean-and-reseat": 1.0})
    adapter = SlowController(sim, state / "sim")
    acts = FabricActivities(records=DyingSink(state / "records.jsonl"), controller=adapter,
                            evidence=SlowEvidence(adapter), checker=SlowChecker(adapter),
                            fencer=FileFencer(state / "fences.txt"),
                            ticketing=SlowTicketing(ticket_url), baselines=SimBaselines())
    budget = SlowBudget(client, queue)
    funcs = activity_functions(acts, budget)
    worker = build_worker(client, queue, funcs)
    dispatcher = Dispatcher(client, Policy.from_yaml(POLICY), Inventory(), task_queue=queue,
                            timeouts=TIMEOUTS, fabric=fabric)
    stop = asyncio.Event()
    async with worker:
        disp = asyncio.create_task(run_dispatcher(dispatcher, bootstrap, group_id=f"drill-{queue}",
                                                  stop=stop, topology_wait_s=20))
        (state / f"worker-{name}.ready").write_text("")
        await disp


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:8]))
