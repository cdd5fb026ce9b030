"""Record the incident histories that tests/unit/workflows/test_replay.py replays: the
``incident-alerts`` patch of ``PortRemediation`` (a budget refusal joins the SU's breaker
incident) and ``IncidentRunbook`` (a stream incident opened, updated, acknowledged and
closed; a breaker incident approved). ``record.py`` keeps the earlier ``cable_*`` ones.

Run only after a deliberate, ``workflow.patched`` change:
``.venv/bin/python tests/histories/record_incidents.py``.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "integration" / "workflows"))
sys.path.insert(0, str(HERE))

from conftest import TEMPORAL_BIN, TS_FLAG  # noqa: E402
from record import save  # noqa: E402
from temporalio.contrib.pydantic import pydantic_data_converter  # noqa: E402
from temporalio.testing import WorkflowEnvironment  # noqa: E402
from test_remediation import make_input, until  # noqa: E402
from wf_helpers import FileFabric, TicketServer, fabric_activities  # noqa: E402

from schemas.events import Incident, IncidentCause  # noqa: E402
from workflows.adapters.notify import FileNotifier  # noqa: E402
from workflows.budget.activities import BudgetActivities  # noqa: E402
from workflows.incident.activities import IncidentActivities  # noqa: E402
from workflows.incident.dispatch import IncidentDispatcher  # noqa: E402
from workflows.incident.models import (  # noqa: E402
    Decision,
    IncidentConfig,
    breaker_incident,
    incident_workflow_id,
)
from workflows.incident.workflows import IncidentRunbook  # noqa: E402
from workflows.remediation.models import AbortRequest  # noqa: E402
from workflows.remediation.workflows import PortRemediation  # noqa: E402
from workflows.worker import activity_functions, build_worker  # noqa: E402

QUEUE = "record-incidents"
CFG = IncidentConfig(debounce_s=0.5)


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
            acts, sink = fabric_activities(fabric, tickets.url)
            incident = IncidentActivities(client, FileNotifier(Path(tmp) / "alerts.jsonl"),
                                          QUEUE, config=CFG, records=sink)
            worker = build_worker(client, QUEUE, activity_functions(
                acts, BudgetActivities(client, QUEUE), incident=incident))
            async with worker:
                # 1. a stream incident: open (50 ports), update, ack, closed
                now = int(time.time() * 1000)
                members = [f"spine-01:{i}" for i in range(1, 51)]

                def ev(state: str, ts: int, m: list[str]) -> Incident:
                    return Incident(id=f"hist-{state}-{ts}", ts=ts, fabric="hist",
                                    source="correlator", incident="reboot-1",
                                    cause=IncidentCause.SWITCH_REBOOT, root="spine-01",
                                    state=state, started=now - 2000,  # type: ignore[arg-type]
                                    ended=ts if state == "closed" else None, members=m)

                disp = IncidentDispatcher(client, task_queue=QUEUE, config=CFG)
                await disp.handle(ev("open", now, members))
                h = client.get_workflow_handle_for(IncidentRunbook.run,
                                                   incident_workflow_id("hist", "reboot-1"))
                await asyncio.sleep(1)
                await disp.handle(ev("update", now + 1, [*members, "spine-01:51"]))
                await asyncio.sleep(1.5)
                await h.signal(IncidentRunbook.ack, Decision(actor="oncall"))
                await asyncio.sleep(0.5)
                await disp.handle(ev("closed", now + 2, [*members, "spine-01:51"]))
                await h.result()
                await save(h, "incident_stream")

                # 2. two refusals join the SU's breaker incident; its approve reaches both
                holder = make_input("leaf-su01-r1", 1, su="su01", su_limit=1, fabric="hist")
                refused = [make_input(f"leaf-su01-r{i}", i, su="su01", su_limit=1,
                                      fabric="hist") for i in (2, 3)]
                hh = await client.start_workflow(
                    PortRemediation.run, holder, task_queue=QUEUE,
                    id=f"remediate/hist/{holder.port.key}")
                await until(hh, lambda s: s.waiting_for == "clean-and-reseat")
                handles = []
                for inp in refused:
                    handles.append(await client.start_workflow(
                        PortRemediation.run, inp, task_queue=QUEUE,
                        id=f"remediate/hist/{inp.port.key}"))
                for rh in handles:
                    await until(rh, lambda s: s.state == "awaiting_approval")
                inc = client.get_workflow_handle_for(
                    IncidentRunbook.run, incident_workflow_id("hist", breaker_incident("su01")))
                await asyncio.sleep(1.5)
                await inc.signal(IncidentRunbook.approve, Decision(actor="lead"))
                await inc.result()
                await save(inc, "incident_breaker")
                for rh in handles:
                    await until(rh, lambda s: s.waiting_for == "clean-and-reseat")
                for rh in (hh, *handles):
                    await rh.signal(PortRemediation.abort, AbortRequest(actor="t"))
                    await rh.result()
                await save(handles[0], "cable_breaker_joins_incident")
            await acts.aclose()
    finally:
        await tickets.stop()
        await env.shutdown()


if __name__ == "__main__":
    asyncio.run(main())
